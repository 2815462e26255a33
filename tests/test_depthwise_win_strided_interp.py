"""Numerics of the strided and dilated depthwise window kernels (``dwconv`` mode
``win<BW>[r<TR>][s<SW>][d<DL>]``: stride SW and dilation DL along W, compile-time) through the
Triton interpreter (CPU), against float64, with dW and the workspace poisoned (NaN) before each
run and fresh random inputs per case.

A strip of BW output columns at stride SW reads the SW * (BW - 1) + DL * (KX - 1) + 1 contiguous
x columns of its window; each column some (output, tap) reads is loaded once and fed to every
(output, tap) that reads it. The cases reach: stride 2 with 3/5/7-wide filters and 1-wide ones
(the odd columns unread), stride 3, dilation 2 at stride 1 and at stride 2 (the odd columns
unread), padding 0/1/2/3 and asymmetric, odd and even input widths (the last strip's window past
Wi), strips ending past Wo, partial channel blocks, channel vectors 1/2/4/8, the four epilogues,
fp16/bf16/fp32 with dW in the input dtype and fp32, 2-D and 3-D (stride 2 in D and H too), and
the production configurations of the default preset (``sweep.DWCONV_WINDOW_STRIDED``) on small
shapes. Also the mode's spec rules (what the parser, the validator and check_problem refuse)."""

import pytest

from skwgrad.abi.conv import parse_problem
from skwgrad.abi.launch import dwconv_window
from skwgrad.abi.spec import KernelSpec
from skwgrad.errors import AbiError
from _interp import check_dwconv_cases, depthwise_problem, run_interpreter, window_spec  # noqa: E402


def wspec(variant, *args, mode="win4s2", **kw):
    return window_spec(variant, *args, mode=mode, **kw)


dw = depthwise_problem


CASES = [
    # production 3x3 s2 config (win7r3s2, BC 16, vec 8) on a partial channel block (24 = 16 + 8)
    ("win7r3s2_3x3_s2_p1_bf16_workspace_partial", dw(24, "h=9,w=15,y=3,x=3,stride=2,padding=1,dtype=bf16"),
     wspec("workspace", "bf16", mode="win7r3s2", bp=4), 3),
    ("win3r3s2_3x3_s2_p0_fp16_two_stage_odd_w", dw(16, "h=7,w=11,y=3,x=3,stride=2,padding=0,dtype=fp16"),
     wspec("two_stage", bc=16, mode="win3r3s2", bp=8), 2),
    ("win7s2_5x5_s2_p2_fp16_dwfp32_atomic", dw(16, "h=9,w=13,y=5,x=5,stride=2,padding=2,dtype=fp16,dw_dtype=fp32"),
     wspec("atomic", "fp16", "fp32", kx=5, mode="win7s2", bp=4), 3),
    ("win7s2_7x7_s2_p3_bf16_two_stage", dw(8, "h=8,w=17,y=7,x=7,stride=2,padding=3,dtype=bf16"),
     wspec("two_stage", "bf16", bc=8, kx=7, mode="win7s2", bp=2), 2),
    ("win5s2_7x7_s2_p3_fp32_direct_vec4", dw(8, "h=8,w=14,y=7,x=7,stride=2,padding=3,dtype=fp32"),
     wspec("direct", "fp32", vec=4, bc=8, kx=7, mode="win5s2"), 1),
    ("win2r2s2_3x3_s2_vec1_fp16_dwfp32_two_stage", dw(5, "h=6,w=10,y=3,x=3,stride=2,padding=1,dtype=fp16,dw_dtype=fp32"),
     wspec("two_stage", "fp16", "fp32", vec=1, bc=4, mode="win2r2s2"), 2),
    ("win3s2_1wide_s2_bf16_direct_vec2", dw(6, "h=5,w=9,y=3,x=1,stride=2,padding=1x0,dtype=bf16"),
     wspec("direct", "bf16", vec=2, bc=4, kx=1, mode="win3s2"), 1),
    ("win3s3_3x3_s3_bf16_atomic", dw(8, "h=10,w=13,y=3,x=3,stride=3,padding=1,dtype=bf16,dw_dtype=fp32"),
     wspec("atomic", "bf16", "fp32", bc=8, mode="win3s3"), 2),
    ("win4d2_3x3_d2_p2_bf16_workspace", dw(16, "h=9,w=11,y=3,x=3,padding=2,dilation=2,dtype=bf16"),
     wspec("workspace", "bf16", mode="win4d2"), 2),
    ("win3r3s2d2_3x3_s2_d2_fp16_direct", dw(8, "h=9,w=12,y=3,x=3,stride=2,padding=2,dilation=2,dtype=fp16"),
     wspec("direct", bc=8, mode="win3r3s2d2"), 1),
    ("win4s2_asym_fp32_two_stage_vec4", dw(8, "h=7,w=10,y=2,x=3,stride=2,pad_lo=0x2,pad_hi=1x0,dtype=fp32"),
     wspec("two_stage", "fp32", vec=4, bc=4, mode="win4s2", bp=2), 3),
    ("win7r3s2_3d_s2_bf16_workspace", dw(16, "d=5,h=6,w=9,z=3,y=3,x=3,stride=2,padding=1,dtype=bf16"),
     wspec("workspace", "bf16", mode="win7r3s2", sd=3), 2),
    ("win3r4s2_3d_sw2_fp16_dwfp32_atomic_vec2", "n=3,c=6,k=6,g=6,d=3,h=3,w=7,z=2,y=3,x=3,stride=1x1x2,padding=1,dtype=fp16,dw_dtype=fp32",
     wspec("atomic", "fp16", "fp32", vec=2, bc=4, mode="win3r4s2", sd=3, bp=8), 2),
]


@pytest.fixture(scope="module")
def results():
    todo = [dict(id=i, problem=p, spec=s, ks_count=k, seed=100 + n) for n, (i, p, s, k) in enumerate(CASES)]
    return run_interpreter(todo, timeout=900)


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_strided_window_interpreter_numerics(results, case):
    r = results[case]
    assert r["label"].startswith("dwconv_") and "_win" in r["label"]
    assert r["rel_err"] <= r["tol"], r


def test_cases_cover_what_they_claim(results):
    from skwgrad.aot.sweep import DWCONV_WINDOW_STRIDED

    check_dwconv_cases(CASES, results)
    probs = [(parse_problem(p), dwconv_window(s["mode"]), s) for _, p, s, _ in CASES]
    assert {c[2]["dtype"] for c in CASES} == {"fp16", "bf16", "fp32"}
    assert {c[2]["variant"] for c in CASES} == {"direct", "atomic", "two_stage", "workspace"}
    assert {c[2]["vec_c"] for c in CASES} == {1, 2, 4, 8}
    assert {q.x for q, w, _ in probs if w.sw == 2} >= {1, 3, 5, 7}
    assert {w.sw for _, w, _ in probs} == {1, 2, 3} and {w.dl for _, w, _ in probs} == {1, 2}
    assert {q.pad_lo[2] for q, _, _ in probs} >= {0, 1, 2, 3}
    assert any(q.wi % 2 for q, w, _ in probs if w.sw == 2) and any(q.wi % 2 == 0 for q, w, _ in probs if w.sw == 2)
    assert any(q.g % s["bm"] for q, _, s in probs)  # a partial channel block
    assert any(q.wo % w.bw for q, w, _ in probs)  # strips past Wo
    # the last strip's window reaches past Wi (masked columns inside a strip)
    assert any(w.sw * (-(-q.wo // w.bw) * w.bw - 1) + w.dl * (q.x - 1) - q.pad_lo[2] >= q.wi for q, w, _ in probs)
    assert any(q.spatial_dims == 3 and q.stride[0] == 2 for q, _, _ in probs)
    # every production strided configuration (filter width, mode) is run
    for x, (mode, _) in DWCONV_WINDOW_STRIDED.items():
        assert any(s["bn"] == x and s["mode"] == mode for _, _, s in probs), (x, mode)


def test_strided_window_spec_rules():
    s = KernelSpec(**wspec("workspace", "bf16", bc=16, kx=3, bp=64, mode="win7r3s2"))
    assert s.label == "dwconv_bf16_2d_v8_c16t3r64_w4s1_win7r3s2_workspace"
    assert s.dwconv_window == (7, 3, 2, 1)
    assert dwconv_window("win4d2") == (4, 1, 1, 2) and dwconv_window("win3r3s2d2") == (3, 3, 2, 2)
    assert dwconv_window("taps").bw == 0 and dwconv_window("").bw == 0
    # s1 / d1 are spelled by leaving them out; stride and dilation 2..4; s before d; the window <= 64 columns
    for bad in ("win7s1", "win7d1", "win7s5", "win7d2s2", "win7s2r3", "win4s", "win16s4"):
        with pytest.raises(AbiError):
            KernelSpec(**wspec("direct", kx=7, mode=bad))
    p = parse_problem("n=32,c=96,k=96,g=96,h=112,w=112,y=3,x=3,stride=2,padding=1")
    s.check_problem(p)
    s.check_problem(parse_problem("n=32,c=96,k=96,g=96,h=112,w=112,y=3,x=3,stride=1x2,padding=1"))  # stride_h is free
    for other in ("n=32,c=96,k=96,g=96,h=112,w=112,y=3,x=3,padding=1",  # stride 1
                  "n=32,c=96,k=96,g=96,h=112,w=112,y=3,x=3,stride=2x1,padding=1",  # stride_w 1
                  "n=32,c=96,k=96,g=96,h=112,w=112,y=3,x=3,stride=2,padding=2,dilation=2",
                  "n=32,c=96,k=96,g=96,h=112,w=112,y=5,x=5,stride=2,padding=2",
                  "n=32,c=96,k=96,g=96,h=112,w=112,y=3,x=3,stride=3,padding=1"):
        with pytest.raises(AbiError, match="window kernel"):
            s.check_problem(parse_problem(other))
    d = KernelSpec(**wspec("direct", "bf16", kx=3, mode="win4d2"))
    d.check_problem(parse_problem("n=2,c=16,k=16,g=16,h=9,w=9,y=3,x=3,padding=2,dilation=2"))
    with pytest.raises(AbiError, match="window kernel"):
        d.check_problem(parse_problem("n=2,c=16,k=16,g=16,h=9,w=9,y=3,x=3,stride=2,padding=2,dilation=2"))
