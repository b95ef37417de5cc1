"""PyTorch peers of bench_cuda_sampling, in the same run (docs/benchmarks.md).

Usage (on the GPU machine): python3 bench/peers_torch.py ours.json
Reads our figures, times the PyTorch way of doing each case on the same shapes with CUDA events,
and prints one table: our time, the floor, PyTorch's time and the ratios. FlashInfer is not run
(see bench/RESULTS.md for why).
"""
import json
import sys

import torch


def time_us(fn, iterations=20):
    fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) * 1000.0 / iterations


def top_k_top_p_filter(logits, top_k, top_p):
    """The sort-based filter used by vLLM/SGLang's PyTorch paths."""
    sorted_logits, sorted_index = torch.sort(logits, dim=-1, descending=True)
    if top_k > 0:
        kth = sorted_logits[:, top_k - 1 : top_k]
        sorted_logits = sorted_logits.masked_fill(sorted_logits < kth, float("-inf"))
    probs = torch.softmax(sorted_logits, dim=-1)
    cumulative = probs.cumsum(dim=-1)
    sorted_logits = sorted_logits.masked_fill(cumulative - probs > top_p, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, sorted_index, sorted_logits)


def torch_case(case, logits):
    bs, n = case["batch"], case["tokens_per_req"]
    rows = logits[: bs * n]
    temperature, top_k, top_p = case["temperature"], case["top_k"], case["top_p"]
    min_p = case.get("min_p", 0.0)
    if temperature == 0:
        return lambda: torch.argmax(rows, dim=-1)

    def scaled():
        # vLLM and SGLang sample in fp32: 16-bit logits are widened first (a no-op for fp32).
        return rows.float() / temperature

    if min_p > 0:

        def sample_min_p():
            probs = torch.softmax(scaled(), dim=-1)
            kept = probs.masked_fill(probs < min_p * probs.amax(dim=-1, keepdim=True), 0.0)
            return torch.multinomial(kept, 1)

        return sample_min_p
    if top_k < 0 and top_p >= 1.0:
        return lambda: torch.multinomial(torch.softmax(scaled(), dim=-1), 1)
    if n == 1:
        return lambda: torch.multinomial(torch.softmax(top_k_top_p_filter(scaled(), top_k, top_p), -1), 1)

    drafts = torch.zeros((bs, n), dtype=torch.long, device=rows.device)

    def verify():
        probs = torch.softmax(top_k_top_p_filter(scaled(), top_k, top_p), -1).view(bs, n, -1)
        p_draft = probs[:, :-1].gather(-1, drafts[:, 1:].unsqueeze(-1)).squeeze(-1)
        coins = torch.rand((bs, n - 1), device=rows.device)
        accepted = (coins <= p_draft).int().cumprod(dim=-1).sum(dim=-1)
        final_probs = probs[torch.arange(bs, device=rows.device), accepted]
        return accepted, torch.multinomial(final_probs, 1)

    return verify


def main():
    ours = json.load(open(sys.argv[1]))
    vocab = ours["vocab"]
    torch.manual_seed(0)
    dtype = torch.bfloat16 if ours.get("dtype") == "bf16" else torch.float32
    logits = (torch.randn((256, vocab), device="cuda") * 2.0).to(dtype)
    scratch = torch.empty((1 << 28,), dtype=torch.float32, device="cuda")
    other = torch.empty_like(scratch)
    copy_us = time_us(lambda: other.copy_(scratch))
    torch_bandwidth = 2 * scratch.numel() * 4 / (copy_us * 1e-6) / 1e12
    print(f"V = {vocab}, {dtype} logits")
    print(f"copy bandwidth: ours {ours['bandwidth_tbps']:.2f} TB/s, torch {torch_bandwidth:.2f} TB/s (read+write)")
    print(f"{'case':<40} {'bs':>4} {'N':>2} {'ours us':>8} {'floor us':>8} {'x floor':>7} {'torch us':>9} {'torch/ours':>10}")
    for case in ours["cases"]:
        torch_us = time_us(torch_case(case, logits))
        print(
            f"{case['name']:<40} {case['batch']:>4} {case['tokens_per_req']:>2} {case['ours_us']:>8.1f} "
            f"{case['floor_us']:>8.1f} {case['ours_us'] / case['floor_us']:>7.2f} {torch_us:>9.1f} "
            f"{torch_us / case['ours_us']:>10.2f}"
        )


if __name__ == "__main__":
    main()
