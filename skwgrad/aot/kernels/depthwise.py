"""Depthwise convolution wgrad (``dwconv``): C == K == 1 per group, so G is the channel count.

x is ``N Di Hi Wi G`` (channels last), dy ``N Do Ho Wo G``, dW ``G Z Y X`` (the ``G K Z Y X C``
layout with K = C = 1). Per channel g and tap t = (kz, ky, kx):

    dW[g, t] = sum over rows r = (n, do, ho, wo) of dy[r, g] * x[n, do*s_d - p_d + kz*dil_d, ..., g]

There is no GEMM worth a matrix unit here (M = 1, N = taps per channel), so the kernel works on
the vector units: a CTA owns a block of BC channels and *all* taps, and accumulates
``acc[TAPS_P2, BC]`` in fp32. One step takes BR consecutive rows: a ``[BR, BC]`` block of dy and
the matching ``[BR, TAPS_P2, BC]`` gather of x, each a channel vector per (row, tap) (16-byte
loads when G is a multiple of the vector width), multiplied with dy broadcast over the taps and
accumulated per row (one FMA per product; the rows are summed once, at the end). Taps past Z*Y*X (TAPS_P2 is a power of two) are masked: they cost issue
slots but no memory traffic. The default layout Triton picks puts the channels and taps across
the threads and the BR rows inside each thread, so the row sum needs no cross-thread reduction
(as long as TAPS_P2 * BC / VEC covers the CTA's threads; else Triton reduces across threads, still exact).

Split-K: the N*Do*Ho*Wo reduction is cut into ``ks_count`` contiguous ranges of ``ks_iters``
steps (of BR rows); grid = ceil(G / BC) * ks_count, split-major (the CTAs of one split read
neighbouring channels of the same rows, so they meet in L2). Epilogues, as in ``wgrad``:
``direct`` (ks_count = 1, store in the dW dtype), ``atomic`` (fp32 dW, zeroed by the launcher),
``two_stage`` (split s stores its whole f32 replica s of dW, zeros included; the Stage-2 reduce
sums replicas in split order: deterministic), ``workspace`` (atomics into one f32 replica,
zeroed by the launcher, then the Stage-2 reduce over that one replica casts it: not
deterministic, but the Stage-2 loop is one replica long where two_stage's is ks_count long).

Window kernels (mode ``win<BW>[r<TR>][s<SW>][d<DL>]``, ``_dwconv_win``; stride SW and dilation
DL along W, 1 unless spelled, compile-time): each thread owns one channel vector of a strip of BW
output columns, loads the strip's dy vectors and each x vector of the window once (converted
once) and uses it for every (output column, tap) that reads it. At stride 2 the window of a
strip is the 2 * BW + KX - 2 contiguous x columns its outputs read (even taps on even columns,
odd on odd): the same registers as stride 1, 1.5-1.7x the x loads per product (L1/L2 hits).
sm_90 PTX (bf16, BC 16, 4 warps, no local memory): win7r3s2 186 registers (win7r3 180), 52 16-byte
loads and 504 FFMA per step for 3x3; win7s2 5x5 24 loads / 280 FFMA, 7x7 26 / 392.
Inner loop, sm_90 SASS (compile.py's own compile, nvdisasm), instructions per multiply-add
product per thread, bf16 16-byte vectors, 4 warps:
    taps-inner default c16t16r32 (3x3):  406 / 36   = 11.3   (64 FFMA, 16 LDG; 7 of 16 taps padding)
    win7r3 c16t3r64 (3x3, 3 tap rows):  1245 / 504  =  2.47  (504 FFMA, 34 LDG, 408 bf16->fp32)
    win7 c16t3r64 (3x3, 1 tap row):      532 / 168  =  3.17
    win7 c16t5r64 (5x5):                 686 / 280  =  2.45
    win7 c16t7r64 (7x7):                 840 / 392  =  2.14
    fp16 win7r3: 2.20, fp32 (v4, c16) win7r3: 2.30; no local memory (win14r3 spills: not used)
gfx942 (v_pk_fma_f32: 2 products per FMA instruction): taps-inner 11.9, win7r3 (c32) 2.95, 7x7 2.48.
Memory per product: x is read once per tap row from L1/L2 (BW + KX - 1 vectors per BW * KX
products), dy once per TR tap rows; HBM traffic stays x + dy + dW once (the CTAs of one split
share rows in L2). At ~2.5 instructions per product the H200's issue rate (132 SMs x 128 lanes x
1.98 GHz) gives MobileNetV2 dw3x3 144ch N=32 56x56 (130 M products) ~10 us, under its 13.4 us
memory roofline; ConvNeXt dw7x7 384ch N=32 14x14 (118 M products) ~8 us (roofline 2.2 us).

Row-walk kernels (family ``dwconv_walk``, ``dwconv_walk_wgrad``; 2-D, square filters at stride and
dilation 1): a CTA owns BC channels x BP strips of BW output columns and walks *down* the output rows
of its split. The x rows a row's taps read are a sliding window of KS rows, so per output row a thread
loads one new x row (BW + KS - 1 vectors) and its BW dy vectors, the KS - 1 older rows staying in
registers: each x vector is loaded once per CTA, where the window kernels load it again for every
output row that reads it (at 3x3 ~2.3 times, L2-bound on large planes: H200 run B8, 92% L2 throughput).
The next row's loads are issued before this row's products. sm_90 bf16 (BC 16, BP 32, BW 2, 4 warps):
152 registers, no local memory; gfx942/gfx950 (BP 64): 154/156 VGPRs, no scratch.

Addressing follows ``wgrad``: a row's x offset and a tap's offset add; each spatial bounds check
is one unsigned compare of ``row_base + tap`` (a negative index wraps to a huge one); rows past
the range and padding taps get a coordinate of OUTSIDE so the w check masks them; rows are
decomposed by division once per CTA and then walked by carries. Channels past G *wrap* (``% G``)
so every aligned group of VEC channels stays contiguous and aligned, and are masked.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from skwgrad.abi.spec import dw_zeroed_before_launch

from skwgrad.aot.kernels.wgrad import OUTSIDE


@triton.jit
def dwconv_wgrad(
    dy, x, dw,
    N, G, C, K, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
    stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
    ws_ptr, ws_bytes, ks_iters, ks_count,
    BC: tl.constexpr, BR: tl.constexpr, TAPS_P2: tl.constexpr, IS_3D: tl.constexpr, VEC: tl.constexpr,
    VARIANT: tl.constexpr, X_CACHE: tl.constexpr, TAPS_INNER: tl.constexpr,
    WIN: tl.constexpr = 0, WIN_ROWS: tl.constexpr = 1, WIN_SW: tl.constexpr = 1, WIN_DW: tl.constexpr = 1,
    WIN_EPI_SMEM: tl.constexpr = 16384, GDC_WAIT: tl.constexpr = False,
):  # fmt: skip
    if WIN > 0:
        _dwconv_win(
            dy, x, dw, N, G, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
            stride_d, stride_h, pad_d, pad_h, pad_w, dil_d, dil_h, ws_ptr, ks_iters,
            BC, BR, TAPS_P2, WIN, WIN_ROWS, WIN_SW, WIN_DW, IS_3D, VEC, VARIANT, X_CACHE, WIN_EPI_SMEM, GDC_WAIT,
        )  # fmt: skip
    else:
        TAPS = Z * Y * X
        ROWS = N * Do * Ho * Wo
        cblocks = tl.cdiv(G, BC)
        pid = tl.program_id(0)
        cb = pid % cblocks
        split = pid // cblocks
        step0 = split * ks_iters
        step1 = tl.minimum(step0 + ks_iters, tl.cdiv(ROWS, BR))
        # -- channels: G % VEC == 0 (check_problem), so each aligned VEC group is one contiguous vector
        offs_c = cb * BC + tl.arange(0, BC)
        c_ok = tl.max_constancy(offs_c < G, VEC)
        ch = tl.max_contiguous(tl.multiple_of(offs_c % G, VEC), VEC)
        # -- taps: (kz, ky, kx), once per CTA --------------------------------------------------------
        t = tl.arange(0, TAPS_P2)
        t_ok = t < TAPS
        kx = t % X
        ky = (t // X) % Y
        kz = t // (X * Y)
        tap_h = ky * dil_h
        tap_w = kx * dil_w
        tap_w_chk = tl.where(t_ok, tap_w, OUTSIDE)  # padding taps fail the w check
        tap_d = kz * dil_d
        zero_t = tl.zeros([TAPS_P2], dtype=tl.int32)
        tap_off = tl.multiple_of(tl.where(t_ok, ((tap_d * Hi + tap_h) * Wi + tap_w) * G, 0), VEC)
        # -- rows: decomposed once, then walked by carries ---------------------------------------------
        offs_r = step0 * BR + tl.arange(0, BR)
        wo = offs_r % Wo
        tq = offs_r // Wo
        ho = tq % Ho
        tq = tq // Ho
        do_ = tq % Do
        nb = tq // Do
        STEP_WO: tl.constexpr = BR
        step_wo = STEP_WO % Wo
        sq = STEP_WO // Wo
        step_ho = sq % Ho
        sq = sq // Ho
        step_do = sq % Do
        step_nb = sq // Do
        # One accumulator per row of the step: the main loop is then one FMA per product (a per-step
        # sum over the rows would cost a multiply and an add each); the rows are summed once, at the end.
        if TAPS_INNER:
            acc = tl.zeros([TAPS_P2, BR, BC], dtype=tl.float32)
        else:
            acc = tl.zeros([BR, TAPS_P2, BC], dtype=tl.float32)
        for _ in range(step0, step1):
            r_ok = offs_r < ROWS
            r = tl.minimum(offs_r, ROWS - 1)
            # dy block [BR, BC] (the rows are the flattened (n, do, ho, wo) index itself), addressed
            # as [BR, TAPS_P2, BC] with the taps broadcast: it then gets the x gather's layout, and each
            # thread reads its own copy from L1 instead of a layout conversion through shared memory
            # (a barrier per step).
            dy_row = tl.multiple_of(r * G, VEC)
            if TAPS_INNER:
                dy_off = (dy_row[None, :] + zero_t[:, None])[:, :, None] + ch[None, None, :]
                a = tl.load(dy + dy_off, mask=r_ok[None, :, None] & c_ok[None, None, :], other=0.0)
            else:
                dy_off = (dy_row[:, None] + zero_t[None, :])[:, :, None] + ch[None, None, :]
                a = tl.load(dy + dy_off, mask=r_ok[:, None, None] & c_ok[None, None, :], other=0.0)
            # x gather [BR, TAPS_P2, BC]
            h0 = ho * stride_h - pad_h
            w0 = wo * stride_w - pad_w
            w0c = tl.where(r_ok, w0, OUTSIDE)
            if TAPS_INNER:
                rt_ok = ((h0[None, :] + tap_h[:, None]).to(tl.uint32) < Hi) & ((w0c[None, :] + tap_w_chk[:, None]).to(tl.uint32) < Wi)
            else:
                rt_ok = ((h0[:, None] + tap_h[None, :]).to(tl.uint32) < Hi) & ((w0c[:, None] + tap_w_chk[None, :]).to(tl.uint32) < Wi)
            if IS_3D:
                d0 = do_ * stride_d - pad_d
                if TAPS_INNER:
                    rt_ok = rt_ok & ((d0[None, :] + tap_d[:, None]).to(tl.uint32) < Di)
                else:
                    rt_ok = rt_ok & ((d0[:, None] + tap_d[None, :]).to(tl.uint32) < Di)
                row_off = ((nb * Di + d0) * Hi + h0) * Wi + w0
            else:
                row_off = (nb * Hi + h0) * Wi + w0
            row_off = tl.multiple_of(tl.where(r_ok, row_off, 0) * G, VEC)
            if TAPS_INNER:
                x_off = (row_off[None, :] + tap_off[:, None])[:, :, None] + ch[None, None, :]
            else:
                x_off = (row_off[:, None] + tap_off[None, :])[:, :, None] + ch[None, None, :]
            b = tl.load(x + x_off, mask=rt_ok[:, :, None] & c_ok[None, None, :], other=0.0, cache_modifier=X_CACHE)
            acc += a.to(tl.float32) * b.to(tl.float32)
            # next BR rows: one carry per dim (each remainder stays below its dim)
            wo += step_wo
            carry = wo >= Wo
            wo = tl.where(carry, wo - Wo, wo)
            ho += step_ho + carry.to(tl.int32)
            carry = ho >= Ho
            ho = tl.where(carry, ho - Ho, ho)
            if IS_3D:
                do_ += step_do + carry.to(tl.int32)
                carry = do_ >= Do
                do_ = tl.where(carry, do_ - Do, do_)
            nb += step_nb + carry.to(tl.int32)
            offs_r += BR
        acc = tl.sum(acc, axis=1 if TAPS_INNER else 0)
        # -- epilogue: dW[g, t] at g * TAPS + t ------------------------------------------------------
        dw_off = ch[None, :] * TAPS + tl.where(t_ok, t, 0)[:, None]
        dw_mask = t_ok[:, None] & c_ok[None, :]
        if VARIANT == "direct":
            tl.store(dw + dw_off, acc.to(dw.dtype.element_ty), mask=dw_mask)
        elif VARIANT == "atomic":
            if GDC_WAIT:  # launched while dW's memset runs (abi.spec.dw_zeroed_before_launch)
                gdc_wait()
            tl.atomic_add(dw + dw_off, acc, mask=dw_mask, sem="relaxed")
        elif VARIANT == "workspace":  # one f32 replica, zeroed by the launcher; Stage-2 casts it
            tl.atomic_add(ws_ptr + dw_off, acc, mask=dw_mask, sem="relaxed")
        else:  # two_stage: split s owns replica s; every element of it is stored (zeros if empty)
            tl.store(ws_ptr + split * (G * TAPS) + dw_off, acc, mask=dw_mask)


@triton.jit
def _dwconv_win(
    dy, x, dw, N, G, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
    stride_d, stride_h, pad_d, pad_h, pad_w, dil_d, dil_h, ws_ptr, ks_iters,
    BC: tl.constexpr, BP: tl.constexpr, KX: tl.constexpr, BW: tl.constexpr, TR: tl.constexpr,
    SW: tl.constexpr, DL: tl.constexpr,
    IS_3D: tl.constexpr, VEC: tl.constexpr, VARIANT: tl.constexpr, X_CACHE: tl.constexpr,
    EPI_SMEM: tl.constexpr, GDC_WAIT: tl.constexpr,
):  # fmt: skip
    """The window kernel (mode ``win<BW>[r<TR>][s<SW>][d<DL>]``; stride_w = SW, dil_w = DL, X ==
    KX, all compile-time): a CTA owns BC channels and TR tap rows (kz, ky) with their KX taps
    each; each thread owns one channel vector of a *strip* of BW consecutive output columns of
    one output row (BP strips per step). Output column j of the strip and tap kx read x column
    ``SW * j + DL * kx`` of the strip's window, which spans SPAN = SW * (BW - 1) + DL * (KX - 1)
    + 1 contiguous columns. Per strip it loads the BW dy vectors once, and per tap row each
    window column that some (j, kx) reads once, converted to fp32 once, and feeds it to every
    (j, kx) that reads it (all resolved at compile time): BW * KX * TR FMAs per channel for BW +
    TR * SPAN vector loads (stride 1: BW + KX - 1 columns; stride 2: 2 * BW + KX - 2, each read
    by the taps of its parity). Tap rows past Z*Y (the last group) are masked: no memory
    traffic."""
    SPAN: tl.constexpr = SW * (BW - 1) + DL * (KX - 1) + 1
    TAPS = Z * Y * KX
    ZY = Z * Y
    WB = tl.cdiv(Wo, BW)
    S = N * Do * Ho * WB
    cblocks = tl.cdiv(G, BC)
    pid = tl.program_id(0)
    cb = pid % cblocks
    rest = pid // cblocks
    rgroups = tl.cdiv(ZY, TR)
    trow0 = (rest % rgroups) * TR
    split = rest // rgroups
    step0 = split * ks_iters
    step1 = tl.minimum(step0 + ks_iters, tl.cdiv(S, BP))
    offs_c = cb * BC + tl.arange(0, BC)
    c_ok = tl.max_constancy(offs_c < G, VEC)
    ch = tl.max_contiguous(tl.multiple_of(offs_c % G, VEC), VEC)
    # strips: decomposed once, then walked by carries
    offs_s = step0 * BP + tl.arange(0, BP)
    wb = offs_s % WB
    tq = offs_s // WB
    ho = tq % Ho
    tq = tq // Ho
    do_ = tq % Do
    nb = tq // Do
    STEP: tl.constexpr = BP
    step_wb = STEP % WB
    sq = STEP // WB
    step_ho = sq % Ho
    sq = sq // Ho
    step_do = sq % Do
    step_nb = sq // Do
    # tap rows (kz, ky): their h / d offsets, once per CTA
    th = ()
    td = ()
    for i in tl.static_range(TR):
        trow = trow0 + i
        # a tap row past Z*Y (the last group) gets an h offset of OUTSIDE: its h check masks it
        th = th + (tl.where(trow < ZY, (trow % Y) * dil_h - pad_h, OUTSIDE),)
        td = td + ((trow // Y) * dil_d - pad_d,)
    acc = ()
    for i in tl.static_range(TR * KX):
        acc = acc + (tl.zeros([BP, BC], dtype=tl.float32),)
    for _ in range(step0, step1):
        s_ok = offs_s < S
        wo0 = wb * BW
        if IS_3D:
            dy_row = ((nb * Do + do_) * Ho + ho) * Wo
        else:
            dy_row = (nb * Ho + ho) * Wo
        # dy: the strip's BW vectors, converted once (columns past Wo and strips past S load 0)
        dv = ()
        for j in tl.static_range(BW):
            m = (s_ok & (wo0 + j < Wo))[:, None] & c_ok[None, :]
            dy_p = dy + (tl.multiple_of((dy_row + wo0 + j) * G, VEC)[:, None] + ch[None, :])
            dv = dv + (tl.load(dy_p, mask=m, other=0.0).to(tl.float32),)
        w0 = wo0 * SW - pad_w
        nacc = ()
        for i in tl.static_range(TR):
            h = ho * stride_h + th[i]
            row_ok = s_ok & (h.to(tl.uint32) < Hi)
            if IS_3D:
                d = do_ * stride_d + td[i]
                row_ok = row_ok & (d.to(tl.uint32) < Di)
                x_row = ((nb * Di + d) * Hi + h) * Wi
            else:
                x_row = (nb * Hi + h) * Wi
            # x: the window's SPAN columns, each one some (j, kx) reads loaded and converted once,
            # used by every (j, kx) that reads it: column cw feeds output j = (cw - DL * kx) / SW
            x_col = tl.where(row_ok, x_row, 0) + w0
            racc = ()
            for kx in tl.static_range(KX):
                racc = racc + (acc[i * KX + kx],)
            for cw in tl.static_range(SPAN):
                if _window_column_used(cw, SW, DL, BW, KX):
                    m = (row_ok & ((w0 + cw).to(tl.uint32) < Wi))[:, None] & c_ok[None, :]
                    x_p = x + (tl.multiple_of((x_col + cw) * G, VEC)[:, None] + ch[None, :])
                    xv = tl.load(x_p, mask=m, other=0.0, cache_modifier=X_CACHE).to(tl.float32)
                    r2 = ()
                    for kx in tl.static_range(KX):
                        a = racc[kx]
                        if _window_output(cw, kx, SW, DL, BW) >= 0:
                            a = a + dv[_window_output(cw, kx, SW, DL, BW)] * xv
                        r2 = r2 + (a,)
                    racc = r2
            nacc = nacc + racc
        acc = nacc
        # next BP strips: one carry per dim
        wb += step_wb
        carry = wb >= WB
        wb = tl.where(carry, wb - WB, wb)
        ho += step_ho + carry.to(tl.int32)
        carry = ho >= Ho
        ho = tl.where(carry, ho - Ho, ho)
        if IS_3D:
            do_ += step_do + carry.to(tl.int32)
            carry = do_ >= Do
            do_ = tl.where(carry, do_ - Do, do_)
        nb += step_nb + carry.to(tl.int32)
        offs_s += BP
    # -- epilogue: dW[g, (kz, ky, kx)] at g * TAPS + trow * KX + kx ------------------------------
    # The TR * KX accumulators are summed over the strips in groups of a power of two taps
    # (_epi_plan), each one [BP, BC, n] tensor whose strips a layout conversion through shared
    # memory moves into the threads, so the sum is in-thread adds, not a shuffle tree per value
    # and tap (sm_90 SASS of the whole epilogue, bf16 7x7 16x64: 158 instructions, 856 with a
    # tl.sum per tap; 0 SHFL and 1 BAR, 336 and 41 before).
    NT: tl.constexpr = TR * KX
    for gi in tl.static_range(_epi_groups(NT, BP, BC, EPI_SMEM)):
        _epi_group(
            acc, _epi_group_at(gi, NT, BP, BC, EPI_SMEM, 0), _epi_group_at(gi, NT, BP, BC, EPI_SMEM, 1),
            _epi_group_at(gi, NT, BP, BC, EPI_SMEM, 2), dw, ws_ptr, split, G, TAPS, ZY, trow0, offs_c, c_ok,
            BP, BC, KX, VARIANT, GDC_WAIT,
        )  # fmt: skip


@triton.jit
def _epi_group(
    acc, T0: tl.constexpr, NR: tl.constexpr, NG: tl.constexpr, dw, ws_ptr, split, G, TAPS, ZY, trow0, offs_c, c_ok,
    BP: tl.constexpr, BC: tl.constexpr, KX: tl.constexpr, VARIANT: tl.constexpr, GDC_WAIT: tl.constexpr,
):  # fmt: skip
    """Taps T0 .. T0 + NR of the window kernel's accumulators, summed over the BP strips and
    stored; NG >= NR is a power of two, the taps past NR are zeros."""
    t = ()
    for k in tl.static_range(NG):
        if k < NR:
            t = t + (acc[T0 + k],)
        else:
            t = t + (tl.zeros([BP, BC], dtype=tl.float32),)
    # a balanced tree of joins, [BP, BC, 2, ..., 2]: tap T0 + k at the row-major index k of the new dims
    for lvl in tl.static_range(_log2(NG)):
        u = ()
        for k in tl.static_range(_shr(NG, lvl + 1)):
            u = u + (tl.join(t[k], t[k + _shr(NG, lvl + 1)]),)
        t = u
    if BP > 1:
        # the split of a strip bit needs it in registers: its operand gets Triton's default layout
        # (threads over channels and taps, the other strips in registers), one conversion through
        # shared memory; the sum is then in-thread adds (plus a short tree where BC * NG is fewer
        # than the threads)
        x = tl.reshape(t[0], [BP // 2, 2, BC, NG])
        a, b = tl.split(tl.permute(x, [0, 2, 3, 1]))
        r = tl.sum(a + b, axis=0)  # [BC, NG]
    else:
        r = tl.sum(tl.reshape(t[0], [BP, BC, NG]), axis=0)
    tap = T0 + tl.arange(0, NG)
    trow = trow0 + tap // KX
    # channels past G: masked, so their offsets need not wrap (ch = offs_c % G would cost a division)
    dw_off = offs_c[:, None] * TAPS + (tl.minimum(trow, ZY - 1) * KX + tap % KX)[None, :]
    m = c_ok[:, None] & ((trow < ZY) & (tap < T0 + NR))[None, :]
    if VARIANT == "direct":
        tl.store(dw + dw_off, r.to(dw.dtype.element_ty), mask=m)
    elif VARIANT == "atomic":
        if GDC_WAIT:
            gdc_wait()
        tl.atomic_add(dw + dw_off, r, mask=m, sem="relaxed")
    elif VARIANT == "workspace":
        tl.atomic_add(ws_ptr + dw_off, r, mask=m, sem="relaxed")
    else:
        tl.store(ws_ptr + split * (G * TAPS) + dw_off, r, mask=m)


@triton.constexpr_function
def _epi_plan(nt, bp, bc, smem):
    """The window epilogue's tap groups, [(first tap, taps, padded size)]: at most ``smem`` bytes
    of fp32 sums through shared memory at once; a tail short of a power of two is padded with
    zero taps where that adds at most 3 or a quarter of the group (7 -> 8, 5 -> 8, 25 -> 32),
    else cut at its largest power of two (9 -> 8 + 1): a group costs more than a few zero taps."""
    cap = 1
    while 2 * cap * bp * bc * 4 <= smem:
        cap *= 2
    out = []
    s = 0
    while s < nt:
        n = nt - s
        p = 1
        while p < n:
            p *= 2
        if n >= cap:
            g = (s, cap, cap)
        elif p - n <= max(3, p // 4):
            g = (s, n, p)
        else:
            g = (s, p // 2, p // 2)
        out.append(g)
        s += g[1]
    return out


@triton.constexpr_function
def _epi_groups(nt, bp, bc, smem):
    return len(_epi_plan(nt, bp, bc, smem))


@triton.constexpr_function
def _epi_group_at(i, nt, bp, bc, smem, field):
    return _epi_plan(nt, bp, bc, smem)[i][field]


@triton.constexpr_function
def _shr(n, k):
    return n >> k


@triton.constexpr_function
def _log2(n):
    return n.bit_length() - 1


@triton.constexpr_function
def _window_output(cw, kx, sw, dl, bw):
    """The strip column j whose tap kx reads window column cw (cw = sw * j + dl * kx), else -1."""
    q = cw - dl * kx
    return q // sw if q >= 0 and q % sw == 0 and q // sw < bw else -1


@triton.constexpr_function
def _window_column_used(cw, sw, dl, bw, kx_count):
    """Whether some (strip column, tap) reads window column cw (stride and dilation 2 leave gaps)."""
    q = [cw - dl * kx for kx in range(kx_count)]
    return any(v >= 0 and v % sw == 0 and v // sw < bw for v in q)


def constexprs(spec, target) -> dict:
    """``KernelSpec`` fields of the dwconv family: bm = BC (channels per CTA), bn = TAPS_P2 (taps
    the kernel holds, a power of two >= Z*Y*X), bk = BR (rows per step), vec_c = vec_k = VEC."""
    return {
        "BC": spec.bm,
        "BR": spec.bk,
        "TAPS_P2": spec.bn,
        "IS_3D": spec.spatial_dims == 3,
        "VEC": spec.vec_c,
        "VARIANT": spec.variant,
        # NVIDIA: keep x in L1 (the taps re-read shifted windows of the same rows), as in wgrad.
        "X_CACHE": ".ca" if target.backend == "cuda" else "",
        # mode "taps": the gather is [TAPS_P2, BR, BC], so Triton spreads rows over the threads and
        # keeps every tap of a row inside one thread (dy loaded and converted once per row, reused
        # over the taps; the rows are summed across threads once, at the end). Default (""):
        # [BR, TAPS_P2, BC], taps over the threads, rows inside each thread.
        "TAPS_INNER": spec.mode == "taps",
        # mode "win<BW>": the window kernel (_dwconv_win), strips of BW output columns; bn is then
        # the exact filter width KX and bk the strips per step.
        "WIN": spec.dwconv_window.bw,
        "WIN_ROWS": spec.dwconv_window.tr,
        # mode "win<BW>[r<TR>][s<SW>][d<DL>]": stride and dilation along W, baked into the window
        "WIN_SW": spec.dwconv_window.sw,
        "WIN_DW": spec.dwconv_window.dl,
        # the window epilogue's shared memory (its strip sums go through it): at most 16 KiB a CTA and
        # a quarter of a CU's (H200 runs D1/D2: 32 and 8 KiB ran within 1% of 16 on 43 layers)
        "WIN_EPI_SMEM": min(16384, target.lds_bytes_per_cu // 4),
        # the launcher starts an atomic launch while dW's memset runs (abi.arch.dependent_launch)
        "GDC_WAIT": target.dependent_launch and dw_zeroed_before_launch(spec.variant),
    }


@triton.jit
def dwconv_walk_wgrad(
    dy, x, dw,
    N, G, C, K, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
    stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
    ws_ptr, ws_bytes, ks_iters, ks_count,
    BC: tl.constexpr, BP: tl.constexpr, BW: tl.constexpr, KS: tl.constexpr, VEC: tl.constexpr,
    VARIANT: tl.constexpr, EPI_SMEM: tl.constexpr, GDC_WAIT: tl.constexpr,
):  # fmt: skip
    """The row-walk kernel (``dwconv_walk``; 2-D, a KS x KS filter at stride and dilation 1): a CTA
    owns BC channels and BP strips of BW output columns (a strip: one image's column block; thread
    = one channel vector of one strip) and walks down output rows [split * ks_iters, + ks_iters).
    The x rows a row's taps read are a sliding window of KS rows: the KS - 1 older ones stay in
    registers (converted to fp32 once), so per output row a thread loads one new x row of its
    strip's SPAN = BW + KS - 1 columns and its BW dy vectors, and makes BW * KS * KS products per
    channel. The next row's vectors are loaded before this row's products (two rows of loads in
    flight a thread: at one or two CTAs an SM the loop is latency-bound without it), and the loop
    is unrolled KS times so the window's rotation is register renaming, not moves. Epilogue: the
    window kernels' (``_epi_group``), every tap of the CTA summed over its strips and added into
    dW (atomic) or the f32 replica (workspace)."""
    SPAN: tl.constexpr = BW + KS - 1
    WB = tl.cdiv(Wo, BW)
    cblocks = tl.cdiv(G, BC)
    colgroups = tl.cdiv(N * WB, BP)
    pid = tl.program_id(0)
    cb = pid % cblocks
    rest = pid // cblocks
    cg = rest % colgroups
    split = rest // colgroups
    ho0 = split * ks_iters
    ho1 = tl.minimum(ho0 + ks_iters, Ho)
    offs_c = cb * BC + tl.arange(0, BC)
    c_ok = tl.max_constancy(offs_c < G, VEC)
    ch = tl.max_contiguous(tl.multiple_of(offs_c % G, VEC), VEC)
    col = cg * BP + tl.arange(0, BP)
    col_ok = col < N * WB
    zero_p = tl.zeros([BP], dtype=tl.int32)
    wo0 = (col % WB) * BW
    w0 = wo0 - pad_w
    # per strip: the pixel of (image, row 0, first window column) in x and dy, and the column masks, once
    x_pix0 = (col // WB) * Hi * Wi + w0
    dy_pix0 = (col // WB) * Ho * Wo + wo0
    xm = ()
    for cw in tl.static_range(SPAN):
        xm = xm + ((col_ok & ((w0 + cw).to(tl.uint32) < Wi))[:, None] & c_ok[None, :],)
    dm = ()
    for j in tl.static_range(BW):
        dm = dm + ((col_ok & (wo0 + j < Wo))[:, None] & c_ok[None, :],)
    # the window: the KS - 1 x rows above the new one of output row ho0 (rows outside x load 0)
    win = ()
    for i in tl.static_range(KS - 1):
        h = ho0 - pad_h + i
        row_ok = ((h + zero_p).to(tl.uint32) < Hi)[:, None]
        base = x_pix0 + h * Wi
        for cw in tl.static_range(SPAN):
            p = x + (tl.multiple_of((base + cw) * G, VEC)[:, None] + ch[None, :])
            win = win + (tl.load(p, mask=xm[cw] & row_ok, other=0.0).to(tl.float32),)
    # row ho0's new x row and dy vectors (raw), then each iteration loads the next row's
    nxt = _walk_row_loads(x, dy, ho0, ho1, x_pix0, dy_pix0, pad_h, Hi, Wi, Wo, G, ch, xm, dm, zero_p, SPAN, BW, KS, VEC)
    acc = ()
    for t in tl.static_range(KS * KS):
        acc = acc + (tl.zeros([BP, BC], dtype=tl.float32),)
    for ho in tl.range(ho0, ho1, loop_unroll_factor=KS):
        new = ()
        for cw in tl.static_range(SPAN):
            new = new + (nxt[cw].to(tl.float32),)
        dv = ()
        for j in tl.static_range(BW):
            dv = dv + (nxt[SPAN + j].to(tl.float32),)
        nxt = _walk_row_loads(x, dy, ho + 1, ho1, x_pix0, dy_pix0, pad_h, Hi, Wi, Wo, G, ch, xm, dm, zero_p, SPAN, BW, KS, VEC)
        # tap (ky, kx) of output column j reads window row ky, column j + kx (row KS - 1: the new one)
        nacc = ()
        for ky in tl.static_range(KS):
            for kx in tl.static_range(KS):
                a = acc[ky * KS + kx]
                for j in tl.static_range(BW):
                    if ky < KS - 1:
                        a = a + dv[j] * win[ky * SPAN + j + kx]
                    else:
                        a = a + dv[j] * new[j + kx]
                nacc = nacc + (a,)
        acc = nacc
        nwin = ()
        for q in tl.static_range(SPAN, (KS - 1) * SPAN):
            nwin = nwin + (win[q],)
        win = nwin + new
    NT: tl.constexpr = KS * KS
    for gi in tl.static_range(_epi_groups(NT, BP, BC, EPI_SMEM)):
        _epi_group(
            acc, _epi_group_at(gi, NT, BP, BC, EPI_SMEM, 0), _epi_group_at(gi, NT, BP, BC, EPI_SMEM, 1),
            _epi_group_at(gi, NT, BP, BC, EPI_SMEM, 2), dw, ws_ptr, split, G, NT, KS, 0, offs_c, c_ok,
            BP, BC, KS, VARIANT, GDC_WAIT,
        )  # fmt: skip


@triton.jit
def _walk_row_loads(x, dy, ho, ho1, x_pix0, dy_pix0, pad_h, Hi, Wi, Wo, G, ch, xm, dm, zero_p,
                    SPAN: tl.constexpr, BW: tl.constexpr, KS: tl.constexpr, VEC: tl.constexpr):  # fmt: skip
    """Output row ``ho``'s loads, unconverted: the SPAN vectors of the one x row its taps add to the
    window (row ho - pad_h + KS - 1; a row outside x loads 0) and its BW dy vectors; all 0 past the
    split's last row ``ho1``."""
    h = ho - pad_h + (KS - 1)
    go = ((ho + zero_p) < ho1)[:, None]
    row_ok = ((h + zero_p).to(tl.uint32) < Hi)[:, None] & go
    base = x_pix0 + h * Wi
    out = ()
    for cw in tl.static_range(SPAN):
        p = x + (tl.multiple_of((base + cw) * G, VEC)[:, None] + ch[None, :])
        out = out + (tl.load(p, mask=xm[cw] & row_ok, other=0.0),)
    dbase = dy_pix0 + ho * Wo
    for j in tl.static_range(BW):
        p = dy + (tl.multiple_of((dbase + j) * G, VEC)[:, None] + ch[None, :])
        out = out + (tl.load(p, mask=dm[j] & go, other=0.0),)
    return out


def walk_constexprs(spec, target) -> dict:
    """``KernelSpec`` fields of the dwconv_walk family: bm = BC, bk = BP, block = BW, bn = KS."""
    return {
        "BC": spec.bm,
        "BP": spec.bk,
        "BW": spec.block,
        "KS": spec.bn,
        "VEC": spec.vec_c,
        "VARIANT": spec.variant,
        "EPI_SMEM": min(16384, target.lds_bytes_per_cu // 4),
        "GDC_WAIT": target.dependent_launch and dw_zeroed_before_launch(spec.variant),
    }
