"""auto vs tuned, per row, from one H200 session: ``run-from-cache --bench --baseline cudnn``
(auto: what a user gets, no tuned records) and ``calibrate --dry-run`` over the same corpus (every
candidate of the search space timed; tuned = the fastest). Writes the per-row table and summary.

Two ratios per row: ``auto_over_tuned``, auto's own time (run-from-cache's process) over tuned's
(the dry run's), and ``auto_in_run_over_tuned``, the time the dry run measured for auto's very
launch (kernel, pool, split degree) over tuned's: both timed in one process, so it leaves out the
process-to-process spread (H200 run W4: one launch timed 13.3 us in one and 12.2 in the other).

    python benchmarks/compare_auto_tuned.py --auto auto_X.json --all all_X.json [...] --out cmp.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from results_io import read_json  # benchmarks/ is the script's own directory


def timing_device():
    """(backend, occupancy query, stream hold) for the interleaved timing scripts: the GPU of this
    machine, its per-kernel occupancy, and (CUDA) a hold that queues every timed launch before the
    device reaches it."""
    from skwgrad.launcher.backends import get_backend
    from skwgrad.launcher.baseline import stream_hold
    from skwgrad.launcher.select import backend_occupancy

    backend = get_backend()
    return backend, backend_occupancy(backend), (stream_hold() if backend.binary_kind == "cubin" else None)


def geo(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def compare(auto_doc, all_doc):
    best = {}
    for r in all_doc["rows"]:
        if "us" in r and (r["problem"] not in best or r["us"] < best[r["problem"]]["us"]):
            best[r["problem"]] = r
    timed = {(r["problem"], r["key"], int(r["pool"]), int(r["ks_count"])): r["us"] for r in all_doc["rows"] if "us" in r}
    rows = []
    for a in auto_doc["rows"]:
        t = best.get(a["problem"])
        in_run = timed.get((a["problem"], a.get("key"), int(a.get("pool") or 0), int(a.get("ks_count") or 1)))
        row = {"name": a["name"], "problem": a["problem"], "regime": a.get("regime", ""), "auto_kernel": a.get("kernel"),
               "auto_pool": a.get("pool"), "auto_ks": a.get("ks_count"), "auto_us": a.get("us"), "ok": a.get("ok"),
               "cudnn_us": a.get("cudnn_us"), "tuned_kernel": t and t["label"], "tuned_pool": t and t["pool"],
               "tuned_ks": t and t["ks_count"], "tuned_us": t and t["us"]}  # fmt: skip
        if row["auto_us"] and row["tuned_us"]:
            row["auto_over_tuned"] = row["auto_us"] / row["tuned_us"]
        if in_run and row["tuned_us"]:
            row["auto_in_run_over_tuned"] = in_run / row["tuned_us"]
        if row["cudnn_us"] and row["auto_us"]:
            row["auto_vs_cudnn"] = row["cudnn_us"] / row["auto_us"]
        if row["cudnn_us"] and row["tuned_us"]:
            row["tuned_vs_cudnn"] = row["cudnn_us"] / row["tuned_us"]
        rows.append(row)
    r = [x["auto_over_tuned"] for x in rows if "auto_over_tuned" in x]
    summary = {
        "rows": len(rows), "correct": sum(1 for x in rows if x["ok"]), "compared": len(r),
        "auto_within_5pct_of_tuned": sum(1 for x in r if x <= 1.05), "geomean_auto_over_tuned": geo(r),
        "worst_auto_over_tuned": max(r) if r else None,
        **_in_run(rows),
        "geomean_auto_vs_cudnn": geo([x.get("auto_vs_cudnn") for x in rows]),
        "geomean_tuned_vs_cudnn": geo([x.get("tuned_vs_cudnn") for x in rows]),
    }  # fmt: skip
    return rows, summary


def _in_run(rows) -> dict:
    r = [x["auto_in_run_over_tuned"] for x in rows if "auto_in_run_over_tuned" in x]
    return {"in_run_compared": len(r), "auto_in_run_within_5pct_of_tuned": sum(1 for x in r if x <= 1.05),
            "geomean_auto_in_run_over_tuned": geo(r)}  # fmt: skip


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--auto", action="append", required=True)
    ap.add_argument("--all", action="append", required=True)
    ap.add_argument("--out")
    a = ap.parse_args()
    doc = {"sets": {}}
    allr = []
    for pa, pt in zip(a.auto, a.all):
        rows, s = compare(read_json(pa), read_json(pt))
        allr += rows
        doc["sets"][Path(pa).stem] = {"summary": s, "rows": rows}
        print(f"{Path(pa).stem}: {json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in s.items()})}")
        for x in rows:
            if x.get("auto_over_tuned", 1) > 1.05:
                print(f"   {x['name']:34s} {x['auto_over_tuned']:.2f} auto {x['auto_kernel']} p{x['auto_pool']} k{x['auto_ks']} {x['auto_us']:.1f}"
                      f" | tuned {x['tuned_kernel']} p{x['tuned_pool']} k{x['tuned_ks']} {x['tuned_us']:.1f}")  # fmt: skip
    r = [x["auto_over_tuned"] for x in allr if "auto_over_tuned" in x]
    doc["summary"] = {"rows": len(allr), "within_5pct": sum(1 for x in r if x <= 1.05), "compared": len(r), "geomean_auto_over_tuned": geo(r),
                      "geomean_auto_vs_cudnn": geo([x.get("auto_vs_cudnn") for x in allr]), **_in_run(allr)}  # fmt: skip
    print("all:", doc["summary"])
    if a.out:
        Path(a.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
