"""CUDA backend: the driver API through cuda-bindings (``from cuda.bindings import driver``).

Works in the device's primary context, the one the CUDA runtime (and so PyTorch and CuPy)
uses, so pointers and streams from those libraries are valid here. Cubins are loaded with
``cuModuleLoadData``; Triton kernels take their shared memory as dynamic shared memory, so a
kernel needing more than 48 KiB gets ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`` first.
The kernarg layout is checked against ``cuFuncGetParamInfo`` at load where the driver has it.
"""

from __future__ import annotations

from skwgrad.errors import BackendError
from skwgrad.launcher.backends.base import Backend, KernargBuffer, LoadedFunction, host_address

_DEFAULT_SHARED = 48 * 1024


def import_driver():
    """The cuda-bindings driver module (13.x: ``cuda.bindings.driver``; older: ``cuda.cuda``)."""
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # cuda-python < 12.6
        except ImportError:
            raise BackendError(
                "the CUDA backend needs cuda-bindings: pip install 'skwgrad[cuda]' (cuda-bindings)"
            ) from None
    return driver


class CudaBackend(Backend):
    name = "cuda"
    binary_kind = "cubin"

    def __init__(self, device: int | None = None, driver=None):
        d = driver if driver is not None else import_driver()
        self._d = d
        self._success = d.CUresult.CUDA_SUCCESS
        self.device_name = "CUDA device"
        self.arch = ""
        self.compute_units = 0
        # Hot-path bindings (attribute lookups cost more than the checks).
        self._launch = d.cuLaunchKernel
        self._memset = d.cuMemsetD8Async
        self._get_ctx = d.cuCtxGetCurrent
        try:
            (err,) = d.cuInit(0)
        except BackendError:
            raise
        except Exception as e:  # cuda-bindings raises when libcuda.so cannot be loaded
            raise BackendError(f"no NVIDIA driver (libcuda) found: {e}") from None
        if err != self._success:
            raise BackendError(f"no usable CUDA device: cuInit failed: {self._errstr(err)}")
        count = self._call("cuDeviceGetCount", d.cuDeviceGetCount())
        if count <= 0:
            raise BackendError("no CUDA device found (cuDeviceGetCount = 0)")
        if device is None:
            device = self._current_device()
        if not 0 <= device < count:
            raise BackendError(f"CUDA device {device} does not exist ({count} device(s) present)")
        super().__init__(device)
        self._dev = self._call("cuDeviceGet", d.cuDeviceGet(device))
        self._ctx = self._call("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(self._dev))
        self._ctx_int = int(self._ctx)
        self.activate()
        attr = d.CUdevice_attribute

        def get(a):
            return self._call("cuDeviceGetAttribute", d.cuDeviceGetAttribute(a, self._dev))

        major = get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        minor = get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        self.arch = f"sm_{major}{minor}"
        self.compute_units = get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        self.max_shared = max(
            get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
            get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
        )
        name = self._call("cuDeviceGetName", d.cuDeviceGetName(256, self._dev))
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

    def _call(self, what: str, result):
        """Check a cuda-bindings result tuple ``(CUresult, *values)``; return the value(s)."""
        err = result[0]
        if err != self._success:
            raise BackendError(f"{what} failed: {self._errstr(err)}")
        if len(result) == 1:
            return None
        return result[1] if len(result) == 2 else result[1:]

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
            self._call("cuCtxSetCurrent", self._d.cuCtxSetCurrent(self._ctx))

    # -- code objects ------------------------------------------------------------------------
    def _load_module(self, binary: bytes):
        return self._call("cuModuleLoadData", self._d.cuModuleLoadData(binary))

    def _get_function(self, module, name: str):
        return self._call(f"cuModuleGetFunction({name})", self._d.cuModuleGetFunction(module, name.encode()))

    def _prepare_function(self, handle, shared: int) -> None:
        d = self._d
        if shared > _DEFAULT_SHARED:
            self._call(
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

    def _occupancy(self, handle, threads: int, shared: int) -> int:
        return self._call(
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
            self._d.cuOccupancyMaxActiveBlocksPerMultiprocessor(handle, threads, shared),
        )

    # -- memory ------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        self.activate()
        return int(self._call(f"cuMemAlloc({nbytes})", self._d.cuMemAlloc(max(int(nbytes), 1))))

    def free(self, ptr: int) -> None:
        self.activate()
        self._call("cuMemFree", self._d.cuMemFree(ptr))

    def memset(self, ptr: int, byte: int, nbytes: int, stream: int = 0) -> None:
        (err,) = self._memset(ptr, byte, nbytes, stream)
        if err != self._success:
            raise BackendError(f"cuMemsetD8Async({ptr:#x}, {byte}, {nbytes}) failed: {self._errstr(err)}")

    def memcpy_htod(self, dst: int, src, nbytes: int) -> None:
        addr, _keep = host_address(src, nbytes, writable=False)
        self.activate()
        self._call("cuMemcpyHtoD", self._d.cuMemcpyHtoD(dst, addr, nbytes))

    def memcpy_dtoh(self, dst, src: int, nbytes: int) -> None:
        addr, _keep = host_address(dst, nbytes, writable=True)
        self.activate()
        self._call("cuMemcpyDtoH", self._d.cuMemcpyDtoH(addr, src, nbytes))

    # -- launch ------------------------------------------------------------------------------
    def launch(self, fn: LoadedFunction, grid: int, threads: int, shared: int, kernargs, stream: int = 0) -> None:
        if not isinstance(kernargs, KernargBuffer):
            kernargs = self._as_kernargs(kernargs)
        (err,) = self._launch(fn.handle, grid, 1, 1, threads, 1, 1, shared, stream, None, kernargs.extra)
        if err != self._success:
            raise BackendError(
                f"cuLaunchKernel({fn.name}, grid={grid}, threads={threads}, shared={shared}) failed: {self._errstr(err)}"
            )

    # -- streams and events ------------------------------------------------------------------
    def stream_create(self) -> int:
        self.activate()
        s = self._call("cuStreamCreate", self._d.cuStreamCreate(int(self._d.CUstream_flags.CU_STREAM_NON_BLOCKING)))
        return int(s)

    def stream_destroy(self, stream: int) -> None:
        self._call("cuStreamDestroy", self._d.cuStreamDestroy(stream))

    def stream_synchronize(self, stream: int) -> None:
        self._call("cuStreamSynchronize", self._d.cuStreamSynchronize(stream))

    def synchronize(self) -> None:
        self.activate()
        self._call("cuCtxSynchronize", self._d.cuCtxSynchronize())

    def event_create(self):
        self.activate()
        return self._call("cuEventCreate", self._d.cuEventCreate(int(self._d.CUevent_flags.CU_EVENT_DEFAULT)))

    def event_record(self, event, stream: int = 0) -> None:
        self._call("cuEventRecord", self._d.cuEventRecord(event, stream))

    def event_synchronize(self, event) -> None:
        self._call("cuEventSynchronize", self._d.cuEventSynchronize(event))

    def event_elapsed_ms(self, start, end) -> float:
        fn = getattr(self._d, "cuEventElapsedTime", None) or self._d.cuEventElapsedTime_v2
        return float(self._call("cuEventElapsedTime", fn(start, end)))

    def event_destroy(self, event) -> None:
        self._call("cuEventDestroy", self._d.cuEventDestroy(event))

    def pointer_device(self, ptr: int) -> int | None:
        d = self._d
        try:
            res = d.cuPointerGetAttribute(d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
        except Exception:  # noqa: BLE001
            return None
        if res[0] != self._success:
            return None
        return int(res[1])
