"""skwgrad.wgrad / skwgrad.plan and the array interop, end to end through the fake backend (whose
emulated kernels compute from the kernarg bytes): results are compared with PyTorch's own
weight gradient on CPU, so the layout rules are checked against PyTorch, not against ourselves."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_launcher_fakes as F  # noqa: E402

import skwgrad  # noqa: E402
from skwgrad.abi.conv import ConvProblem  # noqa: E402
from skwgrad.errors import AbiError, LayoutError, ProblemError  # noqa: E402
from skwgrad.launcher import api, hostdata, interop  # noqa: E402
from skwgrad.launcher import layout as L  # noqa: E402
from skwgrad.launcher.select import NoKernelError  # noqa: E402


@pytest.fixture
def fake(monkeypatch):
    be = F.FakeBackend(cus=8, max_active=2)
    cache = F.full_cache(dtype="fp32", vecs=((1, 1), (4, 4)))
    for k, e in F.full_cache(dtype="bf16", vecs=((1, 1),))._entries.items():
        cache._entries[k] = e
        cache._blobs[k] = F.full_cache(dtype="bf16", vecs=((1, 1),))._blobs[k]
    monkeypatch.setattr(api, "get_backend", lambda device=None, kind=None: be)
    api.clear_plans()
    yield be, cache
    api.clear_plans()


def torch_wgrad(x_nchw, dy_nchw, w_shape, stride, padding, dilation, groups):
    """PyTorch's weight gradient in float64 (CPU); padding may be ((lo, hi), ...) pairs."""
    x = x_nchw.double()
    sd = x.dim() - 2
    if padding and isinstance(padding, (tuple, list)) and isinstance(padding[0], (tuple, list)):
        flat = []
        for lo, hi in reversed(padding):
            flat += [lo, hi]
        x = torch.nn.functional.pad(x, flat)
        padding = 0
    pad = [padding] * sd if isinstance(padding, int) else list(padding)
    st = [stride] * sd if isinstance(stride, int) else list(stride)
    dl = [dilation] * sd if isinstance(dilation, int) else list(dilation)
    w = torch.zeros(w_shape, dtype=torch.float64)
    return torch.ops.aten.convolution_backward(dy_nchw.double(), x, w, None, st, pad, dl, False, [0] * sd, groups, [False, True, False])[1]


CASES = [
    # (N, C, K, spatial, filter, stride, padding, dilation, groups)
    (2, 8, 12, (9, 10), (3, 3), 1, 1, 1, 1),  # dense, partial tiles
    (2, 8, 8, (11, 9), (3, 2), 2, 1, 1, 1),  # strided, non-square filter
    (1, 4, 8, (12, 12), (3, 3), 1, 2, 2, 1),  # dilated
    (2, 8, 12, (7, 7), (3, 3), 1, 1, 1, 4),  # grouped
    (2, 6, 6, (9, 9), (5, 5), 1, 2, 1, 6),  # depthwise
    (1, 4, 4, (4, 6, 5), (3, 3, 2), (1, 2, 1), 1, 1, 1),  # 3-D
    (2, 4, 4, (8, 7), (3, 3), 1, ((0, 2), (1, 0)), 1, 1),  # asymmetric padding
]


def _out_size(sp, f, stride, padding, dilation):
    sd = len(sp)
    st = (stride,) * sd if isinstance(stride, int) else stride
    dl = (dilation,) * sd if isinstance(dilation, int) else dilation
    if isinstance(padding, int):
        pads = [(padding, padding)] * sd
    else:
        pads = list(padding)
    return tuple((i + lo + hi - d * (k - 1) - 1) // s + 1 for i, (lo, hi), k, s, d in zip(sp, pads, f, st, dl))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kind", ["torch_channels_last", "numpy_nhwc", "numpy_nchw_view"])
def test_wgrad_matches_pytorch(fake, case, kind):
    be, cache = fake
    n, c, k, sp, f, stride, padding, dil, g = case
    sd = len(sp)
    out_sp = _out_size(sp, f, stride, padding, dil)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn((n, c, *sp), generator=gen)
    dy = torch.randn((n, k, *out_sp), generator=gen)
    fmt = torch.channels_last_3d if sd == 3 else torch.channels_last
    ref = torch_wgrad(x, dy, (k, c // g, *f), stride, padding, dil, g)
    perm = (0, *range(2, sd + 2), 1)  # NC... -> N...C
    if kind == "torch_channels_last":
        xi, dyi = x.contiguous(memory_format=fmt), dy.contiguous(memory_format=fmt)
    elif kind == "numpy_nhwc":
        xi, dyi = x.permute(perm).contiguous().numpy(), dy.permute(perm).contiguous().numpy()
    else:  # PyTorch-shaped numpy views of channels-last memory
        back = (0, sd + 1, *range(1, sd + 1))
        xi = x.permute(perm).contiguous().numpy().transpose(back)
        dyi = dy.permute(perm).contiguous().numpy().transpose(back)
    dw = skwgrad.wgrad(xi, dyi, filter_size=f, stride=stride, padding=padding, dilation=dil, groups=g, cache=cache)
    assert tuple(dw.shape) == (k, c // g, *f)
    if kind == "torch_channels_last":
        assert isinstance(dw, torch.Tensor) and dw.dtype == torch.float32
        assert dw.is_contiguous(memory_format=fmt)
        got = dw.double()
    else:
        assert isinstance(dw, np.ndarray) and dw.dtype == np.float32
        assert dw.transpose(0, *range(2, sd + 2), 1).flags.c_contiguous  # channels-last memory
        got = torch.from_numpy(np.ascontiguousarray(dw)).double()
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    assert be.launches, "nothing was launched"


def test_bf16_inputs_and_fp32_dw(fake):
    be, cache = fake
    gen = torch.Generator().manual_seed(1)
    x = torch.randn((2, 8, 9, 9), generator=gen).bfloat16().contiguous(memory_format=torch.channels_last)
    dy = torch.randn((2, 4, 9, 9), generator=gen).bfloat16().contiguous(memory_format=torch.channels_last)
    ref = torch_wgrad(x, dy, (4, 8, 3, 3), 1, 1, 1, 1)
    dw = skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=cache)
    assert dw.dtype == torch.bfloat16
    torch.testing.assert_close(dw.double(), ref, rtol=2e-2, atol=5e-2)
    dw32 = skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=cache, dw_dtype="fp32")
    assert dw32.dtype == torch.float32
    torch.testing.assert_close(dw32.double(), ref, rtol=1e-5, atol=1e-4)
    out = torch.empty((4, 8, 3, 3), dtype=torch.float32).contiguous(memory_format=torch.channels_last)
    got = skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=cache, out=out, reduction="atomic")
    assert got is out
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-4)
    assert be.launches[-1]["spec"].variant == "atomic"


def test_out_in_either_weight_shape(fake):
    be, cache = fake
    gen = torch.Generator().manual_seed(2)
    x = torch.randn((2, 4, 6, 6), generator=gen)
    dy = torch.randn((2, 8, 6, 6), generator=gen)
    ref = torch_wgrad(x, dy, (8, 4, 3, 3), 1, 1, 1, 1)
    xn, dyn = x.permute(0, 2, 3, 1).contiguous().numpy(), dy.permute(0, 2, 3, 1).contiguous().numpy()
    ohwi = np.full((8, 3, 3, 4), np.nan, dtype=np.float32)
    assert skwgrad.wgrad(xn, dyn, filter_size=3, padding=1, cache=cache, out=ohwi) is ohwi
    np.testing.assert_allclose(ohwi.transpose(0, 3, 1, 2), ref.numpy(), rtol=1e-4, atol=1e-4)
    oihw = np.full((8, 3, 3, 4), np.nan, dtype=np.float32).transpose(0, 3, 1, 2)
    skwgrad.wgrad(xn, dyn, filter_size=3, padding=1, cache=cache, out=oihw)
    np.testing.assert_allclose(oihw, ref.numpy(), rtol=1e-4, atol=1e-4)
    plain = np.full((8, 4, 3, 3), np.nan, dtype=np.float32)  # PyTorch's shape, contiguous: copied in
    assert skwgrad.wgrad(xn, dyn, filter_size=3, padding=1, cache=cache, out=plain) is plain
    np.testing.assert_allclose(plain, ref.numpy(), rtol=1e-4, atol=1e-4)
    with pytest.raises(ProblemError, match="out"):
        skwgrad.wgrad(xn, dyn, filter_size=3, padding=1, cache=cache, out=np.zeros((8, 4, 9), np.float32))
    with pytest.raises(ProblemError, match="dtype"):
        skwgrad.wgrad(xn, dyn, filter_size=3, padding=1, cache=cache, out=np.zeros((8, 3, 3, 4), np.float16), dw_dtype="fp32")


def test_bad_inputs_are_refused_clearly(fake):
    be, cache = fake
    x = torch.randn((2, 8, 6, 6)).contiguous(memory_format=torch.channels_last)
    dy = torch.randn((2, 4, 6, 6)).contiguous(memory_format=torch.channels_last)
    kw = dict(filter_size=3, padding=1, cache=cache)
    with pytest.raises(ProblemError, match="torch.float64"):
        skwgrad.wgrad(x.double(), dy.double(), **kw)
    with pytest.raises(ProblemError, match="same dtype"):
        skwgrad.wgrad(x, dy.half(), **kw)
    with pytest.raises(ProblemError, match=r"dy's spatial size is \(6, 6\).*gives \(4, 4\)"):
        skwgrad.wgrad(x, dy, filter_size=3, padding=0, cache=cache)
    with pytest.raises(ProblemError, match="batch"):
        skwgrad.wgrad(x, dy[:1].contiguous(memory_format=torch.channels_last), **kw)
    with pytest.raises(ProblemError, match="divisible by groups"):
        skwgrad.wgrad(x, dy, filter_size=3, padding=1, groups=3, cache=cache)
    with pytest.raises(ProblemError, match="dy has 4 dims.*3-D convolution takes 5"):
        skwgrad.wgrad(x.unsqueeze(2), dy, **kw)
    with pytest.raises(ProblemError, match="3 values|2 \\(Y, X\\)"):
        skwgrad.wgrad(x, dy, filter_size=(3, 3, 3, 3), cache=cache)
    with pytest.raises(ProblemError, match="must be fp32"):
        skwgrad.wgrad(x.bfloat16(), dy.bfloat16(), reduction="atomic", **kw)
    with pytest.raises(ProblemError, match="skwgrad takes torch tensors"):
        skwgrad.wgrad([1, 2], dy, **kw)
    with pytest.raises(ProblemError, match="streamk="):
        skwgrad.wgrad(x, dy, streamk="yes", **kw)


def test_kernels_of_another_arch_are_never_used(fake, monkeypatch):
    be, _ = fake
    amd = F.full_cache(arch="gfx942", dtype="fp32", dims=(2,), vecs=((1, 1),))
    x = np.zeros((1, 6, 6, 4), np.float32)
    dy = np.zeros((1, 6, 6, 4), np.float32)
    with pytest.raises(NoKernelError, match=r'(?s)on sm_90.*compile-all --arch sm_90 --problem "n=1,c=4,k=4,h=6,w=6'):
        skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=amd, layout="nhwc")

    # A cache that (wrongly) hands back a gfx942 entry for sm_90 is still refused at plan build.
    class Liar(F.FakeCache):
        def find(self, arch, **kw):
            return amd.find("gfx942", **kw)

    liar = Liar()
    liar._blobs = amd._blobs
    with pytest.raises(ProblemError, match="built for gfx942"):
        skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=liar, streamk="off", layout="nhwc")


class CAI:
    """A device array known only by its __cuda_array_interface__."""

    def __init__(self, ptr, shape, typestr="<f4", strides=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False), "strides": strides, "version": 3}


def test_cuda_array_interface_inputs_and_device_result(fake):
    be, cache = fake
    p = ConvProblem(n=2, c=4, k=8, hi=6, wi=5, y=3, x=3, pad_lo=(0, 1, 1), pad_hi=(0, 1, 1), dtype="fp32")
    xp, dyp, _, ref = F.random_device_inputs(be, p)
    x = CAI(xp, p.x_shape[:-2] + (4,))
    dy = CAI(dyp, p.dy_shape[:-2] + (8,))
    dw = skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=cache)
    assert isinstance(dw, hostdata.DeviceArray) and dw.shape == (8, 4, 3, 3)
    cai = dw.__cuda_array_interface__
    assert cai["typestr"] == "<f4" and cai["strides"] == (4 * 36, 4, 4 * 12, 4 * 4)
    np.testing.assert_allclose(dw.to_numpy(), ref.reshape(8, 3, 3, 4).transpose(0, 3, 1, 2), rtol=1e-5, atol=1e-5)
    dw.free()


def test_arrays_on_different_devices_are_refused(fake, monkeypatch):
    be, cache = fake
    p = ConvProblem(n=1, c=4, k=4, hi=5, wi=5, y=3, x=3, dtype="fp32")
    xp, dyp, _, _ = F.random_device_inputs(be, p)
    monkeypatch.setattr(be, "pointer_device", lambda ptr: 1 if ptr == dyp else 0)
    with pytest.raises(ProblemError, match="dy is on device 1"):
        skwgrad.wgrad(CAI(xp, (1, 5, 5, 4)), CAI(dyp, (1, 3, 3, 4)), filter_size=3, cache=cache)
    va = interop.ArrayView(None, "torch", 16, (1,), (1,), "fp32", 0, "cuda")
    vb = interop.ArrayView(None, "cupy", 32, (1,), (1,), "fp32", 1, "cuda")
    with pytest.raises(ProblemError, match="different devices"):
        interop.device_of([va, vb])
    vc = interop.ArrayView(None, "dlpack", 32, (1,), (1,), "fp32", 0, "hip")
    with pytest.raises(ProblemError, match="different runtimes"):
        interop.device_of([va, vc])


def _capsule(data_ptr, shape, strides, code, bits, device_type, device_id):
    t = interop._DLManagedTensor()
    n = len(shape)
    t._shape = (ctypes.c_int64 * n)(*shape)
    t._strides = (ctypes.c_int64 * n)(*strides)
    t.dl_tensor.data = data_ptr
    t.dl_tensor.device = interop._DLDevice(device_type, device_id)
    t.dl_tensor.ndim = n
    t.dl_tensor.dtype = interop._DLDataType(code, bits, 1)
    t.dl_tensor.shape = ctypes.cast(t._shape, ctypes.POINTER(ctypes.c_int64))
    t.dl_tensor.strides = ctypes.cast(t._strides, ctypes.POINTER(ctypes.c_int64))
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return t, new(ctypes.addressof(t), b"dltensor", None)


class DL:
    def __init__(self, *a):
        self._t, self._cap = _capsule(*a)

    def __dlpack__(self, stream=None):
        return self._cap

    def __dlpack_device__(self):
        return (self._t.dl_tensor.device.device_type, self._t.dl_tensor.device.device_id)


def test_dlpack_views_decode_pointer_shape_strides_dtype_and_device():
    v = interop.view(DL(0x10000, (2, 3, 4, 5), (60, 1, 15, 3), 4, 16, 2, 1), "x")
    assert (v.kind, v.ptr, v.shape, v.strides, v.dtype, v.device, v.backend_kind) == (
        "dlpack", 0x10000, (2, 3, 4, 5), (60, 1, 15, 3), "bf16", 1, "cuda")  # fmt: skip
    assert L.is_packed(v, "nchw")
    v = interop.view(DL(0x20000, (2, 4), (4, 1), 2, 32, 10, 0), "x")
    assert (v.dtype, v.backend_kind) == ("fp32", "hip")
    with pytest.raises(ProblemError, match="not CUDA or ROCm device memory"):
        interop.view(DL(0x20000, (2, 4), (4, 1), 2, 32, 1, 0), "x")
    with pytest.raises(ProblemError, match="DLPack dtype"):
        interop.view(DL(0x20000, (2, 4), (4, 1), 0, 32, 2, 0), "x")


def test_layout_rule_and_ambiguity():
    def v(shape, strides, kind="cai"):
        return interop.ArrayView(None, kind, 16, shape, strides, "fp32", 0)

    # geometry decides: a 3x3 filter without padding only fits the NCHW reading of these shapes
    x = v((2, 1, 4, 5), (20, 20, 5, 1))
    dy = v((2, 1, 2, 3), (6, 6, 3, 1))
    r = L.read(x, dy, filter_size=3)
    assert r.layout == "nchw" and (r.problem.c, r.problem.k, r.problem.hi, r.problem.wi) == (1, 1, 4, 5)
    # 1x1 filter: both readings fit and differ -> refused before any device work, naming layout=
    amb = v((2, 3, 1, 1), (3, 1, 3, 3))
    with pytest.raises(LayoutError, match="layout='nchw'.*layout='nhwc'"):
        L.read(amb, amb, filter_size=1)
    r = L.read(amb, amb, filter_size=1, layout="nhwc")
    assert r.layout == "nhwc" and (r.problem.c, r.problem.hi, r.problem.wi) == (1, 3, 1)
    r = L.read(amb, amb, filter_size=1, layout="nchw")
    assert r.layout == "nchw" and (r.problem.c, r.problem.hi, r.problem.wi) == (3, 1, 1)
    # The bug this rule exists for: an NCHW-contiguous (32, 64, 56, 56) pair with C == K fits as
    # NHWC too (H=64, W=56, C=56). A shape-convention-free array is refused; a torch tensor is
    # read as PyTorch reads it.
    xs, dys = (4, 16, 14, 14), (4, 16, 14, 14)
    st = interop.contiguous_strides(xs)
    with pytest.raises(LayoutError, match="layout="):
        L.read(v(xs, st), v(dys, st), filter_size=3, padding=1)
    r = L.read(v(xs, st, "torch"), v(dys, st, "torch"), filter_size=3, padding=1)
    assert r.layout == "nchw" and (r.problem.c, r.problem.hi) == (16, 14) and not r.x_packed  # converted, not reread
    r = L.read(v(xs, st), v(dys, st), filter_size=3, padding=1, layout="nchw")
    assert not r.x_packed and not r.dy_packed


def test_torch_tensors_in_any_memory_format_are_read_as_pytorch_does(fake):
    be, cache = fake
    g = torch.Generator().manual_seed(3)
    x = torch.randn((2, 8, 6, 6), generator=g)
    dy = torch.randn((2, 8, 6, 6), generator=g)  # C == K and square: the NHWC reading fits too
    ref = torch_wgrad(x, dy, (8, 8, 3, 3), 1, 1, 1, 1)
    for name, (xx, dd) in {
        "nchw-contiguous": (x, dy),
        "channels_last": (x.contiguous(memory_format=torch.channels_last), dy.contiguous(memory_format=torch.channels_last)),
        "strided view": (torch.stack([x, x], -1)[..., 0], dy),
        "permuted memory": (x.transpose(2, 3).contiguous().transpose(2, 3), dy.transpose(1, 3).contiguous().transpose(1, 3)),
    }.items():
        got = skwgrad.wgrad(xx, dd, filter_size=3, padding=1, cache=cache)
        assert tuple(got.shape) == (8, 8, 3, 3), name
        err = (got.double() - ref).norm() / ref.norm()
        assert err < 1e-5, (name, float(err))
    # the same memory as numpy arrays is ambiguous: refused, asking for layout=
    with pytest.raises(LayoutError, match="layout="):
        skwgrad.wgrad(x.numpy(), dy.numpy(), filter_size=3, padding=1, cache=cache)
    got = skwgrad.wgrad(x.numpy(), dy.numpy(), filter_size=3, padding=1, cache=cache, layout="nchw")
    assert np.linalg.norm(got - ref.numpy()) / np.linalg.norm(ref.numpy()) < 1e-5


def test_a_repeated_call_builds_and_resolves_nothing(fake):
    be, cache = fake
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 6, 4)).astype(np.float32)
    dy = rng.standard_normal((2, 6, 6, 8)).astype(np.float32)
    skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=cache)
    built, resolved = api.stats["plans_built"], api.stats["calls_resolved"]
    for _ in range(5):
        out = skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=cache)
    assert (api.stats["plans_built"], api.stats["calls_resolved"]) == (built, resolved)
    assert out.shape == (8, 4, 3, 3)
    skwgrad.wgrad(x[:1], dy[:1], filter_size=3, padding=1, cache=cache)  # a new shape resolves once
    assert api.stats["calls_resolved"] == resolved + 1


def test_torch_call_refuses_cpu_tensors_and_clear_plans_changes_the_generation(fake):
    _, cache = fake
    x, dy = torch.randn(2, 4, 6, 6), torch.randn(2, 8, 6, 6)
    with pytest.raises(ProblemError, match="CUDA"):
        api.torch_call(x, dy, filter_size=3, padding=1, cache=cache)
    gen = api.calls_generation()
    api.clear_plans()
    assert api.calls_generation() == gen + 1


def test_bad_options_are_refused_before_any_device_work(monkeypatch):
    def no_device(*a, **k):
        raise AssertionError("a device was asked for before the arguments were checked")

    monkeypatch.setattr(api, "get_backend", no_device)
    x = np.zeros((2, 6, 6, 4), np.float32) + 1
    for kw, msg in [
        (dict(streamk="bogus"), "streamk='bogus'"),
        (dict(precision="fp64"), "precision='fp64'"),
        (dict(tile=(0, 0, 0)), "tile BM"),
        (dict(ks_count=-1), "ks_count"),
        (dict(dw_dtype="fp64"), "dw_dtype='fp64'"),
        (dict(streamk="dp_sk", reduction="two_stage"), "split-K epilogue"),
        (dict(deterministic=True, reduction="atomic"), "not deterministic"),
        (dict(layout="nwhc"), "layout="),
    ]:
        with pytest.raises(ProblemError, match=msg):
            skwgrad.wgrad(x, x, filter_size=3, padding=1, **{"layout": "nhwc", **kw})
    with pytest.raises(ProblemError, match="filter_size"):
        skwgrad.wgrad(x, x, filter_size=None, padding=1)
    with pytest.raises(ProblemError, match="read-only"):
        out = np.zeros((4, 4, 3, 3), np.float32)
        out.flags.writeable = False
        skwgrad.wgrad(x, x, filter_size=3, padding=1, out=out, layout="nhwc")


def test_plans_are_cached_and_reused(fake):
    be, cache = fake
    x = np.random.default_rng(0).standard_normal((2, 6, 6, 4)).astype(np.float32)
    dy = np.random.default_rng(1).standard_normal((2, 6, 6, 4)).astype(np.float32)
    skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=cache, layout="nhwc")
    loads, n = be.modules_loaded, len(api._plans)
    skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=cache, layout="nhwc")
    assert be.modules_loaded == loads and len(api._plans) == n == 1
    pl = skwgrad.plan("n=2,c=4,k=4,h=6,w=6,y=3,x=3,padding=1,dtype=fp32", cache=cache)
    assert pl is next(iter(api._plans.values()))
    out = pl(x, dy, layout="nhwc")
    assert out.shape == (4, 4, 3, 3)
    with pytest.raises(ProblemError, match="this plan is for"):
        pl(x[:1], dy[:1], layout="nhwc")
    assert be.live_bytes() == sum(a.nbytes for pair in be.arenas.values() for a in pair)  # numpy temporaries freed


def test_plan_api_forces_modes(fake):
    be, cache = fake
    pl = skwgrad.plan("n=4,c=4,k=8,h=16,w=16,y=3,x=3,padding=1,dtype=fp32", streamk="persistent", reduction="tree",
                      streamk_ctas=5, cache=cache)  # fmt: skip
    assert (pl.spec.mode, pl.spec.variant, pl.pool) == ("persistent", "tree", 5)
    d = pl.describe()
    assert d["mode"] == "persistent" and d["pool"] == 5 and d["sk_ctas"] in (0, 5)
    with pytest.raises(ProblemError):
        skwgrad.plan(42, cache=cache)


def test_lazy_exports():
    assert skwgrad.wgrad is api.wgrad and skwgrad.plan is api.plan


def test_bf16_bit_helpers_match_torch():
    vals = np.random.default_rng(3).standard_normal(10000) * np.exp(np.random.default_rng(4).uniform(-20, 20, 10000))
    vals = np.concatenate([vals, [0.0, -0.0, np.inf, -np.inf, 1.0 + 2**-8, 1.0 + 3 * 2**-8]])
    ours = hostdata.to_bits(vals, "bf16")
    theirs = torch.from_numpy(vals.astype(np.float32)).bfloat16().view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(hostdata.from_bits(ours, "bf16"), torch.from_numpy(theirs.view(np.int16)).view(torch.bfloat16).double().numpy())
    assert np.isnan(hostdata.from_bits(hostdata.to_bits(np.array([np.nan]), "bf16"), "bf16")[0])


def test_misaligned_device_pointer_is_refused(fake):
    be, cache = fake
    p = ConvProblem(n=1, c=4, k=4, hi=5, wi=5, y=3, x=3, dtype="fp32")
    xp, dyp, _, _ = F.random_device_inputs(be, p)
    with pytest.raises(AbiError, match="16-byte aligned"):
        skwgrad.wgrad(CAI(xp + 4, (1, 5, 5, 4)), CAI(dyp, (1, 3, 3, 4)), filter_size=3, cache=cache)


def test_api_tune_records_and_auto_uses_it(fake, monkeypatch):
    be, cache = fake
    monkeypatch.setattr(api, "open_cache", lambda c=None: cache)
    text = "n=4,c=4,k=8,h=16,w=16,y=3,x=3,padding=1,dtype=fp32"
    rows = api.tune(text, iters=3)
    assert rows and all("us" in r for r in rows)
    pl = skwgrad.plan(text, cache=cache)
    assert pl.kernel.key == rows[0]["key"] and pl.choice.reason == "tuned"


def test_a_damaged_candidate_is_skipped_and_selection_goes_on(fake):
    from skwgrad.errors import DamagedEntryError

    be, cache = fake
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 6, 4)).astype(np.float32)
    dy = rng.standard_normal((2, 6, 6, 8)).astype(np.float32)
    first = skwgrad.plan("n=2,c=4,k=8,h=6,w=6,y=3,x=3,padding=1,dtype=fp32", cache=cache)
    api.clear_plans()
    broken = first.kernel.key
    real = cache.load_binary

    def load_binary(entry):
        if getattr(entry, "key", entry) == broken:
            raise DamagedEntryError("its code object is missing")
        return real(entry)

    cache.load_binary = load_binary
    be._functions.clear()  # nothing loaded yet: the damaged object is read at plan build
    out = skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=cache)
    chosen = next(iter(api._plans.values()))
    assert chosen.kernel.key != broken
    ref = torch_wgrad(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(dy).permute(0, 3, 1, 2), (8, 4, 3, 3), 1, 1, 1, 1)
    assert np.linalg.norm(out - ref.numpy()) / np.linalg.norm(ref.numpy()) < 1e-5


@pytest.mark.parametrize("case", [
    # (N, C, K, spatial, filter, stride, padding, dilation, groups): depthwise and packed groups
    (2, 16, 16, (9, 10), (3, 3), 1, 1, 1, 16),
    (2, 12, 12, (11, 9), (5, 5), 2, 2, 1, 12),
    (1, 8, 8, (4, 6, 5), (3, 3, 3), 1, 1, 1, 8),
    (2, 32, 32, (7, 7), (3, 3), 1, 1, 1, 4),  # 8 channels per group: the packed-group kernel
])  # fmt: skip
def test_depthwise_and_grouped_through_their_families(monkeypatch, case):
    from skwgrad.aot.sweep import sweep

    be = F.FakeBackend(cus=8, max_active=2)
    cache = F.FakeCache()
    for it in sweep("default", ["sm_90"], ["fp32"]):
        cache.add(it.spec, it.arch)
    monkeypatch.setattr(api, "get_backend", lambda device=None, kind=None: be)
    api.clear_plans()
    n, c, k, sp, f, stride, padding, dilation, groups = case
    gen = torch.Generator().manual_seed(7)
    x = torch.randn((n, c, *sp), generator=gen)
    out_sp = _out_size(sp, f, stride, padding, dilation)
    dy = torch.randn((n, k, *out_sp), generator=gen)
    got = skwgrad.wgrad(x, dy, filter_size=f, stride=stride, padding=padding, dilation=dilation, groups=groups, cache=cache)
    fam = next(iter(api._plans.values())).spec.family
    assert fam == ("dwconv" if c == groups else "grouped"), fam
    ref = torch_wgrad(x, dy, (k, c // groups, *f), stride, padding, dilation, groups)
    assert float((got.double() - ref).norm() / ref.norm()) < 1e-5
    api.clear_plans()


def test_tune_on_first_use_times_once_and_the_record_serves_later_calls(fake):
    from skwgrad.launcher.select import problem_key

    be, cache = fake
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 6, 6, 4)).astype(np.float32)
    dy = rng.standard_normal((2, 6, 6, 8)).astype(np.float32)
    api.set_tuning(True)
    try:
        tuned = api.stats["tuned"]
        skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=cache)
        assert api.stats["tuned"] == tuned + 1
        p = next(iter(api._plans.values()))
        rec = cache.tuned("sm_90", 8, problem_key(p.problem))
        assert rec and rec["key"] == p.kernel.key and p.choice.reason == "tuned"
        api.clear_plans()  # a new process, in effect: plans gone, the record in the cache stays
        skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=cache)
        assert api.stats["tuned"] == tuned + 1  # nothing timed again
        skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=cache, streamk="off")  # an explicit request: no tuning
        assert api.stats["tuned"] == tuned + 1
        assert not api.native_preferred(p.problem, cache=cache, backend=be)
        cache.remember_tuned("sm_90", 8, problem_key(p.problem), {**rec, "native_us": rec["us"] / 2})
        assert api.native_preferred(p.problem, cache=cache, backend=be)
    finally:
        api.set_tuning(None)
