"""Workspace layouts per (family, variant) (SPEC section 3) and launch_geometry, which resolves a
whole launch (grid, split-K degree, partition, workspace, scalar kernargs) from them."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skwgrad.abi.conv import ConvProblem
from skwgrad.abi.kernargs import declaration
from skwgrad.abi.launch import STAGE2_BLOCK, launch_geometry
from skwgrad.abi.streamk import partition
from skwgrad.abi.workspace import flags_bytes, workspace_layout
from skwgrad.errors import AbiError, ProblemError


def roundup(n, a=256):
    return (n + a - 1) // a * a


# ---------------------------------------------------------------------------------------------
# flags_bytes
# ---------------------------------------------------------------------------------------------
def test_flags_bytes_seven_ctas_four_flags():
    assert flags_bytes(7, 4) == 256  # 7 x 4 i32 = 112 bytes, rounded up to 256


@pytest.mark.parametrize(
    "ctas, per_cta, expected",
    [(0, 1, 0), (1, 1, 256), (64, 1, 256), (65, 1, 512), (16, 4, 256), (17, 4, 512), (304, 1, 1280), (304, 4, 4864)],
)
def test_flags_bytes_rounding(ctas, per_cta, expected):
    assert flags_bytes(ctas, per_cta) == expected


@settings(max_examples=300, deadline=None)
@given(ctas=st.integers(0, 5000), per_cta=st.integers(1, 16))
def test_flags_bytes_holds_every_flag(ctas, per_cta):
    fb = flags_bytes(ctas, per_cta)
    assert fb % 256 == 0
    assert 4 * ctas * per_cta <= fb < 4 * ctas * per_cta + 256


@pytest.mark.parametrize("ctas, per_cta", [(-1, 1), (4, 0), (4, -2)])
def test_flags_bytes_refusals(ctas, per_cta):
    with pytest.raises(AbiError, match="flags_bytes needs sk_ctas >= 0 and flags_per_cta > 0"):
        flags_bytes(ctas, per_cta)


# ---------------------------------------------------------------------------------------------
# workspace_layout: the table in workspace.py
# ---------------------------------------------------------------------------------------------
DW = 3 * 5 * 7  # an odd dW size: every rounding shows


def test_direct():
    w = workspace_layout("wgrad", "direct", dw_numel=DW)
    assert (w.regions, w.zero_dw, w.replicas, w.stage2_reset) == ((), False, 0, False)
    assert w.arena_bytes("zeroed") == w.arena_bytes("scratch") == 0 and not w.needs_stage2 and not w.uses_workspace


@pytest.mark.parametrize("ks", [0, 2, 8])
def test_direct_refuses_ks_count(ks):
    with pytest.raises(AbiError, match=f"the direct epilogue stores dW once: ks_count must be 1, got {ks}"):
        workspace_layout("wgrad", "direct", dw_numel=DW, ks_count=ks)


@pytest.mark.parametrize("family, variant", [("wgrad", "atomic"), ("wgrad_sk", "atomic")])
def test_atomic_zeroes_dw_only(family, variant):
    w = workspace_layout(family, variant, dw_numel=DW, ks_count=4 if family == "wgrad" else 1, sk_ctas=7)
    assert w.regions == () and w.arena_bytes("zeroed") == w.arena_bytes("scratch") == 0
    assert w.zero_dw and w.replicas == 0 and not w.needs_stage2


@pytest.mark.parametrize("ks", [1, 2, 5])
def test_two_stage(ks):
    w = workspace_layout("wgrad", "two_stage", dw_numel=DW, ks_count=ks)
    r = w.region("replicas")
    # every split stores its whole replica: scratch memory, nothing to reset
    assert (r.arena, r.offset, r.nbytes) == ("scratch", 0, 4 * DW * ks)
    assert w.arena_bytes("scratch") == roundup(4 * DW * ks) and w.arena_bytes("zeroed") == 0
    assert w.replicas == ks and w.needs_stage2 and not w.stage2_reset
    assert not w.zero_dw


@pytest.mark.parametrize("variant", ["linear", "tree"])
@pytest.mark.parametrize("sk_ctas, per_cta, bm, bn", [(7, 4, 16, 16), (304, 1, 128, 128), (5, 1, 32, 16), (0, 1, 64, 64)])
def test_flag_reductions(variant, sk_ctas, per_cta, bm, bn):
    w = workspace_layout("wgrad_sk", variant, dw_numel=DW, bm=bm, bn=bn, sk_ctas=sk_ctas, flags_per_cta=per_cta)
    assert [r.name for r in w.regions] == ["flags", "partials"]
    flags, partials = w.region("flags"), w.region("partials")
    # flags are zero at rest (the consumers reset them): the zeroed arena; partials: scratch
    assert (flags.arena, flags.offset, flags.nbytes) == ("zeroed", 0, flags_bytes(sk_ctas, per_cta))
    assert (partials.arena, partials.offset) == ("scratch", 0)
    assert partials.nbytes >= 4 * bm * bn * sk_ctas  # one f32 BM x BN slot per SK CTA
    assert partials.nbytes == roundup(4 * bm * bn * sk_ctas)
    assert w.arena_bytes("zeroed") == flags.nbytes and w.arena_bytes("scratch") == partials.nbytes
    assert not w.zero_dw and w.replicas == 0 and not w.needs_stage2


@pytest.mark.parametrize("family, ks", [("wgrad_sk", 1), ("wgrad", 1), ("wgrad", 2), ("wgrad", 79), ("wgrad", 1000)])
def test_workspace_reduction(family, ks):
    w = workspace_layout(family, "workspace", dw_numel=DW, sk_ctas=9, ks_count=ks)
    r = w.region("replicas")
    # accumulated with atomics (stream-K segments, or every split-K split), so it must start at
    # zero: the zeroed arena, and Stage-2 resets it; one replica whatever the split count
    assert (r.arena, r.offset, r.nbytes) == ("zeroed", 0, 4 * DW)
    assert w.replicas == 1 and w.needs_stage2 and w.stage2_reset and w.arena_bytes("zeroed") == roundup(4 * DW)
    assert w.arena_bytes("scratch") == 0 and [x.name for x in w.regions] == ["replicas"]
    assert not w.zero_dw


def test_region_lookup_refuses_unknown():
    w = workspace_layout("wgrad_sk", "workspace", dw_numel=DW)
    with pytest.raises(KeyError, match="wgrad_sk/workspace workspace has no 'flags' region"):
        w.region("flags")


@pytest.mark.parametrize(
    "family, variant, kw, match",
    [
        ("wgrad_sk", "linear", dict(bm=16, bn=16, sk_ctas=4), "a linear/tree layout needs the kernel's flags_per_cta"),
        ("wgrad_sk", "tree", dict(bm=16, bn=16, sk_ctas=4), "needs the kernel's flags_per_cta"),
        ("wgrad_sk", "linear", dict(bm=0, bn=16, sk_ctas=4, flags_per_cta=1), "needs the tile BM x BN"),
        ("wgrad_sk", "tree", dict(bm=16, bn=0, sk_ctas=4, flags_per_cta=1), "needs the tile BM x BN"),
        ("wgrad_sk", "linear", dict(bm=16, bn=16, sk_ctas=4, flags_per_cta=0), "flags_per_cta > 0"),
        ("wgrad", "linear", {}, "unknown split-K epilogue 'linear'"),
        ("wgrad_sk", "two_stage", {}, "unknown stream-K reduction 'two_stage'"),
        ("stage2", "reduce", {}, "family 'stage2' has no workspace layout"),
    ],
)
def test_layout_refusals(family, variant, kw, match):
    with pytest.raises(AbiError, match=match):
        workspace_layout(family, variant, dw_numel=DW, **kw)


# ---------------------------------------------------------------------------------------------
# launch_geometry
# ---------------------------------------------------------------------------------------------
# K = 100 over 2 groups, Ng = 3*3*24 = 216, Kg = 4 * 20 * 20 = 1600
PROB = ConvProblem(n=4, g=2, c=24, k=100, hi=20, wi=20, y=3, x=3, pad_lo=(0, 1, 1), pad_hi=(0, 1, 1))


def test_problem_tiling_for_geometry():
    t = PROB.tiling(64, 64, 32)
    assert (t.m_tiles, t.n_tiles, t.num_tiles, t.iters_per_tile) == (4, 4, 16, 50)


@pytest.mark.parametrize("ks", list(range(1, 51)))
def test_splitk_drops_empty_splits(ks):
    geo = launch_geometry(PROB, "wgrad", "two_stage", bm=64, bn=64, bk=32, ks_count=ks)
    ipt, tiles = 50, 16
    # Every split the kernel runs covers [s * ks_iters, min((s + 1) * ks_iters, ipt)).
    splits = [(s * geo.ks_iters, min((s + 1) * geo.ks_iters, ipt)) for s in range(geo.ks_count)]
    assert all(lo < hi for lo, hi in splits)  # no empty split
    assert splits[0][0] == 0 and splits[-1][1] == ipt
    assert all(a[1] == b[0] for a, b in zip(splits, splits[1:]))
    # as balanced as the request allows: the fewest iterations per split that fits ks splits
    assert geo.ks_iters == min(i for i in range(1, ipt + 1) if i * ks >= ipt)
    assert geo.ks_count <= ks
    assert geo.grid == tiles * geo.ks_count
    assert geo.scalars["ks_count"] == geo.ks_count and geo.scalars["ks_iters"] == geo.ks_iters
    # the workspace is sized for the splits actually launched
    assert geo.workspace == workspace_layout("wgrad", "two_stage", dw_numel=PROB.dw_numel, ks_count=geo.ks_count)
    assert geo.workspace.replicas == geo.ks_count
    assert geo.scalars["ws_bytes"] == geo.workspace.region("replicas").nbytes
    assert geo.stage2_grid == math.ceil(PROB.dw_numel / STAGE2_BLOCK)
    assert geo.stage2_scalars == {"numel": PROB.dw_numel, "replicas": geo.ks_count, "reset": 0}
    assert geo.partition is None


def test_splitk_drop_example():
    # 50 iterations asked in 40 splits: 2 per split, so only 25 splits are non-empty.
    geo = launch_geometry(PROB, "wgrad", "atomic", bm=64, bn=64, bk=32, ks_count=40)
    assert (geo.ks_iters, geo.ks_count, geo.grid) == (2, 25, 16 * 25)
    assert geo.workspace.zero_dw and not geo.workspace.uses_workspace and geo.stage2_grid == 0
    assert "ws_bytes" not in geo.scalars  # reserved slot in the atomic epilogue


@pytest.mark.parametrize("ks", [0, -1, 51, 1000])
def test_splitk_ks_count_range(ks):
    with pytest.raises(ProblemError, match=rf"ks_count must be in \[1, 50\] \(the iterations per tile\), got {ks}"):
        launch_geometry(PROB, "wgrad", "two_stage", bm=64, bn=64, bk=32, ks_count=ks)


def test_splitk_direct_needs_one_split():
    geo = launch_geometry(PROB, "wgrad", "direct", bm=64, bn=64, bk=32)
    assert (geo.ks_count, geo.ks_iters, geo.grid) == (1, 50, 16)
    with pytest.raises(AbiError, match="the direct epilogue stores dW once"):
        launch_geometry(PROB, "wgrad", "direct", bm=64, bn=64, bk=32, ks_count=2)


@pytest.mark.parametrize("variant", ["linear", "tree", "atomic", "workspace"])
@pytest.mark.parametrize("mode", ["dp_sk", "persistent"])
@pytest.mark.parametrize("pool", [1, 3, 7, 16, 304, 801, 1216])
def test_streamk_geometry(variant, mode, pool):
    geo = launch_geometry(PROB, "wgrad_sk", variant, bm=64, bn=64, bk=32, mode=mode, pool=pool, flags_per_cta=1)
    part = partition(16, 50, pool)
    assert geo.partition == part
    assert geo.grid == part.grid(mode)
    assert (geo.ks_count, geo.ks_iters) == (1, 50)
    assert geo.mode == mode and (geo.family, geo.variant) == ("wgrad_sk", variant)
    for k, v in part.kernarg_values().items():
        assert geo.scalars[k] == v
    assert geo.scalars["sk_iters_per_cta"] >= 1
    expected_ws = workspace_layout(
        "wgrad_sk", variant, dw_numel=PROB.dw_numel, bm=64, bn=64, sk_ctas=part.sk_ctas, flags_per_cta=1
    )
    assert geo.workspace == expected_ws
    if variant in ("linear", "tree"):
        assert geo.workspace.region("flags").nbytes == flags_bytes(part.sk_ctas, 1)
    assert ("ws_bytes" in geo.scalars) == (variant == "workspace")
    if variant == "workspace":
        assert geo.scalars["ws_bytes"] == geo.workspace.region("replicas").nbytes
        assert geo.stage2_scalars == {"numel": PROB.dw_numel, "replicas": 1, "reset": 1}
    else:
        assert geo.stage2_grid == 0


@pytest.mark.parametrize("ks", [1, 3, 50])
def test_splitk_workspace_geometry(ks):
    # any ks_count: one replica in the zeroed arena, a one-replica Stage-2 that resets it
    geo = launch_geometry(PROB, "wgrad", "workspace", bm=64, bn=64, bk=32, ks_count=ks)
    assert geo.ks_count == ks and geo.grid == 16 * ks and geo.partition is None
    assert geo.workspace == workspace_layout("wgrad", "workspace", dw_numel=PROB.dw_numel, ks_count=ks)
    assert geo.scalars["ws_bytes"] == geo.workspace.region("replicas").nbytes == 4 * PROB.dw_numel
    assert geo.stage2_grid == math.ceil(PROB.dw_numel / STAGE2_BLOCK)
    assert geo.stage2_scalars == {"numel": PROB.dw_numel, "replicas": 1, "reset": 1}
    assert not geo.workspace.zero_dw and geo.workspace.arena_bytes("scratch") == 0


def test_grouped_geometry_takes_the_wgrad_layouts_of_the_real_dw():
    from skwgrad.abi.conv import parse_problem

    p = parse_problem("n=4,c=64,k=64,g=8,h=14,w=14,y=3,x=3,padding=1")  # 8 channels per group
    for variant, ks in (("two_stage", 4), ("workspace", 4), ("workspace", 13), ("atomic", 4), ("direct", 1)):
        geo = launch_geometry(p, "grouped", variant, bm=64, bn=64, bk=64, ks_count=ks, groups_per_tile=8)
        want = workspace_layout("wgrad", variant, dw_numel=p.dw_numel, ks_count=geo.ks_count)
        assert geo.workspace.regions == want.regions and geo.workspace.family == "grouped"
        assert (geo.workspace.replicas, geo.workspace.stage2_reset) == (want.replicas, want.stage2_reset)
        assert ("ws_bytes" in geo.scalars) == (variant in ("two_stage", "workspace"))
        if variant == "workspace":
            assert geo.scalars["ws_bytes"] == 4 * p.dw_numel and geo.stage2_scalars["replicas"] == 1
            assert geo.workspace.region("replicas").arena == "zeroed"


@pytest.mark.parametrize("family, variant", [("wgrad", "two_stage"), ("wgrad", "direct"), ("wgrad", "workspace"),
                                             ("wgrad_sk", "linear"), ("wgrad_sk", "workspace")])  # fmt: skip
def test_scalars_are_every_scalar_kernarg(family, variant):
    kw = dict(mode="dp_sk", pool=7, flags_per_cta=1) if family == "wgrad_sk" else {}
    geo = launch_geometry(PROB, family, variant, bm=64, bn=64, bk=32, **kw)
    decl = declaration(family, variant)
    scalar_names = {a.name for a in decl.args if a.kind == "i32" and not a.reserved}
    assert set(geo.scalars) == scalar_names
    # the geometry plus pointers packs: nothing missing, nothing extra
    vals = dict(geo.scalars)
    vals.update({a.name: 0x1000 * (i + 1) for i, a in enumerate(decl.args) if a.kind == "ptr" and not a.reserved})
    decl.pack(vals)


def test_streamk_pins_ks_count():
    with pytest.raises(AbiError, match="stream-K kernels pin ks_count = 1, got 2"):
        launch_geometry(PROB, "wgrad_sk", "atomic", bm=64, bn=64, bk=32, mode="dp_sk", pool=8, ks_count=2)


def test_streamk_bad_mode_and_pool():
    with pytest.raises(ProblemError, match="stream-K mode 'both' is not one of"):
        launch_geometry(PROB, "wgrad_sk", "atomic", bm=64, bn=64, bk=32, mode="both", pool=8)
    with pytest.raises(ProblemError, match="stream-K pool must be > 0, got 0"):
        launch_geometry(PROB, "wgrad_sk", "atomic", bm=64, bn=64, bk=32, mode="dp_sk", pool=0)


def test_streamk_linear_needs_flags_per_cta():
    with pytest.raises(AbiError, match="flags_per_cta"):
        launch_geometry(PROB, "wgrad_sk", "linear", bm=64, bn=64, bk=32, mode="dp_sk", pool=8)


def test_all_dp_streamk_has_no_flag_table():
    # 16 tiles over a pool of 8: two full waves, nothing to spread.
    geo = launch_geometry(PROB, "wgrad_sk", "linear", bm=64, bn=64, bk=32, mode="persistent", pool=8, flags_per_cta=1)
    assert geo.partition.sk_ctas == 0 and geo.grid == 8
    assert geo.scalars["sk_iters_per_cta"] == 1 and geo.scalars["sk_ctas"] == 0
    assert geo.workspace.arena_bytes("zeroed") == geo.workspace.arena_bytes("scratch") == 0


@pytest.mark.parametrize(
    "family, variant, match",
    [
        ("stage2", "reduce", "family 'stage2' is not a wgrad kernel"),
        ("wgrad", "linear", "wgrad epilogue 'linear' is not one of"),
        ("conv", "direct", "kernel family 'conv' is not one of"),
    ],
)
def test_geometry_refuses_non_wgrad(family, variant, match):
    with pytest.raises(AbiError, match=match):
        launch_geometry(PROB, family, variant, bm=64, bn=64, bk=32)


def test_geometry_refuses_i32_counter_overflow():
    # dW 2**20 elements in 1x1x1 tiles, 2**12 iterations each: 2**32 iterations in all.
    p = ConvProblem(n=2**12, c=2**10, k=2**10, hi=1, wi=1, y=1, x=1)
    with pytest.raises(ProblemError, match="overflow the kernels' i32 counters"):
        launch_geometry(p, "wgrad", "direct", bm=1, bn=1, bk=1)


def test_geometry_refuses_replica_overflow():
    # dW = 2**20 elements; 2**15 / 16 = 2**11 iterations per tile.
    p = ConvProblem(n=2**15, c=2**10, k=2**10, hi=1, wi=1, y=1, x=1)
    with pytest.raises(ProblemError, match=r"2048 f32 replicas of dW \(1048576 elements\) overflow 32-bit offsets"):
        launch_geometry(p, "wgrad", "two_stage", bm=128, bn=128, bk=16, ks_count=2048)
    # 512 replicas fit in elements but not in the i32 ws_bytes kernarg (2**31 bytes)
    with pytest.raises(ProblemError, match="workspace of 2147483648 bytes does not fit the i32 ws_bytes kernarg"):
        launch_geometry(p, "wgrad", "two_stage", bm=128, bn=128, bk=16, ks_count=512)
    geo = launch_geometry(p, "wgrad", "two_stage", bm=128, bn=128, bk=16, ks_count=256)
    assert geo.ks_count == 256 and geo.scalars["ws_bytes"] == 4 * 256 * 2**20
    # 511 requested: 5 iterations per split, so 410 splits, and the workspace follows
    geo = launch_geometry(p, "wgrad", "two_stage", bm=128, bn=128, bk=16, ks_count=511)
    assert geo.ks_count == 410 and geo.scalars["ws_bytes"] == 4 * 410 * 2**20


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 8), g=st.integers(1, 4), c=st.integers(1, 70), k=st.integers(1, 70), hw=st.integers(1, 20),
    bm=st.sampled_from([16, 32, 64, 128]), bn=st.sampled_from([16, 32, 64, 128]), bk=st.sampled_from([16, 32, 64]),
    data=st.data(),
)  # fmt: skip
def test_geometry_random_problems(n, g, c, k, hw, bm, bn, bk, data):
    p = ConvProblem(n=n, g=g, c=c, k=k, hi=hw, wi=hw, y=1, x=1)
    t = p.tiling(bm, bn, bk)
    ks = data.draw(st.integers(1, t.iters_per_tile))
    geo = launch_geometry(p, "wgrad", "two_stage", bm=bm, bn=bn, bk=bk, ks_count=ks)
    assert (geo.ks_count - 1) * geo.ks_iters < t.iters_per_tile <= geo.ks_count * geo.ks_iters
    assert geo.grid == t.num_tiles * geo.ks_count
    pool = data.draw(st.integers(1, 400))
    mode = data.draw(st.sampled_from(["dp_sk", "persistent"]))
    sk = launch_geometry(p, "wgrad_sk", "tree", bm=bm, bn=bn, bk=bk, mode=mode, pool=pool, flags_per_cta=2)
    assert sk.grid == partition(t.num_tiles, t.iters_per_tile, pool).grid(mode)
    assert sk.workspace.region("flags").nbytes == flags_bytes(sk.partition.sk_ctas, 2)
    assert sk.workspace.region("partials").nbytes >= 4 * bm * bn * sk.partition.sk_ctas
