#!/usr/bin/env bash
# GPU runs (docs/deployment.md, Running on a GPU machine):
#   tools/gpu-run.sh bundle [TARGET...]
#                             here: build for sm_90 into build-gpu/ and bundle the binaries (the
#                             tests and what verify runs, or only the named targets) and the
#                             shared libraries they need into .gpu-bundle/ (git-ignored)
#   tools/gpu-run.sh bundle-ucx [WHEEL]
#                             here, after bundle: the CUDA-enabled UCX of the libucx-cu13 wheel (the
#                             newest in /tmp/wheels unless given; fetch it with `pip download --no-deps
#                             libucx-cu13 -d /tmp/wheels`) into .gpu-bundle/ucx-cu13: libucp, libucs,
#                             libuct, libucm and the ucx/ modules uct_cuda, ucm_cuda, uct_cma, stripped
#                             (about 2.5 MB; tcp, posix and sysv are built into libuct)
#   tools/gpu-run.sh run [--ucx-cu13] [COMMAND...]
#                             on the GPU machine (device tool, carry .gpu-bundle): run every test
#                             binary and, if given, a command; logs go to $OUT when it is set. With
#                             --ucx-cu13 the binaries load the wheel's UCX instead of Debian's
#                             (DS_EXPECT_UCX_DEVICE_PATH=direct makes test_ucx_device_memory
#                             insist on the direct path, where a GPUDirect transport exists)
#   tools/gpu-run.sh exec [--ucx-cu13] COMMAND...
#                             on the GPU machine: one command with the bundle's libraries (and NCCL)
#   tools/gpu-run.sh python   on the GPU machine (carry .gpu-bundle and .whl): install the distsample
#                             wheel and pytest from .whl (built here: see bench/RESULTS.md), run the
#                             Python tests on CUDA tensors and the Python benchmark
#   tools/gpu-run.sh bench    on the GPU machine: the sampling benchmark and its PyTorch peers,
#                             sharded against swap on the GPU (bench_gpu_modes), and the step
#                             latency with GPU worker processes (bench_worker_latency, if bundled)
#   tools/gpu-run.sh verify   on the GPU machine: everything an issue touching kernels needs, in one
#                             device call: run, compute-sanitizer memcheck and racecheck on the CUDA
#                             tests, bench, and the coordinator overhead on the machine's cores
# Example with the device tool: run(command="tools/gpu-run.sh run", carry=[".gpu-bundle"]).
set -euo pipefail
cd "$(dirname "$0")/.."
readonly BUNDLE=.gpu-bundle

bundle() {
  export CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc}
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DDISTSAMPLE_WITH_CUDA=ON -DDISTSAMPLE_WITH_NCCL=ON -DDISTSAMPLE_CUDA_ARCH=90 \
    "${launcher[@]}" >/dev/null
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/bin" "$BUNDLE/lib"
  if (($# > 0)); then
    cmake --build build-gpu -j"$(nproc)" --target "$@"
    local target
    for target in "$@"; do
      if [[ $target == distsample_c ]]; then
        cp build-gpu/lib/libdistsample.so "$BUNDLE/lib/"
      elif [[ $target == distsample_rank_c ]]; then
        cp build-gpu/lib/libdistsample_rank.so "$BUNDLE/lib/"
      else
        cp "build-gpu/bin/$target" "$BUNDLE/bin/"
      fi
    done
  else
    cmake --build build-gpu -j"$(nproc)"
    # What `run` and `verify` use: a call carries at most 64 MiB, and every binary holds its own
    # copy of the CUDA runtime, so the other benchmarks and the examples go only when named.
    cp build-gpu/bin/{test_*,*_peer,distsample,cpu_worker,bench_cuda_sampling,bench_gpu_modes,bench_coordinator_overhead} "$BUNDLE/bin/"
  fi
  # Every shared library the binaries use except the C runtime and the CUDA driver, which the GPU
  # machine has (and must match its kernel driver), and NCCL, which comes from the GPU machine's
  # Python site-packages (use_gpu_machine_libraries): the toolkit's libnccl is 200 MB.
  local lib
  for lib in $(ldd "$BUNDLE"/bin/* 2>/dev/null | awk '/=> \//{print $3}' | sort -u); do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*|libgcc_s.so*|libnccl.so*) ;;
      *) cp -L "$lib" "$BUNDLE/lib/" ;;
    esac
  done
  # Symbol tables are a third of the bytes, and a call carries at most 64 MiB.
  strip --strip-unneeded "$BUNDLE"/bin/* "$BUNDLE"/lib/*
  du -sh "$BUNDLE"
}

# Here: the CUDA-enabled UCX out of the libucx-cu13 wheel, next to the bundle. Its sonames
# (libucp.so.0, libucs.so.0, libuct.so.0, libucm.so.0) are the ones our binaries link against.
bundle_ucx() {
  local wheel=${1:-}
  if [[ -z $wheel ]]; then
    wheel=$(ls -t /tmp/wheels/libucx_cu13-*.whl 2>/dev/null | head -n 1 || true)
  fi
  if [[ -z $wheel || ! -f $wheel ]]; then
    echo "no libucx-cu13 wheel: pip download --no-deps libucx-cu13 -d /tmp/wheels, or name one" >&2
    return 2
  fi
  [[ -d $BUNDLE/bin ]] || { echo "no $BUNDLE/bin: run '$0 bundle [TARGET...]' first" >&2; return 2; }
  local unpacked target=$BUNDLE/ucx-cu13
  unpacked=$(mktemp -d)
  python3 -m zipfile -e "$wheel" "$unpacked"
  rm -rf "$target"
  mkdir -p "$target/lib/ucx"
  local lib
  for lib in libucp libucs libuct libucm; do cp -L "$unpacked/libucx/lib/$lib.so.0" "$target/lib/"; done
  for lib in libuct_cuda libucm_cuda libuct_cma; do cp -L "$unpacked/libucx/lib/ucx/$lib.so.0" "$target/lib/ucx/"; done
  rm -rf "$unpacked"
  strip --strip-unneeded "$target"/lib/*.so.0 "$target"/lib/ucx/*.so.0
  for lib in libucp libucs libuct libucm; do
    local soname
    soname=$(readelf -d "$target/lib/$lib.so.0" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    [[ $soname == "$lib.so.0" ]] || { echo "$wheel: $lib has soname '$soname', our binaries need $lib.so.0" >&2; return 1; }
  done
  echo "$(basename "$wheel") -> $target ($(du -sh "$target" | cut -f1)); the whole bundle: $(du -sh "$BUNDLE" | cut -f1) (a call carries 64 MiB)"
}

# On the GPU machine: the bundle's libraries, and NCCL from the nvidia-nccl Python package.
use_gpu_machine_libraries() {
  local nccl
  nccl=$(python3 -c "import nvidia.nccl,os;print(os.path.join(nvidia.nccl.__path__[0],'lib'))" 2>/dev/null || true)
  [[ -n $nccl ]] || echo "no nvidia.nccl Python package: binaries that use NCCL will not load" >&2
  export LD_LIBRARY_PATH="$PWD/$BUNDLE/lib${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# On the GPU machine: the wheel's UCX before Debian's, its modules (uct_cuda needs the driver's
# libcuda and libnvidia-ml, which the GPU machine has), and direct GPU-to-GPU UCX expected.
use_ucx_cu13() {
  local ucx=$PWD/$BUNDLE/ucx-cu13/lib
  [[ -f $ucx/libucp.so.0 ]] || { echo "no $ucx: run '$0 bundle-ucx' before carrying the bundle" >&2; return 2; }
  export LD_LIBRARY_PATH="$ucx:$LD_LIBRARY_PATH"
  export UCX_MODULE_DIR=$ucx/ucx
  echo "UCX from $ucx (libucx-cu13)"
}

run() {
  local out=${OUT:-/tmp/gpu-run}
  mkdir -p "$out"
  use_gpu_machine_libraries
  if [[ ${1:-} == --ucx-cu13 ]]; then
    shift
    use_ucx_cu13
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
  local failed=0 test
  for test in "$BUNDLE"/bin/test_*; do
    echo "== $(basename "$test")"
    if ! "$test" --gtest_brief=1 >"$out/$(basename "$test").log" 2>&1; then
      failed=1
      echo "FAILED: $(basename "$test")"
    fi
    tail -n 3 "$out/$(basename "$test").log"
  done
  if (($# > 0)); then
    echo "== $*"
    "$@"
  fi
  return "$failed"
}

bench() {
  local out=${OUT:-/tmp/gpu-run}
  mkdir -p "$out"
  use_gpu_machine_libraries
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
  "$BUNDLE/bin/bench_cuda_sampling" --json "$out/ours.json" | tee "$out/bench.txt"
  python3 bench/peers_torch.py "$out/ours.json" | tee "$out/peers.txt"
  # bf16 logits against PyTorch on the same bf16 rows, then the time's growth with V.
  "$BUNDLE/bin/bench_cuda_sampling" --dtype bf16 --no-probes --json "$out/ours-bf16.json" | tee "$out/bench-bf16.txt"
  python3 bench/peers_torch.py "$out/ours-bf16.json" | tee "$out/peers-bf16.txt"
  for vocab in 151936 262144; do
    "$BUNDLE/bin/bench_cuda_sampling" --vocab "$vocab" --no-probes | tee "$out/bench-v$vocab.txt"
  done
  # Exact sharded mode against the vocab swap, both on this GPU.
  if [[ -x $BUNDLE/bin/bench_gpu_modes ]]; then "$BUNDLE/bin/bench_gpu_modes" | tee "$out/gpu-modes.txt"; fi
  # What this host charges the answer lane's reader (a clock read, a wake-up), then the step
  # latency with 4 GPU worker processes handing in device shards, sharded and swap.
  if [[ -x $BUNDLE/bin/bench_host_wakeup ]]; then "$BUNDLE/bin/bench_host_wakeup" | tee "$out/host-wakeup.txt"; fi
  if [[ -x $BUNDLE/bin/bench_worker_latency ]]; then
    local mode
    for mode in sharded swap; do
      "$BUNDLE/bin/bench_worker_latency" --backend cuda --mode "$mode" --batch 16 --n 4 --vocab 128256 --steps 100 \
        2>/dev/null | tee "$out/worker-latency-$mode.txt"
    done
  fi
}

# On the GPU machine: the wheels in .whl (the package and pytest) into /tmp/site.
python_tests() {
  local out=${OUT:-/tmp/gpu-run} failed=0
  mkdir -p "$out"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  echo "== the installed wheel: import, then a sample on CUDA"
  env -u DISTSAMPLE_LIBRARY PYTHONPATH=/tmp/site python3 -c "import distsample, torch; \
l = 2 * torch.randn(4, 128256, device='cuda'); print(distsample.__file__, distsample.sample(l, top_k=50, seed=1).tolist())" \
    || failed=1
  echo "== pytest tests/python (CUDA tensors)"
  PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 DISTSAMPLE_LIBRARY=$PWD/$BUNDLE/lib/libdistsample.so PYTHONPATH=/tmp/site \
    timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python >"$out/pytest.log" 2>&1 || failed=1
  tail -n 15 "$out/pytest.log"
  echo "== bench/bench_python_sampling.py"
  PYTHONPATH=/tmp/site timeout 150 python3 bench/bench_python_sampling.py --json "$out/python_bench.json" \
    | tee "$out/python_bench.txt" || failed=1
  return "$failed"
}

sanitize() {
  local out=${OUT:-/tmp/gpu-run} tool failed=0
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  local test
  for tool in memcheck racecheck; do
    # The sharded sampler's device side: its cut edges at TP 4 on the CUDA shard primitives.
    for test in test_cuda_backend test_sampling_api_gpu "test_sharded_cuts --gtest_filter=*cuda_tp4"; do
      [[ -x $BUNDLE/bin/${test%% *} ]] || continue
      echo "== compute-sanitizer --tool $tool $test (${DS_SANITIZER_TRIALS:-12} random batches)"
      # shellcheck disable=SC2086
      if ! DS_GPU_TRIALS=${DS_SANITIZER_TRIALS:-12} "$sanitizer" --tool "$tool" --error-exitcode 9 "$BUNDLE"/bin/$test --gtest_brief=1 \
          >"$out/sanitizer-$tool-${test%% *}.log" 2>&1; then
        failed=1
        echo "FAILED: $tool $test"
      fi
      tail -n 2 "$out/sanitizer-$tool-${test%% *}.log"
    done
  done
  return "$failed"
}

verify() {
  local out=${OUT:-/tmp/gpu-run} failed=0
  mkdir -p "$out"
  run || failed=1
  python_tests || failed=1
  sanitize || failed=1
  bench || failed=1
  echo "== coordinator overhead ($(nproc) cores)"
  "$BUNDLE/bin/bench_coordinator_overhead" >"$out/coordinator_overhead.txt" 2>&1 || failed=1
  tail -n 12 "$out/coordinator_overhead.txt"
  return "$failed"
}

case "${1:-}" in
  bundle) shift; bundle "$@" ;;
  bundle-ucx) shift; bundle_ucx "$@" ;;
  run) shift; run "$@" ;;
  exec) shift; use_gpu_machine_libraries; [[ ${1:-} == --ucx-cu13 ]] && { shift; use_ucx_cu13; }; "$@" ;;
  bench) bench ;;
  python) use_gpu_machine_libraries; python_tests ;;
  sanitize) use_gpu_machine_libraries; sanitize ;;
  verify) verify ;;
  *) echo "usage: $0 bundle [target...] | bundle-ucx [wheel] | run [--ucx-cu13] [command...] | exec [--ucx-cu13] command... | bench | python | sanitize | verify" >&2; exit 2 ;;
esac
