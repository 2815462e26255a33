"""Does the pruned ``default`` lose against ``broad`` (the default before pruning)? GPU machine.

Build (CPU machine; one cache holding both presets' kernels for the corpus, about 240 sm_90
kernels):

    skwgrad compile-all --corpus tests/data/wgrad_shapes.csv --preset broad   --arch sm_90 --cache CACHE
    skwgrad compile-all --corpus tests/data/wgrad_shapes.csv --preset default --arch sm_90 --cache CACHE

Run (the H200, no compiler needed):

    python benchmarks/compare_presets.py --cache CACHE --corpus tests/data/wgrad_shapes.csv --out OUT.json

For every corpus row it times once, with ``skwgrad.launcher.select.tune`` (a held stream; nothing
is remembered in the cache), every candidate of every cached kernel, and records them all. Each
preset is then judged on those timings: per row, the fastest candidate whose kernel (and Stage-2)
the preset's corpus sweep holds (``skwgrad.aot.sweep.sweep_for_problems``: what selection could
choose from that preset), and the geomean ratio ``default_us / broad_us`` over the rows and over
the ``few_tiles_long_k`` rows. ``--evaluate REPORT --out OUT`` re-judges an earlier run with this
checkout's presets (no GPU): a changed default is measured without timing again.
The issue's floor: the pruned default loses at most 3% (geomean ratio <= 1.03).
Exit code 0 when the run completed (whatever the ratio), 3 when no GPU/backend is present.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class _View:
    """A read-only view of a cache that shows only the entries whose key is in ``keys``."""

    def __init__(self, cache, keys):
        self._cache, self._keys = cache, set(keys)
        self.path = cache.path

    def find(self, arch, **fields):
        return [e for e in self._cache.find(arch, **fields) if e.key in self._keys]

    def get(self, key):
        return self._cache.get(key)

    def load_binary(self, entry_or_key, **kw):
        return self._cache.load_binary(entry_or_key, **kw)

    def tuned(self, *a):
        return None

    def remember_tuned(self, *a):
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache")
    ap.add_argument("--evaluate", metavar="REPORT", help="judge this checkout's presets on an earlier run's timings (no GPU)")
    ap.add_argument("--corpus", default=str(ROOT / "tests" / "data" / "wgrad_shapes.csv"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    if args.evaluate:
        report = json.loads(Path(args.evaluate).read_text())
        report.update(evaluate(report))
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
        for r in report["best"]:
            if r.get("default_over_broad", 1) > 1.03:
                print(f"{r['shape']}: {r['default_over_broad']:.3f} ({r['default']['label']} vs {r['broad']['label']})")
        print(json.dumps({k: report[k] for k in SUMMARY_FIELDS}))
        return
    if not args.cache:
        ap.error("--cache is required to time (or give --evaluate REPORT)")

    from skwgrad.abi.conv import read_corpus
    from skwgrad.cache.store import Cache
    from skwgrad.launcher.baseline import stream_hold
    from skwgrad.errors import SkwgradError
    from skwgrad.launcher.backends import get_backend
    from skwgrad.launcher.select import tune

    try:
        backend = get_backend()
    except SkwgradError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(3)
    arch = backend.arch
    cache = Cache(args.cache)
    rows = read_corpus(args.corpus)
    preset_keys = {preset: _preset_keys(rows, preset, arch) for preset in PRESETS}
    union = cache.current_keys(arch)  # every cached kernel: a changed preset is judged later on the same run
    for preset, keys in preset_keys.items():
        print(f"{preset}: {len(keys & union)} of {len(keys)} corpus-sweep kernels cached", file=sys.stderr)
    view = _View(cache, union)
    hold = stream_hold() if backend.binary_kind == "cubin" else None
    out_rows = []
    for name, regime, p in rows:
        row = {"shape": name, "regime": regime, "problem": p.describe()}
        try:  # one timing of the union: every preset is then judged on the same measurements
            timed = tune(p, backend, view, remember=False, iters=args.iters, hold=hold)
            row["candidates"] = [{k: t.get(k) for k in CANDIDATE_FIELDS if k in t} for t in timed]
        except SkwgradError as e:
            row["error"] = str(e)
        out_rows.append(row)
        print(f"{name}: {len(row.get('candidates', []))} candidates timed", file=sys.stderr)
    report = {
        "what": "every cached candidate of the default and broad corpus sweeps timed once per corpus row (benchmarks/compare_presets.py)",
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "device": getattr(backend, "name", arch), "arch": arch, "cus": backend.compute_units,
        "held_stream": hold is not None,
        "rows": out_rows,
    }
    report.update(evaluate(report))
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in SUMMARY_FIELDS}))


PRESETS = ("default", "broad")
CANDIDATE_FIELDS = ("key", "stage2_key", "label", "family", "variant", "mode", "pool", "ks_count", "predicted_us", "occupancy", "us", "error")
SUMMARY_FIELDS = ("geomean_default_over_broad", "geomean_default_over_broad_few_tiles_long_k", "rows_compared")


def _preset_keys(rows, preset, arch):
    """Cache keys of what selection could choose from ``preset`` for the rows (its corpus sweep)."""
    from skwgrad.aot.sweep import sweep_for_problems
    from skwgrad.cache.store import Cache

    items = sweep_for_problems([(n, p) for n, _, p in rows], preset, arches=[arch]).items
    return {Cache.key_for(it.spec, it.arch) for it in items}


def geomean(xs):
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def evaluate(report) -> dict:
    """Per row, the fastest timed candidate whose kernel (and Stage-2) each preset's sweep holds,
    by the sweep code of this checkout: re-run on an old report (``--evaluate``) it judges a
    changed preset on the same measurements."""
    from skwgrad.abi.conv import parse_problem

    rows = [(r["shape"], r["regime"], parse_problem(r["problem"])) for r in report["rows"]]
    keys = {preset: _preset_keys(rows, preset, report["arch"]) for preset in PRESETS}
    per_row = []
    for r in report["rows"]:
        ok = [c for c in r.get("candidates", []) if c.get("us") is not None]
        out = {"shape": r["shape"], "regime": r["regime"]}
        for preset, ks in keys.items():
            held = [c for c in ok if c["key"] in ks and (not c.get("stage2_key") or c["stage2_key"] in ks)]
            best = min(held, key=lambda c: c["us"], default=None)
            out[preset] = {"us": best["us"], "label": best["label"], "pool": best.get("pool"), "ks_count": best.get("ks_count"),
                           "candidates": len(held)} if best else {"error": "no candidate of the preset ran"}  # fmt: skip
        if "us" in out["default"] and "us" in out["broad"]:
            out["default_over_broad"] = out["default"]["us"] / out["broad"]["us"]
        per_row.append(out)
    ratios = [r["default_over_broad"] for r in per_row if "default_over_broad" in r]
    few = [r["default_over_broad"] for r in per_row if "default_over_broad" in r and r["regime"] == "few_tiles_long_k"]
    return {
        "presets": {preset: len(ks) for preset, ks in keys.items()},
        "best": per_row,
        "geomean_default_over_broad": geomean(ratios),
        "geomean_default_over_broad_few_tiles_long_k": geomean(few),
        "worst_default_over_broad": max(ratios, default=None),
        "rows_compared": len(ratios),
        "floor": "<= 1.03",
    }


if __name__ == "__main__":
    main()
