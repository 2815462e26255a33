"""The depthwise family (``dwconv``) and the packed-group family (``grouped``) compile for gfx942, gfx950 and sm_90 on this GPU-less
machine, and its code objects pass the checks the dense families pass: kernarg layout from the
AMD metadata note (and the PTX entry on sm_90) equal to the one ABI declaration, no scratch or
spills, no flag traffic; plus what this family promises: no matrix instructions (vector FMAs),
16-byte channel-vector loads where G allows them. Also the spec rules, labels, check_problem and
the launch geometry (grid, ks_count rule, workspace) of the family."""

import re
import sys
from pathlib import Path
from concurrent.futures import ProcessPoolExecutor

import pytest

from skwgrad.abi import codeobject, launch
from skwgrad.abi.arch import get_arch
from skwgrad.abi.conv import parse_problem
from skwgrad.abi.kernargs import declaration
from skwgrad.abi.launch import (DWCONV_MIN_STEPS, DWCONV_WIN_ATOMIC_COST, DWCONV_WIN_CTA_COST, DWCONV_WIN_CTAS_PER_CU,
                                DWCONV_WIN_FIT_CHANNELS_PER_THREAD, DWCONV_WIN_RESIDENT,
                                DWCONV_WIN_SEARCH_CTAS_PER_CU, dwconv_geometry, dwconv_ks_count, dwconv_tiling, dwconv_window,
                                grouped_ks_count, launch_geometry)  # fmt: skip
from skwgrad.abi.spec import KernelSpec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_kernels_compile import _build  # noqa: E402  (the same compile job, in a worker process)
from skwgrad.aot.sweep import dwconv_specs, dwconv_walk_specs, grouped_specs
from skwgrad.errors import AbiError, ProblemError

ARCHES = ("gfx942", "gfx950", "sm_90")


def dws(variant="two_stage", dtype="bf16", dw=None, *, vec=8, bc=64, taps=16, br=4, warps=4, sd=2, mode=""):
    return KernelSpec("dwconv", variant, dtype, dw or dtype, spatial_dims=sd, vec_c=vec, vec_k=vec, bm=bc, bn=taps,
                      bk=br, num_warps=warps, num_stages=1, mode=mode, precision="ieee" if dtype == "fp32" else "")  # fmt: skip


def specs():
    return dw_specs() + grouped_smoke() + [gs("workspace")]


def gs(variant, dtype="bf16", dw=None, *, gb=8, bm=64, vec=8):
    """A packed-group kernel (the default's 8 groups x 8 channels tile)."""
    return KernelSpec("grouped", variant, dtype, dw or dtype, vec_c=vec, vec_k=vec, bm=bm, bn=64, bk=64, block=gb,
                      num_warps=4, num_stages=2)  # fmt: skip


def grouped_smoke():
    return list(grouped_specs("smoke", "gfx942", "bf16"))


def dw_specs():
    out = list(dwconv_specs("smoke", "gfx942", "bf16"))  # what CI's smoke sweep builds
    out += [
        dws("two_stage", "bf16", taps=64, br=2),  # 7x7
        dws("atomic", "fp32", "fp32", vec=4, taps=32, sd=3),
        dws("direct", "fp16", "fp16", vec=1, bc=32, taps=32),
        dws("workspace", "bf16", vec=4, bc=32, taps=16, br=16, mode="taps"),
        # window kernels: 3 tap rows of a 3-wide filter per CTA; a 7-wide filter, one row, 3-D
        dws("workspace", "bf16", bc=32, taps=3, br=64, mode="win7r3"),
        dws("atomic", "fp16", "fp32", bc=32, taps=7, br=64, mode="win7", sd=3),
        # stride-2 window kernels (the default's configurations) and a dilation-2 one
        dws("workspace", "bf16", bc=32, taps=3, br=64, mode="win7r3s2"),
        dws("atomic", "fp16", "fp32", bc=32, taps=7, br=64, mode="win7s2"),
        dws("direct", "fp32", "fp32", vec=4, bc=32, taps=5, br=64, mode="win7s2"),
        dws("workspace", "fp16", bc=32, taps=3, br=64, mode="win7r3d2"),
        # the 3-wide filter's strips of 5 (the default's, for widths 7 does not divide)
        dws("workspace", "bf16", bc=32, taps=3, br=64, mode="win5r3"),
    ]
    # the row-walk kernels (``dwconv_walk``) as the default builds them for sm_90 (32 strips) and AMD (64)
    out += dwconv_walk_specs("default", "sm_90", "bf16") + dwconv_walk_specs("default", "gfx942", "fp16")
    return out


ALL = [(s, a) for a in ARCHES for s in specs()]
IDS = [f"{a}-{s.label}" for s, a in ALL]


@pytest.fixture(scope="module")
def built(request):
    """Only the (spec, arch) pairs the selected tests use (``-k win7r3s2`` builds just those)."""
    wanted = set()
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.module is request.module and "spec" in params:
            wanted.add((params["spec"], params.get("arch", "sm_90")))
    with ProcessPoolExecutor(2) as ex:
        return {(s, a): (b, m) for s, a, b, m in ex.map(_build, [x for x in ALL if x in wanted])}


@pytest.mark.parametrize("spec,arch", ALL, ids=IDS)
def test_kernarg_layout_matches_the_declaration(built, spec, arch):
    binary, md = built[(spec, arch)]
    slots, size = spec.kernarg_decl.layout(md["kernarg"]["tail_pointers"])
    assert md["kernarg"]["names"] == list(declaration(spec.family, spec.variant).names)
    assert md["kernarg"]["tail_pointers"] == 2  # Triton's global and profile scratch pointers
    if arch == "sm_90":
        params = codeobject.ptx_params(md["_asm"]["ptx"], md["name"])
        assert [(p["offset"], p["size"]) for p in params] == [(s.offset, s.arg.size) for s in slots]
        return
    k = codeobject.amdgpu_kernel(binary, md["name"])
    explicit = [a for a in k[".args"] if not a[".value_kind"].startswith("hidden_")]
    assert [(a[".offset"], a[".size"]) for a in explicit] == [(s.offset, s.arg.size) for s in slots]
    assert all(a[".offset"] >= size for a in k[".args"] if a[".value_kind"].startswith("hidden_"))
    assert k[".kernarg_segment_size"] >= size
    assert re.search(rf"-{arch}(:|$)", codeobject.amdgpu_metadata(binary)["amdhsa.target"])
    assert k[".wavefront_size"] == 64


@pytest.mark.parametrize("spec,arch", [x for x in ALL if x[1] != "sm_90"], ids=[i for i, x in zip(IDS, ALL) if x[1] != "sm_90"])
def test_amd_no_scratch_no_mfma_no_flags(built, spec, arch):
    binary, md = built[(spec, arch)]
    amd = md["amd"]
    assert amd["scratch_bytes"] == 0 and amd["vgpr_spill_count"] == 0, amd
    isa = md["_asm"]["amdgcn"]
    if spec.family == "grouped":
        assert re.search(r"^\s*v_mfma_f32_\w+", isa, re.M), "no MFMA instruction in a grouped kernel"
    else:
        assert not re.search(r"^\s*v_mfma", isa, re.M), "the depthwise kernel accumulates on the vector units"
        assert re.search(r"^\s*v_(fma|fmac|pk_fma)_f32", isa, re.M), "no fp32 FMA in a depthwise kernel"
    # no flag protocol: no agent-scope writeback / invalidate
    assert not re.search(r"^\s*buffer_(wbl2|inv)\b", isa, re.M)
    assert md["flags_per_cta"] == 0
    if spec.vec_c * {"bf16": 2, "fp16": 2, "fp32": 4}[spec.dtype] == 16:
        # gfx950 loads MMA operands straight into LDS (global_load_lds_dwordx4)
        assert re.search(r"^\s*(global|buffer)_load(_lds)?_dwordx4\b", isa, re.M), "no 16-byte channel-vector load"
    if spec.variant in ("atomic", "workspace"):  # fp32 atomics into dW, or into the workspace replica
        assert re.search(r"^\s*(global|buffer)_atomic_add_f32\b", isa, re.M)


@pytest.mark.parametrize("spec", specs(), ids=[s.label for s in specs()])
def test_sm90_no_local_memory_and_vector_loads(built, spec):
    _, md = built[(spec, "sm_90")]
    ptx = md["_asm"]["ptx"]
    assert ".local" not in ptx
    assert ("mma" in ptx) == (spec.family == "grouped")
    if spec.vec_c * {"bf16": 2, "fp16": 2, "fp32": 4}[spec.dtype] == 16:
        # dwconv: register loads; grouped: MMA operands through cp.async into shared memory
        assert re.search(r"ld\.global(\.\w+)*\.v4\.b32|cp\.async\.c[ag]\.shared\.global \[[^]]+\], \[[^]]+\], 0x10", ptx), "no 16-byte channel-vector load"


def test_grouped_rules_and_geometry():
    g = KernelSpec("grouped", "two_stage", "bf16", "bf16", vec_c=8, vec_k=8, bm=32, bn=64, bk=64, block=4)
    assert g.label == "grouped_bf16_2d_v8v8_g4_32x64x64_w4s2_two_stage"
    p = parse_problem("n=32,c=256,k=256,g=32,h=28,w=28,y=3,x=3,padding=1")  # ResNeXt: 8 channels per group
    g.check_problem(p)
    with pytest.raises(AbiError, match="multiple of 4"):
        g.check_problem(parse_problem("n=2,c=36,k=36,g=6,h=9,w=9,y=3,x=3"))
    with pytest.raises(AbiError, match="multiple of 8"):
        g.check_problem(parse_problem("n=2,c=4,k=4,g=4,h=9,w=9,y=3,x=3"))  # 4 groups x 1 channel
    with pytest.raises(AbiError, match="power of two"):
        KernelSpec("grouped", "direct", "bf16", "bf16", vec_c=8, vec_k=8, bm=32, bn=64, bk=64, block=3)
    geo = launch_geometry(p, "grouped", "two_stage", bm=32, bn=64, bk=64, ks_count=4, groups_per_tile=4)
    # packed: 8 groups of 32 -> 32 channels, 1 M tile x ceil(9 * 32 / 64) = 5 N tiles each
    assert geo.tiling.num_tiles == 8 * 1 * 5 and geo.grid == 40 * geo.ks_count
    assert geo.workspace.replicas == geo.ks_count and geo.workspace.arena_bytes("scratch") >= 4 * p.dw_numel * geo.ks_count
    assert (geo.scalars["G"], geo.scalars["C"], geo.scalars["K"]) == (32, 8, 8)  # the real problem
    assert grouped_ks_count(p, gb=4, bm=32, bn=64, bk=64, compute_units=132) == -(-2 * 132 // 40)
    with pytest.raises(ProblemError, match="divide"):
        launch_geometry(p, "grouped", "direct", bm=32, bn=64, bk=64, groups_per_tile=3)


def test_smoke_holds_every_variant_3d_and_vec1():
    ss = dwconv_specs("smoke", "gfx942", "bf16")
    assert {s.variant for s in ss} == {"workspace", "atomic", "two_stage"}
    assert any(s.spatial_dims == 3 for s in ss) and any(s.vec_c == 1 for s in ss)
    dflt = dwconv_specs("default", "sm_90", "bf16")
    # the pruned default: widths {1, W}, direct plus one split epilogue per dW dtype; two_stage in broad
    gather = [s for s in dflt if not s.mode.startswith("win")]
    assert {s.bn for s in gather} == {16, 32, 64} and {s.vec_c for s in dflt} == {1, 8}
    win = [s for s in dflt if s.mode.startswith("win")]  # the window kernels: the filter width, at W
    assert {s.bn for s in win} == {3, 5, 7} and {s.vec_c for s in win} == {8}
    # stride 1 and stride 2 along W (2-D only), the 3-wide filter at dilation 2 and in strips of 5
    assert {(s.bn, s.mode) for s in win} == {(3, "win7r3"), (5, "win7r5"), (7, "win7"), (3, "win7r3s2"), (5, "win7s2"), (7, "win7s2"),
                                             (3, "win7r3d2"), (3, "win5r3")}  # fmt: skip
    assert all(s.spatial_dims == 2 for s in win if s.dwconv_window.sw == 2)
    assert {s.mode for s in dwconv_specs("broad", "sm_90", "bf16") if s.dwconv_window.dl == 2} == {"win7r3d2"}
    assert {(s.variant, s.dw_dtype) for s in dflt} == {("direct", "bf16"), ("workspace", "bf16"), ("direct", "fp32"), ("atomic", "fp32")}
    broad = dwconv_specs("broad", "sm_90", "bf16")
    assert {s.vec_c for s in broad} == {1, 4, 8} and {(s.variant, s.dw_dtype) for s in broad} == {
        ("direct", "bf16"), ("two_stage", "bf16"), ("workspace", "bf16"), ("direct", "fp32"), ("atomic", "fp32"), ("two_stage", "fp32")}  # fmt: skip
    assert dwconv_specs("default", "sm_90", "bf16", tiles=("64x64x64",)) == []


# -- spec rules, labels, check_problem -------------------------------------------------------------
def test_label():
    assert dws().label == "dwconv_bf16_2d_v8_c64t16r4_w4s1_two_stage"
    assert dws("atomic", "fp16", "fp32", vec=1, sd=3, taps=32).label == "dwconv_fp16_dwfp32_3d_v1_c64t32r4_w4s1_atomic"
    assert dws(mode="taps").label == "dwconv_bf16_2d_v8_c64t16r4_w4s1_tapsinner_two_stage"
    with pytest.raises(AbiError, match="dwconv mode"):
        dws(mode="dp_sk")


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(variant="atomic"), "atomic epilogue"),
        (dict(vec=16), "vector width"),
        (dict(taps=12), "taps"),
        (dict(bc=4), "channels per CTA"),
        (dict(br=3), "rows per step"),
        (dict(bc=1024, taps=128, br=64), "65536"),
    ],
)
def test_spec_rules(kw, msg):
    with pytest.raises(AbiError, match=msg):
        dws(**kw)
    with pytest.raises(AbiError, match="precision"):
        KernelSpec("dwconv", "direct", "fp32", "fp32", vec_c=4, vec_k=4, bm=64, bn=16, bk=4, precision="tf32")
    with pytest.raises(AbiError, match="vector width"):
        KernelSpec("dwconv", "direct", "bf16", "bf16", vec_c=8, vec_k=4, bm=64, bn=16, bk=4)
    with pytest.raises(AbiError, match="dwconv epilogue"):
        declaration("dwconv", "linear")


def test_check_problem():
    s = dws(vec=8, taps=16)
    s.check_problem(parse_problem("n=2,c=144,k=144,g=144,h=9,w=9,y=3,x=3,padding=1"))
    s.check_problem(parse_problem("n=2,c=144,k=144,g=144,h=9,w=9,y=4,x=4,padding=1"))  # 16 taps fit
    for text, msg in [
        ("n=2,c=144,k=144,g=72,h=9,w=9,y=3,x=3", "depthwise"),
        ("n=2,c=100,k=100,g=100,h=9,w=9,y=3,x=3", "multiple of 8"),
        ("n=2,c=144,k=144,g=144,h=9,w=9,y=5,x=5", "25"),
        ("n=2,c=144,k=144,g=144,d=3,h=9,w=9,z=1,y=3,x=3", "2-D kernel"),
        ("n=2,c=144,k=144,g=144,h=9,w=9,y=3,x=3,dtype=fp16", "bf16 input"),
    ]:
        with pytest.raises(AbiError, match=msg):
            s.check_problem(parse_problem(text))
    # fp32 FMAs serve an ieee and a tf32 problem alike
    f = dws("direct", "fp32", vec=4)
    f.check_problem(parse_problem("n=2,c=8,k=8,g=8,h=9,w=9,y=3,x=3,dtype=fp32"))
    f.check_problem(parse_problem("n=2,c=8,k=8,g=8,h=9,w=9,y=3,x=3,dtype=fp32,precision=tf32"))


# -- launch geometry ---------------------------------------------------------------------------------
def test_geometry_grid_splits_and_workspace():
    p = parse_problem("n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,padding=1")
    steps = -(-p.n * p.ho * p.wo // 8)
    geo = launch_geometry(p, "dwconv", "two_stage", bm=64, bn=16, bk=8, ks_count=100)
    assert geo is not None and geo.family == "dwconv" and geo.partition is None
    assert geo.tiling.num_tiles == 3 and geo.tiling.iters_per_tile == steps
    assert geo.ks_iters == -(-steps // 100) and geo.ks_count == -(-steps // geo.ks_iters)
    assert geo.grid == 3 * geo.ks_count
    assert geo.workspace.replicas == geo.ks_count and geo.workspace.needs_stage2
    assert geo.workspace.arena_bytes("scratch") >= 4 * p.dw_numel * geo.ks_count == 4 * 144 * 9 * geo.ks_count
    assert geo.scalars["ws_bytes"] == geo.workspace.region("replicas").nbytes and geo.scalars["ks_count"] == geo.ks_count
    declaration("dwconv", "two_stage").pack({"dy": 16, "x": 32, "dw": 48, "ws_ptr": 64, **geo.scalars})
    wsg = dwconv_geometry(p, "workspace", bc=64, taps=16, br=8, ks_count=100)
    # one replica, accumulated with atomics: zero at rest in the zeroed arena, reset by Stage-2
    r = wsg.workspace.region("replicas")
    assert wsg.workspace.replicas == 1 and (r.arena, r.nbytes) == ("zeroed", 4 * p.dw_numel) and wsg.workspace.stage2_reset
    assert wsg.stage2_scalars == {"numel": p.dw_numel, "replicas": 1, "reset": 1} and wsg.scalars["ws_bytes"] == r.nbytes
    with pytest.raises(AbiError, match="workspace epilogue"):
        dws("workspace", "bf16", "fp32")
    at = dwconv_geometry(p, "atomic", bc=64, taps=16, br=8, ks_count=7)
    assert at.workspace.zero_dw and not at.workspace.needs_stage2 and "ws_bytes" not in at.scalars
    one = dwconv_geometry(p, "direct", bc=64, taps=16, br=8, ks_count=1)
    assert one.grid == 3 and one.ks_iters == steps
    with pytest.raises(ProblemError, match="ks_count"):
        dwconv_geometry(p, "two_stage", bc=64, taps=16, br=8, ks_count=steps + 1)
    with pytest.raises(AbiError):
        dwconv_geometry(p, "direct", bc=64, taps=16, br=8, ks_count=2)  # direct stores dW once
    with pytest.raises(ProblemError, match="depthwise"):
        dwconv_geometry(parse_problem("n=2,c=64,k=64,g=32,h=9,w=9,y=3,x=3"), "direct", bc=64, taps=16, br=8, ks_count=1)


@pytest.mark.parametrize("arch", ARCHES)
def test_ks_count_rule_fills_the_device(arch):
    cus = get_arch(arch).compute_units
    p = parse_problem("n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,padding=1")
    ks = dwconv_ks_count(p, bc=64, br=4, compute_units=cus)
    assert 3 * ks >= 4 * cus  # ~4 CTAs per CU/SM over the 3 channel blocks
    assert 3 * (ks - 1) < 4 * cus
    # a short reduction: each split keeps DWCONV_MIN_STEPS steps; never below 1
    small = parse_problem("n=1,c=384,k=384,g=384,h=14,w=14,y=7,x=7,padding=3")
    ks = dwconv_ks_count(small, bc=64, br=4, compute_units=cus)
    assert ks == max(1, 49 // DWCONV_MIN_STEPS)
    assert dwconv_ks_count(parse_problem("n=1,c=8,k=8,g=8,h=3,w=3,y=3,x=3,padding=1"), bc=64, br=4, compute_units=cus) == 1
    # the search's override still sizes a window kernel's split at ctas_per_cu CTAs per CU
    win2 = dwconv_ks_count(p, bc=16, br=64, compute_units=cus, mode="win7r3", ctas_per_cu=2)
    assert 9 * win2 >= 2 * cus and 9 * (win2 - 1) < 2 * cus  # 9 blocks of 16 channels
    assert dwconv_ks_count(p, bc=16, br=64, compute_units=cus, mode="win7r3", ctas_per_cu=4) > win2


def _win_cost(p, bc, br, mode, ks, cus):
    """The window rule's cost of the launch ks resolves to (restated from DWCONV_WIN_*)."""
    w = dwconv_window(mode)
    t = dwconv_tiling(p, bc, 1, br, mode)
    iters = -(-t.iters_per_tile // ks)
    ks = -(-t.iters_per_tile // iters)
    waves = -(-ks * t.num_tiles // (DWCONV_WIN_RESIDENT.get((w.tr, w.sw), DWCONV_WIN_CTAS_PER_CU) * cus))
    taps = w.tr * p.x
    per_channel = (bc / 128) / DWCONV_WIN_FIT_CHANNELS_PER_THREAD.get((w.tr, w.sw, p.x), 16 / 128)
    return waves * (DWCONV_WIN_CTA_COST + iters * br * w.bw * taps * per_channel) + DWCONV_WIN_ATOMIC_COST * ks * min(bc, p.g) * taps


WIN_ROWS = [  # (problem, BC, BR, mode): the default's window configurations, few to many channel blocks
    ("n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,padding=1", 16, 64, "win7r3"),
    ("n=32,c=16,k=16,g=16,h=113,w=113,y=3,x=3,padding=1", 16, 64, "win7r3"),
    ("n=16,c=24,k=24,g=24,h=112,w=112,y=3,x=3,stride=2,padding=1", 16, 32, "win7r3s2"),
    ("n=32,c=104,k=104,g=104,h=112,w=112,y=5,x=5,padding=2", 16, 16, "win7r5"),
    ("n=16,c=16,k=16,g=16,h=112,w=112,y=5,x=5,padding=2", 16, 16, "win7r5"),
    ("n=32,c=384,k=384,g=384,h=15,w=15,y=7,x=7,padding=3", 16, 32, "win7"),
    ("n=32,c=128,k=128,g=128,h=57,w=57,y=5,x=5,stride=2,padding=2", 16, 32, "win7s2"),
]


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("text,bc,br,mode", WIN_ROWS)
def test_window_ks_is_the_cheapest_searched_degree(arch, text, bc, br, mode):
    """A window kernel's own split is one the search times (DWCONV_WIN_SEARCH_CTAS_PER_CU, the
    override's degrees) and of those the one of least cost: whole waves of resident CTAs plus the
    splits' atomics into one channel block."""
    cus = get_arch(arch).compute_units
    p = parse_problem(text)
    searched = {c: dwconv_ks_count(p, bc=bc, br=br, compute_units=cus, mode=mode, ctas_per_cu=c) for c in DWCONV_WIN_SEARCH_CTAS_PER_CU}
    ks = dwconv_ks_count(p, bc=bc, br=br, compute_units=cus, mode=mode)
    assert ks in searched.values()
    cost = {k: _win_cost(p, bc, br, mode, k, cus) for k in searched.values()}
    assert cost[ks] == min(cost.values())
    assert ks == min(k for k in cost if cost[k] == cost[ks])  # fewer splits on a tie


def test_window_ks_follows_waves_and_atomics():
    """What the two terms do on the H200's 132 SMs: a split that spills a partial wave past the
    resident CTAs loses to one that fits; one channel block does not take hundreds of splits; a
    long reduction at 4+ resident CTAs per SM splits past 2 per SM."""
    cus = 132
    # 3x3 (2 resident per SM), 24 channel blocks, 54 steps: 5 steps x 264 CTAs (one wave) beats
    # 3 steps x 432 (two waves), however the other split degrees come out
    p = parse_problem("n=32,c=384,k=384,g=384,h=27,w=27,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32")
    ks = dwconv_ks_count(p, bc=16, br=64, compute_units=cus, mode="win7r3")
    t = dwconv_tiling(p, 16, 1, 64, "win7r3")
    assert DWCONV_WIN_RESIDENT[(3, 1)] == 2
    assert -(-ks * t.num_tiles // (2 * cus)) == 1 and ks * t.num_tiles > cus
    # one channel block, 1792 steps of 5x5: the atomics into its one block's dW keep it off the most
    # splits (8 CTAs per SM, 896), which the loop alone would take; at 16x the atomics' price (what
    # they cost before the epilogue without a shuffle tree, run D4) it stays at one CTA per SM
    one = parse_problem("n=16,c=16,k=16,g=16,h=112,w=112,y=5,x=5,padding=2,dtype=fp16,dw_dtype=fp32")
    ks = dwconv_ks_count(one, bc=16, br=16, compute_units=cus, mode="win7r5")
    assert ks < dwconv_ks_count(one, bc=16, br=16, compute_units=cus, mode="win7r5", ctas_per_cu=8)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(launch, "DWCONV_WIN_ATOMIC_COST", 16 * launch.DWCONV_WIN_ATOMIC_COST)
        assert dwconv_ks_count(one, bc=16, br=16, compute_units=cus, mode="win7r5") <= cus
    # 4 channel blocks, 3584 steps of 5x5 (4 resident per SM): more than 2 CTAs per SM
    big = parse_problem("n=32,c=64,k=64,g=64,h=112,w=112,y=5,x=5,padding=2,dtype=bf16,dw_dtype=fp32")
    ks = dwconv_ks_count(big, bc=16, br=16, compute_units=cus, mode="win7r5")
    assert ks * 4 > 2 * cus
    assert ks > dwconv_ks_count(big, bc=16, br=16, compute_units=cus, mode="win7r5", ctas_per_cu=2)


def test_window_ks_prices_channels_per_thread():
    """The 32-channel 3x3 kernel (32 strips: a step is the same 1024 channel-strips over 128 threads
    as the 16-channel kernel's 64) is priced like that one: the same CTAs in all where both have whole
    channel blocks. The same 32 channels over a wave64 CTA (256 threads) hold half as many a thread
    and split no more."""
    cus = 132
    p = parse_problem("n=32,c=256,k=256,g=256,h=56,w=56,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32")
    narrow = dwconv_ks_count(p, bc=16, br=64, compute_units=cus, mode="win7r3", resident=2)
    wide = dwconv_ks_count(p, bc=32, br=32, compute_units=cus, mode="win7r3", resident=2)
    ctas_wide, ctas_narrow = wide * dwconv_tiling(p, 32, 1, 32, "win7r3").num_tiles, narrow * dwconv_tiling(p, 16, 1, 64, "win7r3").num_tiles
    assert abs(ctas_wide - ctas_narrow) < 16  # the same searched CTAs per CU, up to the degree's rounding
    wave64 = dwconv_ks_count(p, bc=32, br=32, compute_units=cus, mode="win7r3", resident=2, threads=256)
    assert wave64 <= wide


def test_window_split_fills_the_sms_on_small_layers():
    """Where DWCONV_WIN_MIN_STEPS would leave SMs idle (136 channels of 13 px on 32 images: 9
    channel blocks x 13 steps, at most 6 splits of 2 steps = 54 CTAs on 132 SMs), a split may go
    down to one step: the rule now runs 117 CTAs, and the rule before it (fill_wave=False)
    stays below. A layer whose capped degree already fills the SMs is unchanged."""
    cus = 132
    small = parse_problem("n=32,c=136,k=136,g=136,h=13,w=13,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32")
    t = dwconv_tiling(small, 16, 1, 64, "win7r3")
    assert (t.num_tiles, t.iters_per_tile) == (9, 13)
    ks = dwconv_ks_count(small, bc=16, br=64, compute_units=cus, mode="win7r3")
    before = dwconv_ks_count(small, bc=16, br=64, compute_units=cus, mode="win7r3", fill_wave=False)
    assert before * t.num_tiles < cus
    assert ks == 13 and ks * t.num_tiles > before * t.num_tiles  # one step a split: 117 CTAs, not 54 (or 45)
    big = parse_problem("n=32,c=384,k=384,g=384,h=27,w=27,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32")
    assert dwconv_ks_count(big, bc=16, br=64, compute_units=cus, mode="win7r3") == dwconv_ks_count(
        big, bc=16, br=64, compute_units=cus, mode="win7r3", fill_wave=False
    )
    # the gather kernels keep DWCONV_MIN_STEPS
    assert dwconv_ks_count(small, bc=64, br=4, compute_units=cus) == dwconv_ks_count(small, bc=64, br=4, compute_units=cus, fill_wave=False)
