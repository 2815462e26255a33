"""Judge cost-model constants offline on the whole search space a device timed.

    python benchmarks/judge_dryrun.py --cache C --dryrun all_X.json[.xz] [--dryrun ...] \
        [--fit-product tma_auto_Y.json ...] [--fit TERM,TERM] --out judged.json

``--dryrun``: ``skwgrad calibrate --dry-run`` records (every candidate of each problem timed in one
process). Per problem, the pick of a model is the unpadded modelled launch it predicts fastest; it
is judged against the fastest unpadded modelled launch timed (padded launches are priced apart,
``costmodel.padding_us``, and are left out of both; ``best_padded`` counts the problems whose
overall fastest was padded). Each launch's terms are recomputed from the cache's metadata at the
occupancy the device reported, as ``calibrate`` fits them.

``--fit-product``: ``gpu_tma_auto.py`` runs to refit ``--fit`` terms on (FIT_ALL of
fit_tma_terms.py by default: the TMA loop and every class's fixed cost), every other constant held
at the shipped ones; the refit is then judged on the ``--dryrun`` problems beside the shipped
constants. Keep the dry-run's shapes out of the fit runs: that is the held-out judgement.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from results_io import read_json  # noqa: E402

import skwgrad.abi.costmodel as M  # noqa: E402


def dryrun_samples(doc: dict, cache) -> list[dict]:
    """One sample per timed, unpadded, modelled launch of a dry-run record: row, label, us, terms."""
    from skwgrad.abi.conv import parse_problem
    from skwgrad.abi.launch import spec_geometry, takes_pool

    out = []
    for r in doc["rows"]:
        if "us" not in r or r.get("family") not in M.MODELLED_FAMILIES or not r.get("occupancy") or r.get("pad_keys"):
            continue
        p = parse_problem(r["problem"])
        entry = cache.get(r["key"])
        spec, md = entry.spec, entry.metadata
        setting = dict(pool=int(r["pool"]) if takes_pool(spec) else 0, ks_count=1 if spec.family == "wgrad_sk" else int(r["ks_count"]))
        geo = spec_geometry(p, spec, threads=int(md["threads"]), **setting)
        t = M.terms(p, spec, geo, arch=doc["arch"], compute_units=int(doc["compute_units"]), occupancy=int(r["occupancy"]),
                    stack_bytes=int(md.get("stack_bytes", 0)))  # fmt: skip
        out.append({"row": r["name"], "label": r["label"], "us": float(r["us"]), "terms": t, "recorded_predicted_us": r.get("predicted_us")})
    return out


def best_padded(doc: dict) -> int:
    by: dict = {}
    for r in doc["rows"]:
        if "us" in r:
            by.setdefault(r["name"], []).append(r)
    return sum(1 for rs in by.values() if min(rs, key=lambda r: r["us"]).get("pad_keys"))


def judge(rows: list[dict], constants: tuple) -> dict:
    """Per problem, the model's pick against the fastest; the rows missed by more than 5%."""
    model = M.CostModel("sm_90", constants, source="fit")
    by: dict = {}
    for r in rows:
        by.setdefault(r["row"], []).append(r)
    ratios, misses = [], []
    for name, rs in by.items():
        pick = min(rs, key=lambda r: model.predict(r["terms"]))
        best = min(rs, key=lambda r: r["us"])
        ratios.append(pick["us"] / best["us"])
        if ratios[-1] > 1.05:
            misses.append({"row": name, "ratio": round(ratios[-1], 3), "pick": pick["label"], "best": best["label"]})
    return {"rows": len(ratios), "within_5pct": sum(x <= 1.05 for x in ratios),
            "geomean_pick_over_best": math.exp(sum(map(math.log, ratios)) / len(ratios)), "misses": misses}  # fmt: skip


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--dryrun", action="append", required=True)
    ap.add_argument("--fit-product", action="append", default=[])
    ap.add_argument("--fit", default="", help="comma list of terms to refit (default: fit_tma_terms.FIT_ALL)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from fit_tma_terms import FIT_ALL, all_family_samples, fit_some

    from skwgrad.cache.store import Cache

    cache = Cache(a.cache, create=False)
    base = M.builtin("sm_90").constants
    doc = {"dryrun": a.dryrun, "fit_product": a.fit_product, "judged": {}}
    per_run = {}
    for path in a.dryrun:
        d = read_json(path)
        per_run[Path(path).name] = rows = dryrun_samples(d, cache)
        doc["judged"][Path(path).name] = {"shipped": judge(rows, base), "best_padded": best_padded(d)}
    held = [r for rows in per_run.values() for r in rows]
    doc["judged"]["all"] = {"shipped": judge(held, base)}
    if a.fit_product:
        names = tuple(a.fit.split(",")) if a.fit else FIT_ALL
        train = []
        for path in a.fit_product:
            run = Path(path).stem
            train += [dict(r, row=f"{run}:{r['row']}") for r in all_family_samples(read_json(path), cache)]
        values, seen = fit_some(train, base, names)
        c = list(base)
        for n, v, s in zip(names, values, seen):
            if s:
                c[M.TERMS.index(n)] = v
        doc["refit"] = {"terms": list(names), "train_samples": len(train), "constants": {n: c[M.TERMS.index(n)] for n in names},
                        "shipped": {n: base[M.TERMS.index(n)] for n in names}}  # fmt: skip
        for name, rows in per_run.items():
            doc["judged"][name]["refit"] = judge(rows, tuple(c))
        doc["judged"]["all"]["refit"] = judge(held, tuple(c))
    Path(a.out).write_text(json.dumps(doc, indent=1))
    for k, v in doc["judged"].items():
        print(k, {m: (j["within_5pct"], j["rows"], round(j["geomean_pick_over_best"], 4)) for m, j in v.items() if isinstance(j, dict)})


if __name__ == "__main__":
    main()
