"""Numerics of the depthwise wgrad family (``dwconv``) through the Triton interpreter (CPU),
against float64, with dW and the workspace poisoned (NaN) before each run: an element the kernel
never writes, or a split whose replica is never stored, shows up as NaN and fails the check.

Shapes are tiny (the interpreter is slow) but reach every path: 3x3 / 5x5 / 7x7 / 3-D filters,
stride 2, dilation 2, asymmetric padding, channel blocks past G (partial), channel vectors of
1, 2, 4 and 8, row steps that carry into n every step, and the four epilogues (direct, atomic into
fp32 dW, two-stage into f32 replicas + Stage-2, workspace: atomics into one f32 replica + Stage-2) at fp16, bf16 and fp32 with dW in the input dtype
and in fp32. Also the packed-group family (``grouped``: GB groups block-diagonal in one MMA tile)
on g = 2, 4, 8 shapes, 2-D and 3-D, every epilogue. The zeroed arena starts zero (as the launcher
keeps it) and must be zero again after Stage-2. Runs through tests/_interp_runner.py, the
runner of the dense families.
"""

import pytest

from skwgrad.abi.conv import parse_problem
from skwgrad.abi.launch import dwconv_geometry, grouped_geometry
from _interp import run_interpreter  # noqa: E402



def spec(variant, dtype="fp16", dw=None, *, vec=8, bc=16, taps=16, br=4, sd=2, warps=4, mode=""):
    return dict(family="dwconv", variant=variant, dtype=dtype, dw_dtype=dw or dtype, vec_c=vec, vec_k=vec,
                bm=bc, bn=taps, bk=br, num_warps=warps, num_stages=1, mode=mode,
                precision="ieee" if dtype == "fp32" else "", spatial_dims=sd)  # fmt: skip


def gspec(variant, dtype="fp16", dw=None, *, gb=4, vec=8, bm=32, bn=32, bk=16, sd=2):
    return dict(family="grouped", variant=variant, dtype=dtype, dw_dtype=dw or dtype, vec_c=vec, vec_k=vec,
                bm=bm, bn=bn, bk=bk, block=gb, num_warps=4, num_stages=2,
                precision="ieee" if dtype == "fp32" else "", spatial_dims=sd)  # fmt: skip


def dw(g, rest):
    return f"n=2,c={g},k={g},g={g},{rest}"


CASES = [
    # (id, problem, spec, ks_count)
    ("3x3_fp16_two_stage_partial_block", dw(24, "h=7,w=6,y=3,x=3,padding=1,dtype=fp16"), spec("two_stage"), 3),
    ("3x3_bf16_two_stage", dw(24, "h=7,w=6,y=3,x=3,padding=1,dtype=bf16"), spec("two_stage", "bf16"), 4),
    ("3x3_bf16_direct", dw(16, "h=6,w=7,y=3,x=3,padding=1,dtype=bf16"), spec("direct", "bf16"), 1),
    ("3x3_s2_fp16_workspace_partial_block", dw(40, "h=9,w=7,y=3,x=3,stride=2,padding=1,dtype=fp16"), spec("workspace", bc=32), 5),
    ("5x5_s2_fp32_atomic", dw(12, "h=9,w=10,y=5,x=5,stride=2,padding=2,dtype=fp32,dw_dtype=fp32"),
     spec("atomic", "fp32", vec=4, bc=8, taps=32), 3),
    ("3x3_dil2_fp16_dwfp32_two_stage_vec1", dw(5, "h=8,w=8,y=3,x=3,padding=2,dilation=2,dtype=fp16,dw_dtype=fp32"),
     spec("two_stage", "fp16", "fp32", vec=1, bc=4), 2),
    ("3d_bf16_dwfp32_atomic", dw(8, "d=4,h=5,w=4,z=3,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32"),
     spec("atomic", "bf16", "fp32", taps=32, sd=3), 2),
    ("3d_s2_fp32_two_stage", dw(4, "d=5,h=4,w=5,z=2,y=3,x=2,stride=2,padding=1,dtype=fp32"),
     spec("two_stage", "fp32", vec=4, bc=4, taps=16, sd=3), 2),
    ("7x7_fp16_two_stage", dw(8, "h=8,w=8,y=7,x=7,padding=3,dtype=fp16"), spec("two_stage", taps=64, br=2, bc=8), 3),
    ("asym_s2_fp16_direct_vec2", dw(6, "h=9,w=8,y=2,x=3,stride=2,pad_lo=0x1,pad_hi=1x0,dtype=fp16"),
     spec("direct", vec=2, bc=4), 1),
    # BR = 8 rows span more than one 2x3 image: every step carries into n
    ("tiny_images_fp16_two_stage", "n=5,c=8,k=8,g=8,h=2,w=3,y=2,x=2,padding=1,dtype=fp16", spec("two_stage", br=8), 3),
    # mode "taps": the gather laid out [taps, rows, channels] (every tap of a row in one thread)
    ("taps_inner_3x3_bf16_two_stage_partial", dw(24, "h=7,w=6,y=3,x=3,padding=1,dtype=bf16"), spec("two_stage", "bf16", br=8, mode="taps"), 3),
    ("taps_inner_3d_s2_fp16_dwfp32_atomic", dw(8, "d=5,h=4,w=5,z=3,y=3,x=3,stride=2,padding=1,dtype=fp16,dw_dtype=fp32"),
     spec("atomic", "fp16", "fp32", taps=32, br=4, sd=3, mode="taps"), 2),
    ("taps_inner_7x7_fp16_workspace_vec1", dw(6, "h=8,w=9,y=7,x=7,padding=3,dilation=1,dtype=fp16"),
     spec("workspace", "fp16", vec=1, bc=4, taps=64, br=4, mode="taps"), 3),
    # grouped, GB groups per tile (block-diagonal): G/GB packed tiles, partial packed M and N tiles
    ("grouped_g8_c4_fp16_two_stage", "n=2,c=32,k=32,g=8,h=7,w=6,y=3,x=3,padding=1,dtype=fp16", gspec("two_stage"), 3),
    ("grouped_g2_c8k16_s2_fp16_dwfp32_atomic", "n=2,c=16,k=32,g=2,h=6,w=6,y=3,x=3,padding=1,stride=2,dtype=fp16,dw_dtype=fp32",
     gspec("atomic", "fp16", "fp32", gb=2), 2),
    ("grouped_g4_c3k6_vec4_fp32_direct", "n=2,c=12,k=24,g=4,h=6,w=7,y=3,x=3,padding=2,dilation=2,dtype=fp32",
     gspec("direct", "fp32", gb=4, vec=4, bm=16, bn=32), 1),
    ("grouped_3d_g4_fp16_two_stage", "n=1,c=16,k=16,g=4,d=3,h=4,w=4,z=3,y=3,x=3,padding=1,dtype=fp16",
     gspec("two_stage", gb=2, vec=8, sd=3), 2),
    # 32 channels per group, 2 groups filling a 64-row tile (the default's tile for them), a partial N tile
    ("grouped_g2_c32_fp16_two_stage", "n=2,c=128,k=128,g=4,h=5,w=6,y=3,x=3,padding=1,dtype=fp16", gspec("two_stage", gb=2, bm=64, bn=64), 2),
    # grouped workspace: every split adds its diagonal blocks into one f32 replica (zeroed arena), Stage-2 resets it
    ("grouped_g8_c4_fp16_workspace", "n=2,c=32,k=32,g=8,h=7,w=6,y=3,x=3,padding=1,dtype=fp16", gspec("workspace"), 3),
    ("grouped_g4_c3k6_vec4_fp32_workspace", "n=2,c=12,k=24,g=4,h=6,w=7,y=3,x=3,padding=2,dilation=2,dtype=fp32",
     gspec("workspace", "fp32", gb=4, vec=4, bm=16, bn=32), 2),
]


@pytest.fixture(scope="module")
def results():
    todo = [dict(id=i, problem=p, spec=s, ks_count=k) for i, p, s, k in CASES]
    return run_interpreter(todo, timeout=600)


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_depthwise_interpreter_numerics(results, case):
    r = results[case]
    assert r["label"].startswith(("dwconv_", "grouped_"))
    assert r["rel_err"] <= r["tol"], r
    assert r["zeroed_left_nonzero"] == 0, r  # Stage-2 reset the workspace replica (zero at rest)


def test_cases_cover_what_they_claim(results):
    by_id = {c[0]: c for c in CASES}
    for cid, r in results.items():
        _, problem, sp, ks = by_id[cid]
        p = parse_problem(problem)
        if sp["family"] == "grouped":
            geo = grouped_geometry(p, sp["variant"], gb=sp["block"], bm=sp["bm"], bn=sp["bn"], bk=sp["bk"], ks_count=ks)
        else:
            geo = dwconv_geometry(p, sp["variant"], bc=sp["bm"], taps=sp["bn"], br=sp["bk"], ks_count=ks)
        assert r["ks_count"] == geo.ks_count == ks, cid  # the split count asked for is the one run
    # partial channel blocks: G is not a multiple of BC
    for cid in ("3x3_fp16_two_stage_partial_block", "5x5_s2_fp32_atomic", "3x3_dil2_fp16_dwfp32_two_stage_vec1",
                "3x3_s2_fp16_workspace_partial_block"):
        _, problem, sp, _ = by_id[cid]
        assert parse_problem(problem).g % sp["bm"], cid
    assert {c[2]["dtype"] for c in CASES} == {"fp16", "bf16", "fp32"}
    assert {c[2]["variant"] for c in CASES} == {"direct", "atomic", "two_stage", "workspace"}
    assert {c[2]["vec_c"] for c in CASES if c[2]["family"] == "dwconv"} == {1, 2, 4, 8}
    assert {c[2]["mode"] for c in CASES if c[2]["family"] == "dwconv"} == {"", "taps"}
    assert {c[2]["variant"] for c in CASES if c[2]["family"] == "grouped"} == {"direct", "atomic", "two_stage", "workspace"}
    assert all(results[c[0]]["zeroed_bytes"] >= 4 * results[c[0]]["dw_numel"] for c in CASES if c[2]["variant"] == "workspace")
