"""Numerics of the depthwise window kernels (``dwconv`` mode ``win<BW>[r<TR>]``) through the Triton
interpreter (CPU), against float64, with dW and the workspace poisoned (NaN) before each run.

The window kernel keeps a strip of BW output columns per thread and reuses every loaded x vector
across the KX taps that read it, for TR tap rows per CTA. The cases reach: strips that end past Wo
(Wo % BW != 0) and strips that span rows and images (every step carries), tap-row groups past
Z*Y (TR not dividing Z*Y), stride and dilation in H and D (the window needs 1 along W), padding
on both sides and asymmetric, 2-D and 3-D, partial channel blocks, channel vectors 1/2/4/8, the
four epilogues, fp16/bf16/fp32 with dW in the input dtype and in fp32. Also the spec and
geometry rules of the mode (what check_problem refuses, the grid and the ks_count clamp)."""

import pytest

from skwgrad.abi.conv import parse_problem
from skwgrad.abi.launch import dwconv_ks_count, launch_geometry
from skwgrad.abi.spec import KernelSpec
from skwgrad.errors import AbiError
from _interp import check_dwconv_cases, depthwise_problem, run_interpreter, window_spec  # noqa: E402


wspec = window_spec


dw = depthwise_problem


CASES = [
    ("win3r3_3x3_bf16_two_stage_partial", dw(24, "h=7,w=8,y=3,x=3,padding=1,dtype=bf16"),
     wspec("two_stage", "bf16", mode="win3r3", bp=8), 3),
    ("win4_3x3_sh2_fp16_workspace", dw(16, "h=9,w=7,y=3,x=3,stride=2x1,padding=1,dtype=fp16"),
     wspec("workspace", bc=16, mode="win4"), 5),
    ("win5_7x7_fp32_atomic", dw(12, "h=8,w=9,y=7,x=7,padding=3,dtype=fp32,dw_dtype=fp32"),
     wspec("atomic", "fp32", vec=4, bc=8, kx=7, mode="win5"), 3),
    ("win2r2_5x5_dh2_fp16_dwfp32_two_stage_vec1", dw(5, "h=10,w=7,y=5,x=5,padding=2,dilation=2x1,dtype=fp16,dw_dtype=fp32"),
     wspec("two_stage", "fp16", "fp32", vec=1, bc=4, kx=5, mode="win2r2"), 2),
    ("win3r3_3d_bf16_direct_vec2", dw(6, "d=4,h=5,w=6,z=3,y=3,x=3,padding=1,dtype=bf16"),
     wspec("direct", "bf16", vec=2, bc=4, mode="win3r3", sd=3), 1),
    ("win4r4_3d_sd2_fp16_workspace_tiny_images", "n=3,c=8,k=8,g=8,d=3,h=2,w=3,z=2,y=3,x=3,stride=2x1x1,padding=1,dtype=fp16",
     wspec("workspace", bc=8, mode="win4r4", bp=8, sd=3), 2),
    ("win3_asym_fp32_direct_vec4", dw(8, "h=6,w=8,y=2,x=3,pad_lo=0x2,pad_hi=1x0,dtype=fp32"),
     wspec("direct", "fp32", vec=4, bc=4, mode="win3"), 1),
    ("win7r3_3x3_bf16_dwfp32_atomic_wide_strip", dw(16, "h=5,w=14,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32"),
     wspec("atomic", "bf16", "fp32", bc=16, mode="win7r3", bp=4), 2),
    # the default's 5x5 class: every tap row in one CTA (TR = 5), strips of 7 over a width of 9
    ("win7r5_5x5_bf16_dwfp32_atomic_all_rows", dw(16, "h=6,w=9,y=5,x=5,padding=2,dtype=bf16,dw_dtype=fp32"),
     wspec("atomic", "bf16", "fp32", bc=16, kx=5, mode="win7r5", bp=4), 2),
    # the default's strips of 5 for the 3-wide filter, on the width they are for (15 = 3 strips)
    ("win5r3_3x3_bf16_workspace_width_15", dw(16, "h=4,w=15,y=3,x=3,padding=1,dtype=bf16"),
     wspec("workspace", "bf16", bc=16, mode="win5r3", bp=4), 2),
]


@pytest.fixture(scope="module")
def results():
    todo = [dict(id=i, problem=p, spec=s, ks_count=k) for i, p, s, k in CASES]
    return run_interpreter(todo, timeout=900)


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_window_interpreter_numerics(results, case):
    r = results[case]
    assert r["label"].startswith("dwconv_") and "_win" in r["label"]
    assert r["rel_err"] <= r["tol"], r


def test_cases_cover_what_they_claim(results):
    check_dwconv_cases(CASES, results)
    assert {c[2]["dtype"] for c in CASES} == {"fp16", "bf16", "fp32"}
    assert {c[2]["variant"] for c in CASES} == {"direct", "atomic", "two_stage", "workspace"}
    assert {c[2]["vec_c"] for c in CASES} == {1, 2, 4, 8}
    assert any(parse_problem(p).g % s["bm"] for _, p, s, _ in CASES)  # a partial channel block
    assert any(parse_problem(p).wo % int(s["mode"][3:].split("r")[0]) for _, p, s, _ in CASES)  # strips past Wo
    trs = [(parse_problem(p), KernelSpec(**s).dwconv_window[1]) for _, p, s, _ in CASES]
    assert any((q.z * q.y) % tr for q, tr in trs)  # a tap-row group past Z*Y


def test_window_spec_rules_and_geometry():
    s = KernelSpec(**wspec("workspace", "bf16", bc=16, kx=3, bp=64, mode="win7r3"))
    assert s.label == "dwconv_bf16_2d_v8_c16t3r64_w4s1_win7r3_workspace"
    assert s.dwconv_window == (7, 3, 1, 1)  # (BW, TR, stride_w, dilation_w)
    assert KernelSpec(**wspec("direct", mode="win4")).dwconv_window == (4, 1, 1, 1)
    for bad in ("win0", "win17", "win4r9", "win", "win4r", "window"):
        with pytest.raises(AbiError):
            KernelSpec(**wspec("direct", mode=bad))
    p = parse_problem("n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,padding=1")
    s.check_problem(p)
    for other in ("n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,padding=1,stride=2",
                  "n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,padding=2,dilation=2",
                  "n=32,c=144,k=144,g=144,h=56,w=56,y=5,x=5,padding=2",
                  "n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=1,padding=1x0"):
        with pytest.raises(AbiError, match="window kernel"):
            s.check_problem(parse_problem(other))
    # grid: channel blocks x tap-row groups x splits; steps of 64 strips of 7 columns
    geo = launch_geometry(p, "dwconv", "workspace", bm=16, bn=3, bk=64, mode="win7r3", ks_count=5)
    strips = 32 * 56 * 8
    assert geo.tiling.num_tiles == 9 * 1 and geo.tiling.iters_per_tile == -(-strips // 64)
    assert geo.grid == 9 * geo.ks_count and geo.ks_count == 5
    ks = dwconv_ks_count(p, bc=16, br=64, compute_units=132, mode="win7r3")
    assert 1 <= ks <= geo.tiling.iters_per_tile
    # a ks_count sized by the gather rule (steps of rows) is clamped to the window's steps
    big = launch_geometry(p, "dwconv", "atomic", bm=16, bn=3, bk=64, mode="win7r3", ks_count=10**6)
    assert big.ks_count == big.tiling.iters_per_tile
