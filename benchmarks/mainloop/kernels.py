"""Experimental main loops for the dense channels-last 2-D wgrad (stride 1, dilation 1).

    dW[k, ky, kx, c] = sum over (n, ho, wo) of dy[n, ho, wo, k] * x[n, ho - p + ky, wo - p + kx, c]

Self-contained (no skwgrad import): these kernels are levers measured against skwgrad's own
``wgrad_splitk``, not product code. Every kernel here is split-K with an fp32 atomic reduction
into a zeroed [K, Y, X, C] buffer (the driver casts it to bf16).

The reduction is walked in *patches*: a PN x PH x PW box of (n, ho, wo) output positions,
BK = PN * PH * PW rows of the GEMM. Both operands are TMA boxes of 4-D tensor descriptors:

    dy  [N, Ho, Wo, K]: box [PN, PH, PW, BM] at (n0, h0, w0, m0)
    x   [N, H,  W,  C]: box [PN, PH, PW, BN] at (n0, h0 - p + ky, w0 - p + kx, c0)

For one filter tap the x box is the dy box shifted by the tap; its out-of-bounds elements
(negative or past the image) load as zero, which is exactly the padding, and dy's
out-of-bounds rows (a patch grid that does not divide Ho/Wo) load as zero too, so nothing in
the loop computes an address or a mask: per iteration it is a few scalar coordinates, the
TMA issues, the barrier waits and the wgmmas.

TAPS = 1: a tile is (BM output channels, one tap, BN input channels).
TAPS = 3: a tile is (BM output channels, one filter row ky and its three taps kx = 0, 1, 2,
          BN input channels): one dy box serves three x boxes and three accumulators (the
          tap-major lever: dy is staged once per three MMAs instead of once per MMA).
ADDR = "carry": the patch coordinates are walked by carries (scalar adds and selects);
       "div": recomputed from the iteration index by (scalar) division.
WS: ``tl.range(..., warp_specialize=True)`` (Triton's automatic warp specialization).
"""

import triton
import triton.language as tl


@triton.jit
def _coords(it, n_pb, h_pb, w_pb, PN: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr):
    wb = it % w_pb
    t = it // w_pb
    hb = t % h_pb
    nb = t // h_pb
    return nb, hb, wb


@triton.jit
def _step(
    dy_desc, x_desc, x_desc1, x_desc2, it, nb, hb, wb, acc0, acc1, acc2, m0, c0, dh, dw_, Ho, Wo,
    n_pb, h_pb, w_pb,
    BM: tl.constexpr, BN: tl.constexpr, PN: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
    TAPS: tl.constexpr, ADDR: tl.constexpr, MODE: tl.constexpr,
):  # fmt: skip
    """One reduction patch: the TMA loads and the MMAs, then the next patch's coordinates."""
    BK: tl.constexpr = PN * PH * PW
    if ADDR == "div":
        nb, hb, wb = _coords(it, n_pb, h_pb, w_pb, PN, PH, PW)
    n_ = nb * PN
    h_ = hb * PH
    w_ = wb * PW
    if MODE == "4d":
        # dy^T, the wgmma A operand, from a 4-D box: Triton 3.9 stages it through registers
        # (ldmatrix.trans) whichever order the permute and the reshape come in.
        at = tl.reshape(tl.permute(dy_desc.load([n_, h_, w_, m0]), (3, 0, 1, 2)), [BM, BK])
    elif MODE == "dy2d" or MODE == "rowseg":
        # dy2d: the patch is whole output rows (PN == 1, PW == Wo, PH | Ho); rowseg: BK positions
        # of one output row (PN == PH == 1, PW == BK), spilling into the next row(s). Either way
        # its dy rows are one contiguous range of the matrix, and the transposed 2-D box stays in
        # shared memory. (rowseg: the spilled rows meet x zeros, see wgrad_tma.)
        at = tl.trans(dy_desc.load([(n_ * Ho + h_) * Wo + w_, m0]))
    else:  # gemm2d: nb counts BK-row blocks
        at = tl.trans(dy_desc.load([nb * BK, m0]))
    if MODE == "gemm2d":
        b0 = x_desc.load([nb * BK, c0])
    else:
        b0 = tl.reshape(x_desc.load([n_, h_ + dh, w_ + dw_, c0]), [BK, BN])
    acc0 = tl.dot(at, b0, acc0)
    if TAPS == 3:
        b1 = tl.reshape(x_desc1.load([n_, h_ + dh, w_ + dw_ + 1, c0]), [BK, BN])
        acc1 = tl.dot(at, b1, acc1)
        b2 = tl.reshape(x_desc2.load([n_, h_ + dh, w_ + dw_ + 2, c0]), [BK, BN])
        acc2 = tl.dot(at, b2, acc2)
    if ADDR == "carry":
        wb += 1
        cw = wb == w_pb
        wb = tl.where(cw, 0, wb)
        hb += cw.to(tl.int32)
        ch = hb == h_pb
        hb = tl.where(ch, 0, hb)
        nb += ch.to(tl.int32)
    return acc0, acc1, acc2, nb, hb, wb


@triton.jit
def _x_rowseg(x, N, H, W, C, Wo, dw, PN: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr, BN: tl.constexpr):
    w_ext = tl.minimum(W, Wo + dw)
    return tl.make_tensor_descriptor(
        x, shape=[N, H, w_ext, C], strides=[H * W * C, W * C, C, 1], block_shape=[PN, PH, PW, BN]
    )


@triton.jit
def _tile(K, C, Y, X, BM: tl.constexpr, BN: tl.constexpr, TAPS: tl.constexpr):
    pid = tl.program_id(0)
    m_tiles = tl.cdiv(K, BM)
    c_tiles = tl.cdiv(C, BN)
    tap_groups = (Y * X) // TAPS
    num_tiles = m_tiles * tap_groups * c_tiles
    tile = pid % num_tiles
    split = pid // num_tiles
    mt = tile // (tap_groups * c_tiles)
    rem = tile % (tap_groups * c_tiles)
    tg = rem // c_tiles
    ct = rem % c_tiles
    if TAPS == 1:
        ky = tg // X
        kx = tg % X
    else:  # TAPS == 3: one filter row (X == 3)
        ky = tg
        kx = 0
    return split, mt * BM, ct * BN, ky, kx


@triton.jit
def _mainloop(
    dy_desc, x_desc, x_desc1, x_desc2, dw32, split, m0, c0, ky, kx,
    C, K, Ho, Wo, Y, X, pad_h, pad_w, n_pb, h_pb, w_pb, ks_iters,
    BM: tl.constexpr, BN: tl.constexpr, PN: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
    TAPS: tl.constexpr, ADDR: tl.constexpr, WS: tl.constexpr, MODE: tl.constexpr,
):  # fmt: skip
    total = n_pb * h_pb * w_pb
    it0 = split * ks_iters
    it1 = tl.minimum(it0 + ks_iters, total)
    nb, hb, wb = _coords(it0, n_pb, h_pb, w_pb, PN, PH, PW)
    dh = ky - pad_h
    dw_ = kx - pad_w
    acc0 = tl.zeros([BM, BN], dtype=tl.float32)
    acc1 = tl.zeros([BM, BN], dtype=tl.float32)
    acc2 = tl.zeros([BM, BN], dtype=tl.float32)
    if WS:  # only here: a Triton without the keyword still runs every other variant
        for it in tl.range(it0, it1, warp_specialize=True):
            acc0, acc1, acc2, nb, hb, wb = _step(
                dy_desc, x_desc, x_desc1, x_desc2, it, nb, hb, wb, acc0, acc1, acc2, m0, c0, dh, dw_, Ho, Wo,
                n_pb, h_pb, w_pb,
                BM, BN, PN, PH, PW, TAPS, ADDR, MODE,
            )  # fmt: skip
    else:
        for it in range(it0, it1):
            acc0, acc1, acc2, nb, hb, wb = _step(
                dy_desc, x_desc, x_desc1, x_desc2, it, nb, hb, wb, acc0, acc1, acc2, m0, c0, dh, dw_, Ho, Wo,
                n_pb, h_pb, w_pb,
                BM, BN, PN, PH, PW, TAPS, ADDR, MODE,
            )  # fmt: skip
    offs_m = m0 + tl.arange(0, BM)
    offs_c = c0 + tl.arange(0, BN)
    mask = (offs_m < K)[:, None] & (offs_c < C)[None, :]
    ycx = Y * X * C
    base = dw32 + offs_m[:, None] * ycx + offs_c[None, :]
    tap = ky * X + kx
    tl.atomic_add(base + tap * C, acc0, mask=mask, sem="relaxed")
    if TAPS == 3:
        tl.atomic_add(base + (tap + 1) * C, acc1, mask=mask, sem="relaxed")
        tl.atomic_add(base + (tap + 2) * C, acc2, mask=mask, sem="relaxed")


@triton.jit
def wgrad_tma(
    dy, x, dw32,
    N, H, W, C, K, Ho, Wo, Y, X, pad_h, pad_w,
    n_pb, h_pb, w_pb, ks_iters,
    BM: tl.constexpr, BN: tl.constexpr, PN: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
    TAPS: tl.constexpr, ADDR: tl.constexpr, WS: tl.constexpr, MODE: tl.constexpr,
):  # fmt: skip
    """Descriptors made on the device (``tl.make_tensor_descriptor``: global scratch per CTA)."""
    BK: tl.constexpr = PN * PH * PW
    split, m0, c0, ky, kx = _tile(K, C, Y, X, BM, BN, TAPS)
    R = N * Ho * Wo
    if MODE == "4d":
        dy_desc = tl.make_tensor_descriptor(
            dy, shape=[N, Ho, Wo, K], strides=[Ho * Wo * K, Wo * K, K, 1], block_shape=[PN, PH, PW, BM]
        )
    else:  # dy2d, rowseg, gemm2d: dy as the plain [N*Ho*Wo, K] matrix
        dy_desc = tl.make_tensor_descriptor(dy, shape=[R, K], strides=[K, 1], block_shape=[BK, BM])
    if MODE == "gemm2d":  # 1x1, stride 1, no padding: x is the [N*H*W, C] matrix, same rows as dy
        x_desc = tl.make_tensor_descriptor(x, shape=[R, C], strides=[C, 1], block_shape=[BK, BN])
    elif MODE == "rowseg":
        # One descriptor per tap, its W extent clipped to Wo + dw (dw = kx - pad < 0): output
        # positions past the row end (the segment's spill into the next row, whose dy rows the
        # 2-D box carries along) then read x as zero instead of the row's last real pixels.
        x_desc = _x_rowseg(x, N, H, W, C, Wo, kx - pad_w, PN, PH, PW, BN)
    else:
        x_desc = tl.make_tensor_descriptor(
            x, shape=[N, H, W, C], strides=[H * W * C, W * C, C, 1], block_shape=[PN, PH, PW, BN]
        )
    if MODE == "rowseg" and TAPS == 3:
        x_desc1 = _x_rowseg(x, N, H, W, C, Wo, kx + 1 - pad_w, PN, PH, PW, BN)
        x_desc2 = _x_rowseg(x, N, H, W, C, Wo, kx + 2 - pad_w, PN, PH, PW, BN)
    else:
        x_desc1 = x_desc
        x_desc2 = x_desc
    _mainloop(
        dy_desc, x_desc, x_desc1, x_desc2, dw32, split, m0, c0, ky, kx,
        C, K, Ho, Wo, Y, X, pad_h, pad_w, n_pb, h_pb, w_pb, ks_iters,
        BM, BN, PN, PH, PW, TAPS, ADDR, WS, MODE,
    )  # fmt: skip


@triton.jit
def wgrad_tma_host(
    dy_desc, x_desc, dw32,
    N, H, W, C, K, Ho, Wo, Y, X, pad_h, pad_w,
    n_pb, h_pb, w_pb, ks_iters,
    BM: tl.constexpr, BN: tl.constexpr, PN: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
    TAPS: tl.constexpr, ADDR: tl.constexpr, WS: tl.constexpr, MODE: tl.constexpr,
):  # fmt: skip
    """Descriptors encoded on the host (``triton.tools.tensor_descriptor.TensorDescriptor``,
    passed as kernel parameters): no per-CTA descriptor creation and no global scratch."""
    split, m0, c0, ky, kx = _tile(K, C, Y, X, BM, BN, TAPS)
    _mainloop(
        dy_desc, x_desc, x_desc, x_desc, dw32, split, m0, c0, ky, kx,
        C, K, Ho, Wo, Y, X, pad_h, pad_w, n_pb, h_pb, w_pb, ks_iters,
        BM, BN, PN, PH, PW, TAPS, ADDR, WS, MODE,
    )  # fmt: skip
