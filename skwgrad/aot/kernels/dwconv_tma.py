"""Depthwise 2-D wgrad on sm_90 from TMA row boxes, written in Gluon (family ``dwconv_tma``).

    dW[g, ky, kx] = sum over (n, ho, wo) of dy[n, ho, wo, g] * x[n, ho - p_h + ky, wo - p_w + kx, g]

Stride and dilation 1, square 3x3 or 5x5 filters, 16-bit inputs. A CTA owns BC channels; a step is
BH output rows x WT output columns of one image (``KernelSpec.dwconv_tma_boxes``). TMA lands, in a
ring of STAGES shared-memory slots filled STAGES - 1 steps ahead:
- dy as the 4-D ``[N, Ho, Wo, G]`` tensor: BH // DYB boxes ``[1, DYB, WT, BC]``;
- x as the 4-D ``[N, Hi, Wi, G]`` tensor: one box ``[1, DWCONV_TMA_X_ROWS, XW, BC]``, exactly the
  x rows of the step's outputs, from column wo0 - p_w.
Rows, columns and channels outside the tensors load as zeros, which is exactly the padding: the
loop has no masks and no address arithmetic. The boxes land unswizzled, so each is plain row-major
``[rows * cols, BC]``; a shared-memory view only slices at multiples of its length, so the window
of tap (ky, kx) is a gather along the rows, one vector load per thread at a compile-time offset.
Per output row and tap, each thread adds x * dy into that tap's fp32 accumulator ([WT, BC] in
registers, one FMA per product); the columns are summed once at the end and added with relaxed
atomics into dW (``atomic``, fp32 dW zeroed by the launcher) or the zeroed f32 replica at ws_ptr
(``workspace``: Stage-2 casts it into a 16-bit dW and zeroes it again). Split-K over the steps,
``ks_iters`` a split, split-major grid over ``cblocks`` channel blocks.

Measured as benchmarks/dw_tma_proto.py on the H200 (session 19): on depthwise layers of 256+
channels 1.06-1.27x the window kernels (10 of 10 rows), below 128 channels and at 57-112 px slower.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma
from triton.language.extra.cuda import gdc_wait

from skwgrad.abi.spec import DWCONV_TMA_X_ROWS

EPILOGUES = {"atomic": 0, "workspace": 1}
X_ROWS = gl.constexpr(DWCONV_TMA_X_ROWS)


@gluon.constexpr_function
def _tile_layout(WT, BC, num_warps):
    """[WT, BC] over the CTA: up to 8 channels (16 bytes) a thread, channels fastest."""
    vec = min(8, WT * BC // (32 * num_warps))
    tc = min(BC // vec, 32)
    return gl.BlockedLayout([1, vec], [32 // tc, tc], [num_warps, 1], [1, 0])


@gluon.jit
def _issue(dy_desc, x_desc, bar, dy_bufs, x_buf, dbase, step, c0, WS, BHB, pad_h, pad_w, BH: gl.constexpr):
    """TMA loads of step ``step`` (image n, row block hb, column block ws) into one ring slot."""
    DYB: gl.constexpr = dy_desc.block_type.shape[1]
    WT: gl.constexpr = dy_desc.block_type.shape[2]
    ws = step % WS
    q = step // WS
    hb = q % BHB
    n = q // BHB
    ho0 = hb * BH
    w0 = ws * WT
    mbarrier.expect(bar, (BH // DYB) * dy_desc.block_type.nbytes + x_desc.block_type.nbytes)
    for b in gl.static_range(BH // DYB):
        tma.async_load(dy_desc, [n, ho0 + b * DYB, w0, c0], bar, dy_bufs.index(dbase + b))
    tma.async_load(x_desc, [n, ho0 - pad_h, w0 - pad_w, c0], bar, x_buf)


@gluon.jit
def dwconv_tma(
    dy_desc, x_desc, dw, ws_ptr, G, TAPS, pad_h, pad_w, WS, BHB, total_steps, ks_iters, cblocks,
    K: gl.constexpr, STAGES: gl.constexpr, EPILOGUE: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    DYB: gl.constexpr = dy_desc.block_type.shape[1]
    WT: gl.constexpr = dy_desc.block_type.shape[2]
    BC: gl.constexpr = dy_desc.block_type.shape[3]
    XW: gl.constexpr = x_desc.block_type.shape[2]
    BH: gl.constexpr = X_ROWS - (K - 1)
    NDY: gl.constexpr = BH // DYB
    dtype: gl.constexpr = dy_desc.dtype
    L: gl.constexpr = _tile_layout(WT, BC, num_warps)
    PLAIN: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])  # the boxes' unswizzled row-major view

    pid = gl.program_id(0)
    cb = pid % cblocks
    split = pid // cblocks
    c0 = cb * BC
    it0 = split * ks_iters
    n_it = gl.minimum(ks_iters, total_steps - it0)

    dy_bufs = gl.allocate_shared_memory(dtype, [STAGES * NDY, 1, DYB, WT, BC], dy_desc.layout)
    x_bufs = gl.allocate_shared_memory(dtype, [STAGES, 1, X_ROWS, XW, BC], x_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for q in gl.static_range(STAGES):
        mbarrier.init(bars.index(q), count=1)
    for q in gl.static_range(STAGES - 1):
        if q < n_it:
            _issue(dy_desc, x_desc, bars.index(q), dy_bufs, x_bufs.index(q), q * NDY, it0 + q, c0, WS, BHB, pad_h, pad_w, BH)

    cols = gl.arange(0, WT, layout=gl.SliceLayout(1, L))[:, None] + gl.zeros([WT, BC], gl.int32, layout=L)
    acc = ()
    for t in gl.static_range(K * K):
        acc = acc + (gl.zeros([WT, BC], gl.float32, layout=L),)
    for i in range(n_it):
        j = i + STAGES - 1
        if j < n_it:  # the slot of step i - 1: every warp left it behind the barrier that ended i - 1
            sj = j % STAGES
            _issue(dy_desc, x_desc, bars.index(sj), dy_bufs, x_bufs.index(sj), sj * NDY, it0 + j, c0, WS, BHB, pad_h, pad_w, BH)
        s = i % STAGES
        mbarrier.wait(bars.index(s), (i // STAGES) & 1)
        xb = x_bufs.index(s).reinterpret(shape=[X_ROWS * XW, BC], layout=PLAIN)
        for r in gl.static_range(BH):
            dyb = dy_bufs.index(s * NDY + r // DYB).reinterpret(shape=[DYB * WT, BC], layout=PLAIN)
            d = dyb.slice((r % DYB) * WT, WT, 0).load(L).to(gl.float32)
            nacc = ()
            for ky in gl.static_range(K):
                for kx in gl.static_range(K):
                    xv = xb.gather(cols + ((r + ky) * XW + kx), 0).to(gl.float32)
                    nacc = nacc + (acc[ky * K + kx] + xv * d,)
            acc = nacc
        gl.barrier()
    for q in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(q))
    offs = c0 + gl.arange(0, BC, layout=gl.SliceLayout(0, L))
    if EPILOGUE == 0:  # atomic: launched while dW's memset runs (abi.spec.dw_zeroed_before_launch)
        gdc_wait()
    for t in gl.static_range(K * K):
        v = gl.sum(acc[t], axis=0)
        if EPILOGUE == 0:
            gl.atomic_add(dw + offs * TAPS + t, v, mask=offs < G, sem="relaxed")
        else:
            gl.atomic_add(ws_ptr + offs * TAPS + t, v, mask=offs < G, sem="relaxed")


def descriptor_types(spec) -> dict[str, str]:
    """The Gluon signature types of the two descriptor parameters of ``spec``'s kernel."""
    _, dyb, xw = spec.dwconv_tma_boxes
    layout = "NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=4)"
    return {
        "dy_desc": f"tensordesc<{spec.dtype}[1,{dyb},{spec.bk},{spec.bm}],{layout}>",
        "x_desc": f"tensordesc<{spec.dtype}[1,{DWCONV_TMA_X_ROWS},{xw},{spec.bm}],{layout}>",
    }


def constexprs(spec) -> dict:
    return {"K": spec.bn, "STAGES": spec.num_stages, "EPILOGUE": EPILOGUES[spec.variant], "num_warps": spec.num_warps}
