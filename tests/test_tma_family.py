"""The TMA im2col family (``wgrad_tma``, sm_90): its kernarg layout, spec rules, launch geometry,
compiled code, plans on the fake device, selection and cache checks, all on CPU.

The H200 runs (benchmarks/RESULTS.md) show the numbers; these tests keep the contract they rest
on: tensor maps 64-byte aligned in the absolute parameter space (0x210 on sm_90), the im2col
bounding box walking exactly Ho x Wo positions, every pointer change re-pointing the maps.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_launcher_fakes as F  # noqa: E402

from skwgrad.abi.conv import ConvProblem, parse_problem  # noqa: E402
from skwgrad.abi.kernargs import FAMILIES, PARAM_BASE, declaration  # noqa: E402
from skwgrad.abi.launch import TMA_CORNER_RANGE, tma_geometry, tma_groups_per_tile, tma_unsupported  # noqa: E402
from skwgrad.abi.spec import KernelSpec  # noqa: E402
from skwgrad.errors import AbiError, BackendError, ProblemError  # noqa: E402
from skwgrad.launcher.hostdata import from_bits  # noqa: E402
from skwgrad.launcher.plan import Kernel, Plan  # noqa: E402
from skwgrad.reference import relative_error  # noqa: E402


def tma_spec(variant="workspace", dtype="bf16", dw=None, bm=64, bn=64, bk=64, taps=1, warps=4, stages=3, mode="", regs=0, dims=2):
    dw = dw or ("fp32" if variant == "atomic" else dtype)
    return KernelSpec("wgrad_tma", variant, dtype, dw, spatial_dims=dims, vec_c=8, vec_k=8, bm=bm, bn=bn, bk=bk, num_warps=warps,
                      num_stages=stages, block=taps, mode=mode, max_regs=regs)  # fmt: skip


# -- kernarg layout ---------------------------------------------------------------------------
@pytest.mark.parametrize("dims,size", [(2, 544), (3, 560)])
@pytest.mark.parametrize("variant", ["direct", "atomic", "workspace"])
def test_tensor_maps_are_64_byte_aligned_in_the_absolute_parameter_space(variant, dims, size):
    decl = declaration("wgrad_tma", variant, dims)
    slots, got = decl.layout(2)
    maps = [s for s in slots if s.arg.kind == "tmap"]
    assert [s.arg.name for s in maps] == ["dy_map", "x_map"]
    assert maps[0].offset == 48  # not 0: 0x210 + 48 is the first multiple of 64
    assert all((PARAM_BASE + s.offset) % 64 == 0 and s.arg.size == 128 for s in maps)
    for a, b in zip(slots, slots[1:]):  # no overlap, natural alignment of every other slot
        assert b.offset >= a.offset + a.arg.size and (PARAM_BASE + b.offset) % b.arg.align == 0
    assert decl.source_names[:4] == ("dy_desc", "x_desc", "dw", "ws_ptr")
    # one source for both: the same parameters, x's map of rank 2 + dims ([N, [D,] H, W, C])
    assert decl.source_names == declaration("wgrad_tma", variant, 5 - dims).source_names
    assert [a.name for a in decl.args if a.name.startswith("x_shape")] == [f"x_shape{i}" for i in range(2 + dims)]
    # 48 + 2 maps with their shapes and strides, 2 pointers, 23 i32 scalars, 2 tail pointers
    assert got == size == tma_spec(variant, dims=dims).kernarg_decl.layout(2)[1]
    with pytest.raises(AbiError, match="2-D and 3-D"):
        declaration("wgrad_tma", variant, 1)


@pytest.mark.parametrize("family", [f for f in FAMILIES if f not in ("wgrad_tma", "dwconv_tma")])
def test_the_parameter_base_moves_nothing_without_tensor_maps(family):
    variants = {"wgrad": "direct", "wgrad_sk": "linear", "stage2": "reduce", "dwconv": "workspace", "grouped": "direct", "pad": "rows",
                "dwconv_walk": "workspace"}
    slots, _ = declaration(family, variants[family]).layout(2)
    offset = 0
    for s in slots:  # natural alignment counted from 0, as before the base existed
        offset = -(-offset // s.arg.size) * s.arg.size
        assert s.offset == offset
        offset += s.arg.size


def test_the_packer_takes_tensor_maps_and_i64_and_refuses_anything_else():
    decl = declaration("wgrad_tma", "direct")
    p = parse_problem("n=2,c=64,k=64,h=8,w=8,y=3,x=3,padding=1")
    geo = tma_geometry(p, "direct", bm=64, bn=64, bk=64, taps_per_tile=1)
    vals = {**geo.scalars, "dy_map": b"\x01" * 128, "x_map": b"\x02" * 128, "dw": 0x1000}
    blob = decl.pack(vals, 2)
    slots = {s.arg.name: s.offset for s in decl.layout(2)[0]}
    assert blob[48:176] == b"\x01" * 128 and blob[slots["x_map"] : slots["x_map"] + 128] == b"\x02" * 128
    assert struct.unpack_from("<q", blob, slots["x_stride0"])[0] == 8 * 8 * 64
    with pytest.raises(AbiError, match="128-byte tensor map"):
        decl.pack({**vals, "x_map": b"\x02" * 64}, 2)
    with pytest.raises(AbiError, match="ws_ptr"):  # reserved outside the workspace variant
        decl.pack({**vals, "ws_ptr": 0x2000}, 2)


# -- spec and problem rules ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(dtype="fp32", variant="direct"), "16-bit inputs"),
        (dict(variant="atomic", dw="bf16"), "must be fp32"),
        (dict(taps=3), "1, 2 or 4"),
        (dict(dims=1), "2-D or 3-D"),
        (dict(bn=128, taps=4), "at least 64"),
        (dict(warps=2), "num_warps is 4 or 8"),
        (dict(variant="direct", mode="streamk"), "never direct"),
        (dict(bm=32), "power of two in \\[64, 256\\]"),
        (dict(regs=96), "max_regs is 0, or 128 or 80"),
    ],
)
def test_spec_rules(kw, match):
    with pytest.raises(AbiError, match=match):
        tma_spec(**kw)


def test_persistent_launches_take_a_pool_and_the_others_none():
    p = PROBLEMS[0]
    from skwgrad.abi.launch import launch_geometry

    geo = launch_geometry(p, "wgrad_tma", "atomic", bm=64, bn=64, bk=64, taps_per_tile=1, ks_count=4, mode="persistent", pool=5)
    assert geo.grid == 5 and geo.mode == "persistent" and geo.ks_count == 4
    for mode, pool in (("persistent", 0), ("", 5)):
        with pytest.raises(AbiError, match="pool"):
            launch_geometry(p, "wgrad_tma", "atomic", bm=64, bn=64, bk=64, taps_per_tile=1, ks_count=4, mode=mode, pool=pool)
    assert tma_spec(mode="persistent").label.endswith("_persistent_workspace")
    with pytest.raises(AbiError, match="persistent"):
        tma_spec(mode="dp_sk")
    sk = launch_geometry(p, "wgrad_tma", "workspace", bm=64, bn=64, bk=64, taps_per_tile=1, mode="streamk", pool=7)
    iters = sk.tiling.num_tiles * sk.tiling.iters_per_tile
    assert sk.ks_count == 1 and sk.grid <= 7 and (sk.grid - 1) * sk.ks_iters < iters <= sk.grid * sk.ks_iters
    assert sk.scalars["ks_iters"] == sk.ks_iters and sk.workspace.needs_stage2


def test_label_and_threads():
    s = tma_spec("direct", dw="fp32", bm=128, bn=128, taps=2, warps=8, stages=4)
    assert s.label == "wgrad_tma_bf16_dwfp32_2d_v8v8_128x128x64_t2_w8s4_direct"
    assert tma_spec("direct", dims=3).label == "wgrad_tma_bf16_3d_v8v8_64x64x64_t1_w4s3_direct"
    assert s.tma_channels == 64
    assert s.threads_per_cta(32) == 384 and tma_spec().threads_per_cta(32) == 256  # + producer warp, whole warpgroups


@pytest.mark.parametrize(
    "text,match",
    [
        ("n=2,c=6,k=64,h=8,w=8,y=3,x=3,padding=1", "multiples of 8"),
        ("n=2,c=64,k=64,h=8,w=8,y=3,x=3,padding=1,g=16", "per group must be multiples of 8"),
        # a 5-D x (3-D problems) narrows the corners to [-16, 15] and the tap offsets to 31
        ("n=2,c=64,k=64,d=4,h=40,w=40,z=3,y=3,x=3,padding=17", "corners .* for a 5-D x"),
        ("n=2,c=64,k=64,d=40,h=8,w=8,z=3,y=3,x=3,dilation=16x1x1,padding=16x1x1", "tap offsets .* 31 for a 5-D x"),
        ("n=2,c=64,k=64,h=64,w=64,y=3,x=3,stride=9", "strides up to 8"),
        ("n=2,c=64,k=64,h=8,w=8,y=3,x=3,padding=200", "corners"),
        ("n=2,c=64,k=64,h=8,w=8,y=3,x=3,padding=1,dtype=fp32", "16-bit"),
    ],
)
def test_what_tma_cannot_run_is_refused_with_the_reason(text, match):
    p = parse_problem(text)
    assert re.search(match, tma_unsupported(p))
    if p.dtype == "bf16":  # (an fp32 problem is refused first for its dtype)
        with pytest.raises(AbiError, match=match):
            tma_spec(dims=p.spatial_dims).check_problem(p)
        with pytest.raises(AbiError, match=f"runs {5 - p.spatial_dims}-D problems; the problem is {p.spatial_dims}-D"):
            tma_spec(dims=5 - p.spatial_dims).check_problem(p)
    with pytest.raises(ProblemError):
        tma_geometry(p, "atomic", bm=64, bn=64, bk=64, taps_per_tile=1)


def test_the_im2col_box_walks_exactly_the_output_positions():
    rng = random.Random(7)
    for _ in range(300):
        h, w = rng.randint(1, 80), rng.randint(1, 80)
        y, x = rng.choice((1, 3, 5, 7)), rng.choice((1, 3, 5, 7))
        s, d = rng.choice((1, 2, 3)), rng.choice((1, 2))
        pl, ph = rng.randint(0, 4), rng.randint(0, 4)
        try:
            p = ConvProblem(n=2, c=8, k=8, hi=h, wi=w, y=y, x=x, stride=(1, s, s), pad_lo=(0, pl, pl), pad_hi=(0, ph, ph), dilation=(1, d, d))
        except ProblemError:  # no output
            continue
        if tma_unsupported(p):
            continue
        req = tma_geometry(p, "direct", bm=64, bn=64, bk=64, taps_per_tile=1).tensor_maps[1]
        for dim, out in ((1, p.ho), (2, p.wo)):
            lo, up, size = req.lower[dim - 1], req.upper[dim - 1], req.shape[dim]
            assert (size + up - lo - 1) // s + 1 == out  # positions lo, lo+s, ... inside [lo, size + up)
            assert lo == -p.pad_lo[dim]
            assert TMA_CORNER_RANGE[4][0] <= min(lo, up) and max(lo, up) <= TMA_CORNER_RANGE[4][1]
        assert req.element_strides == (1, s, s, 1)


def test_the_5d_im2col_box_walks_exactly_the_output_positions_of_a_3d_problem():
    rng = random.Random(11)
    seen = 0
    for _ in range(400):
        ins = [rng.randint(1, 20) for _ in range(3)]
        f = [rng.choice((1, 3, 5)) for _ in range(3)]
        st, dl = [rng.choice((1, 2, 3)) for _ in range(3)], [rng.choice((1, 2)) for _ in range(3)]
        pl, ph = [rng.randint(0, 3) for _ in range(3)], [rng.randint(0, 3) for _ in range(3)]
        try:
            p = ConvProblem(n=2, c=8, k=8, di=ins[0], hi=ins[1], wi=ins[2], z=f[0], y=f[1], x=f[2], stride=tuple(st), pad_lo=tuple(pl),
                            pad_hi=tuple(ph), dilation=tuple(dl), spatial_dims=3)  # fmt: skip
        except ProblemError:
            continue
        if tma_unsupported(p):
            continue
        seen += 1
        geo = tma_geometry(p, "direct", bm=64, bn=64, bk=64, taps_per_tile=1)
        req = geo.tensor_maps[1]
        assert req.shape == (2, *ins, 8) and len(req.strides) == 5 and req.element_strides == (1, *st, 1)
        for dim, out in enumerate((p.do, p.ho, p.wo)):
            lo, up, size = req.lower[dim], req.upper[dim], req.shape[dim + 1]
            assert (size + up - lo - 1) // st[dim] + 1 == out
            assert lo == -pl[dim] and -16 <= min(lo, up) and max(lo, up) <= 15
        sc = geo.scalars
        assert (sc["DoHoWo"], sc["HoWo"], sc["Wo"], sc["YX"], sc["TAPS"]) == (p.do * p.ho * p.wo, p.ho * p.wo, p.wo, f[1] * f[2], math.prod(f))
        assert (sc["stride_d"], sc["pad_d"], sc["dil_d"]) == (st[0], pl[0], dl[0]) and sc["total_iters"] == -(-p.gemm_k // 64)
    assert seen > 50


def test_a_2d_launch_passes_trivial_depth_scalars():
    sc = tma_geometry(PROBLEMS[1], "direct", bm=64, bn=64, bk=64, taps_per_tile=1).scalars
    assert (sc["DoHoWo"], sc["YX"], sc["stride_d"], sc["pad_d"], sc["dil_d"]) == (sc["HoWo"], sc["TAPS"], 1, 0, 1)
    assert "x_shape4" not in sc and sc["x_shape3"] == PROBLEMS[1].c


@pytest.mark.parametrize(
    "g,c,k,bm,cb,gb",
    [
        (1, 64, 64, 64, 64, 1),  # dense: one group
        (32, 8, 8, 64, 64, 8),  # ResNeXt 32x8: 8 groups fill a 64 x 64 tile
        (32, 8, 8, 128, 64, 8),  # the input channels bound it
        (6, 16, 16, 64, 64, 3),  # 4 fit, 3 divide G
        (7, 16, 16, 64, 64, 1),  # G prime: no packing
        (4, 64, 64, 64, 64, 1),  # a group fills the tile
        (2, 128, 128, 64, 64, 1),  # a group spans tiles
        (16, 8, 32, 64, 128, 2),  # the output channels bound it
    ],
)
def test_groups_per_tile_fill_the_tile_and_divide_g(g, c, k, bm, cb, gb):
    p = ConvProblem(n=2, c=c, k=k, g=g, hi=8, wi=8, y=3, x=3, pad_lo=(0, 1, 1), pad_hi=(0, 1, 1))
    assert tma_groups_per_tile(p, bm, cb) == gb
    geo = tma_geometry(p, "atomic", bm=bm, bn=cb, bk=64, taps_per_tile=1)
    kp, cp = gb * k, gb * c
    assert (geo.scalars["KP"], geo.scalars["CP"], geo.scalars["K"], geo.scalars["C"]) == (kp, cp, k, c)
    assert geo.scalars["m_tiles"] == g // gb * -(-kp // bm) and geo.scalars["c_tiles"] == -(-cp // cb)
    assert geo.tiling.num_tiles == geo.scalars["m_tiles"] * 9 * geo.scalars["c_tiles"]
    dy, x = geo.tensor_maps  # all groups' channels: one row of dy and of x
    assert dy.shape == (p.gemm_k, g * k) and x.shape[3] == g * c and x.strides[2] == g * c


def test_geometry_tiles_taps_and_splits():
    p = parse_problem("n=4,c=96,k=200,h=14,w=14,y=3,x=3,padding=1")
    geo = tma_geometry(p, "workspace", bm=128, bn=128, bk=64, taps_per_tile=2, ks_count=5)
    m, taps, c = 2, 5, 2  # ceil(200/128), ceil(9/2), ceil(96/64)
    assert geo.tiling.num_tiles == m * taps * c and (geo.scalars["m_tiles"], geo.scalars["c_tiles"]) == (m, c)
    assert geo.scalars["total_iters"] == -(-4 * 14 * 14 // 64) == geo.tiling.iters_per_tile
    assert geo.ks_count * geo.ks_iters >= geo.scalars["total_iters"] > (geo.ks_count - 1) * geo.ks_iters
    assert geo.grid == geo.tiling.num_tiles * geo.ks_count
    assert geo.workspace.needs_stage2 and geo.workspace.stage2_reset and geo.workspace.replicas == 1
    with pytest.raises(ProblemError, match="direct"):
        tma_geometry(p, "direct", bm=128, bn=128, bk=64, taps_per_tile=2, ks_count=2)


# -- plans on the fake device -------------------------------------------------------------------
PROBLEMS = [
    ConvProblem(n=8, c=16, k=24, hi=9, wi=7, y=3, x=3, pad_lo=(0, 1, 1), pad_hi=(0, 1, 1)),
    ConvProblem(n=16, c=8, k=8, hi=11, wi=10, y=3, x=2, stride=(1, 2, 2), pad_lo=(0, 1, 0), pad_hi=(0, 1, 0), dilation=(1, 1, 2)),
    # grouped, 6 groups of 16 in / 8 out channels: 4 fit a 64 x 64 tile, 3 divide G
    ConvProblem(n=4, c=16, k=8, g=6, hi=7, wi=9, y=3, x=3, pad_lo=(0, 1, 1), pad_hi=(0, 1, 1)),
    # 3-D (a 5-D im2col x): strided and dilated depth, a 3x1x3 filter, asymmetric padding
    ConvProblem(n=6, c=16, k=24, di=7, hi=6, wi=9, z=3, y=1, x=3, stride=(2, 1, 1), pad_lo=(1, 0, 1), pad_hi=(1, 0, 0),
                dilation=(1, 1, 2), spatial_dims=3),  # fmt: skip
    ConvProblem(n=2, c=8, k=16, g=2, di=5, hi=6, wi=6, z=3, y=3, x=3, pad_lo=(1, 1, 1), pad_hi=(1, 1, 1), spatial_dims=3),
]


LAUNCHES = [(v, ks, pool, mode) for v, ks in (("direct", 1), ("atomic", 3), ("workspace", 4)) for pool, mode in ((0, ""), (3, "persistent"))]
LAUNCHES += [(v, 1, 5, "streamk") for v in ("atomic", "workspace")]  # stream-K adds partial tiles: no direct


@pytest.mark.parametrize("variant,ks,pool,mode", LAUNCHES)
@pytest.mark.parametrize("taps", [1, 2])
@pytest.mark.parametrize("pi", range(len(PROBLEMS)))
def test_plans_launch_what_the_reference_computes(variant, ks, taps, pi, pool, mode):
    p0 = PROBLEMS[pi]
    s = tma_spec(variant, bn=64 * taps, taps=taps, mode=mode, dims=p0.spatial_dims)
    p = dataclasses.replace(p0, dw_dtype=s.dw_dtype)
    c, be = F.FakeCache(), F.FakeBackend()
    k = Kernel.from_entry(c.add(s, "sm_90"), c)
    st2 = Kernel.from_entry(c.add(F.stage2(s.dw_dtype), "sm_90"), c)
    plan = Plan(p, k, be, ks_count=ks, stage2=st2, pool=pool)
    units = plan.geometry.tiling.num_tiles * plan.ks_count
    if mode == "streamk":
        iters = plan.geometry.tiling.num_tiles * plan.geometry.tiling.iters_per_tile
        assert plan.grid <= pool and plan.grid * plan.geometry.ks_iters >= iters
    else:
        assert plan.threads == 256 and plan.grid == (min(units, pool) if pool else units)
    xp, dyp, dwp, ref = F.random_device_inputs(be, p)
    plan.poison(dw=dwp)
    plan.launch(dyp, xp, dwp)
    got = from_bits(be.read_array(dwp, p.dw_numel, p.dw_dtype), p.dw_dtype).reshape(p.dw_shape)
    assert relative_error(got, ref) < (1e-2 if p.dw_dtype == "bf16" else 1e-5)
    assert plan.zeroed_bytes_nonzero() == 0  # the workspace replica is zero again


def test_maps_are_encoded_once_and_re_pointed_only_when_a_pointer_changes():
    p = PROBLEMS[0]
    c, be = F.FakeCache(), F.FakeBackend()
    s = tma_spec("direct")
    plan = Plan(p, Kernel.from_entry(c.add(s, "sm_90"), c), be)
    assert [x for x in be.calls if x[0] == "encode_tensor_map"] == [("encode_tensor_map", "dy"), ("encode_tensor_map", "x")]
    xp, dyp, dwp, ref = F.random_device_inputs(be, p)
    plan.launch(dyp, xp, dwp)
    n = len([x for x in be.calls if x[0] == "tensor_map_at"])
    plan.launch(dyp, xp, dwp)  # same pointers: the kernarg block is reused as it is
    assert len([x for x in be.calls if x[0] == "tensor_map_at"]) == n
    x2, dy2, dw2, ref2 = F.random_device_inputs(be, p, seed=3)
    plan.launch(dyp, x2, dw2)  # only x moved: only its map is re-pointed
    after = [x for x in be.calls if x[0] == "tensor_map_at"][n:]
    assert after == [("tensor_map_at", x2)]
    assert be.launches[-1]["args"]["x_map"][1] == x2 and be.launches[-1]["args"]["dy_map"][1] == dyp


def test_a_backend_without_tensor_maps_refuses_with_what_to_do():
    class NoTma(F.FakeBackend):
        encode_tensor_map = F.Backend.encode_tensor_map
        tensor_map_at = F.Backend.tensor_map_at

    c = F.FakeCache()
    with pytest.raises(BackendError, match="sm_90 CUDA"):
        Plan(PROBLEMS[0], Kernel.from_entry(c.add(tma_spec("direct"), "sm_90"), c), NoTma())


def test_metadata_without_tensor_maps_is_refused():
    from skwgrad.errors import CacheError

    s = tma_spec("direct")
    c = F.FakeCache()
    md = F.fake_metadata(s, "sm_90")
    md.pop("tensor_maps")
    with pytest.raises(CacheError, match="tensor maps"):
        Plan(PROBLEMS[0], Kernel.from_entry(c.add(s, "sm_90", metadata=md), c), F.FakeBackend())


# -- sweep and selection ------------------------------------------------------------------------
def test_the_default_sweep_has_the_family_only_where_the_arch_has_tma():
    from skwgrad.aot.sweep import tma_specs

    got = tma_specs("default", "sm_90", "bf16")
    assert got and all(s.family == "wgrad_tma" for s in got) and any(s.mode == "persistent" for s in got)
    assert {(s.variant, s.dw_dtype) for s in got} == {("direct", "bf16"), ("workspace", "bf16"), ("direct", "fp32"), ("atomic", "fp32")}
    assert not any(s.mode == "streamk" for s in got)  # run S4: broad/full only
    assert any(s.mode == "streamk" for s in tma_specs("broad", "sm_90", "bf16"))
    assert tma_specs("default", "gfx942", "bf16") == tma_specs("default", "gfx950", "fp16") == []
    assert tma_specs("default", "sm_90", "fp32") == []


def _default_cache():
    from skwgrad.aot.sweep import sweep

    c = F.FakeCache()
    for it in sweep("default", arches=["sm_90"], dtypes=["bf16"]):
        c.add(it.spec, it.arch)
    return c


def test_selection_takes_tma_where_it_applies_and_never_where_it_cannot():
    from skwgrad.launcher.options import LaunchOptions
    from skwgrad.launcher.select import choose, rank_choices

    c = _default_cache()
    occ = lambda k: 1  # noqa: E731
    big = parse_problem("n=32,c=512,k=512,h=14,w=14,y=3,x=3,padding=1")  # R3: the TMA loop 1.3x the Triton kernels here
    assert choose(big, c, arch="sm_90", cus=132, occupancy=occ).spec.family == "wgrad_tma"
    r = rank_choices(big, c, arch="sm_90", cus=132, options=LaunchOptions(), occupancy=occ)
    assert {x.spec.family for x in r.choices} >= {"wgrad", "wgrad_tma"}
    grouped = parse_problem("n=32,c=256,k=256,h=28,w=28,y=3,x=3,padding=1,g=32")  # 8 per group: packed 8 to a tile
    r = rank_choices(grouped, c, arch="sm_90", cus=132, options=LaunchOptions(), occupancy=occ)
    assert {x.spec.family for x in r.choices} >= {"grouped", "wgrad_tma"}
    p = parse_problem("n=32,c=256,k=256,h=14,w=14,y=3,x=3,padding=1,g=64")  # 4 channels a group: no 16-byte TMA strides
    r = rank_choices(p, c, arch="sm_90", cus=132, options=LaunchOptions(), occupancy=occ)
    assert r.choices and all(x.spec.family != "wgrad_tma" for x in r.choices)
    # each problem gets the TMA kernels of its own dims: 3-D ones read x through a 5-D map
    d3 = parse_problem("n=8,c=64,k=64,d=8,h=14,w=14,z=3,y=3,x=3,padding=1")
    r3 = rank_choices(d3, c, arch="sm_90", cus=132, options=LaunchOptions(), occupancy=occ)
    tma3 = [x for x in r3.choices if x.spec.family == "wgrad_tma"]
    assert tma3 and all(x.spec.spatial_dims == 3 for x in tma3) and {x.spec.family for x in r3.choices} > {"wgrad_tma"}
    r2 = rank_choices(big, c, arch="sm_90", cus=132, options=LaunchOptions(), occupancy=occ)
    assert all(x.spec.spatial_dims == 2 for x in r2.choices)
    # deterministic requests never take the atomic epilogues
    det = rank_choices(big, c, arch="sm_90", cus=132, options=LaunchOptions(deterministic=True), occupancy=occ)
    assert all(x.spec.variant in ("direct", "two_stage", "linear", "tree") for x in det.choices)


# -- the compiled objects (Triton + Gluon on this machine) ----------------------------------------
@pytest.fixture(scope="module")
def compiled():
    pytest.importorskip("triton.experimental.gluon")
    from skwgrad.aot.compile import compile_spec

    out = {v: compile_spec(tma_spec(v, bn=128, taps=2), "sm_90", keep_asm=True) for v in ("direct", "workspace")}
    out["direct_fp32"] = compile_spec(tma_spec("direct", dw="fp32", bn=128, taps=2), "sm_90", keep_asm=True)
    out["persistent_atomic"] = compile_spec(tma_spec("atomic", bn=128, taps=2, mode="persistent"), "sm_90", keep_asm=True)
    out["streamk_workspace"] = compile_spec(tma_spec("workspace", bn=128, taps=2, mode="streamk"), "sm_90", keep_asm=True)
    out["two_cta_atomic"] = compile_spec(tma_spec("atomic", bn=128, taps=2, stages=4, regs=128), "sm_90", keep_asm=True)
    out["three_cta_workspace"] = compile_spec(tma_spec("workspace", stages=4, regs=80), "sm_90", keep_asm=True)
    out["three_d_atomic"] = compile_spec(tma_spec("atomic", bn=128, taps=2, stages=4, regs=128, dims=3), "sm_90", keep_asm=True)
    return out


def _sass(cubin: bytes) -> str:
    import subprocess
    import tempfile

    import triton.backends.nvidia as nv

    tool = Path(nv.__file__).parent / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "k.cubin"
        f.write_bytes(cubin)
        return subprocess.run([str(tool), "-sass", str(f)], capture_output=True, text=True, timeout=120, check=True).stdout


@pytest.mark.parametrize("variant", ["direct", "direct_fp32", "workspace", "persistent_atomic", "streamk_workspace", "two_cta_atomic",
                                     "three_cta_workspace", "three_d_atomic"])
def test_compiled_kernel_is_the_measured_loop_and_its_metadata_is_what_the_launcher_reads(compiled, variant):
    from skwgrad.abi.codeobject import cubin_params

    ck = compiled[variant]
    md = ck.metadata
    decl = ck.spec.kernarg_decl
    assert [p["offset"] for p in cubin_params(ck.binary, md["name"])][: len(decl.args)] == md["kernarg"]["offsets"]
    assert md["kernarg"]["offsets"][0] == 48 and md["threads"] == 256 and md["stack_bytes"] == 0
    assert [m["is_im2col"] for m in md["tensor_maps"]] == [False, True]
    sass = _sass(ck.binary)
    assert all("tnspA.tnspB" in line for line in re.findall(r"HGMMA[^;]*", sass)) and "HGMMA" in sass
    rank = 2 + ck.spec.spatial_dims  # x: [N, [D,] H, W, C]
    assert len(re.findall(rf"UTMALDG\.{rank}D\.IM2COL", sass)) >= ck.spec.block  # one im2col load per tap of the tile
    assert not re.search(rf"UTMALDG\.{9 - rank}D\.IM2COL", sass)
    assert [len(m["block_size"]) for m in md["tensor_maps"]] == [2, 2] and md["kernarg"]["size"] == (544 if rank == 4 else 560)
    assert not re.search(r"\b(LDL|STL)\b", sass)
    # shared-memory accesses other than TMA / wgmma: the warp partitions' bookkeeping (3-7), and a
    # round trip of the tile through a scratch buffer (dozens) only where it buys 16-byte stores
    round_trip = len(re.findall(r"\b(STS|LDS)", sass)) > 8
    if variant == "direct":  # a bf16 dW: 8 channels a thread, 16-byte stores
        assert ck.spec.dw_dtype == "bf16" and "STG.E.128" in sass and round_trip
    elif variant == "direct_fp32":  # an fp32 dW: the wgmma layout's pairs, 8-byte stores from the registers
        assert "STG.E.64" in sass and not round_trip, "the fp32 epilogue went through shared memory"
    else:  # fp32 adds, likewise
        assert "REDG.E.ADD.F32x2" in sass and not round_trip, "the fp32 epilogue went through shared memory"
    if variant == "streamk_workspace":
        assert ck.metadata["kernarg"]["offsets"][0] == 48


def test_two_cta_kernels_launch_with_half_the_registers_and_fit_two_an_sm(compiled):
    from skwgrad.abi.costmodel import offline_occupancy

    one, two = compiled["persistent_atomic"].metadata, compiled["two_cta_atomic"].metadata
    assert one["regs"] > 128 and offline_occupancy(one, "sm_90") == 1  # the compiler's choice fills the SM
    assert two["regs"] == 128 and two["threads"] == 256 and two["stack_bytes"] == 0
    assert offline_occupancy(two, "sm_90") == 2 and 2 * two["shared"] <= 228 * 1024
    ptx = two["_asm"]["ptx"]
    assert ".maxnreg 128" in ptx and "setmaxnreg.inc.sync.aligned.u32 \t232" in ptx  # the MMA warps still grow
    assert "setmaxnreg.dec.sync.aligned.u32 \t24" in ptx  # out of the producer warp's share
    three = compiled["three_cta_workspace"].metadata
    assert three["regs"] == 80 and three["stack_bytes"] == 0 and offline_occupancy(three, "sm_90") == 3
    assert "setmaxnreg.inc.sync.aligned.u32 \t136" in three["_asm"]["ptx"]


def test_the_default_runs_small_four_warp_tiles_two_or_three_an_sm():
    from skwgrad.aot.sweep import tma_max_regs, tma_specs

    specs = tma_specs("default", "sm_90", "bf16")
    two = [s for s in specs if s.max_regs]
    assert two and all(s.num_warps == 4 and s.bm * s.bn <= 64 * 128 for s in two)
    assert all(s.max_regs == 0 for s in specs if s.num_warps == 8 or s.bm * s.bn > 64 * 128)
    assert tma_max_regs(64, 64, 4) == 80 and tma_max_regs(64, 128, 4) == 128 and tma_max_regs(128, 64, 4) == 128
    assert tma_max_regs(64, 256, 4) == 0 and tma_max_regs(128, 128, 8) == 0
    assert tma_spec(regs=128).label.endswith("_w4s3r128_workspace") and tma_spec(regs=128) != tma_spec()


def test_compiled_metadata_passes_the_cache_checks_and_a_corrupt_one_does_not(compiled, tmp_path):
    from skwgrad.cache.validate import check_metadata

    ck = compiled["workspace"]
    check_metadata(dict(ck.metadata), ck.spec, "sm_90", "entry", current=True)
    bad = dict(ck.metadata, tensor_maps=[dict(m) for m in ck.metadata["tensor_maps"]])
    bad["tensor_maps"][1]["block_size"] = [64, 100000]
    with pytest.raises(Exception, match="block_size"):
        check_metadata(bad, ck.spec, "sm_90", "entry", current=True)
    with pytest.raises(Exception, match="tensor"):
        check_metadata({k: v for k, v in ck.metadata.items() if k != "tensor_maps"}, ck.spec, "sm_90", "entry", current=True)


def test_amd_targets_refuse_the_family():
    pytest.importorskip("triton")
    from skwgrad.aot.compile import compile_spec

    with pytest.raises(AbiError, match="sm_90 only"):
        compile_spec(tma_spec("direct"), "gfx942")


def test_fake_maps_carry_their_address():
    be = F.FakeBackend()
    req = tma_geometry(PROBLEMS[0], "direct", bm=64, bn=64, bk=64, taps_per_tile=1).tensor_maps[0]
    assert np.frombuffer(be.tensor_map_at(be.encode_tensor_map(req, {}, 0x100), 0x2000)[8:16], dtype="<u8")[0] == 0x2000


def test_a_refused_tensor_map_makes_the_api_choose_again_and_says_why(monkeypatch, caplog):
    """A driver that refuses the maps (no TMA im2col, or a limit selection did not know) costs the
    TMA kernel, not the call: the API takes the next-ranked kernel and logs why."""
    from skwgrad.aot.sweep import sweep
    from skwgrad.errors import TensorMapError
    from skwgrad.launcher import api

    c = F.FakeCache()
    for it in sweep("default", arches=["sm_90"], dtypes=["bf16"]):
        c.add(it.spec, it.arch)
    be = F.FakeBackend(cus=132, max_active=1)
    p = parse_problem("n=32,c=512,k=512,h=14,w=14,y=3,x=3,padding=1")
    from skwgrad.launcher.options import LaunchOptions
    from skwgrad.launcher.select import choose

    assert choose(p, c, arch="sm_90", cus=132, occupancy=lambda k: 1).spec.family == "wgrad_tma"

    def refuse(self, request, desc, ptr):
        raise TensorMapError("CUDA_ERROR_INVALID_VALUE (test)")

    monkeypatch.setattr(F.FakeBackend, "encode_tensor_map", refuse)
    api.clear_plans()
    with caplog.at_level("WARNING"):
        plan = api.plan_for(p, LaunchOptions(), cache=c, backend=be)
    assert plan.spec.family != "wgrad_tma"
    assert "choosing again without it" in caplog.text
    api.clear_plans()


def test_the_gpu_suite_launches_every_tma_setting_it_names():
    """tests/test_gpu_launcher.py's TMA cases, checked here where no GPU runs them: every kernel
    at every setting has a geometry on every shape (run T1 lost 8 cases to a split count past the
    rows), and the grouped shapes pack 8, 3 and 1 groups to a tile."""
    from skwgrad.abi.launch import spec_geometry
    from test_gpu_launcher import TMA_3D_KINDS, TMA_3D_SHAPES, TMA_KINDS, TMA_SHAPES

    for text, kinds in [(t, TMA_KINDS) for t in TMA_SHAPES.values()] + [(t, TMA_3D_KINDS) for t in TMA_3D_SHAPES.values()]:
        p = parse_problem(text)
        assert not tma_unsupported(p)
        for spec, settings in kinds:
            assert spec.spatial_dims == p.spatial_dims
            for setting in settings:
                geo = spec_geometry(p, spec, **setting)
                assert geo.ks_count == setting.get("ks_count", 1) or spec.mode == "streamk"
    packs = {name: tma_groups_per_tile(parse_problem(TMA_SHAPES[name]), 64, 64) for name in TMA_SHAPES if name.startswith("grouped")}
    assert packs == {"grouped_8x8": 8, "grouped_16to8": 3, "grouped_wide": 1}
