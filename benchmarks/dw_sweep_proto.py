"""Depthwise wgrad for wide filters (5x5, 7x7) that sweeps along the output columns with one filter row a thread
(issue 11, exploration): JIT on the H200.

    dW[g, ky, kx] = sum over (n, ho, wo) of dy[n, ho, wo, g] * x[n, ho - p_h + ky, wo - p_w + kx, g]

Why: at 7x7 the product's window kernel spends 840 loop instructions on 392 products (sm_90 bf16: every x
vector reloaded and converted for each output row it serves, 1.6 uses a conversion) and the row-walk kernel
needs one channel a thread and 255 registers to hold 49 accumulators and six x rows. Here a thread owns one
*filter row* ky of one output row and a vector of VEC channels: a slot (r, ky) of the CTA's SLOTS reads x row
ho + r - p_h + ky, and sweeping along the columns it keeps the last KX - 1 x vectors of that row in registers,
so per output column it loads one new x vector and one dy vector (the KY slots of an output row load the same
dy bytes) and makes KX * VEC products: KX + KX - 1 vectors of registers, not KY * KX + (KY - 1) * span. The
next column's loads are issued before this column's products. A CTA owns BC channels x R output rows
(R = SLOTS // KY, the slots past R * KY idle) and sweeps every column of its split's images; the epilogue sums
the R rows of each ky and adds the CTA's KY * KX taps into dW (fp32, zeroed first).

    python3 benchmarks/dw_sweep_proto.py --corpus F.csv [--corpus ...] --out R.json   # H200; SKWGRAD_CACHE for auto
    python benchmarks/dw_sweep_proto.py --interpret-check                              # CPU: numerics only

CPU only so far (session 29): interpreter numerics on 4 tiny layers (every configuration within 1e-5 of float64);
sm_90 bf16 SASS of the column loop (7 columns unrolled): 7x7 at 4 channels a thread 128 registers, 196 FFMA in
390 instructions (the window kernel: 392 in 840), at 8 channels 246 registers, 392 in 684; no local memory. Each
load costs ~6 instructions of address, bound check and zero fill: what the timing has to beat.

Per 2-D depthwise row (stride and dilation 1, KY >= 5): every configuration at three split degrees, checked
against float64 (torch, on the GPU), then auto (``skwgrad.wgrad``, the shipped cache) and cuDNN, timed the same
way (``graph_timing.graph_time``; the prototype: dW memset + kernel). Nothing here is product code.
"""

from __future__ import annotations

import math

import proto_harness as H  # first: it sets up the path and, for --interpret-check, Triton's interpreter
import triton
import triton.language as tl


@triton.jit
def _col_loads(x, dy, n, ox, n1, xrow, xrow_ok, oy, row_ok, ch, c_ok, zi, pad_w, Hi, Wi, Ho, Wo, G,
               KX: tl.constexpr, VEC: tl.constexpr):  # fmt: skip
    """Output column ``ox`` of image ``n``'s raw loads: the one new x vector of each slot's row (column
    ox - pad_w + KX - 1) and the dy vector of each slot's output row; 0 past the image range or the row."""
    w = ox - pad_w + (KX - 1)
    live = (n + zi) < n1  # (tensors: the interpreter's scalar compares misbehave)
    xm = (xrow_ok & live & ((w + zi).to(tl.uint32) < Wi))[:, None] & c_ok[None, :]
    xo = tl.multiple_of(((n * Hi + xrow) * Wi + w) * G, VEC)
    xv = tl.load(x + xo[:, None] + ch[None, :], mask=xm, other=0.0)
    dm = (row_ok & live & ((ox + zi) < Wo))[:, None] & c_ok[None, :]
    do = tl.multiple_of(((n * Ho + oy) * Wo + ox) * G, VEC)
    dv = tl.load(dy + do[:, None] + ch[None, :], mask=dm, other=0.0)
    return xv, dv


# integers not specialized (as the product's kernels, compiled ahead of time): one compile per configuration
# and dtype on the device, not one per layer
@triton.jit(do_not_specialize=["N", "G", "Hi", "Wi", "Ho", "Wo", "pad_h", "pad_w", "imgs_per_split"])
def dw_sweep(x, dy, dw, N, G, Hi, Wi, Ho, Wo, pad_h, pad_w, imgs_per_split,
             BC: tl.constexpr, SLOTS: tl.constexpr, KY: tl.constexpr, KX: tl.constexpr, VEC: tl.constexpr):  # fmt: skip
    R: tl.constexpr = SLOTS // KY
    cblocks = tl.cdiv(G, BC)
    rblocks = tl.cdiv(Ho, R)
    pid = tl.program_id(0)
    cb = pid % cblocks
    rest = pid // cblocks
    rb = rest % rblocks
    split = rest // rblocks
    n0 = split * imgs_per_split
    n1 = tl.minimum(n0 + imgs_per_split, N)
    offs_c = cb * BC + tl.arange(0, BC)
    c_ok = tl.max_constancy(offs_c < G, VEC)
    ch = tl.max_contiguous(tl.multiple_of(offs_c % G, VEC), VEC)
    i = tl.arange(0, SLOTS)
    zi = i * 0
    ky = i % KY
    slot_ok = i < R * KY
    oy = tl.minimum(rb * R + i // KY, Ho - 1)  # clamped (and masked) so every address stays inside
    row_ok = slot_ok & (rb * R + i // KY < Ho)
    xrow = oy - pad_h + ky
    xrow_ok = row_ok & (xrow.to(tl.uint32) < Hi)
    xrow = tl.where(xrow_ok, xrow, 0)
    acc = ()
    for kx in tl.static_range(KX):
        acc = acc + (tl.zeros([SLOTS, BC], dtype=tl.float32),)
    for n in range(n0, n1):
        # the window: x columns -pad_w .. -pad_w + KX - 2 of each slot's row (output column 0's first KX - 1 taps)
        win = ()
        for kx in tl.static_range(KX - 1):
            w = kx - pad_w
            xm = (xrow_ok & ((w + zi).to(tl.uint32) < Wi))[:, None] & c_ok[None, :]
            xo = tl.multiple_of(((n * Hi + xrow) * Wi + w) * G, VEC)
            win = win + (tl.load(x + xo[:, None] + ch[None, :], mask=xm, other=0.0).to(tl.float32),)
        nx, nd = _col_loads(x, dy, n, 0, n1, xrow, xrow_ok, oy, row_ok, ch, c_ok, zi, pad_w, Hi, Wi, Ho, Wo, G, KX, VEC)
        for ox in tl.range(0, Wo, loop_unroll_factor=KX):
            new = nx.to(tl.float32)
            d = nd.to(tl.float32)
            nx, nd = _col_loads(x, dy, n, ox + 1, n1, xrow, xrow_ok, oy, row_ok, ch, c_ok, zi, pad_w, Hi, Wi, Ho, Wo, G, KX, VEC)
            nacc = ()
            for kx in tl.static_range(KX):
                if kx < KX - 1:
                    nacc = nacc + (acc[kx] + d * win[kx],)
                else:
                    nacc = nacc + (acc[kx] + d * new,)
            acc = nacc
            nwin = ()
            for kx in tl.static_range(1, KX - 1):
                nwin = nwin + (win[kx],)
            win = nwin + (new,)
    # the R rows of each filter row summed; dW[g, ky * KX + kx]
    for y in tl.static_range(KY):
        sel = (slot_ok & (ky == y))[:, None]
        for kx in tl.static_range(KX):
            s = tl.sum(tl.where(sel, acc[kx], 0.0), axis=0)
            tl.atomic_add(dw + offs_c * (KY * KX) + (y * KX + kx), s, mask=c_ok, sem="relaxed")


# (BC, SLOTS, VEC, warps): BC channels x SLOTS (output row, filter row) slots a CTA; SLOTS * BC = 32 * warps * VEC
CONFIGS = {
    "c32s16v4": (32, 16, 4, 4),
    "c16s32v4": (16, 32, 4, 4),
    "c64s16v4w8": (64, 16, 4, 8),
    "c16s16v2": (16, 16, 2, 4),
    "c64s16v8": (64, 16, 8, 4),  # 16-byte vectors: twice the products a conversion-free load
    "c32s32v8w8": (32, 32, 8, 4),
}


def launch_fn(x, dy, dw, p, cfg, splits_ctas_per_cu, cus):
    bc, slots, vec, warps = CONFIGS[cfg]
    r = slots // p.y
    tiles = math.ceil(p.g / bc) * math.ceil(p.ho / r)
    splits, ips = H.split_range(tiles, p.n, splits_ctas_per_cu, cus)
    grid = (tiles * splits,)

    def fn():
        dw.zero_()
        dw_sweep[grid](x, dy, dw, p.n, p.g, p.hi, p.wi, p.ho, p.wo, p.pad_lo[1], p.pad_lo[2], ips,
                       BC=bc, SLOTS=slots, KY=p.y, KX=p.x, VEC=vec, num_warps=warps)  # fmt: skip

    return fn, {"grid": grid[0], "splits": splits, "imgs_per_split": ips}


def applies(p) -> bool:
    return (p.is_depthwise and p.spatial_dims == 2 and p.dtype != "fp32" and p.stride[1:] == (1, 1)
            and p.dilation[1:] == (1, 1) and p.y >= 5 and p.g % 4 == 0)  # configurations of VEC 8 skip G % 8 != 0  # fmt: skip


def reference(torch, x, dy, p):
    """float64 dW as (G, KY * KX)."""
    xc, dyc = x.permute(0, 3, 1, 2), dy.permute(0, 3, 1, 2)
    ref = torch.nn.grad.conv2d_weight(xc.double(), (p.g, 1, p.y, p.x), dyc.double(), stride=1,
                                      padding=(p.pad_lo[1], p.pad_lo[2]), groups=p.g)  # fmt: skip
    return ref.reshape(p.g, p.y * p.x)


def run_row(torch, p, name, cus, split_choices=(2, 4, 8), configs=tuple(CONFIGS)):
    dev = "cuda"
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[p.dtype]
    gen = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn(p.n, p.hi, p.wi, p.g, device=dev, dtype=dt, generator=gen)
    dy = torch.randn(p.n, p.ho, p.wo, p.g, device=dev, dtype=dt, generator=gen)
    ref = reference(torch, x, dy, p)
    dw = torch.empty(p.g, p.y * p.x, device=dev, dtype=torch.float32)
    out = {"name": name, "problem": p.describe()}
    # G % VEC != 0: the vectors would be misaligned
    out["configs"] = H.time_configs(torch, dw, ref, configs, split_choices, lambda cfg, c: launch_fn(x, dy, dw, p, cfg, c, cus),
                                    usable=lambda cfg: p.g % CONFIGS[cfg][2] == 0)  # fmt: skip
    xc, dyc = x.permute(0, 3, 1, 2), dy.permute(0, 3, 1, 2)  # channels-last NCHW views
    out.update(H.auto_and_cudnn(torch, p, xc, dyc, (p.g, 1, p.y, p.x), ref, lambda d: d.reshape(p.g, -1)))
    return H.best_of(out)


def interpret_check() -> None:
    """Numerics on the CPU (Triton's interpreter): every configuration on tiny depthwise layers against float64."""
    import torch

    from skwgrad.abi.conv import parse_problem

    cases = ["n=2,c=8,k=8,g=8,h=9,w=6,y=7,x=7,stride=1,padding=3", "n=3,c=20,k=20,g=20,h=5,w=7,y=5,x=5,stride=1,padding=2",
             "n=1,c=4,k=4,g=4,h=8,w=8,y=5,x=5,stride=1,padding=1", "n=2,c=12,k=12,g=12,h=4,w=4,y=7,x=7,stride=1,padding=3"]  # fmt: skip
    worst = 0.0
    for text in cases:
        p = parse_problem(text + ",dtype=bf16,dw_dtype=fp32")
        gen = torch.Generator().manual_seed(p.g * 7 + p.n)
        x = torch.randn(p.n, p.hi, p.wi, p.g, generator=gen).to(torch.bfloat16)
        dy = torch.randn(p.n, p.ho, p.wo, p.g, generator=gen).to(torch.bfloat16)
        ref = reference(torch, x, dy, p)
        for cfg, (bc, slots, vec, warps) in CONFIGS.items():
            if p.g % vec:
                continue
            for ips in (1, 2):
                grid = (math.ceil(p.g / bc) * math.ceil(p.ho / (slots // p.y)) * math.ceil(p.n / ips),)
                dw = torch.zeros(p.g, p.y * p.x)
                dw_sweep[grid](x, dy, dw, p.n, p.g, p.hi, p.wi, p.ho, p.wo, p.pad_lo[1], p.pad_lo[2], ips,
                               BC=bc, SLOTS=slots, KY=p.y, KX=p.x, VEC=vec, num_warps=warps)  # fmt: skip
                err = ((dw.double() - ref).norm() / ref.norm()).item()
                worst = max(worst, err)
                print(f"{p.describe():70s} {cfg} images a split {ips}: rel err {err:.2e}")
                assert err < 1e-5, (p.describe(), cfg, ips, err)
    print(f"interpreter numerics: all cases within 1e-5 (worst {worst:.2e})")


def main():
    H.main(__doc__, CONFIGS, triton.__version__, applies, run_row, interpret_check)


if __name__ == "__main__":
    main()
