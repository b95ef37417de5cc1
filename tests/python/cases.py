"""Random sampling and verification batches for the package's tests: the same batch as keyword
arguments of distsample.sample / distsample.verify and as the JSON of `distsample kernel`. numpy
only, so the GPU tests can use it with nothing but torch, numpy and pytest."""

import json
import math
from collections import Counter

import numpy as np

REALS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
PARAMS = REALS + ("top_k", "seed", "position")
_DTYPES = {"temperature": np.float32, "top_p": np.float32, "min_p": np.float32, "presence_penalty": np.float32,
           "frequency_penalty": np.float32, "repetition_penalty": np.float32, "top_k": np.int32, "seed": np.uint64,
           "position": np.int64}


def _f32(x):
    return float(np.float32(x))


def _draw_param(rng, name, vocab):
    """One value of a parameter, as the kernel reads it (float32-exact floats)."""
    if name == "temperature":
        return [0.0, _f32(rng.uniform(0.05, 2.0)), 1.0][rng.integers(3)]
    if name == "top_k":
        return int([-1, 1, rng.integers(1, vocab + 3)][rng.integers(3)])
    if name == "top_p":
        return [1.0, _f32(rng.uniform(0.05, 1.0))][rng.integers(2)]
    if name == "min_p":
        return [0.0, _f32(rng.uniform(0.0, 0.6))][rng.integers(2)]
    if name in ("presence_penalty", "frequency_penalty"):
        return [0.0, _f32(rng.uniform(-2.0, 2.0))][rng.integers(2)]
    if name == "repetition_penalty":
        return [1.0, _f32(rng.uniform(0.3, 3.0))][rng.integers(2)]
    if name == "seed":
        return int(rng.integers(0, 1 << 64, dtype=np.uint64))
    return int(rng.integers(0, 1 << 40))  # position


def _logits(rng, rows, vocab):
    kind = rng.integers(4)
    if kind == 0:
        x = rng.standard_normal((rows, vocab)) * rng.uniform(0.5, 6.0)
    elif kind == 1:  # ties everywhere
        x = rng.integers(-3, 3, size=(rows, vocab)).astype(np.float64)
    elif kind == 2:  # a few dominant tokens
        x = rng.standard_normal((rows, vocab))
        x[:, rng.integers(vocab, size=3)] += 8.0
    else:  # Zipf-shaped
        x = -1.1 * np.log1p(rng.permuted(np.tile(np.arange(vocab, dtype=np.float64), (rows, 1)), axis=1))
    x = x.astype(np.float32)
    if rng.random() < 0.4:
        x[rng.random((rows, vocab)) < 0.1] = -np.inf
    if rng.random() < 0.3:
        x[rng.random((rows, vocab)) < 0.05] = np.nan
    if rng.random() < 0.1:
        x[rng.integers(rows)] = -np.inf  # a row that allows nothing
    return x


class Case:
    """One random batch. `params[name]` is a number for the whole batch or an array of one value
    per request; lists are per-request dicts (or None)."""

    def __init__(self, rng, verify, vocab=None):
        self.vocab = vocab = int(vocab or rng.choice([1, 2, 31, 32, 33, 100, 257, 1000, 2048]))
        self.batch_size = bs = int(rng.integers(1, 7))
        self.n = n = int(rng.integers(1, 5)) if verify else 1
        self.verify = verify
        self.logits = _logits(rng, bs * n, vocab)
        self.params = {}
        for name in PARAMS:
            if rng.random() < 0.5:
                self.params[name] = _draw_param(rng, name, vocab)
            else:
                values = [_draw_param(rng, name, vocab) for _ in range(bs)]
                self.params[name] = np.array(values, dtype=_DTYPES[name])
        self.logit_bias = None
        if rng.random() < 0.4:
            self.logit_bias = [
                {int(t): _f32(rng.choice([-100.0, 100.0, rng.uniform(-5, 5)])) for t in
                 rng.integers(vocab, size=rng.integers(0, 4))} if rng.random() < 0.7 else None
                for _ in range(bs)]
        self.history = None
        if rng.random() < 0.5:
            self.history = [[int(t) for t in rng.integers(min(vocab, 20), size=rng.integers(0, 12))] for _ in range(bs)]
        self.bitmask = None
        if rng.random() < 0.3:
            words = (vocab + 31) // 32
            bits = rng.random((bs * n, words * 32)) < rng.uniform(0.2, 1.0)
            bits[:, vocab:] = False
            if rng.random() < 0.2:
                bits[rng.integers(bs * n)] = False
            self.bitmask = np.packbits(bits, axis=1, bitorder="little").view(np.uint32).reshape(bs * n, words)
        self.candidates = None
        self.thresholds = (1.0, 1.0)
        if verify:
            c = rng.integers(vocab, size=(bs, n)).astype(np.int32)
            greedy_drafts = np.nan_to_num(self.logits, nan=-np.inf).argmax(axis=1).reshape(bs, n)
            follow = rng.random((bs, n)) < 0.6  # drafts the target likes, so chains get accepted
            c[:, 1:] = np.where(follow[:, 1:], greedy_drafts[:, :-1], c[:, 1:])
            self.candidates = c
            if rng.random() < 0.3:
                self.thresholds = (_f32(rng.uniform(0, 1)), _f32(rng.uniform(0.05, 1)))

    def value(self, name, b):
        v = self.params[name]
        return v if not isinstance(v, np.ndarray) else v[b].item()

    def seen(self):
        return None if self.history is None else [dict(Counter(h)) for h in self.history]

    def kwargs(self, csr=False):
        """Keyword arguments of distsample.sample / verify (numpy arrays); lists as dicts or CSR."""
        kw = {name: v for name, v in self.params.items()}
        kw["logit_bias"] = self.logit_bias
        kw["seen"] = self.seen()
        if csr:
            kw["logit_bias"] = to_csr(self.logit_bias, np.float32)
            kw["seen"] = to_csr(kw["seen"], np.int32)
        kw["bitmask"] = self.bitmask
        if self.verify:
            kw["threshold_single"], kw["threshold_acc"] = self.thresholds
        return kw

    def cli_json(self, logits=None):
        logits = self.logits if logits is None else logits
        rows = [[None if math.isnan(v) else (-1e31 if v == -math.inf else v) for v in row]
                for row in logits.astype(np.float32).tolist()]
        requests = []
        for b in range(self.batch_size):
            r = {name: self.value(name, b) for name in PARAMS}
            if self.logit_bias is not None and self.logit_bias[b]:
                r["logit_bias"] = {str(t): v for t, v in self.logit_bias[b].items()}
            if self.history is not None:
                r["history"] = self.history[b]
            requests.append(r)
        doc = {"vocab_size": self.vocab, "logits": rows, "requests": requests}
        if self.bitmask is not None:
            doc["bitmask"] = self.bitmask.view(np.int32).tolist()
        if self.verify:
            doc["candidates"] = self.candidates.tolist()
            doc["threshold_single"], doc["threshold_acc"] = self.thresholds
        return json.dumps(doc)


def to_csr(lists, dtype):
    """(offsets, tokens, values) numpy arrays of per-request dicts, or None."""
    if lists is None:
        return None
    offsets, tokens, values = [0], [], []
    for entries in lists:
        for t, v in (entries or {}).items():
            tokens.append(t)
            values.append(v)
        offsets.append(len(tokens))
    return np.array(offsets, np.int32), np.array(tokens, np.int32), np.array(values, dtype)


def log_softmax64(logits):
    """float64 log_softmax of each row, NaN counted as -inf."""
    x = np.where(np.isnan(logits), -np.inf, logits.astype(np.float64))
    top = x.max(axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return x - top - np.log(np.exp(x - top).sum(axis=1, keepdims=True))
