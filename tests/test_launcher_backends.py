"""Backends without a GPU: choosing one, clear errors when no runtime is present, and the CUDA and
HIP backends driven through fake driver modules that record every call (the real enums and
constants of cuda-bindings / hip-python are used, so the calls are shaped as the real ones)."""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_launcher_fakes as F  # noqa: E402

from skwgrad.errors import BackendError  # noqa: E402
from skwgrad.launcher import backends as B  # noqa: E402
from skwgrad.launcher.backends.base import KernargBuffer, LoadedFunction  # noqa: E402


def gpu_device_nodes() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/kfd"))


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv("SKWGRAD_BACKEND", raising=False)
    B.reset_backends()
    yield
    B.reset_backends()


# ---------------------------------------------------------------------------------------------
# No runtime
# ---------------------------------------------------------------------------------------------
@pytest.mark.skipif(gpu_device_nodes(), reason="a GPU is present: the no-runtime path cannot be observed here")
def test_get_backend_without_any_gpu_runtime_is_a_clear_error():
    with pytest.raises(BackendError) as ei:
        B.get_backend()
    msg = str(ei.value)
    assert "no GPU runtime" in msg
    assert "cuda:" in msg and "hip:" in msg
    assert "Traceback" not in msg


@pytest.mark.skipif(ctypes.util.find_library("amdhip64") is not None or os.path.exists("/opt/rocm/lib/libamdhip64.so"),
                    reason="a ROCm runtime is installed")  # fmt: skip
def test_hip_backend_first_call_fails_clearly_without_rocm():
    pytest.importorskip("hip")
    from skwgrad.launcher.backends.hip import HipBackend

    with pytest.raises(BackendError, match=r"no ROCm runtime \(libamdhip64\) found"):
        HipBackend()
    os.environ["SKWGRAD_BACKEND"] = "hip"
    try:
        with pytest.raises(BackendError, match=r"(?s)SKWGRAD_BACKEND=hip.*libamdhip64") as ei:
            B.get_backend()
    finally:
        del os.environ["SKWGRAD_BACKEND"]
    assert "cuda:" not in str(ei.value)


def test_missing_runtimes_are_reported_per_backend(monkeypatch):
    import skwgrad.launcher.backends.cuda as cu
    import skwgrad.launcher.backends.hip as hp

    class NoLib:
        def __getattr__(self, name):
            if name in ("CUresult",):
                return type("R", (), {"CUDA_SUCCESS": 0})
            if name == "hipError_t":
                return type("E", (), {"hipSuccess": 0})
            if name.startswith("HIP_LAUNCH_PARAM"):
                return 1
            def fail(*a):
                raise RuntimeError(f"failed to dlopen for {name}")
            return fail

    monkeypatch.setattr(cu, "import_driver", lambda: NoLib())
    monkeypatch.setattr(hp, "import_hip", lambda: NoLib())
    with pytest.raises(BackendError) as ei:
        B.get_backend()
    msg = str(ei.value)
    assert "cuda: no NVIDIA driver (libcuda) found: failed to dlopen" in msg
    assert "hip: no ROCm runtime (libamdhip64) found: failed to dlopen" in msg


def test_missing_bindings_are_named(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *a, **k):
        if name.startswith("cuda") or name.startswith("hip"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(BackendError) as ei:
        B.get_backend()
    assert "cuda-bindings" in str(ei.value) and "hip-python" in str(ei.value)


def test_skwgrad_backend_overrides_and_unknown_names_are_refused(monkeypatch):
    tried = []

    def create(kind, device):
        tried.append(kind)
        if kind == "hip":
            be = F.FakeBackend(arch="gfx942", cus=304)
            be.name = "hip"
            return be
        raise BackendError("no device")

    monkeypatch.setattr(B, "_create", create)
    be = B.get_backend()
    assert tried == ["cuda", "hip"] and be.arch == "gfx942"
    assert B.get_backend() is be  # one object per (runtime, device)
    B.reset_backends()
    tried.clear()
    monkeypatch.setenv("SKWGRAD_BACKEND", "hip")
    B.get_backend()
    assert tried == ["hip"]
    B.reset_backends()
    tried.clear()
    monkeypatch.setenv("SKWGRAD_BACKEND", "cuda")
    with pytest.raises(BackendError, match="SKWGRAD_BACKEND=cuda"):
        B.get_backend()
    assert tried == ["cuda"]
    monkeypatch.setenv("SKWGRAD_BACKEND", "opencl")
    with pytest.raises(BackendError, match="unknown backend 'opencl'"):
        B.get_backend()


# ---------------------------------------------------------------------------------------------
# KernargBuffer
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("params", [(1, 2, 0), (1, 2, 3)])  # CUDA, HIP
def test_kernarg_buffer_extra_array_points_at_live_bytes(params):
    buf = KernargBuffer(b"\x01" * 40, *params)
    cfg = (ctypes.c_void_p * 5).from_address(buf.extra)
    assert (cfg[0], cfg[2], cfg[4] or 0) == params
    assert ctypes.c_size_t.from_address(cfg[3]).value == 40
    buf.data[8:16] = (0xDEADBEEF).to_bytes(8, "little")  # what Packer.pack_into does
    assert ctypes.string_at(cfg[1], 40) == bytes(buf.data)
    with pytest.raises(BufferError):
        buf.data.extend(b"x")  # pinned: the address can never move


# ---------------------------------------------------------------------------------------------
# CUDA through a fake driver
# ---------------------------------------------------------------------------------------------
class FakeCuda:
    """The cuda-bindings driver surface the backend uses; real enums, recorded calls."""

    def __init__(self, cc=(9, 0), sms=132, optin=227 * 1024, fail=None):
        from cuda.bindings import driver as real

        self.real = real
        for n in ("CUresult", "CUdevice_attribute", "CUfunction_attribute", "CUstream_flags", "CUevent_flags", "CUpointer_attribute",
                  "CUlaunchAttribute", "CUlaunchAttributeID", "CUlaunchConfig"):
            setattr(self, n, getattr(real, n))
        self.cc, self.sms, self.optin = cc, sms, optin
        self.fail = fail or {}
        self.calls = []
        self.ctx = real.CUcontext(0)
        self.launched = []

    def _r(self, name, *vals):
        self.calls.append(name)
        err = self.fail.get(name, self.CUresult.CUDA_SUCCESS)
        return (err, *vals)

    def cuInit(self, f):
        return self._r("cuInit")

    def cuDeviceGetCount(self):
        return self._r("cuDeviceGetCount", 1)

    def cuCtxGetCurrent(self):
        return self._r("cuCtxGetCurrent", self.ctx)

    def cuCtxGetDevice(self):
        return self._r("cuCtxGetDevice", 0)

    def cuCtxSetCurrent(self, ctx):
        self.ctx = ctx
        return self._r("cuCtxSetCurrent")

    def cuDeviceGet(self, i):
        return self._r("cuDeviceGet", self.real.CUdevice(i))

    def cuDevicePrimaryCtxRetain(self, dev):
        return self._r("cuDevicePrimaryCtxRetain", self.real.CUcontext(0x1234))

    def cuDeviceGetAttribute(self, attr, dev):
        a = self.CUdevice_attribute
        v = {
            a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: self.cc[0],
            a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: self.cc[1],
            a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: self.sms,
            a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: self.optin,
            a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: 48 * 1024,
        }[attr]
        return self._r("cuDeviceGetAttribute", v)

    def cuDeviceGetName(self, n, dev):
        return self._r("cuDeviceGetName", b"NVIDIA H200\x00\x00\x00")

    def cuGetErrorName(self, err):
        return (self.CUresult.CUDA_SUCCESS, err.name.encode())

    def cuGetErrorString(self, err):
        return (self.CUresult.CUDA_SUCCESS, b"an error string")

    def cuModuleLoadData(self, image):
        assert isinstance(image, bytes)
        return self._r("cuModuleLoadData", self.real.CUmodule(0x77))

    def cuModuleGetFunction(self, mod, name):
        assert isinstance(name, bytes)
        return self._r("cuModuleGetFunction", self.real.CUfunction(0x88))

    def cuFuncSetAttribute(self, fn, attr, value):
        self.calls.append(("cuFuncSetAttribute", attr, value))
        return (self.CUresult.CUDA_SUCCESS,)

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, fn, threads, smem):
        self.calls.append(("occupancy", threads, smem))
        return (self.CUresult.CUDA_SUCCESS, 3)

    def cuMemAlloc(self, n):
        return self._r("cuMemAlloc", self.real.CUdeviceptr(0x1000_0000))

    def cuMemFree(self, p):
        return self._r("cuMemFree")

    capturing = ()  # streams a test marks as being captured

    def cuStreamIsCapturing(self, stream):
        st = self.real.CUstreamCaptureStatus
        return self._r("cuStreamIsCapturing", st.CU_STREAM_CAPTURE_STATUS_ACTIVE if stream in self.capturing else st.CU_STREAM_CAPTURE_STATUS_NONE)

    def cuMemsetD8Async(self, ptr, byte, n, stream):
        self.calls.append(("memset", ptr, byte, n, stream))
        return (self.fail.get("cuMemsetD8Async", self.CUresult.CUDA_SUCCESS),)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        cfg = (ctypes.c_void_p * 5).from_address(extra)
        size = ctypes.c_size_t.from_address(cfg[3]).value
        self.launched.append({
            "grid": (gx, gy, gz), "block": (bx, by, bz), "smem": smem, "stream": stream, "params": params,
            "cfg": (cfg[0], cfg[2], cfg[4] or 0), "bytes": ctypes.string_at(cfg[1], size),
        })  # fmt: skip
        return (self.fail.get("cuLaunchKernel", self.CUresult.CUDA_SUCCESS),)

    def cuLaunchKernelEx(self, config, f, params, extra):
        cfg = (ctypes.c_void_p * 5).from_address(extra)
        size = ctypes.c_size_t.from_address(cfg[3]).value
        attrs = [(int(a.id), a.value.programmaticStreamSerializationAllowed) for a in config.attrs[: config.numAttrs]]
        self.launched.append({
            "grid": (config.gridDimX, config.gridDimY, config.gridDimZ), "block": (config.blockDimX, config.blockDimY, config.blockDimZ),
            "smem": config.sharedMemBytes, "stream": int(config.hStream), "params": params, "attrs": attrs,
            "bytes": ctypes.string_at(cfg[1], size),
        })  # fmt: skip
        return (self.fail.get("cuLaunchKernelEx", self.CUresult.CUDA_SUCCESS),)

    def cuPointerGetAttribute(self, attr, ptr):
        return (self.CUresult.CUDA_SUCCESS, 0)

    params = None  # [(offset, size)] cuFuncGetParamInfo reports; None: the driver lacks it

    def __getattr__(self, name):
        if name == "cuFuncGetParamInfo" and self.params is not None:
            def info(fn, i):
                if i < len(self.params):
                    return (self.CUresult.CUDA_SUCCESS, *self.params[i])
                return (self.CUresult.CUDA_ERROR_INVALID_VALUE, 0, 0)

            return info
        raise AttributeError(name)


def cuda_backend(**kw):
    pytest.importorskip("cuda.bindings")
    from skwgrad.launcher.backends.cuda import CudaBackend

    d = FakeCuda(**kw)
    return CudaBackend(0, driver=d), d


def test_cuda_backend_reads_the_device():
    be, d = cuda_backend()
    assert (be.arch, be.compute_units, be.device_name, be.max_shared) == ("sm_90", 132, "NVIDIA H200", 227 * 1024)
    assert "cuCtxSetCurrent" in d.calls  # the primary context was made current
    be2, _ = cuda_backend(cc=(10, 0), sms=148)
    assert (be2.arch, be2.compute_units) == ("sm_100", 148)


def test_cuda_backend_load_launch_and_opt_in():
    be, d = cuda_backend()
    small = be.load("k1", b"cubin", "wgrad_splitk", 128, 16384)
    assert not [c for c in d.calls if isinstance(c, tuple) and c[0] == "cuFuncSetAttribute"]
    again = be.load("k1", lambda: pytest.fail("the binary must not be read twice"), "wgrad_splitk", 128, 16384)
    assert again is small and d.calls.count("cuModuleLoadData") == 1
    big = be.load("k2", lambda: b"cubin2", "wgrad_streamk", 256, 100 * 1024)
    opt = [c for c in d.calls if isinstance(c, tuple) and c[0] == "cuFuncSetAttribute"]
    assert opt == [("cuFuncSetAttribute", d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100 * 1024)]
    assert be.max_active_per_cu(big) == 3 and ("occupancy", 256, 100 * 1024) in d.calls
    with pytest.raises(BackendError, match="shared memory"):
        be.load("k3", b"x", "f", 128, 300 * 1024)
    buf = be.kernarg_buffer(bytes(range(48)))
    be.launch(big, 77, 256, 100 * 1024, buf, stream=0xABC)
    ln = d.launched[-1]
    assert ln["grid"] == (77, 1, 1) and ln["block"] == (256, 1, 1) and ln["smem"] == 100 * 1024 and ln["stream"] == 0xABC
    assert ln["params"] is None and ln["cfg"] == (1, 2, 0) and ln["bytes"] == bytes(range(48))
    be.launch(small, 1, 128, 16384, b"\x05" * 16)  # plain bytes are packed on the spot
    assert d.launched[-1]["bytes"] == b"\x05" * 16
    be.memset(0x1000, 0xFF, 64, 5)
    assert ("memset", 0x1000, 0xFF, 64, 5) in d.calls


def test_cuda_errors_name_the_call_and_the_error():
    be, d = cuda_backend(fail={})
    fn = be.load("k", b"c", "f", 128, 0)
    d.fail["cuLaunchKernel"] = d.CUresult.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(BackendError, match=r"cuLaunchKernel\(f, grid=3.*CUDA_ERROR_INVALID_VALUE"):
        be.launch(fn, 3, 128, 0, b"\0" * 8)
    d.fail["cuMemsetD8Async"] = d.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(BackendError, match="cuMemsetD8Async.*CUDA_ERROR_ILLEGAL_ADDRESS"):
        be.memset(16, 0, 4)
    with pytest.raises(BackendError, match="cuInit failed: CUDA_ERROR_NO_DEVICE"):
        cuda_backend(fail={"cuInit": FakeCuda().CUresult.CUDA_ERROR_NO_DEVICE})
    with pytest.raises(BackendError, match="cuModuleLoadData failed: CUDA_ERROR_NO_BINARY_FOR_GPU"):
        b2, d2 = cuda_backend()
        d2.fail["cuModuleLoadData"] = d2.CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU
        b2.load("x", b"c", "f", 128, 0)


def test_cuda_plan_end_to_end_bytes():
    """A plan on the CUDA backend hands the driver exactly the packed block the ABI describes."""
    from skwgrad.abi.conv import parse_problem
    from skwgrad.launcher.plan import Kernel, Plan

    be, d = cuda_backend()
    c = F.FakeCache()
    e = c.add(F.spec("wgrad_sk", "linear", "bf16", mode="dp_sk", vc=8, vk=8))
    p = parse_problem("n=4,c=64,k=64,h=16,w=16,y=3,x=3,padding=1")
    plan = Plan(p, Kernel.from_entry(e, c), be, pool=132)
    plan.launch(0x20000, 0x30000, 0x40000, stream=9)
    plan.launch(0x20000, 0x30000, 0x40000, stream=9)
    first, second = (F.decode(e.spec, ln["bytes"]) for ln in d.launched)
    assert (first["dy"], first["x"], first["dw"]) == (0x20000, 0x30000, 0x40000)
    # Zero-at-rest flags: both launches are the same bytes (a graph can replay them unchanged).
    assert d.launched[0]["bytes"] == d.launched[1]["bytes"]
    from skwgrad.launcher.workspace import arenas

    zeroed, scratch = arenas(be, 9)
    assert first["sk_flags"] == zeroed.ptr and first["sk_partials"] == scratch.ptr
    assert zeroed.nbytes >= plan.layout.region("flags").nbytes and scratch.nbytes >= plan.layout.region("partials").nbytes
    assert d.launched[0]["grid"] == (plan.grid, 1, 1) and d.launched[0]["stream"] == 9
    zero = [c for c in d.calls if isinstance(c, tuple) and c[0] == "memset"]
    assert zero == [("memset", zeroed.ptr, 0, zeroed.nbytes, 9)]  # once, when the arena was allocated
    # asked only when an arena must grow (the first launch, and each arena before it grows): a
    # warm launch makes no call but the launch itself
    assert d.calls.count("cuStreamIsCapturing") == 1 + 2


@pytest.mark.parametrize("variant, dependent", [("atomic", True), ("direct", False)])
def test_cuda_atomic_plan_starts_its_kernel_while_dw_is_zeroed(variant, dependent):
    """On sm_90 (abi.arch dependent_launch) an atomic plan zeroes dW and launches its kernel with
    programmatic stream serialization (the kernel waits for the memset before writing dW:
    abi.spec.dw_zeroed_before_launch); a plan that does not zero dW launches plainly."""
    from skwgrad.abi.conv import parse_problem
    from skwgrad.abi.spec import dw_zeroed_before_launch
    from skwgrad.launcher.plan import Kernel, Plan

    be, d = cuda_backend()
    c = F.FakeCache()
    e = c.add(F.spec("wgrad", variant, "bf16", "fp32" if variant == "atomic" else "bf16", vc=8, vk=8))
    p = parse_problem("n=4,c=64,k=64,h=16,w=16,y=3,x=3,padding=1" + (",dw_dtype=fp32" if variant == "atomic" else ""))
    plan = Plan(p, Kernel.from_entry(e, c), be, ks_count=4 if variant == "atomic" else 1)
    plan.launch(0x20000, 0x30000, 0x40000, stream=9)
    ln = d.launched[-1]
    assert dw_zeroed_before_launch(variant) == dependent
    if dependent:
        assert ("memset", 0x40000, 0, plan.dw_nbytes, 9) in d.calls
        programmatic = int(d.real.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
        assert ln["attrs"] == [(programmatic, 1)] and ln["stream"] == 9 and ln["grid"] == (plan.grid, 1, 1)
        assert F.decode(e.spec, ln["bytes"])["dw"] == 0x40000
        plan.launch(0x20000, 0x30000, 0x50000, stream=11)  # one kept configuration, the stream per call
        assert d.launched[-1]["stream"] == 11 and F.decode(e.spec, d.launched[-1]["bytes"])["dw"] == 0x50000
    else:
        assert "attrs" not in ln and not [c for c in d.calls if isinstance(c, tuple) and c[0] == "memset" and c[1] == 0x40000]


def test_cuda_stage2_starts_while_the_main_kernel_finishes():
    """A workspace plan's Stage-2 reduce is a dependent launch on sm_90 (it waits for the main
    kernel before anything: aot.kernels.stage2); the main kernel, which zeroes nothing, is plain."""
    from skwgrad.abi.conv import parse_problem
    from skwgrad.launcher.plan import Kernel, Plan

    be, d = cuda_backend()
    c = F.FakeCache()
    e = c.add(F.spec("wgrad", "workspace", "bf16", vc=8, vk=8))
    s2 = Kernel.from_entry(c.add(F.stage2("bf16"), "sm_90"), c)
    p = parse_problem("n=4,c=64,k=64,h=16,w=16,y=3,x=3,padding=1")
    plan = Plan(p, Kernel.from_entry(e, c), be, ks_count=4, stage2=s2)
    plan.launch(0x20000, 0x30000, 0x40000, stream=9)
    main, second = d.launched[-2:]
    assert "attrs" not in main and main["grid"] == (plan.grid, 1, 1)
    programmatic = int(d.real.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
    assert second["attrs"] == [(programmatic, 1)] and second["stream"] == 9


def test_cuda_dependent_launch_without_the_call_is_a_plain_launch(monkeypatch):
    """Bindings without cuLaunchKernelEx launch plainly: the kernel's wait then returns at once."""
    be, d = cuda_backend()
    be._launch_ex = None
    fn = be.load("k", b"c", "f", 128, 0)
    be.launch_dependent(fn, 5, 128, 0, b"\1" * 8, stream=3)
    assert "attrs" not in d.launched[-1] and d.launched[-1]["grid"] == (5, 1, 1) and d.launched[-1]["stream"] == 3


def test_cuda_dependent_launch_errors_name_the_call():
    be, d = cuda_backend()
    fn = be.load("k", b"c", "f", 128, 0)
    d.fail["cuLaunchKernelEx"] = d.CUresult.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(BackendError, match=r"cuLaunchKernelEx\(f, grid=3.*dependent.*CUDA_ERROR_INVALID_VALUE"):
        be.launch_dependent(fn, 3, 128, 0, b"\0" * 8)


# ---------------------------------------------------------------------------------------------
# HIP through a fake hip module
# ---------------------------------------------------------------------------------------------
class FakeHip:
    def __init__(self, arch="gfx942:sramecc+:xnack-", cus=304, fail=None):
        from hip import hip as real

        self.real = real
        self.hipError_t = real.hipError_t
        self.HIP_LAUNCH_PARAM_BUFFER_POINTER = real.HIP_LAUNCH_PARAM_BUFFER_POINTER
        self.HIP_LAUNCH_PARAM_BUFFER_SIZE = real.HIP_LAUNCH_PARAM_BUFFER_SIZE
        self.HIP_LAUNCH_PARAM_END = real.HIP_LAUNCH_PARAM_END
        self.hipStreamNonBlocking = real.hipStreamNonBlocking
        self.arch, self.cus = arch, cus
        self.fail = fail or {}
        self.calls = []
        self.launched = []
        self.dev = 0

    def _r(self, name, *vals):
        self.calls.append(name)
        return (self.fail.get(name, self.hipError_t.hipSuccess), *vals)

    def hipInit(self, f):
        return self._r("hipInit")

    def hipGetDeviceCount(self):
        return self._r("hipGetDeviceCount", 1)

    def hipGetDevice(self):
        return self._r("hipGetDevice", self.dev)

    def hipSetDevice(self, d):
        self.dev = d
        return self._r("hipSetDevice")

    def hipGetDeviceProperties(self, d):
        class P:
            gcnArchName = self.arch
            multiProcessorCount = self.cus
            sharedMemPerBlock = 64 * 1024
            name = "AMD Instinct MI300X"

        return self._r("hipGetDeviceProperties", P())

    def hipGetErrorName(self, e):
        return (self.hipError_t.hipSuccess, e.name)

    def hipGetErrorString(self, e):
        return (self.hipError_t.hipSuccess, "hip error text")

    def hipModuleLoadData(self, image):
        return self._r("hipModuleLoadData", object())

    def hipModuleGetFunction(self, m, name):
        assert isinstance(name, bytes)
        return self._r("hipModuleGetFunction", object())

    def hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(self, f, threads, smem):
        return self._r("occ", 2)

    capturing = ()

    def hipStreamIsCapturing(self, stream):
        st = self.real.hipStreamCaptureStatus
        return self._r("hipStreamIsCapturing", st.hipStreamCaptureStatusActive if stream in self.capturing else st.hipStreamCaptureStatusNone)

    def hipMemsetD8Async(self, ptr, byte, n, stream):
        self.calls.append(("memset", ptr, byte, n, stream))
        return (self.hipError_t.hipSuccess,)

    def hipModuleLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        cfg = (ctypes.c_void_p * 5).from_address(extra)
        size = ctypes.c_size_t.from_address(cfg[3]).value
        self.launched.append({"grid": gx, "block": bx, "smem": smem, "stream": stream, "params": params,
                              "cfg": (cfg[0], cfg[2], cfg[4]), "bytes": ctypes.string_at(cfg[1], size)})  # fmt: skip
        return (self.fail.get("hipModuleLaunchKernel", self.hipError_t.hipSuccess),)


def hip_backend(**kw):
    pytest.importorskip("hip")
    from skwgrad.launcher.backends.hip import HipBackend

    h = FakeHip(**kw)
    return HipBackend(0, hip=h), h


def test_hip_backend_reads_the_device_and_launches_with_hip_constants():
    be, h = hip_backend()
    assert (be.arch, be.compute_units, be.binary_kind) == ("gfx942", 304, "hsaco")
    assert be.launch_params == (1, 2, 3)  # HIP_LAUNCH_PARAM_END is 3, not CUDA's 0
    fn = be.load("k", b"hsaco", "wgrad_streamk", 256, 32768)
    assert isinstance(fn, LoadedFunction) and be.max_active_per_cu(fn) == 2
    be.launch(fn, 12, 256, 32768, be.kernarg_buffer(b"\x07" * 24), stream=3)
    ln = h.launched[-1]
    assert ln["cfg"] == (1, 2, 3) and ln["bytes"] == b"\x07" * 24 and ln["params"] is None
    assert (ln["grid"], ln["block"], ln["smem"], ln["stream"]) == (12, 256, 32768, 3)
    h.fail["hipModuleLaunchKernel"] = h.hipError_t.hipErrorInvalidValue
    with pytest.raises(BackendError, match="hipModuleLaunchKernel.*hipErrorInvalidValue"):
        be.launch(fn, 12, 256, 32768, b"\0" * 8)


def test_hip_no_device_is_clear():
    with pytest.raises(BackendError, match="no ROCm device"):
        hip_backend(fail={"hipGetDeviceCount": FakeHip().hipError_t.hipErrorNoDevice})


def test_cuda_param_layout_is_checked_at_load_where_the_driver_can():
    from skwgrad.abi.conv import parse_problem
    from skwgrad.abi.kernargs import declaration
    from skwgrad.errors import AbiError
    from skwgrad.launcher.plan import Kernel, Plan

    c = F.FakeCache()
    e = c.add(F.spec("wgrad", "direct", "bf16", vc=8, vk=8))
    p = parse_problem("n=2,c=16,k=16,h=8,w=8,y=3,x=3,padding=1")
    good = [(s.offset, s.arg.size) for s in declaration("wgrad", "direct").layout(2)[0]]
    be, d = cuda_backend()
    d.params = good
    Plan(p, Kernel.from_entry(e, c), be)  # matches
    be, d = cuda_backend()
    d.params = good[:-1]  # the object has one trailing pointer fewer than its metadata says
    with pytest.raises(AbiError, match="rebuild the cache"):
        Plan(p, Kernel.from_entry(e, c), be)
    be, d = cuda_backend()  # an older driver without cuFuncGetParamInfo: nothing to compare
    assert be.param_layout(be.load("k", b"c", "f", 128, 0)) is None
