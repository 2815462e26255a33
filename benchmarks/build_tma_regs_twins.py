"""Add to a cache the register twin of every 4-warp wgrad_tma kernel of up to 64x128 it holds (the
two-CTA build, ``max_regs = TMA_TWO_CTA_REGS``, of a one-CTA kernel, and the one-CTA build of a
two-CTA one), so ``gpu_tma_regs_ab.py`` can time each launch beside its twin (CPU; run after
``skwgrad compile-all --corpus``).

    python benchmarks/build_tma_regs_twins.py --cache C
"""

from __future__ import annotations

import argparse
import dataclasses


def twins(cache, arch, three=False):
    from skwgrad.abi.spec import TMA_THREE_CTA_REGS, TMA_TWO_CTA_REGS

    out = set()
    for e in cache.find(arch, family="wgrad_tma"):
        s = e.spec
        if three:  # the three-CTA build of every two-CTA 64x64 kernel (80 registers: 64x128 does not compile)
            if s is not None and s.max_regs == TMA_TWO_CTA_REGS and (s.bm, s.bn) == (64, 64):
                out.add(dataclasses.replace(s, max_regs=TMA_THREE_CTA_REGS))
        # 4 MMA warps + the producer: 256 threads; the 64x256 4-tap tile needs 154+ registers
        elif s is not None and s.num_warps == 4 and s.bm * s.bn <= 64 * 128 and s.max_regs in (0, TMA_TWO_CTA_REGS):
            out.add(dataclasses.replace(s, max_regs=0 if s.max_regs else TMA_TWO_CTA_REGS))
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--three", action="store_true", help="the three-CTA (80-register) builds of the two-CTA 64x64 kernels instead")
    a = ap.parse_args()
    from skwgrad.aot.build import build
    from skwgrad.aot.sweep import SweepItem
    from skwgrad.cache.store import Cache

    want = twins(Cache(a.cache), a.arch, a.three)
    summary = build([SweepItem(a.arch, s) for s in want], Cache(a.cache), progress=False, retry_failed=True)
    print(f"{len(want)} register twins: {len(summary.built)} built, {len(summary.failed)} failed")


if __name__ == "__main__":  # the build's worker processes re-import this file
    main()
