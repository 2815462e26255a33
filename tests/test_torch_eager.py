"""The eager path of skwgrad.torch: outside tracing a patched convolution is a plain
autograd.Function (no custom-op dispatch, whose host cost made GPU backwards host-bound), with
gradients bit-identical to PyTorch's own, one weight cast per forward under autocast and none in
the backward; under tracing (torch.compile, make_fx, FakeTensor) the custom ops are what runs."""

import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import skwgrad.torch as st  # noqa: E402
from skwgrad.torch import _ops  # noqa: E402

from skwgrad.launcher.select import NoKernelError  # noqa: E402
from test_torch_op import (  # noqa: E402,F401  (fake_gpu, _fresh: the fixtures; _fresh is autouse)
    PATCHED_2D, FakeLauncher, MiniNet, _assert_identical, _fresh, _pair, _step, fake_gpu,
)  # fmt: skip

CL = torch.channels_last


@pytest.fixture
def op_calls(monkeypatch):
    """Counts every call made through torch.ops.skwgrad.conv / conv_weight_grad (what _ops calls)."""
    calls = {"conv": 0, "conv_weight_grad": 0}
    for name in calls:
        real = getattr(torch.ops.skwgrad, name)

        def counted(*a, _real=real, _name=name, **kw):
            calls[_name] += 1
            return _real(*a, **kw)

        monkeypatch.setattr(torch.ops.skwgrad, name, counted)
    return calls


def _skwgrad_events(prof):
    return [e.name for e in prof.events() if e.name.startswith("skwgrad::")]


@pytest.mark.parametrize("amp", [False, True])
@pytest.mark.parametrize("channels_last", [False, True])
def test_eager_is_bit_identical_and_skips_the_custom_ops(amp, channels_last, op_calls):
    ref, model = _pair(MiniNet, channels_last)
    st.patch(model)
    x = torch.randn(2, 3, 32, 32)
    if channels_last:
        x = x.contiguous(memory_format=CL)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            got = _step(model, x)
        want = _step(ref, x)
    _assert_identical(got, want)
    assert op_calls == {"conv": 0, "conv_weight_grad": 0}
    names = [e.name for e in prof.events()]
    assert not _skwgrad_events(prof) and "aten::convolution" in names and "aten::convolution_backward" in names
    # Every patched layer still took the per-problem decision and was counted (CPU: native, "device").
    s = st.stats()
    assert s["native"] == len(PATCHED_2D) and s["reasons"] == {"device": len(PATCHED_2D)}
    assert sorted(s["layers"]) == sorted(PATCHED_2D)
    if amp:
        assert all(g.dtype == torch.float32 for g in got[2].values())
        assert all("dtype=bf16,dw_dtype=fp32" in p for p in s["problems"])


def test_eager_output_comes_from_the_function_not_the_op():
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 4, 3, padding=1)
    st.patch(conv)
    y = conv(torch.randn(1, 3, 6, 6))
    assert type(y.grad_fn).__name__ == "_EagerConvBackward"


def _weight_casts(prof, weight_shapes):
    """aten::_to_copy calls whose input has a conv weight's shape."""
    return sum(1 for e in prof.events() if e.name == "aten::_to_copy" and e.input_shapes and
               tuple(e.input_shapes[0]) in weight_shapes)  # fmt: skip


def test_autocast_casts_each_weight_once_in_forward_and_never_in_backward():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 5, padding=2), nn.ReLU(), nn.Conv2d(8, 6, 3, stride=2, groups=2),
                          nn.ReLU(), nn.Conv2d(6, 10, 1))  # fmt: skip
    shapes = {tuple(m.weight.shape) for m in model if isinstance(m, nn.Conv2d)}
    assert len(shapes) == 3
    st.patch(model)
    x = torch.randn(2, 3, 12, 12)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as fwd:
            y = model(x)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as bwd:
            y.float().sum().backward()
    assert _weight_casts(fwd, shapes) == 3  # as autocast's own convolution does
    # The cast weight was saved for dX, not cast again (PyTorch's autocast backward has a
    # weight-shaped _to_copy too, but that one widens dW; skwgrad widens dW with copy_).
    assert _weight_casts(bwd, shapes) == 0
    assert all(m.weight.grad.dtype == torch.float32 for m in model if isinstance(m, nn.Conv2d))


def test_create_graph_gives_pytorchs_first_order_gradients():
    torch.manual_seed(0)
    ref = nn.Conv2d(3, 4, 3, padding=1)
    model = copy.deepcopy(ref)
    st.patch(model)
    x = torch.randn(2, 3, 7, 7)
    got = torch.autograd.grad(model(x).square().sum(), [model.weight, model.bias], create_graph=True)
    want = torch.autograd.grad(ref(x).square().sum(), [ref.weight, ref.bias], create_graph=True)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_compiled_traces_the_function_and_calls_only_the_weight_grad_op():
    """torch.compile traces _EagerConv: the forward is aten.convolution, so a compiled forward
    calls no skwgrad op at run time; the backward calls skwgrad::conv_weight_grad once a layer."""
    ref, model = _pair(MiniNet, channels_last=True)
    st.patch(model)
    x = torch.randn(2, 3, 32, 32).contiguous(memory_format=CL)
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    try:
        cnt = CompileCounterWithBackend("aot_eager")
        compiled = torch.compile(model, fullgraph=True, backend=cnt)
        got = _step(compiled, x)
        assert cnt.frame_count == 1
        targets = [str(n.target) for gm in cnt.graphs for sub in gm.modules() if hasattr(sub, "graph") for n in sub.graph.nodes]
        assert targets.count("skwgrad.conv_weight_grad") == len(PATCHED_2D)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            got = _step(compiled, x)
        want = _step(ref, x)
        _assert_identical(got, want)
        ev = _skwgrad_events(prof)
        assert ev.count("skwgrad::conv") == 0
        assert ev.count("skwgrad::conv_weight_grad") == len(PATCHED_2D)
    finally:
        torch._dynamo.reset()


def test_make_fx_and_fake_tensors_take_the_op():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    torch.manual_seed(0)
    x, w, b = torch.randn(1, 3, 6, 6), torch.randn(4, 3, 3, 3), torch.randn(4)
    gm = make_fx(lambda x, w, b: st.conv2d(x, w, b, padding=1))(x, w, b)
    assert [str(n.target) for n in gm.graph.nodes if n.op == "call_function"] == ["skwgrad.conv.default"]
    with FakeTensorMode() as mode:
        fx = mode.from_tensor(x)
        fw = mode.from_tensor(w)
        y = st.conv2d(fx, fw, None, padding=1)
    assert tuple(y.shape) == (1, 4, 6, 6)
    assert not _ops._eager(fx, fw, None) and _ops._eager(x, w, b)


def test_eager_fallbacks_are_decided_and_counted_as_the_op_does(fake_gpu):
    """Stand-in GPU whose launcher has no kernel: the first step tries skwgrad for every layer and
    falls back (sticky no_kernel), the second goes native at once (one convolution_backward per
    layer) without asking the launcher; skwgrad off counts 'disabled'. Gradients stay PyTorch's."""
    fl = fake_gpu(FakeLauncher(raises=NoKernelError("no cached kernel fits; build one with: skwgrad compile-all ...")))
    ref, model = _pair(MiniNet, channels_last=True)
    st.patch(model)
    x = torch.randn(2, 3, 32, 32).contiguous(memory_format=CL)
    n = len(PATCHED_2D)
    _assert_identical(_step(model, x), _step(ref, x))
    assert len(fl.calls) == n and st.stats()["reasons"] == {"no_kernel": n}
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _assert_identical(_step(model, x), _step(ref, x))
    assert len(fl.calls) == n  # sticky: not asked again
    s = st.stats()
    assert s["native"] == 2 * n and s["skwgrad"] == 0 and s["reasons"] == {"no_kernel": 2 * n}
    assert all(e["native"] == 2 for e in s["layers"].values())
    # Both models' backwards: one convolution_backward per conv layer each (the ref's are native).
    assert sum(e.name == "aten::convolution_backward" for e in prof.events()) == 2 * (n + 1)  # + reflect
    st.clear_decisions()
    with st.enabled(False):
        _assert_identical(_step(model, x), _step(ref, x))
    assert len(fl.calls) == n and st.stats()["reasons"] == {"no_kernel": 2 * n, "disabled": n}
    with pytest.raises(AssertionError):  # the control: the stand-in's dW would differ if it ran
        fake_gpu(FakeLauncher(wrong=True))
        _assert_identical(_step(model, x), _step(ref, x))
    st.clear_decisions()


def test_compiled_autograd_of_an_eager_forward_traces_the_op():
    """Eager forward, backward under compiled autograd (dynamo traces the autograd graph, our
    Function's backward included): dW goes through skwgrad::conv_weight_grad, not _wgrad's
    Python (which dynamo cannot trace), and the gradients are PyTorch's."""
    compiled_autograd = pytest.importorskip("torch._dynamo.compiled_autograd")
    if not hasattr(compiled_autograd, "_enable"):
        pytest.skip("this torch has no compiled_autograd._enable")
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3, stride=2, padding=1))
    model = copy.deepcopy(ref)
    st.patch(model)
    x = torch.randn(2, 3, 8, 8)

    def run(m):
        m.zero_grad(set_to_none=True)
        y = m(x)
        with compiled_autograd._enable(torch.compile(backend="aot_eager", fullgraph=True)):
            y.square().sum().backward()
        return [p.grad for p in m.parameters()]

    torch._dynamo.reset()
    try:
        got, want = run(model), run(ref)
        assert all(torch.equal(a, b) and a.abs().max() > 0 for a, b in zip(got, want))
        run(model)
        assert st.stats()["native"] == 4 and st.stats()["reasons"] == {"device": 4}
    finally:
        torch._dynamo.reset()
