"""Every error path of the package: each bad argument raises ValueError or TypeError naming it (and
the allowed range, dtype or shape) before any pointer reaches the library; per-row values out of
range flag their row instead."""

import os
import subprocess
import sys

import numpy as np
import pytest

import distsample

V = 40


@pytest.fixture
def logits():
    return np.random.default_rng(1).standard_normal((3, V)).astype(np.float32)


def raises(kind, match, fn, *args, **kwargs):
    with pytest.raises(kind, match=match):
        fn(*args, **kwargs)


def test_logits(logits):
    raises(TypeError, r"logits: expected a torch tensor or a numpy array, got list", distsample.sample, [[1.0]])
    raises(TypeError, r"logits: expected float32 or float16 \(bfloat16 only as a torch tensor\), got int64",
           distsample.sample, np.zeros((2, V), np.int64))
    raises(TypeError, r"logits: expected .*, got float64", distsample.sample, logits.astype(np.float64))
    raises(ValueError, r"logits: expected a 2-D \[batch_size, vocab\] numpy array, got shape \(40,\)", distsample.sample,
           logits[0])
    raises(ValueError, r"logits: expected the last dimension contiguous", distsample.sample, logits[:, ::2])
    overlapping = np.lib.stride_tricks.as_strided(logits, shape=(3, V), strides=(8, 4))
    raises(ValueError, r"logits: expected rows at least vocab = 40 elements apart", distsample.sample, overlapping)
    raises(ValueError, r"logits: expected evenly spaced rows", distsample.verify,
           np.zeros((2, 3, 2 * V), np.float32)[:, :, :V].transpose(1, 0, 2), np.zeros((3, 2), np.int32))
    raises(ValueError, r"logits.vocab = 0: expected an integer in \[1, ", distsample.sample, np.zeros((2, 0), np.float32))


@pytest.mark.parametrize("name, bad, message", [
    ("temperature", -1.0, r"temperature = -1: expected a finite number >= 0"),
    ("temperature", float("nan"), r"temperature = nan: expected a finite number >= 0"),
    ("temperature", 1e39, r"temperature = inf: expected a finite number >= 0"),
    ("top_p", 1.5, r"top_p = 1.5: expected a number in \(0, 1\]"),
    ("top_p", 0.0, r"top_p = 0: expected a number in \(0, 1\]"),
    ("min_p", 1.5, r"min_p = 1.5: expected a number in \[0, 1\]"),
    ("presence_penalty", 2.5, r"presence_penalty = 2.5: expected a number in \[-2, 2\]"),
    ("frequency_penalty", -3.0, r"frequency_penalty = -3: expected a number in \[-2, 2\]"),
    ("repetition_penalty", 0.0, r"repetition_penalty = 0: expected a number in \(0, 10\]"),
    ("top_k", 0, r"top_k = 0: expected -1 \(no limit\) or an integer >= 1"),
    ("top_k", 1 << 40, r"top_k = 1099511627776: expected -1 \(no limit\) or an integer in \[1, 2\*\*31\)"),
    ("seed", 1 << 64, r"seed = 18446744073709551616: expected an integer in \[0, 2\*\*64\)"),
    ("position", -1, r"position = -1: expected an integer in \[0, 2\*\*63\)"),
])  # fmt: skip
def test_scalar_out_of_range(logits, name, bad, message):
    raises(ValueError, message, distsample.sample, logits, **{name: bad})


@pytest.mark.parametrize("name, bad", [("top_k", 2.0), ("seed", 1.5), ("position", True), ("top_k", "3")])
def test_scalar_type(logits, name, bad):
    raises(TypeError, rf"^{name}", distsample.sample, logits, **{name: bad})


@pytest.mark.parametrize("name, dtype", [
    ("temperature", np.float32), ("top_p", np.float32), ("min_p", np.float32), ("presence_penalty", np.float32),
    ("frequency_penalty", np.float32), ("repetition_penalty", np.float32), ("top_k", np.int32),
    ("seed", np.int64), ("position", np.int64),
])  # fmt: skip
def test_per_row_arrays(logits, name, dtype):
    good = np.ones(3, dtype)
    wrong = np.float64 if dtype != np.float64 else np.float32
    raises(TypeError, rf"^{name}: expected {np.dtype(dtype).name}.*, got {np.dtype(wrong).name}", distsample.sample,
           logits, **{name: good.astype(wrong)})
    raises(ValueError, rf"^{name}: expected shape \(3,\), got \(4,\)", distsample.sample, logits,
           **{name: np.ones(4, dtype)})
    raises(ValueError, rf"^{name}: expected shape \(3,\), got \(3, 1\)", distsample.sample, logits,
           **{name: np.ones((3, 1), dtype)})
    raises(ValueError, rf"^{name}: expected a contiguous numpy array", distsample.sample, logits,
           **{name: np.ones(6, dtype)[::2]})
    raises(TypeError, rf"^{name}: expected .* or a numpy array of 3 .* values \(one per row\), got str", distsample.sample,
           logits, **{name: "x"})
    distsample.sample(logits, **{name: good})


def test_per_row_values_out_of_range_flag_their_row(logits):
    good = distsample.sample(logits, temperature=0.7, seed=3, row_errors=True)
    cases = {"temperature": np.array([0.7, -1.0, 0.7], np.float32),
             "top_p": np.array([1.0, 1.5, 1.0], np.float32), "top_k": np.array([-1, 0, -1], np.int32),
             "position": np.array([0, -5, 0], np.int64)}
    for name, values in cases.items():
        kw = {"temperature": 0.7, "seed": 3, name: values}
        tokens, errors = distsample.sample(logits, row_errors=True, **kw)
        assert errors.tolist() == [0, distsample.ROW_INVALID_PARAMS, 0], name
        assert tokens.tolist() == [good[0][0], -1, good[0][2]], name
    tokens, errors = distsample.verify(np.repeat(logits, 2, axis=0), np.array([[1, 2], [3, V], [5, 6]], np.int32),
                                       row_errors=True)[0::3]
    assert errors.tolist() == [0, distsample.ROW_INVALID_PARAMS, 0] and tokens[1].tolist() == [-1, -1]


def test_lists(logits):
    raises(TypeError, r"logit_bias: expected None, a list of dicts", distsample.sample, logits, logit_bias={1: 2.0})
    raises(ValueError, r"logit_bias: expected 3 entries \(one per request\), got 2", distsample.sample, logits,
           logit_bias=[{}, {}])
    raises(TypeError, r"logit_bias\[1\]: expected a dict", distsample.sample, logits, logit_bias=[{}, [1], {}])
    raises(ValueError, r"logit_bias\[0\]: token 40 expected an integer in \[0, 40\)", distsample.sample, logits,
           logit_bias=[{40: 1.0}, {}, {}])
    raises(ValueError, r"logit_bias\[2\]\[3\] = 150.0: expected a number in \[-100, 100\]", distsample.sample,
           logits, logit_bias=[{}, {}, {3: 150.0}])
    raises(ValueError, r"seen\[0\]\[3\] = 0: expected a count in \[1, 2\*\*31\)", distsample.sample, logits,
           seen=[{3: 0}, None, None])
    raises(ValueError, r"seen\[0\]\[3\] = 1.5: expected a count", distsample.sample, logits, seen=[{3: 1.5}, None, None])
    offsets, tokens, values = np.array([0, 1, 1, 2], np.int32), np.array([3, 4], np.int32), np.ones(2, np.float32)
    distsample.sample(logits, logit_bias=(offsets, tokens, values))
    raises(ValueError, r"logit_bias: expected a tuple \(offsets, tokens, values\), got 2 entries", distsample.sample,
           logits, logit_bias=(offsets, tokens))
    raises(TypeError, r"logit_bias offsets: expected int32, got int64", distsample.sample, logits,
           logit_bias=(offsets.astype(np.int64), tokens, values))
    raises(ValueError, r"logit_bias offsets: expected shape \(4,\), got \(3,\)", distsample.sample, logits,
           logit_bias=(offsets[:3], tokens, values))
    raises(ValueError, r"logit_bias offsets: expected values in \[0, 2\]", distsample.sample, logits,
           logit_bias=(np.array([0, 1, 1, 9], np.int32), tokens, values))
    raises(ValueError, r"logit_bias offsets: expected values in \[0, 2\]", distsample.sample, logits,
           logit_bias=(np.array([-4, 1, 1, 2], np.int32), tokens, values))
    raises(ValueError, r"logit_bias values: expected shape \(2,\), got \(3,\)", distsample.sample, logits,
           logit_bias=(offsets, tokens, np.ones(3, np.float32)))
    raises(TypeError, r"seen values: expected int32, got float32", distsample.sample, logits,
           seen=(offsets, tokens, values))
    raises(ValueError, r"logit_bias: expected 1-D int32 tokens", distsample.sample, logits,
           logit_bias=(offsets, tokens.reshape(1, 2), values))


def test_bitmask_and_candidates(logits):
    words = (V + 31) // 32
    raises(TypeError, r"bitmask: expected int32 or uint32, got int64", distsample.sample, logits,
           bitmask=np.zeros((3, words), np.int64))
    raises(ValueError, r"bitmask: expected shape \(3, 2\), got \(3, 1\)", distsample.sample, logits,
           bitmask=np.zeros((3, 1), np.int32))
    raises(ValueError, r"bitmask: expected a contiguous numpy array", distsample.sample, logits,
           bitmask=np.zeros((3, 2 * words), np.int32)[:, ::2])
    raises(TypeError, r"bitmask: expected a numpy array in host memory, got list", distsample.sample, logits, bitmask=[1])
    raises(TypeError, r"candidates: expected int32, got int64", distsample.verify, logits, np.zeros((3, 1), np.int64))
    raises(ValueError, r"candidates: expected a 2-D \[batch_size, N\] int32 numpy array, got shape \(3,\)",
           distsample.verify, logits, np.zeros(3, np.int32))
    raises(ValueError, r"candidates: expected a 2-D .*, got list", distsample.verify, logits, [[1]])
    raises(ValueError, r"logits: expected \[batch_size \* N, vocab\] or \[batch_size, N, vocab\] with batch_size, "
           r"N = 2, 2 \(candidates\), got shape \(3, 40\)", distsample.verify, logits, np.zeros((2, 2), np.int32))
    raises(ValueError, r"candidates: expected a contiguous numpy array", distsample.verify, logits,
           np.zeros((3, 2), np.int32)[:, :1])
    raises(ValueError, r"tokens_per_req = 65: expected an integer in \[1, 64\]", distsample.verify,
           np.zeros((65, V), np.float32), np.zeros((1, 65), np.int32))


def test_thresholds_and_modes(logits):
    candidates = np.zeros((3, 1), np.int32)
    raises(ValueError, r"threshold_single = 1.5: expected a number in \[0, 1\]", distsample.verify, logits,
           candidates, threshold_single=1.5)
    raises(ValueError, r"threshold_acc = 0: expected a number in \(0, 1\]", distsample.verify, logits, candidates,
           threshold_acc=0.0)
    raises(TypeError, r"threshold_acc: expected a number, got ndarray", distsample.verify, logits, candidates,
           threshold_acc=np.ones(3, np.float32))
    raises(ValueError, r"logprobs = 'yes': expected None, 'raw' or 'processed'", distsample.sample, logits,
           logprobs="yes")
    raises(ValueError, r"logprobs = \['raw'\]: expected None", distsample.sample, logits, logprobs=["raw"])
    raises(TypeError, r"row_errors: expected True or False, got int", distsample.sample, logits, row_errors=1)
    raises(ValueError, r"stream: expected None for logits in host memory", distsample.sample, logits, stream=0)


def test_out(logits):
    tokens = np.empty(3, np.int32)
    assert distsample.sample(logits, temperature=0, out=tokens) is tokens
    assert tokens.tolist() == logits.argmax(axis=1).tolist()
    raises(TypeError, r"out \(tokens\): expected int32, got int64", distsample.sample, logits, out=np.empty(3, np.int64))
    raises(ValueError, r"out \(tokens\): expected shape \(3,\), got \(4,\)", distsample.sample, logits,
           out=np.empty(4, np.int32))
    raises(ValueError, r"out \(tokens\): expected a contiguous numpy array", distsample.sample, logits,
           out=np.empty(6, np.int32)[::2])
    raises(ValueError, r"out: expected 2 numpy arrays or None entries \(tokens, logprobs\), got 1", distsample.sample, logits,
           logprobs="raw", out=(tokens,))
    raises(ValueError, r"out \(row_errors\): expected shape", distsample.sample, logits, row_errors=True,
           out=(None, np.empty(2, np.uint8)))
    predict, accept_index = np.empty((3, 2), np.int32), np.empty((3, 2), np.int32)
    result = distsample.verify(np.repeat(logits, 2, axis=0), np.zeros((3, 2), np.int32),
                               out=(predict, accept_index, None))
    assert result[0] is predict and result[1] is accept_index and result[2].shape == (3,)


def test_empty_batch():
    tokens = distsample.sample(np.zeros((0, V), np.float32))
    assert tokens.shape == (0,) and tokens.dtype == np.int32


def test_sampler_arguments(logits):
    raises(ValueError, r"vocab_size = 0: expected an integer in \[1, 2\*\*31\)", distsample.Sampler, 0, 4)
    raises(ValueError, r"max_slots = 1: expected an integer in \[2, 2\*\*31\)", distsample.Sampler, V, 1)
    raises(ValueError, r"max_penalty_tokens = 0", distsample.Sampler, V, 4, max_penalty_tokens=0)
    raises(TypeError, r"device: expected 'cpu', 'cuda:N' or a torch.device, got int", distsample.Sampler, V, 4, 0)
    s = distsample.Sampler(V, 4, max_penalty_tokens=3, max_logit_bias=2)
    raises(ValueError, r"slot = 0: expected an integer in \[1, 3\] \(slot 0 is reserved\)", s.register, 0)
    raises(ValueError, r"slot = 4: expected an integer in \[1, 3\]", s.release, 4)
    raises(ValueError, r"top_p = 2: expected a number in \(0, 1\]", s.register, 1, top_p=2.0)
    raises(ValueError, r"seed = -9223372036854775809: expected an integer in \[0, 2\*\*64\)", s.register, 1, seed=-(1 << 63) - 1)
    raises(TypeError, r"temperature: expected a number, got ndarray", s.register, 1, temperature=np.ones(1))
    raises(ValueError, r"logit_bias: 3 entries, expected at most 2 \(max_logit_bias\)", s.register, 1,
           logit_bias={1: 1.0, 2: 1.0, 3: 1.0})
    raises(TypeError, r"logit_bias: expected a dict", s.register, 1, logit_bias=[1])
    raises(ValueError, r"logit_bias\[5\] = -101: expected a number in \[-100, 100\]", s.register, 1,
           logit_bias={5: -101})
    raises(ValueError, r"history\[1\] = 40: expected a token id in \[0, 40\)", s.register, 1, history=[1, 40])
    raises(ValueError, r"history: 4 distinct tokens, expected at most 3 \(max_penalty_tokens\)", s.register, 1,
           history=[1, 2, 3, 4])
    raises(TypeError, r"history: expected a list of token ids", s.register, 1, history="12")
    raises(ValueError, r"logits: expected vocab_size = 40 columns, got 39", s.sample, logits[:, :39], [1, 2, 3], 0)
    raises(ValueError, r"slots: expected 3 entries \(one per request\), got 2", s.sample, logits, [1, 2], 0)
    raises(ValueError, r"slots\[1\] = 4: expected an integer in \[0, 4\)", s.sample, logits, [1, 4, 0], 0)
    raises(TypeError, r"slots: expected int32, got int64", s.sample, logits, np.array([1, 2, 3]), 0)
    raises(ValueError, r"positions = -1: expected an integer in \[0, 2\*\*63\)", s.sample, logits, [1, 2, 3], -1)
    raises(ValueError, r"positions: expected shape \(3,\)", s.sample, logits, [1, 2, 3], np.zeros(2, np.int64))
    raises(ValueError, r"stream: expected None for logits in host memory", s.register, 1, stream=1)


def test_library_not_found(tmp_path):
    env = dict(os.environ, DISTSAMPLE_LIBRARY=str(tmp_path / "missing.so"))
    done = subprocess.run([sys.executable, "-c", "import distsample"], env=env, capture_output=True, text=True,
                          cwd=os.path.dirname(distsample.__path__[0]))
    assert done.returncode != 0
    assert f"distsample: no libdistsample.so at {tmp_path / 'missing.so'} (from DISTSAMPLE_LIBRARY)" in done.stderr
