"""Sampler: per-slot state (parameters, logit bias, seen-token counts) for engines that keep requests
across steps, in arrays it owns on its device; calls index them with the call's `slots`."""

import numbers
from collections import Counter

from . import _arrays, _call, _native
from ._arrays import describe, space_for

_REALS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
# Slot 0 and released slots: greedy, no penalties, no bias, nothing seen.
_NEUTRAL = {"temperature": 0.0, "top_p": 1.0, "min_p": 0.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
            "repetition_penalty": 1.0, "top_k": -1, "seed": 0}


def _positive(name, value, lo):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or not lo <= value < 1 << 31:
        raise ValueError(f"{name} = {value!r}: expected an integer in [{lo}, 2**31)")
    return int(value)


def _store(array, index, value):
    """array[index] = value; on a torch tensor as a fill of a one-element view, which a CUDA tensor
    takes as a kernel argument (an item assignment would copy the value from the host and wait)."""
    if hasattr(array, "fill_"):
        array[index:index + 1].fill_(value)
    else:
        array[index] = value


class Sampler:
    """Slots 1 .. max_slots - 1 hold requests (slot 0 is reserved: greedy and neutral, for padding
    rows). Each step's emitted tokens are added to the slots' seen-token counts (penalties) on the
    step's stream, so penalties follow the generated text without a host round trip.

    device: 'cpu' (numpy arrays; logits as numpy arrays or torch CPU tensors), or a torch device
    ('cuda:0', torch.device(...)). max_penalty_tokens: distinct tokens remembered per slot;
    max_logit_bias: biased tokens per slot."""

    def __init__(self, vocab_size, max_slots, device="cpu", max_penalty_tokens=4096, max_logit_bias=1024):
        self.vocab_size = _positive("vocab_size", vocab_size, 1)
        self.max_slots = _positive("max_slots", max_slots, 2)
        self.max_penalty_tokens = _positive("max_penalty_tokens", max_penalty_tokens, 1)
        self.max_logit_bias = _positive("max_logit_bias", max_logit_bias, 1)
        self._space = space = space_for(device)
        self.device = getattr(space, "device", "cpu")
        slots = self.max_slots
        self._params = {name: space.empty((slots,), "float32") for name in _REALS}
        self._params["top_k"] = space.empty((slots,), "int32")
        self._params["seed"] = space.empty((slots,), "int64")
        self._bias_tokens = space.zeros((slots, self.max_logit_bias), "int32")
        self._bias_values = space.zeros((slots, self.max_logit_bias), "float32")
        self._bias_sizes = space.zeros((slots,), "int32")
        self._seen_tokens = space.zeros((slots, self.max_penalty_tokens), "int32")
        self._seen_counts = space.zeros((slots, self.max_penalty_tokens), "int32")
        self._seen_sizes = space.zeros((slots,), "int32")
        for name, value in _NEUTRAL.items():
            self._params[name][:] = value
        pointer = space.pointer
        self._ptr = {name: pointer(array) for name, array in self._params.items()}
        self._bias = (pointer(self._bias_tokens), pointer(self._bias_values), 0, pointer(self._bias_sizes),
                      self.max_logit_bias)
        self._seen = (pointer(self._seen_tokens), pointer(self._seen_counts), 0, pointer(self._seen_sizes),
                      self.max_penalty_tokens)

    def _slot(self, slot):
        if not isinstance(slot, numbers.Integral) or isinstance(slot, bool) or not 1 <= slot < self.max_slots:
            raise ValueError(f"slot = {slot!r}: expected an integer in [1, {self.max_slots - 1}] (slot 0 is reserved)")
        return int(slot)

    def register(self, slot, *, temperature=1.0, top_k=-1, top_p=1.0, min_p=0.0, seed=0, presence_penalty=0.0,
                 frequency_penalty=0.0, repetition_penalty=1.0, logit_bias=None, history=None, stream=None):
        """Puts a request in `slot`: its parameters (numbers), its logit bias {token: bias} and the
        tokens it already has (history, for penalties). On a CUDA device the writes are enqueued on
        `stream` (the current stream by default), like the steps."""
        slot = self._slot(slot)
        values = {"temperature": temperature, "top_p": top_p, "min_p": min_p, "presence_penalty": presence_penalty,
                  "frequency_penalty": frequency_penalty, "repetition_penalty": repetition_penalty}
        reals = tuple(_call.real(name, values[name], _arrays.SCALARS, 1) for name in _REALS)
        k = _call.top_k(top_k, _arrays.SCALARS, 1)
        s = _call.seed(seed, _arrays.SCALARS, 1)
        _call.check_scalars(self.vocab_size, reals, k, s)
        bias = self._bias_entries(logit_bias)
        seen = self._history_counts(history)
        context, _ = self._space.context(stream)
        with context:
            for name, (scalar, _) in zip(_REALS, reals):
                _store(self._params[name], slot, scalar)
            _store(self._params["top_k"], slot, k[0])
            _store(self._params["seed"], slot, s[0])
            self._write_list("logit_bias", self._bias_tokens, self._bias_values, self._bias_sizes, slot, bias)
            self._write_list("history", self._seen_tokens, self._seen_counts, self._seen_sizes, slot, seen)

    def release(self, slot, *, stream=None):
        """Returns `slot` to slot 0's neutral state (greedy, no bias, nothing seen)."""
        slot = self._slot(slot)
        context, _ = self._space.context(stream)
        with context:
            for name, value in _NEUTRAL.items():
                _store(self._params[name], slot, value)
            _store(self._bias_sizes, slot, 0)
            _store(self._seen_sizes, slot, 0)

    def _bias_entries(self, logit_bias):
        if logit_bias is None:
            return {}
        if not isinstance(logit_bias, dict):
            raise TypeError(f"logit_bias: expected a dict {{token: bias}}, got {type(logit_bias).__name__}")
        if len(logit_bias) > self.max_logit_bias:
            raise ValueError(f"logit_bias: {len(logit_bias)} entries, expected at most {self.max_logit_bias} "
                             "(max_logit_bias)")
        for token, bias in logit_bias.items():
            _call.list_entry("logit_bias", token, bias, self.vocab_size, True)
        return logit_bias

    def _history_counts(self, history):
        if history is None:
            return {}
        if not isinstance(history, (list, tuple)):
            raise TypeError(f"history: expected a list of token ids, got {type(history).__name__}")
        for i, token in enumerate(history):
            if not isinstance(token, numbers.Integral) or isinstance(token, bool) or not 0 <= token < self.vocab_size:
                raise ValueError(f"history[{i}] = {token!r}: expected a token id in [0, {self.vocab_size})")
        counts = Counter(int(token) for token in history)
        if len(counts) > self.max_penalty_tokens:
            raise ValueError(f"history: {len(counts)} distinct tokens, expected at most {self.max_penalty_tokens} "
                             "(max_penalty_tokens)")
        return counts

    def _write_list(self, name, tokens, values, sizes, slot, entries):
        size = len(entries)
        if size:
            space = self._space
            tokens[slot, :size] = space.upload(name, list(entries.keys()), "int32")
            values[slot, :size] = space.upload(name, list(entries.values()), _arrays.dtype_name(values.dtype))
        _store(sizes, slot, size)

    def seen(self, slot):
        """{token: count} of `slot` (copied to the host: on CUDA this waits for the device)."""
        slot = self._slot(slot)
        space = self._space
        size = int(space.to_host(self._seen_sizes[slot:slot + 1])[0])
        tokens = space.to_host(self._seen_tokens[slot, :size]).tolist()
        counts = space.to_host(self._seen_counts[slot, :size]).tolist()
        return dict(zip(tokens, counts))

    def sample(self, logits, slots, positions, *, bitmask=None, logprobs=None, row_errors=False, out=None,
               stream=None):
        """One token per row of logits [batch_size, vocab_size] for the requests in `slots` (int32
        [batch_size], or a list), at `positions` (a number or int64 [batch_size]). Returns what
        distsample.sample returns; the emitted tokens are then added to the slots' seen counts."""
        return self._step(logits, None, slots, positions, bitmask, _call.EXACT, logprobs, row_errors, out, stream)

    def verify(self, logits, slots, positions, candidates, *, threshold_single=1.0, threshold_acc=1.0,
               bitmask=None, logprobs=None, row_errors=False, out=None, stream=None):
        """Chain verification of the drafts in candidates [batch_size, N] for the requests in `slots`;
        returns what distsample.verify returns. The accepted tokens are added to the seen counts."""
        return self._step(logits, candidates, slots, positions, bitmask, (threshold_single, threshold_acc), logprobs,
                          row_errors, out, stream)

    def _step(self, logits, candidates, slots, positions, bitmask, thresholds, logprobs, row_errors, out, stream):
        c = _call.Call(logits, candidates, stream)
        if c.space.on_device != self._space.on_device or (c.space.on_device and c.space.device != self.device):
            where = f"on {self.device}" if self._space.on_device else "in host memory"
            raise ValueError(f"logits: expected a {c.space.word} {where} like the Sampler's state, got "
                             f"{describe(logits)[4]}")
        if c.vocab != self.vocab_size:
            raise ValueError(f"logits: expected vocab_size = {self.vocab_size} columns, got {c.vocab}")
        with c.context:
            bs = c.batch_size
            if isinstance(slots, list):
                if len(slots) != bs:
                    raise ValueError(f"slots: expected {bs} entries (one per request), got {len(slots)}")
                for i, slot in enumerate(slots):
                    if not isinstance(slot, numbers.Integral) or not 0 <= slot < self.max_slots:
                        raise ValueError(f"slots[{i}] = {slot!r}: expected an integer in [0, {self.max_slots})")
                slots_ptr = c.upload("slots", slots, "int32")
            else:
                slots_ptr = c.space.array("slots", slots, ("int32",), (bs,))
            pos = _call.position("positions", positions, c.space, bs)
            ptr = self._ptr
            reals = tuple((0.0, ptr[name]) for name in _REALS)
            thresholds = _call.thresholds(thresholds)
            call, arrays, outputs = c.pack(
                reals, (0, ptr["top_k"]), (0, ptr["seed"]), pos, self._bias, self._seen, slots_ptr, self.max_slots,
                c.bitmask(bitmask), thresholds, 0, out, logprobs, row_errors)
            c.launch(call)
            predict, _, accept_length, _, row_error = outputs
            commit = _native.COMMIT_PACKER.pack(
                bs, c.n, slots_ptr, predict, accept_length, self._seen[0], self._seen[1], self._seen[3],
                self.max_penalty_tokens, self.max_slots, self.vocab_size, row_error, self._space.on_device)
            code = _native.LIB.ds_commit_tokens(commit, c.stream)
            if code:
                _native.raise_for(code)
        return _call.result(arrays)
