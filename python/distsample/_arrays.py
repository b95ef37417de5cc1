"""Where a call runs and the arrays it points at: host memory (numpy arrays or torch CPU tensors) or
one CUDA device (torch tensors). numpy and torch are used only when the caller brings them."""

import contextlib
import operator
import sys

_NO_CONTEXT = contextlib.nullcontext()
_DTYPE_NAMES = {}


def dtype_name(dtype):
    """'float32' for numpy's and torch's float32 alike."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES.setdefault(dtype, str(dtype).rpartition(".")[2])
    return name


def _is_ndarray(x):
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


def _is_tensor(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def describe(x):
    """(pointer, dtype name, shape, strides in elements, location) of a numpy array or torch tensor,
    or None for anything else. strides is None for a contiguous array (row-major; dimensions of
    size 1 step by anything), the location 'cpu' or the tensor's device."""
    if _is_tensor(x):
        return x.data_ptr(), dtype_name(x.dtype), x.shape, None if x.is_contiguous() else x.stride(), x.device
    if _is_ndarray(x):
        if x.flags.c_contiguous:
            strides = None
        else:
            size = x.itemsize
            strides = tuple(s // size if s % size == 0 else 0 for s in x.strides)
        return x.ctypes.data, dtype_name(x.dtype), x.shape, strides, "cpu"
    return None


def _dtypes_text(dtypes):
    return dtypes[0] if len(dtypes) == 1 else ", ".join(dtypes[:-1]) + " or " + dtypes[-1]


class Space:
    """What one call's arrays must be like, and how it allocates: from the logits (space_of) or a
    Sampler's device (space_for)."""

    on_device = False
    array_type = None  # the type of this space's arrays

    def where_text(self):
        raise NotImplementedError

    def holds(self, location):
        raise NotImplementedError

    def array(self, name, x, dtypes, shape, scalar=None):
        """The pointer of a contiguous array `x` of this space with one of `dtypes` and `shape`;
        TypeError or ValueError naming `name` otherwise (`scalar`: what else `x` may be, a number
        for a per-row parameter, in the message when `x` is not an array at all)."""
        d = describe(x)
        if d is None:
            what = (f"{scalar} or a {self.word} of {shape[0]} {dtypes[0]} values (one per row)" if scalar
                    else f"a {self.word} {self.where_text()}")
            raise TypeError(f"{name}: expected {what}, got {type(x).__name__}")
        ptr, dtype, xshape, strides, location = d
        if not self.holds(location):
            raise ValueError(f"{name}: expected a {self.word} {self.where_text()} like logits, got {location}")
        if dtype not in dtypes:
            raise TypeError(f"{name}: expected {_dtypes_text(dtypes)}, got {dtype}")
        if tuple(xshape) != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {tuple(xshape)}")
        if strides is not None:
            raise ValueError(f"{name}: expected a contiguous {self.word} (strides {tuple(strides)} for shape {shape})")
        return ptr

    def host_values(self, x):
        """The values of a host array (for checks that keep pointers in bounds), or None on a device."""
        return None

    def context(self, stream):
        """(context manager, raw stream handle) for a call on `stream` (None: the current stream)."""
        if stream is not None:
            raise ValueError(f"stream: expected None for logits in host memory (CPU calls are synchronous), got {stream!r}")
        return _NO_CONTEXT, None

    def workspace(self, nbytes, stream=None):
        """(owner, pointer aligned to 256 bytes) of at least nbytes of scratch for a call on
        `stream`."""
        if self.on_device:  # CUDA allocations are 256-byte aligned; checked all the same
            owner = self.empty((max(nbytes, 1),), "uint8")
            ptr = self.pointer(owner)
            if ptr % 256 == 0:
                return owner, ptr
        owner = self.empty((nbytes + 255,), "uint8")
        return owner, (self.pointer(owner) + 255) & ~255


class _Scalars(Space):
    """Where parameters must be numbers (a Sampler's register): arrays are refused."""

    def array(self, name, x, dtypes, shape, scalar=None):
        raise TypeError(f"{name}: expected {scalar}, got {type(x).__name__}")


SCALARS = _Scalars()


class NumpySpace(Space):
    """Host memory; allocates numpy arrays. Takes numpy arrays and torch CPU tensors."""

    word = "numpy array"

    def __init__(self):
        import numpy

        self._np = numpy
        self.array_type = numpy.ndarray

    def where_text(self):
        return "in host memory"

    def holds(self, location):
        return location == "cpu" or getattr(location, "type", None) == "cpu"

    pointer = operator.attrgetter("ctypes.data")  # of an array this space allocated

    def empty(self, shape, dtype):
        return self._np.empty(shape, dtype=dtype)

    def zeros(self, shape, dtype):
        return self._np.zeros(shape, dtype=dtype)

    def upload(self, name, values, dtype):
        return self._np.array(values, dtype=dtype)

    def host_values(self, x):
        return self._np.asarray(x) if _is_ndarray(x) else x.numpy()

    def to_host(self, x):
        return x


class TorchSpace(Space):
    """torch tensors on one device (CPU or CUDA); allocations go through torch's allocators."""

    word = "tensor"

    def __init__(self, device):
        import torch

        self._torch = torch
        self.device = device
        self.on_device = device.type == "cuda"
        self._dtypes = {name: getattr(torch, name) for name in ("float32", "int32", "int64", "uint8")}  # what it makes
        self._dtypes_of = {}  # dtype names -> torch dtypes, for the fast path of array()
        self.array_type = torch.Tensor
        self.pointer = torch.Tensor.data_ptr
        if self.on_device:
            torch.cuda.init()
            self._index = device.index if device.index is not None else torch.cuda.current_device()
            self.device = torch.device("cuda", self._index)
            # torch's own bindings where this torch has them: torch.cuda's functions wrap them in more Python
            self._current_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
            self._capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", torch.cuda.is_current_stream_capturing)
            self._workspaces = {}  # raw stream handle -> (owner, pointer)
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            self._current_stream = raw if raw is not None else (
                lambda index: torch.cuda.current_stream(index).cuda_stream)

    def where_text(self):
        return f"on {self.device}"

    def holds(self, location):
        if self.on_device:
            return location == self.device
        return location == "cpu" or getattr(location, "type", None) == "cpu"

    def empty(self, shape, dtype):
        # torch.empty takes the size of one dimension as an int faster than as a tuple
        return self._torch.empty(shape[0] if len(shape) == 1 else shape, dtype=self._dtypes[dtype], device=self.device)

    def zeros(self, shape, dtype):
        return self._torch.zeros(shape, dtype=self._dtypes[dtype], device=self.device)

    def workspace(self, nbytes, stream=None):
        """On CUDA, outside a graph capture, one workspace per stream is kept and reused: calls on
        one stream run one after another, so none can still be using it (clear_workspaces frees
        them). A capture gets its own, which the graph keeps."""
        if not self.on_device or self._capturing():
            return Space.workspace(self, nbytes)
        kept = self._workspaces.get(stream)
        if kept is None or kept[0].numel() < nbytes:
            kept = Space.workspace(self, nbytes)
            self._workspaces[stream] = kept
        return kept

    def clear_workspaces(self):
        self._workspaces.clear()

    def upload(self, name, values, dtype):
        torch = self._torch
        if not self.on_device:
            return torch.tensor(values, dtype=self._dtypes[dtype])
        if torch.cuda.is_current_stream_capturing():
            raise ValueError(
                f"{name}: Python lists cannot be uploaded inside a CUDA graph capture; pass tensors on {self.device}"
            )
        host = torch.tensor(values, dtype=self._dtypes[dtype], pin_memory=True)
        return host.to(self.device, non_blocking=True)

    def array(self, name, x, dtypes, shape, scalar=None):
        if type(x) is self.array_type and x.device == self.device and x.shape == shape and x.is_contiguous():
            dtype = self._dtypes_of.get(dtypes)
            if dtype is None:
                dtype = self._dtypes_of[dtypes] = tuple(getattr(self._torch, d, None) for d in dtypes)
            if x.dtype in dtype:
                return x.data_ptr()
        return Space.array(self, name, x, dtypes, shape, scalar)

    def host_values(self, x):
        if self.on_device:
            return None
        return x.numpy() if _is_tensor(x) else x

    def to_host(self, x):
        return x.cpu()

    def context(self, stream):
        if not self.on_device:
            return Space.context(self, stream)
        torch = self._torch
        if stream is None:
            if self._current_device() == self._index:
                return _NO_CONTEXT, self._current_stream(self._index)
            return torch.cuda.device(self._index), self._current_stream(self._index)
        if isinstance(stream, int) and not isinstance(stream, bool):
            stream = torch.cuda.ExternalStream(stream, device=self.device)
        elif not isinstance(stream, torch.cuda.Stream):
            raise TypeError(f"stream: expected None, a torch.cuda.Stream or a cudaStream_t handle (int), got {type(stream).__name__}")
        if stream.device != self.device:
            raise ValueError(f"stream: expected a stream of {self.device} like logits, got one of {stream.device}")
        return torch.cuda.stream(stream), stream.cuda_stream


_spaces = {}


def _cached(key, make, *args):
    space = _spaces.get(key)
    if space is None:
        space = _spaces[key] = make(*args)
    return space


def _torch_space_of(device):
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"logits: expected a tensor on the CPU or a CUDA device, got {device}")
    return _cached(device, TorchSpace, device)


def clear_workspaces():
    """Frees the workspaces kept per CUDA stream (the next call on a stream allocates again)."""
    for space in _spaces.values():
        if isinstance(space, TorchSpace) and space.on_device:
            space.clear_workspaces()


def space_of(logits):
    """The space of a call whose logits are `logits`."""
    if _is_tensor(logits):
        device = logits.device
        return _spaces.get(device) or _torch_space_of(device)
    if _is_ndarray(logits):
        return _cached("numpy", NumpySpace)
    raise TypeError(f"logits: expected a torch tensor or a numpy array, got {type(logits).__name__}")


def space_for(device):
    """A Sampler's space: numpy arrays for the string 'cpu', torch tensors for a torch.device or a
    CUDA device name."""
    if isinstance(device, str) and device == "cpu":
        return _cached("numpy", NumpySpace)
    if isinstance(device, str) or type(device).__name__ == "device":
        import torch

        try:
            device = torch.device(device)
        except RuntimeError as e:
            raise ValueError(f"device = {device!r}: expected 'cpu', 'cuda' or 'cuda:N' ({e})") from None
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"device = {device}: expected 'cpu', 'cuda' or 'cuda:N'")
        return _cached(device, TorchSpace, device)
    raise TypeError(f"device: expected 'cpu', 'cuda:N' or a torch.device, got {type(device).__name__}")
