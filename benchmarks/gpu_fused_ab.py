"""The depthwise ``fused`` epilogue against the two-launch epilogue it replaces, in one pass.

Run W2 (session 18) measured it 10% slower than the epilogue it replaces (benchmarks/RESULTS.md), so
the variant was taken out again: this script runs against a tree at fd91737, where it exists.

    python benchmarks/gpu_fused_ab.py --cache CACHE --corpus SHAPES.csv [--corpus ...] --out ab.json

Per depthwise row (C = K = 1 per group) the cache serves, in one process on one device, timed the same
way (median of ``--iters`` event-timed launches behind a stream hold, ``--rounds`` rounds interleaved):
- ``auto``: ``choose`` (no tuned records), which takes ``fused`` where the cache has it;
- ``twin``: the same kernel configuration and split degree with the epilogue auto took before
  ``fused`` existed (``workspace`` + Stage-2 for a dW in the input dtype, ``atomic`` + the dW
  memset for fp32 dW);
- ``before``: what auto picks when ``fused`` is not allowed (its split degree may differ from the
  twin's: the degree rule prices the kernel's occupancy);
- ``fused_ks<n>``: the fused kernel at the other split degrees the search tries;
- cuDNN (``aten.convolution_backward``, channels last, benchmark mode).
Plus the host-bound loop of each plan's ``launch`` on device pointers (``launch_wall_us``: wall time
per call of back-to-back launches, synchronized at the end: one driver call fewer for fused) and the
user's call end to end (``skwgrad.wgrad``, host included) on 16-bit rows. Every timed launch is
checked first against the float64 reference with dW and the workspace poisoned, and the zeroed
arena is read back (the fused kernel must leave its replica and counters zero).
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

from compare_auto_tuned import geo as _geo  # noqa: E402  (one geomean for the benchmark scripts)


def entrants_of(p, cache, arch, cus, occ):
    from skwgrad.launcher.plan import Kernel
    from skwgrad.launcher.select import Choice, _dwconv_search_ks, choose, find_stage2

    auto = choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False)
    out = {"auto": auto}
    old = "workspace" if p.dw_dtype == p.dtype != "fp32" else "atomic"
    stage2 = find_stage2(cache, arch, p.dw_dtype)
    if auto.spec.family == "dwconv" and auto.spec.variant == "fused":
        want = dataclasses.replace(auto.spec, variant=old)
        e = next((e for e in cache.find(arch, family="dwconv") if e.spec == want), None)
        if e is not None:
            out["twin"] = Choice(Kernel.from_entry(e, cache), ks_count=auto.ks_count, stage2=stage2 if old == "workspace" else None,
                                 reason="twin")  # fmt: skip
        try:
            out["before"] = choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False, streamk="off", reduction=old)
        except Exception:  # noqa: BLE001
            pass
        for n in _dwconv_search_ks(p, auto.kernel, cus):
            if n != auto.ks_count:
                out[f"fused_ks{n}"] = dataclasses.replace(auto, ks_count=n, reason="search")
    return out


def launch_wall_us(pl, bufs, iters):
    """Wall time per call of back-to-back ``launch`` calls (host-bound on small rows)."""
    be = pl.backend
    for _ in range(5):
        pl.launch(bufs.dy, bufs.x, bufs.dw)
    be.stream_synchronize(0)
    t0 = time.perf_counter()
    for _ in range(iters):
        pl.launch(bufs.dy, bufs.x, bufs.dw)
    be.stream_synchronize(0)
    return (time.perf_counter() - t0) / iters * 1e6


def run_row(p, name, backend, cache, occ, hold, *, rounds, iters, seed, entrants=None, end_to_end_too=True):
    """``entrants``: name -> Choice to time (default: ``entrants_of``, auto and its twins)."""
    from ab_timing import verify_and_time
    from gpu_tma_auto import end_to_end

    from skwgrad.launcher.baseline import cudnn_time
    from skwgrad.launcher.hostdata import DeviceInputs
    from skwgrad.reference import tolerance, wgrad_reference

    if entrants is None:
        entrants = entrants_of(p, cache, backend.arch, backend.compute_units, occ)
    bufs = DeviceInputs.random(p, backend, seed=seed)
    out = {"name": name, "problem": p.describe(), "rows": {}}
    try:
        ref = wgrad_reference(p, bufs.x64, bufs.dy64)
        tol = tolerance(p.dtype, p.dw_dtype, p.precision)
        # three poisoned launches: a kernel that resets its own workspace must leave it ready each time
        out["rows"], plans = verify_and_time(p, entrants, backend, bufs, ref, tol, hold, rounds=rounds, iters=iters, verify_launches=3)
        for k, pl in plans.items():
            out["rows"][k]["launch_wall_us"] = launch_wall_us(pl, bufs, iters)
        for k, rec in list(out["rows"].items()):  # an alias shows its launch's wall time too
            if rec.get("same_as"):
                out["rows"][k] = dict(out["rows"][rec["same_as"]], same_as=rec["same_as"])
        out["cudnn_us"], out["cudnn_note"] = cudnn_time(p, backend, iters=iters, seed=seed)
        out["host"] = end_to_end(p, iters=iters) if end_to_end_too and p.dtype != "fp32" and "auto" in plans else None
    finally:
        bufs.free()
    r = out["rows"]
    t = lambda k: r.get(k, {}).get("us")  # noqa: E731
    out["auto_us"], out["twin_us"], out["before_us"] = t("auto"), t("twin"), t("before")
    fused = [t(k) for k in r if (k == "auto" or k.startswith("fused_ks")) and t(k) and r[k]["variant"] == "fused"]
    out["fused_best_us"] = min(fused) if fused else None
    out["all_ok"] = all(x.get("ok") for x in r.values())
    return out


def summarize(rows):
    def ratio(a, b):
        return [r[b] / r[a] for r in rows if r.get(a) and r.get(b)]

    s = {
        "rows": len(rows),
        "fused_rows": sum(1 for r in rows if r["rows"].get("auto", {}).get("variant") == "fused"),
        "all_ok": all(r["all_ok"] for r in rows),
        "twin_over_auto_geomean": _geo(ratio("auto_us", "twin_us")),  # > 1: fused faster at the same kernel and degree
        "before_over_auto_geomean": _geo(ratio("auto_us", "before_us")),  # > 1: auto now faster than auto before
        "auto_vs_cudnn_geomean": _geo(ratio("auto_us", "cudnn_us")),
        "before_vs_cudnn_geomean": _geo(ratio("before_us", "cudnn_us")),
        "fused_best_over_auto": _geo(ratio("auto_us", "fused_best_us")),  # < 1: another split degree was faster
        "auto_at_1p5x_cudnn": sum(1 for r in rows if r.get("auto_us") and r.get("cudnn_us") and r["cudnn_us"] / r["auto_us"] >= 1.5),
        "auto_min_vs_cudnn": min((r["cudnn_us"] / r["auto_us"] for r in rows if r.get("auto_us") and r.get("cudnn_us")), default=None),
    }
    walls = [(r["rows"]["twin"]["launch_wall_us"], r["rows"]["auto"]["launch_wall_us"]) for r in rows
             if r["rows"].get("twin", {}).get("launch_wall_us") and r["rows"].get("auto", {}).get("launch_wall_us")]  # fmt: skip
    s["launch_wall_twin_over_auto_geomean"] = _geo([a / b for a, b in walls])
    hosts = [r["host"] for r in rows if r.get("host")]
    s["end_to_end_api_vs_torch_geomean"] = _geo([h["torch_wall_us"] / h["api_wall_us"] for h in hosts])
    return s


def ab_parser(doc: str, *, top: int | None = None, end_to_end: bool = True):
    """The options every A/B script over ``ab_rows`` takes (cache, corpora, output, commit, rounds,
    iterations, budget; ``--top`` and ``--end-to-end`` where the script has them)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--corpus", action="append", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default="", help="the commit the tree is at (recorded)")
    if top is not None:
        ap.add_argument("--top", type=int, default=top, help="how many of the model's best-ranked launches to time")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=200.0, help="stop starting rows after this many seconds")
    if end_to_end:
        ap.add_argument("--end-to-end", action="store_true", help="also the user's call, host included (gpu_tma_auto.end_to_end)")
    return ap


def ab_rows(a, script: str, keep, entrants_of, *, end_to_end: bool) -> dict:
    """The A/B scripts' shared pass (gpu_dwconv_tma_ab, gpu_tma_regs_ab): every row of ``a.corpus``
    that ``keep(problem)`` admits, within ``a.budget_s``, timed with ``run_row`` on the entrants
    ``entrants_of(problem, cache, arch, cus, occupancy)``; one line printed per row and the record
    written to ``a.out`` after each. Returns the record (``rows``), the caller adds its summary."""
    import csv

    import torch

    torch.backends.cudnn.benchmark = True
    from compare_auto_tuned import timing_device

    from skwgrad.abi.conv import from_row
    from skwgrad.cache.store import Cache

    backend, occ, hold = timing_device()
    cache = Cache(a.cache)
    doc = {"date": time.strftime("%Y-%m-%d"), "commit": a.commit, "device": backend.device_name, "cus": backend.compute_units,
           "cudnn": torch.backends.cudnn.version(), "script": script, "rows": []}  # fmt: skip
    t0 = time.time()
    for path in a.corpus:
        with open(path) as f:
            for row in csv.DictReader(f):
                p = from_row(row)
                if not keep(p) or time.time() - t0 > a.budget_s:
                    continue
                ent = entrants_of(p, cache, backend.arch, backend.compute_units, occ)
                r = run_row(p, row["name"], backend, cache, occ, hold, rounds=a.rounds, iters=a.iters, seed=0, entrants=ent,
                            end_to_end_too=end_to_end)  # fmt: skip
                r["set"] = Path(path).stem
                doc["rows"].append(r)
                t = {k: v.get("us") for k, v in r["rows"].items()}
                print(f"{row['name'][:40]:40s} cudnn {r.get('cudnn_us') or 0:6.1f} " + " ".join(f"{k} {v or 0:5.1f}" for k, v in t.items())
                      + f" {r['rows']['auto'].get('kernel', '')[:34]} ok={r['all_ok']}", flush=True)  # fmt: skip
                Path(a.out).write_text(json.dumps(doc, indent=1, default=str))
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--corpus", action="append", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default="", help="the commit the tree is at (recorded)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=400.0, help="stop starting rows after this many seconds")
    ap.add_argument("--no-end-to-end", action="store_true", help="device time only (no host-included calls)")
    a = ap.parse_args()
    import csv

    import torch

    torch.backends.cudnn.benchmark = True
    from compare_auto_tuned import timing_device

    from skwgrad.abi.conv import from_row
    from skwgrad.cache.store import Cache

    backend, occ, hold = timing_device()
    cache = Cache(a.cache)
    doc = {"date": time.strftime("%Y-%m-%d"), "commit": a.commit, "device": backend.device_name, "cus": backend.compute_units,
           "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "script": "benchmarks/gpu_fused_ab.py",
           "corpus": a.corpus, "rounds": a.rounds, "iters": a.iters, "rows": []}  # fmt: skip
    t0 = time.time()
    for path in a.corpus:
        with open(path) as f:
            for row in csv.DictReader(f):
                p = from_row(row)
                if (p.c, p.k) != (1, 1) or p.g == 1:
                    continue
                if time.time() - t0 > a.budget_s:
                    print(f"budget: stopped before {row['name']}", flush=True)
                    break
                try:
                    r = run_row(p, row["name"], backend, cache, occ, hold, rounds=a.rounds, iters=a.iters, seed=a.seed,
                                end_to_end_too=not a.no_end_to_end)  # fmt: skip
                except Exception as e:  # noqa: BLE001  (recorded; the row counts as failed)
                    r = {"name": row["name"], "problem": p.describe(), "error": f"{type(e).__name__}: {e}"[:300], "all_ok": False, "rows": {}}
                r["set"] = Path(path).stem
                doc["rows"].append(r)
                g = lambda k: r.get(k) or float("nan")  # noqa: E731
                print(f"{row['name'][:46]:46s} auto {g('auto_us'):7.1f} twin {g('twin_us'):7.1f} before {g('before_us'):7.1f} "
                      f"fbest {g('fused_best_us'):7.1f} cudnn {g('cudnn_us'):7.1f} ok={r['all_ok']} {r.get('error', '')[:80]}", flush=True)  # fmt: skip
                Path(a.out).write_text(json.dumps(doc, indent=1, default=str))
    rows = doc["rows"]
    doc["summary"] = summarize(rows)
    doc["summary_by_set"] = {s: summarize([r for r in rows if r["set"] == s]) for s in dict.fromkeys(r["set"] for r in rows)}
    Path(a.out).write_text(json.dumps(doc, indent=1, default=str))
    print("summary", json.dumps(doc["summary"]))


if __name__ == "__main__":
    main()
