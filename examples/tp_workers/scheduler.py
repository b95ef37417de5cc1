"""A scheduler that runs speculative decoding through the gateway, whose ranks live in the model
workers (torch_worker.py): it registers a few requests, and every step drafts a few tokens per
request with a bigram draft model (tiny_lm.BigramDraft), sends one verify step for all of them,
and prints the tokens each request emitted. At the end it prints the acceptance rate and the
step latency (p50, p99) as this client sees it: the verify call's round trip.

    scheduler.py --address 127.0.0.1:7700 --steps 20 [--record steps.json]

launch.sh runs it; it needs clients/python and <build>/python on PYTHONPATH (distsample_client).
"""

import argparse
import json
import math
import sys
import time

from distsample_client import Client
from tiny_lm import BigramDraft, TinyLM


def percentile(sorted_values, p):
    """The nearest-rank percentile."""
    return sorted_values[max(0, math.ceil(p / 100 * len(sorted_values)) - 1)]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", required=True, help="host:port or unix:/path of the gateway")
    parser.add_argument("--requests", type=int, default=3, help="requests decoded together, one batch per step")
    parser.add_argument("--steps", type=int, default=10, help="verify steps to run")
    parser.add_argument("--drafts", type=int, default=3, help="draft tokens per request per step (N - 1)")
    parser.add_argument("--temperature", type=float, default=0.8, help="every request's sampling temperature")
    parser.add_argument("--top-p", type=float, default=1.0, help="every request's top-p")
    parser.add_argument("--seed", type=int, default=7, help="request i samples with seed + i")
    parser.add_argument("--model-seed", type=int, default=1, help="the workers' model (for the draft's copy)")
    parser.add_argument("--dim", type=int, default=32, help="the workers' model's hidden size")
    parser.add_argument("--draft-noise", type=float, default=0.1,
                        help="how far the draft's LM head is from the target's (standard deviation)")
    parser.add_argument("--record", metavar="FILE", help="write every step's inputs and outputs here as JSON")
    args = parser.parse_args()

    with Client(args.address) as gateway:
        stats = gateway.stats()
        n = args.drafts + 1
        if n > stats.max_tokens_per_req or args.requests > stats.max_batch:
            sys.exit(f"scheduler: the gateway allows N <= {stats.max_tokens_per_req} and at most "
                     f"{stats.max_batch} requests per step")
        model = TinyLM(stats.vocab_size, args.dim, args.model_seed)
        draft = BigramDraft(model, args.draft_noise)
        prompts = [[(17 + 101 * i) % stats.vocab_size] for i in range(args.requests)]
        params = [{"temperature": args.temperature, "top_p": args.top_p, "seed": args.seed + i}
                  for i in range(args.requests)]
        slots = [gateway.register(history=prompts[i], scheduler_request_id=i, **params[i])
                 for i in range(args.requests)]
        print(f"gateway: TP={stats.tp} V={stats.vocab_size}; {args.requests} requests in slots {slots}, "
              f"{args.drafts} drafts per step")

        texts = [list(p) for p in prompts]
        positions = [len(p) for p in prompts]  # the sequence length before the step
        steps, latencies, accepted = [], [], 0
        for step in range(1, args.steps + 1):
            # The anchor is the last committed token: row 0 of a chain is a plain next-token sample.
            chains = [[texts[b][-1]] + draft.propose(texts[b][-1], args.drafts) for b in range(args.requests)]
            started = time.perf_counter()
            reply = gateway.verify(slots, positions, chains)
            latencies.append(time.perf_counter() - started)
            steps.append({"slots": slots, "positions": list(positions), "candidates": chains,
                          "predict": list(reply.predict), "accept_length": list(reply.accept_length)})
            parts = []
            for b in range(args.requests):
                length = reply.accept_length[b]
                tokens = list(reply.predict[b * n:b * n + length])
                texts[b].extend(tokens)
                positions[b] += length
                accepted += length - 1
                parts.append(f"[{b}] {length - 1}/{args.drafts} accepted -> {tokens}")
            print(f"step {step:3} {1000 * latencies[-1]:7.2f} ms: " + " | ".join(parts))

        for slot in slots:
            gateway.release(slot)

    proposed = args.steps * args.requests * args.drafts
    emitted = sum(len(t) - len(p) for t, p in zip(texts, prompts))
    ordered = sorted(latencies)
    if ordered:
        print(f"acceptance: {accepted}/{proposed} drafts = {100 * accepted / max(proposed, 1):.1f}%; "
              f"{emitted / (args.steps * args.requests):.2f} tokens per request per step")
        print(f"step latency over {len(ordered)} steps: p50 {1000 * percentile(ordered, 50):.2f} ms, "
              f"p99 {1000 * percentile(ordered, 99):.2f} ms")
    if args.record:
        with open(args.record, "w") as f:
            json.dump({"vocab_size": stats.vocab_size, "tp": stats.tp, "max_slots": stats.max_slots,
                       "model_seed": args.model_seed, "dim": args.dim,
                       "requests": [dict(p, slot=s, prompt=q) for p, s, q in zip(params, slots, prompts)],
                       "steps": steps}, f)


if __name__ == "__main__":
    main()
