"""Host-side data for checks and benchmarks: dtype rounding (numpy has no bfloat16), device
buffers skwgrad owns (``DeviceArray``) and the random inputs of run-from-cache and tune
(``DeviceInputs``). Nothing here is on the per-call path of ``skwgrad.wgrad``."""

from __future__ import annotations

import sys

import numpy as np

from skwgrad.abi.conv import DTYPE_BYTES, ConvProblem
from skwgrad.errors import ProblemError

STORAGE = {"fp16": np.float16, "fp32": np.float32, "bf16": np.uint16}


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
        raw = np.empty(self.nbytes // DTYPE_BYTES[self.dtype], dtype=STORAGE[self.dtype])
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
        raw = np.empty(p.dw_numel, dtype=STORAGE[p.dw_dtype])
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
