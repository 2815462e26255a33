"""CUDA backend: the driver API through cuda-bindings (``from cuda.bindings import driver``).

Works in the device's primary context, the one the CUDA runtime (and so PyTorch and CuPy)
uses, so pointers and streams from those libraries are valid here. Cubins are loaded with
``cuModuleLoadData``; Triton kernels take their shared memory as dynamic shared memory, so a
kernel needing more than 48 KiB gets ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`` first.
The kernarg layout is checked against ``cuFuncGetParamInfo`` at load where the driver has it.
"""

from __future__ import annotations

from skwgrad.abi.kernargs import TMAP_BYTES
from skwgrad.errors import BackendError, TensorMapError
from skwgrad.launcher.backends.base import Driver, DriverBackend, KernargBuffer, LoadedFunction

_DEFAULT_SHARED = 48 * 1024
# Triton's device-side TMA element-type enum differs from the driver's CUtensorMapDataType for
# 8-10 (its NVIDIA driver.py maps them the same way); bf16 is 10 there, 9 here.
_TMA_DTYPE = {8: 10, 9: 8, 10: 9}
_TMA_ALIGN = 16  # a tensor map's global address and strides are multiples of 16 bytes


def import_driver():
    """The cuda-bindings driver module (13.x: ``cuda.bindings.driver``; older: ``cuda.cuda``)."""
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # cuda-python < 12.6
        except ImportError:
            raise BackendError(
                "the CUDA backend needs cuda-bindings: pip install 'skwgrad[cuda12]' or 'skwgrad[cuda13]' (cuda-bindings for your driver's CUDA major)"
            ) from None
    return driver


class CudaBackend(DriverBackend):
    name = "cuda"
    binary_kind = "cubin"

    def __init__(self, device: int | None = None, driver=None):
        d = driver if driver is not None else import_driver()
        self._d = d
        self._success = d.CUresult.CUDA_SUCCESS
        self.device_name = "CUDA device"
        self.arch = ""
        self.compute_units = 0
        self._bind(Driver(d, "cuda", self._success, self._errstr))
        self._get_ctx = d.cuCtxGetCurrent  # hot path: one lookup, not one per launch
        self._launch_ex = getattr(d, "cuLaunchKernelEx", None)  # bindings before CUDA 12: plain launches
        self._dependent_configs: dict = {}
        try:
            (err,) = d.cuInit(0)
        except BackendError:
            raise
        except Exception as e:  # cuda-bindings raises when libcuda.so cannot be loaded
            raise BackendError(f"no NVIDIA driver (libcuda) found: {e}") from None
        if err != self._success:
            raise BackendError(f"no usable CUDA device: cuInit failed: {self._errstr(err)}")
        count = self.drv.check("cuDeviceGetCount", d.cuDeviceGetCount())
        if count <= 0:
            raise BackendError("no CUDA device found (cuDeviceGetCount = 0)")
        if device is None:
            device = self._current_device()
        if not 0 <= device < count:
            raise BackendError(f"CUDA device {device} does not exist ({count} device(s) present)")
        super().__init__(device)
        self._dev = self.drv.check("cuDeviceGet", d.cuDeviceGet(device))
        self._ctx = self.drv.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(self._dev))
        self._ctx_int = int(self._ctx)
        self.activate()
        attr = d.CUdevice_attribute

        def get(a):
            return self.drv.check("cuDeviceGetAttribute", d.cuDeviceGetAttribute(a, self._dev))

        major = get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        minor = get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        self.arch = f"sm_{major}{minor}"
        self.compute_units = get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        self.max_shared = max(
            get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
            get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
        )
        name = self.drv.check("cuDeviceGetName", d.cuDeviceGetName(256, self._dev))
        self.device_name = (name.split(b"\0", 1)[0].decode(errors="replace") if isinstance(name, bytes) else str(name)).strip()

    # -- errors ------------------------------------------------------------------------------
    def _errstr(self, err) -> str:
        d = self._d
        try:
            e2, name = d.cuGetErrorName(err)
            e3, text = d.cuGetErrorString(err)
        except Exception:  # noqa: BLE001
            return str(err)
        name = name.decode() if isinstance(name, bytes) else str(name or err)
        text = text.decode() if isinstance(text, bytes) else str(text or "")
        return f"{name}: {text}" if text else name

    # -- context -----------------------------------------------------------------------------
    def _current_device(self) -> int:
        d = self._d
        err, ctx = d.cuCtxGetCurrent()
        if err == self._success and ctx is not None and int(ctx) != 0:
            err, dev = d.cuCtxGetDevice()
            if err == self._success:
                return int(dev)
        return 0

    def activate(self) -> None:
        err, ctx = self._get_ctx()
        if err != self._success or ctx is None or int(ctx) != self._ctx_int:
            self.drv.check("cuCtxSetCurrent", self._d.cuCtxSetCurrent(self._ctx))

    # -- launches ----------------------------------------------------------------------------
    def launch_dependent(self, fn: LoadedFunction, grid: int, threads: int, shared: int, kernargs, stream: int = 0) -> None:
        """``cuLaunchKernelEx`` with programmatic stream serialization: the kernel starts while
        the memset queued before it runs and waits for it before writing dW (H200 run E2: the
        memset's ~2 us a call down to ~1). One launch configuration per (function, grid, block,
        shared memory), kept: only the stream changes per call."""
        if self._launch_ex is None:
            return self.launch(fn, grid, threads, shared, kernargs, stream)
        if type(kernargs) is not KernargBuffer:
            kernargs = self._as_kernargs(kernargs)
        key = (fn.name, id(fn.handle), grid, threads, shared)
        cfg = self._dependent_configs.get(key)
        if cfg is None:
            d = self._d
            attr = d.CUlaunchAttribute()
            attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            cfg = d.CUlaunchConfig()
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid, 1, 1
            cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = threads, 1, 1
            cfg.sharedMemBytes = shared
            cfg.attrs = [attr]
            cfg.numAttrs = 1
            self._dependent_configs[key] = cfg = (cfg, fn.handle)  # the handle kept alive with its key
        cfg[0].hStream = stream
        (err,) = self._launch_ex(cfg[0], fn.handle, None, kernargs.extra)
        if err != self._success:
            raise BackendError(f"cuLaunchKernelEx({fn.name}, grid={grid}, threads={threads}, shared={shared}, dependent) failed: {self._errstr(err)}")

    # -- code objects ------------------------------------------------------------------------
    def _prepare_function(self, handle, shared: int) -> None:
        d = self._d
        if shared > _DEFAULT_SHARED:
            self.drv.check(
                "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
                d.cuFuncSetAttribute(
                    handle, d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared
                ),
            )

    def param_layout(self, fn: LoadedFunction) -> list[tuple[int, int]] | None:
        """(offset, size) of each kernel parameter as the driver sees it; None where the
        driver cannot say (cuFuncGetParamInfo needs CUDA 12.4+)."""
        d = self._d
        if not hasattr(d, "cuFuncGetParamInfo"):
            return None
        out = []
        for i in range(1024):
            try:
                res = d.cuFuncGetParamInfo(fn.handle, i)
            except Exception:  # noqa: BLE001  (binding present, symbol missing in the driver)
                return None
            if res[0] != self._success:
                if i == 0 and res[0] != d.CUresult.CUDA_ERROR_INVALID_VALUE:
                    return None
                break
            out.append((int(res[1]), int(res[2])))
        return out

    # -- tensor maps -------------------------------------------------------------------------
    def encode_tensor_map(self, request, desc: dict, ptr: int):
        d = self._d
        if ptr % _TMA_ALIGN:
            raise BackendError(f"{request.operand} at {ptr:#x} is not {_TMA_ALIGN}-byte aligned; TMA needs aligned tensors")
        elt = int(desc["elem_size"])
        rank = len(request.shape)
        u64 = lambda vals: [d.cuuint64_t(int(v)) for v in vals]  # noqa: E731
        u32 = lambda vals: [d.cuuint32_t(int(v)) for v in vals]  # noqa: E731
        dims = u64(reversed(request.shape))  # innermost first
        strides = u64(s * elt for s in reversed(request.strides[:-1]))  # bytes, of the outer dims
        dtype = d.CUtensorMapDataType(_TMA_DTYPE.get(int(desc["elem_type"]), int(desc["elem_type"])))
        box = [int(v) for v in desc["block_size"]]
        common = (
            d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, d.CUtensorMapSwizzle(int(desc["swizzle"])),
            d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )  # fmt: skip
        try:
            if request.mode == "tiled":
                return self.drv.check(
                    "cuTensorMapEncodeTiled",
                    d.cuTensorMapEncodeTiled(dtype, rank, ptr, dims, strides, u32(reversed(box)), u32([1] * rank), *common),
                )
            return self.drv.check(
                "cuTensorMapEncodeIm2col",
                d.cuTensorMapEncodeIm2col(
                    dtype, rank, ptr, dims, strides, list(reversed(request.lower)), list(reversed(request.upper)),
                    box[1], box[0], u32(reversed(request.element_strides)), *common,
                ),
            )  # fmt: skip
        except BackendError as e:
            raise TensorMapError(f"{e} ({request.operand}: {request.mode} map of shape {list(request.shape)})") from None

    def tensor_map_at(self, tmap, ptr: int) -> bytes:
        import ctypes

        if ptr % _TMA_ALIGN:
            raise BackendError(f"tensor at {ptr:#x} is not {_TMA_ALIGN}-byte aligned; TMA needs aligned tensors")
        self.drv.check("cuTensorMapReplaceAddress", self._d.cuTensorMapReplaceAddress(tmap, ptr))
        return ctypes.string_at(tmap.getPtr(), TMAP_BYTES)

    # -- streams and events ------------------------------------------------------------------
    def stream_create(self) -> int:
        self.activate()
        return int(self.drv.check("cuStreamCreate", self._d.cuStreamCreate(int(self._d.CUstream_flags.CU_STREAM_NON_BLOCKING))))

    def event_create(self):
        self.activate()
        return self.drv.check("cuEventCreate", self._d.cuEventCreate(int(self._d.CUevent_flags.CU_EVENT_DEFAULT)))

    def pointer_device(self, ptr: int) -> int | None:
        d = self._d
        try:
            res = d.cuPointerGetAttribute(d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
        except Exception:  # noqa: BLE001
            return None
        if res[0] != self._success:
            return None
        return int(res[1])
