"""Host cost of the dependent launch (cuLaunchKernelEx) against the plain one, per call, in one process.

    python benchmarks/gpu_dependent_host.py --cache CACHE --corpus SHAPES.csv --out host.json

Per row whose auto launch zeroes dW: wall time per call of ``--iters`` back-to-back ``Plan.launch``
calls (memset + kernel; synchronized at the end, so small rows are host-bound) with the dependent
launch and with a plain one, alternating in ``--rounds`` rounds, and the host time per call inside
``Plan.time`` (the calls queued behind a stream hold), both ways.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from compare_auto_tuned import geo, timing_device  # noqa: E402
from gpu_fused_ab import launch_wall_us  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--corpus", action="append", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default="")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--iters", type=int, default=200)
    a = ap.parse_args()
    from skwgrad.abi.conv import from_row
    from skwgrad.cache.store import Cache
    from skwgrad.launcher.hostdata import DeviceInputs
    from skwgrad.launcher.select import choose

    backend, occ, hold = timing_device()
    cache = Cache(a.cache)
    doc = {"date": time.strftime("%Y-%m-%d"), "commit": a.commit, "device": backend.device_name, "script": "benchmarks/gpu_dependent_host.py", "rows": []}
    for path in a.corpus:
        for row in csv.DictReader(open(path)):
            p = from_row(row)
            c = choose(p, cache, arch=backend.arch, cus=backend.compute_units, occupancy=occ, use_tuned=False)
            bufs = DeviceInputs.random(p, backend, seed=0)
            try:
                pl = c.plan(p, backend)
                if not pl._dependent:
                    continue
                wall = {True: [], False: []}
                host = {True: [], False: []}
                for i in range(a.rounds):
                    for dep in ((True, False) if i % 2 == 0 else (False, True)):
                        pl._dependent = dep
                        wall[dep].append(launch_wall_us(pl, bufs, a.iters))
                        host[dep].append(pl.time(bufs.dy, bufs.x, bufs.dw, warmup=2, iters=50, hold=hold)["host_us"])
                pl._dependent = True
                rec = {"name": row["name"], "kernel": c.kernel.label, "ks": c.ks_count,
                       "dependent_wall_us": statistics.median(wall[True]), "plain_wall_us": statistics.median(wall[False]),
                       "dependent_host_us": statistics.median(host[True]), "plain_host_us": statistics.median(host[False])}  # fmt: skip
            finally:
                bufs.free()
            doc["rows"].append(rec)
            print(json.dumps(rec), flush=True)
    r = doc["rows"]
    doc["summary"] = {
        "rows": len(r),
        "wall_plain_over_dependent_geomean": geo([x["plain_wall_us"] / x["dependent_wall_us"] for x in r]),
        "host_dependent_minus_plain_us_median": statistics.median([x["dependent_host_us"] - x["plain_host_us"] for x in r]) if r else None,
    }
    Path(a.out).write_text(json.dumps(doc, indent=1))
    print("summary", json.dumps(doc["summary"]))


if __name__ == "__main__":
    main()
