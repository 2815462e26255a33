"""Dense wgrad on Hopper from TMA im2col + wgmma, written in Gluon (issue 12, exploration).

    dW[k, ky, kx, c] = sum over rows r = (n, ho, wo) of dy[r, k] * x[n, ho*s - p + ky*d, wo*s - p + kx*d, c]

Per filter tap this is a plain GEMM: dW_tap (K x C) = dy^T (K x R) @ im2col_tap(x) (R x C), and
Hopper's TMA builds both operands with no address arithmetic in the loop:
- dy is the 2-D ``[R, K]`` matrix: a tiled box ``[BK, BM]`` of rows r0..r0+BK; the wgmma reads it
  transposed from shared memory (``permute``), as an MN-major A operand;
- x at one tap is TMA's im2col mode over the 4-D ``[N, H, W, C]`` tensor: BK consecutive output
  positions (crossing rows and images), BN channels, shifted by the tap; positions outside the
  image load as zero, which is exactly the padding; the traversal stride is the conv stride.
So a reduction tile is any BK consecutive rows, for any Ho / Wo, stride and dilation.

The loop is the classic Hopper pipeline in one warpgroup set: STAGES shared-memory slots, one
mbarrier each; iteration i waits for slot i, issues its wgmma asynchronously, waits until at most
that one wgmma is in flight (so the slot of i-1 is free) and refills that slot with i+STAGES-1.

Split-K over the rows (``ks_iters`` tiles per split), every split adding its tile into an fp32
``[K, TAPS, C]`` buffer with relaxed atomics (the mainloop harness's epilogue, so the numbers
compare with ``kernels.py``). Nothing here is product code: the point is to measure whether this
main loop reaches cuDNN on the large dense rows before any of it goes into ``skwgrad/``.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

# The layouts, the tile decomposition, the producer and MMA steps and the epilogue are the product's
# (skwgrad/aot/kernels/tma.py, which grew out of this file): runs R2/R3 measured the same code.
from skwgrad.aot.kernels.tma import _consumer as _ws_consumer
from skwgrad.aot.kernels.tma import _epilogue as _product_epilogue
from skwgrad.aot.kernels.tma import _mma_layout
from skwgrad.aot.kernels.tma import _producer as _ws_producer
from skwgrad.aot.kernels.tma import shared_layout


@gluon.jit
def _im2col_start(r0, HoWo, Wo, stride_h, stride_w, pad_h, pad_w):
    """The im2col coordinate [n, h, w] of reduction row r0 = (n, ho, wo): where its window starts
    (the product computes it inside its producer step, for 2-D and 3-D)."""
    n = r0 // HoWo
    rem = r0 - n * HoWo
    ho = rem // Wo
    wo = rem - ho * Wo
    return n, ho * stride_h - pad_h, wo * stride_w - pad_w


@gluon.jit
def _issue(dy_desc, x_desc, bar, a_buf, b_buf, it, m0, c0, off_h, off_w, HoWo, Wo,
           stride_h, stride_w, pad_h, pad_w, BK: gl.constexpr):  # fmt: skip
    """TMA loads of reduction tile ``it`` (rows it*BK ..) into one pipeline slot."""
    r0 = it * BK
    n, h, w = _im2col_start(r0, HoWo, Wo, stride_h, stride_w, pad_h, pad_w)
    mbarrier.expect(bar, dy_desc.block_type.nbytes + x_desc.block_type.nbytes)
    tma.async_load(dy_desc, [r0, m0], bar, a_buf)
    tma.async_load_im2col(x_desc, [n, h, w, c0], [off_h, off_w], bar, b_buf)


@gluon.jit
def _tile(m_tiles, tap_groups, c_tiles):
    """(split, output-channel block, tap group, input-channel block) of this CTA; split-major grid
    (the harness's kernels launch one CTA per split of a tile; the product walks instead)."""
    pid = gl.program_id(0)
    tiles = m_tiles * tap_groups * c_tiles
    tile = pid % tiles
    rest = tile % (tap_groups * c_tiles)
    return pid // tiles, tile // (tap_groups * c_tiles), rest // c_tiles, rest % c_tiles


@gluon.jit
def wgrad_im2col(
    dy_desc, x_desc, dw,
    HoWo, Wo, C, K, X, TAPS, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
    m_tiles, c_tiles, ks_iters, total_iters,
    STAGES: gl.constexpr, DIRECT: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    BK: gl.constexpr = dy_desc.block_type.shape[0]
    BM: gl.constexpr = dy_desc.block_type.shape[1]
    BN: gl.constexpr = x_desc.block_type.shape[1]
    dtype: gl.constexpr = dy_desc.dtype

    split, mt, tap, ct = _tile(m_tiles, TAPS, c_tiles)
    m0 = mt * BM
    c0 = ct * BN
    ky = tap // X
    kx = tap % X
    off_h = (ky * dil_h).to(gl.int16)
    off_w = (kx * dil_w).to(gl.int16)
    it0 = split * ks_iters
    n_it = gl.minimum(ks_iters, total_iters - it0)

    a_bufs = gl.allocate_shared_memory(dtype, [STAGES, BK, BM], dy_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES, BK, BN], x_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for q in gl.static_range(STAGES):
        mbarrier.init(bars.index(q), count=1)
    for q in gl.static_range(STAGES - 1):
        if q < n_it:
            _issue(dy_desc, x_desc, bars.index(q), a_bufs.index(q), b_bufs.index(q), it0 + q, m0, c0, off_h, off_w,
                   HoWo, Wo, stride_h, stride_w, pad_h, pad_w, BK)  # fmt: skip

    mma_layout: gl.constexpr = _mma_layout(BM, BN, num_warps)
    acc = gl.zeros([BM, BN], gl.float32, layout=mma_layout)
    for i in range(n_it):
        s = i % STAGES
        mbarrier.wait(bars.index(s), (i // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s).permute((1, 0)), b_bufs.index(s), acc, is_async=True)
        # at most this wgmma in flight: the one before it is done and its slot free to refill
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
        j = i + STAGES - 1
        if j < n_it:
            sj = j % STAGES
            _issue(dy_desc, x_desc, bars.index(sj), a_bufs.index(sj), b_bufs.index(sj), it0 + j, m0, c0, off_h, off_w,
                   HoWo, Wo, stride_h, stride_w, pad_h, pad_w, BK)  # fmt: skip
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    for q in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(q))

    _epilogue(acc, dw, m0, c0, tap, K, C, TAPS, DIRECT, BM, BN, BN, num_warps)


@gluon.jit
def _epilogue(acc, dw, m0, c0, t0, K, C, TAPS, DIRECT: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
              CB: gl.constexpr, num_warps: gl.constexpr):  # fmt: skip
    """dW stored in its dtype (DIRECT, one split) or added in fp32: the product's epilogue 0 / 1."""
    # one group: packed group 0, the group's channels are all of K and C
    _product_epilogue(acc, dw, 0, m0, c0, t0, K, C, K, C, TAPS, 0 if DIRECT else 1, BM, BN, CB, num_warps)


@gluon.jit
def wgrad_im2col_ws(
    dy_desc, x_desc, dw,
    HoWo, Wo, C, K, X, TAPS, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
    m_tiles, c_tiles, ks_iters, total_iters,
    STAGES: gl.constexpr, DIRECT: gl.constexpr, NT: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    """Warp-specialized: a producer warp feeds the ring through empty/ready mbarrier pairs, so the
    MMA warps never stop at a CTA barrier to issue TMA. A tile is BM output channels x NT taps x
    CB input channels (BN = NT * CB columns; NT > 1 shares one dy box among NT taps, for C <= CB).
    DIRECT: ks_count == 1, dW stored in its dtype; else fp32 atomics as in ``wgrad_im2col``."""
    BK: gl.constexpr = dy_desc.block_type.shape[0]
    BM: gl.constexpr = dy_desc.block_type.shape[1]
    CB: gl.constexpr = x_desc.block_type.shape[1]
    BN: gl.constexpr = NT * CB
    dtype: gl.constexpr = dy_desc.dtype
    split, mt, tg, ct = _tile(m_tiles, (TAPS + NT - 1) // NT, c_tiles)
    t0 = tg * NT
    m0 = mt * BM
    c0 = ct * CB
    it0 = split * ks_iters
    n_it = gl.minimum(ks_iters, total_iters - it0)

    a_bufs = gl.allocate_shared_memory(dtype, [STAGES, BK, BM], dy_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES, BK, BN], x_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for q in gl.static_range(STAGES):
        mbarrier.init(ready.index(q), count=1)
        mbarrier.init(empty.index(q), count=1)
        mbarrier.arrive(empty.index(q), count=1)  # every slot starts free
    acc = gl.warp_specialize(
        [
            (_ws_consumer, (a_bufs, b_bufs, ready, empty, n_it, STAGES, BM, BN, num_warps)),
            (_ws_producer, (dy_desc, x_desc, a_bufs, b_bufs, ready, empty, it0, n_it, m0, c0, t0, TAPS,
                            (HoWo, HoWo, Wo, TAPS, X, 1, stride_h, stride_w, 0, pad_h, pad_w, 1, dil_h, dil_w), STAGES, BK, NT, 2)),
        ],
        [1],
        [24],
    )  # fmt: skip
    for q in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(q))
        mbarrier.invalidate(empty.index(q))
    _epilogue(acc, dw, m0, c0, t0, K, C, TAPS, DIRECT, BM, BN, CB, num_warps)


# ---------------------------------------------------------------------------------------------
# AOT build (this machine, Triton 3.9): cubin + what the device runner needs to launch it
# ---------------------------------------------------------------------------------------------
def shared_layout_repr(block, dtype_bits=16):
    """The NVMMASharedLayout Gluon picks by default for a [rows, cols] tile (repr form)."""
    return shared_layout(block[0], block[1], dtype_bits)


def build(BM, BN, BK, stages, num_warps, dtype="bf16", ws=False, direct=False, nt=1):
    """Compile one configuration for sm_90; returns (cubin bytes, metadata dict, asm)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    dy_t = f"tensordesc<{dtype}[{BK},{BM}],{shared_layout_repr([BK, BM])}>"
    x_t = f"tensordesc_im2col<{dtype}[{BK},{BN}],input_rank=4,{shared_layout_repr([BK, BN])}>"
    sig = {"dy_desc": dy_t, "x_desc": x_t, "dw": f"*{dtype}" if direct else "*fp32"}
    for name in ("HoWo", "Wo", "C", "K", "X", "TAPS", "stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w",
                 "m_tiles", "c_tiles", "ks_iters", "total_iters"):  # fmt: skip
        sig[name] = "i32"
    consts = {"STAGES": stages, "DIRECT": direct, "num_warps": num_warps}
    if ws:
        consts["NT"] = nt  # BN is then the channels of one tap's im2col box
    for name in consts:
        sig[name] = "constexpr"
    # dW is 16-byte aligned (the launcher's allocations are)
    src = GluonASTSource(wgrad_im2col_ws if ws else wgrad_im2col, sig, constexprs=consts, attrs={(2,): [["tt.divisibility", 16]]})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps, "enable_fp_fusion": True})
    md = k.metadata
    meta = {
        "name": md.name,
        "config": dict(BM=BM, BN=BN * nt, CB=BN, NT=nt, BK=BK, stages=stages, num_warps=num_warps, dtype=dtype, ws=ws, direct=direct),
        "shared": md.shared,
        "num_warps": md.num_warps,
        "global_scratch_size": getattr(md, "global_scratch_size", 0),
        "tensordesc_meta": list(getattr(md, "tensordesc_meta", None) or []),
    }
    return bytes(k.asm["cubin"]), meta, k.asm
