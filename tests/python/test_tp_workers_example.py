"""examples/tp_workers end to end: launch.sh starts a gateway and TP = 4 Python workers whose
LM-head columns make each step's vocab shards, runs the speculative decoding scheduler with
--record and stops everything. Every recorded step's tokens must equal the package's Sampler on
the full rows the same model (tiny_lm.py) gives in one process, in every mode, and no process
of the launch may outlive it. Loopback only."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import distsample

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tp_workers"
sys.path.insert(0, str(EXAMPLE))
from tiny_lm import TinyLM  # noqa: E402

TP, VOCAB, STEPS, REQUESTS, DRAFTS = 4, 512, 6, 3, 3


def launch(cli, record, mode):
    """Runs launch.sh to its end; returns its completed process, after checking that it left no process behind."""
    build = Path(os.environ.get("DISTSAMPLE_BUILD_DIR") or Path(cli).resolve().parents[1])
    if not (build / "python" / "distsample_pb2.py").is_file():
        pytest.skip(f"no {build}/python/distsample_pb2.py (the gateway client's messages; set DISTSAMPLE_BUILD_DIR)")
    if importlib.util.find_spec("google.protobuf") is None:
        pytest.skip("the gateway client needs protobuf (Debian's python3-protobuf)")
    env = dict(os.environ, DISTSAMPLE_BUILD_DIR=str(build), DISTSAMPLE_CLI=cli, PYTHON=sys.executable)
    argv = [str(EXAMPLE / "launch.sh"), "--tp", str(TP), "--vocab", str(VOCAB), "--mode", mode, "--steps", str(STEPS),
            "--requests", str(REQUESTS), "--drafts", str(DRAFTS), "--top-p", "0.9", "--record", str(record)]
    # A session of its own: every process launch.sh starts is in its process group, found afterwards.
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        out, err = child.communicate(timeout=120)
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)
            left_behind = True
        except ProcessLookupError:
            left_behind = False
        child.wait()
    assert not left_behind, "launch.sh left processes running (killed now)"
    assert child.returncode == 0, out + err
    return out


def single_process_outputs(recorded):
    """Each recorded step again, in one process: the model's full rows through a Sampler."""
    model = TinyLM(recorded["vocab_size"], recorded["dim"], recorded["model_seed"])
    sampler = distsample.Sampler(recorded["vocab_size"], recorded["max_slots"])
    for r in recorded["requests"]:
        sampler.register(r["slot"], temperature=r["temperature"], top_p=r["top_p"], seed=r["seed"],
                         history=r["prompt"])
    for step in recorded["steps"]:
        candidates = np.array(step["candidates"], np.int32)
        rows = model.rows(candidates.reshape(-1))  # row b*N + j follows candidate j of request b
        predict, _, accept_length = sampler.verify(rows, np.array(step["slots"], np.int32),
                                                   np.array(step["positions"], np.int64), candidates)
        yield predict.reshape(-1).tolist(), accept_length.tolist()


@pytest.mark.parametrize("mode", ["sharded", "swap", "gathered"])
def test_the_launched_example_samples_what_one_process_samples(cli, rank_library, tmp_path, mode):
    record = tmp_path / "steps.json"
    out = launch(cli, record, mode)
    assert "acceptance:" in out and "step latency over" in out and " p99 " in out, out
    recorded = json.loads(record.read_text())
    assert recorded["tp"] == TP and len(recorded["steps"]) == STEPS
    for step, (predict, accept_length) in zip(recorded["steps"], single_process_outputs(recorded)):
        assert step["predict"] == predict, step
        assert step["accept_length"] == accept_length, step
    # The drafts are neither all accepted nor all rejected, so verification decides something.
    accepted = sum(length - 1 for step in recorded["steps"] for length in step["accept_length"])
    assert 0 < accepted < STEPS * REQUESTS * DRAFTS
    # Each step continues from the tokens the previous one emitted.
    for before, after in zip(recorded["steps"], recorded["steps"][1:]):
        n = DRAFTS + 1
        for b in range(REQUESTS):
            length = before["accept_length"][b]
            assert after["positions"][b] == before["positions"][b] + length
            assert after["candidates"][b][0] == before["predict"][b * n + length - 1]
