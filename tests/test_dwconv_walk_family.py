"""The row-walk depthwise family (``dwconv_walk``): plans on the fake device launch what the
reference computes, the sweep builds it for every arch, and the search (tuning) times it right
after auto's launch, which does not take it yet (benchmarks/proposals/dwconv_walk_auto.diff).

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
    plan, got, ref = F.plan_on_fake(s, p, ks)
    assert plan.grid == plan.geometry.tiling.num_tiles * plan.ks_count
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


def test_auto_leaves_it_to_the_search_until_a_gpu_run(default_cache):
    """Auto keeps the window kernel (the product kernel has not run on a GPU: the rule that would take
    it is benchmarks/proposals/dwconv_walk_auto.diff); the search times the walk kernel at its rule's
    degree right after auto's launch (so tune on first use, timing the top few, reaches it), and at
    1, 2 and 4 CTAs per CU after that."""
    from skwgrad.launcher import select as S

    c = default_cache
    mbv2 = parse_problem("n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32")
    auto = S.choose(mbv2, c, arch="sm_90", cus=132)
    assert auto.spec.family == "dwconv"
    everything = S.all_choices(mbv2, c, arch="sm_90", cus=132)
    assert everything[0].kernel.key == auto.kernel.key and everything[0].ks_count == auto.ks_count
    assert everything[1].spec.family == "dwconv_walk" and everything[1].spec.variant == "atomic" and everything[1].ks_count == 1
    # the rule's degree and 1, 2, 4 CTAs per CU over its 252 tiles
    assert {x.ks_count for x in everything if x.spec.family == "dwconv_walk"} == {1, 2, 3}
    b16 = dataclasses.replace(mbv2, dw_dtype="bf16")
    second = S.all_choices(b16, c, arch="sm_90", cus=132)[1]
    assert second.spec.family == "dwconv_walk" and second.spec.variant == "workspace" and second.stage2 is not None
    # where no walk kernel admits the layer, the search has none
    for text in (
        "n=32,c=144,k=144,g=144,h=112,w=112,y=3,x=3,stride=2,padding=1,dtype=bf16",  # stride 2
        "n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,dilation=2,padding=2,dtype=bf16",  # dilation 2
        "n=32,c=144,k=144,g=144,h=56,w=56,y=5,x=5,padding=2,dtype=bf16",  # 5x5: not built
        "n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,padding=1,dtype=fp32,precision=tf32",  # not built for fp32
    ):
        assert not [x for x in S.all_choices(parse_problem(text), c, arch="sm_90", cus=132) if x.spec.family == "dwconv_walk"], text
    # tune on first use (top 3) times it
    be = F.FakeBackend(cus=132, max_active=2)
    rows = S.tune(mbv2, be, c, warmup=0, iters=1, top=3, remember=False)
    assert "dwconv_walk" in {r["family"] for r in rows}


def test_a_cache_without_it_serves_the_same_auto_launch(default_cache):
    """An older cache (no dwconv_walk entries) gives the same auto launch and a search without them."""
    from skwgrad.aot.sweep import sweep
    from skwgrad.launcher import select as S

    old = F.FakeCache()
    for it in sweep("default", ["sm_90"], ["bf16"]):
        if it.spec.family != "dwconv_walk":
            old.add(it.spec, it.arch)
    mbv2 = parse_problem("n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,padding=1,dtype=bf16")
    a, b = S.choose(mbv2, old, arch="sm_90", cus=132), S.choose(mbv2, default_cache, arch="sm_90", cus=132)
    assert (a.kernel.label, a.ks_count) == (b.kernel.label, b.ks_count)
    assert not [x for x in S.all_choices(mbv2, old, arch="sm_90", cus=132) if x.spec.family == "dwconv_walk"]
