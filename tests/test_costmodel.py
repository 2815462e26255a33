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
from skwgrad.abi.launch import launch_geometry
from skwgrad.abi.spec import KernelSpec
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
            for v in ("direct", "two_stage"):
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
    for bad in ({**d, "version": 2}, {**d, "terms": d["terms"][:-1]}, {**d, "constants": d["constants"][:-1]},
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
