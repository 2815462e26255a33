"""Where the host time of one launch goes: each driver call alone, through cuda-bindings and
through ctypes on libcuda, beside the whole ``Plan.launch``.

    SKWGRAD_CACHE=DIR python benchmarks/gpu_hostcost.py --out hostcost.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import skwgrad  # noqa: E402


def per_call(fn, n=2000, warm=200) -> float:
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n // 5):
            fn()
        best.append((time.perf_counter() - t0) / (n // 5) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(best)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cache = os.environ.get("SKWGRAD_CACHE")
    x = torch.randn((2, 8, 8, 8), device="cuda").bfloat16().contiguous(memory_format=torch.channels_last)
    dy = torch.randn((2, 8, 8, 8), device="cuda").bfloat16().contiguous(memory_format=torch.channels_last)
    out = skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=cache, streamk="dp_sk", reduction="linear")
    p = skwgrad.plan("n=2,c=8,k=8,h=8,w=8,y=3,x=3,padding=1,dtype=bf16", cache=cache, streamk="dp_sk", reduction="linear")
    be = p.backend
    d = be._d
    fn = p._fn
    buf = p._buf
    s = torch.cuda.current_stream().cuda_stream
    dyp, xp, dwp = dy.data_ptr(), x.data_ptr(), out.data_ptr()
    lib = ctypes.CDLL("libcuda.so.1")
    L = lib.cuLaunchKernel
    vp, u32 = ctypes.c_void_p, ctypes.c_uint
    L.argtypes = [vp, u32, u32, u32, u32, u32, u32, u32, vp, vp, vp]
    L.restype = ctypes.c_int
    h = int(fn.handle)
    ctxf = lib.cuCtxGetCurrent
    ctxf.argtypes = [ctypes.POINTER(vp)]
    cap = lib.cuStreamIsCapturing
    cap.argtypes = [vp, ctypes.POINTER(ctypes.c_int)]
    st = ctypes.c_int()
    cur = vp()
    noargs = lib.cuInit
    noargs.argtypes = [ctypes.c_uint]
    res = {"gpu": torch.cuda.get_device_name(0), "plan": p.label, "grid": p.grid}
    res["python_call"] = per_call(lambda: None)
    res["bindings_launch"] = per_call(lambda: d.cuLaunchKernel(fn.handle, p.grid, 1, 1, p.threads, 1, 1, p.shared, s, None, buf.extra))
    res["ctypes_launch"] = per_call(lambda: L(h, p.grid, 1, 1, p.threads, 1, 1, p.shared, s, None, buf.extra))
    res["ctypes_launch_noargtypes"] = None
    res["bindings_ctx"] = per_call(lambda: d.cuCtxGetCurrent())
    res["ctypes_ctx"] = per_call(lambda: ctxf(ctypes.byref(cur)))
    res["bindings_capturing"] = per_call(lambda: d.cuStreamIsCapturing(s))
    res["ctypes_capturing"] = per_call(lambda: cap(s, ctypes.byref(st)))
    res["ctypes_trivial_call"] = per_call(lambda: noargs(0))
    res["backend_activate"] = per_call(be.activate)
    res["backend_is_capturing"] = per_call(lambda: be.stream_is_capturing(s))
    res["plan_launch"] = per_call(lambda: p.launch(dyp, xp, dwp, s))
    res["wgrad"] = per_call(lambda: skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=cache, streamk="dp_sk", reduction="linear"))
    res["wgrad_out"] = per_call(lambda: skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=cache, out=out, streamk="dp_sk", reduction="linear"))
    w = torch.empty((8, 8, 3, 3), device="cuda", dtype=torch.bfloat16)
    res["torch_wgrad"] = per_call(lambda: torch.ops.aten.convolution_backward(dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False]))
    res["torch_empty_strided"] = per_call(lambda: torch.empty_strided((8, 8, 3, 3), (72, 1, 24, 8), dtype=torch.bfloat16, device="cuda"))
    e = torch.empty(1, device="cuda")
    res["torch_tiny_kernel"] = per_call(lambda: e.add_(1))
    Path(a.out).write_text(json.dumps(res, indent=1))
    for k, v in res.items():
        print(f"{k:28s} {v}")


if __name__ == "__main__":
    main()
