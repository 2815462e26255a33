"""skwgrad.torch on CPU: the ops register, their fakes agree with the real ops, opcheck passes,
a patched model falls back everywhere and is bit-identical to the unpatched one (eager, autocast,
torch.compile), the routing to skwgrad and each fallback reason (with a stand-in launcher), and
record_shapes writes a corpus that read_corpus and `skwgrad plan` take."""

import copy
import json
import logging
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import skwgrad.torch as st  # noqa: E402
from skwgrad.abi.conv import ConvProblem, read_corpus  # noqa: E402
from skwgrad.errors import DamagedEntryError  # noqa: E402
from skwgrad.launcher.select import NoKernelError  # noqa: E402
from skwgrad.torch import _ops  # noqa: E402

CL = torch.channels_last


@pytest.fixture(autouse=True)
def _fresh():
    st.reset_stats()
    st.clear_decisions()
    yield
    st.reset_stats()
    st.clear_decisions()


def _cl_strides(shape):
    fmt = torch.channels_last_3d if len(shape) == 5 else CL
    return torch.empty(shape, memory_format=fmt).stride()


# ---------------------------------------------------------------------------------------------
# Import and registration
# ---------------------------------------------------------------------------------------------
def test_import_without_torch_then_clear_error_on_use():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import skwgrad.torch as st\n"
        "try:\n    st.patch\nexcept ImportError as e:\n    print('ERR', e)\nelse:\n    print('NOERR')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("ERR") and "needs PyTorch" in out and "pip install torch" in out


def test_ops_registered_with_schemas():
    s = str(torch.ops.skwgrad.conv_weight_grad.default._schema)
    assert s.startswith("skwgrad::conv_weight_grad(Tensor x, Tensor dy, SymInt[] weight_shape") or s.startswith(
        "skwgrad::conv_weight_grad(Tensor x, Tensor dy, int[] weight_shape"
    ), s
    assert "ScalarType? dw_dtype=None" in s and s.endswith("-> Tensor")
    c = str(torch.ops.skwgrad.conv.default._schema)
    assert c.startswith("skwgrad::conv(Tensor x, Tensor weight, Tensor? bias") and c.endswith("-> Tensor")


# ---------------------------------------------------------------------------------------------
# The weight-gradient op: fake vs real, opcheck, numerics
# ---------------------------------------------------------------------------------------------
WGRAD_CASES = [
    # x shape, weight shape, stride, padding, dilation, groups, x dtype, dW dtype
    ((2, 4, 9, 9), (6, 2, 3, 3), [2, 2], [1, 1], [1, 1], 2, torch.float32, None),
    ((2, 8, 7, 6), (8, 1, 3, 3), [1, 1], [2, 2], [2, 2], 8, torch.float32, None),  # depthwise, dilated
    ((3, 5, 6, 6), (7, 5, 1, 1), [1, 1], [0, 0], [1, 1], 1, torch.bfloat16, torch.float32),  # AMP dW
    ((2, 3, 8, 8), (4, 3, 3, 1), [1, 2], [1, 0], [1, 1], 1, torch.bfloat16, None),
    ((1, 2, 5, 6, 7), (4, 2, 3, 3, 3), [1, 1, 1], [1, 1, 1], [1, 1, 1], 1, torch.float32, None),  # 3-D
]


def _wgrad_args(case, seed=0, channels_last=True):
    xs, ws, stride, padding, dilation, groups, dt, wdt = case
    g = torch.Generator().manual_seed(seed)
    sd = len(xs) - 2
    ref = torch.nn.functional.conv3d if sd == 3 else torch.nn.functional.conv2d
    yshape = ref(torch.empty(xs), torch.empty(ws), None, stride, padding, dilation, groups).shape
    x = torch.randn(xs, generator=g).to(dt)
    dy = torch.randn(yshape, generator=g).to(dt)
    if channels_last:
        fmt = torch.channels_last_3d if sd == 3 else CL
        x, dy = x.contiguous(memory_format=fmt), dy.contiguous(memory_format=fmt)
    return (x, dy, list(ws), stride, padding, dilation, groups, wdt, "case")


@pytest.mark.parametrize("case", WGRAD_CASES)
def test_wgrad_fake_matches_real_shape_dtype_strides(case):
    from torch._subclasses.fake_tensor import FakeTensorMode

    args = _wgrad_args(case)
    real = torch.ops.skwgrad.conv_weight_grad(*args)
    with FakeTensorMode() as mode:
        fx, fdy = mode.from_tensor(args[0]), mode.from_tensor(args[1])
        fake = torch.ops.skwgrad.conv_weight_grad(fx, fdy, *args[2:])
    want_dtype = case[7] or case[6]
    assert tuple(fake.shape) == tuple(real.shape) == tuple(case[1])
    assert fake.dtype == real.dtype == want_dtype
    assert fake.stride() == real.stride() == _cl_strides(case[1])


@pytest.mark.parametrize("channels_last", [True, False])
@pytest.mark.parametrize("case", WGRAD_CASES)
def test_wgrad_opcheck_cpu(case, channels_last):
    torch.library.opcheck(torch.ops.skwgrad.conv_weight_grad.default, _wgrad_args(case, channels_last=channels_last))


@pytest.mark.parametrize("case", WGRAD_CASES)
def test_wgrad_values_vs_float64(case):
    x, dy, ws, stride, padding, dilation, groups, wdt, name = _wgrad_args(case, seed=3)
    dw = torch.ops.skwgrad.conv_weight_grad(x, dy, ws, stride, padding, dilation, groups, wdt, name)
    grad_fn = torch.nn.grad.conv3d_weight if len(ws) == 5 else torch.nn.grad.conv2d_weight
    ref = grad_fn(x.double(), ws, dy.double(), stride, padding, dilation, groups)
    assert ref.abs().max() > 1.0  # not a comparison of zeros
    err = ((dw.double() - ref).abs().max() / ref.abs().max()).item()
    assert err < (1e-2 if x.dtype == torch.bfloat16 else 1e-5), err


CONV_CASES = [
    ((2, 4, 9, 9), (6, 2, 3, 3), True, [2, 2], [1, 1], [1, 1], 2),
    ((2, 6, 8, 8), (6, 1, 5, 5), False, [1, 1], [2, 2], [1, 1], 6),
    ((1, 2, 5, 6, 7), (4, 2, 3, 3, 3), True, [1, 2, 1], [1, 1, 0], [1, 1, 1], 1),
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_opcheck_cpu(case):
    xs, ws, bias, stride, padding, dilation, groups = case
    g = torch.Generator().manual_seed(1)
    x = torch.randn(xs, generator=g, requires_grad=True)
    w = torch.randn(ws, generator=g, requires_grad=True)
    b = torch.randn(ws[0], generator=g, requires_grad=True) if bias else None
    torch.library.opcheck(torch.ops.skwgrad.conv.default, (x, w, b, stride, padding, dilation, groups, "l"))


def test_conv_opcheck_cpu_autocast_dtypes():
    """bf16 x with an fp32 weight and bias (what conv2d passes under autocast): dW and the bias
    gradient come back fp32, dX bf16."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 8, 9, 9, generator=g).bfloat16().contiguous(memory_format=CL).requires_grad_()
    w = torch.randn(6, 4, 3, 3, generator=g, requires_grad=True)
    b = torch.randn(6, generator=g, requires_grad=True)
    args = (x, w, b, [1, 1], [1, 1], [1, 1], 2, "mixed")
    torch.library.opcheck(torch.ops.skwgrad.conv.default, args)
    y = torch.ops.skwgrad.conv(*args)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert (x.grad.dtype, w.grad.dtype, b.grad.dtype) == (torch.bfloat16, torch.float32, torch.float32)


# ---------------------------------------------------------------------------------------------
# Models: patched == unpatched, bit for bit, on the CPU fallback
# ---------------------------------------------------------------------------------------------
class Bottleneck(nn.Module):
    """A torchvision-like ResNet(X) bottleneck: 1x1, grouped 3x3 (stride 2), 1x1, downsample."""

    def __init__(self, cin, width, cout, groups=2, stride=2):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return torch.relu(y + self.downsample(x))


class MiniNet(nn.Module):
    """Stem 7x7/2 with bias, a bottleneck, a MobileNet-like depthwise + pointwise pair, a dilated
    conv, one reflect-padded conv (left alone by patch) and a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 7, stride=2, padding=3)
        self.block = Bottleneck(8, 8, 16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)
        self.pw = nn.Conv2d(16, 12, 1)
        self.dil = nn.Conv2d(12, 12, 3, padding=2, dilation=2)
        self.reflect = nn.Conv2d(12, 12, 3, padding=1, padding_mode="reflect")
        self.head = nn.Linear(12, 5)

    def forward(self, x):
        y = self.block(torch.relu(self.stem(x)))
        y = torch.relu(self.pw(torch.relu(self.dw(y))))
        y = self.reflect(torch.relu(self.dil(y)))
        return self.head(y.mean((2, 3)))


class Mini3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv3d(2, 4, 3, padding=1)
        self.b = nn.Conv3d(4, 4, (1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1), groups=2, bias=False)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))).sum((2, 3, 4))


PATCHED_2D = ["stem", "block.conv1", "block.conv2", "block.conv3", "block.downsample.0", "dw", "pw", "dil"]


def _pair(cls, channels_last=False):
    torch.manual_seed(0)
    ref = cls()
    if channels_last:
        ref = ref.to(memory_format=torch.channels_last_3d if cls is Mini3d else CL)
    return ref, copy.deepcopy(ref)


def _step(model, x):
    model.zero_grad(set_to_none=True)
    xi = x.clone().requires_grad_()
    out = model(xi)
    (out.float() * torch.arange(1, out.shape[-1] + 1, dtype=torch.float32)).sum().backward()
    return out.detach(), xi.grad, {n.removeprefix("_orig_mod."): p.grad for n, p in model.named_parameters()}


def _assert_identical(a, b):
    out_a, gx_a, g_a = a
    out_b, gx_b, g_b = b
    assert torch.equal(out_a, out_b)
    assert torch.equal(gx_a, gx_b)
    assert g_a.keys() == g_b.keys()
    for n in g_a:
        assert g_a[n] is not None and g_a[n].abs().max() > 0, n  # a real gradient, not zeros
        assert g_a[n].dtype == g_b[n].dtype, n
        assert torch.equal(g_a[n], g_b[n]), n


@pytest.mark.parametrize("channels_last", [False, True])
def test_patch_falls_back_everywhere_and_is_bit_identical(channels_last):
    ref, model = _pair(MiniNet, channels_last)
    report = st.patch(model)
    assert report.patched == PATCHED_2D
    assert list(report.skipped) == ["reflect"] and "padding_mode" in report.skipped["reflect"]
    assert type(model.stem) is _ops.SkwgradConv2d and isinstance(model.stem, nn.Conv2d)
    assert type(model.reflect) is nn.Conv2d
    assert model.state_dict().keys() == ref.state_dict().keys()
    x = torch.randn(2, 3, 32, 32)
    if channels_last:
        x = x.contiguous(memory_format=CL)
    _assert_identical(_step(model, x), _step(ref, x))

    s = st.stats()
    assert s["skwgrad"] == 0 and s["native"] == len(PATCHED_2D)
    assert s["reasons"] == {"device": len(PATCHED_2D)}
    assert sorted(s["layers"]) == sorted(PATCHED_2D)
    assert all(e["native"] == 1 and e["reasons"] == {"device": 1} for e in s["layers"].values())
    assert s["layers"]["dw"]["problem"].startswith("n=2,c=16,k=16,g=16,h=8,w=8,y=3,x=3")
    assert s["skipped_modules"] == {report.skipped["reflect"]: 1}

    # A second step counts again; unpatch restores the classes and the model stays identical.
    _step(model, x)
    assert st.stats()["native"] == 2 * len(PATCHED_2D)
    assert st.unpatch(model) == len(PATCHED_2D)
    assert type(model.stem) is nn.Conv2d and not hasattr(model.stem, "_skwgrad_name")
    _assert_identical(_step(model, x), _step(ref, x))


def test_patch_is_idempotent():
    _, model = _pair(MiniNet)
    first = st.patch(model)
    again = st.patch(model)
    assert again.patched == first.patched
    assert st.unpatch(model) == len(PATCHED_2D) and st.unpatch(model) == 0


@pytest.mark.parametrize("channels_last", [False, True])
def test_patch_autocast_bf16_bit_identical_and_dw_in_weight_dtype(channels_last):
    ref, model = _pair(MiniNet, channels_last)
    st.patch(model)
    x = torch.randn(2, 3, 32, 32)
    if channels_last:
        x = x.contiguous(memory_format=CL)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = _step(model, x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = _step(ref, x)
    assert got[0].dtype == torch.bfloat16  # the linear head runs in bf16 under autocast
    _assert_identical(got, want)
    assert all(g.dtype == torch.float32 for g in got[2].values())
    probs = st.stats()["problems"]
    assert probs and all("dtype=bf16,dw_dtype=fp32" in p for p in probs)


def test_patch_conv3d_bit_identical():
    ref, model = _pair(Mini3d, channels_last=True)
    assert st.patch(model).patched == ["a", "b"]
    x = torch.randn(2, 2, 4, 6, 6).contiguous(memory_format=torch.channels_last_3d)
    _assert_identical(_step(model, x), _step(ref, x))
    assert st.stats()["native"] == 2


def test_functional_padding_strings_unbatched_and_asymmetric_same():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 9, 9, generator=g)  # unbatched
    w = torch.randn(6, 4, 3, 3, generator=g)
    for pad in ("same", "valid", 1, (1, 0)):
        assert torch.equal(st.conv2d(x, w, padding=pad), torch.nn.functional.conv2d(x, w, padding=pad)), pad
    w2 = torch.randn(6, 4, 2, 2, generator=g, requires_grad=True)  # even kernel: PyTorch pads asymmetrically
    y = st.conv2d(x.unsqueeze(0), w2, padding="same")
    assert torch.equal(y, torch.nn.functional.conv2d(x.unsqueeze(0), w2, padding="same"))
    assert y.grad_fn is not None and "Skwgrad" not in type(y.grad_fn).__name__
    y.sum().backward()
    assert st.stats()["native"] == 0  # the whole conv was PyTorch's: no skwgrad op ran


def test_mixed_dtypes_outside_autocast_keep_pytorch_error():
    x = torch.randn(1, 2, 5, 5, dtype=torch.bfloat16)
    w = torch.randn(3, 2, 3, 3)
    with pytest.raises(RuntimeError):
        torch.nn.functional.conv2d(x, w)
    with pytest.raises(RuntimeError):
        st.conv2d(x, w)


# ---------------------------------------------------------------------------------------------
# torch.compile
# ---------------------------------------------------------------------------------------------
def test_compile_fullgraph_aot_eager_no_graph_break():
    ref, model = _pair(MiniNet, channels_last=True)
    st.patch(model)
    x = torch.randn(2, 3, 32, 32).contiguous(memory_format=CL)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    # Under dynamo the patched convolution is the autograd.Function, traced: its forward is
    # aten.convolution (no custom op for the compiler to call through the dispatcher at run
    # time) and its backward records skwgrad::conv_weight_grad, opaque.
    from torch._dynamo.testing import CompileCounterWithBackend

    cnt = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model, fullgraph=True, backend=cnt)
    got = _step(compiled, x)
    want = _step(ref, x)
    assert cnt.frame_count == 1
    targets = [str(n.target) for gm in cnt.graphs for sub in gm.modules() if hasattr(sub, "graph") for n in sub.graph.nodes]
    assert targets.count("skwgrad.conv_weight_grad") == len(PATCHED_2D)
    assert targets.count("aten.convolution.default") == len(PATCHED_2D) and "skwgrad.conv.default" not in targets
    _assert_identical(got, want)
    assert st.stats()["native"] == len(PATCHED_2D)  # the backward ran the op, which fell back
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = _step(compiled, x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = _step(ref, x)
    for n, g in want[2].items():
        torch.testing.assert_close(got[2][n], g, rtol=0, atol=0, msg=n)
    torch._dynamo.reset()


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")), reason="inductor on CPU needs a C++ compiler")
def test_compile_fullgraph_inductor_cpu():
    """The default backend (inductor, C++ on CPU): a small model, to keep the compile short."""
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8))
    model = copy.deepcopy(ref)
    assert st.patch(model).patched == ["0", "2"]
    x = torch.randn(2, 3, 16, 16)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    got = _step(compiled, x)
    want = _step(ref, x)
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-6)
    for n, g in want[2].items():
        torch.testing.assert_close(got[2][n], g, rtol=1e-5, atol=1e-6, msg=n)
    assert st.stats()["native"] == 2 and set(st.stats()["layers"]) == {"0", "2"}
    torch._dynamo.reset()


# ---------------------------------------------------------------------------------------------
# Routing to skwgrad and every fallback, with a stand-in launcher (no GPU here)
# ---------------------------------------------------------------------------------------------
class FakeLauncher:
    """Stands for skwgrad.launcher.api: ``torch_call`` resolves a call (or raises what it is told
    to, as resolution does: no kernel, a damaged entry); each call writes dW (PyTorch's, in fp64
    then cast, or a wrong value) into a fresh channels-last tensor. ``calls`` records every request
    that reached the launcher: each launch, and each resolution that raised."""

    _DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}

    def __init__(self, raises=None, wrong=False, native_preferred=False, no_fp32_dw=False, tuning_finds_native=False):
        self.calls, self.raises, self.wrong, self.pref, self.no_fp32_dw = [], raises, wrong, native_preferred, no_fp32_dw
        self.tuning, self.tuning_finds_native, self.pref_asked = None, tuning_finds_native, []
        self.resolved, self.generation = 0, 0

    def set_tuning(self, on):
        self.tuning = on

    def tuning_enabled(self):
        return bool(self.tuning)

    def calls_generation(self):
        return self.generation

    def torch_call(self, x, dy, *, filter_size, stride, padding, dilation, groups, dw_dtype, **kw):
        req = dict(kw, filter_size=filter_size, stride=stride, padding=padding, groups=groups,
                   dw_dtype=self._DTYPES[dw_dtype])  # fmt: skip
        if self.raises is not None:
            self.calls.append(dict(req, x=x, dy=dy))
            raise self.raises
        if self.no_fp32_dw and dw_dtype == "fp32" and x.dtype != torch.float32:
            self.calls.append(dict(req, x=x, dy=dy))
            raise NoKernelError("no cached kernel fits dw_dtype=fp32; build one with: skwgrad compile-all ...")
        self.resolved += 1
        shape0 = dy.shape[1]

        def call(x, dy, out, stream):
            assert out is None and stream is None
            self.calls.append(dict(req, x=x, dy=dy))
            if self.tuning and self.tuning_finds_native:  # tune on first use: this call timed PyTorch's op faster
                self.pref = True
            fn = torch.nn.grad.conv3d_weight if x.dim() == 5 else torch.nn.grad.conv2d_weight
            shape = (shape0, x.shape[1] // groups, *filter_size)
            ref = fn(x.double(), shape, dy.double(), stride, padding, dilation, groups)
            fmt = torch.channels_last_3d if x.dim() == 5 else torch.channels_last
            res = torch.empty(shape, dtype=req["dw_dtype"], memory_format=fmt)
            res.copy_(ref * (3 if self.wrong else 1))
            return res

        return call

    def native_preferred(self, problem, **where):
        assert isinstance(problem, ConvProblem)
        self.pref_asked.append(problem)
        return self.pref


@pytest.fixture
def fake_gpu(monkeypatch):
    def install(launcher, deterministic=True, layout=True, precision=True):
        monkeypatch.setattr(_ops, "_gpu_device", lambda x: True)
        monkeypatch.setattr(_ops, "_launcher", {
            "api": launcher, "deterministic": deterministic, "layout": layout, "precision": precision,
            "native_preferred": launcher.native_preferred,
        })  # fmt: skip
        st.clear_decisions()
        return launcher

    return install


def _bf16_wgrad_call(name="layer"):
    x, dy, ws, stride, padding, dilation, groups, _, _ = _wgrad_args(WGRAD_CASES[0], seed=7)
    x, dy = x.bfloat16(), dy.bfloat16()
    return torch.ops.skwgrad.conv_weight_grad(x, dy, ws, stride, padding, dilation, groups, torch.float32, name), (x, dy)


def test_routes_to_skwgrad_with_weight_dtype_layout_and_allocator(fake_gpu, caplog):
    fl = fake_gpu(FakeLauncher())
    with caplog.at_level(logging.DEBUG, logger="skwgrad.torch"):
        dw, (x, dy) = _bf16_wgrad_call()
    (call,) = fl.calls
    assert call["layout"] == "nchw" and call["filter_size"] == (3, 3) and call["stride"] == (2, 2)
    assert call["padding"] == (1, 1) and call["groups"] == 2 and "deterministic" not in call
    assert call["dw_dtype"] == torch.float32 and call["x"] is x and fl.resolved == 1
    assert dw.dtype == torch.float32 and dw.stride() == _cl_strides((6, 2, 3, 3))
    ref = torch.nn.grad.conv2d_weight(x.double(), [6, 2, 3, 3], dy.double(), 2, 1, 1, 2)
    assert torch.allclose(dw.double(), ref, rtol=1e-6, atol=1e-6) and ref.abs().max() > 1
    s = st.stats()
    assert (s["skwgrad"], s["native"]) == (1, 0) and s["layers"]["layer"]["skwgrad"] == 1
    assert any("skwgrad" in r.getMessage() and "layer layer" in r.getMessage() for r in caplog.records)


def test_no_fp32_dw_kernel_computes_in_input_dtype_and_widens(fake_gpu):
    fl = fake_gpu(FakeLauncher(no_fp32_dw=True))
    dw, (x, dy) = _bf16_wgrad_call()
    _bf16_wgrad_call()
    assert [c["dw_dtype"] for c in fl.calls] == [torch.float32, torch.bfloat16, torch.bfloat16]  # remembered
    assert fl.resolved == 1  # the second call launched the bf16 call it kept
    assert dw.dtype == torch.float32 and dw.stride() == _cl_strides((6, 2, 3, 3))
    ref = torch.nn.grad.conv2d_weight(x.double(), [6, 2, 3, 3], dy.double(), 2, 1, 1, 2)
    assert torch.equal(dw, ref.bfloat16().float())  # the stand-in's exact dW, rounded to bf16, widened
    s = st.stats()
    assert (s["skwgrad"], s["native"], s["dw_cast"]) == (2, 0, 2)


def test_inputs_of_any_memory_format_are_read_by_pytorchs_convention(fake_gpu):
    # The launcher reads torch tensors as (N, C, H, W) whatever their strides (layout="nchw") and
    # converts what is not channels-last itself; each memory format gets its own resolved call.
    fl = fake_gpu(FakeLauncher())
    for cl in (False, True, False):
        args = _wgrad_args(WGRAD_CASES[0], channels_last=cl)
        torch.ops.skwgrad.conv_weight_grad(*args)
        assert fl.calls[-1]["layout"] == "nchw" and fl.calls[-1]["x"] is args[0]
    assert fl.resolved == 2 and len(fl.calls) == 3


def test_deterministic_algorithms_are_passed_on(fake_gpu):
    fl = fake_gpu(FakeLauncher())
    torch.use_deterministic_algorithms(True)
    try:
        _bf16_wgrad_call()
    finally:
        torch.use_deterministic_algorithms(False)
    assert fl.calls[0]["deterministic"] is True


def test_deterministic_without_launcher_support_falls_back(fake_gpu):
    fl = fake_gpu(FakeLauncher(), deterministic=False)
    torch.use_deterministic_algorithms(True)
    try:
        dw, _ = _bf16_wgrad_call()
    finally:
        torch.use_deterministic_algorithms(False)
    assert fl.calls == [] and st.stats()["reasons"] == {"deterministic": 1}
    assert dw.dtype == torch.float32


def test_no_kernel_falls_back_and_sticks(fake_gpu):
    fl = fake_gpu(FakeLauncher(raises=NoKernelError("no cached kernel fits; build one with: skwgrad compile-all ...")))
    dw1, (x, dy) = _bf16_wgrad_call()
    dw2, _ = _bf16_wgrad_call()
    # fp32 dW, then bf16 dW to widen; the second call knew to go native at once.
    assert [c["dw_dtype"] for c in fl.calls] == [torch.float32, torch.bfloat16]
    native = _ops._native_wgrad(x, dy, [6, 2, 3, 3], [2, 2], [1, 1], [1, 1], 2, torch.float32)
    assert torch.equal(dw1, native) and torch.equal(dw2, native)
    assert dw1.stride() == _cl_strides((6, 2, 3, 3))
    assert st.stats()["reasons"] == {"no_kernel": 2}
    st.clear_decisions()  # e.g. after compile-all built the kernel
    _bf16_wgrad_call()
    assert len(fl.calls) == 4


def test_damaged_entry_falls_back_with_a_warning(fake_gpu, caplog):
    fake_gpu(FakeLauncher(raises=DamagedEntryError("cache entry abc failed its sha256 check: run skwgrad cache verify")))
    with caplog.at_level(logging.WARNING, logger="skwgrad.torch"):
        _bf16_wgrad_call()
    assert st.stats()["reasons"] == {"damaged_entry": 1}
    assert any(r.levelno == logging.WARNING and "damaged_entry" in r.getMessage() for r in caplog.records)


def test_tuned_record_preferring_native(fake_gpu):
    fl = fake_gpu(FakeLauncher(native_preferred=True))
    _bf16_wgrad_call()
    assert fl.calls == [] and st.stats()["reasons"] == {"tuned_native": 1}


def test_tune_on_first_use_record_preferring_native_is_read_after_the_first_launch(fake_gpu):
    """With tuning on, the first launch of a shape is what times PyTorch's op: the record cannot
    exist when the shape is first decided, so the op reads it again after that launch and the
    shape goes native from then on."""
    fl = fake_gpu(FakeLauncher(tuning_finds_native=True))
    assert st.configure(tune=True)["tune"] is True and fl.tuning is True
    try:
        dw1, (x, dy) = _bf16_wgrad_call()
        dw2, _ = _bf16_wgrad_call()
        _bf16_wgrad_call()
    finally:
        st.configure(tune=None)
    assert fl.tuning is None
    assert len(fl.calls) == 1  # only the first (tuning) call launched skwgrad
    assert len(fl.pref_asked) == 2  # when first decided, and once after the first launch; not per call
    assert fl.pref_asked[0] == fl.pref_asked[1] and fl.pref_asked[1].dw_dtype == "fp32"
    s = st.stats()
    assert (s["skwgrad"], s["native"], s["reasons"]) == (1, 2, {"tuned_native": 2})
    native = _ops._native_wgrad(x, dy, [6, 2, 3, 3], [2, 2], [1, 1], [1, 1], 2, torch.float32)
    assert torch.equal(dw2, native)
    torch.testing.assert_close(dw1, native, rtol=1e-2, atol=1e-2)


def test_record_is_read_again_for_the_problem_as_launched(fake_gpu):
    """No fp32-dW kernel: dW was computed in bf16 and widened, so the record to read is the
    bf16-dW problem's."""
    fl = fake_gpu(FakeLauncher(no_fp32_dw=True))
    _bf16_wgrad_call()
    _bf16_wgrad_call()
    assert [p.dw_dtype for p in fl.pref_asked] == ["fp32", "bf16"]
    assert st.stats()["skwgrad"] == 2


def test_tuning_not_preferring_native_keeps_skwgrad(fake_gpu):
    fl = fake_gpu(FakeLauncher())
    for _ in range(3):
        _bf16_wgrad_call()
    assert len(fl.calls) == 3 and len(fl.pref_asked) == 2 and st.stats()["native"] == 0


def test_disabled_flag_and_context_manager(fake_gpu):
    fl = fake_gpu(FakeLauncher())
    with st.enabled(False):
        assert not st.is_enabled()
        _bf16_wgrad_call()
    assert st.is_enabled()
    _bf16_wgrad_call()
    assert len(fl.calls) == 1
    s = st.stats()
    assert s["reasons"] == {"disabled": 1} and (s["skwgrad"], s["native"]) == (1, 1)


def test_verify_mode_catches_a_wrong_result(fake_gpu, caplog):
    fl = fake_gpu(FakeLauncher(wrong=True))
    st.configure(verify=True)
    try:
        with caplog.at_level(logging.WARNING, logger="skwgrad.torch"):
            dw, (x, dy) = _bf16_wgrad_call()
            _bf16_wgrad_call()
    finally:
        st.configure(verify=False)
    assert len(fl.calls) == 1
    assert torch.equal(dw, _ops._native_wgrad(x, dy, [6, 2, 3, 3], [2, 2], [1, 1], [1, 1], 2, torch.float32))
    assert st.stats()["reasons"] == {"check_failed": 2}
    assert any("check_failed" in r.getMessage() for r in caplog.records)


def test_verify_mode_passes_a_right_result(fake_gpu):
    fake_gpu(FakeLauncher())
    st.configure(verify=True)
    try:
        _bf16_wgrad_call()
    finally:
        st.configure(verify=False)
    assert st.stats()["skwgrad"] == 1


class _NoGraphLauncher(FakeLauncher):
    """Writes dW as the real launcher does: outside autograd's view."""

    def torch_call(self, *a, **k):
        call = super().torch_call(*a, **k)

        def no_graph(*args):
            with torch.no_grad():
                return call(*args)

        return no_graph


def test_backward_through_skwgrads_dw_raises_and_no_grad_gives_plain_tensor(fake_gpu):
    fake_gpu(_NoGraphLauncher())
    x, dy, ws, stride, padding, dilation, groups, _, _ = _wgrad_args(WGRAD_CASES[0], seed=3)
    x, dy = x.bfloat16().requires_grad_(), dy.bfloat16()
    dw = torch.ops.skwgrad.conv_weight_grad(x, dy, ws, stride, padding, dilation, groups, torch.float32, "l")
    assert st.stats()["skwgrad"] == 1 and dw.requires_grad
    with pytest.raises(RuntimeError, match="no double backward"):
        dw.sum().backward()
    with torch.no_grad():
        dw = torch.ops.skwgrad.conv_weight_grad(x, dy, ws, stride, padding, dilation, groups, torch.float32, "l")
    assert st.stats()["skwgrad"] == 2 and not dw.requires_grad and dw.grad_fn is None


def test_native_path_keeps_pytorchs_double_backward():
    import warnings

    x, dy, ws, stride, padding, dilation, groups, _, _ = _wgrad_args(WGRAD_CASES[0], seed=5)
    x64, dy64 = x.double().requires_grad_(), dy.double().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "autograd kernel was not registered" warning either
        dw = torch.ops.skwgrad.conv_weight_grad(x64, dy64, ws, stride, padding, dilation, groups)
        got = torch.autograd.grad(dw.square().sum(), [x64, dy64])
    w = torch.empty(ws, dtype=torch.float64)
    ref = torch.ops.aten.convolution_backward(dy64, x64, w, None, stride, padding, dilation, False, [0, 0], groups,
                                              [False, True, False])[1]  # fmt: skip
    want = torch.autograd.grad(ref.square().sum(), [x64, dy64])
    assert st.stats()["native"] == 1  # fp64 on CPU: PyTorch's own op, graph and all
    for g, r in zip(got, want):
        assert r.abs().max() > 0 and torch.allclose(g, r, rtol=1e-10, atol=1e-12)


def test_unsupported_dtype_falls_back(fake_gpu):
    fl = fake_gpu(FakeLauncher())
    x, dy = torch.randn(1, 2, 5, 5, dtype=torch.float64), torch.randn(1, 3, 3, 3, dtype=torch.float64)
    dw = torch.ops.skwgrad.conv_weight_grad(x, dy, [3, 2, 3, 3], [1, 1], [0, 0], [1, 1], 1)
    assert fl.calls == [] and dw.dtype == torch.float64 and st.stats()["reasons"] == {"dtype": 1}


def test_patched_model_on_stand_in_gpu_uses_skwgrad_for_every_layer(fake_gpu):
    fl = fake_gpu(FakeLauncher())
    ref, model = _pair(MiniNet, channels_last=True)
    st.patch(model)
    x = torch.randn(2, 3, 32, 32).contiguous(memory_format=CL)
    got, want = _step(model, x), _step(ref, x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    for n, g in want[2].items():
        torch.testing.assert_close(got[2][n], g, rtol=1e-4, atol=1e-5, msg=n)
    assert len(fl.calls) == len(PATCHED_2D)
    s = st.stats()
    assert s["skwgrad"] == len(PATCHED_2D) and s["native"] == 0 and sorted(s["layers"]) == sorted(PATCHED_2D)


# ---------------------------------------------------------------------------------------------
# record_shapes
# ---------------------------------------------------------------------------------------------
def test_record_shapes_writes_a_corpus_that_read_corpus_and_plan_take(tmp_path):
    from click.testing import CliRunner

    from skwgrad.cli import main

    torch.manual_seed(0)
    model = nn.Sequential(MiniNet(), nn.Identity())
    model[0].block2 = Bottleneck(8, 8, 16)  # a repeat of block's problems... with other input sizes
    path = tmp_path / "shapes.csv"
    rows = st.record_shapes(model, torch.randn(4, 3, 32, 32), path)
    corpus = read_corpus(path)
    assert [(n, p) for n, _, p in corpus] == rows
    names = [n for n, _ in rows]
    assert names == ["0.stem", "0.block.conv1", "0.block.conv2", "0.block.conv3", "0.block.downsample.0", "0.dw",
                     "0.pw", "0.dil"]  # fmt: skip
    by = dict(rows)
    assert by["0.stem"] == ConvProblem.from_torch(
        batch=4, in_channels=3, out_channels=8, input_size=(32, 32), kernel_size=7, stride=2, padding=3,
        dtype="fp32", precision=_ops._fp32_precision(),
    )  # fmt: skip
    assert by["0.dw"].is_depthwise and by["0.block.conv2"].g == 2 and by["0.dil"].dilation == (1, 2, 2)
    for _, _, p in corpus:  # every problem as read back from the CSV
        res = CliRunner().invoke(main, ["plan", "--problem", p.describe(), "--arch", "sm_90", "--json"])
        assert res.exit_code == 0, (p.describe(), res.output)
        assert json.loads(res.output)["problem"] == p.describe()
    # The command that builds a cache for the model reads the file too (a dry run compiles nothing).
    res = CliRunner().invoke(main, ["compile-all", "--corpus", str(path), "--arch", "sm_90", "--dry-run", "--json",
                                    "--cache", str(tmp_path / "cache")])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output[res.output.index("{"):])
    assert doc["selection"]["problems"] == len(rows) and doc["total"] > 0 and not (tmp_path / "cache").exists()


def test_record_shapes_dedupes_and_records_amp_and_3d(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 8, (1, 3), stride=(1, 2)))
    st.patch(model)  # patched modules are recorded too
    path = tmp_path / "amp.csv"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rows = st.record_shapes(model, torch.randn(2, 4, 10, 10), path)
    assert [n for n, _ in rows] == ["0", "2"]
    assert all(p.dtype == "bf16" and p.dw_dtype == "fp32" for _, p in rows)
    assert rows[1][1].stride == (1, 1, 2) and rows[1][1].x == 3
    assert [p for _, _, p in read_corpus(path)] == [p for _, p in rows]

    path3 = tmp_path / "3d.csv"
    m3 = nn.Sequential(nn.Conv3d(2, 4, (1, 3, 3), padding=(0, 1, 1)))
    rows3 = st.record_shapes(m3, torch.randn(1, 2, 1, 6, 6), path3, dtype=torch.float16)
    (p3,) = [p for _, _, p in read_corpus(path3)]
    assert p3 == rows3[0][1] and p3.spatial_dims == 3 and p3.di == 1 and p3.z == 1 and p3.dtype == "fp16"
