"""distsample.Sampler (per-slot state, seen counts committed after each step) against the functional
API given the same parameters per row and the seen lists kept here in Python."""

from collections import Counter, defaultdict

import numpy as np

import distsample

V = 300
REQUESTS = {
    1: dict(temperature=0.8, top_p=0.9, seed=11, presence_penalty=1.5, frequency_penalty=0.5,
            logit_bias={3: 2.0, 7: -100.0}, history=[1, 2, 2, 5]),
    2: dict(temperature=0.0, repetition_penalty=1.8, history=[9, 9]),
    3: dict(temperature=1.3, top_k=20, min_p=0.05, seed=(1 << 64) - 5, repetition_penalty=0.7,
            frequency_penalty=-0.5),
    4: dict(temperature=0.6, top_k=5, seed=4, presence_penalty=0.5, logit_bias={10: 100.0, 11: 3.0, 12: -2.0}),
}  # fmt: skip
NEUTRAL = dict(temperature=0.0)
PARAMS = ("temperature", "top_k", "top_p", "min_p", "seed", "presence_penalty", "frequency_penalty",
          "repetition_penalty")
DEFAULTS = dict(temperature=1.0, top_k=-1, top_p=1.0, min_p=0.0, seed=0, presence_penalty=0.0,
                frequency_penalty=0.0, repetition_penalty=1.0)
DTYPES = dict(temperature=np.float32, top_k=np.int32, top_p=np.float32, min_p=np.float32, seed=np.uint64,
              presence_penalty=np.float32, frequency_penalty=np.float32, repetition_penalty=np.float32)


class Mirror:
    """What the Sampler should hold, kept in Python: parameters, bias and seen counts per slot."""

    def __init__(self):
        self.params = {}
        self.bias = {}
        self.seen = defaultdict(Counter)

    def register(self, slot, request):
        self.params[slot] = {name: request.get(name, DEFAULTS[name]) for name in PARAMS}
        self.bias[slot] = dict(request.get("logit_bias", {}))
        self.seen[slot] = Counter(request.get("history", []))

    def release(self, slot):
        self.register(slot, NEUTRAL)

    def kwargs(self, slots):
        kw = {name: np.array([self.params.get(s, {**DEFAULTS, **NEUTRAL})[name] for s in slots], DTYPES[name])
              for name in PARAMS}
        kw["logit_bias"] = [self.bias.get(s, {}) for s in slots]
        kw["seen"] = [dict(self.seen.get(s, {})) for s in slots]
        return kw

    def commit(self, slots, tokens):
        for slot, emitted in zip(slots, tokens):
            if slot != 0:
                self.seen[slot].update(int(t) for t in emitted if t >= 0)


def test_sampler_equals_functional_api():
    rng = np.random.default_rng(7)
    sampler = distsample.Sampler(V, 6, max_penalty_tokens=64, max_logit_bias=16)
    mirror = Mirror()
    for slot, request in REQUESTS.items():
        sampler.register(slot, **request)
        mirror.register(slot, request)
    repeated = 0
    for step in range(24):
        if step == 12:
            sampler.release(2)
            mirror.release(2)
            assert sampler.seen(2) == {}
        slots = [int(s) for s in rng.permutation([0, 1, 2, 3, 4, 5])[:rng.integers(2, 7)]]
        bs = len(slots)
        positions = rng.integers(0, 1000, size=bs).astype(np.int64)
        kw = mirror.kwargs(slots)
        if step % 2 == 0:
            logits = (rng.standard_normal((bs, V)) * 3).astype(np.float32)
            expected = distsample.sample(logits, position=positions, logprobs="processed", **kw)
            actual = sampler.sample(logits, np.array(slots, np.int32), positions, logprobs="processed")
            emitted = expected[0][:, None]
        else:
            n = int(rng.integers(2, 5))
            logits = (rng.standard_normal((bs * n, V)) * 3).astype(np.float32)
            candidates = logits.argmax(axis=1).reshape(bs, n).astype(np.int32)
            candidates[:, 1:] = candidates[:, :-1]
            expected = distsample.verify(logits, candidates, position=positions, logprobs="processed", **kw)
            actual = sampler.verify(logits, slots, positions, candidates, logprobs="processed")
            emitted = [row[:length] for row, length in zip(expected[0], expected[2])]
        for a, e in zip(actual, expected):
            np.testing.assert_array_equal(a, e)
        mirror.commit(slots, emitted)
        for slot in range(1, 6):
            assert sampler.seen(slot) == dict(mirror.seen.get(slot, {})), f"step {step} slot {slot}"
        repeated = max(repeated, max((max(c.values(), default=0) for c in mirror.seen.values()), default=0))
    assert repeated >= 4  # counts grew with the commits


def test_released_slot_is_neutral():
    sampler = distsample.Sampler(V, 3)
    sampler.register(1, temperature=1.0, seed=3, logit_bias={5: 100.0}, history=[1, 1])
    logits = np.random.default_rng(0).standard_normal((1, V)).astype(np.float32)
    assert sampler.sample(logits, [1], 0).tolist() == [5]
    sampler.release(1)
    assert sampler.seen(1) == {}
    assert sampler.sample(logits, [1], 0).tolist() == [int(logits.argmax())]
    assert sampler.sample(logits, [0], 0).tolist() == [int(logits.argmax())]
    assert sampler.seen(1) == {int(logits.argmax()): 1}


def test_full_seen_list_flags_the_row():
    sampler = distsample.Sampler(V, 3, max_penalty_tokens=2)
    sampler.register(1, temperature=0.0, history=[4, 5])
    logits = np.zeros((1, V), np.float32)
    logits[0, 9] = 5.0
    tokens, errors = sampler.sample(logits, [1], 0, row_errors=True)
    assert tokens.tolist() == [9] and errors.tolist() == [distsample.ROW_INVALID_PARAMS]
    assert sampler.seen(1) == {4: 1, 5: 1}
    tokens, errors = sampler.sample(logits, [1], 0, row_errors=True)
    assert errors.tolist() == [distsample.ROW_INVALID_PARAMS]
    sampler.register(1, temperature=0.0, history=[9])
    assert sampler.sample(logits, [1], 0, row_errors=True)[1].tolist() == [0]
    assert sampler.seen(1) == {9: 2}
