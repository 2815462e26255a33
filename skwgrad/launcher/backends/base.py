"""The one small protocol every GPU runtime implements (CUDA through cuda-bindings, ROCm through
hip-python). Everything above it (plans, selection, the Python API, run-from-cache) is shared.

Conventions:

* pointers, streams and sizes are plain ``int`` (a stream of ``0`` is the runtime's default stream);
  functions, modules and events are whatever handle the runtime returns, kept opaque;
* every runtime call is checked; a failure raises ``BackendError`` naming the call and the
  runtime's error string;
* a code object is loaded once per device and cache key (``load``, serialised by a lock);
* kernels are launched with the packed-argument buffer form (CUDA ``CU_LAUNCH_PARAM_BUFFER_*``,
  HIP ``HIP_LAUNCH_PARAM_BUFFER_*``): the plan prepacks the bytes once (``KernargBuffer``) and
  re-patches only the pointers and the epoch per launch.
"""

from __future__ import annotations

import abc
import ctypes
import threading
from dataclasses import dataclass, field

from skwgrad.errors import BackendError


def host_address(obj, nbytes: int, writable: bool) -> tuple[int, object]:
    """(address, keep-alive object) of a host buffer of at least ``nbytes`` bytes: an ``int``
    address, a C-contiguous numpy array, or anything with the buffer protocol."""
    if isinstance(obj, int):
        return obj, None
    import numpy as np

    arr = obj if isinstance(obj, np.ndarray) else np.frombuffer(obj, dtype=np.uint8)
    if not arr.flags.c_contiguous:
        raise BackendError("host buffer for a copy must be C-contiguous")
    if writable and not arr.flags.writeable:
        raise BackendError("host buffer to copy into is read-only")
    if arr.nbytes < nbytes:
        raise BackendError(f"host buffer holds {arr.nbytes} bytes, the copy needs {nbytes}")
    return int(arr.ctypes.data), arr


class KernargBuffer:
    """A packed kernarg block at a stable host address plus the ``extra`` launch-config array
    (``[BUFFER_POINTER, &data, BUFFER_SIZE, &size, END]``) that points at it.

    ``data`` is a ``bytearray``: ``Packer.pack_into(buf.data, name, value)`` patches it in place,
    and the runtime copies it at launch time, so one buffer serves every launch of a plan.
    """

    __slots__ = ("data", "size", "_cdata", "_csize", "_config", "extra")

    def __init__(self, template, buffer_pointer: int, buffer_size: int, end: int):
        self.data = bytearray(template)
        self.size = len(self.data)
        if self.size == 0:
            raise BackendError("a kernarg block cannot be empty")
        # from_buffer pins the bytearray (it can no longer be resized) and shares its memory.
        self._cdata = (ctypes.c_char * self.size).from_buffer(self.data)
        self._csize = ctypes.c_size_t(self.size)
        self._config = (ctypes.c_void_p * 5)(
            buffer_pointer, ctypes.addressof(self._cdata), buffer_size, ctypes.addressof(self._csize), end
        )
        self.extra = ctypes.addressof(self._config)

    @property
    def address(self) -> int:
        return ctypes.addressof(self._cdata)

    def bytes(self) -> bytes:
        return bytes(self.data)


@dataclass
class LoadedFunction:
    """A kernel loaded on one device: the runtime handle plus what every launch needs."""

    handle: object
    name: str
    key: str
    threads: int
    shared: int
    device: int
    module: object = field(default=None, repr=False)
    _max_active: int | None = field(default=None, repr=False)
    _params_checked: bool = field(default=False, repr=False)


class Backend(abc.ABC):
    """One device of one runtime. Get instances from ``skwgrad.launcher.backends.get_backend``."""

    name: str = ""  # "cuda" | "hip"
    binary_kind: str = ""  # "cubin" | "hsaco": what code objects this runtime loads
    # CU_LAUNCH_PARAM_* / HIP_LAUNCH_PARAM_* values: BUFFER_POINTER, BUFFER_SIZE, END
    launch_params: tuple[int, int, int] = (1, 2, 0)

    device: int
    arch: str  # "sm_90", "gfx942", ...
    compute_units: int  # SMs (NVIDIA) or CUs (AMD)
    device_name: str
    max_shared: int  # largest shared/LDS a CTA may use (after opt-in)

    def __init__(self, device: int):
        self.device = device
        self._lock = threading.Lock()
        self._functions: dict[tuple[int, str], LoadedFunction] = {}
        self.arenas: dict[int, tuple] = {}  # stream -> (zeroed, scratch) arenas (skwgrad.launcher.workspace)
        self.arenas_lock = threading.Lock()

    def __repr__(self):
        return f"<{type(self).__name__} device {self.device}: {self.device_name} ({self.arch}, {self.compute_units} CUs)>"

    # -- code objects ------------------------------------------------------------------------
    def load(self, key: str, binary, name: str, threads: int, shared: int) -> LoadedFunction:
        """Load a code object once per (device, key) and return its kernel ``name``.

        ``binary`` is the code object's bytes or a zero-argument callable returning them (read
        from the cache only when the module is not loaded yet)."""
        ck = (self.device, key)
        fn = self._functions.get(ck)
        if fn is not None:
            return fn
        with self._lock:
            fn = self._functions.get(ck)
            if fn is not None:
                return fn
            if shared > self.max_shared:
                raise BackendError(
                    f"kernel {name} ({key[:12]}) needs {shared} bytes of shared memory; {self.device_name} "
                    f"({self.arch}) allows {self.max_shared} per CTA: use a smaller tile"
                )
            data = binary() if callable(binary) else binary
            self.activate()
            module = self._load_module(bytes(data))
            handle = self._get_function(module, name)
            self._prepare_function(handle, shared)
            fn = LoadedFunction(handle, name, key, threads, shared, self.device, module)
            self._functions[ck] = fn
            return fn

    def loaded(self) -> list[LoadedFunction]:
        return list(self._functions.values())

    def max_active_per_cu(self, fn: LoadedFunction) -> int:
        """How many CTAs of ``fn`` one CU/SM can hold at once (cached per function)."""
        if fn._max_active is None:
            self.activate()
            fn._max_active = int(self._occupancy(fn.handle, fn.threads, fn.shared))
        return fn._max_active

    def check_params(self, fn: LoadedFunction, expected: list[tuple[int, int]]) -> None:
        """Compare the kernel's parameter layout as the runtime reports it (where it can) with
        ``expected`` ((offset, size) per parameter, trailing compiler pointers included)."""
        if fn._params_checked:
            return
        actual = self.param_layout(fn)
        if actual is not None and list(actual) != list(expected):
            from skwgrad.errors import AbiError

            raise AbiError(
                f"{fn.name} ({fn.key[:12]}): the runtime reports parameters {actual}, the ABI layout is {expected}; "
                f"the code object does not match its metadata: rebuild the cache"
            )
        fn._params_checked = True

    def param_layout(self, fn: LoadedFunction) -> list[tuple[int, int]] | None:
        """(offset, size) per kernel parameter from the runtime, or None where it cannot say."""
        return None

    def kernarg_buffer(self, template) -> KernargBuffer:
        return KernargBuffer(template, *self.launch_params)

    # -- what each runtime provides -----------------------------------------------------------
    @abc.abstractmethod
    def activate(self) -> None:
        """Make this device current for the calling thread (cheap when it already is)."""

    @abc.abstractmethod
    def _load_module(self, binary: bytes): ...

    @abc.abstractmethod
    def _get_function(self, module, name: str): ...

    @abc.abstractmethod
    def _prepare_function(self, handle, shared: int) -> None:
        """Per-function settings before the first launch (e.g. the dynamic shared memory opt-in)."""

    @abc.abstractmethod
    def _occupancy(self, handle, threads: int, shared: int) -> int: ...

    @abc.abstractmethod
    def alloc(self, nbytes: int) -> int: ...

    @abc.abstractmethod
    def free(self, ptr: int) -> None: ...

    @abc.abstractmethod
    def memset(self, ptr: int, byte: int, nbytes: int, stream: int = 0) -> None:
        """Asynchronous byte fill on ``stream``."""

    @abc.abstractmethod
    def memcpy_htod(self, dst: int, src, nbytes: int) -> None:
        """Synchronous copy from a host buffer (anything with the buffer protocol)."""

    @abc.abstractmethod
    def memcpy_dtoh(self, dst, src: int, nbytes: int) -> None:
        """Synchronous copy into a writable host buffer."""

    @abc.abstractmethod
    def launch(self, fn: LoadedFunction, grid: int, threads: int, shared: int, kernargs, stream: int = 0) -> None:
        """Launch ``fn`` on a 1-D grid. ``kernargs`` is a ``KernargBuffer`` (or bytes, packed on the spot)."""

    def launch_dependent(self, fn: LoadedFunction, grid: int, threads: int, shared: int, kernargs, stream: int = 0) -> None:
        """Launch ``fn`` so that it may start before the work queued before it on ``stream`` has
        finished (CUDA's programmatic dependent launch); the kernel waits for that work
        (``griddepcontrol.wait``) where it needs it (``abi.arch.Arch.dependent_launch``). Here, for
        a runtime without it: a plain launch, which that wait accepts as it is."""
        self.launch(fn, grid, threads, shared, kernargs, stream)

    @abc.abstractmethod
    def stream_create(self) -> int: ...

    @abc.abstractmethod
    def stream_destroy(self, stream: int) -> None: ...

    @abc.abstractmethod
    def stream_synchronize(self, stream: int) -> None: ...

    @abc.abstractmethod
    def synchronize(self) -> None: ...

    @abc.abstractmethod
    def event_create(self): ...

    @abc.abstractmethod
    def event_record(self, event, stream: int = 0) -> None: ...

    @abc.abstractmethod
    def event_synchronize(self, event) -> None: ...

    @abc.abstractmethod
    def event_elapsed_ms(self, start, end) -> float: ...

    @abc.abstractmethod
    def event_destroy(self, event) -> None: ...

    @abc.abstractmethod
    def pointer_device(self, ptr: int) -> int | None:
        """The device ordinal ``ptr`` was allocated on, or None for memory this runtime does not know."""

    @abc.abstractmethod
    def stream_is_capturing(self, stream: int) -> bool:
        """True while ``stream`` is being recorded into a CUDA/HIP graph: nothing may allocate,
        free or synchronize on it then."""

    @abc.abstractmethod
    def stream_wait_stream(self, stream: int, other: int) -> None:
        """Make ``stream`` wait for the work queued on ``other`` so far (an event, no host wait)."""

    # -- tensor maps (TMA: the ``wgrad_tma`` kernels) -------------------------------------------
    def encode_tensor_map(self, request, desc: dict, ptr: int):
        """An opaque tensor map for ``request`` (``skwgrad.abi.launch.TensorMapRequest``) with the
        kernel's descriptor metadata ``desc`` (box, swizzle, element type), holding address ``ptr``."""
        from skwgrad.errors import TensorMapError

        raise TensorMapError(f"the {self.name} backend has no tensor maps (TMA); the wgrad_tma kernels run on sm_90 CUDA devices")

    def tensor_map_at(self, tmap, ptr: int) -> bytes:
        """The 128 kernarg bytes of ``tmap`` re-pointed at ``ptr`` (shape and box unchanged)."""
        raise BackendError(f"the {self.name} backend has no tensor maps (TMA)")

    # -- helpers -----------------------------------------------------------------------------
    def _as_kernargs(self, kernargs) -> KernargBuffer:
        if isinstance(kernargs, KernargBuffer):
            return kernargs
        return self.kernarg_buffer(kernargs)


# ---------------------------------------------------------------------------------------------
# One checked driver-call table for both runtimes
# ---------------------------------------------------------------------------------------------
# The runtime-neutral operations and each runtime's function. Both cuda-bindings and hip-python
# return ``(error, *values)``; ``Driver`` checks every call in one place, so call sites are bare.
CALLS: dict[str, tuple[str, str]] = {
    # op:              (CUDA driver API,                                 HIP runtime)
    "module_load": ("cuModuleLoadData", "hipModuleLoadData"),
    "get_function": ("cuModuleGetFunction", "hipModuleGetFunction"),
    "occupancy": ("cuOccupancyMaxActiveBlocksPerMultiprocessor", "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor"),
    "alloc": ("cuMemAlloc", "hipMalloc"),
    "free": ("cuMemFree", "hipFree"),
    "memset": ("cuMemsetD8Async", "hipMemsetD8Async"),
    "htod": ("cuMemcpyHtoD", "hipMemcpyHtoD"),
    "dtoh": ("cuMemcpyDtoH", "hipMemcpyDtoH"),
    "launch": ("cuLaunchKernel", "hipModuleLaunchKernel"),
    "stream_destroy": ("cuStreamDestroy", "hipStreamDestroy"),
    "stream_sync": ("cuStreamSynchronize", "hipStreamSynchronize"),
    "stream_wait_event": ("cuStreamWaitEvent", "hipStreamWaitEvent"),
    "stream_is_capturing": ("cuStreamIsCapturing", "hipStreamIsCapturing"),
    "device_sync": ("cuCtxSynchronize", "hipDeviceSynchronize"),
    "event_record": ("cuEventRecord", "hipEventRecord"),
    "event_sync": ("cuEventSynchronize", "hipEventSynchronize"),
    "event_elapsed": ("cuEventElapsedTime", "hipEventElapsedTime"),
    "event_destroy": ("cuEventDestroy", "hipEventDestroy"),
}
RUNTIMES = ("cuda", "hip")


class Driver:
    """``driver.op(*args)`` calls the runtime's function for ``op`` and returns its value(s);
    a failed call raises ``BackendError`` naming the function, the arguments that identify it and
    the runtime's error string."""

    def __init__(self, module, runtime: str, success, errstr):
        self.module = module
        self.runtime = runtime
        self.success = success
        self.errstr = errstr
        col = RUNTIMES.index(runtime)
        for op, names in CALLS.items():
            name = names[col]
            fn = getattr(module, name, None)
            if fn is None and op == "event_elapsed":
                fn = getattr(module, name + "_v2", None)
            setattr(self, op, self._checked(name, fn))

    def _checked(self, name: str, fn):
        success, errstr = self.success, self.errstr

        def call(*args, what: str = ""):
            if fn is None:
                raise BackendError(f"{name} is not available in this runtime's bindings")
            res = fn(*args)
            err = res[0]
            if err != success:
                raise BackendError(f"{name}{'(' + what + ')' if what else ''} failed: {errstr(err)}")
            n = len(res)
            return None if n == 1 else res[1] if n == 2 else res[1:]

        call.__name__ = name
        return call

    def raw(self, op: str):
        """The runtime's own function for ``op``, for the per-launch hot path: the caller checks
        the error code and, only on failure, calls ``fail`` (no message is built per launch)."""
        return getattr(self.module, CALLS[op][RUNTIMES.index(self.runtime)])

    def fail(self, op: str, err, what: str = ""):
        name = CALLS[op][RUNTIMES.index(self.runtime)]
        raise BackendError(f"{name}{'(' + what + ')' if what else ''} failed: {self.errstr(err)}")

    def check(self, name: str, result):
        """Check a result tuple of a call made directly on the module (device discovery)."""
        err = result[0]
        if err != self.success:
            raise BackendError(f"{name} failed: {self.errstr(err)}")
        return None if len(result) == 1 else result[1] if len(result) == 2 else result[1:]


class DriverBackend(Backend):
    """The protocol implemented once over a ``Driver``; a runtime adds device discovery, context
    handling and the few calls whose arguments differ (stream/event flags, pointer queries).
    A runtime's ``__init__`` calls ``_bind(driver)`` once it has one."""

    drv: Driver

    def _bind(self, drv: Driver) -> None:
        self.drv = drv
        self._ok = drv.success
        self._launch = drv.raw("launch")  # per-launch calls: looked up once
        self._memset = drv.raw("memset")

    def _load_module(self, binary: bytes):
        return self.drv.module_load(binary)

    def _get_function(self, module, name: str):
        return self.drv.get_function(module, name.encode(), what=name)

    def _occupancy(self, handle, threads: int, shared: int) -> int:
        return self.drv.occupancy(handle, threads, shared)

    def alloc(self, nbytes: int) -> int:
        self.activate()
        return int(self.drv.alloc(max(int(nbytes), 1), what=str(nbytes)))

    def free(self, ptr: int) -> None:
        self.activate()
        self.drv.free(ptr)

    def memset(self, ptr: int, byte: int, nbytes: int, stream: int = 0) -> None:
        (err,) = self._memset(ptr, byte, nbytes, stream)
        if err != self._ok:
            self.drv.fail("memset", err, f"{ptr:#x}, {byte}, {nbytes}")

    def memcpy_htod(self, dst: int, src, nbytes: int) -> None:
        addr, _keep = host_address(src, nbytes, writable=False)
        self.activate()
        self.drv.htod(dst, addr, nbytes)

    def memcpy_dtoh(self, dst, src: int, nbytes: int) -> None:
        addr, _keep = host_address(dst, nbytes, writable=True)
        self.activate()
        self.drv.dtoh(addr, src, nbytes)

    def launch(self, fn: LoadedFunction, grid: int, threads: int, shared: int, kernargs, stream: int = 0) -> None:
        if type(kernargs) is not KernargBuffer:
            kernargs = self._as_kernargs(kernargs)
        (err,) = self._launch(fn.handle, grid, 1, 1, threads, 1, 1, shared, stream, None, kernargs.extra)
        if err != self._ok:
            self.drv.fail("launch", err, f"{fn.name}, grid={grid}, threads={threads}, shared={shared}")

    def stream_destroy(self, stream: int) -> None:
        self.drv.stream_destroy(stream)

    def stream_synchronize(self, stream: int) -> None:
        self.drv.stream_sync(stream)

    def synchronize(self) -> None:
        self.activate()
        self.drv.device_sync()

    def event_record(self, event, stream: int = 0) -> None:
        self.drv.event_record(event, stream)

    def event_synchronize(self, event) -> None:
        self.drv.event_sync(event)

    def event_elapsed_ms(self, start, end) -> float:
        return float(self.drv.event_elapsed(start, end))

    def event_destroy(self, event) -> None:
        self.drv.event_destroy(event)

    def stream_is_capturing(self, stream: int) -> bool:
        return int(self.drv.stream_is_capturing(stream)) != 0  # CAPTURE_STATUS_NONE is 0 in both

    def stream_wait_stream(self, stream: int, other: int) -> None:
        if stream == other:
            return
        ev = self.event_create()
        try:
            self.drv.event_record(ev, other)
            self.drv.stream_wait_event(stream, ev, 0)
        finally:
            self.drv.event_destroy(ev)
