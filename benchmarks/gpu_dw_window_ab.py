"""Depthwise window kernels of narrower strips against auto's, in one pass.

    python benchmarks/gpu_dw_window_ab.py --cache CACHE --corpus SHAPES.csv --modes win7r3,win5r3,win4r3 --out ab.json

Per depthwise row whose auto pick is a window kernel, in one process on one device (the timing and
verification of ``gpu_fused_ab.run_row``: every launch verified three times against float64 with dW
and the workspace poisoned, medians of event-timed launches in interleaved rounds, cuDNN beside):
``auto``, and for each of ``--modes`` cached with auto's other fields the same kernel of that mode,
at the split degree the family's rule gives it (``<mode>``), at auto's degree (``<mode>_ksauto``) and
at the degree of the rule before it filled the SMs on small layers (``<mode>_ksold``), where they differ.
A narrower strip holds fewer registers (more co-resident CTAs on latency-bound small layers) and
wastes fewer columns when Wo is not a multiple of 7, but reuses each x vector over fewer outputs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def window_entrants(p, cache, arch, cus, occ, modes):
    from skwgrad.abi.launch import dwconv_ks_count
    from skwgrad.launcher.plan import Kernel
    from skwgrad.launcher.select import _admits, _as_epilogue_takes, _family_ks, choose

    auto = choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False)
    out = {"auto": auto}
    if auto.spec.family != "dwconv" or not auto.spec.dwconv_window.bw:
        return out
    for mode in dict.fromkeys([*modes, auto.spec.mode]):  # auto's own mode too: its split degrees
        want = dataclasses.replace(auto.spec, mode=mode)
        e = next((e for e in cache.find(arch, family="dwconv") if e.spec == want), None)
        if e is None or not _admits(want, p):  # a stride-1 strip offered to a dilated layer: refused, not timed
            continue
        k = Kernel.from_entry(e, cache)
        n = _family_ks(p, want, cus, resident=occ(k) if occ else None)
        out[mode] = dataclasses.replace(auto, kernel=k, ks_count=n, reason=mode)
        if n != auto.ks_count:
            out[f"{mode}_ksauto"] = dataclasses.replace(auto, kernel=k, ks_count=auto.ks_count, reason=mode)
        # the rule before it filled the SMs on small layers (launch.dwconv_ks_count's fill_wave)
        old = dwconv_ks_count(p, bc=want.bm, br=want.bk, compute_units=cus, mode=mode, resident=occ(k) if occ else None, fill_wave=False)
        old = _as_epilogue_takes(p, k, old)
        if old != n:
            out[f"{mode}_ksold"] = dataclasses.replace(auto, kernel=k, ks_count=old, reason=mode)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\\n")[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--corpus", action="append", required=True)
    ap.add_argument("--modes", default="win7r3,win5r3,win4r3", help="the default's strip first, then the ones it is judged against")
    ap.add_argument("--only", default="", help="comma-separated substrings of row names")
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=200.0)
    a = ap.parse_args()
    import csv

    import torch

    torch.backends.cudnn.benchmark = True
    from compare_auto_tuned import timing_device
    from gpu_fused_ab import run_row

    from skwgrad.abi.conv import from_row
    from skwgrad.cache.store import Cache

    backend, occ, hold = timing_device()
    cache = Cache(a.cache)
    modes = [m for m in a.modes.split(",") if m]
    doc = {"date": time.strftime("%Y-%m-%d"), "commit": a.commit, "device": backend.device_name, "cus": backend.compute_units,
           "cudnn": torch.backends.cudnn.version(), "script": "benchmarks/gpu_dw_window_ab.py", "modes": modes, "rows": []}  # fmt: skip
    t0 = time.time()
    for path in a.corpus:
        with open(path) as f:
            for row in csv.DictReader(f):
                p = from_row(row)
                if (p.c, p.k) != (1, 1) or p.g == 1 or (a.only and not any(s in row["name"] for s in a.only.split(","))):
                    continue
                if time.time() - t0 > a.budget_s:
                    break
                ent = window_entrants(p, cache, backend.arch, backend.compute_units, occ, modes)
                if len(ent) < 2:
                    continue
                r = run_row(p, row["name"], backend, cache, occ, hold, rounds=a.rounds, iters=a.iters, seed=0, entrants=ent,
                            end_to_end_too=False)  # fmt: skip
                doc["rows"].append(r)
                t = {k: v.get("us") for k, v in r["rows"].items()}
                print(f"{row['name'][:44]:44s} cudnn {r.get('cudnn_us') or 0:6.1f} " + " ".join(f"{k} {v or 0:6.1f}" for k, v in t.items())
                      + f" ok={r['all_ok']}", flush=True)  # fmt: skip
                Path(a.out).write_text(json.dumps(doc, indent=1, default=str))

    from compare_auto_tuned import geo

    s = {"rows": len(doc["rows"]), "all_ok": all(r["all_ok"] for r in doc["rows"])}
    for m in modes:
        both = [(r["rows"]["auto"]["us"], min(v["us"] for k, v in r["rows"].items() if k.startswith(m) and v.get("us")))
                for r in doc["rows"] if r["rows"].get("auto", {}).get("us") and any(k.startswith(m) and v.get("us") for k, v in r["rows"].items())]  # fmt: skip
        s[f"auto_over_{m}_best_geomean"] = geo([x / y for x, y in both])  # > 1: the narrower strip is faster
        s[f"{m}_faster_rows"] = sum(1 for x, y in both if y < x)
    # against the default's strip (the first of --modes): auto ranks cached window kernels of one
    # filter width by label, so with narrower strips cached auto itself may take one of them
    ref = modes[0]
    for m in modes[1:]:
        pairs = []
        for r in doc["rows"]:
            t = {k: v["us"] for k, v in r["rows"].items() if v.get("us")}
            x = min((v for k, v in t.items() if k == ref or k.startswith(ref + "_")), default=None)
            y = min((v for k, v in t.items() if k == m or k.startswith(m + "_")), default=None)
            if x and y:
                pairs.append((x, y))
        s[f"{ref}_over_{m}_geomean"] = geo([x / y for x, y in pairs])
        s[f"{m}_faster_than_{ref}_rows"] = sum(1 for x, y in pairs if y < x)
    # the split rule that fills the SMs against the rule before it, same kernel: old / new time
    fill = [r["rows"][f"{m}_ksold"]["us"] / r["rows"][m]["us"] for r in doc["rows"] for m in modes
            if r["rows"].get(f"{m}_ksold", {}).get("us") and r["rows"].get(m, {}).get("us")]  # fmt: skip
    s["ksold_over_rule_geomean"] = geo(fill)
    s["ksold_over_rule_launches"] = len(fill)
    s["rule_faster_launches"] = sum(1 for v in fill if v > 1)
    doc["summary"] = s
    Path(a.out).write_text(json.dumps(doc, indent=1, default=str))
    print("summary", json.dumps(s))


if __name__ == "__main__":
    main()
