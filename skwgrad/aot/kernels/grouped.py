"""Grouped convolution wgrad with few channels per group (``grouped``): GB groups packed into one
MMA tile, block-diagonal.

With C and K per group small (ResNeXt: 8), a tile of the generic kernel is one group's K x
(Z*Y*X*C): almost all padding, and every x load is C channels out of a G*C-channel row. Here a
tile covers GB consecutive groups as if they were one group of GB*C input and GB*K output
channels: the packed problem ``G' = G / GB, C' = GB * C, K' = GB * K`` has the same x and dy
memory layout (the channels of consecutive groups are adjacent), so the dense split-K main loop
(``wgrad._mac``) runs on it unchanged, with loads GB times wider. Its product holds the wanted
blocks on the diagonal (output channel of group j x input channel of group j) and cross-group
terms off it; the epilogue stores the diagonal blocks only, into ``dW[g, k, z, y, x, c]``. The
MMA does GB times the useful work, which the matrix units have to spare at these sizes.

G % GB == 0 (``KernelSpec.check_problem``), so G' * C' = G * C and the packed rows have the real
row stride. Epilogues as in ``wgrad``: direct (ks_count = 1), atomic (fp32 dW), two_stage (split s
stores its replica s of dW whole, zeros included; the Stage-2 reduce sums them in order),
workspace (every split adds into one f32 replica, zero at rest; the Stage-2 reduce casts it and
zeroes it again: not deterministic). The grid is split-major over the packed problem's tiles, as
``wgrad_splitk``.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from skwgrad.abi.spec import dw_zeroed_before_launch
from skwgrad.aot.kernels.wgrad import _mac, _tile_origin, dot_precision


@triton.jit
def grouped_wgrad(
    dy, x, dw,
    N, G, C, K, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
    stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
    ws_ptr, ws_bytes, ks_iters, ks_count,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GB: tl.constexpr, IS_3D: tl.constexpr,
    VEC_C: tl.constexpr, VEC_K: tl.constexpr, INPUT_PRECISION: tl.constexpr, VARIANT: tl.constexpr,
    X_CACHE: tl.constexpr, GDC_WAIT: tl.constexpr,
):  # fmt: skip
    G2 = G // GB
    C2 = C * GB
    K2 = K * GB
    TAPS = Z * Y * X
    NG2 = TAPS * C2
    num_tiles = G2 * tl.cdiv(K2, BM) * tl.cdiv(NG2, BN)
    iters_per_tile = tl.cdiv(N * Do * Ho * Wo, BK)
    pid = tl.program_id(0)
    tile = pid % num_tiles
    split = pid // num_tiles
    it0 = split * ks_iters
    it1 = tl.minimum(it0 + ks_iters, iters_per_tile)
    g2, m0, n0 = _tile_origin(tile, G2, K2, NG2, BM, BN)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    acc = _mac(
        acc, dy, x, g2, m0, n0, it0, it1,
        N, G2, C2, K2, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
        stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
        BM, BN, BK, IS_3D, False, VEC_C, VEC_K, INPUT_PRECISION, X_CACHE,
    )  # fmt: skip
    # -- epilogue: the diagonal blocks (row group == column group) into dW[g, k, tap, c] ---------
    offs_m = m0 + tl.arange(0, BM)
    offs_n = n0 + tl.arange(0, BN)
    gl_m = offs_m // K
    k = offs_m % K
    tap = offs_n // C2
    cc = offs_n % C2
    gl_n = cc // C
    c = cc % C
    mask = (offs_m < K2)[:, None] & (offs_n < NG2)[None, :] & (gl_m[:, None] == gl_n[None, :])
    g = g2 * GB + gl_m
    offs = ((g * K + k) * TAPS)[:, None] * C + (tap * C + c)[None, :]
    offs = tl.where(mask, offs, 0)
    if VARIANT == "direct":
        tl.store(dw + offs, acc.to(dw.dtype.element_ty), mask=mask)
    elif VARIANT == "atomic":
        if GDC_WAIT:  # launched while dW's memset runs (abi.spec.dw_zeroed_before_launch)
            gdc_wait()
        tl.atomic_add(dw + offs, acc, mask=mask, sem="relaxed")
    elif VARIANT == "workspace":  # every split adds into the one f32 replica (zero at rest; Stage-2 resets it)
        tl.atomic_add(ws_ptr + offs, acc, mask=mask, sem="relaxed")
    else:  # two_stage: every element of replica `split` is stored by exactly one tile
        tl.store(ws_ptr + split * (G * K * TAPS * C) + offs, acc, mask=mask)


def constexprs(spec, target) -> dict:
    """``KernelSpec`` fields of the grouped family: bm/bn/bk the tile of the packed problem,
    block = GB (groups per tile), vec_c / vec_k the vector widths of C' = GB*C and K' = GB*K."""
    return {
        "BM": spec.bm,
        "BN": spec.bn,
        "BK": spec.bk,
        "GB": spec.block,
        "IS_3D": spec.spatial_dims == 3,
        "VEC_C": spec.vec_c,
        "VEC_K": spec.vec_k,
        "INPUT_PRECISION": dot_precision(spec, target),
        "VARIANT": spec.variant,
        "X_CACHE": ".ca" if target.backend == "cuda" else "",
        "GDC_WAIT": target.dependent_launch and dw_zeroed_before_launch(spec.variant),
    }
