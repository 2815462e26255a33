"""Tune on first use, across processes: the first process times the candidates of new shapes
(``SKWGRAD_TUNE=1``) and exports its cache; a second process imports the export into an empty
cache and runs the same shapes with tuning on: it must time nothing and pick the same kernels.

    python benchmarks/gpu_tune_first_use.py first  --cache A --out first.json
    skwgrad cache export tuned.tar --cache A
    skwgrad cache import tuned.tar --cache B
    python benchmarks/gpu_tune_first_use.py second --cache B --out second.json --against first.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = [  # (N, C, K, H, filter, padding, groups): dense, pointwise, depthwise, grouped
    (32, 64, 64, 56, 3, 1, 1),
    (32, 256, 64, 56, 1, 0, 1),
    (32, 144, 144, 56, 3, 1, 144),
    (32, 256, 256, 28, 3, 1, 32),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("phase", choices=["first", "second"])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--against")
    a = ap.parse_args()
    os.environ["SKWGRAD_TUNE"] = "1"
    import torch

    import skwgrad
    from skwgrad.launcher import api

    rows = []
    for n, c, k, h, f, pad, g in SHAPES:
        x = torch.randn((n, c, h, h), device="cuda").bfloat16().contiguous(memory_format=torch.channels_last)
        dy = torch.randn((n, k, h, h), device="cuda").bfloat16().contiguous(memory_format=torch.channels_last)
        before = api.stats["tuned"]
        t0 = time.perf_counter()
        skwgrad.wgrad(x, dy, filter_size=f, padding=pad, groups=g, cache=a.cache)
        torch.cuda.synchronize()
        first_ms = (time.perf_counter() - t0) * 1e3
        plan = next(p for key, p in api._plans.items() if key[2].n == n and key[2].c * key[2].g == c and key[2].g == g)
        rec = api.open_cache(a.cache).tuned(plan.backend.arch, plan.backend.compute_units, plan.problem.describe())
        rows.append({
            "shape": plan.problem.describe(), "timed_here": api.stats["tuned"] - before, "first_call_ms": first_ms,
            "kernel": plan.label, "reason": plan.choice.reason, "record_us": (rec or {}).get("us"),
            "native_us": (rec or {}).get("native_us"), "native_preferred": api.native_preferred(plan.problem, cache=a.cache),
        })  # fmt: skip
        print(rows[-1], flush=True)
    res = {"phase": a.phase, "rows": rows}
    if a.against:
        first = {r["shape"]: r for r in json.loads(Path(a.against).read_text())["rows"]}
        res["timed_anything"] = any(r["timed_here"] for r in rows)
        res["same_kernels"] = all(first[r["shape"]]["kernel"] == r["kernel"] for r in rows)
        res["ok"] = not res["timed_anything"] and res["same_kernels"]
        print(json.dumps({k: res[k] for k in ("timed_anything", "same_kernels", "ok")}))
    Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
