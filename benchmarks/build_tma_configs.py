"""Add wgrad_tma kernels of configurations the sweep does not build to a cache, so a timing run
can rank and time them beside the default ones (CPU; run after ``skwgrad compile-all --corpus``).

    python benchmarks/build_tma_configs.py --cache C --config 64x256x64t1w4s4 [--config ...]

Each configuration is built for every 16-bit dtype and dW dtype the sweep gives a TMA tile (direct,
and workspace or atomic), 2-D, one CTA per work unit (``--mode persistent`` for the persistent walk).
"""

from __future__ import annotations

import argparse
import re

from skwgrad.abi.spec import KernelSpec

_CONFIG = re.compile(r"(\d+)x(\d+)x(\d+)t(\d+)w(\d+)s(\d+)$")


def specs(config: str, mode: str = "") -> list[KernelSpec]:
    from skwgrad.aot.sweep import dw_dtypes, tma_max_regs

    m = _CONFIG.match(config)
    if not m:
        raise SystemExit(f"--config {config!r}: expected BMxBNxBKtTAPSwWARPSsSTAGES, e.g. 64x256x64t1w4s4")
    bm, bn, bk, taps, warps, stages = (int(v) for v in m.groups())
    out = []
    for dtype in ("bf16", "fp16"):
        for dw in dw_dtypes(dtype):
            for variant in ("direct", "workspace" if dw == dtype else "atomic"):
                out.append(KernelSpec("wgrad_tma", variant, dtype, dw, vec_c=8, vec_k=8, bm=bm, bn=bn, bk=bk, num_warps=warps,
                                      num_stages=stages, block=taps, mode=mode, max_regs=tma_max_regs(bm, bn, warps)))  # fmt: skip
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--config", action="append", required=True)
    ap.add_argument("--mode", default="", choices=("", "persistent"))
    a = ap.parse_args()
    build_into(a.cache, a.arch, [s for c in a.config for s in specs(c, a.mode)])


def build_into(cache: str, arch: str, want: list[KernelSpec]) -> None:
    """Build ``want`` for ``arch`` into the cache at ``cache`` (trial kernels beside a default cache)."""
    from skwgrad.aot.build import build
    from skwgrad.aot.sweep import SweepItem
    from skwgrad.cache.store import Cache

    for s in want:
        s.validate()
    summary = build([SweepItem(arch, s) for s in want], Cache(cache), progress=False, retry_failed=True)
    print(f"{len(want)} kernels: {len(summary.built)} built, {len(summary.failed)} failed")
    for f in summary.failed:
        print("failed:", f)


if __name__ == "__main__":  # the build's worker processes re-import this file
    main()
