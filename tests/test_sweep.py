"""The compile-all sweep (SPEC section 6): presets, filters, stream-K pruning, Stage-2, dry run.

Nothing here compiles. Expected sets are derived from the SPEC's wording, not from sweep.py's
tables: e.g. the pruning predicate below is written from section 6's sentence.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from click.testing import CliRunner

from skwgrad.abi.kernargs import HELPER_FAMILIES
from skwgrad.abi.padding import pad_spec
from skwgrad.abi.launch import STAGE2_BLOCK
from skwgrad.abi.arch import get_arch
from skwgrad.abi.spec import KernelSpec
from skwgrad.aot.sweep import SweepError, counts, parse_tiles, sweep, Tile
from skwgrad.cli import main

ARCHES = ("gfx942", "gfx950", "sm_90")
W = {"fp16": 8, "bf16": 8, "fp32": 4}  # 16 bytes / element size
SK_PAIRS = {"linear", "tree", "atomic", "workspace"}


def specs(items, arch=None):
    return [it.spec for it in items if arch is None or it.arch == arch]


def allowed_streamk(s: KernelSpec) -> bool:
    """SPEC 6: stream-K at the widest width W, (W,W) and (W,1), every reduction but tree; and
    scalar dp_sk x {tree, workspace} on tiles with BN >= 128 (depthwise). (W,1) is (A=dy, B=x)
    order: vec_k = W, vec_c = 1."""
    w = W[s.dtype]
    if (s.vec_c, s.vec_k) in ((w, w), (1, w)) and s.variant != "tree":
        return True
    return (s.vec_c, s.vec_k) == (1, 1) and s.mode == "dp_sk" and s.variant in ("tree", "workspace") and s.bn >= 128 and not s.pointwise


# -- smoke ------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHES)
def test_smoke_has_every_family_mode_and_reduction_per_arch(arch):
    items = sweep("smoke", arches=[arch])
    assert {it.arch for it in items} == {arch}
    ss = specs(items)
    assert 13 <= len(ss) <= 25, len(ss)  # small: CI compiles it
    # the row-walk depthwise kernel on every arch (plain Triton), its atomic epilogue
    assert {(s.variant, s.dw_dtype) for s in ss if s.family == "dwconv_walk"} == {("atomic", "fp32")}
    # the TMA im2col family where the arch has it (sm_90), with a workspace and an atomic epilogue
    tma = {(s.variant, s.dw_dtype) for s in ss if s.family == "wgrad_tma"}
    assert tma == ({("workspace", "bf16"), ("atomic", "fp32")} if get_arch(arch).tma_im2col else set())
    wg = {s.variant for s in ss if s.family == "wgrad"}
    assert wg == {"direct", "atomic", "two_stage"}
    sk = {(s.mode, s.variant) for s in ss if s.family == "wgrad_sk"}
    assert sk == set(itertools.product(("dp_sk", "persistent"), SK_PAIRS))
    # Stage-2 for every dW dtype a two_stage/workspace kernel writes, and no other.
    need = {s.dw_dtype for s in ss if s.variant in ("two_stage", "workspace")}
    st2 = [s for s in ss if s.family == "stage2"]
    assert {s.dw_dtype for s in st2} == need == {"bf16", "fp32"}
    for s in st2:
        assert s == KernelSpec("stage2", "reduce", s.dw_dtype, s.dw_dtype, block=STAGE2_BLOCK, num_warps=4)
    for s in ss:
        if s.variant == "atomic":
            assert s.dw_dtype == "fp32"
    # also a 3-D, a pointwise and a non-W-aligned kernel, so those code paths are compiled in CI
    assert any(s.spatial_dims == 3 for s in ss)
    assert any(s.pointwise for s in ss)
    assert any(s.family not in HELPER_FAMILIES and (s.vec_c, s.vec_k) != (8, 8) for s in ss)


def test_smoke_several_arches_and_dtypes():
    items = sweep("smoke", arches=["gfx942", "gfx950"], dtypes=["fp16", "fp32"])
    c = Counter(it.arch for it in items)
    assert set(c) == {"gfx942", "gfx950"} and c["gfx942"] == c["gfx950"]
    for s in specs(items):
        if s.dtype == "fp32" and s.family not in HELPER_FAMILIES:
            assert s.precision == "ieee"
        assert s.dtype in ("fp16", "fp32")
    assert sweep("smoke") == sorted(sweep("smoke"), key=lambda it: (ARCHES.index(it.arch), it.spec))
    assert {it.arch for it in sweep("smoke")} == set(ARCHES)  # no --arch: every target


def test_smoke_respects_streamk_filters():
    off = specs(sweep("smoke", arches=["gfx942"], streamk="off"))
    assert not any(s.family == "wgrad_sk" for s in off)
    assert {s.variant for s in off if s.family == "wgrad"} == {"direct", "atomic", "two_stage"}
    pers = specs(sweep("smoke", arches=["gfx942"], streamk="persistent", reductions="linear,tree"))
    assert {(s.mode, s.variant) for s in pers if s.family == "wgrad_sk"} == {("persistent", "linear"), ("persistent", "tree")}
    # --tiles replaces the smoke tile
    t = specs(sweep("smoke", arches=["gfx942"], tiles="64x64x64w4s3"))
    assert {(s.bm, s.bn, s.bk, s.num_warps, s.num_stages) for s in t if s.family not in HELPER_FAMILIES} == {(64, 64, 64, 4, 3)}


# -- default / full: pruning, widths, precisions ----------------------------------------------
@pytest.fixture(scope="module")
def full_gfx942():
    return sweep("full", arches=["gfx942"], dtypes=["bf16", "fp32"])


@pytest.fixture(scope="module")
def default_all():
    return sweep("default")


@pytest.fixture(scope="module")
def broad_all():
    """Today's default before the pruning by measured use: kept as ``broad``."""
    return sweep("broad")


def test_streamk_pruning_rule_full(full_gfx942):
    ss = specs(full_gfx942)
    sk = [s for s in ss if s.family == "wgrad_sk"]
    assert sk and all(allowed_streamk(s) for s in sk)
    # ... and everything the rule allows is there: for each split-K base config at (W, W) there
    # is a stream-K kernel per mode and non-tree reduction (atomic: fp32 dW).
    have = {s for s in sk}
    for s in ss:
        if s.family == "wgrad" and s.variant == "direct" and (s.vec_c, s.vec_k) == (W[s.dtype],) * 2:
            for mode, red, (vc, vk) in itertools.product(("dp_sk", "persistent"), ("linear", "atomic", "workspace"), ((W[s.dtype],) * 2, (1, W[s.dtype]))):
                if red == "atomic" and s.dw_dtype != "fp32":
                    continue
                want = KernelSpec(**{**s.to_dict(), "family": "wgrad_sk", "variant": red, "mode": mode, "vec_c": vc, "vec_k": vk})
                assert want in have, want.label
            if s.bn >= 128 and not s.pointwise:
                for red in ("tree", "workspace"):
                    want = KernelSpec(**{**s.to_dict(), "family": "wgrad_sk", "variant": red, "mode": "dp_sk", "vec_c": 1, "vec_k": 1})
                    assert want in have, want.label
    # tree only ever scalar dp_sk on BN >= 128; persistent never has tree in the pruned presets
    assert all(s.mode == "dp_sk" and s.bn >= 128 and (s.vec_c, s.vec_k) == (1, 1) for s in sk if s.variant == "tree")
    assert any(s.variant == "tree" for s in sk)


def test_splitk_at_every_width_in_full(full_gfx942):
    by_dtype = {}
    for s in specs(full_gfx942):
        if s.family == "wgrad":
            by_dtype.setdefault(s.dtype, set()).add((s.vec_c, s.vec_k))
    for dt, pairs in by_dtype.items():
        widths = [1 << i for i in range(W[dt].bit_length())]
        assert pairs == set(itertools.product(widths, widths)), dt


def test_full_space_dimensions(full_gfx942):
    ss = [s for s in specs(full_gfx942) if s.family == "wgrad"]
    assert {s.bm for s in ss} == {32, 64, 128, 256} == {s.bn for s in ss}
    assert {s.bk for s in ss} == {32, 64, 128}
    assert {s.num_warps for s in ss} == {4, 8}
    assert {s.num_stages for s in ss} >= {2, 3}
    assert {s.spatial_dims for s in ss} == {2, 3} and {s.pointwise for s in ss} == {False, True}
    assert {(s.dtype, s.dw_dtype) for s in ss} == {("bf16", "bf16"), ("bf16", "fp32"), ("fp32", "fp32")}
    assert {s.precision for s in ss if s.dtype == "fp32"} == {"ieee", "tf32"}
    assert all(s.dw_dtype == "fp32" for s in specs(full_gfx942) if s.variant == "atomic")
    assert len(set(full_gfx942)) == len(full_gfx942)


def test_gfx950_never_gets_tf32():
    for preset in ("smoke", "default"):
        ss = specs(sweep(preset, arches=["gfx950"], dtypes=["fp32"]))
        assert ss and not any(s.precision == "tf32" for s in ss)
    ss = specs(sweep("full", arches=["gfx950"], dtypes=["fp32"], tiles="64x64x32"))
    assert ss and {s.precision for s in ss if s.family not in HELPER_FAMILIES} == {"ieee"}
    for arch in ("gfx942", "sm_90"):
        assert "tf32" in {s.precision for s in specs(sweep("default", arches=[arch], dtypes=["fp32"]))}


def test_broad_is_pruned_and_covers_every_dtype(broad_all):
    ss = specs(broad_all)
    assert all(allowed_streamk(s) for s in ss if s.family == "wgrad_sk")
    for arch in ARCHES:
        a = specs(broad_all, arch)
        assert {s.dtype for s in a if s.family not in HELPER_FAMILIES} == {"fp16", "bf16", "fp32"}
        assert {(s.mode, s.variant) for s in a if s.family == "wgrad_sk"} == set(itertools.product(("dp_sk", "persistent"), ("linear", "atomic", "workspace"))) | {("dp_sk", "tree")}
        assert {s.dw_dtype for s in a if s.family == "stage2"} == {"fp16", "bf16", "fp32"}
        # every channel count is served by split-K: vec 1 in both operands exists for every dtype
        for dt in ("fp16", "bf16", "fp32"):
            assert any(s.family == "wgrad" and s.dtype == dt and (s.vec_c, s.vec_k) == (1, 1) for s in a)
    # counts are per arch/dtype/family
    c = counts(broad_all)
    assert sum(c.values()) == len(broad_all)
    dense = ("wgrad", "wgrad_sk", "stage2")  # the old default's families, counted as before
    # (+240 per arch: the split-K workspace twins of the 16-bit two-stage kernels of dW in the input dtype)
    assert Counter(it.arch for it in broad_all if it.spec.family in dense) == {"gfx942": 3395, "gfx950": 2843, "sm_90": 3395}


def default_rule(s: KernelSpec, arch: str) -> bool:
    """The pruned default, written from benchmarks/COMPILE.md ("The pruned default")."""
    w = W[s.dtype]
    half = s.dtype != "fp32"
    tiles = {(64, 128, 64 if half else 32, 4), (128, 128, 64 if half else 32, 8)}
    tile = (s.bm, s.bn, s.bk, s.num_warps)
    if s.family == "stage2":
        return True
    if s.family == "pad":  # the channel-padding copy of each element dtype the dense kernels move
        return s == pad_spec(s.dtype)
    if s.family == "dwconv":  # 2-D at {1, W} per filter class, 3-D at W for 3x3x3; direct + one split epilogue
        split = "workspace" if s.dw_dtype == s.dtype != "fp32" else "atomic"
        if s.mode.startswith("win"):  # the window kernels: widths 3/5/7, 2-D, stride 1 and 2 along W, at W,
            # the split epilogue only, for every (dtype, dW dtype) pair
            if s.mode.endswith("d2"):  # dilation 2: the 3-wide filter, 64 strips
                want = ({3: "win7r3d2"}.get(s.bn), 64)
            elif s.mode.endswith("s2"):  # stride 2: strips of 7, 32 per step on wave32, 64 on wave64
                want = ({3: "win7r3s2", 5: "win7s2", 7: "win7s2"}.get(s.bn), 32 if get_arch(arch).wave_size == 32 else 64)
            elif s.mode == "win5r3":  # the 3-wide filter's strips of 5 (H200 run W6: widths 7 does not divide)
                want = ("win5r3", 64)
            else:  # stride 1 (H200 run D4): 5x5 every tap row in a CTA at 16 strips, 7x7 at 32
                want = {3: ("win7r3", 64), 5: ("win7r5", 16), 7: ("win7", 32)}.get(s.bn, (None, 0))
            # 16 channels per CTA on wave32 (32 on wave64: one 16-byte vector per thread per strip),
            # but 32 for the wave32 7x7 stride-1 kernel (H200 runs U3 and U4: 8 channels a thread)
            wave = get_arch(arch).wave_size
            channels = 32 if wave == 64 or s.mode == "win7" else 16
            if wave == 32 and (s.mode, s.bm, s.bk) in (("win7r3", 32, 32), ("win7", 16, 64), ("win7s2", 32, 16)):  # second blocks (B2, B4, B6)
                return s.vec_c == w and s.variant == split and s.spatial_dims == 2
            return (s.vec_c == w and (s.mode, s.bk) == want and s.variant == split and s.spatial_dims == 2
                    and s.bm == channels)  # fmt: skip
        shape_ok = (s.spatial_dims == 2 and s.vec_c in (1, w)) or (s.spatial_dims == 3 and s.vec_c == w and s.bn == 32)
        measured = s.spatial_dims == 2 and s.vec_c == w  # the H200 bench's configuration (taps layout on 3x3/5x5)
        mode_ok = s.mode == ({16: "taps", 32: "taps", 64: ""}[s.bn] if measured else "")
        return shape_ok and s.variant in ("direct", split) and mode_ok
    if s.family == "dwconv_walk":  # 16-bit inputs, the split epilogue its dW takes; 16 channels, a wave of strips of 2
        split = "workspace" if s.dw_dtype == s.dtype else "atomic"
        return (s.dtype != "fp32" and s.variant == split and (s.bm, s.bn, s.bk, s.block, s.vec_c, s.num_warps)
                == (16, 3, get_arch(arch).wave_size, 2, 4, 4))  # fmt: skip
    if s.family == "wgrad_tma":  # sm_90, 16-bit inputs: the R2/R3-winning configurations, direct + one split epilogue
        from skwgrad.aot.sweep import TMA_CONFIGS, TMA_PERSISTENT

        split = "workspace" if s.dw_dtype == s.dtype else "atomic"
        configs = {"": TMA_CONFIGS, "persistent": TMA_PERSISTENT, "streamk": ()}[s.mode]  # stream-K: broad/full only
        return (get_arch(arch).tma_im2col and s.dtype != "fp32" and s.variant in (("direct", split) if s.mode != "streamk" else (split,))
                and (s.bm, s.bn, s.bk, s.block, s.num_warps, s.num_stages) in configs)  # fmt: skip
    if s.family == "dwconv_tma":  # sm_90, 16-bit inputs: the measured 32-channel x 16-column configuration, one epilogue per dW
        from skwgrad.aot.sweep import DWCONV_TMA_CONFIGS

        return (get_arch(arch).tma_im2col and s.dtype != "fp32" and s.variant == ("workspace" if s.dw_dtype == s.dtype else "atomic")
                and (s.bn, s.bm, s.bk, s.num_warps, s.num_stages) in DWCONV_TMA_CONFIGS)  # fmt: skip
    if s.family == "grouped":  # 2-D, width W, GB*K = BM for K = 8 at BM 32 and 64 (BN 64); 16-bit: GB 4 and 2 at 64x64, 16 and 8 at 64x128
        tile = (s.block, s.bm, s.bn)
        tiles = ((4, 32, 64), (8, 64, 64)) + (((4, 64, 64), (16, 64, 128), (8, 64, 128), (2, 64, 64)) if s.dtype != "fp32" else ())
        variants = ("direct", "two_stage") + (("workspace",) if s.dw_dtype == s.dtype != "fp32" else ())
        return s.spatial_dims == 2 and s.vec_c == s.vec_k == w and tile in tiles and s.variant in variants
    if s.spatial_dims == 3 and s.pointwise:
        return False
    # which (input, dW, precision) sets are full and which minimal
    tf32_arch = arch != "gfx950"
    full = {("bf16", "bf16", ""), ("bf16", "fp32", ""), ("fp16", "fp32", "")}
    full |= {("fp32", "fp32", "tf32")} if tf32_arch else {("fp32", "fp32", "ieee")}
    minimal = {("fp16", "fp16", "")} | ({("fp32", "fp32", "ieee")} if tf32_arch else set())
    key = (s.dtype, s.dw_dtype, s.precision)
    # 3-D: two-stage split-K and workspace stream-K only; beside every two-stage split-K kernel of a
    # 16-bit dW in the input dtype, its workspace twin
    splitk = ("direct", "two_stage") if s.spatial_dims == 2 else ("two_stage",)
    if s.dw_dtype == s.dtype != "fp32":
        splitk += ("workspace",)
    if key in minimal:
        if s.family == "wgrad":  # the larger tile, (1,1) and (W,W)
            return tile == max(tiles) and s.variant in splitk and (s.vec_c, s.vec_k) in ({(w, w)} if s.pointwise else {(1, 1), (w, w)})
        # stream-K: workspace at both tiles
        return tile in tiles and (s.mode, s.variant, s.vec_c, s.vec_k) == ("dp_sk", "workspace", w, w)
    if key not in full:
        return False
    small, wide = (64, 64, 64 if half else 32, 4), (128, 256, 64 if half else 32, 8)
    # the extra tiles: (W, W) only, 2-D and pointwise (wide: 2-D only)
    wide_fits = get_arch(arch).lds_bytes_per_cu >= 128 * 256 * 4  # the workspace kernel's fp32 tile: not gfx942
    extra = s.spatial_dims == 2 and (s.vec_c, s.vec_k) == (w, w) and (tile == small or (tile == wide and not s.pointwise and wide_fits))
    if s.family == "wgrad":
        if s.variant not in splitk:
            return False
        pairs = {(w, w), (w // 2, w // 2)} | (set() if s.pointwise else {(1, 1), (1, w)} | ({(w, 1)} if s.spatial_dims == 2 else set()))
        if s.spatial_dims == 3:
            pairs -= {(w // 2, w // 2)}
        if extra:
            return True
        if arch == "sm_90" and half and s.spatial_dims == 2 and (s.vec_c, s.vec_k) == (1, 1):
            # scalar loads on sm_90: 8-warp 64x64 and 64x128 tiles instead of the 4-warp 64x128 (run G6)
            return tile in {(64, 64, 64, 8), (64, 128, 64, 8), (128, 128, 64, 8)}
        if tile == small:  # the first-layer kernel
            return (s.vec_c, s.vec_k) == (1, w) and s.spatial_dims == 2 and not s.pointwise
        return tile in tiles and (s.vec_c, s.vec_k) in pairs
    if tile not in tiles and not extra:
        return False
    # stream-K: dp_sk only (persistent measured within 0.13% of it), at (W, W) only; 3-D workspace only
    reds = ("linear", "workspace") if s.spatial_dims == 2 else ("workspace",)
    return (s.vec_c, s.vec_k) == (w, w) and s.variant in reds and s.mode == "dp_sk"


def test_default_is_the_pruned_rule_and_serves_every_problem(default_all, broad_all):
    for arch in ARCHES:
        a = specs(default_all, arch)
        assert a and all(default_rule(s, arch) for s in a), [s.label for s in a if not default_rule(s, arch)][:5]
        assert {s.dtype for s in a if s.family not in HELPER_FAMILIES} == {"fp16", "bf16", "fp32"}
        assert {(s.mode, s.variant) for s in a if s.family == "wgrad_sk"} == {("dp_sk", "linear"), ("dp_sk", "workspace")}
        assert {s.dw_dtype for s in a if s.family == "stage2"} == {"fp16", "bf16", "fp32"}
        # every (dtype, dW dtype, precision, dims) has the scalar split-K kernel: any channel count runs
        precs = {"fp16": [""], "bf16": [""], "fp32": ["ieee"] + (["tf32"] if arch != "gfx950" else [])}
        for dt in ("fp16", "bf16", "fp32"):
            for dw in {dt, "fp32"}:
                for prec in precs[dt]:
                    for dims in (2, 3):
                        assert any(s.family == "wgrad" and (s.dtype, s.dw_dtype, s.precision, s.spatial_dims, s.vec_c, s.vec_k, s.pointwise)
                                   == (dt, dw, prec, dims, 1, 1, False) for s in a), (arch, dt, dw, prec, dims)  # fmt: skip
        # and stream-K for every set (a minimal set has dp_sk workspace)
        assert {(s.dtype, s.dw_dtype, s.precision) for s in a if s.family == "wgrad_sk"} == {
            (s.dtype, s.dw_dtype, s.precision) for s in a if s.family == "wgrad"}
    dense = ("wgrad", "wgrad_sk", "stage2")
    # (+30 sm_90, +28 gfx942, +29 gfx950: the split-K workspace twins; the grouped ones are counted below)
    assert Counter(it.arch for it in default_all if it.spec.family in dense) == {"gfx942": 275, "gfx950": 278, "sm_90": 299}
    assert Counter(it.arch for it in default_all if it.spec.family == "grouped" and it.spec.variant == "workspace") == {a: 12 for a in ARCHES}
    # + window kernels: 5 dW sets x (3 widths x stride 1, 2, + 3-wide dilation 2, + 3-wide strips of 5),
    # and on wave32 a second channel block for the 3-wide (strips of 7) and 7-wide stride-1 kernels and
    # the 5- and 7-wide stride-2 ones
    wide = {a: 5 * 4 if get_arch(a).wave_size == 32 else 0 for a in ARCHES}
    assert all(Counter(it.spec.family for it in default_all if it.arch == a)["dwconv"] == 70 + 5 * 8 + wide[a] for a in ARCHES)
    assert sum(it.spec.family in dense for it in default_all) < sum(it.spec.family in dense for it in broad_all) / 8
    # the default's tiles are tiles of broad or the fp32 BK-32 variants of them
    assert {(s.bm, s.bn) for s in specs(default_all) if s.family in dense} <= {(s.bm, s.bn) for s in specs(broad_all)}


def _twins(ss):
    """(workspace kernels, the workspace twins the rule asks for) of the split-K families: one per
    two-stage kernel whose dW is the 16-bit input dtype, equal to it but for the variant."""
    have = {s for s in ss if s.family in ("wgrad", "grouped") and s.variant == "workspace"}
    want = {KernelSpec(**{**s.to_dict(), "variant": "workspace"}) for s in ss
            if s.family in ("wgrad", "grouped") and s.variant == "two_stage" and s.dw_dtype == s.dtype != "fp32"}
    return have, want


def test_splitk_workspace_twins_every_16bit_two_stage_kernel(default_all, broad_all, full_gfx942):
    for items in (default_all, broad_all, full_gfx942):
        have, want = _twins(specs(items))
        assert have == want and have
        assert {s.dtype for s in have} == ({"fp16", "bf16"} if items is not full_gfx942 else {"bf16"})
        assert {s.spatial_dims for s in have if s.family == "wgrad"} == {2, 3}  # 2-D and 3-D, as the two-stage ones
    # fp32 dW has atomic instead: no workspace split-K kernel writes fp32
    assert not any(s.variant == "workspace" and s.family in ("wgrad", "grouped") and s.dw_dtype == "fp32" for s in specs(default_all))
    # every workspace kernel has the Stage-2 reduce of its dW dtype in the same sweep
    for arch in ARCHES:
        a = specs(default_all, arch)
        assert {s.dw_dtype for s in a if s.variant == "workspace"} <= {s.dw_dtype for s in a if s.family == "stage2"}


def test_streamk_off_keeps_splitk_keys_and_labels():
    from skwgrad.cache.store import Cache

    both = sweep("default", arches=["gfx942"], dtypes=["bf16"])
    off = sweep("default", arches=["gfx942"], dtypes=["bf16"], streamk="off")
    assert not any(it.spec.family == "wgrad_sk" for it in off)
    split_both = [it for it in both if it.spec.family != "wgrad_sk"]
    assert off == split_both
    assert [Cache.key_for(it.spec, it.arch) for it in off] == [Cache.key_for(it.spec, it.arch) for it in split_both]
    assert [it.spec.label for it in off] == [it.spec.label for it in split_both]


def test_streamk_mode_and_reduction_filters():
    dp = specs(sweep("default", arches=["sm_90"], dtypes=["fp16"], streamk="dp_sk", reductions="workspace"))
    sk = [s for s in dp if s.family == "wgrad_sk"]
    assert sk and {(s.mode, s.variant) for s in sk} == {("dp_sk", "workspace")}
    # tree with persistent is pruned outside smoke: nothing stream-K is left
    pt = specs(sweep("default", arches=["sm_90"], dtypes=["fp16"], streamk="persistent", reductions=["tree"]))
    assert not any(s.family == "wgrad_sk" for s in pt)


def test_tiles_filter_replaces_preset_tiles():
    items = sweep("default", arches=["gfx942"], dtypes=["bf16"], tiles="64x128x32,32x32x32w2s1")
    cfg = {(s.bm, s.bn, s.bk, s.num_warps, s.num_stages) for s in specs(items) if s.family not in HELPER_FAMILIES}
    assert cfg == {(64, 128, 32, 4, 2), (32, 32, 32, 2, 1)}
    assert parse_tiles("128x128x64w8s3") == (Tile(128, 128, 64, 8, 3),)
    assert parse_tiles("") is None


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"preset": "huge"}, ["preset", "smoke, default, broad, full"]),
        ({"arches": ["gfx90a"]}, ["gfx90a", "gfx942, gfx950, sm_90"]),
        ({"dtypes": ["fp8"]}, ["fp8", "fp16, bf16, fp32"]),
        ({"reductions": "linear,fancy"}, ["linear, tree, atomic, workspace"]),
        ({"streamk": "sometimes"}, ["off, dp_sk, persistent, all"]),
        ({"tiles": "128x128"}, ["BMxBNxBK"]),
        ({"tiles": "96x128x64"}, ["power of two"]),
    ],
)
def test_bad_input_says_what_to_use(kwargs, words):
    kw = {"preset": "default", **kwargs}
    with pytest.raises(SweepError) as e:
        sweep(kw.pop("preset"), **kw)
    for w in words:
        assert w in str(e.value)


# -- CLI dry run --------------------------------------------------------------------------------
def test_dry_run_prints_counts_and_touches_nothing(tmp_path):
    cache = tmp_path / "c"
    r = CliRunner().invoke(main, ["compile-all", "--preset", "smoke", "--arch", "gfx942", "--arch", "gfx950", "--dry-run", "--cache", str(cache)])
    assert r.exit_code == 0, r.output
    items = sweep("smoke", arches=["gfx942", "gfx950"])
    c = counts(items)
    assert f"total: {len(items)} kernels" in r.output
    for arch in ("gfx942", "gfx950"):
        line = next(ln for ln in r.output.splitlines() if ln.startswith(arch) and " bf16 " in ln)
        nums = [int(v) for v in line.split()[2:]]
        fams = ("wgrad", "wgrad_sk", "dwconv", "grouped", "wgrad_tma", "dwconv_tma", "dwconv_walk", "stage2", "pad")
        assert nums == [*(c[(arch, "bf16", f)] for f in fams), sum(nums[:9])]
        assert nums[4] == nums[5] == 0 and all(n for i, n in enumerate(nums) if i not in (4, 5))  # no TMA on AMD
    assert not cache.exists()


def test_cli_rejects_bad_values():
    r = CliRunner().invoke(main, ["compile-all", "--preset", "smoke", "--arch", "gfx90a", "--dry-run"])
    assert r.exit_code == 2 and "gfx942" in r.output
    r = CliRunner().invoke(main, ["compile-all", "--preset", "smoke", "--streamk-reductions", "fast", "--dry-run"])
    assert r.exit_code == 2 and "error:" in r.output and "linear, tree, atomic, workspace" in r.output
    r = CliRunner().invoke(main, ["compile-all", "--preset", "smoke", "--tiles", "1x2", "--dry-run"])
    assert r.exit_code == 2 and "BMxBNxBK" in r.output


def test_broad_splitk_widths_are_the_corners_and_the_diagonal(broad_all):
    by_dtype = {}
    for s in specs(broad_all):
        if s.family == "wgrad":
            by_dtype.setdefault(s.dtype, set()).add((s.vec_c, s.vec_k))
    for dt, pairs in by_dtype.items():
        w = W[dt]
        corners = set(itertools.product((1, w), (1, w)))
        diagonal = {(v, v) for v in (2, 4) if v < w}
        assert pairs == corners | diagonal, dt


def test_a_registered_family_enumerator_feeds_every_sweep(monkeypatch):
    """The hook a new kernel family uses (``register_family``): its specs join presets, filters
    see them, the Stage-2 rule covers them, and the corpus-driven sweep narrows them like any."""
    from skwgrad.aot import sweep as sw
    from skwgrad.abi.conv import ConvProblem

    seen = []

    def extra(ctx):
        seen.append((ctx.preset, ctx.arch, ctx.dtype, ctx.modes))
        if ctx.dtype != "bf16":
            return []
        t = ctx.tiles[0] if ctx.tiles else sw.Tile(16, 16, 128, 4, 2)
        return [sw._spec("wgrad", "two_stage", "bf16", "bf16", "", sw.Tile(t.bm, t.bn, t.bk, 4, 2), vc=1, vk=1)]

    monkeypatch.setitem(sw.FAMILY_ENUMERATORS, "extra", extra)
    items = sweep("default", arches=["sm_90"], dtypes=["bf16"], streamk="off")
    extra_specs = [it.spec for it in items if it.spec.family == "wgrad" and (it.spec.bm, it.spec.bn) == (16, 16)]
    assert len(extra_specs) == 1 and ("default", "sm_90", "bf16", ()) in seen
    p = ConvProblem(n=8, c=1, k=1, g=64, hi=56, wi=56, y=3, x=3, pad_lo=(0, 1, 1), pad_hi=(0, 1, 1))  # depthwise
    got = {it.spec for it in sw.sweep_for_problems([p], "default", arches=["sm_90"], streamk="off").items}
    assert extra_specs[0] in got  # scalar: admitted and as wide as the depthwise problem allows
    monkeypatch.delitem(sw.FAMILY_ENUMERATORS, "extra")
    assert not any(it.spec.family == "wgrad" and (it.spec.bm, it.spec.bn) == (16, 16)
                   for it in sweep("default", arches=["sm_90"], dtypes=["bf16"], streamk="off"))  # fmt: skip
