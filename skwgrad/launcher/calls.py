"""Running a plan on arrays: the per-call work of ``skwgrad.wgrad`` and ``Plan.__call__``.

``prepare`` reads the arrays once (``skwgrad.launcher.layout``) and resolves everything that
follows from their shapes, strides, dtypes and device; the result, a ``Call``, is cached by the
API under those same attributes, so a repeated call only reads pointers and the stream, allocates
dW and launches. Arrays whose memory is not skwgrad's packed layout are converted here (torch,
CuPy, host arrays) or refused (other device arrays).
"""

from __future__ import annotations

import numpy as np

from skwgrad.abi.conv import ConvProblem
from skwgrad.errors import LayoutError, ProblemError
from skwgrad.launcher import layout as L
from skwgrad.launcher.hostdata import STORAGE, DeviceArray
from skwgrad.launcher.interop import ArrayView, check_cai_devices, contiguous_strides, current_torch_stream, stream_of

_TORCH_DTYPES = {}


def _torch_dtype(name: str):
    if not _TORCH_DTYPES:
        import torch

        _TORCH_DTYPES.update({"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32})
    return _TORCH_DTYPES[name]


def _convert_device(v: ArrayView, name: str, reading: str):
    """A packed copy of a device array (torch or CuPy) in skwgrad's layout for ``reading``."""
    nd = v.ndim
    if v.kind == "torch":
        import torch

        if reading == "nchw":
            fmt = torch.channels_last_3d if nd == 5 else torch.channels_last
            return v.obj.contiguous(memory_format=fmt)
        return v.obj.contiguous()
    if v.kind == "cupy":
        import cupy

        order = L.memory_order(reading, nd)
        inv = tuple(order.index(i) for i in range(nd))
        return cupy.ascontiguousarray(v.obj.transpose(order)).transpose(inv)
    fix = (
        "pass it in channels-last memory ((N, C, ...) shape with C innermost)" if reading == "nchw"
        else "pass a C-contiguous (N, ..., C) array"
    )  # fmt: skip
    raise LayoutError(f"{name} (shape {tuple(v.shape)}, strides {tuple(v.strides)}) is not packed as read ({reading}); {fix}")


def _host_raw(v: ArrayView, reading: str) -> np.ndarray:
    """The memory of a host array in skwgrad's packed layout, as a 1-D storage array."""
    order = L.memory_order(reading, v.ndim)
    if v.kind == "torch-cpu":
        import torch

        t = v.obj.permute(*order).contiguous()
        t = t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)
        return t.numpy().reshape(-1).view(STORAGE[v.dtype])
    return np.ascontiguousarray(np.transpose(v.obj, order)).reshape(-1).view(STORAGE[v.dtype])


def _alloc_out(p: ConvProblem, like: ArrayView, backend):
    torch_shape, mem_shape = L.dw_shapes(p)
    nd = len(torch_shape)
    perm = (0, nd - 1, *range(1, nd - 1))  # (K, F.., C) -> (K, C, F..)
    if like.kind in ("torch", "torch-cpu"):
        import torch

        fmt = torch.channels_last_3d if nd == 5 else torch.channels_last
        return torch.empty(torch_shape, dtype=_torch_dtype(p.dw_dtype), device=like.obj.device, memory_format=fmt)
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
    mem_strides = contiguous_strides(mem_shape)
    return DeviceArray(backend, torch_shape, tuple(mem_strides[i] for i in perm), p.dw_dtype)


def _write_host(v: ArrayView, raw: np.ndarray, p: ConvProblem) -> None:
    """Copy packed dW bytes into a host output (numpy or CPU torch) of either weight shape."""
    torch_shape, mem_shape = L.dw_shapes(p)
    nd = len(mem_shape)
    vals = raw.view(STORAGE[p.dw_dtype]).reshape(mem_shape)
    if tuple(v.shape) == torch_shape and tuple(v.shape) != mem_shape:
        vals = vals.transpose(0, nd - 1, *range(1, nd - 1))
    if v.kind == "torch-cpu":
        import torch

        t = v.obj
        src = torch.from_numpy(np.ascontiguousarray(vals).view(np.int16 if t.element_size() == 2 else np.int32))
        t.copy_(src.view(t.dtype))
        return
    dst = v.obj
    if dst.dtype == vals.dtype or (p.dw_dtype == "bf16" and dst.dtype.itemsize == 2):
        dst[...] = vals.view(dst.dtype) if dst.dtype != vals.dtype else vals
    else:
        dst[...] = vals


def run_arrays(plan, reading: L.Reading, vx: ArrayView, vdy: ArrayView, vout: ArrayView | None, stream=None):
    """Launch ``plan`` on viewed arrays read as ``reading``; returns the dW array."""
    p, be, r = plan.problem, plan.backend, reading.layout
    views = [vx, vdy] + ([vout] if vout is not None else [])
    for v, name in zip(views, ("x", "dy", "out")):
        if not v.host and v.device is not None and v.device != be.device:
            raise ProblemError(f"{name} is on device {v.device}; the plan is for device {be.device}")
    check_cai_devices(views, be)
    out_direct = L.out_packed(vout, p) if vout is not None else True
    s = stream_of(views, stream)
    for v in views:
        if v.producer_stream is not None:
            be.stream_wait_stream(s, v.producer_stream)
    temps, keep = [], []
    try:
        ptrs = []
        for v, name, is_packed in ((vx, "x", reading.x_packed), (vdy, "dy", reading.dy_packed)):
            if v.host:
                raw = _host_raw(v, r)
                ptr = be.alloc(raw.nbytes)
                temps.append(ptr)
                be.memcpy_htod(ptr, raw, raw.nbytes)
                ptrs.append(ptr)
                continue
            if not is_packed:
                conv = _convert_device(v, name, r)
                keep.append(conv)
                ptrs.append(int(conv.data_ptr() if v.kind == "torch" else conv.data.ptr))
                continue
            if not v.ptr:
                raise ProblemError(f"{name} has a null data pointer")
            ptrs.append(v.ptr)
        like = next((v for v in (vx, vdy) if not v.host), vx)  # a device input decides the result's kind
        host_out = vout.host if vout is not None else like.host
        if host_out:  # through a device temporary, copied back after the launch
            target = vout if vout is not None else _host_view(_alloc_out(p, like, be))
            dw_ptr = be.alloc(plan.dw_nbytes)
            temps.append(dw_ptr)
        elif vout is not None and out_direct:
            target, dw_ptr = vout, vout.ptr
        else:  # a fresh result, or a temporary copied into a torch out of another memory format
            result = _alloc_out(p, like, be)
            target = None
            dw_ptr = result.ptr if isinstance(result, DeviceArray) else _device_ptr(result)
        plan.launch(ptrs[1], ptrs[0], dw_ptr, s)
        if host_out:
            be.stream_synchronize(s)
            raw = np.empty(plan.dw_nbytes, dtype=np.uint8)
            be.memcpy_dtoh(raw, dw_ptr, plan.dw_nbytes)
            _write_host(target, raw, p)
            return target.obj
        if temps or any(v.kind == "cupy" for v in (vx, vdy)) and keep:
            be.stream_synchronize(s)  # raw temporaries are freed below; CuPy copies dropped
        elif keep:  # torch copies: their memory is stream-ordered in torch's allocator
            _record_stream(s, *keep, be.device)
        if target is not None:
            return target.obj
        if vout is not None:  # torch out in another memory format: copy in
            vout.obj.copy_(result)
            return vout.obj
        return result
    finally:
        for ptr in temps:
            be.free(ptr)


def _device_ptr(arr) -> int:
    return int(arr.data_ptr()) if hasattr(arr, "data_ptr") else int(arr.data.ptr)


def _host_view(arr):
    from skwgrad.launcher.interop import view

    return view(arr, "out")


_raw_stream = _empty_strided = None  # torch's, bound when the first TorchCall is built


class TorchCall:
    """The resolved fast path for torch inputs with one set of shapes, strides, dtypes and device:
    per call it converts what must be converted, allocates dW through torch's caching allocator,
    reads the stream and launches."""

    __slots__ = ("plan", "convert_x", "convert_dy", "fmt", "out_shape", "out_strides", "out_dtype", "device",
                 "device_index", "out_mode", "nhwc")  # fmt: skip

    def __init__(self, plan, reading: L.Reading, vx: ArrayView, vout: ArrayView | None):
        import torch

        global _raw_stream, _empty_strided
        _empty_strided = torch.empty_strided
        _raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
            lambda i: int(torch.cuda.current_stream(i).cuda_stream)
        )
        p = plan.problem
        self.plan = plan
        self.nhwc = reading.layout == "nhwc"
        self.convert_x = not reading.x_packed
        self.convert_dy = not reading.dy_packed
        nd = vx.ndim
        self.fmt = torch.channels_last_3d if nd == 5 else torch.channels_last
        torch_shape, mem_shape = L.dw_shapes(p)
        perm = (0, nd - 1, *range(1, nd - 1))
        mem_strides = contiguous_strides(mem_shape)
        self.out_shape = torch_shape
        self.out_strides = tuple(mem_strides[i] for i in perm)
        self.out_dtype = _torch_dtype(p.dw_dtype)
        self.device = vx.obj.device
        self.device_index = self.device.index or 0
        self.out_mode = "alloc" if vout is None else ("direct" if L.out_packed(vout, p) else "copy")

    def __call__(self, x, dy, out, stream):
        if self.convert_x:
            x = x.contiguous() if self.nhwc else x.contiguous(memory_format=self.fmt)
        if self.convert_dy:
            dy = dy.contiguous() if self.nhwc else dy.contiguous(memory_format=self.fmt)
        plan = self.plan
        s = _raw_stream(self.device_index) if stream is None else stream
        mode = self.out_mode
        if mode == "direct":
            res = out
        else:
            res = _empty_strided(self.out_shape, self.out_strides, dtype=self.out_dtype, device=self.device)
        plan.launch(dy.data_ptr(), x.data_ptr(), res.data_ptr(), s)
        if stream is not None and (self.convert_x or self.convert_dy or mode != "direct"):
            _record_stream(s, x, dy, res, plan.backend.device)
        if mode == "copy":
            out.copy_(res)
            return out
        return res


def _record_stream(s: int, *tensors_and_device):
    """Tell torch's caching allocator that tensors it owns are used on a stream it does not track."""
    import torch

    *tensors, device = tensors_and_device
    if s == current_torch_stream(device):
        return
    ext = torch.cuda.ExternalStream(s, device=device)
    for t in tensors:
        t.record_stream(ext)
