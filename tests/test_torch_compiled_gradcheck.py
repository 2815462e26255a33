"""The compiled-gradient check of benchmarks/gpu_torch_model.py (the one the H200 runs under CUDA
graphs), on CPU with the aot_eager backend: it catches a wrong weight gradient, its control
(skwgrad off on both sides) passes at exactly zero, and the eager comparison it keeps beside is
shown to be unusable for a ReLU network at random init (why the reference is compiled)."""

import copy
import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import skwgrad.torch as st  # noqa: E402
from skwgrad.torch import _ops  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_torch_model as bench  # noqa: E402


@pytest.fixture
def setup():
    st.reset_stats()
    st.clear_decisions()
    a = types.SimpleNamespace(amp="bf16", compile_backend="aot_eager", compile_mode="default", cache=None)
    run = bench.Runner(a, torch.device("cpu"))
    torch.manual_seed(0)
    ref = bench.Tiny().to(memory_format=torch.channels_last).train()
    pat = copy.deepcopy(ref)
    report = st.patch(pat)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 32, 32, generator=g).contiguous(memory_format=torch.channels_last)
    target = torch.randint(0, 1000, (2,), generator=g)
    yield run, ref, pat, report, x, target
    torch._dynamo.reset()
    st.reset_stats()
    st.clear_decisions()


def test_compiled_check_catches_a_wrong_dw_and_its_control_is_exact(setup, monkeypatch):
    run, _, pat, report, x, target = setup
    native = _ops._native_wgrad

    def wrong_when_enabled(*args, **kw):  # stands for a skwgrad dW 3% off PyTorch's
        dw = native(*args, **kw)
        return dw * 1.03 if _ops._cfg.enabled else dw

    monkeypatch.setattr(_ops, "_native_wgrad", wrong_when_enabled)
    on = bench.compiled_check(run, pat, report, x, target, 5, [3, 4], skwgrad_on=True, time_steps=0)
    assert [c["step"] for c in on["checks"]] == [3, 4] and on["check_bound"] == 2e-2
    assert not on["pass"]
    for c in on["checks"]:
        assert c["max_norm_rel_conv_weight"] == pytest.approx(0.03, rel=1e-3)
        assert c["max_norm_rel_other"] == 0.0  # dW is a leaf: every other gradient is the reference's, bit for bit
        assert c["loss_abs_diff"] == 0.0 and not c["missing_grads"]
    off = bench.compiled_check(run, pat, report, x, target, 5, [3, 4], skwgrad_on=False, time_steps=0)
    assert off["pass"] and all(c["max_norm_rel"] == 0.0 and c["params_bit_identical"] == c["params"] for c in off["checks"])
    table = bench._check_table(on, off)
    assert [(r["step"], r["pass_skwgrad_on"], r["pass_control_off"]) for r in table] == [(3, False, True), (4, False, True)]


def test_compiled_check_follows_the_trained_state(setup, monkeypatch):
    """The reference gets the candidate's state before every checked step: after SGD steps the
    weights moved, and the check still compares like with like; a reference left at the initial
    weights does not pass."""
    run, _, pat, report, x, target = setup
    before = {n: p.detach().clone() for n, p in pat.named_parameters()}
    out = bench.compiled_check(run, pat, report, x, target, 6, [1, 5], skwgrad_on=True, time_steps=0)
    assert out["pass"] and all(c["max_norm_rel"] == 0.0 for c in out["checks"])  # CPU: both sides native
    assert all(torch.equal(p, before[n]) for n, p in pat.named_parameters())  # pat itself is not trained
    assert out["checks"][0]["loss_candidate"] != out["checks"][1]["loss_candidate"]  # the candidate was
    monkeypatch.setattr(bench, "_copy_state", lambda src, dst: None)
    stale = bench.compiled_check(run, pat, report, x, target, 6, [1, 5], skwgrad_on=True, time_steps=0)
    assert not stale["pass"] and all(c["max_norm_rel"] > 1e-3 for c in stale["checks"])


def test_eager_gradients_of_a_relu_net_move_by_far_more_than_rounding(setup):
    run, ref, *_, x, target = setup
    s = bench.grad_sensitivity(run, ref, x, target)
    assert s["same_step_again"]["max_norm_rel"] == 0.0
    # Half a bf16 ulp on the weights moves some parameter's gradient by far more than the bf16
    # bound of the compiled check: compiled-vs-eager cannot be held to it.
    assert s["weights_x(1+2^-9*N)"]["max_norm_rel"] > 10 * bench.COMPILED_NORM_BOUND["bf16"]
