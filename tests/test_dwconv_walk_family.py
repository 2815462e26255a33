"""The row-walk depthwise family (``dwconv_walk``): plans on the fake device launch what the
reference computes, the sweep builds it for every arch, and selection takes it where it was
measured to win (large-plane 3x3 layers at stride and dilation 1) and nowhere else.

The H200 numbers are in benchmarks/RESULTS.md (sessions 27-28, benchmarks/dw_vert_proto.py); the
numerics of the kernel itself are in tests/test_depthwise_walk_interp.py (Triton interpreter)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_launcher_fakes as F  # noqa: E402

from skwgrad.abi.conv import ConvProblem, parse_problem  # noqa: E402
from skwgrad.abi.kernargs import declaration  # noqa: E402
from skwgrad.abi.spec import KernelSpec  # noqa: E402
from skwgrad.launcher.hostdata import from_bits  # noqa: E402
from skwgrad.launcher.plan import Kernel, Plan  # noqa: E402
from skwgrad.reference import relative_error  # noqa: E402


def walk_spec(variant="atomic", dtype="bf16", bp=32):
    dw = "fp32" if variant == "atomic" else dtype
    return KernelSpec("dwconv_walk", variant, dtype, dw, vec_c=4, vec_k=4, bm=16, bn=3, bk=bp, block=2, num_warps=4, num_stages=3)


def test_kernargs_are_the_depthwise_prefix():
    for v in ("atomic", "workspace"):
        assert declaration("dwconv_walk", v).names == declaration("dwconv", v).names
    with pytest.raises(Exception):
        declaration("dwconv_walk", "two_stage")


PROBLEMS = [
    ConvProblem(n=3, c=1, k=1, g=40, hi=9, wi=21, y=3, x=3, pad_lo=(0, 1, 1), pad_hi=(0, 1, 1)),  # a partial channel block
    ConvProblem(n=2, c=1, k=1, g=16, hi=10, wi=12, y=3, x=3),  # no padding: a smaller output
]


@pytest.mark.parametrize("variant,ks", [("atomic", 1), ("atomic", 4), ("workspace", 3)])
@pytest.mark.parametrize("pi", range(len(PROBLEMS)))
def test_plans_launch_what_the_reference_computes(variant, ks, pi):
    s = walk_spec(variant, bp=8)
    p = dataclasses.replace(PROBLEMS[pi], dw_dtype=s.dw_dtype)
    c, be = F.FakeCache(), F.FakeBackend()
    k = Kernel.from_entry(c.add(s, "sm_90"), c)
    st2 = Kernel.from_entry(c.add(F.stage2(s.dw_dtype), "sm_90"), c)
    plan = Plan(p, k, be, ks_count=ks, stage2=st2 if variant == "workspace" else None)
    assert plan.grid == plan.geometry.tiling.num_tiles * plan.ks_count
    xp, dyp, dwp, ref = F.random_device_inputs(be, p)
    plan.poison(dw=dwp)
    plan.launch(dyp, xp, dwp)
    got = from_bits(be.read_array(dwp, p.dw_numel, p.dw_dtype), p.dw_dtype).reshape(p.dw_shape)
    assert relative_error(got, ref) < (1e-2 if p.dw_dtype == "bf16" else 1e-5)
    assert plan.zeroed_bytes_nonzero() == 0


def test_sweep_builds_it_for_every_arch_at_a_wave_of_strips():
    from skwgrad.aot.sweep import sweep

    for arch, wave in (("sm_90", 32), ("gfx942", 64), ("gfx950", 64)):
        got = [it.spec for it in sweep("default", [arch], ["bf16", "fp16", "fp32"]) if it.spec.family == "dwconv_walk"]
        assert {(s.dtype, s.dw_dtype, s.variant) for s in got} == {
            ("bf16", "bf16", "workspace"), ("bf16", "fp32", "atomic"), ("fp16", "fp16", "workspace"), ("fp16", "fp32", "atomic")}
        assert {(s.bm, s.bn, s.bk, s.block, s.vec_c) for s in got} == {(16, 3, wave, 2, 4)}  # one channel vector a thread
    assert [it.spec.variant for it in sweep("smoke", ["sm_90"], ["bf16"]) if it.spec.family == "dwconv_walk"] == ["atomic"]


@pytest.fixture(scope="module")
def default_cache():
    from skwgrad.aot.sweep import sweep

    c = F.FakeCache()
    for it in sweep("default", ["sm_90"], ["bf16", "fp16", "fp32"]):
        c.add(it.spec, it.arch)
    return c


def test_selection_takes_it_on_large_plane_3x3_layers(default_cache):
    from skwgrad.launcher import select as S

    c = default_cache
    assert S.DWCONV_WALK_MIN_ROWS == 48 and S.DWCONV_WALK_FILTERS == (3,)
    mbv2 = parse_problem("n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32")
    ch = S.choose(mbv2, c, arch="sm_90", cus=132)
    assert ch.spec.family == "dwconv_walk" and ch.spec.variant == "atomic" and ch.stage2 is None and ch.ks_count == 1
    ch16 = S.choose(dataclasses.replace(mbv2, dw_dtype="bf16"), c, arch="sm_90", cus=132)
    assert ch16.spec.family == "dwconv_walk" and ch16.spec.variant == "workspace" and ch16.stage2 is not None
    wide = parse_problem("n=32,c=384,k=384,g=384,h=56,w=56,y=3,x=3,padding=1,dtype=fp16,dw_dtype=fp32")
    assert S.choose(wide, c, arch="sm_90", cus=132).spec.family == "dwconv_walk"  # before the TMA family too
    for text in (
        "n=32,c=144,k=144,g=144,h=28,w=28,y=3,x=3,padding=1,dtype=bf16",  # a small plane: the window kernel
        "n=32,c=144,k=144,g=144,h=47,w=47,y=3,x=3,padding=1,dtype=bf16",  # just under the rows it needs
        "n=32,c=144,k=144,g=144,h=112,w=112,y=3,x=3,stride=2,padding=1,dtype=bf16",  # stride 2
        "n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,dilation=2,padding=2,dtype=bf16",  # dilation 2
        "n=32,c=144,k=144,g=144,h=56,w=56,y=5,x=5,padding=2,dtype=bf16",  # 5x5
        "n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,padding=1,dtype=fp32,precision=tf32",  # not built for fp32
    ):
        assert S.choose(parse_problem(text), c, arch="sm_90", cus=132).spec.family != "dwconv_walk", text
    assert S.choose(mbv2, c, arch="sm_90", cus=132, deterministic=True).spec.family != "dwconv_walk"
    assert S.choose(mbv2, c, arch="sm_90", cus=132, reduction="two_stage").spec.family != "dwconv_walk"
    assert S.choose(mbv2, c, arch="sm_90", cus=132, reduction="atomic").spec.family == "dwconv_walk"
    everything = S.all_choices(mbv2, c, arch="sm_90", cus=132)
    assert everything[0].spec.family == "dwconv_walk" and everything[0].ks_count == 1  # auto's launch leads the search
    # the rule's degree and 1, 2, 4 CTAs per CU over its 252 tiles
    assert {x.ks_count for x in everything if x.spec.family == "dwconv_walk"} == {1, 2, 3}


def test_a_cache_without_it_keeps_the_window_kernel(default_cache):
    from skwgrad.launcher import select as S

    mbv2 = parse_problem("n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32")
    walk = {k.key for k in S.candidates(default_cache, "sm_90", mbv2, family="dwconv_walk")}
    assert walk
    ch = S.choose(mbv2, default_cache, arch="sm_90", cus=132, exclude=frozenset(walk))
    assert ch.spec.family == "dwconv" and ch.spec.dwconv_window.bw
