"""A model worker with its rank inside, in Python (distsample.WorkerRank), for test_worker_rank.py:
the Python twin of examples/tp_workers/cpu_worker.cpp. Its "model" is model_rows, a deterministic
function of each row's context, which the test also runs to make the full rows for
`distsample kernel`. It prints one JSON line per step: the outputs it got, or the error.

    rank_worker.py COORDINATOR RANK CONFIG_JSON [--withhold-step K] [--bad-shard-first] [--lifetime-s S]
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

LOGITS_TIMEOUT_MS = 1000  # shorter than the transport's timeout: the withholding rank is the one named


def model_rows(slots, positions, candidates, n, vocab):
    """Rows [len(slots) * n, vocab] float32: row b * n + j from request b's slot, position and drafts 1..j."""
    rows = np.empty((len(slots) * n, vocab), np.float32)
    for b, (slot, position) in enumerate(zip(slots, positions)):
        for j in range(n):
            drafts = [int(t) for t in candidates[b][1:j + 1]] if j > 0 else []
            rng = np.random.default_rng([int(slot), int(position), j, *drafts])
            rows[b * n + j] = (rng.standard_normal(vocab) * 2.0).astype(np.float32)
    return rows


def serve(rank, step, args, seen):
    n = step.tokens_per_req
    candidates = step.candidates if step.candidates is not None else np.zeros((step.batch_size, 1), np.int32)
    full = model_rows(step.slots, step.positions, candidates, n, rank.vocab_size)
    shard = full[:, step.vocab_begin:step.vocab_begin + step.shard_vocab]  # a strided view: rows vocab apart
    if args.bad_shard_first and seen == 1:
        for bad in (shard[None], shard[:, 1:]):  # 3-D; one column short
            try:
                rank.provide_logits(step.id, bad)
            except ValueError as e:
                print(json.dumps({"step": step.id, "bad_shard": str(e)}), flush=True)
    rank.provide_logits(step.id, shard)
    out = rank.outputs(step.id, timeout_ms=20000)
    return {"step": step.id, "kind": step.kind, "predict": out.predict.tolist(),
            "accept_index": out.accept_index.tolist(), "accept_length": out.accept_length.tolist(),
            "row_errors": out.row_errors.tolist()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("coordinator")
    parser.add_argument("rank", type=int)
    parser.add_argument("config")
    parser.add_argument("--withhold-step", type=int, default=0, help="never hand in the K-th step's logits (1-based)")
    parser.add_argument("--bad-shard-first", action="store_true", help="hand in a narrow shard first, print the error")
    parser.add_argument("--lifetime-s", type=float, default=120.0, help="exit after this long whatever happens")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    import distsample

    deadline = time.monotonic() + args.lifetime_s
    with distsample.WorkerRank.join(args.coordinator, args.rank, json.loads(args.config),
                                    logits_timeout_ms=LOGITS_TIMEOUT_MS) as rank:
        print(json.dumps({"joined": args.rank}), flush=True)
        seen = 0
        while time.monotonic() < deadline:
            try:
                step = rank.next_step(timeout_ms=200)
            except distsample.DistsampleError as e:  # the rank has left: the coordinator is gone
                print(json.dumps({"left": str(e)}), flush=True)
                return
            if step is None:
                continue
            seen += 1
            if seen == args.withhold_step:
                continue
            try:
                line = serve(rank, step, args, seen)
            except distsample.DistsampleError as e:
                line = {"step": step.id, "error": str(e)}
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
