"""The cost model: terms from launch geometry, fitting (non-negative least squares on relative
error) recovers known constants, serialisation refuses what it cannot read, and the offline
occupancy estimate follows the arch's limits."""

from __future__ import annotations

import itertools
import json
import math
import random

import numpy as np
import pytest

from skwgrad.abi import costmodel as M
from skwgrad.abi.conv import parse_problem
from skwgrad.abi.launch import STAGE2_BLOCK, launch_geometry
from skwgrad.abi.spec import STAGE2_UNROLL, KernelSpec
from skwgrad.errors import ProblemError

PROBLEMS = [
    parse_problem("n=32,c=64,k=64,h=56,w=56,y=3,x=3,padding=1"),
    parse_problem("n=8,c=512,k=512,h=14,w=14,y=3,x=3,padding=1"),
    parse_problem("n=32,c=256,k=64,h=56,w=56,y=1,x=1,dw_dtype=fp32"),
    parse_problem("n=4,c=128,k=128,h=128,w=128,y=3,x=3,padding=1"),
]


def _launches():
    out = []
    for p in PROBLEMS:
        for bm, bn, bk, w in ((64, 128, 64, 4), (128, 128, 64, 8)):
            for v in ("direct", "two_stage", "workspace"):
                for ks in ((1,) if v == "direct" else (2, 8, 32)):
                    ks = min(ks, p.tiling(bm, bn, bk).iters_per_tile)
                    s = KernelSpec("wgrad", v, p.dtype, p.dw_dtype, vec_c=8, vec_k=8, bm=bm, bn=bn, bk=bk, num_warps=w, num_stages=3)
                    out.append((p, s, launch_geometry(p, "wgrad", v, bm=bm, bn=bn, bk=bk, ks_count=ks)))
            for mode, v, pool in itertools.product(("dp_sk", "persistent"), ("linear", "workspace"), (132, 264)):
                s = KernelSpec("wgrad_sk", v, p.dtype, p.dw_dtype, vec_c=8, vec_k=8, bm=bm, bn=bn, bk=bk, num_warps=w,
                               num_stages=3, mode=mode)  # fmt: skip
                geo = launch_geometry(p, "wgrad_sk", v, bm=bm, bn=bn, bk=bk, mode=mode, pool=pool,
                                      flags_per_cta=s.flags_per_cta(32) or None)  # fmt: skip
                out.append((p, s, geo))
    return out


def test_terms_follow_the_geometry():
    for p, s, geo in _launches():
        t = M.terms(p, s, geo, arch="sm_90", compute_units=132, occupancy=2)
        d = t.as_dict()
        assert len(t.values) == len(M.TERMS) and all(v >= 0 and math.isfinite(v) for v in t.values)
        assert 1 <= t.resident <= 2
        assert t.path_iters >= geo.tiling.iters_per_tile * geo.tiling.num_tiles / (132 * t.resident) - 1e-9
        assert d["launch"] == 1 + geo.workspace.needs_stage2
        assert d[f"fixed_{'splitk' if s.family == 'wgrad' else 'sk'}_{s.variant}"] == 1.0
        assert sum(v for k, v in d.items() if k.startswith("fixed_")) == 1.0
        if s.variant == "linear":
            assert d["fixup_serial"] == (geo.partition.max_linear_partners if geo.partition.sk_ctas else 0)
        if s.family == "wgrad" and s.variant == "direct":
            assert d["stage2"] == 0 and d["fixup_serial"] == 0
    # more splits never lengthen the critical path of a split-K launch
    p = PROBLEMS[0]
    s = KernelSpec("wgrad", "two_stage", "bf16", "bf16", vec_c=8, vec_k=8, bm=64, bn=128, bk=64, num_stages=3)
    paths = [M.terms(p, s, launch_geometry(p, "wgrad", "two_stage", bm=64, bn=128, bk=64, ks_count=k), arch="sm_90",
                     compute_units=132, occupancy=4).path_iters for k in (1, 2, 4, 8, 16)]  # fmt: skip
    assert paths == sorted(paths, reverse=True)
    with pytest.raises(ProblemError, match="cost model covers"):
        M.terms(p, KernelSpec("stage2", "reduce", "fp32", "fp32", block=1024), None, arch="sm_90", compute_units=1, occupancy=1)


def test_fit_recovers_known_constants_and_ranks_like_them():
    rng = random.Random(7)
    truth = M.CostModel("sm_90", tuple(rng.choice((0.0, rng.uniform(0.01, 3.0))) for _ in M.TERMS))
    samples = []
    for p, s, geo in _launches():
        for occ in (1, 2, 3):
            t = M.terms(p, s, geo, arch="sm_90", compute_units=132, occupancy=occ)
            samples.append((t, truth.predict(t)))
    fitted = M.fit(samples, arch="sm_90")
    preds = np.array([fitted.predict(t) for t, _ in samples])
    meas = np.array([us for _, us in samples])
    assert np.max(np.abs(preds / meas - 1)) < 1e-6 and fitted.samples == len(samples) and fitted.source == "fit"
    # a noisy copy still ranks the launches of each problem nearly as the truth does
    noisy = [(t, us * (1 + rng.uniform(-0.03, 0.03))) for t, us in samples]
    fn = M.fit(noisy, arch="sm_90")
    for p in PROBLEMS:
        rows = [(t, us) for (t, us), (pp, _, _) in zip(samples, [x for x in _launches() for _ in (1, 2, 3)]) if pp is p]
        best = min(us for _, us in rows)
        pick = min(rows, key=lambda r: fn.predict(r[0]))[1]
        assert pick <= 1.05 * best
    with pytest.raises(ProblemError, match="needs at least"):
        M.fit(samples[:3], arch="sm_90")


def test_nnls_matches_a_brute_force_solution():
    rng = np.random.default_rng(3)
    for _ in range(20):
        a = rng.normal(size=(12, 4))
        b = rng.normal(size=12)
        x = M.nnls(a, b)
        assert (x >= 0).all()
        best = min(
            (np.linalg.norm(a[:, list(S)] @ np.clip(np.linalg.lstsq(a[:, list(S)], b, rcond=None)[0], 0, None) - b), S)
            for r in range(5) for S in itertools.combinations(range(4), r) if S
        )[0]  # fmt: skip
        assert np.linalg.norm(a @ x - b) <= min(best, np.linalg.norm(b)) + 1e-8


def test_model_json_roundtrip_and_refusals():
    m = M.CostModel("gfx950", tuple(float(i) for i in range(len(M.TERMS))), source="fit", samples=12, fit_error=0.1)
    back = M.CostModel.from_json(m.to_json())
    assert (back.arch, back.constants, back.samples, back.fit_error) == (m.arch, m.constants, 12, 0.1)
    d = json.loads(m.to_json())
    for bad in ({**d, "version": M.MODEL_VERSION + 1}, {**d, "version": 1, "terms": d["terms"][:13]}, {**d, "terms": d["terms"][:-1]}, {**d, "constants": d["constants"][:-1]},
                {**d, "constants": [-1.0] * len(M.TERMS)}, {**d, "constants": ["x"] * len(M.TERMS)}, [1, 2]):  # fmt: skip
        with pytest.raises(ProblemError):
            M.CostModel.from_json(json.dumps(bad))
    with pytest.raises(ProblemError):
        M.CostModel.from_json("not json")
    assert M.builtin("sm_90").arch == "sm_90" and len(M.builtin("gfx942").constants) == len(M.TERMS)


def test_explain_names_the_largest_terms_first():
    p, s, geo = _launches()[1]
    m = M.CostModel("sm_90", tuple(1.0 for _ in M.TERMS))
    t = M.terms(p, s, geo, arch="sm_90", compute_units=132, occupancy=2)
    e = m.explain(t)
    assert list(e.values()) == sorted(e.values(), reverse=True) and sum(e.values()) == pytest.approx(m.predict(t))


def test_offline_occupancy_follows_the_arch_limits():
    assert M.offline_occupancy({"threads": 128, "shared": 0}, "sm_90") == 4  # 65536 regs / (128 x 128)
    assert M.offline_occupancy({"threads": 256, "shared": 100 * 1024}, "sm_90") == 2  # shared memory bound
    assert M.offline_occupancy({"threads": 1024, "shared": 0}, "sm_90") == 1
    assert M.offline_occupancy({"threads": 256, "shared": 65536, "amd": {"vgpr_count": 64}}, "gfx942") == 1  # 64 KiB LDS
    assert M.offline_occupancy({"threads": 128}, "no-such-arch") == 1


def _spec(family, variant, p, bm=64, bn=128, bk=64, warps=4, mode="", **kw):
    return KernelSpec(family, variant, p.dtype, p.dw_dtype, vec_c=kw.pop("vec_c", 8), vec_k=kw.pop("vec_k", 8), bm=bm, bn=bn,
                      bk=bk, num_warps=warps, num_stages=3, mode=mode, **kw)  # fmt: skip


def test_mma_chain_is_per_warp_and_fp32_has_its_own_rate():
    p = PROBLEMS[0]
    small, big = _spec("wgrad", "direct", p), _spec("wgrad", "direct", p, bm=128, warps=8)
    ts = [M.terms(p, s, launch_geometry(p, "wgrad", "direct", bm=s.bm, bn=s.bn, bk=s.bk), arch="sm_90", compute_units=132,
                  occupancy=1) for s in (small, big)]  # fmt: skip
    per_iter = [t.as_dict()["main_mac"] / t.path_iters for t in ts]
    assert per_iter[0] > 0 and per_iter[0] == pytest.approx(per_iter[1])  # 128x128 on 8 warps: each warp chains 64x128's share
    shared = [t.as_dict()["main_mac_shared"] / t.path_iters for t in ts]
    assert shared[0] > 0 and shared[1] == pytest.approx(2 * shared[0])  # ...but the CU does twice the matrix work
    pf = parse_problem("n=8,c=64,k=64,h=28,w=28,y=3,x=3,padding=1,dtype=fp32")
    for prec, cost in (("tf32", 2.0), ("ieee", 15.0)):
        s = KernelSpec("wgrad", "direct", "fp32", "fp32", vec_c=4, vec_k=4, bm=64, bn=128, bk=32, num_warps=4, num_stages=3,
                       precision=prec)  # fmt: skip
        d = M.terms(pf, s, launch_geometry(pf, "wgrad", "direct", bm=64, bn=128, bk=32), arch="sm_90", compute_units=132,
                    occupancy=1).as_dict()  # fmt: skip
        # fp32 inputs: matrix work on the precision's own term only (each rate fitted), in units of
        # the arch's tf32/ieee cost ratio
        own, other = ("main_mac_tf32_shared", "main_mac_ieee_shared") if prec == "tf32" else ("main_mac_ieee_shared", "main_mac_tf32_shared")
        assert d["main_mac_shared"] == 0 and d[other] == 0
        assert d[own] == pytest.approx(cost * 64 * 128 * 32 / 65536 * d["main_iter"])
    assert ts[0].as_dict()["main_mac_tf32_shared"] == ts[0].as_dict()["main_mac_ieee_shared"] == 0


def test_exposed_loads_price_a_cu_holding_too_few_warps_to_hide_load_latency():
    # conv1-like: three tiles, a long reduction; 44 splits put one 4-warp CTA on each of 132 SMs,
    # 88 splits two. The shared terms say the same work per CU; only the exposed-loads term says
    # one 4-warp CTA alone cannot keep its loads in flight (H200: 247 vs 194 us)
    p = parse_problem("n=32,c=3,k=64,h=224,w=224,y=7,x=7,stride=2,padding=3")
    s = _spec("wgrad", "two_stage", p, bm=64, bn=64, vec_c=1)
    d = {ks: M.terms(p, s, launch_geometry(p, "wgrad", "two_stage", bm=64, bn=64, bk=64, ks_count=ks), arch="sm_90",
                     compute_units=132, occupancy=2) for ks in (44, 88)}  # fmt: skip
    assert (d[44].resident, d[88].resident) == (1, 2)
    e = {ks: t.as_dict()["main_loads_exposed"] for ks, t in d.items()}
    loads = {ks: t.as_dict()["main_loads_shared"] / t.resident for ks, t in d.items()}  # path x loads per iteration
    assert e[44] == pytest.approx(loads[44] * (M.LOAD_HIDING_WARPS / 4 - 1))
    assert e[88] == pytest.approx(loads[88] * (M.LOAD_HIDING_WARPS / 4 - 2)) and e[44] > 2 * e[88]
    only = M.CostModel("sm_90", tuple(1.0 if t == "main_loads_exposed" else 0.0 for t in M.TERMS))
    assert only.predict(d[88]) < only.predict(d[44])
    # a CU already full of warps exposes nothing
    big = _spec("wgrad", "two_stage", p, bm=128, bn=128, warps=8, vec_c=1)
    g = launch_geometry(p, "wgrad", "two_stage", bm=128, bn=128, bk=64, ks_count=132)
    assert M.terms(p, big, g, arch="sm_90", compute_units=132, occupancy=2).as_dict()["main_loads_exposed"] == 0


def test_a_stream_k_range_stores_once_per_tile_it_touches():
    # 216 one-iteration tiles on a pool of 132: every tile is stream-K, 84 CTAs walk two whole
    # tiles and store both; the model must see two stores on the path, not one wave's
    p = parse_problem("n=1,c=768,k=1024,h=7,w=7,y=3,x=3,padding=1")
    s = _spec("wgrad_sk", "linear", p, bm=128, bn=256, warps=8, mode="dp_sk")
    g = launch_geometry(p, "wgrad_sk", "linear", bm=128, bn=256, bk=64, mode="dp_sk", pool=132, flags_per_cta=s.flags_per_cta(32))
    assert (g.partition.dp_tiles, g.partition.sk_ctas, g.tiling.iters_per_tile) == (0, 132, 1)
    d = M.terms(p, s, g, arch="sm_90", compute_units=132, occupancy=1).as_dict()
    assert d["epilogue"] == pytest.approx(2 * 128 * 256 * 4 / 1024)
    # a long reduction: a range straddles tiles on average by (L - 1) / ipt
    q = parse_problem("n=32,c=64,k=64,h=56,w=56,y=3,x=3,padding=1")
    sq = _spec("wgrad_sk", "linear", q, mode="dp_sk")
    gq = launch_geometry(q, "wgrad_sk", "linear", bm=64, bn=128, bk=64, mode="dp_sk", pool=132, flags_per_cta=sq.flags_per_cta(32))
    part, ipt = gq.partition, gq.tiling.iters_per_tile
    sk_len = part.iters_per_sk_cta + (1 if part.extra_iters else 0)
    dq = M.terms(q, sq, gq, arch="sm_90", compute_units=132, occupancy=1).as_dict()
    waves = math.ceil(gq.grid / 132)
    assert dq["epilogue"] == pytest.approx((waves + (sk_len - 1) / ipt) * 64 * 128 * 4 / 1024)


def test_stage2_chain_grows_with_the_replicas_and_prices_many_splits_of_a_small_dw():
    p = parse_problem("n=32,c=64,k=64,h=56,w=56,y=1,x=1")  # one 64x128 tile, a 16 KiB dW: Stage-2 is one CTA
    s = _spec("wgrad", "two_stage", p)
    geos = {ks: launch_geometry(p, "wgrad", "two_stage", bm=64, bn=128, bk=64, ks_count=ks) for ks in (8, 32, 128)}
    ds = {ks: M.terms(p, s, g, arch="sm_90", compute_units=132, occupancy=2).as_dict() for ks, g in geos.items()}
    # one wave of Stage-2 CTAs: the chain is the replica count in steps of STAGE2_UNROLL (128 asked
    # resolves to 121 non-empty splits)
    assert [geos[k].ks_count for k in (8, 32, 128)] == [8, 32, 121]
    steps = [float(math.ceil(geos[k].ks_count / STAGE2_UNROLL)) for k in (8, 32, 128)]
    assert [ds[k]["stage2_chain"] for k in (8, 32, 128)] == steps and steps[0] < steps[1] < steps[2]
    big = parse_problem("n=8,c=512,k=512,h=14,w=14,y=3,x=3,padding=1")  # 2.4 M dW elements: 2304 Stage-2 CTAs
    g = launch_geometry(big, "wgrad", "two_stage", bm=64, bn=128, bk=64, ks_count=2)
    d = M.terms(big, _spec("wgrad", "two_stage", big), g, arch="sm_90", compute_units=132, occupancy=2).as_dict()
    assert d["stage2_chain"] == math.ceil(2 / STAGE2_UNROLL) * math.ceil(g.stage2_grid / (132 * M.STAGE2_CTAS_PER_CU))
    assert g.stage2_grid == math.ceil(big.dw_numel / STAGE2_BLOCK) and d["stage2_chain"] > 1  # more than one wave
    direct = M.terms(p, _spec("wgrad", "direct", p), launch_geometry(p, "wgrad", "direct", bm=64, bn=128, bk=64),
                     arch="sm_90", compute_units=132, occupancy=2).as_dict()  # fmt: skip
    assert direct["stage2_chain"] == 0 and direct["stage2"] == 0
    # the workspace replica is read and zeroed again by Stage-2: twice its bytes, plus dW's
    sk = _spec("wgrad_sk", "workspace", p, mode="dp_sk")
    gw = launch_geometry(p, "wgrad_sk", "workspace", bm=64, bn=128, bk=64, mode="dp_sk", pool=132)
    dw = M.terms(p, sk, gw, arch="sm_90", compute_units=132, occupancy=2).as_dict()
    assert dw["stage2"] == pytest.approx((2 * 4 + 2) * p.dw_numel / 1048576) and dw["stage2_chain"] == 1
    # a model pricing only the chain ranks fewer splits first
    m = M.CostModel("sm_90", tuple(1.0 if t == "stage2_chain" else 0.0 for t in M.TERMS))
    preds = [m.predict(M.terms(p, s, geos[k], arch="sm_90", compute_units=132, occupancy=2)) for k in (8, 32, 128)]
    assert preds == sorted(preds) and preds[0] < preds[-1]


def test_l2_refetch_prices_stream_k_only_once_the_inputs_outgrow_the_l2():
    small = parse_problem("n=8,c=128,k=128,h=32,w=32,y=3,x=3,padding=1")  # 4 MiB of x + dy: fits
    large = parse_problem("n=4,c=128,k=128,h=256,w=256,y=3,x=3,padding=1")  # 128 MiB: does not
    for p, fits in ((small, True), (large, False)):
        sk = _spec("wgrad_sk", "workspace", p, bm=128, warps=8, mode="dp_sk")
        g = launch_geometry(p, "wgrad_sk", "workspace", bm=128, bn=128, bk=64, mode="dp_sk", pool=132)
        d = M.terms(p, sk, g, arch="sm_90", compute_units=132, occupancy=1).as_dict()
        assert (d["l2_refetch"] == 0) == fits
        sp = _spec("wgrad", "two_stage", p, bm=128, warps=8)
        gs = launch_geometry(p, "wgrad", "two_stage", bm=128, bn=128, bk=64, ks_count=44)
        assert M.terms(p, sp, gs, arch="sm_90", compute_units=132, occupancy=1).as_dict()["l2_refetch"] == 0
    # the refetched bytes: the SK tiles' reads beyond one pass over x and dy, times the L2's miss share
    foot = (large.x_numel + large.dy_numel) * 2
    t = large.tiling(128, 128, 64)
    want = (t.num_tiles * t.iters_per_tile * 64 * 256 * 2 - foot) * (1 - M.L2_BYTES["sm_90"] / foot) / 1048576 / 132
    assert d["l2_refetch"] == pytest.approx(want)
    # a larger last-level cache (MI300X's 256 MiB) holds it
    assert M.terms(large, sk, g, arch="gfx942", compute_units=304, occupancy=1).as_dict()["l2_refetch"] == 0


def test_fit_keeps_the_prior_for_terms_no_sample_exercises():
    rng = random.Random(11)
    truth = M.CostModel("sm_90", tuple(rng.uniform(0.01, 1.0) for _ in M.TERMS))
    samples = [(t, truth.predict(t)) for p, s, geo in _launches() for t in [M.terms(p, s, geo, arch="sm_90", compute_units=132, occupancy=2)]]
    unseen = [n for i, n in enumerate(M.TERMS) if all(t.values[i] == 0 for t, _ in samples)]
    assert "main_mac_tf32_shared" in unseen and "main_mac_ieee_shared" in unseen and "fixed_sk_atomic" in unseen  # bf16 launches, no atomic reduction
    prior = M.CostModel("sm_90", tuple(7.0 + i for i in range(len(M.TERMS))), source="prior")
    fitted = M.fit(samples, arch="sm_90", prior=prior)
    for i, n in enumerate(M.TERMS):
        if n in unseen:
            assert fitted.constants[i] == prior.constants[i]
    assert set(fitted.kept) == set(unseen)
    assert max(abs(fitted.predict(t) / us - 1) for t, us in samples) < 1e-6
    assert M.CostModel.from_json(fitted.to_json()).kept == fitted.kept
    # default prior: the arch's built-in constants
    assert M.fit(samples, arch="sm_90").constants[M.TERMS.index("main_mac_tf32_shared")] == M.builtin("sm_90").constants[
        M.TERMS.index("main_mac_tf32_shared")]  # fmt: skip


def test_epilogue_counts_the_stores_of_every_co_resident_cta():
    p = parse_problem("n=16,c=320,k=80,h=20,w=20,y=3,x=3,stride=2,padding=1")
    s = _spec("wgrad", "two_stage", p)
    g = launch_geometry(p, "wgrad", "two_stage", bm=64, bn=128, bk=64, ks_count=5)  # 230 CTAs: two per SM
    one, two = (M.terms(p, s, g, arch="sm_90", compute_units=132, occupancy=o) for o in (1, 2))
    assert (one.resident, two.resident) == (1, 2)
    # at one per SM the grid runs in two waves, at two per SM in one wave of twice the stores per SM
    assert one.as_dict()["epilogue"] == two.as_dict()["epilogue"] == 2 * 64 * 128 * 4 / 1024
    big = _spec("wgrad", "two_stage", p, bm=128, warps=8)
    gb = launch_geometry(p, "wgrad", "two_stage", bm=128, bn=128, bk=64, ks_count=5)  # 115 CTAs, one per SM
    assert M.terms(p, big, gb, arch="sm_90", compute_units=132, occupancy=1).as_dict()["epilogue"] == 128 * 128 * 4 / 1024


def test_ranking_weights_favour_each_problems_fastest_and_the_fit_follows_them():
    w = M.ranking_weights([10.0, 11.0, 20.0, 5.0, 5.0], ["a", "a", "a", "b", "b"])
    assert w[0] == w[3] == w[4] == pytest.approx(1 + M.RANK_FLOOR)
    assert w[0] > w[1] > w[2] >= M.RANK_FLOOR and w[1] == pytest.approx(M.RANK_FLOOR + math.exp(-0.1 / M.RANK_TAU))
    # two problems, each with a fast and a slow candidate; the truth has a cost the terms cannot
    # express on the slow ones (an extra 30%): weighted by groups, the fit prices the fast ones right
    p = PROBLEMS[0]
    launches = [x for x in _launches() if x[0] is p]
    truth = M.CostModel("sm_90", tuple(0.2 if t in ("main_iter", "main_loads_shared", "epilogue") else 0.0 for t in M.TERMS))
    samples, groups = [], []
    for (pp, s, geo), occ in itertools.product(launches, (1, 2)):
        t = M.terms(pp, s, geo, arch="sm_90", compute_units=132, occupancy=occ)
        samples.append((t, truth.predict(t)))
        groups.append("p")
    times = [us for _, us in samples]
    fast = min(range(len(times)), key=times.__getitem__)
    skewed = [(t, us if i == fast else us * 1.3) for i, (t, us) in enumerate(samples)]
    plain = M.fit(skewed, arch="sm_90", prior=M.default_prior("sm_90"))
    ranked = M.fit(skewed, arch="sm_90", prior=M.default_prior("sm_90"), groups=groups)
    err = lambda m: abs(m.predict(skewed[fast][0]) / skewed[fast][1] - 1)  # noqa: E731
    assert err(ranked) < err(plain)


def test_ranking_weights_are_relative_to_the_fastest_of_any_family():
    # a depthwise problem: its dense candidates (1000+ us) lose to a 30 us depthwise kernel, so
    # they weigh the floor, not 1 + floor for the fastest dense one
    w = M.ranking_weights([1000.0, 1200.0, 10.0], ["dw", "dw", "dense"], fastest={"dw": 30.0})
    assert w[0] == w[1] == pytest.approx(M.RANK_FLOOR) and w[2] == pytest.approx(1 + M.RANK_FLOOR)


def test_atomic_adds_are_priced_device_wide():
    p = parse_problem("n=48,c=160,k=80,h=40,w=40,y=1,x=1,stride=2,dtype=fp16,dw_dtype=fp32")
    for bm, warps in ((64, 4), (128, 8)):
        s = _spec("wgrad_sk", "workspace", p, bm=bm, warps=warps, mode="dp_sk")
        for pool in (132, 264):
            g = launch_geometry(p, "wgrad_sk", "workspace", bm=bm, bn=128, bk=64, mode="dp_sk", pool=pool)
            part = g.partition
            ds = [M.terms(p, s, g, arch="sm_90", compute_units=132, occupancy=o).as_dict()["fixup_atomic"] for o in (1, 2)]
            # every SK segment adds one partial tile: (CTAs + tile boundaries) x BM x BN, per CU;
            # co-residency does not change the count
            assert ds[0] == ds[1] == pytest.approx((part.sk_ctas + part.sk_tiles) * bm * 128 / 1024 / 132)
    sp = _spec("wgrad", "atomic", p)
    g = launch_geometry(p, "wgrad", "atomic", bm=64, bn=128, bk=64, ks_count=30)
    assert M.terms(p, sp, g, arch="sm_90", compute_units=132, occupancy=2).as_dict()["fixup_atomic"] == pytest.approx(
        g.grid * 64 * 128 / 1024 / 132)  # fmt: skip


def test_a_persistent_cta_stores_every_dp_tile_it_walks():
    p = parse_problem("n=4,c=384,k=2048,h=4,w=4,y=3,x=3,padding=1,dtype=fp16,dw_dtype=fp32")  # 16 x 27 = 432 tiles of 128x128
    s = _spec("wgrad_sk", "linear", p, bm=128, warps=8, mode="persistent")
    g = launch_geometry(p, "wgrad_sk", "linear", bm=128, bn=128, bk=64, mode="persistent", pool=132,
                        flags_per_cta=s.flags_per_cta(32) or None)  # fmt: skip
    part = g.partition
    assert g.grid == 132 and part.dp_tiles == 2 * 132 and part.sk_ctas  # two DP tiles each, then an SK range
    d = M.terms(p, s, g, arch="sm_90", compute_units=132, occupancy=1).as_dict()
    sk_len = part.iters_per_sk_cta + (1 if part.extra_iters else 0)
    walks = math.ceil(part.dp_tiles / part.pool) + 1 + (sk_len - 1) / part.iters_per_tile  # and one per tile its SK range touches
    assert walks >= 3 and d["epilogue"] == pytest.approx(walks * 128 * 128 * 4 / 1024)
    dp = _spec("wgrad_sk", "linear", p, bm=128, warps=8, mode="dp_sk")
    gd = launch_geometry(p, "wgrad_sk", "linear", bm=128, bn=128, bk=64, mode="dp_sk", pool=132,
                         flags_per_cta=dp.flags_per_cta(32) or None)  # fmt: skip
    dd = M.terms(p, dp, gd, arch="sm_90", compute_units=132, occupancy=1).as_dict()  # one tile per CTA, in waves
    pd = gd.partition
    sk_len = pd.iters_per_sk_cta + (1 if pd.extra_iters else 0)
    assert dd["epilogue"] == pytest.approx((math.ceil(gd.grid / 132) + (sk_len - 1) / pd.iters_per_tile) * 128 * 128 * 4 / 1024)


def test_split_k_shared_terms_count_the_busiest_cus_ctas_so_a_tail_wave_is_cheap():
    # randg24_09's shape (grouped 3x3, 96 channels in 24 groups, N=32, 112 px, 15 packed tiles): on
    # the H200 ks 71 (1065 CTAs on 528 slots, 9 in the third wave) ran 204 us, ks 27 243 us, ks 18
    # 266 us. The busiest CU runs ceil(grid / CUs) CTAs of ks_iters each; path x r counted the
    # tail wave as a full one.
    p = parse_problem("n=32,c=96,k=96,g=24,h=112,w=112,y=3,x=3,padding=1")
    s = KernelSpec("grouped", "two_stage", "bf16", "bf16", vec_c=8, vec_k=8, bm=64, bn=64, bk=64, block=8, num_stages=3)
    loads = {}
    for ks in (18, 27, 71):
        geo = launch_geometry(p, "grouped", "two_stage", bm=64, bn=64, bk=64, ks_count=ks, groups_per_tile=8)
        assert geo.grid == 15 * ks
        t = M.terms(p, s, geo, arch="sm_90", compute_units=132, occupancy=4)
        per_iter = s.bk * (s.bm / s.vec_k + s.bn / s.vec_c) / 1024.0
        assert t.as_dict()["main_loads_shared"] == pytest.approx(math.ceil(geo.grid / 132) * geo.ks_iters * per_iter)
        assert t.as_dict()["main_loads_shared"] <= t.path_iters * t.resident * per_iter + 1e-9  # never above a full wave's
        loads[ks] = t.as_dict()["main_loads_shared"]
    assert loads[71] < loads[27] < loads[18]  # the measured order


def test_tf32_chain_and_stream_k_gather_loads_are_priced_apart():
    p3 = parse_problem("n=32,c=64,k=64,h=56,w=56,y=3,x=3,padding=1,dtype=fp32")
    tf = KernelSpec("wgrad", "direct", "fp32", "fp32", precision="tf32", vec_c=4, vec_k=4, bm=64, bn=64, bk=32, num_stages=3)
    ie = KernelSpec("wgrad", "direct", "fp32", "fp32", precision="ieee", vec_c=4, vec_k=4, bm=64, bn=64, bk=32, num_stages=3)
    g = launch_geometry(p3, "wgrad", "direct", bm=64, bn=64, bk=32)
    d_tf = M.terms(p3, tf, g, arch="sm_90", compute_units=132, occupancy=2).as_dict()
    d_ie = M.terms(p3, ie, g, arch="sm_90", compute_units=132, occupancy=2).as_dict()
    assert d_tf["main_mac"] > 0 and d_tf["main_mac_tf32"] == pytest.approx(d_tf["main_mac"]) and d_ie["main_mac_tf32"] == 0
    # the gather term: stream-K gather kernels only (split-K and the pointwise stream-K kernel: 0)
    p1 = parse_problem("n=32,c=64,k=64,h=56,w=56,y=1,x=1")
    pb = parse_problem("n=32,c=64,k=64,h=56,w=56,y=3,x=3,padding=1")
    for p, pw in ((pb, False), (p1, True)):
        sk = KernelSpec("wgrad_sk", "workspace", "bf16", "bf16", vec_c=8, vec_k=8, bm=64, bn=128, bk=64, num_stages=3,
                        mode="dp_sk", pointwise=pw)  # fmt: skip
        geo = launch_geometry(p, "wgrad_sk", "workspace", bm=64, bn=128, bk=64, mode="dp_sk", pool=264)
        d = M.terms(p, sk, geo, arch="sm_90", compute_units=132, occupancy=2).as_dict()
        if pw:
            assert d["main_loads_sk_gather"] == 0
        else:
            assert d["main_loads_shared"] > 0 and d["main_loads_sk_gather"] == pytest.approx(d["main_loads_shared"])
        sp = KernelSpec("wgrad", "direct", "bf16", "bf16", vec_c=8, vec_k=8, bm=64, bn=128, bk=64, num_stages=3, pointwise=pw)
        d = M.terms(p, sp, launch_geometry(p, "wgrad", "direct", bm=64, bn=128, bk=64), arch="sm_90", compute_units=132, occupancy=2).as_dict()
        assert d["main_loads_sk_gather"] == 0


def test_the_packed_group_loop_has_its_own_price_per_iteration_on_the_path():
    # Model 6: the grouped loop's iterations on the critical path are priced apart; the dense
    # split-K kernel on the same geometry gets none of it.
    p = parse_problem("n=32,c=256,k=256,g=32,h=28,w=28,y=3,x=3,padding=1")
    s = KernelSpec("grouped", "two_stage", "bf16", "bf16", vec_c=8, vec_k=8, bm=64, bn=64, bk=64, block=8, num_stages=3)
    dense = KernelSpec("wgrad", "two_stage", "bf16", "bf16", vec_c=8, vec_k=8, bm=64, bn=64, bk=64, num_stages=3)
    per_path = {}
    for ks in (4, 11, 27):
        geo = launch_geometry(p, "grouped", "two_stage", bm=64, bn=64, bk=64, ks_count=ks, groups_per_tile=8)
        t = M.terms(p, s, geo, arch="sm_90", compute_units=132, occupancy=4)
        assert t.as_dict()["main_iter_grouped"] == pytest.approx(t.path_iters) and t.path_iters > 0
        per_path[ks] = t.as_dict()["main_iter_grouped"]
        td = M.terms(p, dense, geo, arch="sm_90", compute_units=132, occupancy=4)
        assert td.as_dict()["main_iter_grouped"] == 0
    assert per_path[27] < per_path[11] < per_path[4]  # more splits, a shorter path
    # the shipped H200 constants price it: a grouped launch costs more than the same terms without it
    m = M.builtin("sm_90")
    assert m.constants[M.TERMS.index("main_iter_grouped")] > 0


def test_narrow_terms_price_only_the_scalar_kernels_per_thread():
    # C = 250, K = 1036: rows of x and dW are not 16-byte aligned, so only the 1-wide kernels load them
    p = parse_problem("n=4,c=250,k=1036,h=14,w=14,y=3,x=3,padding=1,dw_dtype=fp32")
    g = launch_geometry(p, "wgrad", "direct", bm=64, bn=128, bk=64, ks_count=1)
    terms = {}
    for vec, warps in ((1, 4), (1, 8), (2, 4)):
        s = KernelSpec("wgrad", "direct", p.dtype, p.dw_dtype, vec_c=vec, vec_k=vec, bm=64, bn=128, bk=64, num_warps=warps, num_stages=3)
        t = M.terms(p, s, g, arch="sm_90", compute_units=132, occupancy=1)
        terms[vec, warps] = t.as_dict()
        path = t.path_iters  # 306 tiles on 132 SMs: 3 waves of one CTA each
    t1 = terms[1, 4]
    assert path == 3 * g.ks_iters
    # fp32 dW stored 1 element per instruction where 4 fit in 16 bytes: 3 of 4 stores are extra
    # (epilogue counts the bytes: 4 per element)
    assert t1["epilogue_narrow"] == pytest.approx(t1["epilogue"] / 4 * (1 - 4 / 16))
    # loads: 8 bf16 fit 16 bytes, a 1-wide kernel issues 7 of 8 of its loads beyond that, per thread
    assert t1["main_loads_narrow"] == pytest.approx(path * 64 * (64 + 128) * (1 - 1 / 8) / 1024)
    # twice the threads: half the instructions each
    assert terms[1, 8]["epilogue_narrow"] == pytest.approx(t1["epilogue_narrow"] / 2)
    assert terms[1, 8]["main_loads_narrow"] == pytest.approx(t1["main_loads_narrow"] / 2)
    # wider vectors: fewer
    assert 0 < terms[2, 4]["main_loads_narrow"] < t1["main_loads_narrow"]
    assert 0 < terms[2, 4]["epilogue_narrow"] < t1["epilogue_narrow"]
    # the full-width vector kernels have none (the other terms price them as before)
    for p_, s, geo in _launches():
        d = M.terms(p_, s, geo, arch="sm_90", compute_units=132, occupancy=2).as_dict()
        assert d["epilogue_narrow"] == 0 and d["main_loads_narrow"] == 0


@pytest.mark.parametrize("ks", [2, 16, 79])
def test_splitk_workspace_prices_its_atomics_and_one_reset_replica(ks):
    # ResNet-50 layer1 3x3 64 channels, N=32, the 64x128 tile: what two_stage pays per split (a
    # replica stored, a longer Stage-2 chain), workspace pays as atomics into one replica
    p = parse_problem("n=32,c=64,k=64,h=56,w=56,y=3,x=3,padding=1")
    d = {}
    for v in ("two_stage", "workspace", "atomic"):
        q = p if v != "atomic" else parse_problem("n=32,c=64,k=64,h=56,w=56,y=3,x=3,padding=1,dw_dtype=fp32")
        geo = launch_geometry(q, "wgrad", v, bm=64, bn=128, bk=64, ks_count=ks)
        d[v] = M.terms(q, _spec("wgrad", v, q), geo, arch="sm_90", compute_units=132, occupancy=2).as_dict()
    ws, ts, at = d["workspace"], d["two_stage"], d["atomic"]
    geo = launch_geometry(p, "wgrad", "workspace", bm=64, bn=128, bk=64, ks_count=ks)
    # every split adds its tile, as the atomic epilogue's splits do into dW
    assert ws["fixup_atomic"] == pytest.approx(geo.grid * 64 * 128 / 1024 / 132) == pytest.approx(at["fixup_atomic"])
    assert ts["fixup_atomic"] == 0
    # Stage-2 over one replica, read and zeroed again, plus dW: what stream-K workspace pays
    sk = launch_geometry(p, "wgrad_sk", "workspace", bm=64, bn=128, bk=64, mode="dp_sk", pool=264)
    dsk = M.terms(p, _spec("wgrad_sk", "workspace", p, mode="dp_sk"), sk, arch="sm_90", compute_units=132, occupancy=2).as_dict()
    assert ws["stage2"] == pytest.approx((2 * 4 + 2) * p.dw_numel / 1048576) == pytest.approx(dsk["stage2"])
    assert ws["stage2_chain"] == dsk["stage2_chain"] == math.ceil(1 / STAGE2_UNROLL)
    assert ts["stage2_chain"] == math.ceil(geo.ks_count / STAGE2_UNROLL)
    # two launches (main + Stage-2), no dW memset; its own fixed class and no other
    assert (ws["launch"], at["launch"]) == (2, 2) and ws["fixed_splitk_workspace"] == 1.0
    assert sum(v for k, v in ws.items() if k.startswith("fixed_")) == 1.0
    # the main loop and the f32 tile stores are the two-stage kernel's
    for t in ("main_iter", "main_mac", "main_loads_shared", "epilogue", "dram"):
        assert ws[t] == ts[t], t


def test_splitk_workspace_class_is_priced_and_grouped_takes_wgrads_class():
    # model 8 added the class; run V3's refit priced it (every arch: the AMD priors scale sm_90's alike)
    assert ("wgrad", "workspace") in M.CLASSES and "fixed_splitk_workspace" in M.TERMS
    sm90 = dict(zip(M.TERMS, M.builtin("sm_90").constants))
    for arch, scale in (("sm_90", 1.0), ("gfx942", 0.8), ("gfx950", 0.5)):
        c = dict(zip(M.TERMS, M.builtin(arch).constants))
        assert c["fixed_splitk_workspace"] > 0 and c["fixed_splitk_workspace"] == pytest.approx(scale * sm90["fixed_splitk_workspace"]), arch
    # the grouped kernels take wgrad's class
    p = parse_problem("n=32,c=256,k=256,g=32,h=28,w=28,y=3,x=3,padding=1")
    s = KernelSpec("grouped", "workspace", "bf16", "bf16", vec_c=8, vec_k=8, bm=64, bn=64, bk=64, block=8, num_stages=3)
    geo = launch_geometry(p, "grouped", "workspace", bm=64, bn=64, bk=64, ks_count=11, groups_per_tile=8)
    d = M.terms(p, s, geo, arch="sm_90", compute_units=132, occupancy=4).as_dict()
    assert d["fixed_splitk_workspace"] == 1.0 and d["fixup_atomic"] == pytest.approx(geo.grid * 64 * 64 / 1024 / 132)
    assert d["stage2_chain"] == 1 and d["launch"] == 2
    # a stored model of the previous version names other terms: it is not read
    old = json.loads(M.builtin("sm_90").to_json())
    old.update(version=M.MODEL_VERSION - 1, terms=list(M.TERMS[:-1]), constants=old["constants"][:-1])
    with pytest.raises(ProblemError, match=f"version {M.MODEL_VERSION}"):
        M.CostModel.from_json(json.dumps(old))


@pytest.mark.parametrize("variant, dw, ks, divided", [("direct", "bf16", 1, True), ("atomic", "fp32", 4, False), ("direct", "fp32", 1, False)])
def test_a_grouped_tma_tiles_stores_priced_by_its_epilogue(variant, dw, ks, divided):
    """A wgrad_tma tile packing GB groups stores (or adds) GB diagonal blocks. The 16-bit direct
    epilogue costs 1/GB of a tile: its epilogue and atomic terms are a dense problem's with the
    same tiles and grid, / GB. The fp32 epilogue (from the wgmma registers) issues the whole
    tile's instructions, masked: counted whole."""
    from skwgrad.abi.launch import tma_geometry, tma_groups_per_tile

    grouped = parse_problem(f"n=16,c=256,k=256,g=32,h=14,w=14,y=3,x=3,padding=1,dw_dtype={dw}")  # 8 channels a group
    for bm, bn, block, warps in ((64, 64, 1, 4), (64, 256, 4, 4), (128, 128, 1, 8)):
        gb = tma_groups_per_tile(grouped, bm, bn // block)
        assert gb > 1
        # the dense problem of the same packed tiles: G/GB groups of GB*C channels are one tile each
        dense = parse_problem(f"n=16,c={8 * gb},k={8 * gb},h=14,w=14,y=3,x=3,padding=1,dw_dtype={dw}")
        s = KernelSpec("wgrad_tma", variant, "bf16", dw, vec_c=8, vec_k=8, bm=bm, bn=bn, bk=64, num_warps=warps,
                       num_stages=4, block=block)  # fmt: skip
        tg = tma_geometry(grouped, variant, bm=bm, bn=bn, bk=64, taps_per_tile=block, ks_count=ks)
        td = tma_geometry(dense, variant, bm=bm, bn=bn, bk=64, taps_per_tile=block, ks_count=ks)
        # same tiles per group, G / GB = 32 / GB as many groups: compare per launch of equal grid
        assert tg.grid == td.grid * (32 // gb)
        a = M.terms(grouped, s, tg, arch="sm_90", compute_units=132, occupancy=1).as_dict()
        b = M.terms(dense, s, td, arch="sm_90", compute_units=132, occupancy=1).as_dict()
        share = 1 / gb if divided else 1.0  # of a tile, per CTA
        assert a["fixup_atomic"] == pytest.approx(b["fixup_atomic"] * (32 // gb) * share)
        assert (a["fixup_atomic"] > 0) == (variant == "atomic")
        waves = math.ceil(tg.grid / 132) / math.ceil(td.grid / 132)
        assert a["epilogue"] == pytest.approx(b["epilogue"] * waves * share) and a["epilogue"] > 0


def test_the_tma_loop_on_a_1x1_stride_1_layer_pays_its_own_price():
    """main_iter_tma_pointwise (model 10) is a TMA launch's path on a 1x1 stride-1 layer, and zero
    on other layers and for the Triton kernels (whose pointwise ones read x as a plain matrix)."""
    from skwgrad.abi.launch import spec_geometry, tma_geometry

    s = KernelSpec("wgrad_tma", "atomic", "bf16", "fp32", vec_c=8, vec_k=8, bm=64, bn=64, bk=64, num_warps=4, num_stages=4, block=1)
    for text, pointwise in (("y=1,x=1", True), ("y=1,x=1,stride=2", False), ("y=3,x=3,padding=1", False)):
        p = parse_problem(f"n=32,c=128,k=64,h=56,w=56,{text},dw_dtype=fp32")
        geo = tma_geometry(p, "atomic", bm=64, bn=64, bk=64, taps_per_tile=1, ks_count=8)
        t = M.terms(p, s, geo, arch="sm_90", compute_units=132, occupancy=2)
        d = t.as_dict()
        assert d["main_iter_tma"] == t.path_iters > 0
        assert d["main_iter_tma_pointwise"] == (t.path_iters if pointwise else 0.0), text
    p = parse_problem("n=32,c=128,k=64,h=56,w=56,y=1,x=1,dw_dtype=fp32")
    sp = KernelSpec("wgrad", "atomic", "bf16", "fp32", pointwise=True, vec_c=8, vec_k=8, bm=64, bn=64, bk=64)
    assert M.terms(p, sp, spec_geometry(p, sp, threads=128, ks_count=8), arch="sm_90", compute_units=132,
                   occupancy=2).as_dict()["main_iter_tma_pointwise"] == 0.0  # fmt: skip
    assert M.builtin("sm_90").constants[M.TERMS.index("main_iter_tma_pointwise")] > 0


def test_the_tma_loop_on_a_3d_layer_pays_its_cu_iterations():
    """main_iter_tma_3d (model 11) is a 3-D TMA launch's CTA-iterations on its busiest CU (the
    count main_bytes_tma prices per byte), zero on 2-D layers and for the Triton kernels."""
    from skwgrad.abi.launch import spec_geometry, tma_geometry

    for dims, text in ((3, "d=8,h=28,w=28,z=3,y=3,x=3,padding=1"), (2, "h=28,w=28,y=3,x=3,padding=1")):
        p = parse_problem(f"n=8,c=64,k=64,{text},dw_dtype=fp32")
        s = KernelSpec("wgrad_tma", "atomic", "bf16", "fp32", spatial_dims=dims, vec_c=8, vec_k=8, bm=64, bn=64, bk=64, num_warps=4,
                       num_stages=4, block=1)  # fmt: skip
        for ks, occ in ((4, 3), (30, 2)):
            geo = tma_geometry(p, "atomic", bm=64, bn=64, bk=64, taps_per_tile=1, ks_count=ks)
            d = M.terms(p, s, geo, arch="sm_90", compute_units=132, occupancy=occ).as_dict()
            cu_iters = d["main_bytes_tma"] / (64 * (64 + 64) * 2 / 1024)
            assert cu_iters == math.ceil(geo.grid / 132) * geo.ks_iters  # a split-K grid's busiest CU
            assert d["main_iter_tma_3d"] == (pytest.approx(cu_iters) if dims == 3 else 0.0)
    p = parse_problem("n=8,c=64,k=64,d=8,h=28,w=28,z=3,y=3,x=3,padding=1,dw_dtype=fp32")
    sw = KernelSpec("wgrad", "atomic", "bf16", "fp32", spatial_dims=3, vec_c=8, vec_k=8, bm=64, bn=64, bk=64)
    assert M.terms(p, sw, spec_geometry(p, sw, threads=128, ks_count=8), arch="sm_90", compute_units=132,
                   occupancy=2).as_dict()["main_iter_tma_3d"] == 0.0  # fmt: skip
    assert M.builtin("sm_90").constants[M.TERMS.index("main_iter_tma_3d")] > 0


def test_a_tma_launch_takes_at_least_its_fill_at_the_sms_ceiling():
    """TMA_FILL_CEILING bounds a TMA launch from below: the busiest CU's bytes landed in shared
    memory over the ceiling. On a large layer the 64x64 three-CTA launch asks for more bytes per
    MAC than that and is predicted at the bound (the terms' sum is below it), explain names
    what it adds; a short launch and the Triton kernels are priced by the terms alone."""
    from skwgrad.abi.launch import spec_geometry, tma_geometry

    m = M.builtin("sm_90")
    s = KernelSpec("wgrad_tma", "workspace", "bf16", "bf16", vec_c=8, vec_k=8, bm=64, bn=64, bk=64, num_warps=4, num_stages=4, block=1)
    # (model 14 prices three co-resident CTAs' iterations: on deeplab's layer the terms now exceed
    # the bound; on a 128 px one with fewer channels the bound still binds)
    big = parse_problem("n=8,c=256,k=256,h=128,w=128,y=3,x=3,padding=1")
    geo = tma_geometry(big, "workspace", bm=64, bn=64, bk=64, taps_per_tile=1, ks_count=2)
    t = M.terms(big, s, geo, arch="sm_90", compute_units=132, occupancy=3)
    landed = t.as_dict()["main_bytes_tma"]  # KiB the busiest CU lands
    assert t.floor_us == pytest.approx(landed / M.TMA_FILL_CEILING["sm_90"])
    linear = sum(c * x for c, x in zip(m.constants, t.values))
    assert t.floor_us > linear  # model 13's constants price the bytes landed too, so the bound binds by less than before
    assert m.predict(t) == t.floor_us
    assert m.explain(t)["tma_fill_ceiling"] == pytest.approx(t.floor_us - linear)
    small = parse_problem("n=1,c=64,k=64,h=14,w=14,y=3,x=3,padding=1")
    ts = M.terms(small, s, tma_geometry(small, "workspace", bm=64, bn=64, bk=64, taps_per_tile=1, ks_count=1),
                 arch="sm_90", compute_units=132, occupancy=3)  # fmt: skip
    assert 0 < ts.floor_us < m.predict(ts) and "tma_fill_ceiling" not in m.explain(ts)
    sw = KernelSpec("wgrad", "workspace", "bf16", "bf16", vec_c=8, vec_k=8, bm=64, bn=64, bk=64)
    tw = M.terms(big, sw, spec_geometry(big, sw, threads=128, ks_count=2), arch="sm_90", compute_units=132, occupancy=2)
    assert tw.floor_us == 0.0


def test_co_resident_tma_ctas_pay_their_cu_iterations_by_the_share_of_partial_boxes():
    """main_iter_tma_partial_box (model 12) is a TMA launch's CTA-iterations on its busiest CU times
    the share of its boxes that reach past the channels, when two or more of its CTAs share an SM;
    zero on full boxes, with one CTA an SM, and for the Triton kernels. The plane does not enter."""
    from skwgrad.abi.launch import spec_geometry, tma_geometry

    def spec(bm, bn, block):
        return KernelSpec("wgrad_tma", "atomic", "bf16", "fp32", vec_c=8, vec_k=8, bm=bm, bn=bn, bk=64, num_warps=4,
                          num_stages=4, block=block)  # fmt: skip

    # (K, C, tile, share): a dy box per iteration and `block` x boxes of bn // block channels each
    for k, c, (bm, bn, block), share in ((128, 128, (64, 64, 1), 0.0), (32, 128, (64, 64, 1), 0.5),
                                         (64, 96, (64, 64, 1), 0.25), (32, 96, (64, 64, 1), 0.75),
                                         (64, 128, (128, 64, 1), 0.5), (192, 64, (128, 64, 1), 0.25),
                                         (64, 48, (64, 128, 2), 2 / 3)):  # fmt: skip
        s = spec(bm, bn, block)
        assert M.tma_partial_box_share(parse_problem(f"n=4,c={c},k={k},h=28,w=28,y=3,x=3,padding=1"), s) == pytest.approx(share)
        for h in (28, 112):
            p = parse_problem(f"n=4,c={c},k={k},h={h},w={h},y=3,x=3,padding=1,dw_dtype=fp32")
            geo = tma_geometry(p, "atomic", bm=bm, bn=bn, bk=64, taps_per_tile=block, ks_count=40)
            cu_iters = math.ceil(geo.grid / 132) * geo.ks_iters
            for occ in (1, 3):
                t = M.terms(p, s, geo, arch="sm_90", compute_units=132, occupancy=occ)
                want = cu_iters * share if t.resident >= 2 else 0.0
                assert t.as_dict()["main_iter_tma_partial_box"] == pytest.approx(want), (k, c, h, occ)
    # a grouped layer's boxes are those of its packed groups: 8 groups of 8 channels fill 64
    g = parse_problem("n=4,c=64,k=64,g=8,h=28,w=28,y=3,x=3,padding=1")
    assert M.tma_partial_box_share(g, spec(64, 64, 1)) == 0.0
    p = parse_problem("n=8,c=96,k=32,h=112,w=112,y=3,x=3,padding=1,dw_dtype=fp32")
    sw = KernelSpec("wgrad", "atomic", "bf16", "fp32", vec_c=8, vec_k=8, bm=64, bn=64, bk=64)
    assert M.terms(p, sw, spec_geometry(p, sw, threads=128, ks_count=40), arch="sm_90", compute_units=132,
                   occupancy=3).as_dict()["main_iter_tma_partial_box"] == 0.0  # fmt: skip
    assert M.builtin("sm_90").constants[M.TERMS.index("main_iter_tma_partial_box")] > 0


def test_model_13_credits_the_pointwise_loops_loads_and_prices_splits_onto_each_dw_element():
    """main_loads_pointwise (model 13) is minus the path's loads of a Triton kernel that reads x as a
    plain matrix (split-K and stream-K pointwise kernels), zero for the im2col loops and TMA;
    fixup_atomic_chain is the splits adding into each dW element of an atomic or workspace launch
    (split-K, grouped, TMA), zero for direct, two-stage and stream-K. The credit stays below the
    shared load price, so a pointwise launch costs more than its other terms' sum less nothing."""
    from skwgrad.abi.launch import spec_geometry

    pw = parse_problem("n=32,c=960,k=320,h=7,w=7,y=1,x=1,dw_dtype=fp32")
    s2 = parse_problem("n=32,c=960,k=320,h=14,w=14,y=1,x=1,stride=2,dw_dtype=fp32")  # same GEMM, im2col
    b = M.builtin("sm_90")
    c = dict(zip(M.TERMS, b.constants))
    assert 0 < c["main_loads_pointwise"] < c["main_loads_shared"] and c["fixup_atomic_chain"] > 0
    for v, ks in (("direct", 1), ("atomic", 4), ("workspace", 4), ("two_stage", 4)):
        spw = KernelSpec("wgrad", v, "bf16", "fp32", pointwise=True, vec_c=8, vec_k=8, bm=64, bn=64, bk=64)
        sim = KernelSpec("wgrad", v, "bf16", "fp32", vec_c=8, vec_k=8, bm=64, bn=64, bk=64)
        tp = M.terms(pw, spw, spec_geometry(pw, spw, threads=128, ks_count=ks), arch="sm_90", compute_units=132, occupancy=2)
        ti = M.terms(s2, sim, spec_geometry(s2, sim, threads=128, ks_count=ks), arch="sm_90", compute_units=132, occupancy=2)
        loads = 64 * (64 / 8 + 64 / 8) / 1024.0
        assert tp.as_dict()["main_loads_pointwise"] == pytest.approx(-tp.path_iters * loads) and ti.as_dict()["main_loads_pointwise"] == 0.0
        # the credit is the one difference between the same GEMM on the two loops
        dp, di = tp.as_dict(), ti.as_dict()
        assert all(dp[n] == pytest.approx(di[n]) for n in M.TERMS if n not in ("main_loads_pointwise", "dram")), v
        assert b.predict(tp) < b.predict(ti)
        assert dp["fixup_atomic_chain"] == (float(ks) if v in ("atomic", "workspace") else 0.0), v
        assert dp["main_loads_shared"] * c["main_loads_shared"] + dp["main_loads_pointwise"] * c["main_loads_pointwise"] > 0
    sk = KernelSpec("wgrad_sk", "workspace", "bf16", "fp32", pointwise=True, vec_c=8, vec_k=8, bm=64, bn=64, bk=64, mode="dp_sk")
    t = M.terms(pw, sk, spec_geometry(pw, sk, threads=128, pool=132), arch="sm_90", compute_units=132, occupancy=1)
    assert t.as_dict()["main_loads_pointwise"] < 0 and t.as_dict()["fixup_atomic_chain"] == 0.0
    tma = KernelSpec("wgrad_tma", "atomic", "bf16", "fp32", vec_c=8, vec_k=8, bm=64, bn=64, bk=64, num_warps=4, num_stages=4, block=1)
    for ks in (2, 5):
        t = M.terms(pw, tma, spec_geometry(pw, tma, threads=160, ks_count=ks), arch="sm_90", compute_units=132, occupancy=3)
        assert t.as_dict()["fixup_atomic_chain"] == ks and t.as_dict()["main_loads_pointwise"] == 0.0
    # the explanation shows the credit, and its parts still sum to the prediction
    e = b.explain(tp)
    assert e["main_loads_pointwise"] < 0 and sum(e.values()) == pytest.approx(b.predict(tp))


def test_three_co_resident_tma_ctas_pay_their_cu_iterations():
    """main_iter_tma_three_ctas (model 14) is a TMA launch's CTA-iterations on its busiest CU when its
    grid puts three CTAs on an SM; zero at two or one, and for the Triton kernels. With it the model
    no longer ranks the three-CTA split of a 56 px 1x1 layer (392 CTAs, what auto took in H200 runs
    F1/F2, 1.06-1.08x the fastest) ahead of the same kernel at two CTAs an SM (264, the faster)."""
    from skwgrad.abi.launch import spec_geometry, tma_geometry

    m = M.builtin("sm_90")
    assert m.constants[M.TERMS.index("main_iter_tma_three_ctas")] > 0
    p = parse_problem("n=32,c=64,k=256,h=56,w=56,y=1,x=1")
    s = KernelSpec("wgrad_tma", "workspace", "bf16", "bf16", vec_c=8, vec_k=8, bm=64, bn=64, bk=64, num_warps=4, num_stages=4, block=1)
    got = {}
    for ks in (98, 66, 33):
        geo = tma_geometry(p, "workspace", bm=64, bn=64, bk=64, taps_per_tile=1, ks_count=ks)
        t = M.terms(p, s, geo, arch="sm_90", compute_units=132, occupancy=3)
        d = t.as_dict()
        cu_iters = d["main_bytes_tma"] / (64 * (64 + 64) * 2 / 1024)
        assert d["main_iter_tma_three_ctas"] == (pytest.approx(cu_iters) if t.resident >= 3 else 0.0), ks
        got[ks] = (t.resident, m.predict(t))
    assert [got[ks][0] for ks in (98, 66, 33)] == [3, 2, 1]
    assert got[66][1] < got[98][1]  # model 13 ranked 98 first (19.2 against 19.3 us predicted)
    sw = KernelSpec("wgrad", "workspace", "bf16", "bf16", pointwise=True, vec_c=8, vec_k=8, bm=64, bn=64, bk=64)
    tw = M.terms(p, sw, spec_geometry(p, sw, threads=128, ks_count=98), arch="sm_90", compute_units=132, occupancy=3)
    assert tw.resident == 3 and tw.as_dict()["main_iter_tma_three_ctas"] == 0.0


def test_tma_grid_waves_beyond_the_first_are_priced():
    """fill_tma_extra_waves (model 15) is a TMA grid's waves beyond the first: zero for a one-wave grid
    and a persistent pool, and for the Triton kernels. With it the model ranks the 128x128 persistent
    pool on UNet's 1280-channel 16 px layer (85 us on the H200, run F5) ahead of the one-CTA-per-unit
    128x256 grid of 450 CTAs that model 14 took there (97 us, four waves)."""
    from skwgrad.abi.launch import spec_geometry, tma_geometry

    m = M.builtin("sm_90")
    assert m.constants[M.TERMS.index("fill_tma_extra_waves")] > 0
    p = parse_problem("n=8,c=1280,k=1280,h=16,w=16,y=3,x=3,padding=1")
    wide = KernelSpec("wgrad_tma", "direct", "bf16", "bf16", vec_c=8, vec_k=8, bm=128, bn=256, bk=64, num_warps=8, num_stages=3, block=1)
    pers = KernelSpec("wgrad_tma", "direct", "bf16", "bf16", vec_c=8, vec_k=8, bm=128, bn=128, bk=64, num_warps=8, num_stages=4, block=1, mode="persistent")
    geo = tma_geometry(p, "direct", bm=128, bn=256, bk=64, taps_per_tile=1)
    assert geo.grid == 450
    t_wide = M.terms(p, wide, geo, arch="sm_90", compute_units=132, occupancy=1)
    assert t_wide.as_dict()["fill_tma_extra_waves"] == 3.0
    geo = tma_geometry(p, "direct", bm=128, bn=128, bk=64, taps_per_tile=1, pool=132)
    t_pers = M.terms(p, pers, geo, arch="sm_90", compute_units=132, occupancy=1)
    assert t_pers.as_dict()["fill_tma_extra_waves"] == 0.0
    assert m.predict(t_pers) < m.predict(t_wide)  # model 14 ranked the 450-CTA grid first (87.8 against 88.2 us)
    sw = KernelSpec("wgrad", "direct", "bf16", "bf16", vec_c=8, vec_k=8, bm=128, bn=128, bk=64, num_warps=8, num_stages=3)
    tw = M.terms(p, sw, spec_geometry(p, sw, threads=256), arch="sm_90", compute_units=132, occupancy=1)
    assert tw.as_dict()["fill_tma_extra_waves"] == 0.0
