"""distsample.WorkerRank (libdistsample_rank.so): a coordinator (`distsample coordinator` with
topology.logits_source = worker, driven through its stdin and stdout) and TP Python worker
processes (rank_worker.py) whose model makes each step's rows; the steps carry no logits, each
worker hands in its vocab shard, and the coordinator's outputs and every worker's equal
`distsample kernel` on the full rows, in every mode. The C++ twin is
tests/multiprocess/test_worker_ranks.cpp. Loopback only; every child is killed at teardown."""

import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import distsample
from rank_worker import LOGITS_TIMEOUT_MS, model_rows

TP, VOCAB, BATCH = 4, 64, 5  # a batch of 5 pads to 8 with TP = 4
WORKER = Path(__file__).resolve().parent / "rank_worker.py"


def group_config(mode):
    """The coordinator's config file, which every worker also joins with."""
    return {"tp": TP, "mode": mode, "transport": "ucx", "threads_per_rank": 1, "vocab_size": VOCAB, "max_batch": 8,
            "max_tokens_per_req": 3, "max_slots": 16, "step_timeout_ms": 4000, "transport_timeout_ms": 2000,
            "topology": {"logits_source": "worker"}}


def random_step(verify, seed):
    """A step without logits: BATCH requests, greedy and sampled, with top-k, top-p and min-p."""
    rng = np.random.default_rng(seed)
    requests = []
    for b in range(BATCH):
        r = {"seed": 100 + b, "position": 7 * b + seed, "temperature": 0.0 if b == 0 else 0.7 + 0.1 * b}
        r.update([{}, {}, {"top_k": 8}, {"top_p": 0.8}, {"min_p": 0.05}][b])
        requests.append(r)
    step = {"vocab_size": VOCAB, "requests": requests}
    if verify:
        step["candidates"] = rng.integers(0, VOCAB, (BATCH, 3)).tolist()
    return step


def with_worker_rows(step):
    """The step with the rows the workers make: the coordinator gives requests slots 1..bs."""
    candidates = step.get("candidates", [[0]] * BATCH)
    positions = [r["position"] for r in step["requests"]]
    rows = model_rows(range(1, BATCH + 1), positions, candidates, len(candidates[0]), VOCAB)
    return dict(step, logits=rows.tolist())


def kernel_output(cli, op, step):
    done = subprocess.run([cli, "kernel", op, "--backend", "cpu", "--threads", "1"], input=json.dumps(step),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def assert_same_outputs(got, want):
    assert "error" not in got, got
    for key, value in want.items():
        if key == "logprobs":  # the sharded mode sums in another order
            np.testing.assert_allclose(np.array(got[key], float), np.array(value, float), rtol=0, atol=1e-5)
        else:
            assert got[key] == value, key


def assert_worker_outputs(line, want, op):
    """A worker's Outputs ([batch_size, N] arrays) against the kernel's flat lists."""
    assert "error" not in line, line
    predict = [t for row in line["predict"] for t in row]
    if op == "sample":
        assert predict == want["tokens"]
        return
    assert predict == want["predict"]
    assert line["accept_index"] == want["accept_index"]
    assert line["accept_length"] == want["accept_length"]


class Group:
    """The coordinator and the workers, their logs in `tmp`."""

    def __init__(self, cli, tmp, mode):
        self.tmp, self.mode, self.children, self.workers, self.pending = tmp, mode, [], [], b""
        config = tmp / "group.json"
        config.write_text(json.dumps(group_config(mode)))
        self.coordinator = self._spawn([cli, "coordinator", "--listen", "127.0.0.1:0", "--config", str(config)],
                                       "coordinator.log", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.coordinator.stdout, selectors.EVENT_READ)
        first = self.read_reply(10.0)
        assert "listening" in first, f"{first} {self.log('coordinator.log')}"
        self.address = first["listening"]

    def _spawn(self, argv, log, **pipes):
        with open(self.tmp / log, "ab") as err:
            child = subprocess.Popen(argv, stderr=err, **pipes)
        self.children.append(child)
        return child

    def start_workers(self, extra=None):
        for r in range(TP):
            with open(self.tmp / f"worker{r}.out", "wb") as out:
                self.workers.append(self._spawn([sys.executable, str(WORKER), self.address, str(r),
                                                 json.dumps(group_config(self.mode)), *(extra or {}).get(r, [])],
                                                f"worker{r}.log", stdout=out))

    def log(self, name):
        path = self.tmp / name
        return f"\n--- {name}:\n" + (path.read_text(errors="replace")[-3000:] if path.exists() else "(none)")

    def logs(self):
        return self.log("coordinator.log") + "".join(self.log(f"worker{r}.log") for r in range(TP))

    def read_reply(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0 or not self.selector.select(left):
                return {"error": "test: no reply in time"}
            chunk = os.read(self.coordinator.stdout.fileno(), 65536)
            if not chunk:
                return {"error": "test: the coordinator closed its output"}
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def call(self, op, step):
        self.coordinator.stdin.write((json.dumps(dict(step, op=op)) + "\n").encode())
        self.coordinator.stdin.flush()
        return self.read_reply(14.0)

    def call_until_ok(self, op, step, within):
        """Retries while the group forms (each attempt fails fast then)."""
        deadline = time.monotonic() + within
        while True:
            reply = self.call(op, step)
            if "error" not in reply or time.monotonic() > deadline:
                return reply
            time.sleep(0.1)

    def worker_lines(self, rank, key, count, within=20.0):
        """The first `count` lines of worker `rank` that have `key`, waiting for them up to `within`."""
        deadline = time.monotonic() + within
        while True:
            text = (self.tmp / f"worker{rank}.out").read_text()
            lines = [json.loads(t) for t in text.splitlines() if t.strip()]
            found = [line for line in lines if key in line]
            if len(found) >= count or time.monotonic() > deadline:
                return found[:count]
            time.sleep(0.05)

    def stop_coordinator(self):
        """Ends the coordinator's input: it stops, and its workers' ranks leave the group."""
        self.coordinator.stdin.close()
        self.coordinator.wait(timeout=20)

    def close(self):
        for child in self.children:
            child.kill()
            child.wait(timeout=10)
        self.selector.close()


@pytest.fixture
def make_group(cli, rank_library, tmp_path):
    groups = []

    def make(mode):
        groups.append(Group(cli, tmp_path, mode))
        return groups[-1]

    yield make
    for g in groups:
        g.close()


def run_and_compare(cli, group, op, step):
    want = kernel_output(cli, op, with_worker_rows(step))
    got = group.call(op, step)
    assert "error" not in got, f"{got}{group.logs()}"
    assert_same_outputs(got, want)
    return want


@pytest.mark.parametrize("mode", ["swap", "sharded", "gathered"])
def test_steps_without_logits_equal_the_kernel_on_the_workers_rows(cli, make_group, mode):
    group = make_group(mode)
    group.start_workers({1: ["--bad-shard-first"]})
    health = group.call_until_ok("health", {}, 20.0)
    assert health == {"health": "ok"}, f"{health}{group.logs()}"
    steps = [("sample", random_step(False, 41)), ("verify", random_step(True, 42)), ("verify", random_step(True, 43))]
    wants = [run_and_compare(cli, group, op, step) for op, step in steps]
    for r in range(TP):
        lines = group.worker_lines(r, "predict", len(steps))
        assert len(lines) == len(steps), group.log(f"worker{r}.out") + group.log(f"worker{r}.log")
        for line, (op, _), want in zip(lines, steps, wants):
            assert line["kind"] == op
            assert_worker_outputs(line, want, op)
    group.stop_coordinator()
    for r, worker in enumerate(group.workers):  # each leaves, and its process exits cleanly
        assert worker.wait(timeout=20) == 0, group.log(f"worker{r}.log")
        assert group.worker_lines(r, "left", 1)[0]["left"].startswith(f"rank {r}: ")
    bad = group.worker_lines(1, "bad_shard", 2)
    assert bad[0]["bad_shard"].startswith("shard: expected a 2-D [batch_size * N, shard_vocab] numpy array"), bad
    assert "rank 1: shard of step" in bad[1]["bad_shard"], bad
    assert f"{BATCH} rows of 15" in bad[1]["bad_shard"], bad
    assert f"expected {BATCH} rows of shard_vocab = {VOCAB // TP}" in bad[1]["bad_shard"], bad


def test_a_worker_that_withholds_its_logits_fails_the_step_naming_its_rank(cli, make_group):
    group = make_group("swap")
    group.start_workers({2: ["--withhold-step", "2"]})
    assert group.call_until_ok("health", {}, 20.0) == {"health": "ok"}, group.logs()
    run_and_compare(cli, group, "sample", random_step(False, 51))
    withheld = group.call("sample", random_step(False, 52))
    assert "rank 2: its worker did not hand in the logits of step" in withheld.get("error", ""), withheld
    assert f"within logits_timeout = {LOGITS_TIMEOUT_MS} ms" in withheld["error"], withheld
    # The group re-forms after a failed step; then the workers serve again.
    step = random_step(False, 53)
    again = group.call_until_ok("sample", step, 20.0)
    assert_same_outputs(again, kernel_output(cli, "sample", with_worker_rows(step)))


@pytest.mark.parametrize("kwargs, message", [
    ({"rank": 4}, "rank = 4: expected a rank in [0, 4)"),
    ({"rank": -1}, "rank = -1: expected a rank in [0, 4)"),
    ({"rank": 1 << 40}, f"rank = {1 << 40}: expected an integer in [-2147483648, 2147483647]"),
    ({"logits_timeout_ms": 0}, "logits_timeout = 0 ms: expected in [1, 4000]"),
    ({"config": dict(group_config("swap"), tpp=4)}, "config key 'tpp' (from the config JSON) is not known"),
    ({"config": '{"tp": 4,'}, "the config JSON: "),
    ({"config": dict(group_config("swap"), topology={})}, "topology.logits_source = wire: expected worker"),
    ({"coordinator": "127.0.0.1"}, "coordinator: '127.0.0.1': expected HOST:PORT"),
])  # fmt: skip
def test_bad_arguments_name_the_field_and_its_range(rank_library, kwargs, message):
    args = dict({"coordinator": "127.0.0.1:1", "rank": 0, "config": group_config("swap"), "logits_timeout_ms": 1000},
                **kwargs)
    with pytest.raises(ValueError) as caught:
        distsample.WorkerRank.join(**args)
    assert message in str(caught.value)
