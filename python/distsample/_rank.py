"""distsample.WorkerRank: a tensor-parallel rank inside a model worker process, over
libdistsample_rank.so (include/distsample/distsample_rank_c.h; docs/deployment.md, Ranks inside
model workers). The library is loaded at the first join, so the sampling functions work without it."""

import atexit
import ctypes
import json
import numbers
import weakref

from . import _native
from ._arrays import describe, space_of
from ._call import logits_dtype, row_stride

ABI_VERSION = 1
_TIMEOUT = 4  # ds::status_code::timeout
_i32, _i64, _u64, _ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_void_p


class _Info(ctypes.Structure):
    _fields_ = [("rank", _i32), ("tp", _i32), ("vocab_size", _i32), ("max_batch", _i32), ("max_tokens_per_req", _i32)]


class _Step(ctypes.Structure):
    _fields_ = [("slots", _ptr), ("positions", _ptr), ("candidates", _ptr), ("id", _u64), ("kind", _i32),
                ("batch_size", _i32), ("tokens_per_req", _i32), ("vocab_begin", _i32), ("shard_vocab", _i32)]


class _Outputs(ctypes.Structure):
    _fields_ = [("predict", _ptr), ("accept_index", _ptr), ("logprobs", _ptr), ("accept_length", _ptr),
                ("row_error", _ptr), ("rows_capacity", _i64), ("requests_capacity", _i32), ("batch_size", _i32),
                ("tokens_per_req", _i32)]


_library = []  # the loaded library, once


def _lib():
    if not _library:
        lib, _ = _native.open_library("DISTSAMPLE_RANK_LIBRARY", "libdistsample_rank.so", "ds_rank_abi_version",
                                      ABI_VERSION)
        lib.ds_rank_join.argtypes = [ctypes.c_char_p, ctypes.c_char_p, _i32, _i64, ctypes.POINTER(_ptr)]
        lib.ds_rank_describe.argtypes = [_ptr, ctypes.POINTER(_Info)]
        lib.ds_rank_next_step.argtypes = [_ptr, _i64, ctypes.POINTER(_Step)]
        lib.ds_rank_provide_logits.argtypes = [_ptr, _u64, _ptr, _i32, _i32, _i64, _i32, _i64]
        lib.ds_rank_outputs.argtypes = [_ptr, _u64, _i64, ctypes.POINTER(_Outputs)]
        lib.ds_rank_leave.argtypes = [_ptr]
        lib.ds_rank_leave.restype = None
        lib.ds_rank_last_error.restype = ctypes.c_char_p
        _library.append(lib)
    return _library[0]


def _check(code):
    if code:
        _native.raise_with(code, _lib().ds_rank_last_error())


def _integer(name, value, bits=64, unsigned=False):
    """`value` as an integer the C type holds (ctypes would wrap it silently), or ValueError naming `name`."""
    lo, hi = (0, (1 << bits) - 1) if unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or not lo <= value <= hi:
        raise ValueError(f"{name} = {value!r}: expected an integer in [{lo}, {hi}]")
    return int(value)


class Step:
    """A step whose logits the rank waits for: rows b * N + j of request b (j = 0 .. N-1) follow its
    context (`slots`, `positions`) and, for j > 0, its drafts 1..j (`candidates`, verify only; None
    for sample). Only vocab ids [vocab_begin, vocab_begin + shard_vocab) are this rank's."""

    __slots__ = ("id", "kind", "batch_size", "tokens_per_req", "slots", "positions", "candidates", "vocab_begin",
                 "shard_vocab")

    def __init__(self, raw, slots, positions, candidates):
        self.id, self.batch_size, self.tokens_per_req = raw.id, raw.batch_size, raw.tokens_per_req
        self.kind = "verify" if raw.kind == 1 else "sample"
        bs, n = raw.batch_size, raw.tokens_per_req
        self.slots, self.positions = slots[:bs].copy(), positions[:bs].copy()
        self.candidates = candidates[:bs * n].reshape(bs, n).copy() if self.kind == "verify" else None
        self.vocab_begin, self.shard_vocab = raw.vocab_begin, raw.shard_vocab

    def __repr__(self):
        return (f"Step(id={self.id}, kind={self.kind!r}, batch_size={self.batch_size}, "
                f"tokens_per_req={self.tokens_per_req}, vocab_begin={self.vocab_begin}, "
                f"shard_vocab={self.shard_vocab})")


class Outputs:
    """The tokens the group agreed on for a step, over its batch_size requests of N rows: predict and
    accept_index int32 [batch_size, N] (-1 after the emitted tokens), accept_length int32
    [batch_size], logprobs float32 [batch_size, N], row_errors uint8 [batch_size] (DS_ROW_*)."""

    __slots__ = ("predict", "accept_index", "accept_length", "logprobs", "row_errors")

    def __init__(self, predict, accept_index, accept_length, logprobs, row_errors):
        self.predict, self.accept_index, self.accept_length = predict, accept_index, accept_length
        self.logprobs, self.row_errors = logprobs, row_errors


_open_ranks = weakref.WeakSet()


@atexit.register
def _leave_open_ranks():
    """A rank still in its group at exit leaves it first: its threads must not outlive the interpreter."""
    for rank in list(_open_ranks):
        rank.close()


class WorkerRank:
    """Rank `rank` of a tensor-parallel group whose coordinator (`distsample coordinator` with
    topology.logits_source = worker) samples every step with the ranks inside the model workers.
    Made by WorkerRank.join; close() (or a with block) leaves the group."""

    def __init__(self, handle, numpy):
        self._np = numpy
        self._handle = handle
        info = _Info()
        _check(_lib().ds_rank_describe(handle, ctypes.byref(info)))
        self.rank, self.tp, self.vocab_size = info.rank, info.tp, info.vocab_size
        self.max_batch, self.max_tokens_per_req = info.max_batch, info.max_tokens_per_req
        rows = info.max_batch * info.max_tokens_per_req
        self._step_buffers = (numpy.empty(info.max_batch, numpy.int32), numpy.empty(info.max_batch, numpy.int64),
                              numpy.empty(rows, numpy.int32))
        self._held = None  # (step id, shard): the rank reads the shard until the step settles
        _open_ranks.add(self)

    @classmethod
    def join(cls, coordinator, rank, config=None, *, logits_timeout_ms=5000):
        """Joins the coordinator at `coordinator` ("HOST:PORT") as rank `rank`, within the config's
        topology.join_timeout_ms. `config`: the coordinator's config keys as a dict (the config
        file's shape: the group's keys at the top, {"topology": {"logits_source": "worker"}}) or
        as JSON text. A step whose logits are not handed in within logits_timeout_ms fails."""
        import numpy  # the steps' and outputs' arrays: missing, it must fail before the join

        text = config if isinstance(config, str) else json.dumps({} if config is None else config)
        handle = _ptr()
        _check(_lib().ds_rank_join(text.encode(), str(coordinator).encode(), _integer("rank", rank, 32),
                                   _integer("logits_timeout_ms", logits_timeout_ms), ctypes.byref(handle)))
        return cls(handle, numpy)

    def _live_handle(self):
        if self._handle is None:
            raise _native.DistsampleError(f"rank {self.rank}: this WorkerRank is closed")
        return self._handle

    def next_step(self, timeout_ms=1000):
        """The next step, or None when none comes within timeout_ms. DistsampleError once the rank
        has left the group (its coordinator is gone or evicted it)."""
        slots, positions, candidates = self._step_buffers
        raw = _Step(slots.ctypes.data, positions.ctypes.data, candidates.ctypes.data)
        code = _lib().ds_rank_next_step(self._live_handle(), _integer("timeout_ms", timeout_ms), ctypes.byref(raw))
        if code == _TIMEOUT:
            return None
        _check(code)
        return Step(raw, slots, positions, candidates)

    def provide_logits(self, step_id, shard):
        """Hands in step `step_id`'s shard: [batch_size * N, shard_vocab] logits, rows evenly spaced
        with contiguous elements: a numpy array (float32, float16) or a torch tensor (float32,
        bfloat16, float16; on the CPU, or on CUDA with the cuda backend, where the current stream is
        synchronized first, as the rank reads it at once). It is kept until the step settles. This
        thread runs the rank's part of the step (kernels, collectives, its answer; the GIL is
        released meanwhile) before the call returns; the outcome comes from outputs()."""
        d = describe(shard)
        if d is None:
            raise TypeError(f"shard: expected a torch tensor or a numpy array, got {type(shard).__name__}")
        ptr, dtype, shape, strides, location = d
        space = space_of(shard)
        code = logits_dtype("shard", dtype, space.word)
        if len(shape) != 2:
            raise ValueError(f"shard: expected a 2-D [batch_size * N, shard_vocab] {space.word}, got shape "
                             f"{tuple(shape)}")
        rows, vocab = shape
        stride = vocab if strides is None else row_stride(shape, strides, vocab, "shard")
        if space.on_device:
            import torch

            torch.cuda.current_stream(location).synchronize()
        _check(_lib().ds_rank_provide_logits(self._live_handle(), _integer("step_id", step_id, unsigned=True), ptr,
                                             code, int(space.on_device), rows, _integer("shard_vocab", vocab, 32),
                                             stride))
        self._held = (step_id, shard)  # the rank is done with the previous step's shard: it took this step

    def outputs(self, step_id, timeout_ms=5000):
        """Step `step_id`'s Outputs once the coordinator commits them; the step's error (DistsampleError)
        when it failed, or when none comes within timeout_ms."""
        np = self._np
        rows = self.max_batch * self.max_tokens_per_req
        predict, accept_index = np.empty(rows, np.int32), np.empty(rows, np.int32)
        logprobs = np.empty(rows, np.float32)
        accept_length, row_errors = np.empty(self.max_batch, np.int32), np.empty(self.max_batch, np.uint8)
        raw = _Outputs(predict.ctypes.data, accept_index.ctypes.data, logprobs.ctypes.data, accept_length.ctypes.data,
                       row_errors.ctypes.data, rows, self.max_batch)
        _check(_lib().ds_rank_outputs(self._live_handle(), _integer("step_id", step_id, unsigned=True),
                                      _integer("timeout_ms", timeout_ms), ctypes.byref(raw)))
        if self._held is not None and self._held[0] == step_id:
            self._held = None
        bs, n = raw.batch_size, raw.tokens_per_req
        return Outputs(predict[:bs * n].reshape(bs, n), accept_index[:bs * n].reshape(bs, n), accept_length[:bs],
                       logprobs[:bs * n].reshape(bs, n), row_errors[:bs])

    def close(self):
        """Leaves the group (once; later calls do nothing)."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            _lib().ds_rank_leave(handle)
            _open_ranks.discard(self)
            self._held = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
