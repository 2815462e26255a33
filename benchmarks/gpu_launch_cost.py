"""Host cost of one kernel launch through cuda-bindings, by argument form (a micro-benchmark).

Loads one small cached kernel (the pad kernel of a padded plan) and times N back-to-back
``cuLaunchKernel`` calls per form, then the whole ``Plan.launch`` of a padded and an unpadded
plan, and ``cuCtxGetCurrent`` (the per-launch context check):

    python benchmarks/gpu_launch_cost.py --cache DIR [--out F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from skwgrad.abi.conv import parse_problem
from skwgrad.cache import Cache
from skwgrad.launcher.backends import get_backend
from skwgrad.launcher.hostdata import DeviceInputs
from skwgrad.launcher.options import LaunchOptions
from skwgrad.launcher.select import backend_occupancy, choose


def per_call(fn, n=2000, rounds=5):
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", required=True)
    ap.add_argument("--out")
    a = ap.parse_args()
    be = get_backend()
    cache = Cache(a.cache, readonly=True)
    occ = backend_occupancy(be)
    res = {}
    padded = parse_problem("n=1,c=258,k=1028,h=28,w=28,y=1,x=1,dtype=bf16,dw_dtype=fp32")
    plain = parse_problem("n=1,c=256,k=1024,h=28,w=28,y=1,x=1,dtype=bf16,dw_dtype=fp32")
    d = be._d
    for name, p in (("padded", padded), ("plain", plain)):
        ch = choose(p, cache, arch=be.arch, cus=be.compute_units, occupancy=occ, use_tuned=False)
        pl = ch.plan(p, be)
        bufs = DeviceInputs.random(p, be, seed=0)
        stream = be.stream_create()
        pl.launch(bufs.dy, bufs.x, bufs.dw, stream)
        be.stream_synchronize(stream)
        res[f"plan_launch_{name}_us"] = per_call(lambda: pl.launch(bufs.dy, bufs.x, bufs.dw, stream), n=500)
        res[f"plan_{name}_kernels"] = 1 + (pl._fn2 is not None) + len(getattr(pl, "_pads", ()))
        be.stream_synchronize(stream)
        if name == "plain":
            fn, buf, grid, thr, sh = pl._fn, pl._buf, pl.grid, pl.threads, pl.shared
            launch = be._launch
            h = fn.handle
            cs = d.CUstream(stream)
            res["backend_launch_us"] = per_call(lambda: be.launch(fn, grid, thr, sh, buf, stream), n=500)
            res["raw_int_stream_us"] = per_call(lambda: launch(h, grid, 1, 1, thr, 1, 1, sh, stream, None, buf.extra), n=500)
            res["raw_custream_us"] = per_call(lambda: launch(h, grid, 1, 1, thr, 1, 1, sh, cs, None, buf.extra), n=500)
            be.stream_synchronize(stream)
        be.stream_destroy(stream)
        bufs.free()
    res["ctx_get_current_us"] = per_call(lambda: d.cuCtxGetCurrent())
    res["activate_us"] = per_call(be.activate)
    print(json.dumps(res, indent=1))
    if a.out:
        json.dump(res, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
