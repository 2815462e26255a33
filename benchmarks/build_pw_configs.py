"""Add pointwise (1x1) Triton wgrad kernels of tiles the sweep does not build to a cache, so a
timing run can rank and time them beside the default ones (CPU; run after ``skwgrad compile-all``).

    python benchmarks/build_pw_configs.py --cache C --config 256x64x64w8s3 [--config ...]

Each configuration is built for bf16 input with both dW dtypes the default builds: split-K direct,
workspace (bf16 dW) or atomic (fp32 dW), and the dp_sk stream-K workspace kernel; 2-D, pointwise
addressing, 16-byte vectors on both operands. bm is the output-channel (K) side of the tile, bn the
input-channel (C) side: one 256x64 tile covers a 64 -> 256 layer whole, so each reduction row of x
and dy is read once instead of once per output-channel block.
"""

from __future__ import annotations

import argparse
import re

from skwgrad.abi.spec import KernelSpec

_CONFIG = re.compile(r"(\d+)x(\d+)x(\d+)w(\d+)s(\d+)$")


def specs(config: str, dtypes=("bf16",)) -> list[KernelSpec]:
    m = _CONFIG.match(config)
    if not m:
        raise SystemExit(f"--config {config!r}: expected BMxBNxBKwWARPSsSTAGES, e.g. 256x64x64w8s3")
    bm, bn, bk, warps, stages = (int(v) for v in m.groups())
    out = []
    for dtype in dtypes:
        vec = 16 // (2 if dtype != "fp32" else 4)
        for dw in (dtype, "fp32"):
            common = dict(spatial_dims=2, pointwise=True, vec_c=vec, vec_k=vec, bm=bm, bn=bn, bk=bk, num_warps=warps, num_stages=stages)
            for variant in ("direct", "workspace" if dw == dtype else "atomic"):
                out.append(KernelSpec("wgrad", variant, dtype, dw, **common))
            out.append(KernelSpec("wgrad_sk", "workspace", dtype, dw, mode="dp_sk", **common))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--config", action="append", required=True)
    ap.add_argument("--dtype", action="append", default=None)
    a = ap.parse_args()
    from build_tma_configs import build_into

    build_into(a.cache, a.arch, [s for c in a.config for s in specs(c, tuple(a.dtype or ("bf16",)))])


if __name__ == "__main__":  # the build's worker processes re-import this file
    main()
