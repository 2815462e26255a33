"""The one-group-per-CTA family (``grouped_taps``): spec rules, tap batches, launch geometry,
selection on the fake device, interpreter numerics, and the compiled objects for gfx942, gfx950
and sm_90, all on CPU.

What the family promises: a CTA computes one group's own K x (taps x C) GEMM (no block-diagonal
packing), so its matrix instructions are sized to the group; every x and dy load is a 16-byte
channel vector (its masks are constant along the channels); split-K adds with fp32 atomics into
dW (atomic) or the workspace replica (workspace), or one split stores dW (direct).
"""

from __future__ import annotations

import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_launcher_fakes as F  # noqa: E402
from _interp import run_interpreter  # noqa: E402
from test_kernels_compile import _build  # noqa: E402

from skwgrad.abi.conv import parse_problem  # noqa: E402
from skwgrad.abi.kernargs import declaration  # noqa: E402
from skwgrad.abi.launch import GROUPED_TAPS_CTAS_PER_CU, grouped_taps_geometry, grouped_taps_ks_count, spec_geometry  # noqa: E402
from skwgrad.abi.spec import GROUPED_TAPS_ACC_PER_THREAD, KernelSpec, grouped_taps_batches  # noqa: E402
from skwgrad.aot.sweep import grouped_taps_specs  # noqa: E402
from skwgrad.errors import AbiError, ProblemError  # noqa: E402


def gt(variant="atomic", dtype="bf16", dw=None, *, cg=16, kg=None, bk=64, taps=9, warps=4, stages=3, sd=2):
    dw = dw or ("fp32" if variant == "atomic" else dtype)
    return KernelSpec("grouped_taps", variant, dtype, dw, spatial_dims=sd, bm=kg or cg, bn=cg, bk=bk, block=taps,
                      num_warps=warps, num_stages=stages, precision="ieee" if dtype == "fp32" else "")  # fmt: skip


# -- tap batches, spec rules, labels ---------------------------------------------------------------
@pytest.mark.parametrize("taps,want", [(1, (1, 1)), (2, (2, 1)), (3, (2, 1)), (9, (8, 1)), (25, (16, 16)), (27, (16, 16)), (49, (32, 32)), (12, (8, 4))])
def test_tap_batches_cover_the_filter_with_two_powers_of_two(taps, want):
    nt1, nt2 = grouped_taps_batches(taps)
    assert (nt1, nt2) == want
    assert nt1 <= taps <= nt1 + nt2 and nt1 & (nt1 - 1) == 0 and nt2 & (nt2 - 1) == 0
    assert taps - nt1 <= nt2 < 2 * max(1, taps - nt1)  # the second batch wastes less than half its slots


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(cg=24), "8, 16 or 32"),
        (dict(cg=64), "8, 16 or 32"),
        (dict(bk=48), "power of two"),
        (dict(taps=0), "1..64"),
        (dict(variant="atomic", dw="bf16"), "must be fp32"),
        (dict(variant="workspace", dw="fp32"), "input dtype"),
        (dict(variant="two_stage"), "epilogue"),
        (dict(warps=2), "num_warps"),
        (dict(cg=32, warps=4), "accumulator"),  # 32 x 32 x 9 slots... 16 slots = 128 a thread at 4 warps
        (dict(dtype="fp32", dw="fp32", variant="direct"), None),  # fp32 takes a precision: valid
    ],
)
def test_spec_rules(kw, match):
    if match is None:
        gt(**kw)
        return
    with pytest.raises(AbiError, match=match):
        gt(**kw)


def test_label_names_what_changes_the_object():
    a, b = gt("atomic"), gt("workspace")
    assert a.label == "grouped_taps_bf16_dwfp32_2d_k16c16_t9_r64_w4s3_atomic"
    assert b.label == "grouped_taps_bf16_2d_k16c16_t9_r64_w4s3_workspace"
    labels = {gt(cg=8, bk=128).label, gt(taps=25, warps=8).label, gt(sd=3, taps=27, warps=8).label, gt(kg=32, warps=8).label, a.label}
    assert len(labels) == 5


def test_check_problem_refuses_what_the_kernel_did_not_bake_in():
    s = gt("atomic")
    s.check_problem(parse_problem("n=2,c=32,k=32,g=2,h=7,w=7,y=3,x=3,padding=1,dw_dtype=fp32"))
    for bad, match in [
        ("n=2,c=64,k=64,g=2,h=7,w=7,y=3,x=3,padding=1,dw_dtype=fp32", "exactly K = 16 and C = 16"),
        ("n=2,c=32,k=64,g=2,h=7,w=7,y=3,x=3,padding=1,dw_dtype=fp32", "exactly K = 16 and C = 16"),
        ("n=2,c=32,k=32,g=2,h=7,w=7,y=5,x=5,padding=2,dw_dtype=fp32", "9-tap"),
        ("n=2,c=32,k=32,g=2,h=7,w=7,y=3,x=3,padding=1", "bf16 / bf16"),
        ("n=2,c=32,k=32,g=2,d=4,h=7,w=7,z=1,y=3,x=3,padding=1,dw_dtype=fp32", "2-D kernel"),
    ]:
        with pytest.raises(AbiError, match=match):
            s.check_problem(parse_problem(bad))


def test_kernargs_are_the_grouped_prefix():
    assert declaration("grouped_taps", "atomic").source_names == declaration("grouped", "atomic").source_names
    with pytest.raises(AbiError, match="epilogue"):
        declaration("grouped_taps", "two_stage")


# -- geometry ----------------------------------------------------------------------------------------
def test_geometry_splits_cover_every_step_once():
    p = parse_problem("n=4,c=256,k=256,g=16,h=14,w=14,y=3,x=3,padding=1,dw_dtype=fp32")
    steps = -(-4 * 14 * 14 // 64)
    for ks in (1, 2, 5, steps):
        geo = grouped_taps_geometry(p, "atomic", bk=64, ks_count=ks)
        assert geo.ks_iters * geo.ks_count >= steps > geo.ks_iters * (geo.ks_count - 1)
        assert geo.grid == 16 * geo.ks_count and geo.workspace.zero_dw
    with pytest.raises(ProblemError, match="ks_count"):
        grouped_taps_geometry(p, "atomic", bk=64, ks_count=steps + 1)
    with pytest.raises(ProblemError, match="direct"):
        grouped_taps_geometry(p, "direct", bk=64, ks_count=2)
    ws = grouped_taps_geometry(parse_problem("n=4,c=256,k=256,g=16,h=14,w=14,y=3,x=3,padding=1"), "workspace", bk=64, ks_count=3)
    assert ws.workspace.replicas == 1 and ws.scalars["ws_bytes"] == 4 * ws.problem.dw_numel
    assert spec_geometry(p, gt("atomic"), ks_count=3).grid == grouped_taps_geometry(p, "atomic", bk=64, ks_count=3).grid


def test_ks_rule_fills_the_device_and_stops_at_the_steps():
    p = parse_problem("n=32,c=768,k=768,g=48,h=15,w=15,y=3,x=3,padding=1,dw_dtype=fp32")
    n = grouped_taps_ks_count(p, bk=64, compute_units=132)
    assert n == -(-GROUPED_TAPS_CTAS_PER_CU * 132 // 48)
    tiny = parse_problem("n=1,c=32,k=32,g=2,h=4,w=4,y=3,x=3,padding=1,dw_dtype=fp32")
    assert grouped_taps_ks_count(tiny, bk=64, compute_units=132) == 1  # 16 rows: one step


# -- selection on the fake device ----------------------------------------------------------------------
PROBLEMS = [
    "n=3,c=32,k=32,g=2,h=9,w=7,y=3,x=3,padding=1",
    "n=4,c=48,k=48,g=3,h=10,w=10,y=3,x=3,stride=2,padding=1",
    "n=2,c=32,k=32,g=2,h=10,w=9,y=3,x=3",  # no padding: a smaller output
]


@pytest.mark.parametrize("variant,ks", [("atomic", 1), ("atomic", 4), ("workspace", 3), ("direct", 1)])
@pytest.mark.parametrize("pi", range(len(PROBLEMS)))
def test_plans_launch_what_the_reference_computes(variant, ks, pi):
    from skwgrad.launcher.hostdata import from_bits
    from skwgrad.launcher.plan import Kernel, Plan
    from skwgrad.reference import relative_error

    s = gt(variant, bk=16)
    p = parse_problem(PROBLEMS[pi] + f",dw_dtype={s.dw_dtype}")
    c, be = F.FakeCache(), F.FakeBackend()
    k = Kernel.from_entry(c.add(s, "sm_90"), c)
    st2 = Kernel.from_entry(c.add(F.stage2(s.dw_dtype), "sm_90"), c) if variant == "workspace" else None
    plan = Plan(p, k, be, ks_count=ks, stage2=st2)
    assert plan.grid == p.g * plan.ks_count
    xp, dyp, dwp, ref = F.random_device_inputs(be, p)
    plan.poison(dw=dwp)
    plan.launch(dyp, xp, dwp)
    got = from_bits(be.read_array(dwp, p.dw_numel, p.dw_dtype), p.dw_dtype).reshape(p.dw_shape)
    assert relative_error(got, ref) < (1e-2 if p.dw_dtype == "bf16" else 1e-5)
    assert plan.zeroed_bytes_nonzero() == 0


def test_selection_takes_the_family_where_it_applies():
    from skwgrad.aot.sweep import sweep
    from skwgrad.launcher import select as S

    c = F.FakeCache()
    for it in sweep("default", ["sm_90"], ["bf16", "fp32"]):
        c.add(it.spec, it.arch)
    p = parse_problem("n=64,c=768,k=768,g=48,h=15,w=15,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32")
    ch = S.choose(p, c, arch="sm_90", cus=132)
    assert ch.spec.family == "grouped_taps" and ch.spec.variant == "atomic" and ch.stage2 is None
    assert ch.ks_count == grouped_taps_ks_count(p, bk=ch.spec.bk, compute_units=132)
    ch16 = S.choose(parse_problem("n=64,c=768,k=768,g=48,h=15,w=15,y=3,x=3,padding=1,dtype=bf16"), c, arch="sm_90", cus=132)
    assert ch16.spec.family == "grouped_taps" and ch16.spec.variant == "workspace" and ch16.stage2 is not None
    for text in (
        "n=32,c=768,k=768,g=12,h=14,w=14,y=3,x=3,padding=1,dtype=bf16",  # 64 channels a group: not built
        "n=32,c=256,k=256,g=64,h=14,w=14,y=3,x=3,padding=1,dtype=bf16",  # 4 channels a group: not built
        "n=32,c=768,k=768,g=48,h=15,w=15,y=5,x=5,padding=2,dtype=bf16",  # 5x5: not built
        "n=32,c=768,k=768,g=48,h=15,w=15,y=3,x=3,padding=1,dtype=fp32,precision=tf32",  # fp32 input
    ):
        assert S.choose(parse_problem(text), c, arch="sm_90", cus=132).spec.family != "grouped_taps", text
    assert S.choose(p, c, arch="sm_90", cus=132, deterministic=True).spec.family != "grouped_taps"
    assert S.choose(p, c, arch="sm_90", cus=132, reduction="two_stage").spec.family != "grouped_taps"
    everything = S.all_choices(p, c, arch="sm_90", cus=132)
    assert everything[0].spec.family == "grouped_taps" and everything[0].ks_count == ch.ks_count  # auto's launch leads
    assert len({x.ks_count for x in everything if x.spec.family == "grouped_taps"}) >= 3


# -- interpreter numerics (fp16 and fp32: the interpreter's bf16 is not faithful) -----------------------
SHAPES = {
    "s1": "n=2,c=32,k=32,g=2,h=7,w=6,y=3,x=3,padding=1",
    "s2": "n=2,c=32,k=32,g=2,h=9,w=8,y=3,x=3,stride=2,padding=1",
    "dil": "n=2,c=16,k=16,g=2,h=8,w=8,y=3,x=3,padding=2,dilation=2",
    "asym": "n=2,c=32,k=32,g=2,h=7,w=7,y=3,x=3,pad_lo=0x1,pad_hi=2x1",
    "k5": "n=1,c=32,k=64,g=2,h=8,w=7,y=5,x=5,padding=2",
    "k1x3": "n=3,c=48,k=48,g=3,h=5,w=6,y=1,x=3,padding=1",
    "c8": "n=2,c=32,k=32,g=4,h=6,w=6,y=3,x=3,padding=1",
    "3d": "n=1,c=32,k=32,g=2,d=4,h=5,w=5,z=3,y=3,x=3,padding=1",
}


def _case(cid, shape, sp, ks):
    p = SHAPES[shape] + f",dtype={sp.dtype}" + (f",dw_dtype={sp.dw_dtype}" if sp.dw_dtype != sp.dtype else "")
    return dict(id=cid, problem=p, spec=sp.to_dict(), ks_count=ks)


def interp_cases():
    return [
        _case("atomic_s1", "s1", gt("atomic", "fp16", bk=16), 3),
        _case("atomic_s1_every_step", "s1", gt("atomic", "fp16", bk=16), 6),
        _case("workspace_s2", "s2", gt("workspace", "fp16", bk=16), 2),
        _case("direct_dil", "dil", gt("direct", "fp16", cg=8, bk=16), 1),
        _case("atomic_asym", "asym", gt("atomic", "fp16", bk=32), 2),
        _case("workspace_k5_k32", "k5", gt("workspace", "fp16", kg=32, taps=25, warps=8, bk=16), 4),
        _case("atomic_k1x3_fp32", "k1x3", gt("atomic", "fp32", "fp32", taps=3, bk=16), 2),
        _case("atomic_c8", "c8", gt("atomic", "fp16", cg=8, bk=16), 2),
        _case("workspace_3d", "3d", gt("workspace", "fp16", taps=27, sd=3, warps=8, bk=16), 2),
    ]


@pytest.fixture(scope="module")
def interp_results():
    return run_interpreter(interp_cases(), timeout=900)


@pytest.mark.parametrize("cid", [c["id"] for c in interp_cases()])
def test_interpreter_numerics(interp_results, cid):
    r = interp_results[cid]
    assert r["rel_err"] <= r["tol"], r
    assert r["zeroed_left_nonzero"] == 0, r


def test_interpreter_cases_ran_the_splits_they_name(interp_results):
    for c in interp_cases():
        assert interp_results[c["id"]]["ks_count"] == c["ks_count"], c["id"]
    assert interp_results["atomic_s1_every_step"]["ks_count"] == -(-2 * 7 * 6 // 16)  # one step a split


# -- compiled objects ------------------------------------------------------------------------------------
ARCHES = ("gfx942", "gfx950", "sm_90")


def compile_specs(arch):
    """The default preset's kernels for ``arch`` (bf16), and a direct one."""
    from skwgrad.abi.arch import ARCHES as TARGETS

    return grouped_taps_specs("default", arch, "bf16")[1::2] + [gt("direct", "fp16", stages=TARGETS[arch].default_stages)]


ALL = [(s, a) for a in ARCHES for s in compile_specs(a)]
IDS = [f"{a}-{s.label}" for s, a in ALL]


@pytest.fixture(scope="module")
def built():
    with ProcessPoolExecutor(2) as ex:
        return {(s, a): (b, m) for s, a, b, m in ex.map(_build, ALL)}


@pytest.mark.parametrize("spec,arch", ALL, ids=IDS)
def test_objects_match_the_declaration_without_spills(built, spec, arch):
    from skwgrad.abi import codeobject

    binary, md = built[(spec, arch)]
    slots, _ = spec.kernarg_decl.layout(md["kernarg"]["tail_pointers"])
    assert md["kernarg"]["names"] == list(declaration("grouped_taps", spec.variant).names)
    assert md["flags_per_cta"] == 0
    if arch == "sm_90":
        params = codeobject.ptx_params(md["_asm"]["ptx"], md["name"])
        assert [(p["offset"], p["size"]) for p in params] == [(s.offset, s.arg.size) for s in slots]
        ptx = md["_asm"]["ptx"]
        assert ".local" not in ptx and md["stack_bytes"] == 0
        assert "mma.sync" in ptx  # the group's own MMA (wgmma needs 64 rows)
        # 16-byte x vectors: through cp.async into shared memory, or (8 channels) into registers
        assert re.search(r"ld\.global(\.\w+)*\.v4\.b32|cp\.async\.c[ag]\.shared\.global \[[^]]+\], \[[^]]+\], 0x10", ptx), "no 16-byte channel-vector load"
        return
    amd = md["amd"]
    assert amd["scratch_bytes"] == 0 and amd["vgpr_spill_count"] == 0, amd
    k = codeobject.amdgpu_kernel(binary, md["name"])
    explicit = [a for a in k[".args"] if not a[".value_kind"].startswith("hidden_")]
    assert [(a[".offset"], a[".size"]) for a in explicit] == [(s.offset, s.arg.size) for s in slots]
    isa = md["_asm"]["amdgcn"]
    if min(spec.bm, spec.bn) >= 16:
        assert re.search(r"^\s*v_mfma_f32_\w+", isa, re.M), "no MFMA instruction"
    if spec.variant != "direct":
        assert re.search(r"^\s*(global|buffer)_atomic_add_f32\b", isa, re.M)
    assert not re.search(r"^\s*buffer_(wbl2|inv)\b", isa, re.M)  # no flag protocol
    assert md["shared"] <= {"gfx942": 64 * 1024, "gfx950": 160 * 1024}[arch]


def test_default_preset_kernels_fit_the_accumulator_rule():
    for arch in ARCHES:
        for s in grouped_taps_specs("default", arch, "bf16"):
            nt1, nt2 = grouped_taps_batches(s.block)
            assert s.bm * s.bn * (nt1 + nt2) <= GROUPED_TAPS_ACC_PER_THREAD * 32 * s.num_warps
        assert grouped_taps_specs("default", arch, "fp32") == []
