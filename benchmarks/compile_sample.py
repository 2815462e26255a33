"""Time a random sample of a preset's build and extrapolate to the whole preset (CPU only).

    python benchmarks/compile_sample.py --preset default --arch gfx942 --arch gfx950 --sample 40 \
        --jobs 2 --out benchmarks/results/compile_sample_default.json

Draws ``--sample`` kernels uniformly at random (seeded) from the preset's sweep, builds them with
``skwgrad.aot.build.build`` (the compile-all engine, a local pool of ``--jobs`` workers) into an
empty temporary cache, and records for every kernel the CPU seconds its worker spent on it
(``compile_cpu_seconds``, ptxas included) and the wall time of the whole build.

Extrapolation (labelled as such in the output): the sample's mean CPU seconds per kernel in each
stratum (family x scalar-or-vector ``vec_c``; stream-K and ``vec_c = 1`` kernels compile 2-4x
slower) times the stratum's count in the full preset gives the preset's CPU seconds;
divided by the cores the build can use gives the wall time of an *unloaded* machine, and the
sample's own measured kernels/s gives the wall time at the load the sample saw.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def stratum(spec) -> str:
    if spec.family == "stage2":
        return "stage2"
    return f"{spec.family} vec_c={'1' if spec.vec_c == 1 else 'W'}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="default")
    ap.add_argument("--arch", action="append", required=True)
    ap.add_argument("--sample", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    from skwgrad.aot.build import build
    from skwgrad.aot.sweep import sweep
    from skwgrad.cache.store import Cache

    items = sweep(args.preset, arches=args.arch)
    sample = random.Random(args.seed).sample(items, min(args.sample, len(items)))
    full_counts = defaultdict(int)
    for it in items:
        full_counts[stratum(it.spec)] += 1
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="skwgrad-sample-") as d:
        cache = Cache(Path(d) / "c")
        t0 = time.perf_counter()
        summary = build(sample, cache, jobs=args.jobs, progress=False)
        wall = time.perf_counter() - t0
        rows = []
        for e in cache.entries():
            rows.append({"label": e.label, "arch": e.arch, "stratum": stratum(e.spec),
                         "cpu_s": e.metadata.get("compile_cpu_seconds"), "wall_s": e.metadata.get("compile_seconds")})  # fmt: skip
    load1 = os.getloadavg()
    per = defaultdict(list)
    for r in rows:
        per[r["stratum"]].append(r["cpu_s"])
    mean_all = sum(r["cpu_s"] for r in rows) / max(len(rows), 1)
    cpu_total = 0.0
    strata = {}
    for name, n in sorted(full_counts.items()):
        xs = per.get(name)
        mean = sum(xs) / len(xs) if xs else mean_all  # a stratum the sample missed: the overall mean
        strata[name] = {"in_preset": n, "in_sample": len(xs or []), "mean_cpu_s": round(mean, 3)}
        cpu_total += n * mean
    cores = min(args.jobs, len(os.sched_getaffinity(0)))
    rate = len(summary.built) / wall if wall > 0 else 0.0
    report = {
        "what": f"compile-all --preset {args.preset} --arch {' --arch '.join(args.arch)}: a timed random sample, extrapolated",
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip(),
        "machine": {"cpus": os.cpu_count(), "loadavg_start": load0, "loadavg_end": load1},
        "preset_kernels": len(items),
        "sample": {"kernels": len(sample), "seed": args.seed, "jobs": args.jobs, "built": len(summary.built),
                   "failed": [(f["label"], f["arch"], f["kind"]) for f in summary.failed],
                   "wall_s": round(wall, 1), "kernels_per_s": round(rate, 3),
                   "cpu_s": round(sum(r["cpu_s"] for r in rows), 1)},  # fmt: skip
        "strata": strata,
        "extrapolated": {
            "cpu_s": round(cpu_total, 0),
            "wall_min_unloaded": round(cpu_total / cores / 60, 1),
            "wall_min_at_sample_rate": round(len(items) / rate / 60, 1) if rate else None,
            "note": "EXTRAPOLATED from the sample, not a measured full build",
        },
        "kernels": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("preset_kernels", "sample", "strata", "extrapolated")}, indent=1))


if __name__ == "__main__":
    main()
