"""distsample: exact sampling and speculative verification of LLM logits, the same tokens on the
CPU and on CUDA. A ctypes front end over libdistsample.so (include/distsample/distsample_c.h); see
docs/python.md.

    tokens = distsample.sample(logits, temperature=0.8, top_p=0.9, seed=seeds, position=positions)
    predict, accept_index, accept_length = distsample.verify(logits, candidates, temperature=0.8, seed=seeds)

distsample.WorkerRank is a tensor-parallel rank inside a model worker, over libdistsample_rank.so
(docs/deployment.md, Ranks inside model workers).
"""

from ._arrays import clear_workspaces
from ._call import EXACT, call_with_params
from ._native import LIBRARY_PATH, ROW_INVALID_PARAMS, ROW_KERNEL_FAULT, ROW_NOTHING_ALLOWED, ROW_OK, DistsampleError
from ._native import LIB as _LIB
from ._rank import Outputs, Step, WorkerRank
from ._sampler import Sampler

__all__ = [
    "sample", "verify", "Sampler", "has_cuda", "clear_workspaces", "DistsampleError", "LIBRARY_PATH",
    "WorkerRank", "Step", "Outputs",
    "ROW_OK", "ROW_NOTHING_ALLOWED", "ROW_INVALID_PARAMS", "ROW_KERNEL_FAULT",
]  # fmt: skip
__version__ = "0.1.0"


def has_cuda():
    """True when the loaded libdistsample.so was built with CUDA."""
    return bool(_LIB.ds_has_cuda())


def sample(logits, *, temperature=1.0, top_k=-1, top_p=1.0, min_p=0.0, seed=0, position=0, presence_penalty=0.0,
           frequency_penalty=0.0, repetition_penalty=1.0, logit_bias=None, seen=None, bitmask=None, logprobs=None,
           row_errors=False, out=None, stream=None):
    """One token per row of `logits` [batch_size, vocab] (float32, bfloat16 or float16; torch on CPU or
    CUDA, numpy on the CPU).

    Every parameter is a Python number for the whole batch or an array of one value per row on the
    logits' device (float32; top_k int32; seed and position int64). logit_bias and seen: None, a
    list of per-row dicts {token: value} or a CSR tuple (offsets, tokens, values). bitmask: int32 or
    uint32 [batch_size, ceil(vocab / 32)], bit 1 = allowed.

    Returns int32 tokens [batch_size] (-1 where a row emitted nothing), followed, when asked, by
    float32 logprobs [batch_size] (logprobs='raw' or 'processed') and uint8 row_errors [batch_size]
    (row_errors=True): a tuple then. out= gives the arrays to write, in the same order."""
    return call_with_params(logits, None, temperature, top_k, top_p, min_p, seed, position, presence_penalty,
                            frequency_penalty, repetition_penalty, logit_bias, seen, bitmask, EXACT, logprobs,
                            row_errors, out, stream)


def verify(logits, candidates, *, temperature=1.0, top_k=-1, top_p=1.0, min_p=0.0, seed=0, position=0,
           presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, logit_bias=None, seen=None,
           bitmask=None, threshold_single=1.0, threshold_acc=1.0, logprobs=None, row_errors=False, out=None,
           stream=None):
    """Chain verification of speculative drafts: candidates int32 [batch_size, N] (the anchor, then N - 1
    drafts), logits [batch_size * N, vocab] or [batch_size, N, vocab] (row j: the distribution after
    candidate j). Parameters as in sample(); threshold_single and threshold_acc 1.0 is exact
    rejection sampling.

    Returns int32 predict [batch_size, N] and accept_index [batch_size, N] (-1 after the emitted
    tokens) and accept_length [batch_size], then logprobs [batch_size, N] and row_errors
    [batch_size] when asked."""
    return call_with_params(logits, candidates, temperature, top_k, top_p, min_p, seed, position, presence_penalty,
                            frequency_penalty, repetition_penalty, logit_bias, seen, bitmask,
                            (threshold_single, threshold_acc), logprobs, row_errors, out, stream)
