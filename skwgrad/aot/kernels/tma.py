"""Dense 2-D and 3-D wgrad on sm_90 from TMA im2col + wgmma, written in Gluon (family ``wgrad_tma``).

    dW[k, ky, kx, c] = sum over rows r = (n, ho, wo) of dy[r, k] * x[n, ho*s - p + ky*d, wo*s - p + kx*d, c]
    (3-D: rows r = (n, do, ho, wo), taps (kz, ky, kx), x[n, do*s - p + kz*d, ...])

Per filter tap this is a plain GEMM, dW_tap (K x C) = dy^T (K x R) @ im2col_tap(x) (R x C), and
Hopper's TMA builds both operands with no address arithmetic in the loop:
- dy is the 2-D ``[R, K]`` matrix: a tiled box ``[BK, BM]`` of rows r0..r0+BK, read by the wgmma
  transposed from shared memory (``permute``: an MN-major A operand);
- x at one tap is TMA's im2col mode over the 4-D ``[N, H, W, C]`` tensor (3-D problems: the 5-D
  ``[N, D, H, W, C]``, ``DIMS`` = 3): BK consecutive output positions (crossing rows, planes and
  images), CB channels, shifted by the tap; positions outside the image load as zero, which is
  exactly the padding; the traversal strides are the conv strides.
A tile is BM output channels x NT filter taps x CB input channels (BN = NT * CB): NT > 1 shares one
dy box among NT taps, which pays on few input channels. One producer warp (``warp_specialize``)
feeds a ring of STAGES slots through empty/ready mbarrier pairs; the MMA warps wait for a full
slot, issue its wgmma and free the slot of the one before.

Grouped convolutions run packed (``skwgrad.abi.launch.tma_groups_per_tile``): GB consecutive groups
count as one of CP = GB*C input and KP = GB*K output channels, whose channels are adjacent in x and
dy, so the same two boxes load them; the tile's product holds the wanted blocks on its diagonal
(output channel of group j x input channel of group j) and the epilogue stores only those. A dense
problem is one group (GB = 1, CP = C, KP = K). The boxes start at the packed group's channels.

Split-K over the BK-row blocks (``ks_iters`` per split, ``total_iters`` in all), with the wgrad
epilogues (``skwgrad.abi.launch.tma_geometry``): ``direct`` (one split) stores dW in its dtype,
``atomic`` adds fp32 into dW, ``workspace`` adds fp32 into the zeroed replica at ``ws_ptr`` that
the Stage-2 reduce turns into dW (and zeroes again). Every store is a 16-byte vector.

Measured on the H200 before it came into the product (benchmarks/mainloop, runs R1-R3): the
warp-specialized loop 0.96x cuDNN best-of over 43 dense rows, 1.18-1.34x the product's other
kernels on 3x3 layers of 128-2048 channels.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.language.extra.cuda import gdc_wait

from skwgrad.abi.spec import TMA_PRODUCER_WARPS

EPILOGUES = {"direct": 0, "atomic": 1, "workspace": 2}
WALKS = {"": 0, "persistent": 1, "streamk": 2}  # one CTA per unit; a pool walking units; a pool walking iteration ranges
PRODUCER_WARPS = gl.constexpr(TMA_PRODUCER_WARPS)
PRODUCER_REGS = gl.constexpr(24)  # the producer warp only issues TMA: its registers go to the MMA warps


@gluon.constexpr_function
def _warps_per_cta(BM, num_warps):
    # The wgmma atom is 4 warps along M; more warps go along M while M has rows for them.
    w = [4, 1]
    while w[0] * w[1] != num_warps:
        if BM > 16 * w[0]:
            w[0] *= 2
        else:
            w[1] *= 2
    return w


@gluon.constexpr_function
def _instr_n(BM, BN, num_warps):
    m_reps = -(-BM // 16)
    n_reps = -(-num_warps // m_reps)
    max_n = max(BN // n_reps, 8)
    n = 256
    while n > max_n or BN % n != 0:
        n -= 8
    return n


@gluon.constexpr_function
def _mma_layout(BM, BN, num_warps):
    """The wgmma accumulator layout of a BM x BN tile (16-bit operands: k = 16)."""
    return gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=_warps_per_cta(BM, num_warps), instr_shape=[16, _instr_n(BM, BN, num_warps), 16]
    )


@gluon.constexpr_function
def _store_layout(BM, BN, num_warps, out_bits):
    """The layout a tile is stored (or added) from. 32-bit dW (fp32 stores, every atomic and
    workspace add): the wgmma layout itself, pairs of channels per thread, so no round trip through
    shared memory and no CTA barriers between the loop and the stores (H200 run T7: 4-34% faster per
    launch, most on short reductions with an fp32 dW). 16-bit dW: 8 channels per thread, 16-byte
    stores; its pairs would be 4-byte stores (T7: 25% slower on a bf16 direct launch)."""
    if out_bits == 32:
        return _mma_layout(BM, BN, num_warps)
    n = min(32, BN // 8)
    return gl.BlockedLayout([1, 8], [32 // n, n], [num_warps, 1], [1, 0])


@gluon.jit
def _tap_offsets(t, TAPS, win, DIMS: gl.constexpr):
    """The im2col offsets (kz, ky, kx, each times its dilation) of filter tap ``t``; a tap past
    TAPS (in the last tap group) loads the last tap (its columns are masked at the end)."""
    DoHoWo, HoWo, Wo, YX, X, stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w = win
    tap = gl.minimum(t, TAPS - 1)
    if DIMS == 3:
        kz = tap // YX
        tyx = tap - kz * YX
    else:
        kz = 0
        tyx = tap
    ky = tyx // X
    return (kz * dil_d).to(gl.int16), (ky * dil_h).to(gl.int16), ((tyx - ky * X) * dil_w).to(gl.int16)


@gluon.jit
def _tile_taps(t0, TAPS, win, NT: gl.constexpr, DIMS: gl.constexpr):
    """The offsets of a tile's NT taps (up to 4), once per tile: the compiler does not hoist a
    division out of the ring loop (it could trap), and the producer warp's own instructions set
    the pace of the loop when its stages are short."""
    o0 = _tap_offsets(t0, TAPS, win, DIMS)
    o1 = o0
    o2 = o0
    o3 = o0
    if NT >= 2:
        o1 = _tap_offsets(t0 + 1, TAPS, win, DIMS)
    if NT >= 4:
        o2 = _tap_offsets(t0 + 2, TAPS, win, DIMS)
        o3 = _tap_offsets(t0 + 3, TAPS, win, DIMS)
    return o0, o1, o2, o3


@gluon.jit
def _row_position(r0, win, DIMS: gl.constexpr):
    """The output position (n, do, ho, wo) of reduction row r0 (do = 0 in 2-D)."""
    DoHoWo, HoWo, Wo, YX, X, stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w = win
    if DIMS == 3:
        n = r0 // DoHoWo
        rem = r0 - n * DoHoWo
        do = rem // HoWo
        rem = rem - do * HoWo
    else:
        n = r0 // HoWo
        rem = r0 - n * HoWo
        do = 0
    ho = rem // Wo
    return n, do, ho, rem - ho * Wo


@gluon.jit
def _next_position(n, do, ho, wo, step_h, step_w, Wo, Ho, Do):
    """The output position BK rows on (step_h, step_w = BK // Wo, BK % Wo): additions, and a
    division only where the step wraps a plane or an image."""
    wo = wo + step_w
    ho = ho + step_h
    if wo >= Wo:
        wo = wo - Wo
        ho = ho + 1
    if ho >= Ho:
        do = do + ho // Ho
        ho = ho % Ho
        if do >= Do:
            n = n + do // Do
            do = do % Do
    return n, do, ho, wo


@gluon.jit
def _load_stage(dy_desc, x_desc, a_bufs, b_bufs, ready, empty, i, r0, m0, c0, pos, offs, win,
                STAGES: gl.constexpr, NT: gl.constexpr, DIMS: gl.constexpr):  # fmt: skip
    """The producer's step ``i`` of the ring: wait for its slot to be free, arm its barrier and issue
    the TMA loads of rows r0.. : one dy box and one im2col box per tap of the tile (the NT taps
    side by side along N share the dy box). ``pos``: row r0's output position (n, do, ho, wo);
    ``offs``: the tile's tap offsets (``_tile_taps``); ``win``: the window scalars (DoHoWo, HoWo,
    Wo, YX, X, then stride, padding and dilation, each d, h, w; the d ones trivial for DIMS 2)."""
    DoHoWo, HoWo, Wo, YX, X, stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w = win
    n, do, ho, wo = pos
    CB: gl.constexpr = x_desc.block_type.shape[1]
    # expect_tx takes a constant: taps past TAPS (the last group) reload the last tap (masked at the end)
    nbytes: gl.constexpr = dy_desc.block_type.nbytes + NT * x_desc.block_type.nbytes
    s = i % STAGES
    mbarrier.wait(empty.index(s), (i // STAGES) & 1)
    bar = ready.index(s)
    h = ho * stride_h - pad_h  # where the window of row r0 starts
    w = wo * stride_w - pad_w
    mbarrier.expect(bar, nbytes)
    tma.async_load(dy_desc, [r0, m0], bar, a_bufs.index(s))
    for q in gl.static_range(NT):
        oz, oy, ox = offs[q]
        dst = b_bufs.index(s).slice(q * CB, CB, dim=1)
        if DIMS == 3:
            tma.async_load_im2col(x_desc, [n, do * stride_d - pad_d, h, w, c0], [oz, oy, ox], bar, dst)
        else:
            tma.async_load_im2col(x_desc, [n, h, w, c0], [oy, ox], bar, dst)


@gluon.jit
def _steps(win, BK: gl.constexpr, DIMS: gl.constexpr):
    """(Ho, Do, step_h, step_w): the output planes' height and the images' depth (1 in 2-D), and one
    BK-row step as whole output rows and the columns left over. Recomputed per segment (independent
    divisions): kept across a walk they spill the producer's 24 registers."""
    DoHoWo, HoWo, Wo, YX, X, stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w = win
    step_h = BK // Wo
    if DIMS == 3:
        Do = DoHoWo // HoWo
    else:
        Do = 1
    return HoWo // Wo, Do, step_h, BK - step_h * Wo


@gluon.jit
def _run_rows(dy_desc, x_desc, a_bufs, b_bufs, ready, empty, i, k0, n_it, m0, c0, t0, TAPS, win,
              STAGES: gl.constexpr, BK: gl.constexpr, NT: gl.constexpr, DIMS: gl.constexpr):  # fmt: skip
    """The producer's steps i.. of one unit or segment: n_it row blocks from block k0 of the tile at
    tap t0, output channels m0 and input channels c0. The tile's tap offsets and the first row's
    position are computed once (about as many divisions as one step took before); each step moves the
    position on by additions."""
    DoHoWo, HoWo, Wo, YX, X, stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w = win
    Ho, Do, step_h, step_w = _steps(win, BK, DIMS)
    offs = _tile_taps(t0, TAPS, win, NT, DIMS)
    n, do, ho, wo = _row_position(k0 * BK, win, DIMS)
    for j in range(n_it):
        _load_stage(dy_desc, x_desc, a_bufs, b_bufs, ready, empty, i + j, (k0 + j) * BK, m0, c0, (n, do, ho, wo), offs, win,
                    STAGES, NT, DIMS)  # fmt: skip
        n, do, ho, wo = _next_position(n, do, ho, wo, step_h, step_w, Wo, Ho, Do)
    return i + n_it


@gluon.jit
def _mma_stage(a_bufs, b_bufs, ready, empty, acc, i, first, STAGES: gl.constexpr):
    """The MMA warps' step ``i`` of the ring: wait for its slot to be full, issue its wgmma, and
    (unless ``first`` of a segment) free the slot of the step before."""
    s = i % STAGES
    mbarrier.wait(ready.index(s), (i // STAGES) & 1)
    acc = warpgroup_mma(a_bufs.index(s).permute((1, 0)), b_bufs.index(s), acc, is_async=True)
    # at most this wgmma in flight: the one before it is done and its slot free to refill
    acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
    mbarrier.arrive(empty.index((i + STAGES - 1) % STAGES), count=1, pred=not first)
    return acc


@gluon.jit
def _producer(dy_desc, x_desc, a_bufs, b_bufs, ready, empty, it0, n_it, m0, c0, t0, TAPS, win,
              STAGES: gl.constexpr, BK: gl.constexpr, NT: gl.constexpr, DIMS: gl.constexpr):  # fmt: skip
    """One warp: the TMA loads of this CTA's unit, step by step through the ring."""
    _run_rows(dy_desc, x_desc, a_bufs, b_bufs, ready, empty, 0, it0, n_it, m0, c0, t0, TAPS, win, STAGES, BK, NT, DIMS)


@gluon.jit
def _consumer(a_bufs, b_bufs, ready, empty, n_it, STAGES: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
              num_warps: gl.constexpr):  # fmt: skip
    """The MMA warpgroups: the wgmma chain of this CTA's unit."""
    acc = gl.zeros([BM, BN], gl.float32, layout=_mma_layout(BM, BN, num_warps))
    for i in range(n_it):
        acc = _mma_stage(a_bufs, b_bufs, ready, empty, acc, i, i == 0, STAGES)
    return warpgroup_mma_wait(num_outstanding=0, deps=(acc,))


@gluon.jit
def _epilogue(acc, out, g2, mm0, cc0, t0, K, C, KP, CP, TAPS, EPILOGUE: gl.constexpr, BM: gl.constexpr,
              BN: gl.constexpr, CB: gl.constexpr, num_warps: gl.constexpr):  # fmt: skip
    """dW[o, tap, c] of the tile's diagonal blocks (row i: packed output channel mm0 + i; column j:
    tap t0 + j // CB, packed input channel cc0 + j % CB; a row and a column of one group): stored
    in ``out``'s dtype (direct, one split) or added in fp32 (atomic into dW, workspace into the
    replica). dW is [G*K, taps, C]: output channel o = g2*KP + mm holds its group's C channels."""
    out_layout: gl.constexpr = _store_layout(BM, BN, num_warps, out.dtype.element_ty.primitive_bitwidth)
    mm = mm0 + gl.arange(0, BM, layout=gl.SliceLayout(1, out_layout))
    j = gl.arange(0, BN, layout=gl.SliceLayout(0, out_layout))
    tap = t0 + j // CB
    cc = cc0 + j % CB
    # C % 8 == 0 (16-byte vectors per group): each 8-channel vector is one group's, contiguous,
    # aligned, one mask
    gc = gl.max_constancy(cc // C, 8)
    col = gl.max_contiguous(gl.multiple_of(tap * C + cc - gc * C, 8), 8)
    col_ok = gl.max_constancy((cc < CP) & (tap < TAPS), 8)
    mask = (mm < KP)[:, None] & col_ok[None, :] & ((mm // K)[:, None] == gc[None, :])
    row = gl.multiple_of((g2 * KP + mm) * (TAPS * C), 8)
    ptr = out + row[:, None] + col[None, :]
    if EPILOGUE == 0:
        gl.store(ptr, gl.convert_layout(acc.to(out.dtype.element_ty), out_layout), mask=mask)
    else:
        if EPILOGUE == 1:  # atomic: launched while dW's memset runs (abi.spec.dw_zeroed_before_launch; sm_90 has
            gdc_wait()  # abi.arch.dependent_launch), so nothing is added into dW before it is done
        gl.atomic_add(ptr, gl.convert_layout(acc, out_layout), mask=mask, sem="relaxed")


@gluon.jit
def _walk_start(m_tiles, c_tiles, TAPS, ks_iters, total_iters, NT: gl.constexpr, WALK: gl.constexpr):
    """(tap groups, tiles, position, end) of this CTA's walk: both partitions walk the same one. WALK 1 (persistent): positions are work units
    (split-major: unit = split * tiles + tile), this CTA's are pid, pid + grid, ... WALK 2
    (stream-K): positions are global iterations (tile-major: tile * total_iters + k), this CTA's
    are [pid * ks_iters, (pid + 1) * ks_iters): ks_iters is then the iterations per CTA."""
    tap_groups = (TAPS + NT - 1) // NT
    tiles = m_tiles * tap_groups * c_tiles
    pid = gl.program_id(0)
    if WALK == 1:
        return tap_groups, tiles, pid, tiles * ((total_iters + ks_iters - 1) // ks_iters)
    else:
        start = pid * ks_iters
        return tap_groups, tiles, start, gl.minimum(start + ks_iters, tiles * total_iters)


@gluon.jit
def _walk_segment(pos, end, ks_iters, total_iters, tiles, WALK: gl.constexpr):
    """The segment at ``pos``: (tile, first iteration, iterations, next position). A persistent
    unit is one split of one tile; a stream-K segment runs to the end of its tile or of the range."""
    if WALK == 1:
        k0 = (pos // tiles) * ks_iters
        return pos % tiles, k0, gl.minimum(ks_iters, total_iters - k0), pos + gl.num_programs(0)
    else:
        k0 = pos % total_iters
        n = gl.minimum(total_iters - k0, end - pos)
        return pos // total_iters, k0, n, pos + n


@gluon.jit
def _tile_origin(tile, tap_groups, c_tiles, KP, NT: gl.constexpr, BM: gl.constexpr, CB: gl.constexpr):
    """(first tap, packed group, first output channel and first input channel within that group)
    of a tile; tiles run packed group, output-channel block, tap group, input-channel block."""
    rest = tile % (tap_groups * c_tiles)
    mt = tile // (tap_groups * c_tiles)
    m_tiles_pg = (KP + BM - 1) // BM  # output-channel blocks per packed group
    g2 = mt // m_tiles_pg
    return (rest // c_tiles) * NT, g2, (mt - g2 * m_tiles_pg) * BM, (rest % c_tiles) * CB


@gluon.jit
def _walk_producer(dy_desc, x_desc, a_bufs, b_bufs, ready, empty, m_tiles, c_tiles, ks_iters, total_iters, CP, KP, TAPS,
                   win, STAGES: gl.constexpr, BK: gl.constexpr, NT: gl.constexpr, BM: gl.constexpr, WALK: gl.constexpr,
                   DIMS: gl.constexpr):  # fmt: skip
    """The producer warp of a walking CTA (persistent or stream-K): its segments one after the
    other through one ring (a segment's loads start while the MMA warps store the last one)."""
    CB: gl.constexpr = x_desc.block_type.shape[1]
    tap_groups, tiles, pos, end = _walk_start(m_tiles, c_tiles, TAPS, ks_iters, total_iters, NT, WALK)
    i = 0
    while pos < end:
        tile, k0, n_it, nxt = _walk_segment(pos, end, ks_iters, total_iters, tiles, WALK)
        t0, g2, mm0, cc0 = _tile_origin(tile, tap_groups, c_tiles, KP, NT, BM, CB)
        i = _run_rows(dy_desc, x_desc, a_bufs, b_bufs, ready, empty, i, k0, n_it, g2 * KP + mm0, g2 * CP + cc0, t0, TAPS, win,
                      STAGES, BK, NT, DIMS)  # fmt: skip
        pos = nxt


@gluon.jit
def _walk_consumer(a_bufs, b_bufs, ready, empty, out, m_tiles, c_tiles, ks_iters, total_iters, K, C, KP, CP, TAPS,
                   STAGES: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, CB: gl.constexpr, NT: gl.constexpr,
                   EPILOGUE: gl.constexpr, WALK: gl.constexpr, num_warps: gl.constexpr):  # fmt: skip
    """The MMA warps of a walking CTA: per segment, the wgmma chain over its ring slots, then its
    stores (stream-K segments always add: several CTAs may share a tile)."""
    tap_groups, tiles, pos, end = _walk_start(m_tiles, c_tiles, TAPS, ks_iters, total_iters, NT, WALK)
    i = 0
    while pos < end:
        tile, k0, n_it, nxt = _walk_segment(pos, end, ks_iters, total_iters, tiles, WALK)
        t0, g2, mm0, cc0 = _tile_origin(tile, tap_groups, c_tiles, KP, NT, BM, CB)
        acc = gl.zeros([BM, BN], gl.float32, layout=_mma_layout(BM, BN, num_warps))
        for j in range(n_it):
            acc = _mma_stage(a_bufs, b_bufs, ready, empty, acc, i, j == 0, STAGES)
            i += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index((i + STAGES - 1) % STAGES), count=1, pred=n_it > 0)  # the segment's last slot
        _epilogue(acc, out, g2, mm0, cc0, t0, K, C, KP, CP, TAPS, EPILOGUE, BM, BN, CB, num_warps)
        pos = nxt


@gluon.jit
def wgrad_tma(
    dy_desc, x_desc, dw, ws_ptr,
    HoWo, Wo, C, K, CP, KP, X, TAPS, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
    m_tiles, c_tiles, ks_iters, total_iters, DoHoWo, YX, stride_d, pad_d, dil_d,
    STAGES: gl.constexpr, NT: gl.constexpr, EPILOGUE: gl.constexpr, WALK: gl.constexpr, DIMS: gl.constexpr,
    num_warps: gl.constexpr,
):  # fmt: skip
    BK: gl.constexpr = dy_desc.block_type.shape[0]
    BM: gl.constexpr = dy_desc.block_type.shape[1]
    CB: gl.constexpr = x_desc.block_type.shape[1]
    BN: gl.constexpr = NT * CB
    dtype: gl.constexpr = dy_desc.dtype
    win = (DoHoWo, HoWo, Wo, YX, X, stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w)
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES, BK, BM], dy_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES, BK, BN], x_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for q in gl.static_range(STAGES):
        mbarrier.init(ready.index(q), count=1)
        mbarrier.init(empty.index(q), count=1)
        mbarrier.arrive(empty.index(q), count=1)  # every slot starts free
    if WALK != 0:  # a pool of CTAs, each walking its units (persistent) or its iteration range (stream-K)
        out = ws_ptr if EPILOGUE == 2 else dw
        gl.warp_specialize(
            [
                (_walk_consumer, (a_bufs, b_bufs, ready, empty, out, m_tiles, c_tiles, ks_iters, total_iters, K, C, KP, CP,
                                  TAPS, STAGES, BM, BN, CB, NT, EPILOGUE, WALK, num_warps)),
                (_walk_producer, (dy_desc, x_desc, a_bufs, b_bufs, ready, empty, m_tiles, c_tiles, ks_iters, total_iters,
                                  CP, KP, TAPS, win, STAGES, BK, NT, BM, WALK, DIMS)),
            ],
            [PRODUCER_WARPS],
            [PRODUCER_REGS],
        )  # fmt: skip
        for q in gl.static_range(STAGES):
            mbarrier.invalidate(ready.index(q))
            mbarrier.invalidate(empty.index(q))
        return
    tap_groups = (TAPS + NT - 1) // NT
    tiles = m_tiles * tap_groups * c_tiles
    pid = gl.program_id(0)  # split-major: unit = split * tiles + tile
    t0, g2, mm0, cc0 = _tile_origin(pid % tiles, tap_groups, c_tiles, KP, NT, BM, CB)
    it0 = (pid // tiles) * ks_iters
    n_it = gl.minimum(ks_iters, total_iters - it0)
    acc = gl.warp_specialize(
        [
            (_consumer, (a_bufs, b_bufs, ready, empty, n_it, STAGES, BM, BN, num_warps)),
            (_producer, (dy_desc, x_desc, a_bufs, b_bufs, ready, empty, it0, n_it, g2 * KP + mm0, g2 * CP + cc0, t0, TAPS, win,
                         STAGES, BK, NT, DIMS)),
        ],
        [PRODUCER_WARPS],
        [PRODUCER_REGS],
    )  # fmt: skip
    for q in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(q))
        mbarrier.invalidate(empty.index(q))
    if EPILOGUE == 2:
        _epilogue(acc, ws_ptr, g2, mm0, cc0, t0, K, C, KP, CP, TAPS, EPILOGUE, BM, BN, CB, num_warps)
    else:
        _epilogue(acc, dw, g2, mm0, cc0, t0, K, C, KP, CP, TAPS, EPILOGUE, BM, BN, CB, num_warps)


def shared_layout(rows: int, cols: int, dtype_bits: int = 16) -> str:
    """The NVMMASharedLayout Gluon picks by default for a [rows, cols] tile (its repr), the widest
    swizzle a row takes."""
    row_bytes = cols * dtype_bits // 8
    swizzle = 128 if row_bytes % 128 == 0 else 64 if row_bytes % 64 == 0 else 32 if row_bytes % 32 == 0 else 0
    return f"NVMMASharedLayout(swizzle_byte_width={swizzle}, element_bitwidth={dtype_bits}, rank=2)"


def descriptor_types(spec) -> dict[str, str]:
    """The Gluon signature types of the two descriptor parameters of ``spec``'s kernel."""
    cb = spec.tma_channels
    return {
        "dy_desc": f"tensordesc<{spec.dtype}[{spec.bk},{spec.bm}],{shared_layout(spec.bk, spec.bm)}>",
        "x_desc": f"tensordesc_im2col<{spec.dtype}[{spec.bk},{cb}],input_rank={2 + spec.spatial_dims},{shared_layout(spec.bk, cb)}>",
    }


def constexprs(spec) -> dict:
    return {"STAGES": spec.num_stages, "NT": spec.block, "EPILOGUE": EPILOGUES[spec.variant],
            "WALK": WALKS[spec.mode], "DIMS": spec.spatial_dims, "num_warps": spec.num_warps}  # fmt: skip
