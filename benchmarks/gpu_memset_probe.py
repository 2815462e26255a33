"""What the dW memset of an atomic launch costs in device time, per row, through auto's pick,
and what the dependent launches (``abi.arch.Arch.dependent_launch``: the kernel after the memset,
Stage-2 after the kernel) give back.

    python benchmarks/gpu_memset_probe.py --cache CACHE --corpus SHAPES.csv [--corpus ...] --out probe.json

Per row: auto's launch (``choose``, no tuned records), verified once against float64 with dW
poisoned; where its plan zeroes dW before the kernel (the atomic epilogues), the same plan timed
as is (``us``: the memset, then the kernel, a dependent launch where the arch has it), without
the memset (``no_memset_us``, a wrong dW: timing only) and, where the plan launches dependently,
with plain launches (``plain_us``: the kernel after the memset and Stage-2 after the kernel, what
the launcher did before), interleaved in
``--rounds`` rounds of ``--iters`` event-timed launches behind a stream hold, who goes first
rotating. The plain launch's dW is checked too.
On 1x1 stride-1 2-D rows also cuBLAS's GEMM of the same reduction (``torch.mm(dy^T, x)``, dW in
the problem's dW dtype) for orientation: the weight gradient of a pointwise layer is that GEMM.
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


def cublas_us(p, iters: int):
    import torch

    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    rows = p.n * p.ho * p.wo
    x = torch.randn(rows, p.g * p.c, device="cuda", dtype=dt[p.dtype])
    dy = torch.randn(rows, p.g * p.k, device="cuda", dtype=dt[p.dtype])
    out = dt[p.dw_dtype]

    def mm():
        if out == x.dtype:
            return torch.mm(dy.t(), x)
        return torch.mm(dy.t(), x, out_dtype=out)

    try:
        for _ in range(3):
            mm()
    except Exception as e:  # noqa: BLE001  (recorded: an older torch has no out_dtype)
        return None, f"{type(e).__name__}: {e}"[:200]
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        mm()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--corpus", action="append", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default="")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=120.0)
    a = ap.parse_args()

    import torch

    from skwgrad.abi.conv import from_row
    from skwgrad.cache.store import Cache
    from skwgrad.launcher.hostdata import DeviceInputs
    from skwgrad.launcher.select import choose
    from skwgrad.reference import relative_error, tolerance, wgrad_reference

    backend, occ, hold = timing_device()
    cache = Cache(a.cache)
    doc = {"date": time.strftime("%Y-%m-%d"), "commit": a.commit, "device": backend.device_name, "script": "benchmarks/gpu_memset_probe.py",
           "rows": []}  # fmt: skip
    t0 = time.time()
    for path in a.corpus:
        for row in csv.DictReader(open(path)):
            if time.time() - t0 > a.budget_s:
                break
            p = from_row(row)
            rec = {"name": row["name"], "set": Path(path).stem, "problem": p.describe()}
            try:
                c = choose(p, cache, arch=backend.arch, cus=backend.compute_units, occupancy=occ, use_tuned=False)
                rec.update(kernel=c.kernel.label, pool=c.pool, ks=c.ks_count)
                bufs = DeviceInputs.random(p, backend, seed=0)
                try:
                    pl = c.plan(p, backend)
                    pl.poison(dw=bufs.dw)
                    pl.launch(bufs.dy, bufs.x, bufs.dw)
                    err = relative_error(bufs.read_dw(), wgrad_reference(p, bufs.x64, bufs.dy64))
                    tol = tolerance(p.dtype, p.dw_dtype, p.precision)
                    zero, dep = bool(pl._zero_dw), bool(pl._dependent)
                    orig2 = bool(pl._dependent2)
                    dep2 = orig2 and pl._fn2 is not None
                    rec.update(rel_err=err, ok=bool(err <= tol), zeroes_dw=zero, dependent=dep, stage2_dependent=dep2,
                               dw_bytes=pl.dw_nbytes)  # fmt: skip
                    if dep or dep2:  # the plain launches compute dW too
                        pl._dependent = pl._dependent2 = False
                        pl.poison(dw=bufs.dw)
                        pl.launch(bufs.dy, bufs.x, bufs.dw)
                        e2 = relative_error(bufs.read_dw(), wgrad_reference(p, bufs.x64, bufs.dy64))
                        rec.update(plain_rel_err=e2, ok=rec["ok"] and bool(e2 <= tol))
                    # case: (zero dW, dependent kernel, dependent Stage-2)
                    cases = {"us": (zero, dep, dep2)}
                    if zero:
                        cases["no_memset_us"] = (False, False, False)
                    if dep or dep2:
                        cases["plain_us"] = (zero, False, False)
                    times = {k: [] for k in cases}
                    order = list(cases)
                    for i in range(a.rounds):
                        for k in order[i % len(order) :] + order[: i % len(order)]:
                            pl._zero_dw, pl._dependent, pl._dependent2 = cases[k]
                            times[k].append(pl.time(bufs.dy, bufs.x, bufs.dw, warmup=2, iters=a.iters, hold=hold)["median_us"])
                    pl._zero_dw, pl._dependent, pl._dependent2 = zero, dep, orig2
                    rec.update({k: statistics.median(v) for k, v in times.items()})
                finally:
                    bufs.free()
                if p.spatial_dims == 2 and (p.y, p.x) == (1, 1) and tuple(p.stride[1:]) == (1, 1) and p.g == 1 and not any(p.pad_lo):
                    rec["cublas_us"], note = cublas_us(p, a.iters)
                    if note:
                        rec["cublas_note"] = note
            except Exception as e:  # noqa: BLE001  (recorded: the row shows what could not run)
                rec["error"] = f"{type(e).__name__}: {e}"[:300]
            doc["rows"].append(rec)
            print(f"{row['name'][:44]:44s} {rec.get('kernel', '')[-44:]:44s} ks={rec.get('ks')} us={rec.get('us') or 0:6.1f} "
                  f"no_memset={rec.get('no_memset_us') or 0:6.1f} plain={rec.get('plain_us') or 0:6.1f} cublas={rec.get('cublas_us') or 0:6.1f} ok={rec.get('ok')}", flush=True)  # fmt: skip
            Path(a.out).write_text(json.dumps(doc, indent=1, default=str))
    z = [r for r in doc["rows"] if r.get("no_memset_us")]
    doc["summary"] = {
        "rows": len(doc["rows"]), "all_ok": all(r.get("ok") for r in doc["rows"]), "rows_zeroing_dw": len(z),
        "memset_us_median": statistics.median([r["us"] - r["no_memset_us"] for r in z]) if z else None,
        "with_over_without_geomean": geo([r["us"] / r["no_memset_us"] for r in z]),
        "rows_dependent": sum(1 for r in z if r.get("plain_us")),
        "plain_over_dependent_geomean": geo([r["plain_us"] / r["us"] for r in z if r.get("plain_us")]),
        "plain_minus_dependent_us_median": statistics.median([r["plain_us"] - r["us"] for r in z if r.get("plain_us")]) if any(r.get("plain_us") for r in z) else None,
        "rows_stage2_dependent": sum(1 for r in doc["rows"] if r.get("stage2_dependent")),
        "stage2_plain_over_dependent_geomean": geo([r["plain_us"] / r["us"] for r in doc["rows"] if r.get("stage2_dependent") and r.get("plain_us")]),
    }  # fmt: skip
    Path(a.out).write_text(json.dumps(doc, indent=1, default=str))
    print("summary", json.dumps(doc["summary"]))
    del torch


if __name__ == "__main__":
    main()
