"""Depthwise wgrad studies on the GPU, each kernel JIT-compiled there and timed in CUDA graphs
beside cuDNN (benchmark mode), every launch checked against float64 with dW poisoned:

  bench   (run U2) the matrix-unit prototype ``dw_mma_kernel`` below against the product's window
          kernel: 2.0-3.7x slower on every row, not pursued (benchmarks/RESULTS.md, session 16);
  window  (run U3) window-kernel configurations (channels per CTA, strips, warps) at their best
          split degree;
  ks      (run U5) every split degree of the 7x7 window kernel at 16 and 32 channels on the rows
          of ``--csv`` files: what ``analyze_dwconv_ks.py --ks-sweep`` scores split rules on.

The prototype: per channel c, 2-D, stride 1 along H,
    dW[c, ky, kx] = sum over (n, hx, wo) of  x[n, hx, wo*sw - pw + kx*dw, c] * dy[n, hx + ph - ky*dh, wo, c]
with hx the x row. Over the reduction index k = (n, hx, q), wo = R*q + r (r < R), this is a GEMM per
channel of A[(r, kx), k] = x[n, hx, (R*q + r)*sw - pw + kx*dw] (M = R*KX <= 16) and
B[k, (r', ky)] = dy[n, hx + ph - ky*dh, R*q + r'] (N = R*KY <= 16): the dW taps are the diagonal
blocks r == r' summed over r. One 3-D tl.dot per step over a block of BC channels.
Run: TRITON_INTERPRET=1 python benchmarks/dw_mma_proto.py check   (CPU, tiny shapes, both kernels)
     python benchmarks/dw_mma_proto.py bench|window --out F.json
     python benchmarks/dw_mma_proto.py ks --csv SHAPES.csv --out F.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
import triton
import triton.language as tl

OUTSIDE = tl.constexpr(1 << 30)


@triton.jit
def dw_mma_kernel(
    dy, x, dw, N, G, Hi, Wi, Ho, Wo, KY, KX, ph, pw, sw, dh, dl, Q, ks_iters,
    R: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, MP: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    cblocks = tl.cdiv(G, BC)
    cb = pid % cblocks
    split = pid // cblocks
    KTOT = N * Hi * Q
    step0 = split * ks_iters
    step1 = tl.minimum(step0 + ks_iters, tl.cdiv(KTOT, BK))
    c = cb * BC + tl.arange(0, BC)
    c_ok = tl.max_constancy(c < G, 8)
    c = tl.max_contiguous(tl.multiple_of(c % G, 8), 8)
    # M index m = (r, kx), N index n = (r', ky)
    m = tl.arange(0, MP)
    rm = m // KX
    kxm = m % KX
    m_ok = rm < R
    m_w = tl.where(m_ok, rm * sw + kxm * dl, OUTSIDE)  # x column offset of (r, kx) within the q block
    rn = m // KY
    kyn = m % KY
    n_ok = rn < R
    n_h = tl.where(n_ok, kyn * dh, -OUTSIDE)  # dy row = hx + ph - ky*dh
    acc = tl.zeros([BC, MP, MP], dtype=tl.float32)
    for s in range(step0, step1):
        k = s * BK + tl.arange(0, BK)
        k_ok = k < KTOT
        q = k % Q
        t = k // Q
        hx = t % Hi
        nb = t // Hi
        w0 = q * (R * sw) - pw  # x column of (r=0, kx=0)
        # A [BC, MP, BK]: x[nb, hx, w0 + m_w, c]
        xw = w0[None, :] + m_w[:, None]  # [MP, BK]
        a_ok = (xw.to(tl.uint32) < Wi) & k_ok[None, :]
        a_off = ((nb * Hi + hx) * Wi)[None, :] + xw
        a_off = tl.where(a_ok, a_off, 0)
        a = tl.load(x + a_off[None, :, :] * G + c[:, None, None], mask=a_ok[None, :, :] & c_ok[:, None, None], other=0.0)
        # B [BC, BK, MP]: dy[nb, hx + ph - ky*dh, R*q + r', c]
        ho = (hx + ph)[:, None] - n_h[None, :]  # [BK, MP]
        wo = (q * R)[:, None] + rn[None, :]
        b_ok = (ho.to(tl.uint32) < Ho) & (wo < Wo) & n_ok[None, :] & k_ok[:, None]
        b_off = tl.where(b_ok, (nb[:, None] * Ho + ho) * Wo + wo, 0)
        b = tl.load(dy + b_off[None, :, :] * G + c[:, None, None], mask=b_ok[None, :, :] & c_ok[:, None, None], other=0.0)
        acc = tl.dot(a, b, acc)
    # dW[c, ky, kx] += acc[c, (r, kx), (r, ky)] for every r
    diag = (rm[:, None] == rn[None, :]) & m_ok[:, None] & n_ok[None, :]
    tap = kyn[None, :] * KX + kxm[:, None]
    off = c[:, None, None] * (KY * KX) + tl.where(diag, tap, 0)[None, :, :]
    tl.atomic_add(dw + off, acc, mask=diag[None, :, :] & c_ok[:, None, None], sem="relaxed")


def launch(x, dy, dw32, KY, KX, pad, dil, sw, R, BC, BK, ks, stages=3):
    N, Hi, Wi, G = x.shape
    _, Ho, Wo, _ = dy.shape
    Q = triton.cdiv(Wo, R)
    steps = triton.cdiv(N * Hi * Q, BK)
    ks_iters = triton.cdiv(steps, ks)
    grid = (triton.cdiv(G, BC) * triton.cdiv(steps, ks_iters),)
    dw_mma_kernel[grid](dy, x, dw32, N, G, Hi, Wi, Ho, Wo, KY, KX, pad[0], pad[1], sw, dil[0], dil[1], Q, ks_iters,
                        R=R, BC=BC, BK=BK, MP=16, num_warps=4, num_stages=stages)


def launch_window(x, dy, dw32, KY, KX, pad, ks, stride=1, cfg=None):
    """The product's window kernel (skwgrad.aot.kernels.depthwise), atomic into an fp32 dW;
    ``cfg`` = (mode, BC, BP, warps), default the shipped one (sweep.DWCONV_WINDOW, 16 channels, 4 warps)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from skwgrad.abi.arch import get_arch
    from skwgrad.abi.conv import parse_problem
    from skwgrad.abi.kernargs import declaration
    from skwgrad.abi.launch import dwconv_geometry
    from skwgrad.aot.kernels import depthwise
    from skwgrad.aot.sweep import DWCONV_WINDOW, _dwconv_spec

    if cfg is None:
        mode, bp = DWCONV_WINDOW[KX]
        cfg = (mode, 16, bp, 4)
    mode, bc, bp, warps = cfg
    spec = _dwconv_spec("atomic", "bf16", "fp32", KX, (bc, bp, warps), vec=8, mode=mode)
    consts = depthwise.constexprs(spec, get_arch("sm_90"))
    N, Hi, Wi, G = x.shape
    # grid, split and every scalar kernarg from the product's geometry (skwgrad.abi.launch), not re-derived
    problem = parse_problem(f"n={N},c={G},k={G},g={G},h={Hi},w={Wi},y={KY},x={KX},padding={pad[0]},stride={stride},dtype=bf16,dw_dtype=fp32")
    geo = dwconv_geometry(problem, "atomic", bc=bc, taps=KX, br=bp, ks_count=ks, mode=mode)
    given = {"dy": dy, "x": x, "dw": dw32, "ws_ptr": dw32, "ws_bytes": 0}  # atomic: no workspace, ws_* unused
    args = [geo.scalars[n] if n in geo.scalars else given[n] for n in declaration("dwconv", "atomic").source_names]
    depthwise.dwconv_wgrad[(geo.grid,)](*args, num_warps=warps, num_stages=1, **consts)


def reference(x, dy, KY, KX, pad, dil, sw, sh=1):
    N, Hi, Wi, G = x.shape
    xt = x.permute(0, 3, 1, 2).double()
    dyt = dy.permute(0, 3, 1, 2).double()
    w = torch.zeros(G, 1, KY, KX, dtype=torch.float64, device=x.device)
    _, gw, _ = torch.ops.aten.convolution_backward(dyt, xt, w, None, (sh, sw), pad, dil, False, (0, 0), G, [False, True, False])
    return gw.reshape(G, KY, KX)


def make(N, G, H, W, KY, KX, pad, dil, sw, dtype, dev, sh=1):
    x = torch.randn(N, H, W, G, dtype=dtype, device=dev)
    Ho = (H + 2 * pad[0] - dil[0] * (KY - 1) - 1) // sh + 1
    Wo = (W + 2 * pad[1] - dil[1] * (KX - 1) - 1) // sw + 1
    dy = torch.randn(N, Ho, Wo, G, dtype=dtype, device=dev)
    return x, dy


def rel(a, b):
    return float((a.double() - b).norm() / b.norm())


def check():
    dev = "cpu"
    for (N, G, H, W, KY, KX, pad, dil, sw, R, BC, BK) in [
        (2, 16, 6, 7, 3, 3, (1, 1), (1, 1), 1, 5, 16, 16),
        (1, 24, 9, 9, 5, 5, (2, 2), (1, 1), 1, 3, 16, 32),
        (2, 8, 10, 11, 7, 7, (3, 3), (1, 1), 1, 2, 8, 16),
        (1, 16, 8, 9, 3, 3, (2, 2), (2, 2), 1, 5, 16, 16),
        (1, 16, 8, 9, 3, 3, (1, 1), (1, 1), 2, 5, 16, 16),
    ]:
        x, dy = make(N, G, H, W, KY, KX, pad, dil, sw, torch.float32, dev)
        x, dy = x.to(torch.bfloat16).float(), dy.to(torch.bfloat16).float()
        ref = reference(x, dy, KY, KX, pad, dil, sw)
        for ks in (1, 3):
            out = torch.full((G, KY, KX), 0.0, dtype=torch.float32)
            launch(x, dy, out, KY, KX, pad, dil, sw, R, BC, BK, ks)
            e = rel(out, ref)
            print(N, G, H, W, KY, KX, pad, dil, sw, "ks", ks, "rel", e)
            assert e < 1e-5, e
        if dil == (1, 1) and sw == 1 and KX in (3, 5, 7):
            out = torch.zeros((G, KY, KX), dtype=torch.float32)
            launch_window(x, dy, out, KY, KX, pad, 2)
            e = rel(out, ref)
            print("   window rel", e)
            assert e < 1e-5, e


def bench(args):
    dev = "cuda"
    torch.backends.cudnn.benchmark = True
    shapes = [l.split() for l in SHAPES.strip().splitlines()]
    rows = []
    for name, N, G, H, KY, s, dtype in shapes:
        N, G, H, KY, s = int(N), int(G), int(H), int(KY), int(s)
        KX, pad, dil = KY, (KY // 2, KY // 2), (1, 1)
        if s != 1:
            continue
        dt = dict(bf16=torch.bfloat16, fp16=torch.float16)[dtype]
        x, dy = make(N, G, H, H, KY, KX, pad, dil, s, dt, dev)
        ref = reference(x, dy, KY, KX, pad, dil, s)
        # cuDNN
        xt = x.permute(0, 3, 1, 2)
        dyt = dy.permute(0, 3, 1, 2)
        w = torch.empty(G, 1, KY, KX, dtype=dt, device=dev).to(memory_format=torch.channels_last)

        def cud():
            return torch.ops.aten.convolution_backward(dyt, xt, w, None, (s, s), pad, dil, False, (0, 0), G, [False, True, False])[1]

        cu = timeit(cud)
        R = 16 // KX
        out = torch.empty(G, KY, KX, dtype=torch.float32, device=dev)
        best = None
        res = []
        win = None
        for per_sm in (1, 2, 4, 8, 16):
            ks = max(1, per_sm * 132 // (triton.cdiv(G, 16) * KY))
            try:
                out.zero_()
                launch_window(x, dy, out, KY, KX, pad, ks)
                torch.cuda.synchronize()
                e = rel(out, ref)
                t = timeit(lambda: (out.zero_(), launch_window(x, dy, out, KY, KX, pad, ks)))
            except Exception as ex:  # noqa: BLE001
                print(name, "window", ks, "failed", repr(ex)[:300], flush=True)
                continue
            if e < 1e-2 and (win is None or t < win["us"]):
                win = dict(ks=ks, us=t, rel_err=e)
        for BC, BK, stages in ((16, 16, 4), (16, 16, 6), (16, 32, 3), (16, 32, 4), (32, 16, 4), (32, 32, 3)):
                steps = triton.cdiv(N * H * triton.cdiv(H, R), BK)
                for per_sm in (1, 2, 4, 8):
                    ks = max(1, min(steps, per_sm * 132 // max(1, triton.cdiv(G, BC))))
                    try:
                        out.fill_(float("nan"))  # poison, then the atomic kernel's zeroed dW
                        out.zero_()
                        launch(x, dy, out, KY, KX, pad, dil, s, R, BC, BK, ks, stages)
                        torch.cuda.synchronize()
                        e = rel(out, ref)
                        t = timeit(lambda: (out.zero_(), launch(x, dy, out, KY, KX, pad, dil, s, R, BC, BK, ks, stages)))
                    except Exception as ex:  # noqa: BLE001
                        print(name, BC, BK, ks, "failed", repr(ex)[:200], flush=True)
                        continue
                    res.append(dict(BC=BC, BK=BK, stages=stages, ks=ks, us=t, rel_err=e))
                    if e < 1e-2 and (best is None or t < best["us"]):
                        best = res[-1]
        gb = (x.numel() + dy.numel()) * x.element_size() / 1e9
        row = dict(name=name, cudnn_us=cu, best=best, ratio=cu / best["us"] if best else None, window=win,
                   window_ratio=cu / win["us"] if win else None,
                   roofline_us=gb / 4.3e3 * 1e6, all=res)
        print(name, "cudnn", round(cu, 1), "window", win, "best", best, "ratio", row["ratio"] and round(row["ratio"], 2), flush=True)
        rows.append(row)
    json.dump(dict(date=time.strftime("%Y-%m-%d"), device=torch.cuda.get_device_name(), rows=rows), open(args.out, "w"), indent=1)


def timeit(fn, reps=30, inner=10):
    """Median device time of one call: ``inner`` calls captured in one CUDA graph, each replay
    bracketed by events (the host's launch cost, ~50 us a Triton call, stays off the clock)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / inner)
    ts.sort()
    return ts[len(ts) // 2]


# name N G H K stride dtype (square, pad K//2, dilation 1)
SHAPES = """
dw7_96_56_n64 64 96 56 7 1 bf16
dw7_104_56_n8 8 104 56 7 1 bf16
dw7_384_14_n32 32 384 14 7 1 bf16
dw7_192_28_n32 32 192 28 7 1 bf16
dw7_768_7_n64 64 768 7 7 1 fp16
dw5_128_56_n8 8 128 56 5 1 fp16
dw5_240_28_n32 32 240 28 5 1 bf16
dw3_144_56_n32 32 144 56 3 1 bf16
dw3_256_28_n16 16 256 28 3 1 bf16
"""

# name N G H K stride dtype: the window configurations' rows
WIN_SHAPES = """
w7_96_56_n64 64 96 56 7 1 bf16
w7_384_14_n32 32 384 14 7 1 bf16
w7_192_28_n32 32 192 28 7 1 bf16
w7_768_7_n64 64 768 7 7 1 fp16
w7_104_56_n8 8 104 56 7 1 bf16
w7_256_28_n16 16 256 28 7 1 bf16
w7s2_160_56_n32 32 160 56 7 2 bf16
w5s2_240_28_n32 32 240 28 5 2 bf16
w3s2_144_112_n16 16 144 112 3 2 bf16
w3s2_384_28_n32 32 384 28 3 2 fp16
w5_240_28_n32 32 240 28 5 1 bf16
w5_128_56_n8 8 128 56 5 1 fp16
w3_144_56_n32 32 144 56 3 1 bf16
w3_256_28_n16 16 256 28 3 1 bf16
"""
WIN_CONFIGS = {  # (K, stride) -> [(mode, BC, BP, warps)], the shipped one first
    (7, 1): [("win7", 16, 32, 4), ("win7", 16, 32, 2), ("win7", 32, 32, 4), ("win7", 16, 64, 4)],
    (7, 2): [("win7s2", 16, 32, 4), ("win7s2", 16, 32, 2), ("win7s2", 32, 32, 4)],
    (5, 2): [("win7s2", 16, 32, 4), ("win7s2", 16, 32, 2), ("win7s2", 32, 32, 4)],
    (3, 2): [("win7r3s2", 16, 32, 4), ("win7r3s2", 16, 32, 2), ("win7r3s2", 32, 32, 4)],
    (5, 1): [("win7r5", 16, 16, 4), ("win7r5", 16, 16, 2)],
    (3, 1): [("win7r3", 16, 64, 4), ("win7r3", 16, 32, 2)],
}


def bench_window(args):
    """Window-kernel configurations (channels per thread, warps) against the shipped one and cuDNN."""
    dev = "cuda"
    torch.backends.cudnn.benchmark = True
    rows = []
    for line in WIN_SHAPES.strip().splitlines():
        name, N, G, H, K, s, dtype = line.split()
        N, G, H, K, s = int(N), int(G), int(H), int(K), int(s)
        pad, dil = (K // 2, K // 2), (1, 1)
        dt = dict(bf16=torch.bfloat16, fp16=torch.float16)[dtype]
        x, dy = make(N, G, H, H, K, K, pad, dil, s, dt, dev, sh=s)
        ref = reference(x, dy, K, K, pad, dil, s, sh=s)
        xt, dyt = x.permute(0, 3, 1, 2), dy.permute(0, 3, 1, 2)
        w = torch.empty(G, 1, K, K, dtype=dt, device=dev).to(memory_format=torch.channels_last)
        cu = timeit(lambda: torch.ops.aten.convolution_backward(dyt, xt, w, None, (s, s), pad, dil, False, (0, 0), G, [False, True, False])[1])
        out = torch.empty(G, K, K, dtype=torch.float32, device=dev)
        res = []
        for cfg in WIN_CONFIGS[(K, s)]:
            mode, bc, bp, warps = cfg
            tr = 3 if "r3" in mode else 5 if "r5" in mode else 1
            best = None
            for per_sm in (1, 2, 4, 8, 16):
                ks = max(1, per_sm * 132 // (triton.cdiv(G, bc) * triton.cdiv(K, tr)))
                try:
                    out.fill_(float("nan"))  # poison, then the atomic kernel's zeroed dW
                    out.zero_()
                    launch_window(x, dy, out, K, K, pad, ks, s, cfg)
                    torch.cuda.synchronize()
                    e = rel(out, ref)
                    t = timeit(lambda: (out.zero_(), launch_window(x, dy, out, K, K, pad, ks, s, cfg)))
                except Exception as ex:  # noqa: BLE001
                    print(name, cfg, ks, "failed", repr(ex)[:300], flush=True)
                    continue
                ok = e < 1e-4
                if ok and (best is None or t < best["us"]):
                    best = dict(ks=ks, us=t, rel_err=e)
                if not ok:
                    print(name, cfg, ks, "WRONG rel", e, flush=True)
            res.append(dict(cfg=list(cfg), best=best))
        base = res[0]["best"]["us"] if res and res[0]["best"] else None
        row = dict(name=name, cudnn_us=cu, configs=res, shipped_us=base)
        print(name, "cudnn", round(cu, 1), " ".join(f"{c['cfg']}:{c['best'] and round(c['best']['us'], 1)}" for c in res), flush=True)
        rows.append(row)
    json.dump(dict(date=time.strftime("%Y-%m-%d"), device=torch.cuda.get_device_name(), rows=rows), open(args.out, "w"), indent=1)


def bench_ks(args):
    """Every split degree (1-24 CTAs per SM, deduplicated by the launch they resolve to) of the 7x7
    stride-1 window kernel at 16 and 32 channels per CTA, on the rows of ``--csv`` files: the data a
    split rule is judged on (the product's rule is evaluated offline from these rows)."""
    import csv

    dev = "cuda"
    torch.backends.cudnn.benchmark = True
    rows = []
    for path in args.csv:
        for r in csv.DictReader(open(path)):
            N, G, H, K = int(r["n"]), int(r["groups"]), int(r["h"]), int(r["y"])
            pad, dil = (K // 2, K // 2), (1, 1)
            dt = dict(bf16=torch.bfloat16, fp16=torch.float16)[r["dtype"]]
            x, dy = make(N, G, H, H, K, K, pad, dil, 1, dt, dev)
            ref = reference(x, dy, K, K, pad, dil, 1)
            xt, dyt = x.permute(0, 3, 1, 2), dy.permute(0, 3, 1, 2)
            w = torch.empty(G, 1, K, K, dtype=dt, device=dev).to(memory_format=torch.channels_last)
            cu = timeit(lambda: torch.ops.aten.convolution_backward(dyt, xt, w, None, (1, 1), pad, dil, False, (0, 0), G, [False, True, False])[1])
            out = torch.empty(G, K, K, dtype=torch.float32, device=dev)
            Wo = H
            steps = triton.cdiv(N * H * triton.cdiv(Wo, 7), 32)
            res = []
            for bc in (16, 32):
                cfg = ("win7", bc, 32, 4)
                tiles = triton.cdiv(G, bc) * K
                seen = set()
                for per_sm in (1, 2, 3, 4, 6, 8, 12, 16, 24):
                    ks = max(1, min(steps, round(per_sm * 132 / tiles)))
                    iters = triton.cdiv(steps, ks)
                    if iters in seen:
                        continue
                    seen.add(iters)
                    out.fill_(float("nan"))  # poison, then the atomic kernel's zeroed dW
                    out.zero_()
                    launch_window(x, dy, out, K, K, pad, ks, 1, cfg)
                    torch.cuda.synchronize()
                    e = rel(out, ref)
                    t = timeit(lambda: (out.zero_(), launch_window(x, dy, out, K, K, pad, ks, 1, cfg)))
                    res.append(dict(bc=bc, ks=ks, iters=iters, splits=triton.cdiv(steps, iters), us=t, rel_err=e, ok=e < 1e-4))
            rows.append(dict(name=r["name"], problem=r, cudnn_us=cu, steps=steps, launches=res))
            best = {bc: min((q for q in res if q["bc"] == bc and q["ok"]), key=lambda q: q["us"]) for bc in (16, 32)}
            print(r["name"], "cudnn", round(cu, 1), {bc: (q["ks"], round(q["us"], 1)) for bc, q in best.items()},
                  "wrong" if not all(q["ok"] for q in res) else "", flush=True)
    json.dump(dict(date=time.strftime("%Y-%m-%d"), device=torch.cuda.get_device_name(), rows=rows), open(args.out, "w"), indent=1)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("cmd")
    p.add_argument("--out", default="dw_mma.json")
    p.add_argument("--csv", action="append", default=[])
    a = p.parse_args()
    {"check": lambda: check(), "bench": lambda: bench(a), "window": lambda: bench_window(a), "ks": lambda: bench_ks(a)}[a.cmd]()
