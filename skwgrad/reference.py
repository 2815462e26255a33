"""float64 numpy reference for wgrad, in skwgrad's layouts (x ``N [D] H W G C``, dy
``N [Do] Ho Wo G K``, dW ``G K [Z] Y X C``). Used by tests, ``run-from-cache --verify`` and the
GPU checks; slow but obviously right: one batched matmul per filter tap."""

from __future__ import annotations

import numpy as np

from skwgrad.abi.conv import ConvProblem


def wgrad_reference(p: ConvProblem, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dW in float64, shaped ``p.dw_shape``."""
    x = np.asarray(x, dtype=np.float64).reshape(p.n, p.di, p.hi, p.wi, p.g, p.c)
    dy = np.asarray(dy, dtype=np.float64).reshape(p.n, p.do, p.ho, p.wo, p.g, p.k)
    pads = [(0, 0)] + [(lo, hi) for lo, hi in zip(p.pad_lo, p.pad_hi)] + [(0, 0), (0, 0)]
    xp = np.pad(x, pads)
    rows = dy.reshape(-1, p.g, p.k).transpose(1, 2, 0)  # G, K, R
    dw = np.empty((p.g, p.k, p.z, p.y, p.x, p.c), dtype=np.float64)
    sd, sh, sw = p.stride
    dd, dh, dwl = p.dilation
    for kz in range(p.z):
        for ky in range(p.y):
            for kx in range(p.x):
                d0, h0, w0 = kz * dd, ky * dh, kx * dwl
                xs = xp[:, d0 : d0 + sd * (p.do - 1) + 1 : sd, h0 : h0 + sh * (p.ho - 1) + 1 : sh,
                        w0 : w0 + sw * (p.wo - 1) + 1 : sw]  # fmt: skip
                cols = xs.reshape(-1, p.g, p.c).transpose(1, 0, 2)  # G, R, C
                dw[:, :, kz, ky, kx, :] = np.matmul(rows, cols)
    return dw.reshape(p.dw_shape)


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| in float64; NaN/inf in ``out`` give inf."""
    out = np.asarray(out, dtype=np.float64)
    if not np.all(np.isfinite(out)):
        return float("inf")
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(out - ref) / (denom if denom else 1.0))


# Bounds on the relative error against the float64 reference, per input dtype (fp32 by its
# precision). They hold for random normal inputs and any reduction length: accumulation is f32,
# so the error is dominated by the rounding of the output to its dtype.
TOLERANCE = {"fp16": 2e-3, "bf16": 1e-2, "fp32_tf32": 2e-3, "fp32_ieee": 1e-5, "fp32": 1e-5}


def tolerance(dtype: str, dw_dtype: str, precision: str = "") -> float:
    if dtype == "fp32":
        return TOLERANCE[f"fp32_{precision or 'ieee'}"]
    if dw_dtype == "fp32":
        return {"fp16": 1e-3, "bf16": 1e-3}[dtype]
    return TOLERANCE[dtype]
