"""Implicit-GEMM convolution wgrad in Triton: split-K (``wgrad``) and stream-K (``wgrad_sk``).

Per group g:  dW[g] (K x ZYXC) = dy[g]^T (K x NDoHoWo) @ im2col(x)[g] (NDoHoWo x ZYXC).
x is ``N Di Hi Wi G C``, dy ``N Do Ho Wo G K``, dW ``G K Z Y X C``, all packed. A tile is
BM output channels x BN flattened (z, y, x, c) columns of one group; tile ids are row-major over
(G * ceil(K / BM)) x ceil(ZYXC / BN). One MAC iteration is one BK slice of the reduction.

Addressing is separable: the x offset of (row r, column n) is ``row_off(r) + col_off(n)`` and its
bounds check is ``row_base(r) + col_tap(n) < size`` per spatial dim (unsigned), so the loop does
per-row and per-vector work only; columns are decomposed once per tile, and rows by division
once per segment, then walked by carries (the main loop is issue-bound: on sm_90 the per-iteration
divisions were a third of its instructions). Masked rows and columns keep small offsets, so
32-bit offsets are enough (``skwgrad.abi.conv`` refuses tensors of 2**31 elements).

Split-K epilogues (``wgrad_splitk``, ``VARIANT``): direct (ks_count = 1, dW stored in its dtype),
atomic (relaxed fp32 adds into an fp32 dW the launcher zeroes), two_stage (split s stores its
whole f32 replica s of dW; the Stage-2 reduce sums the ks_count replicas in split order:
deterministic), workspace (relaxed fp32 adds of every split into ONE f32 replica of dW in the
zeroed arena; the Stage-2 reduce casts it into dW and stores zeros back, as for stream-K
workspace: no per-split replica stores, a one-replica Stage-2 at any ks_count, nothing zeroed
per launch; not deterministic).

Stream-K flag protocol (linear and tree): one flag per (SK CTA, thread), FLAGS_PER_CTA =
NUM_THREADS (num_warps x wave size; ``KernelSpec.flags_per_cta``). Flags are zero at rest:
  publish (contributor c):  every thread stores its part of the f32 partial tile to slot c, then
      does its own release store ``flags[c][lane] = 1`` at gpu/agent scope. Each thread thus
      releases exactly the stores it made; nothing rests on a CTA barrier being cumulative
      (on CDNA a workgroup barrier does not wait for other waves' stores to reach L2, so one
      thread's ``buffer_wbl2`` could miss them). CDNA lowers each release to ``buffer_wbl2 sc1``
      + ``s_waitcnt vmcnt(0)`` before the flag store; Hopper to ``fence.acq_rel.gpu`` (one per warp).
  wait (owner, or a tree node folding partner j):  every thread polls one of j's flags for
      ``== 1`` with acquire at gpu/agent scope (CDNA: ``buffer_inv sc1`` after the load), and
      the CTA waits until all polls succeed (``atomic_poll`` waits for the whole block, and a CTA
      barrier follows). Only then is slot j read, ``.cg`` (from L2, never a stale L1 line).
  reset: the consumer then stores 0 back into the flags it polled. Every SK CTA publishes at
      most once per launch and every publish has exactly one consumer, so a launch that starts
      with zero flags ends with zero flags: no memset and no host-side epoch per launch, which is
      what lets a CUDA/HIP graph replay the launch unchanged (the workspace arena zeroes a flag
      table once, when it is allocated).
Forward progress: a CTA's only non-owner segment is its first one, and it publishes it before
it waits on anything; every wait targets a higher-index SK CTA. So the highest-index SK CTA
never waits, and by induction every CTA finishes, provided the SK CTAs are co-resident (the
default linear/tree pool is one CTA per CU/SM, and dp_sk launches the SK CTAs first).
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from skwgrad.abi.spec import dw_zeroed_before_launch

# A coordinate offset that puts an index outside any image: sums of two of them plus a real
# coordinate (< 2**21) stay below 2**31, so int32 never wraps and the unsigned check fails.
OUTSIDE = tl.constexpr(1 << 29)


# ---------------------------------------------------------------------------------------------
# Shared device code
# ---------------------------------------------------------------------------------------------
@triton.jit
def _tile_origin(tile, G, K, NG, BM: tl.constexpr, BN: tl.constexpr):
    m_tiles_per_group = tl.cdiv(K, BM)
    n_tiles = tl.cdiv(NG, BN)
    mt = tile // n_tiles
    g = mt // m_tiles_per_group
    m0 = (mt % m_tiles_per_group) * BM
    n0 = (tile % n_tiles) * BN
    return g, m0, n0


@triton.jit
def _mac(
    acc, dy, x, g, m0, n0, it_begin, it_end,
    N, G, C, K, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
    stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, IS_3D: tl.constexpr,
    POINTWISE: tl.constexpr, VEC_C: tl.constexpr, VEC_K: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    X_CACHE: tl.constexpr,
):  # fmt: skip
    """acc += the tile's MAC iterations [it_begin, it_end).

    Vector loads need three facts Triton cannot see through runtime sizes, given as hints that
    hold because K % VEC_K == 0 and C % VEC_C == 0 (``KernelSpec.check_problem``): each aligned
    group of VEC columns is contiguous in memory, starts at a multiple of VEC, and shares one
    filter tap (so its bounds mask is constant). Columns past the end *wrap* (``% NG``, ``% K``)
    rather than clamp, which keeps those facts true for the padding columns too, and are masked
    (whole vectors at a time) so they cost no memory traffic; their results are never stored.
    Rows past the reduction are masked to zero (dy: clamped; x: offset 0).
    """
    NG = Z * Y * X * C
    KG = N * Do * Ho * Wo
    GC = G * C
    GK = G * K
    # -- x columns: (z, y, x, c), once per tile ---------------------------------------------------
    offs_n = n0 + tl.arange(0, BN)
    n_ok = tl.max_constancy(offs_n < NG, VEC_C)  # masked: padding columns cost no traffic
    nn = offs_n % NG
    c = nn % C
    tap = nn // C
    kx = tap % X
    ky = (tap // X) % Y
    kz = tap // (X * Y)
    tap_h = tl.max_constancy(ky * dil_h, VEC_C)
    # Padding columns get a tap far outside the image, so the w bounds check masks them too.
    tap_w = tl.max_constancy(tl.where(n_ok, kx * dil_w, OUTSIDE), VEC_C)
    tap_d = tl.max_constancy(kz * dil_d, VEC_C)
    if POINTWISE:
        col_off = g * C + c
    else:
        col_off = ((tap_d * Hi + tap_h) * Wi + tap_w) * GC + g * C + c
    col_off = tl.max_contiguous(tl.multiple_of(col_off, VEC_C), VEC_C)
    # -- dy columns: output channels --------------------------------------------------------------
    offs_m = m0 + tl.arange(0, BM)
    m_ok = tl.max_constancy(offs_m < K, VEC_K)
    dy_col = g * K + offs_m % K
    dy_col = tl.max_contiguous(tl.multiple_of(dy_col, VEC_K), VEC_K)
    # -- rows: (n, do, ho, wo) of the reduction index, walked incrementally ------------------------
    # Decomposed by division once per segment; each iteration then adds BK's own decomposition
    # with one carry per dim (each remainder stays below its dim), so the loop divides nothing.
    offs_r = it_begin * BK + tl.arange(0, BK)
    if not POINTWISE:
        wo = offs_r % Wo
        t = offs_r // Wo
        ho = t % Ho
        t = t // Ho
        do_ = t % Do
        nb = t // Do
        step_wo = BK % Wo
        step = BK // Wo
        step_ho = step % Ho
        step = step // Ho
        step_do = step % Do
        step_nb = step // Do
    for it in range(it_begin, it_end):
        r_ok = offs_r < KG
        r = tl.minimum(offs_r, KG - 1)
        # dy rows are the flattened (n, do, ho, wo) reduction index itself.
        dy_row = tl.multiple_of(r * GK, VEC_K)
        a = tl.load(dy + dy_row[None, :] + dy_col[:, None], mask=m_ok[:, None] & r_ok[None, :], other=0.0)
        if POINTWISE:
            x_row = tl.multiple_of(r * GC, VEC_C)
            b_mask = r_ok[:, None] & n_ok[None, :]
            b = tl.load(x + x_row[:, None] + col_off[None, :], mask=b_mask, other=0.0, cache_modifier=X_CACHE)
        else:
            h0 = ho * stride_h - pad_h
            w0 = wo * stride_w - pad_w
            # One unsigned compare per dim (a negative index wraps to a huge one). Rows past the
            # reduction, like padding columns, start far outside the image: the w check masks them.
            hi = (h0[:, None] + tap_h[None, :]).to(tl.uint32)
            wi = (tl.where(r_ok, w0, OUTSIDE)[:, None] + tap_w[None, :]).to(tl.uint32)
            b_mask = (hi < Hi) & (wi < Wi)
            if IS_3D:
                d0 = do_ * stride_d - pad_d
                di = (d0[:, None] + tap_d[None, :]).to(tl.uint32)
                b_mask = b_mask & (di < Di)
                row_off = ((nb * Di + d0) * Hi + h0) * Wi + w0
            else:
                row_off = (nb * Hi + h0) * Wi + w0
            # rows past the reduction (last iteration only) are masked; keep their offsets small
            row_off = tl.where(r_ok, row_off, 0)
            x_row = tl.multiple_of(row_off * GC, VEC_C)
            b = tl.load(x + x_row[:, None] + col_off[None, :], mask=b_mask, other=0.0, cache_modifier=X_CACHE)
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
        offs_r += BK
        if INPUT_PRECISION == "tf32_via_registers":
            # wgmma / MFMA tf32 read K-major tiles, and both operands here are stored MN-major. Fed
            # straight from a load, Triton writes that transpose with one 4-byte cp.async per
            # element, each from another row (a sector per element). An elementwise op in between
            # makes it load coalesced 16-byte vectors and transpose through registers: the H200's
            # fp32 corpus row went from 180 to 89 us on wgmma. ``+ 0.0`` changes nothing but the
            # sign of a zero. On mma.sync (sm_90, ``dot_precision``) the fragment loads read either
            # layout and the adds are only cost (run Q2: 3% slower with them).
            a = a + 0.0
            b = b + 0.0
            acc = tl.dot(a, b, acc, input_precision="tf32")
        else:
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    return acc


@triton.jit
def _dw_offsets(g, m0, n0, K, NG, BM: tl.constexpr, BN: tl.constexpr, VEC_C: tl.constexpr):
    offs_m = m0 + tl.arange(0, BM)
    offs_n = n0 + tl.arange(0, BN)
    # NG % VEC_C == 0: validity is constant over each aligned group of VEC_C columns.
    n_ok = tl.max_constancy(offs_n < NG, VEC_C)
    mask = (offs_m < K)[:, None] & n_ok[None, :]
    row = tl.multiple_of((g * K + offs_m % K) * NG, VEC_C)
    col = tl.max_contiguous(tl.multiple_of(offs_n % NG, VEC_C), VEC_C)
    return row[:, None] + col[None, :], mask


@triton.jit
def _slot_offsets(BM: tl.constexpr, BN: tl.constexpr):
    return tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]


@triton.jit
def _sk_cta_of(it, sk_begin, sk_iters_per_cta, sk_extra_iters):
    """The SK CTA whose range holds global iteration ``it`` (inverse of the partition)."""
    rel = it - sk_begin
    boundary = sk_extra_iters * (sk_iters_per_cta + 1)
    return tl.where(
        rel < boundary,
        rel // (sk_iters_per_cta + 1),
        sk_extra_iters + (rel - boundary) // sk_iters_per_cta,
    )


@triton.jit
def _lane_flags(sk_flags, cta, NUM_THREADS: tl.constexpr):
    # One flag per thread. Contiguity 1 keeps one element per thread: a vectorised layout would
    # leave threads whose stores nobody releases.
    lanes = tl.max_contiguous(tl.arange(0, NUM_THREADS), 1)
    return sk_flags + cta * NUM_THREADS + lanes


@triton.jit
def _publish(sk_flags, sk_partials, cta, acc, BM: tl.constexpr, BN: tl.constexpr,
             NUM_THREADS: tl.constexpr):  # fmt: skip
    tl.store(sk_partials + cta * (BM * BN) + _slot_offsets(BM, BN), acc)
    ready = tl.full([NUM_THREADS], 1, tl.int32)
    tl.atomic_store(_lane_flags(sk_flags, cta, NUM_THREADS), ready, sem="release", scope="gpu")


@triton.jit
def _fold(sk_flags, sk_partials, cta, acc, BM: tl.constexpr, BN: tl.constexpr,
          NUM_THREADS: tl.constexpr):  # fmt: skip
    flags = _lane_flags(sk_flags, cta, NUM_THREADS)
    tl.atomic_poll(flags, 1, sem="acquire", scope="gpu")
    tl.debug_barrier()
    # Each thread resets the flag it polled: nobody else reads it in this launch (zero at rest).
    tl.store(flags, tl.zeros([NUM_THREADS], tl.int32))
    return acc + tl.load(sk_partials + cta * (BM * BN) + _slot_offsets(BM, BN), cache_modifier=".cg")


# ---------------------------------------------------------------------------------------------
# Split-K: grid = num_tiles * ks_count, split-major (CTAs of one split share the same rows of
# dy and x, so they meet in L2).
# ---------------------------------------------------------------------------------------------
@triton.jit
def wgrad_splitk(
    dy, x, dw,
    N, G, C, K, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
    stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
    ws_ptr, ws_bytes, ks_iters, ks_count,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, IS_3D: tl.constexpr, POINTWISE: tl.constexpr,
    VEC_C: tl.constexpr, VEC_K: tl.constexpr, INPUT_PRECISION: tl.constexpr, VARIANT: tl.constexpr,
    X_CACHE: tl.constexpr, GDC_WAIT: tl.constexpr,
):  # fmt: skip
    NG = Z * Y * X * C
    num_tiles = G * tl.cdiv(K, BM) * tl.cdiv(NG, BN)
    iters_per_tile = tl.cdiv(N * Do * Ho * Wo, BK)
    pid = tl.program_id(0)
    tile = pid % num_tiles
    split = pid // num_tiles
    it0 = split * ks_iters
    it1 = tl.minimum(it0 + ks_iters, iters_per_tile)
    g, m0, n0 = _tile_origin(tile, G, K, NG, BM, BN)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    acc = _mac(
        acc, dy, x, g, m0, n0, it0, it1,
        N, G, C, K, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
        stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
        BM, BN, BK, IS_3D, POINTWISE, VEC_C, VEC_K, INPUT_PRECISION, X_CACHE,
    )  # fmt: skip
    offs, mask = _dw_offsets(g, m0, n0, K, NG, BM, BN, VEC_C)
    if VARIANT == "direct":
        tl.store(dw + offs, acc.to(dw.dtype.element_ty), mask=mask)
    elif VARIANT == "atomic":
        if GDC_WAIT:  # launched while dW's memset runs (abi.spec.dw_zeroed_before_launch)
            gdc_wait()
        tl.atomic_add(dw + offs, acc, mask=mask, sem="relaxed")
    elif VARIANT == "workspace":
        # every split adds into the one f32 replica (zero at rest); Stage-2 casts it into dW and
        # zeroes it again, so neither dW nor the replica is cleared per launch
        tl.atomic_add(ws_ptr + offs, acc, mask=mask, sem="relaxed")
    else:  # two_stage: split s owns replica s; every element of it is stored (zeros if empty)
        tl.store(ws_ptr + split * (G * K * NG) + offs, acc, mask=mask)


# ---------------------------------------------------------------------------------------------
# Stream-K
# ---------------------------------------------------------------------------------------------
@triton.jit
def _store_tile(dw, ws_ptr, acc, g, m0, n0, K, NG, whole, BM: tl.constexpr, BN: tl.constexpr,
                VEC_C: tl.constexpr, VARIANT: tl.constexpr, GDC_WAIT: tl.constexpr):  # fmt: skip
    """Write a finished tile (linear/tree/DP), or fold a segment in (atomic/workspace).
    ``whole``: this CTA computed the whole tile, so a plain store is exact."""
    offs, mask = _dw_offsets(g, m0, n0, K, NG, BM, BN, VEC_C)
    if VARIANT == "atomic":
        if GDC_WAIT:  # launched while dW's memset runs: no write to dW before it is done
            gdc_wait()
        if whole:
            tl.store(dw + offs, acc, mask=mask)
        else:
            tl.atomic_add(dw + offs, acc, mask=mask, sem="relaxed")
    elif VARIANT == "workspace":
        if whole:
            tl.store(ws_ptr + offs, acc, mask=mask)
        else:
            tl.atomic_add(ws_ptr + offs, acc, mask=mask, sem="relaxed")
    else:
        tl.store(dw + offs, acc.to(dw.dtype.element_ty), mask=mask)


@triton.jit
def wgrad_streamk(
    dy, x, dw,
    N, G, C, K, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
    stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
    ws_ptr, ws_bytes, ks_iters, ks_count,
    sk_iters_per_tile, sk_dp_tiles, sk_ctas, sk_iters_per_cta, sk_extra_iters, sk_pool, sk_tree_rounds,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, IS_3D: tl.constexpr, POINTWISE: tl.constexpr,
    VEC_C: tl.constexpr, VEC_K: tl.constexpr, INPUT_PRECISION: tl.constexpr, VARIANT: tl.constexpr,
    MODE: tl.constexpr, NUM_THREADS: tl.constexpr, X_CACHE: tl.constexpr, GDC_WAIT: tl.constexpr,
):  # fmt: skip
    """atomic / workspace reductions: no CTA waits on another."""
    _streamk_body(
        dy, x, dw, N, G, C, K, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
        stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
        ws_ptr, dw, dw,
        sk_iters_per_tile, sk_dp_tiles, sk_ctas, sk_iters_per_cta, sk_extra_iters, sk_pool, sk_tree_rounds,
        BM, BN, BK, IS_3D, POINTWISE, VEC_C, VEC_K, INPUT_PRECISION, VARIANT, MODE, NUM_THREADS, X_CACHE, GDC_WAIT,
    )  # fmt: skip


@triton.jit
def wgrad_streamk_fixup(
    dy, x, dw,
    N, G, C, K, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
    stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
    ws_ptr, ws_bytes, ks_iters, ks_count,
    sk_flags, sk_partials,
    sk_iters_per_tile, sk_dp_tiles, sk_ctas, sk_iters_per_cta, sk_extra_iters, sk_pool, sk_tree_rounds,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, IS_3D: tl.constexpr, POINTWISE: tl.constexpr,
    VEC_C: tl.constexpr, VEC_K: tl.constexpr, INPUT_PRECISION: tl.constexpr, VARIANT: tl.constexpr,
    MODE: tl.constexpr, NUM_THREADS: tl.constexpr, X_CACHE: tl.constexpr, GDC_WAIT: tl.constexpr,
):  # fmt: skip
    """linear / tree reductions: partial tiles handed over through flags (deterministic); dW is
    not zeroed before them, so GDC_WAIT is False."""
    _streamk_body(
        dy, x, dw, N, G, C, K, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
        stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
        ws_ptr, sk_flags, sk_partials,
        sk_iters_per_tile, sk_dp_tiles, sk_ctas, sk_iters_per_cta, sk_extra_iters, sk_pool, sk_tree_rounds,
        BM, BN, BK, IS_3D, POINTWISE, VEC_C, VEC_K, INPUT_PRECISION, VARIANT, MODE, NUM_THREADS, X_CACHE, GDC_WAIT,
    )  # fmt: skip


@triton.jit
def _streamk_body(
    dy, x, dw, N, G, C, K, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
    stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
    ws_ptr, sk_flags, sk_partials,
    sk_iters_per_tile, sk_dp_tiles, sk_ctas, sk_iters_per_cta, sk_extra_iters, sk_pool, sk_tree_rounds,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, IS_3D: tl.constexpr, POINTWISE: tl.constexpr,
    VEC_C: tl.constexpr, VEC_K: tl.constexpr, INPUT_PRECISION: tl.constexpr, VARIANT: tl.constexpr,
    MODE: tl.constexpr, NUM_THREADS: tl.constexpr, X_CACHE: tl.constexpr, GDC_WAIT: tl.constexpr,
):  # fmt: skip
    NG = Z * Y * X * C
    ipt = sk_iters_per_tile
    pid = tl.program_id(0)
    # -- which SK CTA this is (or -1), and the DP tiles it runs ----------------------------------
    if MODE == "dp_sk":
        # SK CTAs first, then one CTA per DP tile.
        sk_cta = tl.where(pid < sk_ctas, pid, -1)
        dp_first = tl.where(pid < sk_ctas, sk_dp_tiles, pid - sk_ctas)
        dp_step = sk_dp_tiles + 1  # at most one DP tile per CTA
    else:
        # persistent: CTA p runs DP tiles p, p + pool, ... then its SK range.
        sk_cta = tl.where(pid < sk_ctas, pid, -1)
        dp_first = pid
        dp_step = sk_pool
    for tile in range(dp_first, sk_dp_tiles, dp_step):
        g, m0, n0 = _tile_origin(tile, G, K, NG, BM, BN)
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        acc = _mac(
            acc, dy, x, g, m0, n0, 0, ipt,
            N, G, C, K, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
            stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
            BM, BN, BK, IS_3D, POINTWISE, VEC_C, VEC_K, INPUT_PRECISION, X_CACHE,
        )  # fmt: skip
        _store_tile(dw, ws_ptr, acc, g, m0, n0, K, NG, True, BM, BN, VEC_C, VARIANT, GDC_WAIT)
    if sk_cta >= 0:
        sk_begin = sk_dp_tiles * ipt
        start = sk_begin + sk_cta * sk_iters_per_cta + tl.minimum(sk_cta, sk_extra_iters)
        end = start + sk_iters_per_cta + tl.where(sk_cta < sk_extra_iters, 1, 0)
        it = start
        while it < end:
            tile = it // ipt
            tile_start = tile * ipt
            tile_end = tile_start + ipt
            seg_end = tl.minimum(end, tile_end)
            g, m0, n0 = _tile_origin(tile, G, K, NG, BM, BN)
            acc = tl.zeros([BM, BN], dtype=tl.float32)
            acc = _mac(
                acc, dy, x, g, m0, n0, it - tile_start, seg_end - tile_start,
                N, G, C, K, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
                stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
                BM, BN, BK, IS_3D, POINTWISE, VEC_C, VEC_K, INPUT_PRECISION, X_CACHE,
            )  # fmt: skip
            is_owner = it == tile_start
            if VARIANT == "linear":
                if is_owner:
                    last = _sk_cta_of(tile_end - 1, sk_begin, sk_iters_per_cta, sk_extra_iters)
                    for peer in range(sk_cta + 1, last + 1):
                        acc = _fold(sk_flags, sk_partials, peer, acc, BM, BN, NUM_THREADS)
                    _store_tile(dw, ws_ptr, acc, g, m0, n0, K, NG, True, BM, BN, VEC_C, VARIANT, GDC_WAIT)
                else:
                    _publish(sk_flags, sk_partials, sk_cta, acc, BM, BN, NUM_THREADS)
            elif VARIANT == "tree":
                owner = _sk_cta_of(tile_start, sk_begin, sk_iters_per_cta, sk_extra_iters)
                last = _sk_cta_of(tile_end - 1, sk_begin, sk_iters_per_cta, sk_extra_iters)
                local = sk_cta - owner
                count = last - owner + 1
                active = True
                for rnd in range(0, sk_tree_rounds):
                    stride = 1 << rnd
                    if active:
                        if local % (2 * stride) == 0:
                            if local + stride < count:
                                acc = _fold(sk_flags, sk_partials, sk_cta + stride, acc, BM, BN, NUM_THREADS)
                        else:
                            # local % (2 * stride) == stride: hand the running sum up and leave.
                            _publish(sk_flags, sk_partials, sk_cta, acc, BM, BN, NUM_THREADS)
                            active = False
                if is_owner:
                    _store_tile(dw, ws_ptr, acc, g, m0, n0, K, NG, True, BM, BN, VEC_C, VARIANT, GDC_WAIT)
            else:
                whole = is_owner & (seg_end == tile_end)
                _store_tile(dw, ws_ptr, acc, g, m0, n0, K, NG, whole, BM, BN, VEC_C, VARIANT, GDC_WAIT)
            it = seg_end


def dot_precision(spec, target) -> str:
    """``_mac``'s INPUT_PRECISION: Triton's ``input_precision``, or ``tf32_via_registers`` (tf32 with
    the operands transposed through registers) where tf32 runs on wgmma / MFMA, i.e. on an arch
    without ``tf32_mma_sync`` (compile.py builds tf32 on mma.sync there)."""
    prec = spec.precision or "ieee"
    return "tf32_via_registers" if prec == "tf32" and not target.tf32_mma_sync else prec


def constexprs(spec, target) -> dict:
    c = {
        "BM": spec.bm,
        "BN": spec.bn,
        "BK": spec.bk,
        "IS_3D": spec.spatial_dims == 3,
        "POINTWISE": spec.pointwise,
        "VEC_C": spec.vec_c,
        "VEC_K": spec.vec_k,
        "INPUT_PRECISION": dot_precision(spec, target),
        "VARIANT": spec.variant,
        # NVIDIA: keep x in L1 (neighbouring taps re-read shifted windows of the same rows).
        # AMD: default policy; an L1 hint there pulled hidden kernargs into the gfx950 object.
        "X_CACHE": ".ca" if target.backend == "cuda" else "",
    }
    # an atomic launch starts while dW's memset runs and waits for it before writing dW
    c["GDC_WAIT"] = target.dependent_launch and dw_zeroed_before_launch(spec.variant)
    if spec.family == "wgrad_sk":
        c["MODE"] = spec.mode
        c["NUM_THREADS"] = spec.num_warps * target.wave_size
    return c

