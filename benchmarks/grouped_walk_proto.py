"""Grouped wgrad with few channels a group on the vector units, walking down the rows (issue 11, exploration).

    dW[k, ky, kx, j] = sum over (n, ho, wo) of dy[n, ho, wo, k] * x[n, ho - p_h + ky, wo - p_w + kx, g(k) * CPG + j]
    (g(k) = k // KPG: output channel k's group; CPG input and KPG output channels a group)

Why: at 2-4 channels a group the packed MMA kernels keep one block in GB of the tile's diagonal (GB = 16 at 4
channels: 15/16 of the matrix work is thrown away) and run at 1.0-1.4x cuDNN (H200 runs A4-A9, Y5), where the
useful products alone take 13-29 us at the H200's FMA peak on layers cuDNN runs in 77-132 us. This is the
row-walk depthwise kernel (``skwgrad/aot/kernels/depthwise.py``, ``dwconv_walk_wgrad``) with a thread owning
one *output* channel k of one strip of BW output columns and its group's CPG input channels as one vector
(CPG = 4 bf16: one 8-byte load, the KPG threads of a group loading the same bytes): per output row a thread
loads one new x row (BW + KS - 1 vectors) and BW dy values, the KS - 1 older x rows staying in registers
(converted once), and makes BW * KS * KS * CPG products. Depthwise is CPG = KPG = 1.

    python3 benchmarks/grouped_walk_proto.py --corpus F.csv [--corpus ...] --out R.json   # H200; SKWGRAD_CACHE for auto

CPU only so far (session 29): interpreter numerics on 4 tiny layers (every configuration within 1e-5 of
float64); sm_90 bf16 SASS, 3x3 at 4 channels a group: one output channel a thread 148 registers and 216 FFMA in
447 loop instructions (48%), two 216-228 and 64%, two with strips of 4 columns 238 and 68%; no local memory
(5x5 spills: not run).

Per 2-D grouped row (C/g <= 4, stride and dilation 1, square filter): every configuration at three split
degrees, checked against float64 (torch, on the GPU), then auto (``skwgrad.wgrad``, the shipped cache) and
cuDNN, each timed the same way (``graph_timing.graph_time``: dW memset + kernel for the prototype). Nothing
here is product code. ``--interpret-check`` runs the numerics on the CPU under Triton's interpreter (no GPU).
"""

from __future__ import annotations

import math

import proto_harness as H  # first: it sets up the path and, for --interpret-check, Triton's interpreter
import triton
import triton.language as tl


@triton.jit
def _row_loads(x, dy, ho, ho1, x_pix0, dy_pix0, pad_h, Hi, Wi, Wo, CT, KT, xch, kch, xm, dm, zero_p,
               SPAN: tl.constexpr, BW: tl.constexpr, KS: tl.constexpr, CPG: tl.constexpr, KV: tl.constexpr):  # fmt: skip
    """Output row ``ho``'s raw loads: the SPAN x vectors [BP, BQ, CPG] of the one x row its taps add to the window,
    then its BW dy vectors [BP, BQ, KV]; all 0 past the split's last row ``ho1``."""
    h = ho - pad_h + (KS - 1)
    go = (ho + zero_p) < ho1
    row_ok = ((h + zero_p).to(tl.uint32) < Hi) & go
    base = x_pix0 + h * Wi
    out = ()
    for cw in tl.static_range(SPAN):
        off = tl.multiple_of((base + cw) * CT, CPG)[:, None, None] + xch[None, :, :]
        out = out + (tl.load(x + off, mask=xm[cw] & row_ok[:, None, None], other=0.0),)
    dbase = dy_pix0 + ho * Wo
    for j in tl.static_range(BW):
        off = tl.multiple_of((dbase + j) * KT, KV)[:, None, None] + kch[None, :, :]
        out = out + (tl.load(dy + off, mask=dm[j] & go[:, None, None], other=0.0),)
    return out


# integers not specialized (as the product's kernels, compiled ahead of time): one compile per configuration
# and dtype on the device, not one per layer
@triton.jit(do_not_specialize=["N", "G", "Hi", "Wi", "Ho", "Wo", "pad_h", "pad_w", "rows_per_split"])
def grouped_walk(x, dy, dw, N, G, Hi, Wi, Ho, Wo, pad_h, pad_w, rows_per_split,
                 BK: tl.constexpr, BP: tl.constexpr, BW: tl.constexpr, KS: tl.constexpr,
                 CPG: tl.constexpr, KPG: tl.constexpr, KV: tl.constexpr):  # fmt: skip
    """KV (1 or 2, dividing KPG): output channels a thread, so KV of a group's threads share one x load."""
    SPAN: tl.constexpr = BW + KS - 1
    BQ: tl.constexpr = BK // KV
    KT = G * KPG  # output channels in all
    CT = G * CPG  # input channels in all
    WB = tl.cdiv(Wo, BW)
    kblocks = tl.cdiv(KT, BK)
    colgroups = tl.cdiv(N * WB, BP)
    pid = tl.program_id(0)
    kb = pid % kblocks
    rest = pid // kblocks
    cg = rest % colgroups
    split = rest // colgroups
    ho0 = split * rows_per_split
    ho1 = tl.minimum(ho0 + rows_per_split, Ho)
    # thread q of a strip owns output channels kb * BK + q * KV + v (v < KV: one group's, consecutive)
    offs_q = kb * BK + tl.arange(0, BQ) * KV
    q_ok = offs_q < KT
    vv = tl.arange(0, KV)
    kch = tl.max_contiguous(tl.multiple_of((offs_q % KT)[:, None] + vv[None, :], [KV, KV]), [1, KV])  # wrapped past KT, masked
    k_ok = q_ok[:, None] & (vv < KV)[None, :]
    jj = tl.arange(0, CPG)
    # x channels of (q, j): the group's j-th input channel; CPG consecutive, aligned
    xch = tl.max_contiguous(tl.multiple_of(((offs_q % KT) // KPG)[:, None] * CPG + jj[None, :], [1, CPG]), [1, CPG])
    col = cg * BP + tl.arange(0, BP)
    col_ok = col < N * WB
    zero_p = tl.zeros([BP], dtype=tl.int32)
    wo0 = (col % WB) * BW
    w0 = wo0 - pad_w
    x_pix0 = (col // WB) * Hi * Wi + w0
    dy_pix0 = (col // WB) * Ho * Wo + wo0
    kmask = q_ok[None, :, None] & (jj < CPG)[None, None, :]
    xm = ()
    for cw in tl.static_range(SPAN):
        xm = xm + ((col_ok & ((w0 + cw).to(tl.uint32) < Wi))[:, None, None] & kmask,)
    dm = ()
    for j in tl.static_range(BW):
        dm = dm + ((col_ok & (wo0 + j < Wo))[:, None, None] & k_ok[None, :, :],)
    # the window: the KS - 1 x rows above output row ho0's new one (rows outside x load 0)
    win = ()
    for i in tl.static_range(KS - 1):
        h = ho0 - pad_h + i
        row_ok = ((h + zero_p).to(tl.uint32) < Hi)[:, None, None]
        base = x_pix0 + h * Wi
        for cw in tl.static_range(SPAN):
            off = tl.multiple_of((base + cw) * CT, CPG)[:, None, None] + xch[None, :, :]
            win = win + (tl.load(x + off, mask=xm[cw] & row_ok, other=0.0).to(tl.float32),)
    nxt = _row_loads(x, dy, ho0, ho1, x_pix0, dy_pix0, pad_h, Hi, Wi, Wo, CT, KT, xch, kch, xm, dm, zero_p, SPAN, BW, KS, CPG, KV)
    acc = ()  # (v, tap) -> [BP, BQ, CPG]
    for t in tl.static_range(KV * KS * KS):
        acc = acc + (tl.zeros([BP, BQ, CPG], dtype=tl.float32),)
    for ho in tl.range(ho0, ho1, loop_unroll_factor=KS):
        new = ()
        for cw in tl.static_range(SPAN):
            new = new + (nxt[cw].to(tl.float32),)
        dv = ()  # (j, v) -> [BP, BQ, 1]
        for j in tl.static_range(BW):
            d = nxt[SPAN + j].to(tl.float32)
            if KV == 1:
                dv = dv + (d,)
            else:
                d0, d1 = tl.split(d)
                dv = dv + (d0[:, :, None], d1[:, :, None])
        nxt = _row_loads(x, dy, ho + 1, ho1, x_pix0, dy_pix0, pad_h, Hi, Wi, Wo, CT, KT, xch, kch, xm, dm, zero_p, SPAN, BW, KS, CPG, KV)
        nacc = ()
        for v in tl.static_range(KV):
            for ky in tl.static_range(KS):
                for kx in tl.static_range(KS):
                    a = acc[(v * KS + ky) * KS + kx]
                    for j in tl.static_range(BW):
                        if ky < KS - 1:
                            a = a + dv[j * KV + v] * win[ky * SPAN + j + kx]
                        else:
                            a = a + dv[j * KV + v] * new[j + kx]
                    nacc = nacc + (a,)
        acc = nacc
        nwin = ()
        for q in tl.static_range(SPAN, (KS - 1) * SPAN):
            nwin = nwin + (win[q],)
        win = nwin + new
    # dW[k, tap, j] (weight (K, C/g, KS, KS) in channels-last memory: (K, KS, KS, C/g))
    dw_ok = q_ok[:, None] & (jj < CPG)[None, :]
    for v in tl.static_range(KV):
        dw_k = (((offs_q + v) % KT) * (KS * KS * CPG))[:, None] + jj[None, :]
        for t in tl.static_range(KS * KS):
            s = tl.sum(acc[v * KS * KS + t], axis=0)
            tl.atomic_add(dw + dw_k + t * CPG, s, mask=dw_ok, sem="relaxed")


# (BK, BP, BW, KV): BK output channels x BP strips of BW columns a CTA, KV output channels a thread, 4 warps
# (BK * BP = 128 * KV: one (strip, channel group of KV) a thread)
CONFIGS = {
    "k32p4w2": (32, 4, 2, 1),
    "k16p8w2": (16, 8, 2, 1),
    "k32p4w4": (32, 4, 4, 1),
    "k64p4w2v2": (64, 4, 2, 2),
    "k32p8w2v2": (32, 8, 2, 2),
    "k64p4w4v2": (64, 4, 4, 2),
}


def launch_fn(x, dy, dw, p, cfg, splits_ctas_per_cu, cus):
    bk, bp, bw, kv = CONFIGS[cfg]
    tiles = math.ceil(p.k * p.g / bk) * math.ceil(p.n * math.ceil(p.wo / bw) / bp)
    splits, rows = H.split_range(tiles, p.ho, splits_ctas_per_cu, cus)
    grid = (tiles * splits,)

    def fn():
        dw.zero_()
        grouped_walk[grid](x, dy, dw, p.n, p.g, p.hi, p.wi, p.ho, p.wo, p.pad_lo[1], p.pad_lo[2], rows,
                           BK=bk, BP=bp, BW=bw, KS=p.y, CPG=p.c, KPG=p.k, KV=kv, num_warps=4)  # fmt: skip

    return fn, {"grid": grid[0], "splits": splits, "rows_per_split": rows}


def applies(p) -> bool:
    return (p.spatial_dims == 2 and p.g > 1 and not p.is_depthwise and p.c in (1, 2, 4) and p.k <= 8 and p.dtype != "fp32"
            and p.stride[1:] == (1, 1) and p.dilation[1:] == (1, 1) and p.y == p.x and p.pad_lo[1] <= p.y - 1)  # fmt: skip


def reference(torch, x, dy, p):
    """float64 dW as (K, KS*KS*CPG): the kernel's layout (``p.c``, ``p.k``: channels a group)."""
    xc, dyc = x.permute(0, 3, 1, 2), dy.permute(0, 3, 1, 2)
    ref = torch.nn.grad.conv2d_weight(xc.double(), (p.k * p.g, p.c, p.y, p.x), dyc.double(), stride=1,
                                      padding=(p.pad_lo[1], p.pad_lo[2]), groups=p.g)  # fmt: skip
    return ref.permute(0, 2, 3, 1).reshape(p.k * p.g, -1)


def run_row(torch, p, name, cus, split_choices=(2, 4, 8), configs=tuple(CONFIGS)):
    dev = "cuda"
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[p.dtype]
    gen = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn(p.n, p.hi, p.wi, p.c * p.g, device=dev, dtype=dt, generator=gen)
    dy = torch.randn(p.n, p.ho, p.wo, p.k * p.g, device=dev, dtype=dt, generator=gen)
    ref = reference(torch, x, dy, p)
    dw = torch.empty(p.k * p.g, p.y * p.x * p.c, device=dev, dtype=torch.float32)
    out = {"name": name, "problem": p.describe()}
    # KV output channels a thread must be one group's
    out["configs"] = H.time_configs(torch, dw, ref, configs, split_choices, lambda cfg, c: launch_fn(x, dy, dw, p, cfg, c, cus),
                                    usable=lambda cfg: p.k % CONFIGS[cfg][3] == 0)  # fmt: skip
    xc, dyc = x.permute(0, 3, 1, 2), dy.permute(0, 3, 1, 2)  # channels-last NCHW views
    out.update(H.auto_and_cudnn(torch, p, xc, dyc, (p.k * p.g, p.c, p.y, p.x), ref, lambda d: d.permute(0, 2, 3, 1).reshape(p.k * p.g, -1)))
    return H.best_of(out)


def interpret_check() -> None:
    """Numerics on the CPU (Triton's interpreter): every configuration on tiny grouped layers against float64."""
    import torch

    from skwgrad.abi.conv import parse_problem

    cases = [  # (n, c, k, g, h, w, ks, pad): PyTorch's totals
        (2, 8, 8, 2, 7, 6, 3, 1),  # 4 channels a group
        (1, 12, 24, 6, 5, 9, 3, 1),  # 2 in, 4 out a group
        (2, 16, 8, 4, 6, 6, 5, 2),  # 4 in, 2 out, 5x5
        (1, 4, 4, 4, 5, 5, 3, 0),  # depthwise through the same code, no padding
    ]
    worst = 0.0
    for n, c, k, g, h, w, ks, pad in cases:
        p = parse_problem(f"n={n},c={c},k={k},g={g},h={h},w={w},y={ks},x={ks},stride=1,padding={pad},dtype=bf16,dw_dtype=fp32")
        gen = torch.Generator().manual_seed(n * 1000 + c)
        x = torch.randn(p.n, p.hi, p.wi, c, generator=gen).to(torch.bfloat16)
        dy = torch.randn(p.n, p.ho, p.wo, k, generator=gen).to(torch.bfloat16)
        ref = reference(torch, x, dy, p)
        for cfg, (bk, bp, bw, kv) in CONFIGS.items():
            if p.k % kv:
                continue
            for splits in (1, 2):
                rows = math.ceil(p.ho / splits)
                grid = (math.ceil(k / bk) * math.ceil(p.n * math.ceil(p.wo / bw) / bp) * math.ceil(p.ho / rows),)
                dw = torch.zeros((k, ks * ks * p.c))
                grouped_walk[grid](x, dy, dw, p.n, p.g, p.hi, p.wi, p.ho, p.wo, p.pad_lo[1], p.pad_lo[2], rows,
                                   BK=bk, BP=bp, BW=bw, KS=ks, CPG=p.c, KPG=p.k, KV=kv, num_warps=4)  # fmt: skip
                err = ((dw.double() - ref).norm() / ref.norm()).item()
                worst = max(worst, err)
                print(f"{p.describe():70s} {cfg} splits {splits}: rel err {err:.2e}")
                assert err < 1e-5, (p.describe(), cfg, splits, err)
    print(f"interpreter numerics: all cases within 1e-5 (worst {worst:.2e})")


def main():
    H.main(__doc__, CONFIGS, triton.__version__, applies, run_row, interpret_check)


if __name__ == "__main__":
    main()
