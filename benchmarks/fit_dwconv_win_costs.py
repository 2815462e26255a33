"""Refit the depthwise window split rule's two costs on `skwgrad calibrate --dry-run` timings.

    python benchmarks/fit_dwconv_win_costs.py --cache CACHE SET=select_all_FILE.json [SET=...] [--out fit.json]

Per depthwise row of each file: the window kernel auto takes (``select.choose`` on CACHE, offline
residency) and that kernel's timings at every split degree the search timed (1, 2, 4, 8 CTAs per
SM and the rule's own). A pair (DWCONV_WIN_CTA_COST, DWCONV_WIN_ATOMIC_COST) is scored by the
launch auto then asks for: rows within 5% of the kernel's fastest timed degree and the geomean
chosen / fastest (a degree that was not timed is scored at the nearest timed one in log(steps per
split), and counted). Reported: the shipped pair, the best pair of a grid in-sample, and
leave-one-set-out (the pair fitted on the other sets, judged on the one left out).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from results_io import read_json  # noqa: E402

GRID = [(a, c) for a in (0, 250, 500, 1000, 2000, 4000) for c in (0, 0.25, 0.5, 1, 2, 3)]


def rows_of(sets: dict, cache):
    from skwgrad.abi.conv import parse_problem
    from skwgrad.abi.launch import dwconv_geometry
    from skwgrad.launcher.select import choose

    out = []
    for set_name, path in sets.items():
        d = read_json(path)
        by = defaultdict(list)
        for r in d["rows"]:
            if r["family"] == "dwconv" and r.get("us"):
                by[r["problem"]].append(r)
        for ptext, rs in by.items():
            p = parse_problem(ptext)
            auto = choose(p, cache, arch=d["arch"], cus=d["compute_units"], use_tuned=False)
            if auto.spec.family != "dwconv" or not auto.spec.dwconv_window.bw:
                continue
            s = auto.spec
            times = {}  # steps per split -> us (the variant auto takes at that degree when several were timed: the fastest)
            for r in rs:
                if r["label"] != auto.kernel.label:
                    continue
                g = dwconv_geometry(p, r["variant"], bc=s.bm, taps=s.bn, br=s.bk, ks_count=r["ks_count"], mode=s.mode)
                times[g.ks_iters] = min(r["us"], times.get(g.ks_iters, math.inf))
            if len(times) >= 2:
                out.append({"set": set_name, "name": rs[0]["name"], "problem": p, "label": auto.kernel.label, "times": times,
                            "cus": d["compute_units"], "arch": d["arch"]})  # fmt: skip
    return out


def picked_iters(row, cache, a, c) -> int:
    from skwgrad.abi import launch
    from skwgrad.abi.launch import dwconv_geometry
    from skwgrad.launcher.select import choose

    saved = launch.DWCONV_WIN_CTA_COST, launch.DWCONV_WIN_ATOMIC_COST
    launch.DWCONV_WIN_CTA_COST, launch.DWCONV_WIN_ATOMIC_COST = a, c
    try:
        ch = choose(row["problem"], cache, arch=row["arch"], cus=row["cus"], use_tuned=False)
    finally:
        launch.DWCONV_WIN_CTA_COST, launch.DWCONV_WIN_ATOMIC_COST = saved
    s = ch.spec
    if ch.kernel.label != row["label"]:
        raise RuntimeError(f"{row['name']}: the costs changed the kernel ({ch.kernel.label}), not only its degree")
    return dwconv_geometry(row["problem"], s.variant, bc=s.bm, taps=s.bn, br=s.bk, ks_count=ch.ks_count, mode=s.mode).ks_iters


def score(rows, picks):
    w = inexact = 0
    s = 0.0
    for r, it in zip(rows, picks):
        t = r["times"]
        exact = it in t
        near = it if exact else min(t, key=lambda i: (abs(math.log(i / it)), i))
        ratio = t[near] / min(t.values())
        w += ratio <= 1.05
        s += math.log(ratio)
        inexact += not exact
    n = len(rows)
    return {"within_5pct": w, "rows": n, "geomean": math.exp(s / n) if n else None, "inexact": inexact}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("sets", nargs="+", metavar="SET=FILE")
    ap.add_argument("--out")
    a = ap.parse_args()
    from skwgrad.abi import launch
    from skwgrad.cache import Cache

    cache = Cache(a.cache, readonly=True)
    sets = dict(x.split("=", 1) for x in a.sets)
    rows = rows_of(sets, cache)
    picks = {prm: [picked_iters(r, cache, *prm) for r in rows] for prm in GRID}
    shipped = (launch.DWCONV_WIN_CTA_COST, launch.DWCONV_WIN_ATOMIC_COST)
    picks.setdefault(shipped, [picked_iters(r, cache, *shipped) for r in rows])

    def sub(prm, names):
        idx = [i for i, r in enumerate(rows) if r["set"] in names]
        return score([rows[i] for i in idx], [picks[prm][i] for i in idx])

    def best(names):
        return max(GRID, key=lambda prm: (sub(prm, names)["within_5pct"], -sub(prm, names)["geomean"], -prm[0], -prm[1]))

    doc = {"sets": sets, "rows": len(rows), "shipped": {"costs": shipped, "all": sub(shipped, sets)}, "loso": {}}
    ins = best(sets)
    doc["in_sample"] = {"costs": ins, "all": sub(ins, sets)}
    doc["grid"] = {f"{prm[0]},{prm[1]}": sub(prm, sets) for prm in GRID}  # every pair on all rows (the session-24 pair is (2000, 2))
    print(f"{len(rows)} window rows; shipped {shipped}: {sub(shipped, sets)}; best in-sample {ins}: {sub(ins, sets)}")
    tot = {"shipped": [0, 0, 0.0], "loso": [0, 0, 0.0]}
    for s in sets:
        prm = best([x for x in sets if x != s])
        a_, b_ = sub(shipped, [s]), sub(prm, [s])
        doc["loso"][s] = {"fitted": prm, "held_out": b_, "shipped_held_out": a_}
        print(f"  {s}: fitted on the others {prm} -> {b_}; shipped {a_}")
        for k, v in (("shipped", a_), ("loso", b_)):
            tot[k][0] += v["within_5pct"]
            tot[k][1] += v["rows"]
            tot[k][2] += math.log(v["geomean"]) * v["rows"]
    for k, (w, n, sl) in tot.items():
        print(f"  total {k}: {w}/{n} within 5%, geomean {math.exp(sl / n):.3f}")
    doc["totals"] = {k: {"within_5pct": w, "rows": n, "geomean": math.exp(sl / n)} for k, (w, n, sl) in tot.items()}
    doc["per_row"] = [{"set": r["set"], "name": r["name"], "label": r["label"], "times_by_steps_per_split": r["times"],
                       "shipped_iters": picks[shipped][i], "in_sample_iters": picks[ins][i]} for i, r in enumerate(rows)]  # fmt: skip
    if a.out:
        Path(a.out).write_text(json.dumps(doc, indent=1, default=str))


if __name__ == "__main__":
    main()
