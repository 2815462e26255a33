"""ROCm backend: the HIP runtime through hip-python (``from hip import hip``).

hip-python imports without a ROCm installation and opens ``libamdhip64.so`` at its first call;
that failure becomes a ``BackendError`` ("no ROCm runtime (libamdhip64) found: ..."). Code
objects (hsaco) are loaded with ``hipModuleLoadData`` and launched with
``hipModuleLaunchKernel`` and ``HIP_LAUNCH_PARAM_BUFFER_POINTER`` (note ``HIP_LAUNCH_PARAM_END``
is 3, not 0 as in CUDA: the values come from hip-python). Shared memory is passed as Triton's
own launcher passes it (``metadata['shared']`` as ``sharedMemBytes``).
"""

from __future__ import annotations

from skwgrad.errors import BackendError
from skwgrad.launcher.backends.base import Backend, KernargBuffer, LoadedFunction, host_address


def import_hip():
    try:
        from hip import hip
    except ImportError:
        raise BackendError("the ROCm backend needs hip-python: pip install 'skwgrad[rocm]' (hip-python)") from None
    return hip


def _text(s) -> str:
    if s is None:
        return ""
    if isinstance(s, bytes):
        return s.decode(errors="replace")
    if hasattr(s, "decode"):
        try:
            return s.decode()
        except Exception:  # noqa: BLE001
            pass
    return str(s)


class HipBackend(Backend):
    name = "hip"
    binary_kind = "hsaco"

    def __init__(self, device: int | None = None, hip=None):
        h = hip if hip is not None else import_hip()
        self._h = h
        self._success = h.hipError_t.hipSuccess
        self.device_name = "ROCm device"
        self.arch = ""
        self.compute_units = 0
        self._launch = h.hipModuleLaunchKernel
        self._memset = h.hipMemsetD8Async
        self.launch_params = (
            int(h.HIP_LAUNCH_PARAM_BUFFER_POINTER),
            int(h.HIP_LAUNCH_PARAM_BUFFER_SIZE),
            int(h.HIP_LAUNCH_PARAM_END),
        )
        try:
            (err,) = h.hipInit(0)
        except BackendError:
            raise
        except Exception as e:  # hip-python raises RuntimeError when libamdhip64.so cannot be opened
            raise BackendError(f"no ROCm runtime (libamdhip64) found: {e}") from None
        if err != self._success:
            raise BackendError(f"no usable ROCm device: hipInit failed: {self._errstr(err)}")
        err, count = h.hipGetDeviceCount()
        if err != self._success or count <= 0:
            raise BackendError(
                f"no ROCm device found (hipGetDeviceCount: {self._errstr(err) if err != self._success else count})"
            )
        if device is None:
            device = self._call("hipGetDevice", h.hipGetDevice())
        if not 0 <= device < count:
            raise BackendError(f"ROCm device {device} does not exist ({count} device(s) present)")
        super().__init__(device)
        self.activate()
        props = self._call("hipGetDeviceProperties", h.hipGetDeviceProperties(device))
        self.arch = _text(props.gcnArchName).split(":", 1)[0].strip()  # "gfx942:sramecc+:xnack-"
        self.compute_units = int(props.multiProcessorCount)
        self.max_shared = int(props.sharedMemPerBlock)
        self.device_name = _text(props.name).strip() or self.arch

    # -- errors ------------------------------------------------------------------------------
    def _errstr(self, err) -> str:
        h = self._h
        try:
            name = _text(h.hipGetErrorName(err)[1])
            text = _text(h.hipGetErrorString(err)[1])
        except Exception:  # noqa: BLE001
            return str(err)
        return f"{name}: {text}" if text and text != name else (name or str(err))

    def _call(self, what: str, result):
        err = result[0]
        if err != self._success:
            raise BackendError(f"{what} failed: {self._errstr(err)}")
        if len(result) == 1:
            return None
        return result[1] if len(result) == 2 else result[1:]

    def activate(self) -> None:
        err, dev = self._h.hipGetDevice()
        if err != self._success or dev != self.device:
            self._call("hipSetDevice", self._h.hipSetDevice(self.device))

    # -- code objects ------------------------------------------------------------------------
    def _load_module(self, binary: bytes):
        return self._call("hipModuleLoadData", self._h.hipModuleLoadData(binary))

    def _get_function(self, module, name: str):
        return self._call(f"hipModuleGetFunction({name})", self._h.hipModuleGetFunction(module, name.encode()))

    def _prepare_function(self, handle, shared: int) -> None:
        pass  # LDS is sized by the code object and sharedMemBytes; nothing to opt into

    def _occupancy(self, handle, threads: int, shared: int) -> int:
        return self._call(
            "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor",
            self._h.hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(handle, threads, shared),
        )

    # -- memory ------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        self.activate()
        return int(self._call(f"hipMalloc({nbytes})", self._h.hipMalloc(max(int(nbytes), 1))))

    def free(self, ptr: int) -> None:
        self.activate()
        self._call("hipFree", self._h.hipFree(ptr))

    def memset(self, ptr: int, byte: int, nbytes: int, stream: int = 0) -> None:
        (err,) = self._memset(ptr, byte, nbytes, stream)
        if err != self._success:
            raise BackendError(f"hipMemsetD8Async({ptr:#x}, {byte}, {nbytes}) failed: {self._errstr(err)}")

    def memcpy_htod(self, dst: int, src, nbytes: int) -> None:
        addr, _keep = host_address(src, nbytes, writable=False)
        self.activate()
        self._call("hipMemcpyHtoD", self._h.hipMemcpyHtoD(dst, addr, nbytes))

    def memcpy_dtoh(self, dst, src: int, nbytes: int) -> None:
        addr, _keep = host_address(dst, nbytes, writable=True)
        self.activate()
        self._call("hipMemcpyDtoH", self._h.hipMemcpyDtoH(addr, src, nbytes))

    # -- launch ------------------------------------------------------------------------------
    def launch(self, fn: LoadedFunction, grid: int, threads: int, shared: int, kernargs, stream: int = 0) -> None:
        if not isinstance(kernargs, KernargBuffer):
            kernargs = self._as_kernargs(kernargs)
        (err,) = self._launch(fn.handle, grid, 1, 1, threads, 1, 1, shared, stream, None, kernargs.extra)
        if err != self._success:
            raise BackendError(
                f"hipModuleLaunchKernel({fn.name}, grid={grid}, threads={threads}, shared={shared}) failed: "
                f"{self._errstr(err)}"
            )

    # -- streams and events ------------------------------------------------------------------
    def stream_create(self) -> int:
        self.activate()
        return int(self._call("hipStreamCreateWithFlags", self._h.hipStreamCreateWithFlags(int(self._h.hipStreamNonBlocking))))

    def stream_destroy(self, stream: int) -> None:
        self._call("hipStreamDestroy", self._h.hipStreamDestroy(stream))

    def stream_synchronize(self, stream: int) -> None:
        self._call("hipStreamSynchronize", self._h.hipStreamSynchronize(stream))

    def synchronize(self) -> None:
        self.activate()
        self._call("hipDeviceSynchronize", self._h.hipDeviceSynchronize())

    def event_create(self):
        self.activate()
        return self._call("hipEventCreate", self._h.hipEventCreate())

    def event_record(self, event, stream: int = 0) -> None:
        self._call("hipEventRecord", self._h.hipEventRecord(event, stream))

    def event_synchronize(self, event) -> None:
        self._call("hipEventSynchronize", self._h.hipEventSynchronize(event))

    def event_elapsed_ms(self, start, end) -> float:
        return float(self._call("hipEventElapsedTime", self._h.hipEventElapsedTime(start, end)))

    def event_destroy(self, event) -> None:
        self._call("hipEventDestroy", self._h.hipEventDestroy(event))

    def pointer_device(self, ptr: int) -> int | None:
        try:
            err, attrs = self._h.hipPointerGetAttributes(ptr)
        except Exception:  # noqa: BLE001
            return None
        if err != self._success or attrs is None:
            return None
        return int(attrs.device)
