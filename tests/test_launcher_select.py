"""Selection: the search space (split-K degrees, stream-K pools, no all-DP partitions), ranking by
the cost model (deterministic, explained, the model's argmin on synthetic constants), explicit
modes and reductions; the widest admitted channel vectors; tuned choices; the missing-kernel
message and its compile-all command."""

from __future__ import annotations

import math
import re
import shlex
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_launcher_fakes as F  # noqa: E402

from skwgrad.abi.spec import STAGE2_UNROLL, KernelSpec  # noqa: E402
from skwgrad.abi.conv import ConvProblem, parse_problem  # noqa: E402
from skwgrad.abi.costmodel import TERMS, CostModel  # noqa: E402
from skwgrad.abi.launch import launch_geometry  # noqa: E402
from skwgrad.errors import ProblemError  # noqa: E402
from skwgrad.launcher import select as S  # noqa: E402
from skwgrad.launcher.options import LaunchOptions  # noqa: E402

# 64x64 output channels over a long reduction: 9 tiles of 32x32 (C*Y*X = 64*9 = 576 -> 18 N tiles
# x 2 M tiles = 36 with 32x32), iterations per tile = N*H*W / 32.
FEW_LONG = parse_problem("n=8,c=16,k=32,h=32,w=32,y=3,x=3,padding=1")  # 1 x 5 tiles, 256 iterations
MANY_SHORT = parse_problem("n=1,c=64,k=256,h=8,w=8,y=3,x=3,padding=1")  # 8 x 18 tiles, 2 iterations


def occ(n):
    return lambda k: n


def test_problem_fixtures_are_what_the_tests_assume():
    t = FEW_LONG.tiling(32, 32, 32)
    assert t.num_tiles == 5 and t.iters_per_tile == 256 == S.SK_MIN_ITERS
    t = MANY_SHORT.tiling(32, 32, 32)
    assert t.num_tiles == 144 and t.iters_per_tile == 2


def _model(**consts):
    """A cost model whose only non-zero constants are ``consts`` (term name -> us per unit)."""
    return CostModel("sm_90", tuple(float(consts.get(t, 0.0)) for t in TERMS), source="test")


def test_auto_takes_the_candidate_the_model_predicts_fastest():
    c = F.full_cache()
    o = LaunchOptions()
    for consts in ({"main_iter": 1.0}, {"launch": 1.0, "main_iter": 1e-6}, {"main_iter": 1.0, "fixup_serial": 1e3, "stage2": 1e3},
                   {"epilogue": 1.0, "launch": 0.5}):  # fmt: skip
        m = _model(**consts)
        r = S.rank_choices(FEW_LONG, c, arch="sm_90", cus=8, options=o, occupancy=occ(2), model=m)
        preds = [ch.predicted_us for ch in r.choices]
        assert preds == sorted(preds) and len(preds) > 10
        for ch in r.choices:  # each prediction is the model's dot product of the launch's terms
            assert ch.predicted_us == pytest.approx(sum(v * ch.terms.as_dict()[t] for t, v in consts.items()))
        pick = S.choose(FEW_LONG, c, arch="sm_90", cus=8, occupancy=occ(2), model=m)
        assert (pick.kernel.key, pick.pool, pick.ks_count) == (r.choices[0].kernel.key, r.choices[0].pool, r.choices[0].ks_count)
        assert pick.reason.startswith("model (test):") and "runner-up" in pick.reason
    # only the main loop's critical path counts: stream-K (balanced iterations) or the most splits
    best = S.choose(FEW_LONG, c, arch="sm_90", cus=8, occupancy=occ(2), model=_model(main_iter=1.0))
    assert best.terms.path_iters == min(ch.terms.path_iters for ch in S.rank_choices(
        FEW_LONG, c, arch="sm_90", cus=8, options=o, occupancy=occ(2), model=_model(main_iter=1.0)).choices)
    # launches dominate: one kernel (direct split-K or a linear/tree stream-K), never a Stage-2
    one = S.choose(FEW_LONG, c, arch="sm_90", cus=8, occupancy=occ(2), model=_model(launch=1.0, main_iter=1e-6))
    assert one.stage2 is None and one.spec.variant in ("direct", "linear", "tree")
    # serial fix-ups and extra launches priced out: what is left is one direct split-K kernel
    flat = S.choose(FEW_LONG, c, arch="sm_90", cus=8, occupancy=occ(2), model=_model(main_iter=1.0, fixup_serial=1e3, launch=1e3))
    assert (flat.spec.family, flat.spec.variant, flat.ks_count) == ("wgrad", "direct", 1)
    # the Stage-2 chain priced (STAGE2_UNROLL replicas a step): among the split-K launches that
    # need Stage-2, the fewest steps win; stream-K's single workspace replica beats them all
    chain = _model(stage2_chain=1.0, main_iter=1e-6)
    ranked = S.rank_choices(FEW_LONG, c, arch="sm_90", cus=8, options=LaunchOptions(streamk="off", reduction="two_stage"),
                            occupancy=occ(2), model=chain).choices  # fmt: skip
    steps = lambda ch: math.ceil(ch.ks_count / STAGE2_UNROLL)  # noqa: E731 (the reduce loads STAGE2_UNROLL replicas a step)
    assert steps(ranked[0]) == min(map(steps, ranked)) < max(map(steps, ranked))
    ws = S.choose(FEW_LONG, c, arch="sm_90", cus=8, occupancy=occ(2), model=_model(stage2_chain=1.0, launch=1e-3, main_iter=1e-6),
                  reduction="workspace")  # fmt: skip
    assert ws.terms.as_dict()["stage2_chain"] == 1.0 and ws.predicted_us == pytest.approx(1.0 + 2e-3 + 1e-6 * ws.terms.path_iters)


def test_ranking_is_deterministic_and_explains_rejections():
    c = F.full_cache()
    a = S.rank_choices(FEW_LONG, c, arch="sm_90", cus=8, options=LaunchOptions(), occupancy=occ(2))
    b = S.rank_choices(FEW_LONG, c, arch="sm_90", cus=8, options=LaunchOptions(), occupancy=occ(2))
    assert [(x.kernel.key, x.pool, x.ks_count) for x in a.choices] == [(x.kernel.key, x.pool, x.ks_count) for x in b.choices]
    assert len({(x.kernel.key, x.pool, x.ks_count) for x in a.choices}) == len(a.choices)  # no duplicate launch
    # without a Stage-2 reduce, workspace and two_stage kernels are rejected, with the reason
    c2 = F.full_cache()
    c2._entries = {k: e for k, e in c2._entries.items() if e.spec.family != "stage2"}
    r = S.rank_choices(FEW_LONG, c2, arch="sm_90", cus=8, options=LaunchOptions(), occupancy=occ(2))
    assert r.choices and all(x.spec.variant not in ("workspace", "two_stage") for x in r.choices)
    assert any("Stage-2" in x.why for x in r.rejected)
    # a waiting reduction is never offered a pool larger than what is co-resident
    assert all(x.pool <= 2 * 8 for x in a.choices if x.spec.variant in ("linear", "tree"))


def test_auto_never_launches_an_all_data_parallel_partition():
    """The seed's review finding: a one-tile shape whose iterations are fewer than the pool
    resolves to an all-DP partition (stream-K overheads, no stream-K work); auto never offers it."""
    p = parse_problem("n=1,c=8,k=32,h=64,w=136,y=2,x=2")  # 1 tile of 32x32, 63*135/32 -> 266 iterations
    t = p.tiling(32, 32, 32)
    assert t.num_tiles == 1 and S.SK_MIN_ITERS <= t.iters_per_tile < 4 * 80
    c = F.FakeCache()
    c.add(F.spec("wgrad_sk", "workspace", "bf16", mode="dp_sk", vc=8, vk=8))
    c.add(F.spec("wgrad", "direct", "bf16", vc=8, vk=8))
    c.add(F.spec("wgrad", "two_stage", "bf16", vc=8, vk=8))
    c.add(F.stage2("bf16"))
    geo = launch_geometry(p, "wgrad_sk", "workspace", bm=32, bn=32, bk=32, mode="dp_sk", pool=4 * 80)
    assert geo.partition.sk_ctas == 0
    r = S.rank_choices(p, c, arch="sm_90", cus=80, options=LaunchOptions())
    sk = [x for x in r.choices if x.spec.family == "wgrad_sk"]
    assert {x.pool for x in sk} == {80, 160, 240}  # 320 is all-DP
    assert any("all data-parallel" in x.why for x in r.rejected)
    # asked for, the pool is launched as given
    ch = S.choose(p, c, arch="sm_90", cus=80, streamk="dp_sk", streamk_ctas=320)
    assert ch.pool == 320


def test_split_k_degrees_cover_one_to_eight_ctas_per_cu():
    c = F.full_cache()
    r = S.rank_choices(FEW_LONG, c, arch="sm_90", cus=132, options=LaunchOptions(streamk="off"), occupancy=occ(2))
    two = {x.ks_count for x in r.choices if x.spec.variant == "two_stage" and (x.spec.bm, x.spec.bn, x.spec.bk) == (32, 32, 32)}
    want = {min(256, -(-m * 132 // 5)) for m in S.SPLITK_CTAS_PER_CU}  # 5 tiles: 27, 53, 80, ... splits
    assert two == {-(-256 // -(-256 // n)) for n in want}  # as launched: empty trailing splits dropped
    assert {x.ks_count for x in r.choices if x.spec.variant == "direct"} == {1}
    short = S.rank_choices(MANY_SHORT, c, arch="sm_90", cus=8, options=LaunchOptions(streamk="off"), occupancy=occ(4))
    assert {x.ks_count for x in short.choices if x.spec.variant == "two_stage"} <= {2}  # 2 iterations per tile
    forced = S.rank_choices(FEW_LONG, c, arch="sm_90", cus=8, options=LaunchOptions(reduction="two_stage", ks_count=5))
    assert {x.ks_count for x in forced.choices} == {5}


def test_explicit_modes_reductions_and_knobs():
    c = F.full_cache()
    for mode in ("dp_sk", "persistent"):
        for red in ("linear", "tree", "workspace"):
            ch = S.choose(MANY_SHORT, c, arch="sm_90", cus=8, streamk=mode, reduction=red)
            assert (ch.spec.mode, ch.spec.variant) == (mode, red)
    pf = ConvProblem.from_torch(batch=8, in_channels=16, out_channels=32, input_size=(32, 32), kernel_size=3, padding=1, dw_dtype="fp32")
    ch = S.choose(pf, c, arch="sm_90", cus=8, streamk="persistent", reduction="atomic", streamk_ctas=7)
    assert (ch.spec.variant, ch.pool, ch.spec.dw_dtype) == ("atomic", 7, "fp32")
    ch = S.choose(pf, c, arch="sm_90", cus=8, streamk="off", reduction="atomic", ks_count=3)
    assert (ch.spec.family, ch.spec.variant, ch.ks_count) == ("wgrad", "atomic", 3)
    ch = S.choose(FEW_LONG, c, arch="sm_90", cus=8, reduction="linear")  # a stream-K-only reduction implies stream-K
    assert ch.spec.family == "wgrad_sk" and ch.spec.variant == "linear"
    ch = S.choose(FEW_LONG, c, arch="sm_90", cus=8, reduction="two_stage", ks_count=5)
    assert (ch.spec.variant, ch.ks_count) == ("two_stage", 5)
    # workspace is a split-K epilogue too: any ks_count, one replica, the Stage-2 reduce
    for ks in (1, 5, 256):
        ch = S.choose(FEW_LONG, c, arch="sm_90", cus=8, streamk="off", reduction="workspace", ks_count=ks)
        assert (ch.spec.family, ch.spec.variant, ch.ks_count) == ("wgrad", "workspace", ks) and ch.stage2 is not None
        assert ch.plan(FEW_LONG, F.FakeBackend(cus=8)).geometry.stage2_scalars["replicas"] == 1
    # ... and a stream-K reduction: unforced, either family may run it
    both = S.rank_choices(FEW_LONG, c, arch="sm_90", cus=8, options=LaunchOptions(reduction="workspace"), occupancy=occ(2))
    assert {x.spec.family for x in both.choices} == {"wgrad", "wgrad_sk"} and {x.spec.variant for x in both.choices} == {"workspace"}
    with pytest.raises(ProblemError, match="stream-K reduction"):
        S.choose(FEW_LONG, c, arch="sm_90", cus=8, streamk="off", reduction="linear")
    with pytest.raises(ProblemError, match="split-K epilogue"):
        S.choose(FEW_LONG, c, arch="sm_90", cus=8, streamk="dp_sk", reduction="two_stage")
    with pytest.raises(ProblemError, match="ks_count"):
        S.choose(FEW_LONG, c, arch="sm_90", cus=8, streamk="dp_sk", ks_count=2)
    with pytest.raises(ProblemError, match="must be fp32"):
        S.choose(FEW_LONG, c, arch="sm_90", cus=8, reduction="atomic")
    with pytest.raises(ProblemError, match="streamk_ctas"):
        S.choose(FEW_LONG, c, arch="sm_90", cus=8, streamk="dp_sk", streamk_ctas=0)
    with pytest.raises(ProblemError, match="direct"):
        S.choose(FEW_LONG, c, arch="sm_90", cus=8, streamk="off", reduction="direct", ks_count=2)
    with pytest.raises(ProblemError, match="streamk="):
        S.choose(FEW_LONG, c, arch="sm_90", cus=8, streamk="on")


def test_deterministic_requests_never_take_the_workspace_epilogue():
    """Split-K workspace adds with atomics, like the stream-K workspace reduction: not bit-identical
    launch to launch, so a deterministic request rejects it (with the reason), and asking for it
    deterministically is refused before any selection."""
    c = F.full_cache()
    grouped = parse_problem("n=4,c=32,k=32,g=4,h=16,w=16,y=3,x=3,padding=1")  # 8 channels per group: packed tiles too
    for v in ("two_stage", "workspace"):  # 4 groups x 8 output channels fill the 32-row packed tile
        c.add(KernelSpec("grouped", v, "bf16", "bf16", vec_c=8, vec_k=8, bm=32, bn=64, bk=64, block=4, num_warps=4, num_stages=2))
    for p in (FEW_LONG, MANY_SHORT, grouped):
        free = S.rank_choices(p, c, arch="sm_90", cus=8, options=LaunchOptions(), occupancy=occ(2))
        fams = {"wgrad", "grouped"} if p is grouped else {"wgrad"}
        assert {x.spec.family for x in free.choices if x.spec.variant == "workspace"} >= fams
        det = S.rank_choices(p, c, arch="sm_90", cus=8, options=LaunchOptions(deterministic=True), occupancy=occ(2))
        assert det.choices and all(x.spec.variant in ("direct", "two_stage", "linear", "tree") for x in det.choices)
        why = {(r.label.split("_")[0], r.why) for r in det.rejected if r.label.endswith("_workspace")}
        assert {f for f, w in why if w == "workspace is not deterministic"} >= fams, why
        ch = S.choose(p, c, arch="sm_90", cus=8, occupancy=occ(2), deterministic=True, streamk="off")
        assert ch.spec.variant in ("direct", "two_stage")
    for kw in (dict(streamk="off"), dict(), dict(streamk="off", ks_count=4)):
        with pytest.raises(ProblemError, match="reduction='workspace' is not deterministic"):
            S.choose(FEW_LONG, c, arch="sm_90", cus=8, deterministic=True, reduction="workspace", **kw)
    assert not LaunchOptions(deterministic=True).allows("workspace") and LaunchOptions().allows("workspace")


def test_forced_linear_pool_beyond_co_residency_is_refused():
    c = F.full_cache()
    with pytest.raises(ProblemError, match="co-resident"):
        S.choose(FEW_LONG, c, arch="sm_90", cus=8, streamk="dp_sk", reduction="linear", streamk_ctas=17, occupancy=occ(2))
    ch = S.choose(FEW_LONG, c, arch="sm_90", cus=8, streamk="dp_sk", reduction="linear", streamk_ctas=16, occupancy=occ(2))
    assert ch.pool == 16


def test_widest_vectors_and_pointwise_are_preferred():
    c = F.full_cache(vecs=((1, 1), (8, 8), (1, 8)), pads=False)  # the narrowing rule alone: no padded route
    for pw in (False, True):
        c.add(F.spec("wgrad", "direct", "bf16", vc=8, vk=8, pw=pw, tile=(64, 64, 32)))
    ch = S.choose(MANY_SHORT, c, arch="sm_90", cus=8, streamk="off")
    assert (ch.spec.vec_c, ch.spec.vec_k) == (8, 8) and not ch.spec.pointwise
    first_layer = parse_problem("n=8,c=3,k=64,h=32,w=32,y=7,x=7,stride=2,padding=3")
    ch = S.choose(first_layer, c, arch="sm_90", cus=8, streamk="off")
    assert (ch.spec.vec_c, ch.spec.vec_k) == (1, 8)
    pw_problem = parse_problem("n=2,c=64,k=64,h=8,w=8,y=1,x=1")
    ch = S.choose(pw_problem, c, arch="sm_90", cus=8, streamk="off")
    assert ch.spec.pointwise
    odd = parse_problem("n=2,c=6,k=10,h=8,w=8,y=3,x=3")
    ch = S.choose(odd, c, arch="sm_90", cus=8, streamk="off")
    assert (ch.spec.vec_c, ch.spec.vec_k) == (1, 1)


def test_auto_never_trades_vector_width_for_stream_k():
    # compile-all builds stream-K at vec 1 and the widest width only; split-K also at (4, 4)
    few_long_odd = parse_problem("n=8,c=12,k=36,h=32,w=32,y=3,x=3,padding=1")  # C, K multiples of 4, not 8; 8 tiles of 32x32
    c = F.full_cache(vecs=((1, 1), (8, 8)), pads=False)  # the width rule alone: no padded route
    r = S.rank_choices(few_long_odd, c, arch="sm_90", cus=16, options=LaunchOptions(), occupancy=occ(2))
    assert {x.spec.family for x in r.choices} == {"wgrad", "wgrad_sk"}  # v1 both ways: both are candidates
    for v in ("direct", "two_stage"):
        c.add(F.spec("wgrad", v, "bf16", vc=4, vk=4))
    ch = S.choose(few_long_odd, c, arch="sm_90", cus=16, occupancy=occ(2))
    assert (ch.spec.family, ch.spec.vec_c, ch.spec.vec_k) == ("wgrad", 4, 4)
    r = S.rank_choices(few_long_odd, c, arch="sm_90", cus=16, options=LaunchOptions(), occupancy=occ(2))
    assert {x.spec.family for x in r.choices} == {"wgrad"}
    assert any("narrower channel vectors" in x.why for x in r.rejected)
    # asked for explicitly, stream-K still runs at the width it has
    ch = S.choose(few_long_odd, c, arch="sm_90", cus=16, occupancy=occ(2), streamk="dp_sk")
    assert (ch.spec.family, ch.spec.vec_c) == ("wgrad_sk", 1)


def test_dims_and_dtypes_must_match():
    c = F.full_cache(dims=(2,))
    p3 = parse_problem("n=2,c=8,k=8,d=4,h=8,w=8,z=3,y=3,x=3,padding=1")
    with pytest.raises(S.NoKernelError, match="compile-all"):
        S.choose(p3, c, arch="sm_90", cus=8)
    c3 = F.full_cache(dims=(3,))
    assert S.choose(p3, c3, arch="sm_90", cus=8).spec.spatial_dims == 3
    fp16 = parse_problem("n=2,c=8,k=8,h=8,w=8,y=3,x=3,dtype=fp16")
    with pytest.raises(S.NoKernelError):
        S.choose(fp16, c, arch="sm_90", cus=8)
    with pytest.raises(S.NoKernelError):
        S.choose(MANY_SHORT, c, arch="gfx942", cus=304)


def test_fp32_precision_is_the_problems_never_the_caches():
    """fp32 runs in full precision unless tf32 is asked for; a cache holding only tf32 kernels
    must not serve an ieee problem (that would lower its precision silently)."""
    c = F.FakeCache()
    c.add(F.spec("wgrad", "direct", "fp32", vc=4, vk=4, precision="tf32"))
    ieee = parse_problem("n=2,c=8,k=8,h=8,w=8,y=3,x=3,dtype=fp32")
    assert ieee.precision == "ieee"
    with pytest.raises(S.NoKernelError, match=r"--problem \"[^\"]*dtype=fp32\""):
        S.choose(ieee, c, arch="sm_90", cus=8, streamk="off")
    tf32 = parse_problem("n=2,c=8,k=8,h=8,w=8,y=3,x=3,dtype=fp32,precision=tf32")
    assert S.choose(tf32, c, arch="sm_90", cus=8, streamk="off").spec.precision == "tf32"
    c.add(F.spec("wgrad", "direct", "fp32", vc=4, vk=4, precision="ieee"))
    assert S.choose(ieee, c, arch="sm_90", cus=8, streamk="off").spec.precision == "ieee"
    assert {ch.spec.precision for ch in S.all_choices(ieee, c, arch="sm_90", cus=8)} == {"ieee"}
    # tuned records are kept apart: the two problems have different keys
    assert S.problem_key(ieee) != S.problem_key(tf32)


def test_tile_override():
    c = F.full_cache(tiles=((32, 32, 32), (64, 64, 32)))
    ch = S.choose(MANY_SHORT, c, arch="sm_90", cus=8, streamk="off", tile=(64, 64, 32))
    assert (ch.spec.bm, ch.spec.bn, ch.spec.bk) == (64, 64, 32)
    with pytest.raises(S.NoKernelError, match=r"(?s)of tile \(128, 128, 64\).*compile-all --arch sm_90 --problem"):
        S.choose(MANY_SHORT, c, arch="sm_90", cus=8, streamk="off", tile=(128, 128, 64))


def _run_sweep_of(cmd: str):
    """Parse a printed compile-all command and enumerate what it builds (compile-all's own
    corpus-driven sweep, with the printed preset and filters)."""
    from skwgrad.aot.sweep import sweep_for_problems

    argv = shlex.split(cmd)
    assert argv[:2] == ["skwgrad", "compile-all"]
    opts = {}
    it = iter(argv[2:])
    for a in it:
        assert a.startswith("--"), a
        opts[a[2:]] = next(it)
    p = parse_problem(opts["problem"])
    ps = sweep_for_problems([p], opts.get("preset", "default"), arches=[opts["arch"]], streamk=opts.get("streamk", "all"),
                            reductions=opts.get("streamk-reductions"), tiles=opts.get("tiles"))  # fmt: skip
    return ps.items, opts


@pytest.mark.parametrize("streamk,reduction,problem", [
    ("auto", "auto", "n=2,c=8,k=8,d=4,h=8,w=8,z=3,y=3,x=3,padding=1"),
    ("off", "auto", "n=4,c=64,k=64,h=14,w=14,y=3,x=3,padding=1"),
    ("dp_sk", "linear", "n=4,c=64,k=64,h=14,w=14,y=3,x=3,padding=1"),
    ("persistent", "linear", "n=4,c=64,k=64,h=14,w=14,y=3,x=3,padding=1"),  # (persistent tree: smoke only, by the pruning rules)
    ("dp_sk", "tree", "n=4,c=32,k=32,g=32,h=14,w=14,y=7,x=7,padding=3"),  # depthwise: scalar tree kernel
    ("off", "atomic", "n=4,c=64,k=64,h=14,w=14,y=3,x=3,padding=1,dw_dtype=fp32"),
    ("off", "workspace", "n=4,c=64,k=64,h=14,w=14,y=3,x=3,padding=1"),  # the split-K workspace epilogue
    ("auto", "workspace", "n=4,c=64,k=64,h=14,w=14,y=3,x=3,padding=1,dw_dtype=fp32"),  # no split-K workspace for fp32 dW
])  # fmt: skip
def test_missing_kernel_message_names_a_command_that_builds_one(streamk, reduction, problem, tmp_path):
    p = parse_problem(problem)
    c = F.FakeCache(path=tmp_path / "cache")
    with pytest.raises(S.NoKernelError) as ei:
        S.choose(p, c, arch="sm_90", cus=132, streamk=streamk, reduction=reduction)
    msg = str(ei.value)
    assert p.describe() in msg and "sm_90" in msg
    m = re.search(r"(skwgrad compile-all [^\n]+)", msg)
    assert m, msg
    items, opts = _run_sweep_of(m.group(1))
    assert opts["cache"] == str(tmp_path / "cache")
    # The real command line accepts it as printed.
    from click.testing import CliRunner

    from skwgrad.cli import main

    r = CliRunner().invoke(main, shlex.split(m.group(1))[1:] + ["--dry-run"])
    assert r.exit_code == 0, r.output
    assert str(len(items)) in r.output or "kernels" in r.output
    # Building what the command names makes the same request succeed.
    for it in items:
        c.add(it.spec, it.arch)
    ch = S.choose(p, c, arch="sm_90", cus=132, streamk=streamk, reduction=reduction)
    if streamk in ("dp_sk", "persistent"):
        assert ch.spec.mode == streamk
    if reduction != "auto":
        assert ch.spec.variant == reduction


def test_missing_stage2_is_named():
    c = F.FakeCache()
    c.add(F.spec("wgrad_sk", "workspace", "bf16", mode="dp_sk", vc=8, vk=8))
    with pytest.raises(S.NoKernelError, match="Stage-2"):
        S.choose(FEW_LONG, c, arch="sm_90", cus=8, streamk="dp_sk", reduction="workspace")


def test_tuned_choice_wins_and_stale_records_are_ignored():
    c = F.full_cache()
    rule = S.choose(FEW_LONG, c, arch="sm_90", cus=8)
    pf = ConvProblem(**{**{f: getattr(FEW_LONG, f) for f in ("n", "c", "k", "hi", "wi", "y", "x", "pad_lo", "pad_hi")}, "dw_dtype": "fp32"})
    tuned_entry = next(e for e in c.find("sm_90", family="wgrad_sk", variant="tree", mode="persistent", vec_c=8))
    c.remember_tuned("sm_90", 8, S.problem_key(FEW_LONG), {"key": tuned_entry.key, "pool": 5, "ks_count": 1})
    ch = S.choose(FEW_LONG, c, arch="sm_90", cus=8)
    assert ch.kernel.key == tuned_entry.key and ch.pool == 5 and ch.reason == "tuned"
    assert S.choose(FEW_LONG, c, arch="sm_90", cus=16).kernel.key == rule.kernel.key  # other CU count
    assert S.choose(FEW_LONG, c, arch="sm_90", cus=8, streamk="off").spec.family == "wgrad"  # explicit wins
    c.remember_tuned("sm_90", 8, S.problem_key(FEW_LONG), {"key": "0" * 64, "pool": 5})
    assert S.choose(FEW_LONG, c, arch="sm_90", cus=8).kernel.key == rule.kernel.key
    assert S.problem_key(pf) != S.problem_key(FEW_LONG)  # dW dtype is part of the key


def test_tune_times_every_candidate_and_remembers_the_fastest():
    c = F.full_cache(dims=(2,), vecs=((8, 8),))
    be = F.FakeBackend(cus=8, max_active=2)
    rows = S.tune(FEW_LONG, be, c, warmup=1, iters=3)
    space = S.all_choices(FEW_LONG, c, arch="sm_90", cus=8, occupancy=occ(2))
    assert len(rows) == len(space) > 8  # every (kernel, pool / ks_count) of the search space
    assert {(r["family"], r["mode"], r["variant"]) for r in rows} == {
        ("wgrad", "", "direct"), ("wgrad", "", "two_stage"), ("wgrad", "", "workspace"),
        *{("wgrad_sk", m, v) for m in ("dp_sk", "persistent") for v in ("linear", "tree", "workspace")},
    }  # fmt: skip
    top = S.tune(FEW_LONG, be, c, warmup=1, iters=3, top=3, remember=False)
    assert {(r["key"], r["pool"], r["ks_count"]) for r in top} == {(x.kernel.key, x.pool, x.ks_count) for x in space[:3]}
    us = [r["us"] for r in rows if "us" in r]
    assert us == sorted(us)
    best = c.tuned("sm_90", 8, S.problem_key(FEW_LONG))
    assert best["key"] == rows[0]["key"]
    assert S.choose(FEW_LONG, c, arch="sm_90", cus=8).kernel.key == rows[0]["key"]
    assert be.live_bytes() == sum(a.nbytes for pair in be.arenas.values() for a in pair)  # inputs freed


def test_all_choices_filters():
    c = F.full_cache(dims=(2,), vecs=((8, 8),))
    allc = S.all_choices(FEW_LONG, c, arch="sm_90", cus=8)
    fams = {(x.spec.family, x.spec.mode, x.spec.variant) for x in allc}
    assert ("wgrad", "", "direct") in fams and ("wgrad_sk", "persistent", "tree") in fams
    assert all(x.spec.dw_dtype == "bf16" for x in allc)
    only = S.all_choices(FEW_LONG, c, arch="sm_90", cus=8, streamk="dp_sk", reductions=["linear"])
    assert {(x.spec.mode, x.spec.variant) for x in only} == {("dp_sk", "linear")}
    off = S.all_choices(FEW_LONG, c, arch="sm_90", cus=8, streamk="off")
    assert off and all(x.spec.family == "wgrad" for x in off)


def test_a_request_no_preset_builds_still_names_what_serves_the_problem():
    p = parse_problem("n=4,c=6,k=6,h=14,w=14,y=3,x=3,padding=1")  # stream-K is built at vector width 8 only
    c = F.FakeCache()
    with pytest.raises(S.NoKernelError) as ei:
        S.choose(p, c, arch="sm_90", cus=132, streamk="persistent", reduction="linear")
    items, _ = _run_sweep_of(re.search(r"(skwgrad compile-all [^\n]+)", str(ei.value)).group(1))
    assert any(it.spec.family == "wgrad" and S._admits(it.spec, p) for it in items)
    for it in items:
        c.add(it.spec, it.arch)
    assert S.choose(p, c, arch="sm_90", cus=132).spec.family in ("wgrad", "wgrad_sk", "wgrad_tma")  # auto is served


def test_depthwise_and_grouped_problems_take_their_families():
    from skwgrad.aot.sweep import sweep

    c = F.FakeCache()
    for it in sweep("default", ["sm_90"], ["bf16"]):
        c.add(it.spec, it.arch)
    dw = parse_problem("n=32,c=144,k=144,g=144,h=44,w=44,y=3,x=3,padding=1")
    ch = S.choose(dw, c, arch="sm_90", cus=132, occupancy=occ(2))
    # the window kernel of the 3-wide filter (stride 1 along W) at the widest vector: 144 % 8 == 0
    assert ch.spec.family == "dwconv" and (ch.spec.bn, ch.spec.mode, ch.spec.vec_c) == (3, "win7r3", 8)
    s2 = parse_problem("n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,padding=1,stride=2")  # the stride-2 window kernel
    c2 = S.choose(s2, c, arch="sm_90", cus=132, occupancy=occ(2))
    assert (c2.spec.mode, c2.spec.bn, c2.spec.vec_c) == ("win7r3s2", 3, 8)
    s3 = parse_problem("n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,padding=1,stride=3")  # no window kernel: the gather one
    assert S.choose(s3, c, arch="sm_90", cus=132, occupancy=occ(2)).spec.bn == 16  # 9 taps fit 16
    assert ch.spec.variant == ("direct" if ch.ks_count == 1 else "workspace") and ch.stage2 is not None
    # the 3-wide filter's strip width: the fewest x vectors loaded per output row (strips x window),
    # the widest on ties: 5 where 7 wastes many columns (15, 29 px), 7 where it wastes few (57, 113)
    for width, mode in ((13, "win7r3"), (14, "win7r3"), (15, "win5r3"), (29, "win5r3"), (56, "win7r3"), (57, "win7r3"), (113, "win7r3")):
        q = parse_problem(f"n=8,c=144,k=144,g=144,h=13,w={width},y=3,x=3,padding=1")
        assert S.choose(q, c, arch="sm_90", cus=132, occupancy=occ(2)).spec.mode == mode, width
    odd = parse_problem("n=8,c=100,k=100,g=100,h=28,w=28,y=7,x=7,padding=3")
    ch = S.choose(odd, c, arch="sm_90", cus=132, occupancy=occ(2))
    assert (ch.spec.family, ch.spec.bn, ch.spec.vec_c) == ("dwconv", 64, 1)  # 49 taps; 100 channels: vec 1 in default
    det = S.choose(dw, c, arch="sm_90", cus=132, occupancy=occ(2), deterministic=True)
    assert det.spec.family != "dwconv" or det.spec.variant in ("direct", "two_stage")
    rx = parse_problem("n=32,c=256,k=256,g=32,h=28,w=28,y=3,x=3,padding=1")  # ResNeXt: 8 channels per group
    r = S.rank_choices(rx, c, arch="sm_90", cus=132, options=LaunchOptions(), occupancy=occ(2))
    packed = [x for x in r.choices if x.spec.family == "grouped"]
    assert packed and {x.spec.block * rx.k for x in packed} == {x.spec.bm for x in packed}  # full packed M tiles, ranked
    assert all(x.predicted_us is not None for x in packed)
    dense = parse_problem("n=32,c=64,k=64,h=56,w=56,y=3,x=3,padding=1")
    assert S.choose(dense, c, arch="sm_90", cus=132, occupancy=occ(2)).spec.family in ("wgrad", "wgrad_sk", "wgrad_tma")


def test_narrow_packed_tiles_give_way_to_wide_ones_where_the_arch_has_a_wide_mma():
    """sm_90's wgmma takes 64 rows: a 32-row packed-group tile runs the slower mma.sync, so where
    a 64-row one also runs the problem the narrow one is dropped (and said so); AMD keeps both,
    and so does fp32 (measured faster on the narrow tile)."""
    from skwgrad.aot.sweep import sweep

    for arch, dtype in (("sm_90", "bf16"), ("gfx942", "bf16"), ("sm_90", "fp32")):
        c = F.FakeCache()
        for it in sweep("default", [arch], [dtype]):
            c.add(it.spec, it.arch)
        p = parse_problem(f"n=32,c=256,k=256,g=32,h=28,w=28,y=3,x=3,padding=1,dtype={dtype}")  # ResNeXt: g4 32x64 and g8 64x64 fit
        built = {k.spec.bm for k in S.candidates(c, arch, p, family="grouped")}
        assert min(built) < 64 <= max(built), (arch, dtype, built)
        r = S.rank_choices(p, c, arch=arch, cus=132, options=LaunchOptions(), occupancy=occ(2))
        ranked = {x.spec.bm for x in r.choices if x.spec.family == "grouped"}
        if (arch, dtype) == ("sm_90", "bf16"):
            assert ranked and min(ranked) >= 64
            assert any("64-row matrix instruction" in x.why for x in r.rejected)
        else:
            assert ranked == built
    # no wide packed tile for the problem (12 groups: g8 does not divide them): the narrow one stays
    c = F.FakeCache()
    for it in sweep("default", ["sm_90"], ["bf16"]):
        c.add(it.spec, it.arch)
    g12 = parse_problem("n=32,c=96,k=96,g=12,h=28,w=28,y=3,x=3,padding=1")
    r = S.rank_choices(g12, c, arch="sm_90", cus=132, options=LaunchOptions(), occupancy=occ(2))
    assert any(x.spec.family == "grouped" and x.spec.bm < 64 for x in r.choices)


def test_tune_top_times_what_auto_would_run_first():
    """Tune on first use times the best few of the search space: for a depthwise problem that is
    its own family, the rule's pick first, never only dense kernels."""
    from skwgrad.aot.sweep import sweep

    c = F.FakeCache()
    for it in sweep("default", ["sm_90"], ["bf16"]):
        c.add(it.spec, it.arch)
    dw = parse_problem("n=8,c=144,k=144,g=144,h=28,w=28,y=3,x=3,padding=1,dw_dtype=fp32")
    space = S.all_choices(dw, c, arch="sm_90", cus=132, occupancy=occ(2))
    auto = S.choose(dw, c, arch="sm_90", cus=132, occupancy=occ(2), use_tuned=False)
    assert space[0].kernel.key == auto.kernel.key and space[0].spec.family == "dwconv"
    assert space[0].ks_count == auto.ks_count
    # the depthwise families only: auto's launch, the row-walk kernel at its rule's degree, then the rest
    assert [x.spec.family for x in space[:4]] == ["dwconv", "dwconv_walk", "dwconv", "dwconv"]
    # the search also tries each depthwise kernel at the degrees of 1, 2, 4, 8 CTAs per CU (the rule is a guess)
    from skwgrad.abi.launch import dwconv_ks_count

    big = parse_problem("n=32,c=144,k=144,g=144,h=44,w=44,y=3,x=3,padding=1")
    space = S.all_choices(big, c, arch="sm_90", cus=132, occupancy=occ(2))
    auto = S.choose(big, c, arch="sm_90", cus=132, occupancy=occ(2), use_tuned=False)
    lead = [x for x in space if x.kernel.key == auto.kernel.key]
    s = auto.spec
    want = {dwconv_ks_count(big, bc=s.bm, br=s.bk, compute_units=132, ctas_per_cu=n, mode=s.mode) for n in (1, 2, 4, 8)}
    assert space[0].kernel.key == auto.kernel.key and space[0].ks_count == auto.ks_count
    assert len(want) == 4 and {x.ks_count for x in lead} == want | {auto.ks_count}
    assert len({(x.kernel.key, x.ks_count) for x in space}) == len(space)  # no launch twice
    assert all(x.ks_count == 1 for x in space if x.spec.variant == "direct")
    be = F.FakeBackend(cus=132, max_active=2)
    rows = S.tune(dw, be, c, warmup=0, iters=1, top=3, remember=False)
    assert {r["family"] for r in rows} == {"dwconv", "dwconv_walk"}
    dense = parse_problem("n=8,c=64,k=64,h=28,w=28,y=3,x=3,padding=1")
    assert S.all_choices(dense, c, arch="sm_90", cus=132, occupancy=occ(2))[0].predicted_us is not None


def test_packed_tiles_of_the_best_fill_are_ranked():
    from skwgrad.aot.sweep import sweep

    c = F.FakeCache()
    for it in sweep("default", ["sm_90"], ["bf16"]):
        c.add(it.spec, it.arch)
    # 4 output channels per group: GB 16 fills a 64-row tile, the half-filled ones go; G = 24 has no
    # 16, so the best fill there is a half (and the 32-row tile of that fill gives way to the 64-row ones)
    for g, want in ((32, {(16, 64, 128)}), (24, {(8, 64, 128), (8, 64, 64)})):
        p = parse_problem(f"n=16,c={4 * g},k={4 * g},g={g},h=56,w=56,y=3,x=3,padding=1")
        r = S.rank_choices(p, c, arch="sm_90", cus=132, options=LaunchOptions(), occupancy=occ(2))
        got = {(x.spec.block, x.spec.bm, x.spec.bn) for x in r.choices if x.spec.family == "grouped"}
        assert got == want, (g, got)
    # 8 per group: the 16-group tile would load x for 16 groups and use 8: rejected, with the reason
    rx = parse_problem("n=32,c=256,k=256,g=32,h=28,w=28,y=3,x=3,padding=1")
    r = S.rank_choices(rx, c, arch="sm_90", cus=132, options=LaunchOptions(), occupancy=occ(2))
    assert {x.spec.block for x in r.choices if x.spec.family == "grouped"} == {8}
    why = [x.why for x in r.rejected if "_g16_" in x.label]
    assert why and all("packs 16 groups of 8 output channels into 64 rows (fill 2)" in w for w in why)
    assert any("_g4_64x64x64_" in x.label and "(fill 0.5), and a packed tile filled 1 runs" in x.why for x in r.rejected)
    # 16 per group: the 4-group 64-row tile alone
    p16 = parse_problem("n=16,c=256,k=256,g=16,h=28,w=28,y=3,x=3,padding=1")
    r = S.rank_choices(p16, c, arch="sm_90", cus=132, options=LaunchOptions(), occupancy=occ(2))
    assert {(x.spec.block, x.spec.bm, x.spec.bn) for x in r.choices if x.spec.family == "grouped"} == {(4, 64, 64)}
    # 32 per group: the 2-group 64-row tile alone (fill 1); 33 per group is past the packed kernels
    p32 = parse_problem("n=16,c=256,k=256,g=8,h=28,w=28,y=3,x=3,padding=1")
    assert S.grouped_applies(p32) and not S.grouped_applies(parse_problem("n=16,c=264,k=264,g=8,h=28,w=28,y=3,x=3,padding=1"))
    r = S.rank_choices(p32, c, arch="sm_90", cus=132, options=LaunchOptions(), occupancy=occ(2))
    assert {(x.spec.block, x.spec.bm, x.spec.bn) for x in r.choices if x.spec.family == "grouped"} == {(2, 64, 64)}


def test_over_16_channels_per_group_only_tiles_of_fill_at_most_1_are_ranked():
    from skwgrad.aot.sweep import sweep

    c = F.FakeCache()
    for it in sweep("default", ["sm_90"], ["bf16"]):  # no 64-row tile of 2 or 4 groups: 32 or 16 per group fill none
        if not (it.spec.family == "grouped" and (it.spec.block, it.spec.bm) in ((2, 64), (4, 64))):
            c.add(it.spec, it.arch)
    p32 = parse_problem("n=16,c=256,k=256,g=8,h=28,w=28,y=3,x=3,padding=1")
    r = S.rank_choices(p32, c, arch="sm_90", cus=132, options=LaunchOptions(), occupancy=occ(2))
    assert r.choices and not any(x.spec.family == "grouped" for x in r.choices)
    why = [x.why for x in r.rejected if x.label.startswith("grouped_")]
    assert why and all("over 16 channels per group only a packed tile filled at most 1 runs" in w for w in why)
    # up to 16 per group the over-filled tiles still compete when nothing fills at most 1
    p16 = parse_problem("n=16,c=256,k=256,g=16,h=28,w=28,y=3,x=3,padding=1")
    r = S.rank_choices(p16, c, arch="sm_90", cus=132, options=LaunchOptions(), occupancy=occ(2))
    fills = {x.spec.block * 16 / x.spec.bm for x in r.choices if x.spec.family == "grouped"}
    assert fills and min(fills) > 1


def test_calibration_samples_price_each_launch_as_timed_persistent_tma_included():
    """``calibrate`` fits on every timed launch: a persistent TMA launch has a pool and a split
    degree, and its terms must be those of that launch (H200 run W4: calibrate --dry-run stopped
    at the first one it had timed, pricing it without its pool)."""
    from skwgrad.aot.sweep import sweep

    c = F.FakeCache()
    for it in sweep("default", ["sm_90"], ["bf16"]):
        c.add(it.spec, it.arch)
    p = parse_problem("n=8,c=64,k=64,h=28,w=28,y=3,x=3,padding=1,dtype=bf16")
    be = F.FakeBackend(cus=132, max_active=2)
    rows = S.tune(p, be, c, warmup=0, iters=1, remember=False)
    timed = [r for r in rows if "us" in r and r.get("family") in S.MODELLED_FAMILIES and r.get("occupancy") and not r.get("pad_keys")]
    persistent = [r for r in timed if r["family"] == "wgrad_tma" and r["mode"] == "persistent"]
    assert persistent and all(r["pool"] > 0 for r in persistent)
    samples = S.samples_of(rows, p, c, arch="sm_90", cus=132)
    assert len(samples) == len(timed)
    from skwgrad.abi.costmodel import terms as cost_terms
    from skwgrad.abi.launch import spec_geometry

    r = persistent[0]
    e = c.get(r["key"])
    geo = spec_geometry(p, e.spec, threads=int(e.metadata["threads"]), pool=r["pool"], ks_count=r["ks_count"])
    want = cost_terms(p, e.spec, geo, arch="sm_90", compute_units=132, occupancy=int(r["occupancy"]),
                      stack_bytes=int(e.metadata.get("stack_bytes", 0)))  # fmt: skip
    assert samples[timed.index(r)][0] == want and samples[timed.index(r)][1] == r["us"]
