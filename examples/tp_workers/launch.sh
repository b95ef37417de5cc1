#!/usr/bin/env bash
# The whole tensor-parallel example in one command: a gateway (`distsample serve --rank-processes`,
# topology.logits_source = worker), TP Python model workers (torch_worker.py) whose ranks join it,
# and the speculative decoding scheduler (scheduler.py) that drives it. Everything listens on
# loopback only, and every process is stopped when the scheduler ends, on error or on Ctrl-C.
#
#   examples/tp_workers/launch.sh [--tp 4] [--mode sharded|swap|gathered] [--vocab 512]
#       [--backend cpu|cuda] [--framework auto|torch|numpy] [--device auto|cpu|cuda:N]
#       [--model-seed S] [--dim D] [--python PYTHON] [--logs DIR] [scheduler options...]
#
# Scheduler options: --steps N, --requests B, --drafts K, --temperature T, --top-p P, --seed S,
# --record FILE (scheduler.py --help). The build is $DISTSAMPLE_BUILD_DIR, else build/; the Python
# is $PYTHON, else python3 (it needs numpy and protobuf: Debian's /usr/bin/python3 has both).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${DISTSAMPLE_BUILD_DIR:-$root/build}
cli=${DISTSAMPLE_CLI:-$build/bin/distsample}
python=${PYTHON:-python3}
tp=4 mode=sharded vocab=512 backend=cpu logs=""
worker_args=() scheduler_args=()

usage() { sed -n '2,13s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

while (($#)); do
    case $1 in
        --tp) tp=$2; shift 2 ;;
        --mode) mode=$2; shift 2 ;;
        --vocab) vocab=$2; shift 2 ;;
        --backend) backend=$2; shift 2 ;;
        --python) python=$2; shift 2 ;;
        --logs) logs=$2; shift 2 ;;
        --framework | --device) worker_args+=("$1" "$2"); shift 2 ;;
        --model-seed | --dim) worker_args+=("$1" "$2"); scheduler_args+=("$1" "$2"); shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) scheduler_args+=("$1"); shift ;;
    esac
done

export DISTSAMPLE_LIBRARY=${DISTSAMPLE_LIBRARY:-$build/lib/libdistsample.so}
export DISTSAMPLE_RANK_LIBRARY=${DISTSAMPLE_RANK_LIBRARY:-$build/lib/libdistsample_rank.so}
export PYTHONPATH=$root/python:$root/clients/python:$build/python:$here${PYTHONPATH:+:$PYTHONPATH}
for needed in "$cli" "$DISTSAMPLE_RANK_LIBRARY" "$build/python/distsample_pb2.py"; do
    if [[ ! -f $needed ]]; then
        echo "launch.sh: $needed is missing: build first (tools/bootstrap.sh), or set DISTSAMPLE_BUILD_DIR" >&2
        exit 2
    fi
done

run_dir=$(mktemp -d "${TMPDIR:-/tmp}/tp_workers.XXXXXX")
gateway_pid="" scheduler_pid="" worker_pids=()

# Waits up to grace_s seconds for the children given to exit; then SIGTERM, and SIGKILL a second later.
reap() {
    local grace_s=$1 i pid alive signal
    shift
    for signal in TERM KILL; do
        for ((i = 0; i < grace_s * 20; i++)); do
            alive=0
            for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
            ((alive)) || break
            sleep 0.05
        done
        for pid in "$@"; do kill -"$signal" "$pid" 2>/dev/null; done
        grace_s=1
    done
    for pid in "$@"; do wait "$pid" 2>/dev/null; done
}

cleanup() {
    local rc=$?
    trap - EXIT HUP INT TERM
    set +e
    [[ -n $scheduler_pid ]] && kill -TERM "$scheduler_pid" 2>/dev/null && reap 2 "$scheduler_pid"
    # The gateway first: once it is gone the workers' ranks leave the group and the workers exit
    # by themselves, usually within a second. Either is killed when it takes more than a few.
    [[ -n $gateway_pid ]] && kill -TERM "$gateway_pid" 2>/dev/null && reap 3 "$gateway_pid"
    ((${#worker_pids[@]})) && reap 3 "${worker_pids[@]}"
    if ((rc != 0)); then
        for log in "$run_dir"/*.log; do [[ -s $log ]] && { echo "--- $log:"; tail -n 20 "$log"; }; done >&2
    fi
    [[ -n $logs ]] && mkdir -p "$logs" && cp "$run_dir"/*.log "$logs"/
    rm -rf "$run_dir"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# Waits (in this shell, so that Ctrl-C reaches the traps above at once) for the first line of the
# gateway's output that matches `pattern`, into $gateway_said; fails if the gateway or a worker exits first.
wait_for_gateway() {
    local pattern=$1 i pid
    for ((i = 0; i < 1200; i++)); do
        gateway_said=$(grep -m1 "$pattern" "$run_dir/gateway.log") && return 0
        for pid in "$gateway_pid" "${worker_pids[@]}"; do
            kill -0 "$pid" 2>/dev/null || { echo "launch.sh: a process exited during start-up" >&2; return 1; }
        done
        sleep 0.05
    done
    echo "launch.sh: no '$pattern' from the gateway within 60 s" >&2
    return 1
}

# One config file for the gateway and every worker: a rank refuses a group whose keys differ.
cat >"$run_dir/group.json" <<EOF
{"tp": $tp, "mode": "$mode", "vocab_size": $vocab, "transport": "ucx", "backend": "$backend",
 "threads_per_rank": 1, "topology": {"logits_source": "worker"}}
EOF

: >"$run_dir/gateway.log" # exists before the gateway writes to it: wait_for_gateway reads it at once
"$cli" serve --rank-processes --config "$run_dir/group.json" --ranks-listen 127.0.0.1:0 --wait-ranks-ms 60000 \
    --listen 127.0.0.1 --port 0 --metrics-port -1 --model none >"$run_dir/gateway.log" 2>&1 &
gateway_pid=$!
wait_for_gateway "rank processes join at "
ranks_at=${gateway_said##* }

for ((r = 0; r < tp; r++)); do
    "$python" "$here/torch_worker.py" --coordinator "$ranks_at" --rank "$r" --config "$run_dir/group.json" \
        "${worker_args[@]}" >"$run_dir/worker$r.log" 2>&1 &
    worker_pids+=($!)
done

# The gateway prints its scheduler port once every worker has joined and the group has formed.
wait_for_gateway "^distsample serve: tcp "
address=${gateway_said#distsample serve: tcp }
address=${address%% *}
echo "launch.sh: gateway at $address, $mode mode; the ranks of $tp workers joined at $ranks_at"

# In the background, so that a signal to this script is handled at once (wait returns for it).
"$python" "$here/scheduler.py" --address "$address" "${scheduler_args[@]}" &
scheduler_pid=$!
wait "$scheduler_pid"
