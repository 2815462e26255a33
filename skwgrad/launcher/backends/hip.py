"""ROCm backend: the HIP runtime through hip-python (``from hip import hip``).

hip-python imports without a ROCm installation and opens ``libamdhip64.so`` at its first call;
that failure becomes a ``BackendError`` ("no ROCm runtime (libamdhip64) found: ..."). Code
objects (hsaco) are loaded with ``hipModuleLoadData`` and launched with
``hipModuleLaunchKernel`` and ``HIP_LAUNCH_PARAM_BUFFER_POINTER`` (note ``HIP_LAUNCH_PARAM_END``
is 3, not 0 as in CUDA: the values come from hip-python). Shared memory is passed as Triton's
own launcher passes it (``metadata['shared']`` as ``sharedMemBytes``).
"""

from __future__ import annotations

import re

from skwgrad.errors import BackendError
from skwgrad.launcher.backends.base import Driver, DriverBackend


# hip-python formats the library name as a bytes repr ("'b'libamdhip64.so''"): print it plainly.
_BYTES_REPR = re.compile(r"'?b'([^']*)''?")


def import_hip():
    try:
        from hip import hip
    except ImportError:
        raise BackendError("the ROCm backend needs hip-python: pip install 'skwgrad[rocmXY]' for your ROCm X.Y, e.g. 'skwgrad[rocm63]' (hip-python)") from None
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


class HipBackend(DriverBackend):
    name = "hip"
    binary_kind = "hsaco"

    def __init__(self, device: int | None = None, hip=None):
        h = hip if hip is not None else import_hip()
        self._h = h
        self._success = h.hipError_t.hipSuccess
        self.device_name = "ROCm device"
        self.arch = ""
        self.compute_units = 0
        self._bind(Driver(h, "hip", self._success, self._errstr))
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
            why = _BYTES_REPR.sub(r"'\1'", str(e))
            raise BackendError(f"no ROCm runtime (libamdhip64) found: {why}") from None
        if err != self._success:
            raise BackendError(f"no usable ROCm device: hipInit failed: {self._errstr(err)}")
        err, count = h.hipGetDeviceCount()
        if err != self._success or count <= 0:
            raise BackendError(
                f"no ROCm device found (hipGetDeviceCount: {self._errstr(err) if err != self._success else count})"
            )
        if device is None:
            device = self.drv.check("hipGetDevice", h.hipGetDevice())
        if not 0 <= device < count:
            raise BackendError(f"ROCm device {device} does not exist ({count} device(s) present)")
        super().__init__(device)
        self.activate()
        props = self.drv.check("hipGetDeviceProperties", h.hipGetDeviceProperties(device))
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

    def activate(self) -> None:
        err, dev = self._h.hipGetDevice()
        if err != self._success or dev != self.device:
            self.drv.check("hipSetDevice", self._h.hipSetDevice(self.device))

    # -- code objects ------------------------------------------------------------------------
    def _prepare_function(self, handle, shared: int) -> None:
        pass  # LDS is sized by the code object and sharedMemBytes; nothing to opt into

    # -- streams and events ------------------------------------------------------------------
    def stream_create(self) -> int:
        self.activate()
        return int(self.drv.check("hipStreamCreateWithFlags", self._h.hipStreamCreateWithFlags(int(self._h.hipStreamNonBlocking))))

    def event_create(self):
        self.activate()
        return self.drv.check("hipEventCreate", self._h.hipEventCreate())

    def pointer_device(self, ptr: int) -> int | None:
        try:
            err, attrs = self._h.hipPointerGetAttributes(ptr)
        except Exception:  # noqa: BLE001
            return None
        if err != self._success or attrs is None:
            return None
        return int(attrs.device)
