"""The package on numpy arrays against `distsample kernel sample|verify` (the CPU backend through its
slot pool) on random batches: every parameter as a scalar and per row, bitmask, logit bias, seen
lists from histories, ties, -inf and NaN logits, greedy and sampled rows, drafts."""

import json
import subprocess

import numpy as np
import pytest

import distsample
from cases import Case, log_softmax64

BATCHES = 130  # per kind: 260 batches in all


def run_cli(cli, case, logits):
    kind = "verify" if case.verify else "sample"
    done = subprocess.run([cli, "kernel", kind, "--backend", "cpu", "--threads", "1"], input=case.cli_json(logits),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def logits_variant(case, i):
    """The case's logits as float32 rows, float16 rows, rows with padding between them (a row
    stride) or, for verify, [batch_size, N, vocab]; and the float32 values the CLI must see."""
    x = case.logits
    variant = i % 4
    if variant == 1:
        half = x.astype(np.float16)
        return half, half.astype(np.float32)
    if variant == 2:
        wide = np.full((x.shape[0], x.shape[1] + 5), 7.0, np.float32)
        wide[:, :x.shape[1]] = x
        return wide[:, :x.shape[1]], x
    if variant == 3 and case.verify:
        return x.reshape(case.batch_size, case.n, case.vocab), x
    return x, x


def call(case, logits, i, **extra):
    kw = case.kwargs(csr=i % 2 == 1)
    kw.update(extra)
    if case.verify:
        return distsample.verify(logits, case.candidates, **kw)
    return distsample.sample(logits, **kw)


def assert_logprobs(actual, expected, tol):
    actual = np.asarray(actual, np.float64)
    expected = np.asarray([np.nan if v is None else v for v in expected], np.float64)
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    ok = ~np.isnan(actual)
    np.testing.assert_allclose(actual[ok], expected[ok], rtol=0, atol=tol)


@pytest.mark.parametrize("verify", [False, True], ids=["sample", "verify"])
def test_equals_cli(cli, verify):
    rng = np.random.default_rng(2024 + verify)
    emitted = greedy_rows = sampled_rows = flagged = accepted = 0
    for i in range(BATCHES):
        case = Case(rng, verify)
        logits, as_f32 = logits_variant(case, i)
        expected = run_cli(cli, case, as_f32)
        out = call(case, logits, i, logprobs="processed", row_errors=True)
        raw = call(case, logits, i, logprobs="raw")
        errors = out[-1]
        assert sorted(np.flatnonzero(errors).tolist()) == expected.get("row_errors", []), f"batch {i}"
        assert set(errors.tolist()) <= {0, 1}
        if verify:
            predict, accept_index, accept_length, logprobs = out[:4]
            assert predict.reshape(-1).tolist() == expected["predict"], f"batch {i}"
            assert accept_index.tolist() == expected["accept_index"], f"batch {i}"
            assert accept_length.tolist() == expected["accept_length"], f"batch {i}"
            np.testing.assert_array_equal(raw[0], predict)
            rows = accept_index.reshape(-1)
            tokens = predict.reshape(-1)
            accepted += int((accept_length - 1).sum())
        else:
            tokens, logprobs = out[:2]
            assert tokens.tolist() == expected["tokens"], f"batch {i}"
            np.testing.assert_array_equal(raw[0], tokens)
            rows = np.where(tokens >= 0, np.arange(case.batch_size), -1)
        assert_logprobs(logprobs.reshape(-1), expected["logprobs"], 1e-6)
        raw_logprobs = raw[-1].reshape(-1)
        kept = tokens >= 0
        np.testing.assert_allclose(raw_logprobs[kept], log_softmax64(as_f32)[rows[kept], tokens[kept]], rtol=0,
                                   atol=1e-5)
        assert np.isnan(raw_logprobs[~kept]).all()
        emitted += int(kept.sum())
        flagged += int(errors.astype(bool).sum())
        temperature = case.params["temperature"]
        greedy_rows += int(np.sum(np.asarray(temperature) == 0) * (1 if np.ndim(temperature) else case.batch_size))
        sampled_rows += int(np.sum(np.asarray(temperature) > 0) * (1 if np.ndim(temperature) else case.batch_size))
    assert emitted > BATCHES and flagged > 0 and greedy_rows > 50 and sampled_rows > 50
    assert accepted > 50 or not verify
