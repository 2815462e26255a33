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
from results_io import read_json

from skwgrad.abi import costmodel as M
from skwgrad.abi.conv import ConvProblem
from skwgrad.abi.launch import tma_geometry
from skwgrad.abi.spec import KernelSpec

FIT = ("main_iter_tma", "main_mac_tma", "main_bytes_tma", "fill_tma", "main_chain_tma", "fixed_tma_direct",
       "fixed_tma_atomic")  # fmt: skip
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


def product_samples(doc: dict, cache, *, stale_wide_dw: bool = False) -> list[dict]:
    """The TMA launches a ``gpu_tma_auto.py`` run timed through the product (plan.time, stream
    hold; the atomic dW memset and the Stage-2 reduce included), with each row's timed launches of
    the other families (``auto_old``, ``old1``..: their times and on-device predictions, whose
    constants the fit holds) kept for judging. ``stale_wide_dw``: the run predates the TMA
    epilogue that stores or adds 32-bit values from the wgmma registers (42420f2), so its TMA
    launches with an fp32 dW or an fp32 reduction (atomic, workspace) timed another kernel and are
    left out. A TMA kernel the cache no longer holds (a ring
    depth since changed) is left out too."""
    from skwgrad.abi.conv import parse_problem
    from skwgrad.abi.launch import spec_geometry

    out = []
    for row in doc["rows"]:
        ents = row.get("rows") or {}
        olds = [(e["us"], e["predicted_us"]) for k, e in ents.items()
                if (k == "auto_old" or k.startswith("old")) and e.get("ok") and e.get("us") and e.get("predicted_us")
                and not e.get("same_as") and e.get("family") != "wgrad_tma"]  # fmt: skip
        for k, e in ents.items():
            tma = k.startswith("tma") or (k == "auto" and e.get("family") == "wgrad_tma")  # auto's TMA pick is timed under "auto"
            if not tma or not e.get("ok") or not e.get("us") or e.get("same_as") or e.get("padded"):
                continue
            found = cache.lookup(e["kernel"], arch="sm_90")
            wide = found and (found[0].spec.variant != "direct" or found[0].spec.dw_dtype == "fp32")  # fp32 stores or adds
            if not found or (stale_wide_dw and wide):
                continue
            entry = found[0]
            p = parse_problem(row["problem"])
            md = entry.metadata
            geo = spec_geometry(p, entry.spec, threads=int(md["threads"]), ks_count=e["ks"], pool=e.get("pool") or 0)
            t = M.terms(p, entry.spec, geo, arch="sm_90", compute_units=doc["cus"], occupancy=M.offline_occupancy(md, "sm_90"))
            out.append({"row": row["name"], "corpus": row.get("corpus", ""), "tag": e["kernel"], "ks": e["ks"], "us": e["us"],
                        "terms": t, "device_predicted_us": e.get("predicted_us"), "olds": olds})  # fmt: skip
    return out


# model 13's two terms (the pointwise Triton loops' credit per load, the splits adding into each dW
# element) are fitted with them: they set the pointwise and atomic launches against the others
FIT_ALL = ("main_iter_tma", "main_mac_tma", "main_bytes_tma", "fill_tma", "main_chain_tma",
           *(n for n in M.TERMS if n.startswith("fixed_")), "main_loads_pointwise", "fixup_atomic_chain")  # fmt: skip


def all_family_samples(doc: dict, cache, *, stale_wide_dw: bool = False) -> list[dict]:
    """Every launch a ``gpu_tma_auto.py`` run timed (auto, the other families' best-ranked ones,
    the TMA ones), each with its terms: for refitting the constants that set one family against
    another (the TMA loop's and every class's fixed cost) on the product's own timings. Padded
    launches (their copies are priced apart) and stale wide-epilogue TMA launches are left out."""
    from skwgrad.abi.conv import parse_problem
    from skwgrad.abi.launch import spec_geometry

    out = []
    for row in doc["rows"]:
        p = parse_problem(row["problem"]) if "problem" in row else None
        for k, e in (row.get("rows") or {}).items():
            if not e.get("ok") or not e.get("us") or e.get("same_as") or e.get("padded"):
                continue
            found = cache.lookup(e["kernel"], arch="sm_90")
            if not found:
                continue
            spec = found[0].spec
            if spec.family not in M.MODELLED_FAMILIES:
                continue
            if stale_wide_dw and spec.family == "wgrad_tma" and (spec.variant != "direct" or spec.dw_dtype == "fp32"):
                continue
            md = found[0].metadata
            if spec.family == "wgrad_sk":
                setting = dict(pool=e["pool"])
            elif spec.family == "wgrad_tma" and spec.mode == "streamk":
                setting = dict(pool=e["pool"])
            elif spec.family == "wgrad_tma" and spec.mode == "persistent":
                setting = dict(ks_count=e["ks"], pool=e["pool"])
            else:
                setting = dict(ks_count=e["ks"])
            geo = spec_geometry(p, spec, threads=int(md["threads"]), **setting)
            t = M.terms(p, spec, geo, arch="sm_90", compute_units=doc["cus"], occupancy=M.offline_occupancy(md, "sm_90"),
                        stack_bytes=int(md.get("stack_bytes", 0)))  # fmt: skip
            out.append({"row": row["name"], "corpus": row.get("corpus", ""), "tag": e["kernel"], "us": e["us"], "terms": t})
    return out


def fit_all(rows: list[dict], base: tuple) -> tuple:
    """FIT_ALL fitted, every other constant held at ``base``; returns the whole constant tuple
    (a class no timing exercises keeps its constant)."""
    values, seen = fit_some(rows, base, FIT_ALL)
    c = list(base)
    for n, v, s in zip(FIT_ALL, values, seen):
        if s:
            c[M.TERMS.index(n)] = v
    return tuple(c)


def judge_all(rows: list[dict], constants: tuple) -> dict:
    """Per row, the model's pick among every timed launch against the fastest of them."""
    model = M.CostModel("sm_90", constants, source="fit")
    by_row: dict = {}
    for r in rows:
        by_row.setdefault(r["row"], []).append(r)
    # rows with one timed launch have nothing to rank
    ratios = [min(rs, key=lambda r: model.predict(r["terms"]))["us"] / min(r["us"] for r in rs) for rs in by_row.values() if len(rs) > 1]
    return {"rows": len(ratios), "within_5pct": sum(x <= 1.05 for x in ratios),
            "geomean_pick_over_best": math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None}  # fmt: skip


def main_all(args):
    """--all-families: refit FIT_ALL on every timed launch of the --product runs; K-fold
    cross-validation by row; judged on --held-out corpora when given."""
    rows, base, held, train = load_runs(args, all_family_samples)
    folds = max(2, args.folds or 5)
    refit, shipped = [], []
    for fit_rows, test in k_folds(train, folds):
        refit.append(judge_all(test, fit_all(fit_rows, base)))
        shipped.append(judge_all(test, base))
    consts = fit_all(train, base)
    doc = {"product_run": args.product, "held_out": args.held_out, "samples": len(rows), "train_samples": len(train),
           "cross_validated": {"folds": folds, "refit": total(refit), "shipped": total(shipped)},
           "fitted_on_train": {n: consts[M.TERMS.index(n)] for n in FIT_ALL},
           "shipped": {n: base[M.TERMS.index(n)] for n in FIT_ALL}}  # fmt: skip
    if held:
        doc["held_out_judged"] = {"refit": judge_all(held, consts), "shipped": judge_all(held, base)}
    Path(args.out).write_text(json.dumps(doc, indent=1))
    json.dump(doc, sys.stdout, indent=1)


def judge_against_old(rows: list[dict], model: M.CostModel) -> dict:
    """Per row, the pick among the timed candidates (the best other family at its on-device
    prediction, and the timed TMA launches at ``model``'s) against the fastest of them."""
    by_row: dict = {}
    for r in rows:
        by_row.setdefault(r["row"], []).append(r)
    within, ratios, takes = 0, [], 0
    for name, rs in by_row.items():
        cands = [(model.predict(r["terms"]), r["us"], True) for r in rs]
        cands += [(pred, us, False) for us, pred in rs[0]["olds"]]
        best = min(c[1] for c in cands)
        pick = min(cands)
        takes += pick[2]
        ratios.append(pick[1] / best)
        within += pick[1] <= 1.05 * best
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
    return {"rows": len(by_row), "within_5pct": within, "geomean_pick_over_best": geo, "takes_tma": takes}


def k_folds(rows: list[dict], folds: int, seed: int = 1):
    """(fit rows, judged rows) of each of ``folds`` folds by row (all timings of a row in one fold)."""
    import random

    names = sorted({r["row"] for r in rows})
    random.Random(seed).shuffle(names)
    for k in range(folds):
        held = set(names[k::folds])
        yield [r for r in rows if r["row"] not in held], [r for r in rows if r["row"] in held]


def total(judged: list[dict]) -> dict:
    """Folds' judgements summed: rows, rows within 5%, geomean of pick / best over all rows."""
    n = sum(j["rows"] for j in judged)
    return {"rows": n, "within_5pct": sum(j["within_5pct"] for j in judged),
            "geomean_pick_over_best": math.exp(sum(j["rows"] * math.log(j["geomean_pick_over_best"]) for j in judged if j["rows"]) / n)}  # fmt: skip


def cross_validate(rows: list[dict], base: tuple, folds: int, seed: int = 1) -> dict:
    """K folds by row: fitted on the other folds, the pick among each held-out row's timed
    launches, refit against the shipped constants."""
    refit, shipped = [], []
    for train, test in k_folds(rows, folds, seed):
        refit.append(judge_against_old(test, model_with(base, fit(train, base))))
        shipped.append(judge_against_old(test, M.CostModel("sm_90", base)))
    return {"folds": folds, "seed": seed, "refit": total(refit), "shipped": total(shipped)}


def load_runs(args, samples_of) -> tuple:
    """(every sample, built-in constants, held-out samples, the rest) of the --product runs, each
    row named by run (a row timed in several runs contributes each run's timings)."""
    from skwgrad.cache.store import Cache

    cache = Cache(args.cache, create=False)
    rows = []
    for path in args.product:
        run = Path(path).stem
        rows += [dict(r, row=f"{run}:{r['row']}") for r in samples_of(read_json(path), cache, stale_wide_dw=path in args.stale_wide_dw)]
    held = [r for r in rows if r["corpus"] in args.held_out]
    return rows, M.builtin("sm_90").constants, held, [r for r in rows if r["corpus"] not in args.held_out]


def fit_some(rows: list[dict], base: tuple, names) -> tuple:
    """The constants ``names`` fitted (non-negative least squares on relative error,
    ranking-weighted per row), every other constant held at ``base``: (fitted values in ``names``
    order, whether some timing exercised each)."""
    idx = [M.TERMS.index(n) for n in names]
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
    return [float(v) for v in x], list((np.abs(a) > 0).any(axis=0))


def fit(rows: list[dict], base: tuple) -> dict:
    return dict(zip(FIT, fit_some(rows, base, FIT)[0]))


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


def main_product(args):
    rows, base, held, train = load_runs(args, product_samples)
    consts = fit(train, base)
    shipped = M.CostModel("sm_90", base)
    out = {"product_run": args.product, "held_out": args.held_out, "samples": len(rows), "train_samples": len(train),
           "fitted_on_train": consts,
           "held_out_judged": {"refit": judge_against_old(held, model_with(base, consts)), "shipped": judge_against_old(held, shipped)},
           "train_judged": {"refit": judge_against_old(train, model_with(base, consts)), "shipped": judge_against_old(train, shipped)}}
    if args.folds:
        out["cross_validated"] = cross_validate(rows, base, args.folds)
    out["fitted_on_all"] = fit(rows, base)
    out["all_judged"] = judge_against_old(rows, model_with(base, out["fitted_on_all"]))
    Path(args.out).write_text(json.dumps(out, indent=1))
    json.dump(out, sys.stdout, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", help="gluon_run.py result JSON (each row's shape and per-configuration timings)")
    ap.add_argument("--product", action="append", help="gpu_tma_auto.py result JSON(s): fit on the product's own timings instead")
    ap.add_argument("--cache", help="with --product: the cache the run used (the kernels' metadata)")
    ap.add_argument("--held-out", action="append", default=[], help="with --product: corpus file name(s) the fit never sees")
    ap.add_argument("--folds", type=int, default=0, help="with --product: also K-fold cross-validation by row")
    ap.add_argument("--all-families", action="store_true",
                    help="with --product: refit the TMA loop and every class's fixed cost on every timed launch, any family")
    ap.add_argument("--stale-wide-dw", action="append", default=[],
                    help="with --product: a run (one of the --product files) timed before the 32-bit dW TMA epilogue: its 32-bit dW TMA launches are left out")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.product and args.all_families:
        return main_all(args)
    if args.product:
        return main_product(args)
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
