"""One ds_sample / ds_verify call: the caller's arguments checked and turned into a ds_call, the
outputs and the workspace allocated, the library called."""

import math
import numbers

from . import _native
from ._arrays import describe, space_of

_INT32_MAX = (1 << 31) - 1
_FLT_MAX = 3.4028234663852886e38
NO_LIST = (0, 0, 0, 0, 0)
EXACT = (1.0, 1.0)  # threshold_single and threshold_acc of exact rejection sampling, and of sample()
_workspace_bytes = {}  # (on_device, batch_size, N, vocab, cut) -> bytes


def _float32(value):
    """A number as the float32 the library reads; beyond float32's range, an infinity (which every
    range check refuses) rather than struct's OverflowError."""
    value = float(value)
    return value if not abs(value) > _FLT_MAX else math.copysign(math.inf, value)


# The parameter converters run for every parameter of every call: they take the common cases first,
# a Python number of the exact type and an array of the space's own type, which skips isinstance
# against the numbers ABCs (that costs more than the rest of a check).


def real(name, value, space, n):
    """(scalar, pointer) of a float parameter: a number, or a float32 array of n values in `space`
    (SCALARS: a number only)."""
    if (type(value) is float or type(value) is int) and -_FLT_MAX <= value <= _FLT_MAX:
        return value, 0
    if type(value) is not space.array_type and isinstance(value, numbers.Real):
        return _float32(value), 0
    return 0.0, space.array(name, value, ("float32",), (n,), "a number")


def _integer(name, value, space, n, dtypes, lo, hi, expected):
    """(scalar, pointer) of an integer parameter in [lo, hi], or an array of n values of `dtypes`."""
    if type(value) is not space.array_type and isinstance(value, numbers.Real):  # an Integral is a Real
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise TypeError(f"{name} = {value!r}: expected an integer")
        value = int(value)
        if not lo <= value <= hi:
            raise ValueError(f"{name} = {value}: expected {expected}")
        return value, 0
    return 0, space.array(name, value, dtypes, (n,), "an integer")


def seed(value, space, n):
    """The 64 bits of a seed as an int64, or an int64 (or uint64) array of n seeds."""
    if type(value) is int and 0 <= value < 1 << 63:
        return value, 0
    scalar, ptr = _integer("seed", value, space, n, ("int64", "uint64"), -(1 << 63), (1 << 64) - 1,
                           "an integer in [0, 2**64) (or a negative int64)")
    return (scalar - (1 << 64) if scalar >= 1 << 63 else scalar), ptr


def top_k(value, space, n):
    if type(value) is int and -(1 << 31) <= value <= _INT32_MAX:
        return value, 0
    return _integer("top_k", value, space, n, ("int32",), -(1 << 31), _INT32_MAX,
                    "-1 (no limit) or an integer in [1, 2**31)")


def position(name, value, space, n):
    if type(value) is int and 0 <= value < 1 << 63:
        return value, 0
    return _integer(name, value, space, n, ("int64",), 0, (1 << 63) - 1, "an integer in [0, 2**63)")


def _threshold(name, value):
    if type(value) is float and -_FLT_MAX <= value <= _FLT_MAX:
        return value
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return _float32(value)
    raise TypeError(f"{name}: expected a number, got {type(value).__name__}")


def thresholds(values):
    """(threshold_single, threshold_acc) as float32 numbers; EXACT, which sample() passes, as it is."""
    if values is EXACT:
        return values
    return _threshold("threshold_single", values[0]), _threshold("threshold_acc", values[1])


_LOGITS_DTYPES = {"float32": _native.DTYPE_F32, "bfloat16": _native.DTYPE_BF16, "float16": _native.DTYPE_F16}


def logits_dtype(name, dtype, space_word):
    """The DS_DTYPE_* of logits of `dtype` (a name) in a space of `space_word`, or TypeError naming `name`."""
    code = _LOGITS_DTYPES.get(dtype)
    if code is None or (dtype == "bfloat16" and space_word == "numpy array"):
        expected = ("float32, bfloat16 or float16" if space_word == "tensor"
                    else "float32 or float16 (bfloat16 only as a torch tensor)")
        raise TypeError(f"{name}: expected {expected}, got {dtype}")
    return code


def row_stride(shape, strides, vocab, name="logits"):
    """Elements between logits rows: every dimension but the last must step by whole rows."""
    if 0 in shape:
        return vocab
    if vocab > 1 and strides[-1] != 1:
        raise ValueError(f"{name}: expected the last dimension contiguous (stride 1), got strides {tuple(strides)}")
    row_stride, inner = None, 1
    for size, stride in zip(reversed(shape[:-1]), reversed(strides[:-1])):
        if size != 1:
            if row_stride is None:
                row_stride = stride
            elif stride != row_stride * inner:
                raise ValueError(f"{name}: expected evenly spaced rows, got strides {tuple(strides)} for shape "
                                 f"{tuple(shape)}")
        inner *= size
    if row_stride is None:
        return vocab
    if row_stride < vocab:
        raise ValueError(f"{name}: expected rows at least vocab = {vocab} elements apart, got strides "
                         f"{tuple(strides)}")
    return row_stride


def list_entry(name, token, value, vocab, bias):
    if not isinstance(token, numbers.Integral) or isinstance(token, bool) or not 0 <= token < vocab:
        raise ValueError(f"{name}: token {token!r} expected an integer in [0, {vocab})")
    if bias:
        if not isinstance(value, numbers.Real) or not -100.0 <= value <= 100.0:
            raise ValueError(f"{name}[{token}] = {value!r}: expected a number in [-100, 100]")
    elif not isinstance(value, numbers.Integral) or not 1 <= value <= _INT32_MAX:
        raise ValueError(f"{name}[{token}] = {value!r}: expected a count in [1, 2**31)")


class Call:
    """A call being built: its space, logits and shape, and the arrays made for it."""

    __slots__ = ("space", "context", "stream", "keep", "logits", "dtype", "candidates", "batch_size", "n", "vocab",
                 "row_stride", "workspace", "workspace_size")

    def __init__(self, logits, candidates, stream):
        self.space = space = space_of(logits)  # the logits' own: they are where the call runs
        self.context, self.stream = space.context(stream)
        self.keep = []  # arrays made here that the call points at
        ptr, dtype, shape, strides, _ = describe(logits)
        self.dtype = logits_dtype("logits", dtype, space.word)
        self.candidates = 0
        if candidates is None:
            if len(shape) != 2:
                raise ValueError(f"logits: expected a 2-D [batch_size, vocab] {space.word}, got shape {tuple(shape)}")
            self.batch_size, self.n = shape[0], 1
        else:
            cd = describe(candidates)
            if cd is None or len(cd[2]) != 2:
                got = type(candidates).__name__ if cd is None else f"shape {tuple(cd[2])}"
                raise ValueError(f"candidates: expected a 2-D [batch_size, N] int32 {space.word}, got {got}")
            self.batch_size, self.n = cd[2]
            self.candidates = space.array("candidates", candidates, ("int32",), (self.batch_size, self.n))
            rows = self.batch_size * self.n
            if not (len(shape) == 2 and shape[0] == rows or len(shape) == 3 and shape[:2] == (self.batch_size, self.n)):
                raise ValueError(f"logits: expected [batch_size * N, vocab] or [batch_size, N, vocab] with "
                                 f"batch_size, N = {self.batch_size}, {self.n} (candidates), got shape {tuple(shape)}")
        self.vocab = shape[-1]
        self.logits = ptr
        self.row_stride = self.vocab if strides is None else row_stride(shape, strides, self.vocab)

    def upload(self, name, values, dtype):
        array = self.space.upload(name, values, dtype)
        self.keep.append(array)
        return self.space.pointer(array)

    def token_list(self, name, value, values_dtype):
        """A ds_token_list of per-request lists: a list of dicts {token: value} (one per request) or a
        CSR tuple (offsets, tokens, values)."""
        space, n = self.space, self.batch_size
        if isinstance(value, tuple):
            if len(value) != 3:
                raise ValueError(f"{name}: expected a tuple (offsets, tokens, values), got {len(value)} entries")
            offsets, tokens, values = value
            td = describe(tokens)
            if td is None or len(td[2]) != 1:
                raise ValueError(f"{name}: expected 1-D int32 tokens in (offsets, tokens, values)")
            count = td[2][0]
            o = space.array(f"{name} offsets", offsets, ("int32",), (n + 1,))
            t = space.array(f"{name} tokens", tokens, ("int32",), (count,))
            v = space.array(f"{name} values", values, (values_dtype,), (count,))
            host = space.host_values(offsets)
            if host is not None and n > 0 and (int(host.min()) < 0 or int(host.max()) > count):
                raise ValueError(f"{name} offsets: expected values in [0, {count}] (the number of tokens)")
            return (t, v, o, 0, 0) if count > 0 else NO_LIST
        if not isinstance(value, list):
            raise TypeError(f"{name}: expected None, a list of dicts {{token: value}} (one per request) or a tuple "
                            f"(offsets, tokens, values), got {type(value).__name__}")
        if len(value) != n:
            raise ValueError(f"{name}: expected {n} entries (one per request), got {len(value)}")
        offsets, tokens, values = [0], [], []
        bias = values_dtype == "float32"
        for i, entries in enumerate(value):
            if entries is not None:
                if not isinstance(entries, dict):
                    raise TypeError(f"{name}[{i}]: expected a dict {{token: value}} or None, got "
                                    f"{type(entries).__name__}")
                for token, v in entries.items():
                    list_entry(f"{name}[{i}]", token, v, self.vocab, bias)
                    tokens.append(token)
                    values.append(v)
            offsets.append(len(tokens))
        if not tokens:
            return NO_LIST
        return (self.upload(name, tokens, "int32"), self.upload(name, values, values_dtype),
                self.upload(name, offsets, "int32"), 0, 0)

    def bitmask(self, value):
        if value is None:
            return 0
        words = (self.vocab + 31) // 32
        d = describe(value)
        shape = (self.batch_size, self.n, words) if d is not None and len(d[2]) == 3 and self.candidates else \
            (self.batch_size * self.n, words)
        return self.space.array("bitmask", value, ("int32", "uint32"), shape)

    def outputs(self, out, logprobs, row_errors, names):
        """The output arrays (from `out`, or allocated) and their pointers, in the order of the
        result: `names`, then logprobs when asked for, then row_errors when asked for."""
        if not (logprobs is None or isinstance(logprobs, str)) or logprobs not in _native.LOGPROBS:
            raise ValueError(f"logprobs = {logprobs!r}: expected None, 'raw' or 'processed'")
        if row_errors is not False and row_errors is not True:
            raise TypeError(f"row_errors: expected True or False, got {type(row_errors).__name__}")
        bs, n, space = self.batch_size, self.n, self.space
        if out is None and logprobs is None and not row_errors and not self.candidates:
            tokens = space.empty((bs,), "int32")
            return [tokens], [space.pointer(tokens)], 0
        per_token = (bs,) if self.candidates == 0 else (bs, n)
        specs = [(name, per_token if name != "accept_length" else (bs,), "int32") for name in names]
        if logprobs is not None:
            specs.append(("logprobs", per_token, "float32"))
        if row_errors:
            specs.append(("row_errors", (bs,), "uint8"))
        if out is None:
            arrays = [space.empty(shape, dtype) for _, shape, dtype in specs]
            return arrays, [space.pointer(a) for a in arrays], _native.LOGPROBS[logprobs]
        if len(specs) == 1 and not isinstance(out, (tuple, list)):
            out = [out]
        if not isinstance(out, (tuple, list)) or len(out) != len(specs):
            expected = ", ".join(name for name, _, _ in specs)
            raise ValueError(f"out: expected {len(specs)} {space.word}s or None entries ({expected}), got "
                             f"{len(out) if isinstance(out, (tuple, list)) else type(out).__name__}")
        arrays, pointers = [], []
        for (name, shape, dtype), array in zip(specs, out):
            if array is None:
                array = space.empty(shape, dtype)
                pointers.append(space.pointer(array))
            else:
                pointers.append(space.array(f"out ({name})", array, (dtype,), shape))
            arrays.append(array)
        return arrays, pointers, _native.LOGPROBS[logprobs]

    def pack(self, reals, k, s, positions, bias, seen, slots, num_slots, bitmask, thresholds, hint, out, logprobs,
             row_errors):
        """The ds_call, with its outputs (allocated, or taken from `out`) and its workspace. Returns the
        call, the arrays of the result and the output pointers (predict, accept_index,
        accept_length, logprobs, row_error; 0 for none)."""
        bs = self.batch_size
        names = ("predict", "accept_index", "accept_length") if self.candidates else ("tokens",)
        arrays, ptrs, mode = self.outputs(out, logprobs, row_errors, names)
        # Per-row top-k, top-p or min-p, or a filter in the scalars: the workspace holds the filters'
        # candidate lists.
        cut = k != (-1, 0) or reals[1] != (1.0, 0) or reals[2] != (0.0, 0)
        nbytes = workspace_bytes(self.space.on_device, bs, self.n, self.vocab, cut)
        if self.candidates:
            self.workspace = self.space.workspace(nbytes, self.stream)
            outputs = ptrs[:3]
        else:  # accept_index and accept_length, which sample() does not return, after the workspace
            at = (nbytes + 255) & ~255
            self.workspace = self.space.workspace(at + 8 * bs, self.stream)
            outputs = [ptrs[0], self.workspace[1] + at, self.workspace[1] + at + 4 * bs]
        self.workspace_size = nbytes
        outputs += [ptrs[len(names)] if mode else 0, ptrs[-1] if row_errors else 0]
        call = _native.CALL_PACKER.pack(
            self.logits, self.dtype, self.space.on_device, self.vocab, self.row_stride, bs, self.n,
            *reals[0], *reals[1], *reals[2], *reals[3], *reals[4], *reals[5], *k, *s, *positions, *bias, *seen, slots,
            num_slots, self.candidates, bitmask, thresholds[0], thresholds[1], mode, hint, *outputs)
        return call, arrays, outputs

    @property
    def function(self):
        """ds_verify or ds_sample."""
        return _native.VERIFY if self.candidates else _native.SAMPLE

    def launch(self, call):
        """Runs the packed call (on CUDA: enqueues it on the stream). The workspace is released after:
        the allocator is stream-ordered, so it hands the memory out again only behind this work."""
        code = self.function(call, self.workspace[1], self.workspace_size, self.stream)
        self.workspace = None
        if code:
            _native.raise_for(code)

    def with_params(self, temperature, top_k_, top_p, min_p, seed_, position_, presence_penalty, frequency_penalty,
                    repetition_penalty, logit_bias, seen, bitmask, thresholds_, logprobs, row_errors, out):
        """The packed call of sample() and verify() (every parameter a scalar or one value per
        request) and the arrays of its result."""
        space, bs = self.space, self.batch_size
        reals = (real("temperature", temperature, space, bs), real("top_p", top_p, space, bs),
                 real("min_p", min_p, space, bs), real("presence_penalty", presence_penalty, space, bs),
                 real("frequency_penalty", frequency_penalty, space, bs),
                 real("repetition_penalty", repetition_penalty, space, bs))
        k = top_k(top_k_, space, bs)
        s = seed(seed_, space, bs)
        positions = position("position", position_, space, bs)
        bias = NO_LIST if logit_bias is None else self.token_list("logit_bias", logit_bias, "float32")
        seen_list = NO_LIST if seen is None else self.token_list("seen", seen, "int32")
        mask = self.bitmask(bitmask)
        greedy = reals[0] == (0.0, 0) or k == (1, 0)
        hint = greedy and reals[3] == (0.0, 0) and reals[4] == (0.0, 0) and reals[5] == (1.0, 0) and bias == NO_LIST
        call, arrays, _ = self.pack(reals, k, s, positions, bias, seen_list, 0, 0, mask, thresholds(thresholds_),
                                    int(hint), out, logprobs, row_errors)
        return call, arrays


def result(arrays):
    return arrays[0] if len(arrays) == 1 else tuple(arrays)


_DEFAULT_REALS = ((1.0, 0), (1.0, 0), (0.0, 0), (0.0, 0), (0.0, 0), (1.0, 0))
_SOMEWHERE = 256  # a non-null address for the pointers of a call that is only checked, never run


def _checked_call(vocab, on_device, batch_size, n, reals=_DEFAULT_REALS, k=(-1, 0), s=(0, 0)):
    """A ds_call of this shape and these scalars whose arrays are never read: for
    ds_workspace_bytes, and for the checks of an empty call."""
    p = _SOMEWHERE if batch_size else 0
    return _native.CALL_PACKER.pack(
        p, _native.DTYPE_F32, on_device, vocab, vocab, batch_size, n, *reals[0], *reals[1], *reals[2],
        *reals[3], *reals[4], *reals[5], *k, *s, 0, 0, *NO_LIST, *NO_LIST, 0, 0, p if n > 1 else 0, 0, 1.0, 1.0, 0,
        0, p, p, p, 0, 0)


def workspace_bytes(on_device, batch_size, n, vocab, cut):
    """ds_workspace_bytes of a call of this shape (with `cut`: whose requests may have a top-k or
    top-p cut), remembered (0 for a shape the library refuses)."""
    key = (on_device, batch_size, n, vocab, cut)
    nbytes = _workspace_bytes.get(key)
    if nbytes is None:
        k = (-1, _SOMEWHERE) if cut else (-1, 0)  # a per-row top-k: any cut is possible
        nbytes = _native.LIB.ds_workspace_bytes(_checked_call(vocab, on_device, batch_size, n, k=k))
        if nbytes:
            if len(_workspace_bytes) > 4096:
                _workspace_bytes.clear()
            _workspace_bytes[key] = nbytes
    return nbytes


def check_scalars(vocab, reals, k, s):
    """Checks parameter scalars as a call would (an empty call on the host), for a Sampler's register."""
    code = _native.LIB.ds_sample(_checked_call(vocab, 0, 0, 1, reals, k, s), None, 0, None)
    if code:
        _native.raise_for(code)


def call_with_params(logits, candidates, temperature, top_k_, top_p, min_p, seed_, position_, presence_penalty,
                     frequency_penalty, repetition_penalty, logit_bias, seen, bitmask, thresholds, logprobs, row_errors,
                     out, stream):
    """sample() and verify(): Call.with_params's arguments after the logits and candidates, then the stream."""
    c = Call(logits, candidates, stream)
    with c.context:
        call, arrays = c.with_params(temperature, top_k_, top_p, min_p, seed_, position_, presence_penalty,
                                     frequency_penalty, repetition_penalty, logit_bias, seen, bitmask, thresholds,
                                     logprobs, row_errors, out)
        c.launch(call)
    return result(arrays)
