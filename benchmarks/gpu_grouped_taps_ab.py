"""The one-group-per-CTA kernels (``grouped_taps``) against the kernels auto took before them, in one pass.

    python benchmarks/gpu_grouped_taps_ab.py --cache CACHE --corpus SHAPES.csv --out ab.json

Per grouped row (the timing and verification of ``gpu_fused_ab.run_row``: every launch verified
three times against float64 with dW and the workspace poisoned, medians of event-timed launches in
interleaved rounds, cuDNN beside): ``auto``; ``before``, auto's choice with the grouped_taps
kernels left out (what auto ran before the family); and, where auto took the family, the same
kernel at the other split degrees the search tries (``ks<N>``), which judge the split rule.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def entrants(p, cache, arch, cus, occ):
    from skwgrad.launcher.select import Choice, _grouped_taps_search_ks, choose

    auto = choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False)
    out = {"auto": auto}
    taps_keys = frozenset(e.key for e in cache.find(arch, family="grouped_taps"))
    out["before"] = choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False, exclude=taps_keys)
    if auto.spec.family == "grouped_taps":
        for n in _grouped_taps_search_ks(p, auto.kernel, cus):
            if n != auto.ks_count:
                out[f"ks{n}"] = Choice(auto.kernel, ks_count=n, stage2=auto.stage2, reason="grouped_taps split search")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--corpus", action="append", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=200.0)
    ap.add_argument("--end-to-end", action="store_true", help="also the user's call, host included (gpu_tma_auto.end_to_end)")
    a = ap.parse_args()

    import torch

    torch.backends.cudnn.benchmark = True
    from compare_auto_tuned import geo, timing_device
    from gpu_fused_ab import run_row

    from skwgrad.abi.conv import from_row
    from skwgrad.cache.store import Cache

    backend, occ, hold = timing_device()
    cache = Cache(a.cache)
    doc = {"date": time.strftime("%Y-%m-%d"), "commit": a.commit, "device": backend.device_name, "cus": backend.compute_units,
           "cudnn": torch.backends.cudnn.version(), "script": "benchmarks/gpu_grouped_taps_ab.py", "rows": []}  # fmt: skip
    t0 = time.time()
    for path in a.corpus:
        with open(path) as f:
            for row in csv.DictReader(f):
                p = from_row(row)
                if (p.c, p.k) == (1, 1) or p.g == 1 or time.time() - t0 > a.budget_s:
                    continue
                ent = entrants(p, cache, backend.arch, backend.compute_units, occ)
                r = run_row(p, row["name"], backend, cache, occ, hold, rounds=a.rounds, iters=a.iters, seed=0, entrants=ent,
                            end_to_end_too=a.end_to_end)  # fmt: skip
                r["set"] = Path(path).stem
                doc["rows"].append(r)
                t = {k: v.get("us") for k, v in r["rows"].items()}
                print(f"{row['name'][:44]:44s} cudnn {r.get('cudnn_us') or 0:6.1f} " + " ".join(f"{k} {v or 0:6.1f}" for k, v in t.items())
                      + f" {r['rows']['auto'].get('kernel', '')[:34]} ok={r['all_ok']}", flush=True)  # fmt: skip
                Path(a.out).write_text(json.dumps(doc, indent=1, default=str))
    fam = [r for r in doc["rows"] if str(r["rows"]["auto"].get("kernel", "")).startswith("grouped_taps")]
    pairs = [(r["rows"]["before"]["us"], r["rows"]["auto"]["us"]) for r in fam if r["rows"]["before"].get("us") and r["rows"]["auto"].get("us")]
    best_ks = [min(v["us"] for k, v in r["rows"].items() if (k == "auto" or k.startswith("ks")) and v.get("us")) / r["rows"]["auto"]["us"]
               for r in fam if r["rows"]["auto"].get("us")]  # fmt: skip
    vs = lambda rows, key: geo([r["cudnn_us"] / r["rows"][key]["us"] for r in rows if r.get("cudnn_us") and r["rows"].get(key, {}).get("us")])  # noqa: E731
    doc["summary"] = {
        "rows": len(doc["rows"]), "all_ok": all(r["all_ok"] for r in doc["rows"]), "family_rows": len(fam),
        "before_over_auto_family_rows": geo([b / t for b, t in pairs]), "family_faster_rows": sum(1 for b, t in pairs if t < b),
        "auto_vs_cudnn_all": vs(doc["rows"], "auto"), "before_vs_cudnn_all": vs(doc["rows"], "before"),
        "auto_vs_cudnn_family_rows": vs(fam, "auto"), "before_vs_cudnn_family_rows": vs(fam, "before"),
        "auto_over_best_ks_family_rows": geo([1 / x for x in best_ks]) if best_ks else None,
        "family_rows_ge_1p5x_cudnn": sum(1 for r in fam if r.get("cudnn_us") and r["rows"]["auto"].get("us") and r["cudnn_us"] / r["rows"]["auto"]["us"] >= 1.5),
        "api_vs_torch_family_rows": geo([r["host"]["torch_wall_us"] / r["host"]["api_wall_us"] for r in fam if r.get("host")]),
    }  # fmt: skip
    Path(a.out).write_text(json.dumps(doc, indent=1, default=str))
    print("summary", json.dumps(doc["summary"]))


if __name__ == "__main__":
    main()
