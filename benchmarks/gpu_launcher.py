"""The launcher as a framework op, on a GPU: layouts, CUDA-graph capture, host time, threads.

    SKWGRAD_CACHE=DIR python benchmarks/gpu_launcher.py --out results.json

Four parts, each recorded per case in the JSON:

* layouts: PyTorch's NCHW-contiguous, channels_last, channels_last_3d, a sliced/strided view,
  NHWC numpy with and without ``layout=``, ambiguous numpy/CuPy arrays; each must be right (vs a
  float64 PyTorch weight gradient) or refused with a clear message. ``silently_wrong`` must be 0.
* capture: ``torch.cuda.graph`` capture of ``skwgrad.wgrad`` for every stream-K reduction
  (dp_sk and persistent) and split-K epilogue, then 100 replays with fresh inputs copied into the
  static buffers: every replay checked against the float64 reference, linear/tree/direct/
  two_stage bit-identical to an eager call on the same inputs.
* host: host time per call, back to back, of ``wgrad()``, a reused ``Plan.launch`` on raw
  pointers, and PyTorch's own weight gradient, on a tiny shape and on ResNet-50 3x3 64ch N=32.
* threads: 8 threads calling ``wgrad()`` at once on one shared shape and on 8 different shapes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import skwgrad  # noqa: E402
from skwgrad.errors import SkwgradError  # noqa: E402
from skwgrad.launcher import api  # noqa: E402

DEV = "cuda"


def ref_wgrad(x, dy, w_shape, stride=1, padding=0, dilation=1, groups=1):
    """float64 PyTorch weight gradient of NCHW tensors (any memory format)."""
    sd = x.dim() - 2
    w = torch.zeros(w_shape, dtype=torch.float64, device=x.device)
    return torch.ops.aten.convolution_backward(
        dy.double(), x.double(), w, None, [stride] * sd, [padding] * sd, [dilation] * sd, False, [0] * sd, groups,
        [False, True, False],
    )[1]  # fmt: skip


def rel(a, b) -> float:
    a = torch.as_tensor(a, device=DEV).double()
    return float((a - b).norm() / b.norm())


TOL = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-5}


# ---------------------------------------------------------------------------------------------
def layouts(cache) -> list[dict]:
    import numpy as np

    rows = []
    g = torch.Generator(device=DEV).manual_seed(1)

    def case(name, fn, ref, dtype="bf16", expect="right"):
        row = {"case": name, "expect": expect}
        try:
            out = fn()
            if isinstance(out, np.ndarray):
                out = torch.from_numpy(np.ascontiguousarray(out)).to(DEV)
            elif not isinstance(out, torch.Tensor):  # CuPy
                out = torch.as_tensor(out, device=DEV)
            row["shape"] = list(out.shape)
            row["rel_err"] = rel(out, ref) if tuple(out.shape) == tuple(ref.shape) else None
            row["result"] = "right" if row["rel_err"] is not None and row["rel_err"] <= TOL[dtype] else "WRONG"
        except SkwgradError as e:
            row["result"] = "refused"
            row["error_class"] = type(e).__name__
            row["message"] = str(e)
        row["ok"] = row["result"] == expect or (expect == "right_or_refused" and row["result"] in ("right", "refused"))
        rows.append(row)
        print(f"layout {name}: {row['result']} {row.get('rel_err', '')} {row.get('message', '')[:120]}", flush=True)

    kw = dict(filter_size=3, padding=1, cache=cache)
    for (n, c, k, h) in ((8, 8, 8, 8), (16, 32, 32, 32), (32, 64, 64, 56)):  # C == K: both readings fit
        x = torch.randn((n, c, h, h), device=DEV, generator=g).bfloat16()
        dy = torch.randn((n, k, h, h), device=DEV, generator=g).bfloat16()
        ref = ref_wgrad(x, dy, (k, c, 3, 3), padding=1)
        cl = torch.channels_last
        tag = f"{n}x{c}x{h}x{h}"
        case(f"torch NCHW-contiguous {tag}", lambda: skwgrad.wgrad(x, dy, **kw), ref)
        case(f"torch channels_last {tag}", lambda: skwgrad.wgrad(x.contiguous(memory_format=cl), dy.contiguous(memory_format=cl), **kw), ref)
        big = torch.cat([x, x], 3)
        case(f"torch sliced view {tag}", lambda: skwgrad.wgrad(big[..., :h], dy, **kw), ref)
        case(f"torch strided view {tag}", lambda: skwgrad.wgrad(torch.stack([x, x], -1)[..., 0], dy, **kw), ref)
        xf, dyf = x.float(), dy.float()
        ref32 = ref_wgrad(xf, dyf, (k, c, 3, 3), padding=1)
        xn, dyn = xf.cpu().numpy(), dyf.cpu().numpy()
        case(f"numpy NCHW-contiguous, no layout= {tag}", lambda: skwgrad.wgrad(xn, dyn, **kw), ref32, "fp32", "refused")
        case(f"numpy NCHW-contiguous, layout='nchw' {tag}", lambda: skwgrad.wgrad(xn, dyn, layout="nchw", **kw), ref32, "fp32")
        xh, dyh = np.ascontiguousarray(xn.transpose(0, 2, 3, 1)), np.ascontiguousarray(dyn.transpose(0, 2, 3, 1))
        case(f"numpy NHWC, no layout= {tag}", lambda: skwgrad.wgrad(xh, dyh, **kw), ref32, "fp32", "refused")
        case(f"numpy NHWC, layout='nhwc' {tag}", lambda: skwgrad.wgrad(xh, dyh, layout="nhwc", **kw), ref32, "fp32")
    # Unambiguous NHWC numpy (C != K): no layout= needed
    x = torch.randn((4, 16, 12, 12), device=DEV, generator=g)
    dy = torch.randn((4, 24, 12, 12), device=DEV, generator=g)
    ref = ref_wgrad(x, dy, (24, 16, 3, 3), padding=1)
    xh = x.permute(0, 2, 3, 1).contiguous().cpu().numpy()
    dyh = dy.permute(0, 2, 3, 1).contiguous().cpu().numpy()
    case("numpy NHWC C!=K, no layout=", lambda: skwgrad.wgrad(xh, dyh, **kw), ref, "fp32")
    try:
        import cupy

        case("cupy NHWC C!=K, no layout=", lambda: skwgrad.wgrad(cupy.asarray(xh), cupy.asarray(dyh), **kw), ref, "fp32")
        xs = cupy.asarray(x.cpu().numpy())  # NCHW-contiguous device memory, C != K
        case("cupy NCHW-contiguous C!=K, layout='nchw' (converted)", lambda: skwgrad.wgrad(xs, cupy.asarray(dy.cpu().numpy()), layout="nchw", **kw), ref, "fp32")
    except ImportError:
        pass
    # 3-D
    x = torch.randn((2, 8, 6, 10, 10), device=DEV, generator=g).bfloat16()
    dy = torch.randn((2, 16, 6, 10, 10), device=DEV, generator=g).bfloat16()
    ref = ref_wgrad(x, dy, (16, 8, 3, 3, 3), padding=1)
    cl3 = torch.channels_last_3d
    case("torch 3-D NCDHW-contiguous", lambda: skwgrad.wgrad(x, dy, **kw), ref)
    case("torch 3-D channels_last_3d", lambda: skwgrad.wgrad(x.contiguous(memory_format=cl3), dy.contiguous(memory_format=cl3), **kw), ref)
    # a torch out= in NCHW-contiguous memory (what torch.empty_like(weight) gives)
    x = torch.randn((4, 16, 12, 12), device=DEV, generator=g).bfloat16()
    dy = torch.randn((4, 24, 12, 12), device=DEV, generator=g).bfloat16()
    ref = ref_wgrad(x, dy, (24, 16, 3, 3), padding=1)
    out = torch.full((24, 16, 3, 3), float("nan"), device=DEV, dtype=torch.bfloat16)
    case("torch out= NCHW-contiguous", lambda: skwgrad.wgrad(x, dy, out=out, **kw), ref)
    return rows


# ---------------------------------------------------------------------------------------------
VARIANTS = [("off", r) for r in ("direct", "atomic", "two_stage", "workspace")] + [
    (m, r) for m in ("dp_sk", "persistent") for r in ("linear", "tree", "atomic", "workspace")
]
DETERMINISTIC = {"direct", "two_stage", "linear", "tree"}


def capture(cache, replays=100) -> list[dict]:
    rows = []
    n, c, k, h = 8, 8, 16, 32  # 32x32 tiles: several tiles, 256 iterations each, many SK CTAs per tile
    for streamk, red in VARIANTS:
        row = {"streamk": streamk, "reduction": red}
        try:
            dw_dtype = "fp32" if red == "atomic" else None
            kw = dict(filter_size=3, padding=1, cache=cache, streamk=streamk, reduction=red, dw_dtype=dw_dtype)
            if streamk != "off":
                kw["streamk_ctas"] = 40
            cl = torch.channels_last
            sx = torch.randn((n, c, h, h), device=DEV).bfloat16().contiguous(memory_format=cl)
            sdy = torch.randn((n, k, h, h), device=DEV).bfloat16().contiguous(memory_format=cl)
            s = torch.cuda.Stream()  # warm-up on a side stream, as torch's capture recipe says
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    skwgrad.wgrad(sx, sdy, **kw)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                sout = skwgrad.wgrad(sx, sdy, **kw)
            worst, identical, bad = 0.0, 0, 0
            for i in range(replays):
                x = torch.randn((n, c, h, h), device=DEV).bfloat16()
                dy = torch.randn((n, k, h, h), device=DEV).bfloat16()
                sx.copy_(x)
                sdy.copy_(dy)
                sout.fill_(float("nan"))
                graph.replay()
                eager = skwgrad.wgrad(sx, sdy, **kw)
                torch.cuda.synchronize()
                ref = ref_wgrad(x, dy, (k, c, 3, 3), padding=1)
                e = rel(sout, ref)
                worst = max(worst, e)
                bad += not (e <= TOL["bf16"])
                identical += bool(torch.equal(sout.view(torch.int16) if sout.dtype == torch.bfloat16 else sout, eager.view(torch.int16) if eager.dtype == torch.bfloat16 else eager))
            row.update(replays=replays, worst_rel_err=worst, wrong=bad, bit_identical_to_eager=identical)
            row["ok"] = bad == 0 and (red not in DETERMINISTIC or identical == replays)
        except Exception as e:  # noqa: BLE001  (recorded: a capture failure is a result here)
            row.update(ok=False, error=f"{type(e).__name__}: {e}")
        rows.append(row)
        print(f"capture {streamk}/{red}: {row}", flush=True)
    return rows


# ---------------------------------------------------------------------------------------------
def _per_call(fn, batches=7, per=100, warm=50) -> float:
    """Host microseconds of one call, back to back: the median over batches of the mean of
    ``per`` calls (the device work queues behind; a synchronize between batches keeps the
    launch queue from filling, which would make the host wait for the device)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    means = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(per):
            fn()
        means.append((time.perf_counter() - t0) / per)
        torch.cuda.synchronize()
    return statistics.median(means) * 1e6


def _e2e(fn, n=200, warm=20) -> float:
    """Wall microseconds per call of ``n`` calls then a synchronize (host and device together)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def host(cache) -> list[dict]:
    rows = []
    shapes = {"tiny": (2, 8, 8, 8), "r50_l1_3x3_64_n32": (32, 64, 64, 56)}
    for name, (n, c, k, h) in shapes.items():
        for opts in ({}, {"streamk": "off"}, {"streamk": "dp_sk", "reduction": "linear"}, {"streamk": "dp_sk", "reduction": "workspace"}):
            row = {"shape": name, "options": opts}
            try:
                cl = torch.channels_last
                x = torch.randn((n, c, h, h), device=DEV).bfloat16().contiguous(memory_format=cl)
                dy = torch.randn((n, k, h, h), device=DEV).bfloat16().contiguous(memory_format=cl)
                w = torch.empty((k, c, 3, 3), device=DEV, dtype=torch.bfloat16)
                kw = dict(filter_size=3, padding=1, cache=cache, **opts)
                out = skwgrad.wgrad(x, dy, **kw)
                # the plan wgrad() launches (the same (problem, options) key in the plan cache)
                p = skwgrad.plan(f"n={n},c={c},k={k},h={h},w={h},y=3,x=3,padding=1,dtype=bf16", cache=cache, **opts)
                stream = torch.cuda.current_stream().cuda_stream
                dyp, xp, dwp = dy.data_ptr(), x.data_ptr(), out.data_ptr()
                row["kernel"] = p.label
                row["reduction"] = p.reduction
                row["wgrad_host_us"] = _per_call(lambda: skwgrad.wgrad(x, dy, **kw))
                row["wgrad_out_host_us"] = _per_call(lambda: skwgrad.wgrad(x, dy, out=out, **kw))
                row["plan_launch_host_us"] = _per_call(lambda: p.launch(dyp, xp, dwp, stream))
                torch.backends.cudnn.benchmark = False
                conv_bw = lambda: torch.ops.aten.convolution_backward(  # noqa: E731
                    dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False])
                row["torch_host_us"] = _per_call(conv_bw)
                # where the API's host time goes (each piece alone, back to back)
                from skwgrad.launcher.api import _torch_key

                be = p.backend
                row["breakdown_us"] = {
                    "key": _per_call(lambda: _torch_key(x, dy, None)),
                    "empty_strided": _per_call(lambda: torch.empty_strided(tuple(out.shape), tuple(out.stride()), dtype=out.dtype, device=DEV)),
                    "raw_stream": _per_call(lambda: torch._C._cuda_getCurrentRawStream(0)),
                    "data_ptr_x3": _per_call(lambda: (x.data_ptr(), dy.data_ptr(), out.data_ptr())),
                    "activate": _per_call(be.activate),
                    "is_capturing": _per_call(lambda: be.stream_is_capturing(stream)),
                }  # fmt: skip
                row["wgrad_e2e_us"] = _e2e(lambda: skwgrad.wgrad(x, dy, **kw))
                row["torch_e2e_us"] = _e2e(conv_bw)
                row["e2e_ratio_vs_torch"] = row["torch_e2e_us"] / row["wgrad_e2e_us"]
                row["api_over_raw_us"] = row["wgrad_host_us"] - row["plan_launch_host_us"]
                row["ok"] = row["api_over_raw_us"] <= 10 and row["plan_launch_host_us"] <= 5
            except Exception as e:  # noqa: BLE001
                row.update(ok=False, error=f"{type(e).__name__}: {e}")
            rows.append(row)
            print(f"host {row}", flush=True)
    return rows


# ---------------------------------------------------------------------------------------------
def threads(cache) -> list[dict]:
    rows = []
    shapes = [(4, 8 + 8 * i, 16, 16 + 2 * i) for i in range(8)]
    for mode in ("shared", "different"):
        errors, worst = [], 0.0
        lock = threading.Lock()

        def work(i):
            nonlocal worst
            n, c, k, h = shapes[0] if mode == "shared" else shapes[i]
            try:
                s = torch.cuda.Stream()
                with torch.cuda.stream(s):
                    for j in range(20):
                        x = torch.randn((n, c, h, h), device=DEV).bfloat16()
                        dy = torch.randn((n, k, h, h), device=DEV).bfloat16()
                        out = skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=cache,
                                            streamk="dp_sk" if j % 2 else "auto", reduction="linear" if j % 2 else "auto")  # fmt: skip
                        ref = ref_wgrad(x, dy, (k, c, 3, 3), padding=1)
                        e = rel(out, ref)
                        with lock:
                            worst = max(worst, e)
                        if not e <= TOL["bf16"]:
                            errors.append((i, j, e))
                s.synchronize()
            except Exception as e:  # noqa: BLE001
                errors.append((i, repr(e)))

        ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        rows.append({"mode": mode, "threads": 8, "calls": 160, "worst_rel_err": worst, "errors": [str(e) for e in errors[:5]],
                     "ok": not errors})  # fmt: skip
        print(f"threads {rows[-1]}", flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache", default=os.environ.get("SKWGRAD_CACHE"))
    ap.add_argument("--parts", default="layouts,capture,host,threads")
    a = ap.parse_args()
    res = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(0),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip() or os.environ.get("SKWGRAD_COMMIT", ""),
        "torch": torch.__version__,
    }
    for part in a.parts.split(","):
        res[part] = globals()[part](a.cache)
    lay = res.get("layouts", [])
    res["summary"] = {
        "layouts_silently_wrong": sum(r["result"] == "WRONG" for r in lay),
        "layouts_ok": sum(r["ok"] for r in lay), "layouts_total": len(lay),
        "capture_ok": sum(r["ok"] for r in res.get("capture", [])), "capture_total": len(res.get("capture", [])),
        "host_ok": sum(r["ok"] for r in res.get("host", [])), "host_total": len(res.get("host", [])),
        "threads_ok": all(r["ok"] for r in res.get("threads", [])),
    }  # fmt: skip
    Path(a.out).write_text(json.dumps(res, indent=2, default=str))
    print(json.dumps(res["summary"], indent=2))


if __name__ == "__main__":
    main()
