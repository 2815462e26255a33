"""Fit the cost model's TMA im2col constants (model 9) from the H200 timings of the Gluon loop.

    .venv/bin/python benchmarks/fit_tma_terms.py benchmarks/results/gluon_im2col_2026-12-03_r3.json \
        --out benchmarks/results/costmodel_tma_fit_2026-12-03.json

Each timed configuration of ``benchmarks/mainloop/gluon_run.py`` (warp-specialized, the kernel the
product's ``wgrad_tma`` family compiles) becomes a ``wgrad_tma`` spec: the direct kernels as
``direct``, the fp32-atomic ones as ``atomic`` (their timing is the kernel alone, as the product's
atomic launch after its dW memset). Its terms come from the product's geometry and cost model
(occupancy from the compiled object, built here); every constant but the five TMA ones is held at
the built-in value, and those five (main_iter_tma, main_mac_tma, main_bytes_tma, fixed_tma_direct,
fixed_tma_atomic) are fitted by non-negative least squares on relative error, ranking-weighted per
row. fixed_tma_workspace takes fixed_tma_atomic (the same kernel; Stage-2 is priced by its own terms).

Judged by shape set: fitted on the rows of one corpus file, the model's pick among the TMA
configurations of each row of the other file is compared with that row's fastest measured one.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import numpy as np

from skwgrad.abi import costmodel as M
from skwgrad.abi.conv import ConvProblem
from skwgrad.abi.launch import tma_geometry
from skwgrad.abi.spec import KernelSpec

FIT = ("main_iter_tma", "main_mac_tma", "main_bytes_tma", "fixed_tma_direct", "fixed_tma_atomic")
_TAG = re.compile(r"(bf16|fp16)_(\d+)x(?:(\d)x)?(\d+)x(\d+)_s(\d)w(\d)_ws(_direct)?$")


def spec_of(tag: str) -> KernelSpec | None:
    m = _TAG.match(tag)
    if not m:
        return None  # the non-warp-specialized reference loop: not in the product
    dtype, bm, nt, cb, bk, st, w, direct = m.groups()
    nt = int(nt or 1)
    return KernelSpec("wgrad_tma", "direct" if direct else "atomic", dtype, dtype if direct else "fp32", vec_c=8, vec_k=8,
                      bm=int(bm), bn=nt * int(cb), bk=int(bk), num_warps=int(w), num_stages=int(st), block=nt)  # fmt: skip


def problem_of(shape: dict, dw_dtype: str) -> ConvProblem:
    s, p, d = shape["stride"], shape["padding"], shape["dilation"]
    return ConvProblem(n=shape["n"], c=shape["c"], k=shape["k"], hi=shape["h"], wi=shape["w"], y=shape["y"], x=shape["x"],
                       stride=(1, s, s), pad_lo=(0, p, p), pad_hi=(0, p, p), dilation=(1, d, d), dtype=shape["dtype"],
                       dw_dtype=dw_dtype)  # fmt: skip


def samples(doc: dict, occupancy) -> list[dict]:
    out = []
    for row in doc["rows"]:
        for v in row["variants"]:
            spec = spec_of(v["tag"])
            if spec is None or not v.get("ok") or "kernel_us" not in v:
                continue
            p = problem_of(row["shape"], spec.dw_dtype)
            geo = tma_geometry(p, spec.variant, bm=spec.bm, bn=spec.bn, bk=spec.bk, taps_per_tile=spec.block, ks_count=v["ks"])
            t = M.terms(p, spec, geo, arch="sm_90", compute_units=doc["sms"], occupancy=occupancy(spec))
            out.append({"row": row["name"], "corpus": row.get("corpus", ""), "tag": v["tag"], "ks": v["ks"], "us": v["kernel_us"], "terms": t})
    return out


def fit(rows: list[dict], base: tuple) -> dict:
    idx = [M.TERMS.index(n) for n in FIT]
    fixed = np.array(base, dtype=float)
    fixed[idx] = 0.0
    a = np.array([[r["terms"].values[i] for i in idx] for r in rows])
    y = np.array([r["us"] for r in rows])
    rest = np.array([float(np.dot(fixed, r["terms"].values)) for r in rows])
    w = np.array(M.ranking_weights(list(y), [r["row"] for r in rows]))
    scale = w / y
    a_s = a * scale[:, None]
    norm = np.abs(a_s).max(axis=0)
    norm[norm == 0] = 1.0
    x = M.nnls(a_s / norm, (y - rest) * scale) / norm
    return dict(zip(FIT, (float(v) for v in x)))


def model_with(base: tuple, consts: dict) -> M.CostModel:
    c = list(base)
    for n, v in consts.items():
        c[M.TERMS.index(n)] = v
    c[M.TERMS.index("fixed_tma_workspace")] = consts["fixed_tma_atomic"]
    return M.CostModel("sm_90", tuple(c), source="fit")


def judge(rows: list[dict], model: M.CostModel) -> dict:
    by_row: dict = {}
    for r in rows:
        by_row.setdefault(r["row"], []).append(r)
    within, ratios, err = 0, [], []
    for name, rs in by_row.items():
        best = min(r["us"] for r in rs)
        pick = min(rs, key=lambda r: model.predict(r["terms"]))
        ratios.append(pick["us"] / best)
        within += pick["us"] <= 1.05 * best
        err += [abs(model.predict(r["terms"]) / r["us"] - 1) for r in rs]
    return {"rows": len(by_row), "within_5pct": within, "geomean_pick_over_best": math.exp(sum(map(math.log, ratios)) / len(ratios)),
            "median_abs_rel_error": float(np.median(err))}  # fmt: skip


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="gluon_run.py result JSON (each row's shape and per-configuration timings)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    from skwgrad.aot.compile import compile_spec

    occ_cache: dict = {}

    def occupancy(spec):
        if spec not in occ_cache:
            occ_cache[spec] = M.offline_occupancy(compile_spec(spec, "sm_90").metadata, "sm_90")
        return occ_cache[spec]

    rows = []
    for path in args.runs:
        rows += samples(json.loads(Path(path).read_text()), occupancy)
    base = M.builtin("sm_90").constants
    sets = sorted({r["corpus"] for r in rows})
    folds = {}
    for held in sets:
        consts = fit([r for r in rows if r["corpus"] != held], base)
        folds[held] = {"constants": consts, "judged": judge([r for r in rows if r["corpus"] == held], model_with(base, consts))}
    consts = fit(rows, base)
    doc = {"runs": args.runs, "samples": len(rows), "rows": len({r["row"] for r in rows}), "fitted": consts,
           "all_rows": judge(rows, model_with(base, consts)), "folds": folds,
           "occupancy": {s.label: o for s, o in occ_cache.items()}}  # fmt: skip
    Path(args.out).write_text(json.dumps(doc, indent=1))
    json.dump({k: v for k, v in doc.items() if k != "occupancy"}, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
