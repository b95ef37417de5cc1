"""The package on torch tensors: CPU tensors of every dtype against numpy; CUDA tensors against the CPU
backend on random batches, inside a captured CUDA graph, under torch's sync debug mode "error", on
another stream. Needs torch (skipped without it); the CUDA tests need a GPU and a CUDA build of
libdistsample.so. Self-contained: torch, numpy and pytest."""

import numpy as np
import pytest

import distsample
from cases import Case

torch = pytest.importorskip("torch")
cuda = pytest.mark.skipif(not (torch.cuda.is_available() and distsample.has_cuda()),
                          reason="needs a CUDA device and a libdistsample.so built with CUDA")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def tensors(value, device):
    """numpy arrays (also inside tuples) as torch tensors on `device`; uint64 seeds as int64 and
    uint32 bitmasks as int32 (torch's unsigned types are not supported by every operation)."""
    if isinstance(value, np.ndarray):
        if value.dtype in (np.uint64, np.uint32):
            value = value.view(np.int64 if value.dtype == np.uint64 else np.int32)
        return torch.from_numpy(np.ascontiguousarray(value)).to(device)
    if isinstance(value, tuple):
        return tuple(tensors(v, device) for v in value)
    return value


def prepare(case, logits, device, csr, **extra):
    """The call of `case` on `device`: (function, positional arguments, keyword arguments)."""
    kw = {name: tensors(v, device) for name, v in case.kwargs(csr=csr).items()}
    kw.update(extra)
    logits = logits.to(device)
    if case.verify:
        return distsample.verify, (logits, tensors(case.candidates, device)), kw
    return distsample.sample, (logits,), kw


def run(case, logits, device, csr, **extra):
    function, args, kw = prepare(case, logits, device, csr, **extra)
    return function(*args, **kw)


def assert_same(actual, expected, where):
    for a, e in zip(actual, expected):
        a, e = a.cpu(), e.cpu()
        if a.dtype == torch.float32:
            np.testing.assert_allclose(a.numpy(), e.numpy(), rtol=0, atol=1e-6, err_msg=where)
        else:
            assert torch.equal(a, e), where


@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_tensors_equal_numpy(dtype):
    """torch CPU tensors (bf16 too) give what numpy float32 arrays of the same values give."""
    rng = np.random.default_rng(5)
    for i in range(40):
        case = Case(rng, verify=i % 2 == 1)
        logits = torch.from_numpy(case.logits).to(DTYPES[dtype])
        expected = [torch.from_numpy(a) for a in
                    run_numpy(case, logits.float().numpy(), logprobs="processed", row_errors=True)]
        actual = run(case, logits, "cpu", csr=i % 3 == 0, logprobs="processed", row_errors=True)
        assert_same(actual, expected, f"batch {i}")
        assert all(isinstance(a, torch.Tensor) for a in actual)


def run_numpy(case, logits, **extra):
    kw = case.kwargs()
    kw.update(extra)
    if case.verify:
        return distsample.verify(logits, case.candidates, **kw)
    return distsample.sample(logits, **kw)


@cuda
def test_cuda_equals_cpu():
    """500 random batches: CUDA tensors give the CPU backend's outputs, fp32, bf16 and fp16."""
    rng = np.random.default_rng(11)
    for i in range(500):
        case = Case(rng, verify=i % 2 == 1, vocab=int(rng.choice([100, 1000, 32000, 128256])) if i % 5 == 0 else None)
        dtype = list(DTYPES.values())[i % 3]
        logits = torch.from_numpy(case.logits).to(dtype)
        mode = ("processed", "raw")[i % 2]
        expected = run(case, logits, "cpu", csr=False, logprobs=mode, row_errors=True)
        actual = run(case, logits, "cuda", csr=i % 4 < 2, logprobs=mode, row_errors=True)
        assert all(a.device.type == "cuda" for a in actual)
        assert_same(actual, expected, f"batch {i} ({dtype}, logprobs {mode})")


@cuda
def test_cuda_all_greedy_calls_equal_cpu():
    rng = np.random.default_rng(12)
    for i in range(40):
        case = Case(rng, verify=i % 2 == 1)
        logits = torch.from_numpy(case.logits).to(list(DTYPES.values())[i % 3])
        kw = dict(temperature=0.0, bitmask=tensors(case.bitmask, "cuda"), logprobs=("raw", "processed")[i % 2],
                  row_errors=True)
        args = (logits,) if not case.verify else (logits, torch.from_numpy(case.candidates))
        expected = (distsample.verify if case.verify else distsample.sample)(
            *args, **{**kw, "bitmask": tensors(case.bitmask, "cpu")})
        actual = (distsample.verify if case.verify else distsample.sample)(*(a.cuda() for a in args), **kw)
        assert_same(actual, expected, f"batch {i}")


@cuda
def test_graph_capture_and_replay_equal_eager_calls():
    bs, n, vocab = 8, 4, 5000
    dev = "cuda"
    logits = torch.randn(bs, vocab, device=dev)
    draft_logits = torch.randn(bs * n, vocab, device=dev, dtype=torch.bfloat16)
    candidates = torch.randint(0, vocab, (bs, n), device=dev, dtype=torch.int32)
    seeds = torch.zeros(bs, dtype=torch.int64, device=dev)
    positions = torch.zeros(bs, dtype=torch.int64, device=dev)
    temperature = torch.linspace(0.0, 1.5, bs, device=dev)
    sample_kw = dict(temperature=temperature, top_k=50, top_p=0.9, seed=seeds, position=positions,
                     logprobs="processed", row_errors=True)
    verify_kw = dict(temperature=0.7, seed=seeds, position=positions, logprobs="raw")  # peaked rows: drafts pass

    def step():
        return (distsample.sample(logits, **sample_kw), distsample.verify(draft_logits, candidates, **verify_kw))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    gen = torch.Generator(device=dev).manual_seed(3)
    for it in range(6):
        logits.copy_(torch.randn(bs, vocab, device=dev, generator=gen) * (it + 1))
        draft_logits.copy_(torch.randn(bs * n, vocab, device=dev, generator=gen) * 8)
        top = draft_logits.float().argmax(dim=1).view(bs, n).to(torch.int32)
        candidates.copy_(torch.cat([candidates[:, :1], top[:, :-1]], dim=1))
        seeds.copy_(torch.randint(0, 1 << 62, (bs,), device=dev, generator=gen))
        positions.copy_(torch.randint(0, 1 << 20, (bs,), device=dev, generator=gen))
        graph.replay()
        eager = step()
        assert_same(captured[0], eager[0], f"sample, replay {it}")
        assert_same(captured[1], eager[1], f"verify, replay {it}")
    assert int(captured[1][2].sum()) > bs  # some drafts were accepted


@cuda
def test_no_call_synchronises():
    dev = "cuda"
    rng = np.random.default_rng(2)
    case = Case(rng, verify=True, vocab=3000)
    logits = torch.from_numpy(case.logits).to(dev)
    sampler = distsample.Sampler(3000, 8, dev, max_penalty_tokens=32, max_logit_bias=8)
    # The test's own arrays go to the device first: only distsample's calls run under the check.
    calls = [prepare(case, logits, dev, csr=False, logprobs="processed", row_errors=True),
             prepare(case, logits, dev, csr=True, logprobs="raw")]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        outs = [
            *(function(*args, **kw) for function, args, kw in calls),
            distsample.sample(logits, temperature=torch.full((logits.shape[0],), 0.5, device=dev), seed=7,
                              logit_bias=[{1: 2.0}] * logits.shape[0], seen=[{3: 1}] * logits.shape[0]),
            distsample.sample(logits, temperature=0.0),
        ]
        sampler.register(1, temperature=0.9, seed=5, presence_penalty=1.0, logit_bias={4: 3.0}, history=[1, 2, 2])
        sampler.register(2, temperature=0.0, repetition_penalty=1.2)
        slots = torch.tensor([1, 2, 0], dtype=torch.int32).to(dev, non_blocking=True)
        outs.append(sampler.sample(logits[:3], slots, 10))
        outs.append(sampler.verify(logits[:6], [1, 2, 0], torch.zeros(3, dtype=torch.int64, device=dev),
                                   torch.zeros((3, 2), dtype=torch.int32, device=dev)))
        sampler.release(1)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    floats = logits.float()
    cleaned = torch.where(torch.isnan(floats), -float("inf"), floats)  # NaN never wins; -inf stays -inf
    expected = cleaned.argmax(dim=1)
    expected[cleaned.max(dim=1).values == -float("inf")] = -1  # nothing allowed: no token
    assert outs[3].tolist() == expected.tolist()
    assert sampler.seen(2) != {}


@cuda
def test_stream_argument():
    dev = "cuda"
    logits = torch.randn(16, 1000, device=dev)
    seeds = torch.arange(16, device=dev)
    expected = distsample.sample(logits, temperature=0.8, seed=seeds)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    on_side = distsample.sample(logits, temperature=0.8, seed=seeds, stream=side)
    raw = distsample.sample(logits, temperature=0.8, seed=seeds, stream=side.cuda_stream)
    side.synchronize()
    assert torch.equal(on_side, expected) and torch.equal(raw, expected)
    with pytest.raises(TypeError, match=r"stream: expected None, a torch.cuda.Stream"):
        distsample.sample(logits, stream="side")


@cuda
def test_cuda_sampler_equals_cpu_sampler():
    rng = np.random.default_rng(8)
    samplers = {dev: distsample.Sampler(500, 5, dev, max_penalty_tokens=16) for dev in ("cpu", "cuda")}
    for s in samplers.values():
        s.register(1, temperature=0.9, seed=1, presence_penalty=1.0, frequency_penalty=0.5, history=[3, 3])
        s.register(2, temperature=0.5, top_k=10, seed=2, repetition_penalty=1.5, logit_bias={7: 2.0})
        s.register(4, temperature=0.0, frequency_penalty=2.0)
    for step in range(10):
        logits = torch.from_numpy((rng.standard_normal((4, 500)) * 2).astype(np.float32))
        slots = [1, 2, 4, 0]
        results = {dev: s.sample(logits.to(dev) if dev == "cuda" else logits.numpy(), slots, step, row_errors=True)
                   for dev, s in samplers.items()}
        assert_same(results["cuda"], [torch.from_numpy(a) for a in results["cpu"]], f"step {step}")
    for slot in (1, 2, 4):
        assert samplers["cuda"].seen(slot) == samplers["cpu"].seen(slot)


@cuda
def test_cuda_arguments_on_another_device_are_refused():
    logits = torch.randn(3, 100, device="cuda")
    with pytest.raises(ValueError, match=r"temperature: expected a tensor on cuda:0 like logits, got cpu"):
        distsample.sample(logits, temperature=torch.ones(3))
    with pytest.raises(ValueError, match=r"seed: expected a tensor on cuda:0 like logits, got cpu"):
        distsample.sample(logits, seed=np.zeros(3, np.int64))
    with pytest.raises(ValueError, match=r"out \(tokens\): expected a tensor on cuda:0 like logits, got cpu"):
        distsample.sample(logits, out=torch.empty(3, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"logits: expected a tensor in host memory like the Sampler's state"):
        distsample.Sampler(100, 4).sample(logits, [1, 2, 3], 0)
    with pytest.raises(ValueError, match=r"logits: expected a tensor on cuda:0 like the Sampler's state, got cpu"):
        distsample.Sampler(100, 4, "cuda:0").sample(logits.cpu(), [1, 2, 3], 0)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(ValueError, match=r"logit_bias: Python lists cannot be uploaded inside a CUDA graph capture"):
        with torch.cuda.graph(graph):
            distsample.sample(logits, logit_bias=[{1: 1.0}] * 3)

