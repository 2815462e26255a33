"""Does the pruned ``default`` lose against ``broad`` (the default before pruning)? GPU machine.

Build (CPU machine; one cache holding both presets' kernels for the corpus, about 240 sm_90
kernels):

    skwgrad compile-all --corpus tests/data/wgrad_shapes.csv --preset broad   --arch sm_90 --cache CACHE
    skwgrad compile-all --corpus tests/data/wgrad_shapes.csv --preset default --arch sm_90 --cache CACHE

Run (the H200, no compiler needed):

    python benchmarks/compare_presets.py --cache CACHE --corpus tests/data/wgrad_shapes.csv --out OUT.json

For every corpus row and each of the two presets it times, with ``skwgrad.launcher.select.tune``
(nothing is remembered in the cache), every cached candidate that the preset's corpus sweep holds
(``skwgrad.aot.sweep.sweep_for_problems``: what selection could choose from that preset), and
keeps the fastest. It writes per row the best microseconds and kernel of each preset and the
geomean ratio ``default_us / broad_us`` over the rows and over the ``few_tiles_long_k`` rows.
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
    ap.add_argument("--cache", required=True)
    ap.add_argument("--corpus", default=str(ROOT / "tests" / "data" / "wgrad_shapes.csv"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()

    from skwgrad.abi.conv import read_corpus
    from skwgrad.aot.sweep import sweep_for_problems
    from skwgrad.cache.store import Cache
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
    views = {}
    for preset in ("default", "broad"):
        items = sweep_for_problems([(n, p) for n, _, p in rows], preset, arches=[arch]).items
        keys = {Cache.key_for(it.spec, it.arch) for it in items}
        have = keys & cache.current_keys(arch)
        views[preset] = _View(cache, have)
        print(f"{preset}: {len(have)} of {len(keys)} corpus-sweep kernels cached", file=sys.stderr)
    out_rows = []
    for name, regime, p in rows:
        row = {"shape": name, "regime": regime}
        for preset, view in views.items():
            try:
                timed = tune(p, backend, view, remember=False, iters=args.iters)
                best = next((t for t in timed if "us" in t), None)
                row[preset] = {"us": best["us"], "label": best["label"], "candidates": len(timed)} if best else {"error": "no candidate ran"}
            except SkwgradError as e:
                row[preset] = {"error": str(e)}
        if "us" in row["default"] and "us" in row["broad"]:
            row["default_over_broad"] = row["default"]["us"] / row["broad"]["us"]
        out_rows.append(row)
        print(f"{name}: default {row['default'].get('us')} us, broad {row['broad'].get('us')} us", file=sys.stderr)

    def geomean(xs):
        xs = list(xs)
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None

    ratios = [r["default_over_broad"] for r in out_rows if "default_over_broad" in r]
    few = [r["default_over_broad"] for r in out_rows if "default_over_broad" in r and r["regime"] == "few_tiles_long_k"]
    report = {
        "what": "tuned best of the pruned default vs broad over the corpus (benchmarks/compare_presets.py)",
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "device": getattr(backend, "name", arch), "arch": arch, "cus": backend.compute_units,
        "rows": out_rows,
        "geomean_default_over_broad": geomean(ratios),
        "geomean_default_over_broad_few_tiles_long_k": geomean(few),
        "rows_compared": len(ratios),
        "floor": "<= 1.03",
    }
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("geomean_default_over_broad", "geomean_default_over_broad_few_tiles_long_k", "rows_compared")}))


if __name__ == "__main__":
    main()
