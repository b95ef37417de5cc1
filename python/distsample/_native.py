"""libdistsample.so through ctypes: the structs of include/distsample/distsample_c.h, the library's
functions, and the one place a failed call becomes a Python exception."""

import ctypes
import os
import struct

ABI_VERSION = 1

DTYPE_F32, DTYPE_BF16, DTYPE_F16 = 0, 1, 2
LOGPROBS = {None: 0, "raw": 1, "processed": 2}
ROW_OK, ROW_NOTHING_ALLOWED, ROW_INVALID_PARAMS, ROW_KERNEL_FAULT = 0, 1, 2, 3
_INVALID_ARGUMENT = 1  # ds::status_code::invalid_argument

_i32, _i64, _f32, _ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p


def _param(scalar):
    class Param(ctypes.Structure):
        _fields_ = [("scalar", scalar), ("values", _ptr)]

    return Param


ParamF32, ParamI32, ParamI64 = _param(_f32), _param(_i32), _param(_i64)


class TokenList(ctypes.Structure):
    _fields_ = [("tokens", _ptr), ("values", _ptr), ("offsets", _ptr), ("sizes", _ptr), ("stride", _i32)]


class Call(ctypes.Structure):
    """ds_call, field for field."""

    _fields_ = [
        ("logits", _ptr), ("dtype", _i32), ("on_device", _i32), ("vocab", _i32), ("row_stride", _i64),
        ("batch_size", _i32), ("tokens_per_req", _i32),
        ("temperature", ParamF32), ("top_p", ParamF32), ("min_p", ParamF32), ("presence_penalty", ParamF32),
        ("frequency_penalty", ParamF32), ("repetition_penalty", ParamF32),
        ("top_k", ParamI32), ("seed", ParamI64), ("positions", ParamI64),
        ("logit_bias", TokenList), ("seen", TokenList),
        ("slots", _ptr), ("num_slots", _i32), ("candidates", _ptr), ("bitmask", _ptr),
        ("threshold_single", _f32), ("threshold_acc", _f32), ("logprobs", _i32), ("all_greedy_hint", _i32),
        ("predict", _ptr), ("accept_index", _ptr), ("accept_length", _ptr), ("logprobs_out", _ptr),
        ("row_error", _ptr),
    ]  # fmt: skip


class Commit(ctypes.Structure):
    """ds_commit, field for field."""

    _fields_ = [
        ("batch_size", _i32), ("tokens_per_req", _i32), ("slots", _ptr), ("predict", _ptr),
        ("accept_length", _ptr), ("seen_tokens", _ptr), ("seen_counts", _ptr), ("seen_sizes", _ptr),
        ("capacity", _i32), ("max_slots", _i32), ("vocab", _i32), ("row_error", _ptr), ("on_device", _i32),
    ]  # fmt: skip


def _packer(struct_type):
    """A struct.Struct that writes every leaf field of `struct_type`, in declaration order, at the
    offsets ctypes gives them: one pack makes a call's bytes, which the library's functions take
    as the struct's address (filling a ctypes instance costs more, field by field several times
    more, and this runs on every call)."""
    codes = {_i32: "i", _i64: "q", _f32: "f", _ptr: "Q"}
    fmt, at = "<", 0

    def walk(cls, base):
        nonlocal fmt, at
        for name, ftype in cls._fields_:
            offset = base + getattr(cls, name).offset
            if issubclass(ftype, ctypes.Structure):
                walk(ftype, offset)
                continue
            fmt += "x" * (offset - at) + codes[ftype]
            at = offset + ctypes.sizeof(ftype)

    walk(struct_type, 0)
    fmt += "x" * (ctypes.sizeof(struct_type) - at)
    packer = struct.Struct(fmt)
    assert packer.size == ctypes.sizeof(struct_type)
    return packer


CALL_PACKER = _packer(Call)
COMMIT_PACKER = _packer(Commit)


class DistsampleError(RuntimeError):
    """A call into libdistsample failed for a reason other than a bad argument."""


def open_library(env_var, file_name, version_function, version):
    """(ctypes library, path) of `file_name`: $env_var when set, else the one inside the package."""
    path, origin = os.environ.get(env_var), env_var
    if not path:
        path, origin = os.path.join(os.path.dirname(os.path.abspath(__file__)), file_name), "the package"
    if not os.path.isfile(path):
        raise ImportError(
            f"distsample: no {file_name} at {path} (from {origin}); install the package with "
            f"`pip install ./python` from the repository, or set {env_var} to a built {file_name}"
        )
    lib = ctypes.CDLL(path)
    found = getattr(lib, version_function)()
    if found != version:
        raise ImportError(f"distsample: {path} has C ABI version {found}, this package expects {version}")
    return lib, path


def _load():
    lib, path = open_library("DISTSAMPLE_LIBRARY", "libdistsample.so", "ds_abi_version", ABI_VERSION)
    lib.ds_has_cuda.restype = ctypes.c_int
    # a ds_call or ds_commit is passed as its bytes (CALL_PACKER.pack, COMMIT_PACKER.pack)
    lib.ds_workspace_bytes.argtypes = [_ptr]
    lib.ds_workspace_bytes.restype = ctypes.c_size_t
    for name in ("ds_sample", "ds_verify"):
        fn = getattr(lib, name)
        fn.argtypes = [_ptr, _ptr, ctypes.c_size_t, _ptr]
        fn.restype = ctypes.c_int
    lib.ds_commit_tokens.argtypes = [_ptr, _ptr]
    lib.ds_commit_tokens.restype = ctypes.c_int
    lib.ds_last_error.restype = ctypes.c_char_p
    return lib, path


LIB, LIBRARY_PATH = _load()
SAMPLE, VERIFY = LIB.ds_sample, LIB.ds_verify


def raise_with(code, message):
    """Raises the exception of a non-zero status code with `message` (bytes from a library)."""
    message = message.decode("utf-8", "replace")
    if code == _INVALID_ARGUMENT:
        raise ValueError(message)
    raise DistsampleError(message)


def raise_for(code):
    """Raises the exception of a non-zero status code of libdistsample, with its message."""
    raise_with(code, LIB.ds_last_error())
