"""auto vs tuned, both timed the same way in one pass: for each problem of a ``calibrate
--dry-run`` sweep, auto's choice (``choose``, no tuned records: what a user gets) and the sweep's
``--top`` fastest candidates are timed again, interleaved, ``--rounds`` times (median of ``--iters``
event-timed launches each, behind a stream hold), and each is scored by the median of its rounds.

Why: the sweep's fastest time is the minimum over ~100 candidates, each timed once; that
minimum is biased low by timing noise, and auto's own time (run-from-cache) comes from another
pass, minutes later. Re-timing the sweep's leaders beside auto's pick in one interleaved pass makes
"auto within 5% of tuned" a ratio measured in one run. Both numbers are written: ``tuned_us`` (the
duel's fastest of auto + the leaders) and ``sweep_us`` (the sweep's own minimum).

    python benchmarks/duel_auto_tuned.py --cache CACHE --all all_X.json [--all ...] [--alt-model M.json ...] --out duel.json

``--alt-model``: a cost model (``CostModel.to_json``, or a fit_costmodel.py output whose ``final``
holds one) whose pick is timed in the same pass too, so two sets of constants are compared on the
same launches; reported as ``alt`` (per model file, in order).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from compare_auto_tuned import geo, timing_device  # noqa: E402  (benchmarks/ is the script's own directory)
from results_io import read_json  # noqa: E402
from skwgrad.abi.conv import parse_problem  # noqa: E402


def duel_problem(p, sweep_rows, backend, cache, *, top, rounds, iters, hold, occ, seed=0, alt_models=()):
    from skwgrad.launcher.hostdata import DeviceInputs
    from skwgrad.launcher.select import all_choices, choose

    arch, cus = backend.arch, backend.compute_units
    auto = choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False)
    by_id = {(c.kernel.key, c.pool, c.ks_count): c for c in all_choices(p, cache, arch=arch, cus=cus, occupancy=occ)}
    leaders = [r for r in sorted((r for r in sweep_rows if "us" in r), key=lambda r: r["us"])]
    entrants = {("auto",): auto}
    alias = {}  # an alternative model's pick that another entrant already is: timed once
    for i, m in enumerate(alt_models):
        c = choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False, model=m)
        same = next((k for k, e in entrants.items() if (e.kernel.key, e.pool, e.ks_count) == (c.kernel.key, c.pool, c.ks_count)), None)
        if same is None:
            entrants[("alt", i)] = c
        else:
            alias[("alt", i)] = same
    for r in leaders:
        cid = (r["key"], int(r["pool"]), int(r["ks_count"]))
        if cid in by_id and all(cid != (e.kernel.key, e.pool, e.ks_count) for e in entrants.values()):
            entrants[cid] = by_id[cid]
        if len(entrants) > top:
            break
    bufs = DeviceInputs.random(p, backend, seed=seed)
    times = defaultdict(list)
    try:
        plans = {k: c.plan(p, backend) for k, c in entrants.items()}
        for k, pl in plans.items():  # load and warm every entrant before the first timed round
            pl.time(bufs.dy, bufs.x, bufs.dw, warmup=2, iters=1)
        order = list(plans)
        for i in range(rounds):
            for k in order[i % len(order):] + order[: i % len(order)]:  # rotate who goes first
                times[k].append(plans[k].time(bufs.dy, bufs.x, bufs.dw, warmup=2, iters=iters, hold=hold)["median_us"])
    finally:
        bufs.free()
    med = {k: statistics.median(v) for k, v in times.items()}
    alts = []
    for i in range(len(alt_models)):
        k = alias.get(("alt", i), ("alt", i))
        alts.append({"kernel": entrants[k].kernel.label, "pool": entrants[k].pool, "ks": entrants[k].ks_count, "us": med[k]})
    best = min(med, key=med.get)
    sweep_best = leaders[0] if leaders else None
    a = entrants[("auto",)]
    b = entrants[best]
    return {
        "auto_kernel": a.kernel.label, "auto_pool": a.pool, "auto_ks": a.ks_count, "auto_us": med[("auto",)],
        "tuned_kernel": b.kernel.label, "tuned_pool": b.pool, "tuned_ks": b.ks_count, "tuned_us": med[best],
        "auto_over_tuned": med[("auto",)] / med[best],
        "sweep_kernel": sweep_best and sweep_best["label"], "sweep_pool": sweep_best and sweep_best["pool"],
        "sweep_ks": sweep_best and sweep_best["ks_count"], "sweep_us": sweep_best and sweep_best["us"],
        "auto_over_sweep": (med[("auto",)] / sweep_best["us"]) if sweep_best else None,
        "alt": [{**x, "over_tuned": x["us"] / med[best]} for x in alts],
        "entrants": [{"kernel": entrants[k].kernel.label, "pool": entrants[k].pool, "ks": entrants[k].ks_count,
                      "rounds_us": [round(t, 3) for t in times[k]], "us": med[k]} for k in order],
    }  # fmt: skip


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--all", action="append", required=True, help="calibrate --dry-run output (every candidate timed)")
    ap.add_argument("--top", type=int, default=3, help="the sweep's fastest candidates re-timed beside auto's pick")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=0, help="stop starting new problems after this many seconds")
    ap.add_argument("--alt-model", action="append", default=[], help="another cost model whose pick is timed too")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from skwgrad.abi.costmodel import CostModel

    alt_models = []
    for f in a.alt_model:
        d = read_json(f)
        alt_models.append(CostModel.from_json(json.dumps(d["final"]["model"] if "final" in d else d), source="alt"))

    from skwgrad.cache import Cache

    backend, occ, hold = timing_device()
    cache = Cache(a.cache, readonly=True)
    doc = {"method": __doc__.split("\n\n")[0], "top": a.top, "rounds": a.rounds, "iters": a.iters, "arch": backend.arch,
           "compute_units": backend.compute_units, "alt_models": a.alt_model, "sets": {}}  # fmt: skip
    t0 = time.time()
    for path in a.all:
        sweep = read_json(path)
        by_prob = defaultdict(list)
        names = {}
        for r in sweep["rows"]:
            by_prob[r["problem"]].append(r)
            names[r["problem"]] = r.get("name", "")
        rows = []
        for prob, rs in by_prob.items():
            if a.budget_s and time.time() - t0 > a.budget_s:
                print(f"budget reached: {len(rows)} problems of {Path(path).name} dueled", flush=True)
                break
            row = {"name": names[prob], "problem": prob}
            try:
                row.update(duel_problem(parse_problem(prob), rs, backend, cache, top=a.top, rounds=a.rounds, iters=a.iters,
                                        hold=hold, occ=occ, alt_models=alt_models))  # fmt: skip
            except Exception as e:  # noqa: BLE001  (one problem's failure is recorded, the rest still run)
                row["error"] = f"{type(e).__name__}: {e}"
            rows.append(row)
            if "auto_over_tuned" in row:
                print(f"{row['name'][:44]:44s} auto/tuned {row['auto_over_tuned']:.3f}  auto/sweep {row['auto_over_sweep']:.3f}", flush=True)
            else:
                print(f"{row['name']}: {row.get('error')}", flush=True)
        r = [x["auto_over_tuned"] for x in rows if "auto_over_tuned" in x]
        rs_ = [x["auto_over_sweep"] for x in rows if x.get("auto_over_sweep")]
        s = {"rows": len(rows), "compared": len(r), "auto_within_5pct_of_tuned": sum(1 for x in r if x <= 1.05),
             "geomean_auto_over_tuned": geo(r), "worst_auto_over_tuned": max(r) if r else None,
             "auto_within_5pct_of_sweep": sum(1 for x in rs_ if x <= 1.05), "geomean_auto_over_sweep": geo(rs_)}  # fmt: skip
        for i, f in enumerate(a.alt_model):
            ra = [x["alt"][i]["over_tuned"] for x in rows if "auto_over_tuned" in x]
            s.setdefault("alt", []).append({"model": Path(f).name, "within_5pct_of_tuned": sum(1 for x in ra if x <= 1.05),
                                           "geomean_over_tuned": geo(ra), "worst_over_tuned": max(ra) if ra else None})  # fmt: skip
        doc["sets"][Path(path).name] = {"summary": s, "rows": rows}
        print(f"{Path(path).name}: {json.dumps(s)}", flush=True)
        Path(a.out).write_text(json.dumps(doc, indent=1))
    Path(a.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
