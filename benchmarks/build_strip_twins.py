"""Add to a cache the other strip widths of each 3x3 stride-1 depthwise row's window kernel, so
``gpu_dw_window_ab.py`` can time them beside the one selection takes (CPU; run after
``skwgrad compile-all --corpus``).

    python benchmarks/build_strip_twins.py --cache C --corpus SHAPES.csv [--modes win7r3,win5r3,win4r3]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--corpus", action="append", required=True)
    ap.add_argument("--modes", default="win7r3,win5r3,win4r3")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--cus", type=int, default=132)
    a = ap.parse_args()
    from skwgrad.abi.conv import from_row
    from skwgrad.aot.build import build
    from skwgrad.aot.sweep import SweepItem
    from skwgrad.cache.store import Cache
    from skwgrad.launcher.select import choose

    cache = Cache(a.cache)
    want = set()
    for path in a.corpus:
        with open(path) as f:
            for row in csv.DictReader(f):
                p = from_row(row)
                if (p.c, p.k) != (1, 1) or p.g == 1 or (p.y, p.x, p.stride[2], p.dilation[2]) != (3, 3, 1, 1):
                    continue
                spec = choose(p, cache, arch=a.arch, cus=a.cus, use_tuned=False).spec
                if spec.family == "dwconv" and spec.dwconv_window.bw:
                    want.update(dataclasses.replace(spec, mode=m) for m in a.modes.split(","))
    summary = build([SweepItem(a.arch, s) for s in sorted(want)], cache, progress=False, retry_failed=True)
    print(f"{len(want)} strip kernels: {len(summary.built)} built, {len(summary.failed)} failed")


if __name__ == "__main__":  # the build's worker processes re-import this file
    main()
