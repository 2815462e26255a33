"""The row-walk depthwise kernels (``dwconv_walk``): numerics through the Triton interpreter (CPU)
against float64, dW and the workspace poisoned (NaN) before each run; the spec, geometry and split
rules; and where selection takes them.

A CTA owns BC channels x BP strips of BW output columns and walks down the output rows of its split,
keeping the KS - 1 older x rows in registers and loading the next row before this row's products.
The cases reach: a partial channel block (G % BC), strips past Wo (Wo % BW) and strips of several
images in one CTA, several column groups, row splits of uneven length and of one row each, padding
0 / 1 / 2 and asymmetric, 1x1, 3x3, 5x5 and 7x7 filters, channel vectors 1 / 2 / 4 / 8, both epilogues,
fp16 / bf16 / fp32 with dW in the input dtype and in fp32."""

import dataclasses

import pytest

from skwgrad.abi.conv import parse_problem
from skwgrad.abi.launch import dwconv_walk_geometry, dwconv_walk_ks_count, dwconv_walk_tiling
from skwgrad.abi.spec import KernelSpec
from skwgrad.errors import AbiError, ProblemError
from _interp import depthwise_problem as dw
from _interp import run_interpreter


def wspec(variant, dtype="bf16", dw_dtype=None, *, vec=4, bc=16, ks=3, bp=8, bw=2) -> dict:
    return dict(family="dwconv_walk", variant=variant, dtype=dtype, dw_dtype=dw_dtype or dtype, vec_c=vec, vec_k=vec,
                bm=bc, bn=ks, bk=bp, block=bw, num_warps=4, num_stages=3, precision="ieee" if dtype == "fp32" else "")  # fmt: skip


CASES = [
    # 24 channels on blocks of 16, Wo = 7 on strips of 2, 2 images x 4 strips on groups of 4: 2 groups
    ("walk_3x3_bf16_dwfp32_atomic_partial", dw(24, "h=9,w=7,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32"),
     wspec("atomic", "bf16", "fp32", bp=4), 3),
    ("walk_3x3_fp16_workspace_splits_uneven", dw(16, "h=7,w=10,y=3,x=3,padding=1,dtype=fp16"),
     wspec("workspace", "fp16", bp=8), 3),
    ("walk_3x3_fp32_atomic_one_row_splits", dw(8, "h=5,w=5,y=3,x=3,padding=1,dtype=fp32,dw_dtype=fp32"),
     wspec("atomic", "fp32", vec=4, bc=8, bp=16), 5),
    ("walk_3x3_bf16_workspace_vec8_no_padding", dw(32, "h=8,w=9,y=3,x=3,padding=0,dtype=bf16"),
     wspec("workspace", "bf16", vec=8, bc=16, bp=4), 2),
    ("walk_3x3_fp16_dwfp32_atomic_asym_pad", dw(12, "h=6,w=8,y=3,x=3,pad_lo=2x0,pad_hi=0x2,dtype=fp16,dw_dtype=fp32"),
     wspec("atomic", "fp16", "fp32", vec=2, bc=8, bp=4, bw=3), 2),
    ("walk_5x5_bf16_dwfp32_atomic", dw(16, "h=9,w=8,y=5,x=5,padding=2,dtype=bf16,dw_dtype=fp32"),
     wspec("atomic", "bf16", "fp32", ks=5, bp=8), 2),
    ("walk_1x1_fp16_workspace", dw(16, "h=4,w=6,y=1,x=1,dtype=fp16"),
     wspec("workspace", "fp16", ks=1, bp=4, bw=4), 1),
    # the trial 7x7 configuration's shape (benchmarks/build_walk_configs.py): one channel a thread, strips of 1
    ("walk_7x7_bf16_dwfp32_atomic_vec1", dw(12, "h=9,w=8,y=7,x=7,padding=3,dtype=bf16,dw_dtype=fp32"),
     wspec("atomic", "bf16", "fp32", vec=1, bc=8, ks=7, bp=4, bw=1), 2),
]


@pytest.fixture(scope="module")
def results():
    todo = [dict(id=i, problem=p, spec=s, ks_count=k) for i, p, s, k in CASES]
    return run_interpreter(todo, timeout=900)


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_walk_interpreter_numerics(results, case):
    r = results[case]
    assert r["label"].startswith("dwconv_walk_")
    assert r["rel_err"] <= r["tol"], r
    assert r["zeroed_left_nonzero"] == 0, r


def test_cases_cover_what_they_claim(results):
    for cid, problem, sp, ks in CASES:
        p = parse_problem(problem)
        KernelSpec(**sp).check_problem(p)
        geo = dwconv_walk_geometry(p, sp["variant"], bc=sp["bm"], bp=sp["bk"], bw=sp["block"], ks_count=ks)
        assert results[cid]["ks_count"] == geo.ks_count == ks, cid
    probs = [(parse_problem(p), s) for _, p, s, _ in CASES]
    assert {s["dtype"] for _, s in probs} == {"fp16", "bf16", "fp32"}
    assert {s["variant"] for _, s in probs} == {"atomic", "workspace"}
    assert any(q.g % s["bm"] for q, s in probs)  # a partial channel block
    assert any(q.wo % s["block"] for q, s in probs)  # strips past Wo
    assert any(dwconv_walk_tiling(q, s["bm"], s["bk"], s["block"]).num_tiles > -(-q.g // s["bm"]) for q, s in probs)  # column groups
    assert any(q.ho % k for (q, _), (_, _, _, k) in zip(probs, CASES))  # a short last split
    assert any(k == q.ho for (q, _), (_, _, _, k) in zip(probs, CASES))  # one row a split


def test_walk_spec_rules():
    s = KernelSpec(**wspec("workspace", "bf16", bp=32))
    assert s.label == "dwconv_walk_bf16_2d_v4_f3_c16p32b2_w4s3_workspace"
    assert KernelSpec(**wspec("atomic", "fp16", "fp32")).label == "dwconv_walk_fp16_dwfp32_2d_v4_f3_c16p8b2_w4s3_atomic"
    bad = [
        wspec("direct"),  # every CTA adds: no storing epilogue
        wspec("atomic", "bf16"),  # atomic needs an fp32 dW
        wspec("workspace", "bf16", "fp32"),  # an fp32 dW takes atomic
        dict(wspec("atomic", "bf16", "fp32"), spatial_dims=3),
        wspec("atomic", "bf16", "fp32", vec=16),  # past 16 bytes
        wspec("atomic", "bf16", "fp32", ks=9),
        wspec("atomic", "bf16", "fp32", bw=9),
        wspec("atomic", "bf16", "fp32", bc=2),  # fewer channels than a vector
        dict(wspec("atomic", "bf16", "fp32"), mode="win7"),
    ]
    for fields in bad:
        with pytest.raises(AbiError):
            KernelSpec(**fields)


def test_walk_refuses_what_it_was_not_built_for():
    s = KernelSpec(**wspec("atomic", "bf16", "fp32"))
    s.check_problem(parse_problem(dw(16, "h=8,w=8,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32")))
    for problem in (
        dw(16, "h=8,w=8,y=3,x=3,stride=2,padding=1,dtype=bf16,dw_dtype=fp32"),
        dw(16, "h=8,w=8,y=3,x=3,dilation=2,padding=2,dtype=bf16,dw_dtype=fp32"),
        dw(16, "h=8,w=8,y=5,x=5,padding=2,dtype=bf16,dw_dtype=fp32"),
        dw(16, "h=8,w=8,y=3,x=1,padding=1,dtype=bf16,dw_dtype=fp32"),
        dw(18, "h=8,w=8,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32"),  # G % 4
        dw(16, "d=3,h=8,w=8,z=3,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32"),
        dw(16, "h=8,w=8,y=3,x=3,padding=1,dtype=fp16,dw_dtype=fp32"),
        "n=2,c=16,k=16,g=8,h=8,w=8,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32",  # grouped, not depthwise
    ):
        with pytest.raises(AbiError):
            s.check_problem(parse_problem(problem))


def test_walk_geometry_and_split_rule():
    # MobileNetV2's 56 px 144-channel layer on 132 SMs: 9 channel blocks x 28 column groups of 32 strips
    p = parse_problem("n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32")
    t = dwconv_walk_tiling(p, 16, 32, 2)
    assert (t.num_tiles, t.iters_per_tile) == (9 * 28, 56)
    # one split: 2 CTAs an SM x (56 + 2 rows) = 116 rows of work against 2 splits' 4 x (28 + 2) = 120
    # (H200 run G1: 28.7 us against 34.1)
    assert dwconv_walk_ks_count(p, bc=16, bp=32, bw=2, compute_units=132) == 1
    # 96 channels at 55 px: 168 tiles; 1 split leaves 36 SMs two CTAs (2 x 57 = 114), 3 splits 4 x 21 = 84
    q = parse_problem("n=32,c=96,k=96,g=96,h=55,w=55,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32")
    assert dwconv_walk_tiling(q, 16, 32, 2).num_tiles == 168
    assert dwconv_walk_ks_count(q, bc=16, bp=32, bw=2, compute_units=132) == 3
    assert dwconv_walk_ks_count(q, bc=16, bp=32, bw=2, compute_units=132, ctas_per_cu=2) == 2
    geo = dwconv_walk_geometry(q, "workspace", bc=16, bp=32, bw=2, ks_count=3)
    assert (geo.grid, geo.ks_iters, geo.ks_count) == (168 * 3, 19, 3)
    assert geo.workspace.needs_stage2 and geo.scalars["ws_bytes"] == q.dw_numel * 4
    geo = dwconv_walk_geometry(q, "atomic", bc=16, bp=32, bw=2, ks_count=54)  # 55 rows in splits of 2: 28 splits
    assert (geo.ks_iters, geo.ks_count) == (2, 28) and geo.workspace.zero_dw
    with pytest.raises(ProblemError):
        dwconv_walk_geometry(q, "atomic", bc=16, bp=32, bw=2, ks_count=56)
    with pytest.raises(ProblemError):
        dwconv_walk_geometry(dataclasses.replace(q, c=2, k=2, g=48), "atomic", bc=16, bp=32, bw=2, ks_count=1)
