"""Channel padding on the GPU: per row of a shape CSV, the padded launch (copies + vector kernel)
against the same kernel on the padded problem alone (the copies' cost), the best unpadded
candidate, auto, and PyTorch's own weight gradient; every launch verified against float64 first.

    python benchmarks/gpu_padding.py --cache DIR --corpus benchmarks/shapes/v1_unaligned.csv --out out.json

The copies' measured cost is fitted to ``gather elements / rate + scatter elements / rate +
launches x fixed`` (least squares on relative error over the rows), the form
``skwgrad.abi.costmodel.padding_us`` prices them by.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from datetime import date

import numpy as np

from skwgrad.abi.conv import read_corpus
from skwgrad.abi.costmodel import padding_us
from skwgrad.abi.padding import channel_padding
from skwgrad.cache import Cache
from skwgrad.launcher.backends import get_backend
from skwgrad.launcher.baseline import cudnn_time, stream_hold
from skwgrad.launcher.hostdata import DeviceInputs
from skwgrad.launcher.options import LaunchOptions
from skwgrad.launcher.plan import Plan
from skwgrad.launcher.select import backend_occupancy, choose, rank_choices
from skwgrad.reference import relative_error, tolerance, wgrad_reference


def end_to_end(p, cache_path: str, calls: int = 200) -> dict:
    """Microseconds per call, host included, of what a PyTorch user runs: ``skwgrad.wgrad`` on
    channels-last torch tensors (warm: plan built, arenas grown) against PyTorch's own weight
    gradient, each as ``calls`` back-to-back calls then one synchronize, in one interleaved pass
    (3 rounds, the median round)."""
    import torch

    import skwgrad

    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[p.dtype]
    x = torch.randn(p.n, p.g * p.c, p.hi, p.wi, device="cuda").to(dt).contiguous(memory_format=torch.channels_last)
    dy = torch.randn(p.n, p.g * p.k, p.ho, p.wo, device="cuda").to(dt).contiguous(memory_format=torch.channels_last)
    w = torch.empty(p.g * p.k, p.c, p.y, p.x, device="cuda", dtype=dt).contiguous(memory_format=torch.channels_last)
    kw = dict(filter_size=(p.y, p.x), stride=p.stride[1:], padding=p.pad_lo[1:], dilation=p.dilation[1:], groups=p.g,
              cache=cache_path, dw_dtype=p.dw_dtype)  # fmt: skip

    def ours():
        skwgrad.wgrad(x, dy, **kw)

    def native():
        torch.ops.aten.convolution_backward(dy, x, w, None, list(p.stride[1:]), list(p.pad_lo[1:]), list(p.dilation[1:]),
                                            False, [0, 0], p.g, [False, True, False])  # fmt: skip

    out = {}
    for name, fn in (("ours", ours), ("native", native)):
        for _ in range(10):
            fn()
    torch.cuda.synchronize()
    rounds = {"ours": [], "native": []}
    for _ in range(3):
        for name, fn in (("ours", ours), ("native", native)):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            rounds[name].append((time.perf_counter() - t0) / calls * 1e6)
    for name, r in rounds.items():
        out[f"e2e_{name}_us"] = sorted(r)[1]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", required=True)
    ap.add_argument("--corpus", action="append", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--budget-s", type=float, default=400)
    ap.add_argument("--e2e", action="store_true", help="also the end-to-end skwgrad.wgrad call against PyTorch's (host included)")
    a = ap.parse_args()
    be = get_backend()
    cache = Cache(a.cache, create=False)
    occ = backend_occupancy(be)
    hold = stream_hold()
    rows, t0 = [], time.time()
    for csv in a.corpus:
        for name, regime, p in read_corpus(csv):
            if time.time() - t0 > a.budget_s:
                print("budget spent; stopping")
                break
            pad = channel_padding(p)
            row = {"name": name, "problem": p.describe(), "csv": csv}
            if pad is None:
                row["note"] = "aligned"
                rows.append(row)
                continue
            r = rank_choices(p, cache, arch=be.arch, cus=be.compute_units, options=LaunchOptions(), occupancy=occ)
            padded = [c for c in r.choices if c.padding is not None]
            plain = [c for c in r.choices if c.padding is None]
            auto = choose(p, cache, arch=be.arch, cus=be.compute_units, occupancy=occ, use_tuned=False)
            inputs = DeviceInputs.random(p, be, seed=len(rows) + 1)
            ref = wgrad_reference(p, inputs.x64, inputs.dy64)
            try:
                def run(c, what):
                    plan = c.plan(p, be)
                    inputs.poison_dw(0xFF)
                    plan.poison(byte=0xFF)
                    plan.launch(inputs.dy, inputs.x, inputs.dw, 0)
                    err = relative_error(inputs.read_dw(), ref)
                    ok = err <= tolerance(p.dtype, p.dw_dtype, c.spec.precision) and plan.zeroed_bytes_nonzero() == 0
                    t = plan.time(inputs.dy, inputs.x, inputs.dw, warmup=5, iters=a.iters, hold=hold)
                    return {f"{what}_label": c.kernel.label, f"{what}_setting": c.pool or c.ks_count, f"{what}_us": t["median_us"],
                            f"{what}_host_us": t["host_us"], f"{what}_predicted_us": c.predicted_us, f"{what}_rel_err": err,
                            f"{what}_ok": bool(ok)}  # fmt: skip

                row.update(padding=pad.describe(), pad_bytes=pad.bytes_moved, pad_copies=len(pad.copies), pad_launches=len(pad.launches),
                           pad_elements=sum(c.elements_moved for c in pad.copies),
                           pad_gather_elements=sum(c.elements_moved for c in pad.copies if not c.scatter),
                           pad_scatter_elements=sum(c.elements_moved for c in pad.copies if c.scatter),
                           pad_predicted_us=padding_us(pad, be.arch))  # fmt: skip
                row.update(run(auto, "auto"), auto_padded=auto.padding is not None)
                if plain:
                    row.update(run(plain[0], "plain"))
                if padded:
                    best = padded[0]
                    row.update(run(best, "padded"))
                    # the same kernel and setting on the padded problem, no copies
                    q = pad.padded
                    inner = Plan(q, best.kernel, be, pool=best.pool, ks_count=best.ks_count, stage2=best.stage2)
                    qi = DeviceInputs.random(q, be, seed=7)
                    try:
                        t = inner.time(qi.dy, qi.x, qi.dw, warmup=5, iters=a.iters, hold=hold)
                    finally:
                        qi.free()
                    row["kernel_only_us"] = t["median_us"]
                    row["copies_us"] = row["padded_us"] - t["median_us"]
                if a.e2e and p.spatial_dims == 2:
                    row.update(end_to_end(p, a.cache))
                us, note = cudnn_time(p, be, warmup=5, iters=a.iters)
                row["cudnn_us"] = us
                if note:
                    row["cudnn_note"] = note
            finally:
                inputs.free()
            rows.append(row)
            print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items() if k != "csv"}), flush=True)
    fit = {}
    pts = [r for r in rows if "copies_us" in r]
    if len(pts) >= 4:  # costmodel.padding_us's form: gather and scatter elements at their rates, plus launches
        A = np.array([[r["pad_gather_elements"], r["pad_scatter_elements"], r["pad_launches"]] for r in pts], dtype=float)
        y = np.array([r["copies_us"] for r in pts])
        w = 1.0 / np.maximum(y, 1e-3)  # relative error
        (g, sc, per_launch), *_ = np.linalg.lstsq(A * w[:, None], y * w, rcond=None)
        pred = A @ np.array([g, sc, per_launch])
        fit = {"gather_elements_per_us": (1.0 / g) if g > 0 else None, "scatter_elements_per_us": (1.0 / sc) if sc > 0 else None,
               "launch_us": per_launch, "rms_relative_error": float(np.sqrt(np.mean(((pred - y) / y) ** 2))),
               "rows": len(pts)}  # fmt: skip
    def gm(xs):
        xs = [x for x in xs if x]
        return float(np.exp(np.mean(np.log(xs)))) if xs else None

    summary = {
        "rows": len(rows),
        "all_verified": all(r.get(k, True) for r in rows for k in ("auto_ok", "plain_ok", "padded_ok")),
        "auto_vs_cudnn_geomean": gm([r["cudnn_us"] / r["auto_us"] for r in rows if r.get("cudnn_us") and r.get("auto_us")]),
        "padded_vs_plain_geomean": gm([r["plain_us"] / r["padded_us"] for r in rows if r.get("plain_us") and r.get("padded_us")]),
        "auto_padded": sum(1 for r in rows if r.get("auto_padded")),
        "e2e_native_over_ours_geomean": gm([r["e2e_native_us"] / r["e2e_ours_us"] for r in rows if r.get("e2e_ours_us")]),
        "copies_fit": fit,
    }
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {"date": date.today().isoformat(), "gpu": be.device_name, "arch": be.arch, "cus": be.compute_units, "commit": commit,
           "host": platform.node(), "rows": rows, "summary": summary}  # fmt: skip
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
