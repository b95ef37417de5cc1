"""A tensor-parallel model worker with its distsample rank inside (distsample.WorkerRank).

Worker R of TP holds the columns [R*V/TP, (R+1)*V/TP) of the LM head of the example's model
(tiny_lm.py). For every step the gateway starts, it projects the rows of the step's context tokens
(each request's anchor, then its drafts) onto its columns, hands that vocab shard to its rank and
waits for the tokens the group agreed on; the logits never leave the worker except as the
distributed mode's per-row data. It computes with torch when importable (on CUDA when available),
else with numpy. It leaves when the gateway is gone.

    torch_worker.py --coordinator 127.0.0.1:7710 --rank 0 --config group.json

group.json is the gateway's config file (the group's keys, topology.logits_source = worker).
launch.sh starts the gateway and TP of these; run it rather than this directly.
"""

import argparse
import json
import sys
import time

import numpy as np

import distsample
from tiny_lm import TinyLM


class NumpyHead:
    """This worker's share of the model, as numpy arrays."""

    def __init__(self, model, begin, end):
        self.embedding, self.head = model.embedding, model.head_columns(begin, end)
        self.device = "numpy"

    def shard(self, tokens):
        return self.embedding[tokens] @ self.head


class TorchHead:
    """The same on a torch device; the shard stays there when the group samples on CUDA."""

    def __init__(self, torch, model, begin, end, device, keep_on_device):
        self.torch, self.device, self.keep_on_device = torch, torch.device(device), keep_on_device
        self.embedding = torch.from_numpy(model.embedding).to(self.device)
        self.head = torch.from_numpy(model.head_columns(begin, end)).to(self.device)

    def shard(self, tokens):
        index = self.torch.from_numpy(tokens.astype(np.int64)).to(self.device)
        rows = self.embedding[index] @ self.head
        # The rank reads host memory unless the group's backend is cuda: copy this rank's columns out.
        return rows if self.keep_on_device or rows.device.type == "cpu" else rows.cpu()


def make_head(args, model, begin, end, group_backend):
    if args.framework != "numpy":
        try:
            import torch
        except ImportError:
            if args.framework == "torch":
                sys.exit("torch_worker: --framework torch, but torch is not importable")
        else:
            device = args.device
            if device == "auto":
                device = "cuda" if torch.cuda.is_available() else "cpu"
            return TorchHead(torch, model, begin, end, device, keep_on_device=group_backend == "cuda")
    return NumpyHead(model, begin, end)


def context_tokens(step):
    """Row b*N + j follows request b's candidate j (the anchor, then drafts 1..j). This model looks
    at one token only; a sample step carries none, so its rows are the model's after token 0: drive
    it with verify steps (N = 1 is a plain sample whose anchor is the last committed token)."""
    if step.candidates is None:
        return np.zeros(step.batch_size, np.int32)
    return step.candidates.reshape(-1)


def serve(rank, head, args):
    steps = 0
    while True:
        try:
            step = rank.next_step(timeout_ms=500)
        except distsample.DistsampleError as e:  # the gateway is gone, or evicted this rank
            print(f"worker {args.rank}: left after {steps} steps: {e}", file=sys.stderr)
            return
        if step is None:
            continue
        try:
            rank.provide_logits(step.id, head.shard(context_tokens(step)))
            rank.outputs(step.id, timeout_ms=args.outputs_timeout_ms)
        except distsample.DistsampleError as e:  # this step failed elsewhere; the group re-forms
            print(f"worker {args.rank}: step {step.id}: {e}", file=sys.stderr)
        # A real worker appends the accepted tokens (the outputs' predict) to its KV cache here.
        steps += 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--coordinator", required=True, help="HOST:PORT where the gateway's ranks join")
    parser.add_argument("--rank", type=int, required=True, help="this worker's tensor-parallel rank, 0..TP-1")
    parser.add_argument("--config", required=True, help="the gateway's config file (JSON)")
    parser.add_argument("--model-seed", type=int, default=1, help="seed of the model's weights (tiny_lm.py)")
    parser.add_argument("--dim", type=int, default=32, help="the model's hidden size")
    parser.add_argument("--framework", choices=["auto", "torch", "numpy"], default="auto",
                        help="auto: torch when importable, else numpy")
    parser.add_argument("--device", default="auto", help="torch device: auto (cuda when available), cpu, cuda:N")
    parser.add_argument("--logits-timeout-ms", type=int, default=5000,
                        help="a step whose shard this worker does not hand in within this fails")
    parser.add_argument("--outputs-timeout-ms", type=int, default=20000, help="wait this long for a step's outputs")
    args = parser.parse_args()

    with open(args.config) as f:
        config = json.load(f)
    vocab, tp = config["vocab_size"], config["tp"]
    begin, end = args.rank * vocab // tp, (args.rank + 1) * vocab // tp
    head = make_head(args, TinyLM(vocab, args.dim, args.model_seed), begin, end, config.get("backend", "cpu"))
    started = time.monotonic()
    with distsample.WorkerRank.join(args.coordinator, args.rank, config,
                                    logits_timeout_ms=args.logits_timeout_ms) as rank:
        print(f"worker {args.rank}: joined {args.coordinator} in {time.monotonic() - started:.1f} s; "
              f"LM head columns [{begin}, {end}) on {head.device}", file=sys.stderr)
        serve(rank, head, args)


if __name__ == "__main__":
    main()
