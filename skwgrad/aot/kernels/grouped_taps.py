"""Grouped convolution wgrad with few channels per group, one group per CTA (``grouped_taps``).

    dW[g, k, t, c] = sum over rows r = (n, [do,] ho, wo) of dy[r, g*K + k] * x[n, at r shifted by tap t, g*C + c]

The packed kernels (``grouped``, and ``wgrad_tma`` with packed groups) put GB groups into one MMA
tile and keep its diagonal blocks: at 16 channels a group the matrix units do 4-8x the useful
work. Here a CTA owns ONE group and computes that group's own GEMM, K x (taps x C), with K and C
(the spec's bm and bn) as small as 8-32, so the MMA is mma.sync / MFMA sized to the group:
- the filter taps are the dot's batch: x at a step's BK rows is loaded as [NT, BK, C] (a thread
  owns one row and all of its taps, so a row's division and base address are computed once per
  thread, not per tap), dy's [K, BK] block is broadcast over the taps;
- the taps go in two power-of-two batches (``skwgrad.abi.spec.grouped_taps_batches``: 3x3 = 8 + 1,
  5x5 = 16 + 16, 3x3x3 = 16 + 16), so few slots are empty; a slot past the filter fails the bounds
  test;
- every mask is constant along a thread's 16-byte channel vector (no channel test: C is exact),
  which Triton's axis analysis needs to keep the vector loads (and cp.async on sm_90).
Split-K over the BK-row steps: grid = G x ks_count, group-major; epilogues as in ``grouped``:
``direct`` (one split, dW in its dtype), ``atomic`` (fp32 adds into dW), ``workspace`` (fp32 adds
into the zeroed replica that the Stage-2 reduce casts into dW and zeroes again).

Measured on the H200 before it came into the product: ``benchmarks/grouped_bdot_proto.py`` (v3).
"""

import triton
import triton.language as tl

from skwgrad.abi.spec import grouped_taps_batches
from skwgrad.aot.kernels.wgrad import dot_precision


@triton.jit
def _taps_mac(acc, a, x, row_off, di, hi, wi, r_ok, t0, g, c, Di, Hi, Wi, Y, X, dil_d, dil_h, dil_w,
              GC, CG: tl.constexpr, TAPS: tl.constexpr, NT: tl.constexpr, IS_3D: tl.constexpr,
              INPUT_PRECISION: tl.constexpr):  # fmt: skip
    """acc[t - t0] += a @ x at tap t, for the NT taps t0.. of the flattened filter (x loaded [NT, BK, CG])."""
    t = t0 + tl.arange(0, NT)
    kx = t % X
    ky = (t // X) % Y
    kz = t // (X * Y)
    outside = 1 << 20  # a slot past the filter fails the bounds test
    ky_d = tl.where(t < TAPS, ky * dil_h, outside)[:, None, None]
    kx_d = (kx * dil_w)[:, None, None]
    tap_off = ((kz * dil_d * Hi + ky * dil_h) * Wi + kx * dil_w) * GC
    tap_off = tap_off[:, None, None] + g * CG + c
    hh = hi + ky_d
    ww = wi + kx_d
    m = r_ok & (hh >= 0) & (hh < Hi) & (ww >= 0) & (ww < Wi)
    if IS_3D:
        dd = di + (kz * dil_d)[:, None, None]
        m = m & (dd >= 0) & (dd < Di)
    b = tl.load(x + row_off + tap_off, mask=m, other=0.0)
    a3 = tl.broadcast_to(a[None, :, :], (NT, a.shape[0], a.shape[1]))
    return tl.dot(a3, b, acc, input_precision=INPUT_PRECISION)


@triton.jit
def _taps_store(acc, dw, ws_ptr, g, k, c, t0, CG: tl.constexpr, KG: tl.constexpr, TAPS: tl.constexpr,
                NT: tl.constexpr, VARIANT: tl.constexpr):  # fmt: skip
    t = (t0 + tl.arange(0, NT))[:, None, None]
    kk = k[None, :, None]
    offs = ((g * KG + kk) * TAPS + t) * CG + c
    mask = (t < TAPS) & (kk >= 0)  # [NT, KG, 1]: constant along c, so the adds stay 16-byte vectors
    if VARIANT == "direct":
        tl.store(dw + offs, acc.to(dw.dtype.element_ty), mask=mask)
    elif VARIANT == "atomic":
        tl.atomic_add(dw + offs, acc, mask=mask, sem="relaxed")
    else:  # workspace: every split adds into the one f32 replica (zero at rest; Stage-2 resets it)
        tl.atomic_add(ws_ptr + offs, acc, mask=mask, sem="relaxed")


@triton.jit
def grouped_taps_wgrad(
    dy, x, dw,
    N, G, C, K, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
    stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
    ws_ptr, ws_bytes, ks_iters, ks_count,
    CG: tl.constexpr, KG: tl.constexpr, BK: tl.constexpr, TAPS: tl.constexpr, NT1: tl.constexpr, NT2: tl.constexpr,
    IS_3D: tl.constexpr, INPUT_PRECISION: tl.constexpr, VARIANT: tl.constexpr,
):  # fmt: skip
    # C and K (runtime) equal CG and KG: KernelSpec.check_problem refuses any other problem.
    pid = tl.program_id(0)
    g = pid % G
    split = pid // G
    GC = G * CG  # x's row stride, a multiple of CG: the 16-byte vectors stay provable
    GK = G * KG
    HoWo = Ho * Wo
    P = N * Do * HoWo
    REST: tl.constexpr = TAPS - NT1
    c = tl.arange(0, CG)[None, None, :]
    k = tl.arange(0, KG)
    acc1 = tl.zeros([NT1, KG, CG], dtype=tl.float32)
    acc2 = tl.zeros([NT2, KG, CG], dtype=tl.float32)
    r0 = split * ks_iters * BK
    for it in range(ks_iters):
        r = r0 + it * BK + tl.arange(0, BK)
        r_ok = r < P
        nd = r // HoWo
        rem = r - nd * HoWo
        ho = rem // Wo
        wo = rem - ho * Wo
        hi = ho * stride_h - pad_h
        wi = wo * stride_w - pad_w
        if IS_3D:
            n = nd // Do
            do = nd - n * Do
            di = do * stride_d - pad_d
            row = ((n * Di + di) * Hi + hi) * Wi + wi
        else:
            di = hi  # unused
            row = (nd * Hi + hi) * Wi + wi
        a = tl.load(dy + (r * GK + g * KG)[None, :] + k[:, None], mask=r_ok[None, :], other=0.0)
        row_off = (row * GC)[None, :, None]
        rok = r_ok[None, :, None]
        di3 = di[None, :, None]
        hi3 = hi[None, :, None]
        wi3 = wi[None, :, None]
        acc1 = _taps_mac(acc1, a, x, row_off, di3, hi3, wi3, rok, 0, g, c, Di, Hi, Wi, Y, X, dil_d, dil_h, dil_w,
                         GC, CG, TAPS, NT1, IS_3D, INPUT_PRECISION)  # fmt: skip
        if REST > 0:
            acc2 = _taps_mac(acc2, a, x, row_off, di3, hi3, wi3, rok, NT1, g, c, Di, Hi, Wi, Y, X, dil_d, dil_h, dil_w,
                             GC, CG, TAPS, NT2, IS_3D, INPUT_PRECISION)  # fmt: skip
    _taps_store(acc1, dw, ws_ptr, g, k, c, 0, CG, KG, TAPS, NT1, VARIANT)
    if REST > 0:
        _taps_store(acc2, dw, ws_ptr, g, k, c, NT1, CG, KG, TAPS, NT2, VARIANT)


def constexprs(spec, target) -> dict:
    """``KernelSpec`` fields of the family: bm / bn the exact KG and CG per group, bk the rows a
    step, block the filter's taps."""
    nt1, nt2 = grouped_taps_batches(spec.block)
    return {
        "CG": spec.bn,
        "KG": spec.bm,
        "BK": spec.bk,
        "TAPS": spec.block,
        "NT1": nt1,
        "NT2": nt2,
        "IS_3D": spec.spatial_dims == 3,
        "INPUT_PRECISION": dot_precision(spec, target),
        "VARIANT": spec.variant,
    }
