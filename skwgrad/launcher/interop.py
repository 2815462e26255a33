"""Array interop: what ``skwgrad.wgrad`` and ``Plan.__call__`` accept, described uniformly.

Accepted: torch tensors (CUDA or ROCm builds; CPU tensors are copied like numpy), CuPy arrays,
any object with ``__cuda_array_interface__`` or ``__dlpack__`` (device memory), and numpy arrays
(copied to the device and back). dtypes: float16, bfloat16, float32.

Streams: a DLPack producer is handed the consumer's stream (``__dlpack__(stream=...)``), so it
orders its own work before ours; a ``__cuda_array_interface__`` producer that names its stream
(v3 ``stream``) gets an event wait from our stream on its stream (``ArrayView.producer_stream``).
How the arrays are read as a convolution (the layout rule) is ``skwgrad.launcher.layout``.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import numpy as np

from skwgrad.abi.conv import DTYPE_BYTES
from skwgrad.errors import ProblemError


@dataclass
class ArrayView:
    obj: object
    kind: str  # torch | cupy | cai | dlpack | numpy | torch-cpu
    ptr: int  # device pointer, or host address for host arrays
    shape: tuple
    strides: tuple  # in elements
    dtype: str
    device: int | None  # device ordinal; None for host arrays or unknown (CAI)
    backend_kind: str | None = None  # "cuda" | "hip" when the array says
    readonly: bool = False
    keep: object = field(default=None, repr=False)
    producer_stream: int | None = None  # CAI v3 stream the producer wrote on (None: nothing to wait for)

    @property
    def host(self) -> bool:
        return self.kind in ("numpy", "torch-cpu")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * DTYPE_BYTES[self.dtype]


def contiguous_strides(shape):
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


def _torch_dtype_name(t) -> str | None:
    import torch

    return {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}.get(t.dtype)


def _np_dtype_name(dt) -> str | None:
    dt = np.dtype(dt)
    if dt == np.float16:
        return "fp16"
    if dt == np.float32:
        return "fp32"
    if dt.name == "bfloat16":  # ml_dtypes
        return "bf16"
    return None


_TYPESTR = {"<f2": "fp16", "<f4": "fp32", "|f2": "fp16", "|f4": "fp32"}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_ROCM = 1, 2, 3, 10
_DL_DTYPES = {(2, 16): "fp16", (2, 32): "fp32", (4, 16): "bf16"}


def _dlpack_stream(stream: int, rocm: bool):
    """The DLPack ``stream=`` value for our stream: on CUDA 0 is not allowed and 1 is the legacy
    default stream (the NULL stream); on ROCm 0 is the default stream."""
    return stream if (stream or rocm) else 1


def _dlpack_view(obj, name: str, stream: int | None) -> ArrayView:
    capsule = None
    if stream is not None and hasattr(obj, "__dlpack_device__"):
        try:
            dev_type, _ = obj.__dlpack_device__()
            capsule = obj.__dlpack__(stream=_dlpack_stream(stream, int(dev_type) == _DL_ROCM))
        except TypeError:  # a producer older than the stream handshake
            capsule = None
    if capsule is None:
        capsule = obj.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    try:
        addr = get(capsule, b"dltensor")
    except ValueError:
        raise ProblemError(f"{name}: __dlpack__ returned a capsule skwgrad cannot read (not a 'dltensor')") from None
    t = _DLManagedTensor.from_address(addr).dl_tensor
    code = (t.dtype.code, t.dtype.bits)
    if t.dtype.lanes != 1 or code not in _DL_DTYPES:
        raise ProblemError(f"{name}: DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits) is not float16, bfloat16 or float32")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else contiguous_strides(shape)
    dt = t.device.device_type
    if dt not in (_DL_CUDA, _DL_ROCM):
        raise ProblemError(f"{name}: DLPack device type {dt} is not CUDA or ROCm device memory; pass a numpy array for host data")
    return ArrayView(
        obj, "dlpack", int(t.data or 0) + int(t.byte_offset), shape, strides, _DL_DTYPES[code], int(t.device.device_id),
        backend_kind="hip" if dt == _DL_ROCM else "cuda", keep=capsule,
    )  # fmt: skip



def _element_strides(name: str, arr) -> tuple[int, ...]:
    """Byte strides of a numpy/CuPy array in elements (refused unless whole elements)."""
    item = arr.dtype.itemsize
    if any(st % item for st in arr.strides):
        raise ProblemError(f"{name}: strides {arr.strides} are not whole elements")
    return tuple(st // item for st in arr.strides)

def view(obj, name: str, stream: int | None = None) -> ArrayView:
    """Describe ``obj`` (one of the accepted array kinds); raise ``ProblemError`` otherwise.
    ``stream``: the stream the launch will use, handed to DLPack producers."""
    mod = type(obj).__module__.split(".", 1)[0]
    if mod == "torch":
        import torch

        if isinstance(obj, torch.Tensor):
            dt = _torch_dtype_name(obj)
            if dt is None:
                raise ProblemError(f"{name} has dtype {obj.dtype}; skwgrad takes torch.float16, torch.bfloat16 or torch.float32")
            if obj.device.type == "cpu":
                return ArrayView(obj, "torch-cpu", 0, tuple(obj.shape), tuple(obj.stride()), dt, None)
            if obj.device.type != "cuda":
                raise ProblemError(f"{name} is on {obj.device}; skwgrad takes CUDA/ROCm tensors (or CPU tensors, copied)")
            kind = "hip" if getattr(torch.version, "hip", None) else "cuda"
            return ArrayView(
                obj, "torch", obj.data_ptr(), tuple(obj.shape), tuple(obj.stride()), dt, obj.device.index or 0, backend_kind=kind
            )
    if mod == "cupy":
        import cupy

        if isinstance(obj, cupy.ndarray):
            dt = _np_dtype_name(obj.dtype)
            if dt is None:
                raise ProblemError(f"{name} has dtype {obj.dtype}; skwgrad takes float16, bfloat16 or float32")
            kind = "hip" if getattr(cupy.cuda.runtime, "is_hip", False) else "cuda"
            return ArrayView(
                obj, "cupy", int(obj.data.ptr), tuple(obj.shape), _element_strides(name, obj), dt, obj.device.id,
                backend_kind=kind,
            )  # fmt: skip
    if isinstance(obj, np.ndarray):
        dt = _np_dtype_name(obj.dtype)
        if dt is None:
            raise ProblemError(f"{name} has dtype {obj.dtype}; skwgrad takes float16, bfloat16 (ml_dtypes) or float32")
        return ArrayView(obj, "numpy", int(obj.ctypes.data), tuple(obj.shape), _element_strides(name, obj), dt, None,
                         readonly=not obj.flags.writeable)  # fmt: skip
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        typestr = cai.get("typestr", "")
        dt = _TYPESTR.get(typestr)
        if dt is None:
            raise ProblemError(f"{name}: __cuda_array_interface__ typestr {typestr!r} is not float16 or float32")
        shape = tuple(cai["shape"])
        item = DTYPE_BYTES[dt]
        strides = cai.get("strides")
        strides = tuple(s // item for s in strides) if strides else contiguous_strides(shape)
        ptr, ro = cai["data"]
        ps = cai.get("stream")
        if ps is not None and (not isinstance(ps, int) or isinstance(ps, bool) or ps == 0):
            raise ProblemError(f"{name}: __cuda_array_interface__ stream {ps!r} is not a stream handle (0 is not allowed)")
        return ArrayView(obj, "cai", int(ptr or 0), shape, strides, dt, None, readonly=bool(ro), producer_stream=ps)
    if hasattr(obj, "__dlpack__"):
        return _dlpack_view(obj, name, stream)
    raise ProblemError(
        f"{name} is a {type(obj).__module__}.{type(obj).__name__}; skwgrad takes torch tensors, CuPy arrays, "
        f"__cuda_array_interface__ / DLPack device arrays or numpy arrays"
    )


def device_of(views, backend_kind: str | None = None) -> tuple[int | None, str | None]:
    """The one device ordinal (and runtime) the device arrays among ``views`` live on. Host and
    device arrays are not mixed in one call (PyTorch refuses that too): the copy would be silent."""
    hosts = [v.host for v in views]
    if any(hosts) and not all(hosts):
        where = ", ".join(f"{n}: {'host' if v.host else 'device'}" for n, v in zip(("x", "dy", "out"), views))
        raise ProblemError(f"x, dy and out must all be device arrays or all host arrays ({where}); move them to one place")
    devs = {(v.device, v.backend_kind) for v in views if not v.host and v.device is not None}
    if len({d for d, _ in devs}) > 1:
        names = ", ".join(f"{n}: device {v.device}" for n, v in zip(("x", "dy", "out"), views) if not v.host)
        raise ProblemError(f"the arrays are on different devices ({names}); put x, dy and out on one device")
    kinds = {k for _, k in devs if k}
    if len(kinds) > 1:
        raise ProblemError(f"the arrays come from different runtimes ({', '.join(sorted(kinds))})")
    dev = next(iter(devs))[0] if devs else None
    return dev, (next(iter(kinds)) if kinds else backend_kind)


def check_cai_devices(views, backend) -> None:
    """Arrays known only by pointer: ask the runtime where they live."""
    for name, v in zip(("x", "dy", "out"), views):
        if v.host or v.device is not None:
            continue
        if not v.ptr:
            raise ProblemError(f"{name} has a null data pointer")
        d = backend.pointer_device(v.ptr)
        if d is not None and d != backend.device:
            raise ProblemError(f"{name} is on device {d}; the other arrays are on device {backend.device}")




def stream_of(views, stream) -> int:
    """The launch stream: ``stream`` when given (an int handle, a torch/CuPy stream object),
    else the current stream of the torch or CuPy inputs, else the default stream (0)."""
    if stream is not None:
        return stream_int(stream)
    for v in views:
        if v.kind == "torch":
            return current_torch_stream(v.device)
        if v.kind == "cupy":
            import cupy

            return int(cupy.cuda.get_current_stream().ptr)
    return 0


def current_torch_stream(device: int) -> int:
    """torch's current stream on ``device`` as a raw handle, without building a Stream object."""
    import torch

    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if get is not None:
        return int(get(device))
    return int(torch.cuda.current_stream(device).cuda_stream)


def stream_int(stream) -> int:
    if stream is None:
        return 0
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise ProblemError(f"stream {stream!r}: pass an int handle, a torch/CuPy stream or None") from None
