"""Tensor interop: what ``skwgrad.wgrad`` and ``Plan.__call__`` accept and return.

Accepted arrays: torch tensors (CUDA or ROCm builds; CPU tensors are copied like numpy), CuPy
arrays, any object with ``__cuda_array_interface__`` or ``__dlpack__`` (device memory), and numpy
arrays (copied to the device and back). dtypes: float16, bfloat16, float32.

The layout rule (one rule for every kind of array). skwgrad's memory layouts are CK's:
x is ``N [D] H W C``, dy is ``N [Do] Ho Wo K``, dW is ``K [Z] Y X C/groups`` (groups outermost in
the channel dims), all packed. An array is accepted in either of the two shapes that describe
such memory:

* **PyTorch-shaped, channels-last memory**: ``(N, C, [D,] H, W)`` with channels-last strides, i.e.
  ``t.is_contiguous(memory_format=torch.channels_last)`` (``channels_last_3d`` in 3-D), e.g.
  ``x.to(memory_format=torch.channels_last)``;
* **channels-last-shaped, contiguous**: ``(N, [D,] H, W, C)``, plain C-contiguous.

x and dy must use the same convention. A tensor that satisfies both (a size-1 channel or spatial
extent) is resolved by the convolution geometry (filter size, stride, padding, dilation); if both
readings are consistent and differ, pass ``layout="nchw"`` or ``layout="nhwc"``. Anything else
(an NCHW-contiguous tensor, a strided view) is refused: convert it with
``.contiguous(memory_format=torch.channels_last)``.

The result is always PyTorch's weight-gradient shape ``(K, C/groups, [Z,] Y, X)`` in channels-last
memory (exactly skwgrad's ``G K [Z] Y X C`` layout): a torch tensor for torch inputs, a CuPy
array for CuPy, a numpy array for numpy, and a ``DeviceArray`` (``__cuda_array_interface__``)
for other device arrays. Its dtype is the dW dtype (the input dtype, or ``dw_dtype`` / ``out``'s
dtype, e.g. fp32 for the atomic reduction). ``out`` may be given in either weight shape:
``(K, C/groups, [Z,] Y, X)`` channels-last, or ``(K, [Z,] Y, X, C/groups)`` contiguous.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass, field

import numpy as np

from skwgrad.abi.conv import DTYPE_BYTES, ConvProblem
from skwgrad.errors import ProblemError

LAYOUTS = ("auto", "nchw", "nhwc")


# ---------------------------------------------------------------------------------------------
# Host-side dtype helpers (numpy has no bfloat16 of its own)
# ---------------------------------------------------------------------------------------------
def to_bits(values, dtype: str) -> np.ndarray:
    """Round float64 ``values`` to ``dtype``; returns the storage array (float16, float32, or
    uint16 bit patterns for bf16, round-to-nearest-even)."""
    v = np.asarray(values)
    if dtype == "fp16":
        return v.astype(np.float16)
    if dtype == "fp32":
        return v.astype(np.float32)
    if dtype == "bf16":
        f = np.ascontiguousarray(v, dtype=np.float32).view(np.uint32)
        nan = (f & 0x7FFFFFFF) > 0x7F800000
        rounded = (f + 0x7FFF + ((f >> 16) & 1)) >> 16
        return np.where(nan, (f >> 16) | 0x40, rounded).astype(np.uint16)
    raise ProblemError(f"dtype {dtype!r} is not supported")


def from_bits(raw, dtype: str) -> np.ndarray:
    """float64 values of a storage array written by ``to_bits`` or read back from a device."""
    a = np.asarray(raw)
    if dtype == "bf16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


_STORAGE = {"fp16": np.float16, "fp32": np.float32, "bf16": np.uint16}


# ---------------------------------------------------------------------------------------------
# Array views
# ---------------------------------------------------------------------------------------------
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

    @property
    def host(self) -> bool:
        return self.kind in ("numpy", "torch-cpu")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * DTYPE_BYTES[self.dtype]


def _contiguous_strides(shape):
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


def _dlpack_view(obj, name: str) -> ArrayView:
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
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else _contiguous_strides(shape)
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

def view(obj, name: str) -> ArrayView:
    """Describe ``obj`` (one of the accepted array kinds); raise ``ProblemError`` otherwise."""
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
        strides = tuple(s // item for s in strides) if strides else _contiguous_strides(shape)
        ptr, ro = cai["data"]
        return ArrayView(obj, "cai", int(ptr or 0), shape, strides, dt, None, readonly=bool(ro))
    if hasattr(obj, "__dlpack__"):
        return _dlpack_view(obj, name)
    raise ProblemError(
        f"{name} is a {type(obj).__module__}.{type(obj).__name__}; skwgrad takes torch tensors, CuPy arrays, "
        f"__cuda_array_interface__ / DLPack device arrays or numpy arrays"
    )


# ---------------------------------------------------------------------------------------------
# Layout
# ---------------------------------------------------------------------------------------------
def _packed(shape, strides, order) -> bool:
    """Strides of a packed array whose memory runs through ``order`` (outermost first), ignoring
    dims of extent 1."""
    acc = 1
    for d in reversed(order):
        if shape[d] != 1 and strides[d] != acc:
            return False
        acc *= shape[d]
    return True


def conventions(v: ArrayView, spatial_dims: int, name: str) -> dict[str, tuple]:
    """{"nchw"/"nhwc": (N, C, spatial)} for the readings of ``v`` its strides allow."""
    nd = spatial_dims + 2
    if v.ndim != nd:
        raise ProblemError(
            f"{name} has {v.ndim} dims {v.shape}; a {spatial_dims}-D convolution takes {nd}: "
            f"(N, C, {'D, ' if spatial_dims == 3 else ''}H, W) channels-last or (N, {'D, ' if spatial_dims == 3 else ''}H, W, C) contiguous"
        )
    out = {}
    if _packed(v.shape, v.strides, (0, *range(2, nd), 1)):
        out["nchw"] = (v.shape[0], v.shape[1], tuple(v.shape[2:]))
    if _packed(v.shape, v.strides, tuple(range(nd))):
        out["nhwc"] = (v.shape[0], v.shape[-1], tuple(v.shape[1:-1]))
    if not out:
        hint = ".contiguous(memory_format=torch.channels_last" + ("_3d" if spatial_dims == 3 else "") + ")"
        raise ProblemError(
            f"{name} (shape {v.shape}, strides {v.strides}) is neither channels-last (N, C, {'D, ' if spatial_dims == 3 else ''}H, W) "
            f"nor a contiguous (N, {'D, ' if spatial_dims == 3 else ''}H, W, C) array; skwgrad reads packed channels-last memory: "
            f"convert it, e.g. with {hint}"
        )
    return out


def _triple(v, sd, what):
    if isinstance(v, int):
        return (v,) * sd
    v = tuple(v)
    if len(v) != sd:
        raise ProblemError(f"{what} must be one integer or {sd} integers, got {v!r}")
    return v


def problem_from_arrays(
    x: ArrayView, dy: ArrayView, *, filter_size, stride=1, padding=0, dilation=1, groups=1, dw_dtype=None, layout="auto"
) -> tuple[ConvProblem, str]:
    """The problem x and dy describe (and the layout convention used)."""
    if layout not in LAYOUTS:
        raise ProblemError(f"layout={layout!r}: use one of {', '.join(LAYOUTS)}")
    if isinstance(filter_size, int):
        sd = x.ndim - 2
        if sd not in (2, 3):
            raise ProblemError(f"x has {x.ndim} dims; a 2-D convolution takes 4, a 3-D one 5")
    else:
        sd = len(tuple(filter_size))
        if sd not in (2, 3):
            raise ProblemError(f"filter_size {filter_size!r} must have 2 (Y, X) or 3 (Z, Y, X) values")
    if x.dtype != dy.dtype:
        raise ProblemError(f"x is {x.dtype} and dy is {dy.dtype}; they must have the same dtype")
    cx = conventions(x, sd, "x")
    cdy = conventions(dy, sd, "dy")
    readings = [c for c in ("nchw", "nhwc") if c in cx and c in cdy and layout in ("auto", c)]
    if not readings:
        raise ProblemError(
            f"x reads as {'/'.join(cx)} and dy as {'/'.join(cdy)}"
            + (f" (layout={layout!r})" if layout != "auto" else "")
            + "; both must be PyTorch-shaped channels-last or both (N, ..., C) contiguous"
        )
    fsize = _triple(filter_size, sd, "filter_size")
    good, errors = {}, []
    for c in readings:
        n, cin, sp_in = cx[c]
        n2, kout, sp_out = cdy[c]
        try:
            p = ConvProblem.from_torch(
                batch=n, in_channels=cin, out_channels=kout, input_size=sp_in, kernel_size=fsize, stride=stride,
                padding=padding, dilation=dilation, groups=groups, dtype=x.dtype, dw_dtype=dw_dtype or "",
            )  # fmt: skip
        except ProblemError as e:
            errors.append(f"read as {c}: {e}")
            continue
        want = (p.do, p.ho, p.wo)[3 - sd :]
        if n2 != n:
            errors.append(f"read as {c}: x has batch {n}, dy has {n2}")
        elif tuple(sp_out) != want:
            errors.append(
                f"read as {c}: dy's spatial size is {tuple(sp_out)}, but x's {tuple(sp_in)} with filter {fsize}, "
                f"stride {stride}, padding {padding}, dilation {dilation} gives {want}"
            )
        else:
            good[c] = p
    if not good:
        if "nchw" not in readings and _fits_as_nchw(x, dy, sd, fsize, stride, padding, dilation, groups):
            fmt = "channels_last_3d" if sd == 3 else "channels_last"
            raise ProblemError(
                f"x {tuple(x.shape)} and dy {tuple(dy.shape)} fit the convolution as PyTorch-shaped (N, C, ...) arrays, "
                f"but their memory is N C ... (contiguous), not channels-last; skwgrad reads channels-last memory: "
                f"pass x.contiguous(memory_format=torch.{fmt}) (and the same for dy), or (N, ..., C)-shaped contiguous arrays"
            )
        raise ProblemError("x and dy do not describe one convolution: " + "; ".join(errors))
    if len(good) > 1 and good["nchw"] != good["nhwc"]:
        raise ProblemError(
            f"x {x.shape} and dy {dy.shape} are both channels-last (N, C, ...) and contiguous (N, ..., C) arrays and "
            f"both readings fit the convolution; pass layout='nchw' or layout='nhwc'"
        )
    conv = "nchw" if "nchw" in good else "nhwc"
    return good[conv], conv


def _fits_as_nchw(x, dy, sd, fsize, stride, padding, dilation, groups) -> bool:
    """Would the shapes describe the convolution read as (N, C, spatial), whatever the strides?"""
    try:
        p = ConvProblem.from_torch(
            batch=x.shape[0], in_channels=x.shape[1], out_channels=dy.shape[1], input_size=tuple(x.shape[2:]),
            kernel_size=fsize, stride=stride, padding=padding, dilation=dilation, groups=groups, dtype=x.dtype,
        )  # fmt: skip
    except ProblemError:
        return False
    return dy.shape[0] == x.shape[0] and tuple(dy.shape[2:]) == (p.do, p.ho, p.wo)[3 - sd :]


def dw_shapes(p: ConvProblem) -> tuple[tuple, tuple]:
    """(PyTorch weight shape (K, C/g, [Z,] Y, X), its channels-last memory shape (K, [Z,] Y, X, C/g))."""
    f = (p.z, p.y, p.x) if p.spatial_dims == 3 else (p.y, p.x)
    return (p.g * p.k, p.c, *f), (p.g * p.k, *f, p.c)


def check_out(v: ArrayView, p: ConvProblem) -> None:
    torch_shape, mem_shape = dw_shapes(p)
    nd = len(torch_shape)
    if v.dtype != p.dw_dtype:
        raise ProblemError(f"out has dtype {v.dtype}; the dW dtype is {p.dw_dtype}")
    if v.readonly:
        raise ProblemError("out is read-only")
    ok = (tuple(v.shape) == torch_shape and _packed(v.shape, v.strides, (0, *range(2, nd), 1))) or (
        tuple(v.shape) == mem_shape and _packed(v.shape, v.strides, tuple(range(nd)))
    )
    if not ok:
        raise ProblemError(
            f"out (shape {v.shape}, strides {v.strides}) must be {torch_shape} in channels-last memory or a contiguous "
            f"{mem_shape} array"
        )


# ---------------------------------------------------------------------------------------------
# Device memory owned by skwgrad
# ---------------------------------------------------------------------------------------------
_CAI_TYPESTR = {"fp16": "<f2", "fp32": "<f4"}


class DeviceArray:
    """A device buffer skwgrad allocated (for inputs that are neither torch nor CuPy), exposing
    ``__cuda_array_interface__`` (shape/strides in the PyTorch weight convention). Freed when
    garbage collected or by ``free()``."""

    def __init__(self, backend, shape, strides, dtype: str):
        self.backend = backend
        self.shape = tuple(shape)
        self.strides = tuple(strides)  # elements
        self.dtype = dtype
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * DTYPE_BYTES[dtype]
        self.ptr = backend.alloc(self.nbytes)

    @property
    def __cuda_array_interface__(self):
        if self.dtype not in _CAI_TYPESTR:
            raise TypeError("__cuda_array_interface__ cannot describe bfloat16; read it with to_numpy()")
        item = DTYPE_BYTES[self.dtype]
        return {
            "shape": self.shape,
            "typestr": _CAI_TYPESTR[self.dtype],
            "data": (self.ptr, False),
            "strides": tuple(s * item for s in self.strides),
            "version": 3,
            "stream": None,
        }

    def to_numpy(self) -> np.ndarray:
        """float64 copy in this array's shape."""
        raw = np.empty(self.nbytes // DTYPE_BYTES[self.dtype], dtype=_STORAGE[self.dtype])
        self.backend.synchronize()
        self.backend.memcpy_dtoh(raw, self.ptr, self.nbytes)
        mem = from_bits(raw, self.dtype)
        # strides are a permutation of a packed layout: rebuild the view.
        return np.lib.stride_tricks.as_strided(mem, self.shape, tuple(s * 8 for s in self.strides)).copy()

    def free(self):
        if self.ptr:
            try:
                self.backend.free(self.ptr)
            finally:
                self.ptr = 0

    def __del__(self):
        if getattr(self, "ptr", 0) and not sys.is_finalizing():
            try:
                self.free()
            except Exception:  # noqa: BLE001
                pass


class DeviceInputs:
    """Device copies of x and dy (and a dW buffer) for a problem: run-from-cache and tune."""

    def __init__(self, problem: ConvProblem, backend, x_raw: np.ndarray, dy_raw: np.ndarray):
        self.problem, self.backend = problem, backend
        p = problem
        self.x_nbytes = x_raw.nbytes
        self.dy_nbytes = dy_raw.nbytes
        self.dw_nbytes = p.dw_numel * DTYPE_BYTES[p.dw_dtype]
        self.x = self.dy = self.dw = 0
        try:
            self.x = backend.alloc(self.x_nbytes)
            self.dy = backend.alloc(self.dy_nbytes)
            self.dw = backend.alloc(self.dw_nbytes)
            backend.memcpy_htod(self.x, np.ascontiguousarray(x_raw), self.x_nbytes)
            backend.memcpy_htod(self.dy, np.ascontiguousarray(dy_raw), self.dy_nbytes)
        except BaseException:
            self.free()
            raise

    @classmethod
    def random(cls, problem: ConvProblem, backend, seed: int = 0) -> "DeviceInputs":
        """Standard-normal inputs (seeded), rounded to the problem's dtype; ``x64``/``dy64`` hold
        the exact rounded values for the float64 reference."""
        rng = np.random.default_rng(seed)
        x_raw = to_bits(rng.standard_normal(problem.x_shape), problem.dtype)
        dy_raw = to_bits(rng.standard_normal(problem.dy_shape), problem.dtype)
        self = cls(problem, backend, x_raw, dy_raw)
        self.x64 = from_bits(x_raw, problem.dtype)
        self.dy64 = from_bits(dy_raw, problem.dtype)
        return self

    def read_dw(self, stream: int = 0) -> np.ndarray:
        """dW as float64 in ``problem.dw_shape`` (after the stream's work)."""
        p = self.problem
        self.backend.stream_synchronize(stream)
        raw = np.empty(p.dw_numel, dtype=_STORAGE[p.dw_dtype])
        self.backend.memcpy_dtoh(raw, self.dw, self.dw_nbytes)
        return from_bits(raw, p.dw_dtype).reshape(p.dw_shape)

    def read_dw_raw(self, stream: int = 0) -> bytes:
        self.backend.stream_synchronize(stream)
        raw = np.empty(self.dw_nbytes, dtype=np.uint8)
        self.backend.memcpy_dtoh(raw, self.dw, self.dw_nbytes)
        return raw.tobytes()

    def poison_dw(self, byte: int = 0xFF, stream: int = 0) -> None:
        self.backend.memset(self.dw, byte, self.dw_nbytes, stream)

    def free(self) -> None:
        for name in ("x", "dy", "dw"):
            ptr = getattr(self, name, 0)
            if ptr:
                setattr(self, name, 0)
                self.backend.free(ptr)


# ---------------------------------------------------------------------------------------------
# Running a plan on arrays
# ---------------------------------------------------------------------------------------------
def _host_raw(v: ArrayView, name: str) -> np.ndarray:
    """The packed memory of a host array as a 1-D storage array (no reinterpretation)."""
    nd = v.ndim
    order = (0, *range(2, nd), 1) if _packed(v.shape, v.strides, (0, *range(2, nd), 1)) else tuple(range(nd))
    if v.kind == "torch-cpu":
        import torch

        t = v.obj.permute(*order).contiguous()
        t = t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)
        raw = t.numpy().reshape(-1)
        return raw.view(_STORAGE[v.dtype])
    a = np.transpose(v.obj, order)
    return np.ascontiguousarray(a).reshape(-1).view(_STORAGE[v.dtype])


def _stream_of(views, stream):
    from skwgrad.launcher.plan import _stream_int

    if stream is not None:
        return _stream_int(stream)
    for v in views:
        if v.kind == "torch":
            import torch

            return int(torch.cuda.current_stream(v.obj.device).cuda_stream)
        if v.kind == "cupy":
            import cupy

            return int(cupy.cuda.get_current_stream().ptr)
    return 0


def device_of(views, backend_kind: str | None = None) -> tuple[int | None, str | None]:
    """The one device ordinal (and runtime) the device arrays among ``views`` live on."""
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


def _alloc_out(p: ConvProblem, like: ArrayView, backend):
    torch_shape, mem_shape = dw_shapes(p)
    nd = len(torch_shape)
    perm = (0, nd - 1, *range(1, nd - 1))  # (K, F.., C) -> (K, C, F..)
    if like.kind in ("torch", "torch-cpu"):
        import torch

        dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[p.dw_dtype]
        fmt = torch.channels_last_3d if nd == 5 else torch.channels_last
        return torch.empty(torch_shape, dtype=dt, device=like.obj.device, memory_format=fmt)
    if like.kind == "cupy":
        import cupy

        if p.dw_dtype == "bf16":
            raise ProblemError("CuPy has no bfloat16: pass out= (a bf16 device array) or use torch tensors")
        dt = np.float16 if p.dw_dtype == "fp16" else np.float32
        with cupy.cuda.Device(like.device):
            return cupy.empty(mem_shape, dtype=dt).transpose(perm)
    if like.kind == "numpy":
        dt = like.obj.dtype if p.dw_dtype == p.dtype else np.float32
        return np.empty(mem_shape, dtype=dt).transpose(perm)
    mem_strides = _contiguous_strides(mem_shape)
    return DeviceArray(backend, torch_shape, tuple(mem_strides[i] for i in perm), p.dw_dtype)


def run_plan(plan, x, dy, *, out=None, stream=None, layout: str = "auto"):
    """Launch ``plan`` on arrays; the problem the arrays describe must be the plan's."""
    p = plan.problem
    vx, vdy = view(x, "x"), view(dy, "dy")
    got, _ = problem_from_arrays(
        vx, vdy, filter_size=(p.z, p.y, p.x)[3 - p.spatial_dims :], stride=p.stride[3 - p.spatial_dims :],
        padding=tuple(zip(p.pad_lo, p.pad_hi))[3 - p.spatial_dims :], dilation=p.dilation[3 - p.spatial_dims :],
        groups=p.g, dw_dtype=p.dw_dtype, layout=layout,
    )  # fmt: skip
    if got != p:
        raise ProblemError(f"the arrays describe {got.describe()}; this plan is for {p.describe()}")
    return run_problem(plan, p, vx, vdy, out=out, stream=stream)


def run_problem(plan, p: ConvProblem, vx: ArrayView, vdy: ArrayView, *, out=None, stream=None):
    be = plan.backend
    vout = view(out, "out") if out is not None else None
    views = [vx, vdy] + ([vout] if vout is not None else [])
    dev, _ = device_of(views)
    if dev is not None and dev != be.device:
        raise ProblemError(f"the arrays are on device {dev}; the plan is for device {be.device}")
    check_cai_devices(views, be)
    if vout is not None:
        check_out(vout, p)
    s = _stream_of(views, stream)
    temps = []
    try:
        ptrs = []
        for v, name in ((vx, "x"), (vdy, "dy")):
            if v.host:
                raw = _host_raw(v, name)
                ptr = be.alloc(raw.nbytes)
                temps.append(ptr)
                be.memcpy_htod(ptr, raw, raw.nbytes)
                ptrs.append(ptr)
            else:
                if not v.ptr:
                    raise ProblemError(f"{name} has a null data pointer")
                ptrs.append(v.ptr)
        like = next((v for v in (vx, vdy) if not v.host), vx)  # a device input decides the result's kind
        result = out if out is not None else _alloc_out(p, like, be)
        vres = vout if vout is not None else view(result, "out") if not isinstance(result, DeviceArray) else None
        host_out = vres is not None and vres.host
        if host_out:
            dw_ptr = be.alloc(plan._dw_nbytes)
            temps.append(dw_ptr)
        else:
            dw_ptr = result.ptr if isinstance(result, DeviceArray) else vres.ptr
        plan.launch(ptrs[1], ptrs[0], dw_ptr, s)
        if host_out:
            be.stream_synchronize(s)
            raw = np.empty(plan._dw_nbytes, dtype=np.uint8)
            be.memcpy_dtoh(raw, dw_ptr, plan._dw_nbytes)
            _write_host(vres, raw, p)
        elif temps:
            be.stream_synchronize(s)  # the temporaries are freed below
        return result
    finally:
        for ptr in temps:
            be.free(ptr)


def _write_host(v: ArrayView, raw: np.ndarray, p: ConvProblem) -> None:
    """Copy packed dW bytes into a host output (numpy or CPU torch) of either weight shape."""
    torch_shape, mem_shape = dw_shapes(p)
    nd = len(mem_shape)
    vals = raw.view(_STORAGE[p.dw_dtype]).reshape(mem_shape)
    if tuple(v.shape) == torch_shape and tuple(v.shape) != mem_shape:
        vals = vals.transpose(0, nd - 1, *range(1, nd - 1))
    if v.kind == "torch-cpu":
        import torch

        t = v.obj
        src = torch.from_numpy(np.ascontiguousarray(vals).view(np.int16 if t.element_size() == 2 else np.int32))
        src = src.view(t.dtype)
        t.copy_(src)
        return
    dst = v.obj
    if dst.dtype == vals.dtype or (p.dw_dtype == "bf16" and dst.dtype.itemsize == 2):
        dst[...] = vals.view(dst.dtype) if dst.dtype != vals.dtype else vals
    else:
        dst[...] = vals
