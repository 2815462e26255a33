"""Depthwise wgrad that walks down the rows and keeps x in registers (issue 11, exploration): JIT on the H200.

    dW[g, ky, kx] = sum over (n, ho, wo) of dy[n, ho, wo, g] * x[n, ho - p_h + ky, wo - p_w + kx, g]

Why: the product's window kernel (``skwgrad/aot/kernels/depthwise.py``, ``_dwconv_win``) walks the
strips of its split in (n, ho, column) order, BP strips a step, and reloads every x row a strip's
taps read: at 3x3 each x vector is loaded, converted and used 3 * BW / (BW + 2) ~ 2.3 times, and on
large planes the kernel is L2-bound (H200 run B8: 92% L2 throughput, 27% L1 hits). Here each
thread owns one strip of BW output columns of one image and walks *down* its rows (stride and
dilation 1): the x rows a row's taps read are the KY rows of a sliding window, so per output row
one new x row is loaded, and each x vector is used BW * KX * KY / (BW + KX - 1) times (3x3, BW 4:
6). Column masks and the per-strip bases are computed once per CTA; a row costs a pointer step.
A CTA owns BC channels x BP column strips (n, wb) x a range of output rows (its split). Epilogue:
the strips summed, one relaxed fp32 atomic add per (channel, tap) into dW (zeroed first).

    python3 benchmarks/dw_vert_proto.py --corpus F.csv [--corpus ...] --out R.json   # H200; SKWGRAD_CACHE for auto

Measured (H200 runs F2, F3, session 27): on 3x3 layers of 48 px or more the best configuration ran
1.048x auto's launch (geomean of 10 rows, faster on 6: 1.13-1.23x at 55-56 px, 0.90x at 112 px and
32 channels), on smaller planes 0.919x (17 rows); 5x5 spills; 7x7 (F3 ran it by mistake) 40-60x slower.
Per 2-D depthwise row (3x3 and 5x5) at stride 1 and dilation 1: every configuration at three split degrees,
checked against float64 (torch, on the GPU), then auto (``skwgrad.wgrad``, the shipped cache) and
cuDNN, each timed the same way: a CUDA graph of REPS calls (the proto: dW memset + kernel),
replayed, device events, median per call. Nothing here is product code.
"""

from __future__ import annotations

import math

import proto_harness as H  # first: it sets up the path
import triton
import triton.language as tl


@triton.jit
def dw_vert(x, dy, dw, N, G, Hi, Wi, Ho, Wo, pad_h, pad_w, rows_per_split,
            BC: tl.constexpr, BP: tl.constexpr, BW: tl.constexpr, KY: tl.constexpr, KX: tl.constexpr,
            VEC: tl.constexpr, UNROLL: tl.constexpr, PREFETCH: tl.constexpr = False):  # fmt: skip
    SPAN: tl.constexpr = BW + KX - 1
    WB = tl.cdiv(Wo, BW)
    COLS = N * WB
    cblocks = tl.cdiv(G, BC)
    colgroups = tl.cdiv(COLS, BP)
    pid = tl.program_id(0)
    cb = pid % cblocks
    rest = pid // cblocks
    cg = rest % colgroups
    split = rest // colgroups
    ho0 = split * rows_per_split
    ho1 = tl.minimum(ho0 + rows_per_split, Ho)
    offs_c = cb * BC + tl.arange(0, BC)
    c_ok = tl.max_constancy(offs_c < G, VEC)
    ch = tl.max_contiguous(tl.multiple_of(offs_c % G, VEC), VEC)
    col = cg * BP + tl.arange(0, BP)
    col_ok = col < COLS
    zero_p = tl.zeros([BP], dtype=tl.int32)
    wb = col % WB
    nb = col // WB
    wo0 = wb * BW
    w0 = wo0 - pad_w
    # per strip: the pixel index of (nb, row 0, first window column) in x and dy; masks, once
    x_pix0 = nb * Hi * Wi + w0
    dy_pix0 = nb * Ho * Wo + wo0
    xm = ()
    for cw in tl.static_range(SPAN):
        xm = xm + ((col_ok & ((w0 + cw).to(tl.uint32) < Wi))[:, None] & c_ok[None, :],)
    dm = ()
    for j in tl.static_range(BW):
        dm = dm + ((col_ok & (wo0 + j < Wo))[:, None] & c_ok[None, :],)
    # the window: rows 0 .. KY-2 of output row ho0's taps (x rows ho0 - pad_h + i)
    win = ()
    for i in tl.static_range(KY - 1):
        h = ho0 - pad_h + i
        row_ok = (col_ok & ((h + zero_p).to(tl.uint32) < Hi))[:, None]  # (a tensor: the interpreter's scalar compares misbehave)
        base = x_pix0 + h * Wi
        for cw in tl.static_range(SPAN):
            p = x + (tl.multiple_of((base + cw) * G, VEC)[:, None] + ch[None, :])
            win = win + (tl.load(p, mask=xm[cw] & row_ok, other=0.0).to(tl.float32),)
    acc = ()
    for t in tl.static_range(KY * KX):
        acc = acc + (tl.zeros([BP, BC], dtype=tl.float32),)
    # UNROLL = KY: the window's rotation is register renaming, not moves (sm_90 SASS, 3x3 c16p32w4v4:
    # 1.92 instructions a product against 2.31, but 214 registers against 138)
    # PREFETCH: the next row's x and dy vectors are loaded before this row's products, so a thread keeps
    # two rows of loads in flight (session 28: at 1-2 CTAs an SM the 56 px layers read 1.9 TB/s, which
    # is what ~6-12 KB in flight per SM gives at the H200's load latency)
    if PREFETCH:
        h = ho0 - pad_h + (KY - 1)
        go = ((ho0 + zero_p) < ho1)[:, None]
        row_ok = ((h + zero_p) < Hi)[:, None] & go
        base = x_pix0 + h * Wi
        nxt = ()
        for cw in tl.static_range(SPAN):
            p = x + (tl.multiple_of((base + cw) * G, VEC)[:, None] + ch[None, :])
            nxt = nxt + (tl.load(p, mask=xm[cw] & row_ok, other=0.0),)
        dbase = dy_pix0 + ho0 * Wo
        for j in tl.static_range(BW):
            p = dy + (tl.multiple_of((dbase + j) * G, VEC)[:, None] + ch[None, :])
            nxt = nxt + (tl.load(p, mask=dm[j] & go, other=0.0),)
    for ho in tl.range(ho0, ho1, loop_unroll_factor=UNROLL):
        if PREFETCH:
            new = ()
            for cw in tl.static_range(SPAN):
                new = new + (nxt[cw].to(tl.float32),)
            dv = ()
            for j in tl.static_range(BW):
                dv = dv + (nxt[SPAN + j].to(tl.float32),)
            h = ho + 1 - pad_h + (KY - 1)
            go = ((ho + 1 + zero_p) < ho1)[:, None]
            row_ok = ((h + zero_p) < Hi)[:, None] & go
            base = x_pix0 + h * Wi
            nxt = ()
            for cw in tl.static_range(SPAN):
                p = x + (tl.multiple_of((base + cw) * G, VEC)[:, None] + ch[None, :])
                nxt = nxt + (tl.load(p, mask=xm[cw] & row_ok, other=0.0),)
            dbase = dy_pix0 + (ho + 1) * Wo
            for j in tl.static_range(BW):
                p = dy + (tl.multiple_of((dbase + j) * G, VEC)[:, None] + ch[None, :])
                nxt = nxt + (tl.load(p, mask=dm[j] & go, other=0.0),)
        else:
            h = ho - pad_h + (KY - 1)  # the one new x row
            row_ok = (col_ok & ((h + zero_p) < Hi))[:, None]  # h >= 0: ho >= 0 and KY - 1 >= pad_h for the layers run here
            base = x_pix0 + h * Wi
            new = ()
            for cw in tl.static_range(SPAN):
                p = x + (tl.multiple_of((base + cw) * G, VEC)[:, None] + ch[None, :])
                new = new + (tl.load(p, mask=xm[cw] & row_ok, other=0.0).to(tl.float32),)
            dbase = dy_pix0 + ho * Wo
            dv = ()
            for j in tl.static_range(BW):
                p = dy + (tl.multiple_of((dbase + j) * G, VEC)[:, None] + ch[None, :])
                dv = dv + (tl.load(p, mask=dm[j], other=0.0).to(tl.float32),)
        nacc = ()
        for i in tl.static_range(KY):
            for kx in tl.static_range(KX):
                a = acc[i * KX + kx]
                for j in tl.static_range(BW):
                    if i < KY - 1:
                        a = a + dv[j] * win[i * SPAN + j + kx]
                    else:
                        a = a + dv[j] * new[j + kx]
                nacc = nacc + (a,)
        acc = nacc
        nwin = ()
        for q in tl.static_range(SPAN, (KY - 1) * SPAN):
            nwin = nwin + (win[q],)
        win = nwin + new
    for t in tl.static_range(KY * KX):
        s = tl.sum(acc[t], axis=0)
        tl.atomic_add(dw + offs_c * (KY * KX) + t, s, mask=c_ok, sem="relaxed")


# (BC, BP, BW, VEC, UNROLL): BC * BP = 128 threads * VEC channels a thread (4 warps); UNROLL 0: KY.
# sm_90 bf16 3x3 registers (Triton 3.9): 138, 214, 96, 147, 181, 250, 186
CONFIGS = {
    "c16p32w4v4": (16, 32, 4, 4, 1),
    "c16p32w4v4u": (16, 32, 4, 4, 0),
    "c16p32w2v4": (16, 32, 2, 4, 1),
    "c16p32w2v4u": (16, 32, 2, 4, 0),
    "c16p64w2v8": (16, 64, 2, 8, 1),
    "c16p64w2v8u": (16, 64, 2, 8, 0),
    "c16p32w7v4": (16, 32, 7, 4, 1),
    # session 28: the next row prefetched (6th field), and 16-byte vectors (VEC 8) for more bytes a load
    "c16p32w2v4p": (16, 32, 2, 4, 1, True),
    "c16p32w2v4up": (16, 32, 2, 4, 0, True),
    "c32p32w2v8p": (32, 32, 2, 8, 1, True),
    "c32p32w2v8": (32, 32, 2, 8, 1),
    "c16p64w2v8p": (16, 64, 2, 8, 1, True),
}


def launch_fn(torch, x, dy, dw, p, cfg, splits_ctas_per_cu, cus):
    bc, bp, bw, vec, unroll, *rest = CONFIGS[cfg]
    prefetch = bool(rest and rest[0])
    tiles = math.ceil(p.g / bc) * math.ceil(p.n * math.ceil(p.wo / bw) / bp)
    splits, rows = H.split_range(tiles, p.ho, splits_ctas_per_cu, cus)
    grid = (tiles * splits,)

    def fn():
        dw.zero_()
        dw_vert[grid](x, dy, dw, p.n, p.g, p.hi, p.wi, p.ho, p.wo, p.pad_lo[1], p.pad_lo[2], rows,
                      BC=bc, BP=bp, BW=bw, KY=p.y, KX=p.x, VEC=vec, UNROLL=unroll or p.y, PREFETCH=prefetch, num_warps=4)  # fmt: skip

    return fn, {"grid": grid[0], "splits": splits, "rows_per_split": rows}


def run_row(torch, p, name, cus, split_choices=(2, 4, 8), configs=tuple(CONFIGS)):
    dev = "cuda"
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[p.dtype]
    gen = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn(p.n, p.hi, p.wi, p.g, device=dev, dtype=dt, generator=gen)
    dy = torch.randn(p.n, p.ho, p.wo, p.g, device=dev, dtype=dt, generator=gen)
    xc, dyc = x.permute(0, 3, 1, 2), dy.permute(0, 3, 1, 2)  # channels-last NCHW views
    ref = torch.nn.grad.conv2d_weight(xc.double(), (p.g, 1, p.y, p.x), dyc.double(), stride=1, padding=(p.pad_lo[1], p.pad_lo[2]),
                                      groups=p.g).reshape(p.g, p.y * p.x)  # fmt: skip
    dw = torch.empty(p.g, p.y * p.x, device=dev, dtype=torch.float32)
    out = {"name": name, "problem": p.describe()}
    out["configs"] = H.time_configs(torch, dw, ref, configs, split_choices, lambda cfg, c: launch_fn(torch, x, dy, dw, p, cfg, c, cus))
    out.update(H.auto_and_cudnn(torch, p, xc, dyc, (p.g, 1, p.y, p.x), ref, lambda d: d.reshape(p.g, -1)))
    return H.best_of(out)


def applies(p) -> bool:
    return (p.is_depthwise and p.spatial_dims == 2 and p.dtype != "fp32" and p.stride[1:] == (1, 1)
            and p.dilation[1:] == (1, 1) and p.y - 1 >= p.pad_lo[1] and p.g % 8 == 0 and p.y <= 5)  # fmt: skip


def per_config_vs_auto(rows, configs) -> dict:
    """Per configuration: auto's time over the configuration's best split, geomean over the rows it ran."""
    def best(r, c):
        us = [v["us"] for k, v in r["configs"].items() if k.startswith(c + "_") and v.get("us")]
        return min(us) if us else None

    return {"per_config_vs_auto": {c: H.geo([r["auto_us"] / best(r, c) for r in rows if best(r, c)]) for c in configs}}


def main():
    H.main(__doc__, CONFIGS, triton.__version__, applies, run_row, extra_summary=per_config_vs_auto)


if __name__ == "__main__":
    main()
