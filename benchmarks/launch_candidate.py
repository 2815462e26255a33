"""Launch one cached candidate (kernel label, pool or ks_count) a few times on fresh random inputs,
for a profiler to attach to (``benchmarks/gpu_profile_candidates.sh``): what ``run-from-cache``
cannot do, since it launches auto's choice or every candidate.

    python benchmarks/launch_candidate.py --cache C --problem P --kernel LABEL [--pool N | --ks N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from compare_auto_tuned import timing_device  # noqa: E402
from skwgrad.abi.conv import parse_problem  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--problem", required=True)
    ap.add_argument("--kernel", required=True, help="the cached kernel's label")
    ap.add_argument("--pool", type=int, default=0)
    ap.add_argument("--ks", type=int, default=0)
    ap.add_argument("--launches", type=int, default=4)
    a = ap.parse_args()
    from skwgrad.cache import Cache
    from skwgrad.launcher.hostdata import DeviceInputs
    from skwgrad.launcher.select import all_choices

    p = parse_problem(a.problem)
    backend, occ, _ = timing_device()
    cache = Cache(a.cache, readonly=True)
    choices = all_choices(p, cache, arch=backend.arch, cus=backend.compute_units, occupancy=occ)
    found = [c for c in choices
             if c.kernel.label == a.kernel and (not a.pool or c.pool == a.pool) and (not a.ks or c.ks_count == a.ks)]  # fmt: skip
    if not found:
        have = sorted({(c.kernel.label, c.pool, c.ks_count) for c in choices})
        sys.exit(f"no candidate {a.kernel} pool={a.pool} ks={a.ks} for {a.problem}; the search has: {have}")
    c = found[0]
    bufs = DeviceInputs.random(p, backend, seed=0)
    try:
        t = c.plan(p, backend).time(bufs.dy, bufs.x, bufs.dw, warmup=0, iters=a.launches)
    finally:
        bufs.free()
    print(f"{c.kernel.label} pool {c.pool} ks {c.ks_count}: median {t['median_us']:.1f} us over {a.launches}")


if __name__ == "__main__":
    main()
