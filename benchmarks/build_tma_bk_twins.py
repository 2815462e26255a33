"""Add to a cache the 128-row twin of every wgrad_tma kernel it holds (``bk`` 128 in place of 64,
half the ring slots, at least 2: the same rows in flight), so ``gpu_tma_bk_ab.py`` can time each
launch beside its twin (CPU; run after ``skwgrad compile-all --corpus``).

    python benchmarks/build_tma_bk_twins.py --cache C
"""

from __future__ import annotations

import argparse
import dataclasses

from skwgrad.abi.spec import KernelSpec


def bk_twin(s: KernelSpec) -> KernelSpec:
    """The 128-row twin of a 64-row wgrad_tma kernel."""
    return dataclasses.replace(s, bk=128, num_stages=max(2, s.num_stages // 2))


def twins(cache, arch):
    return sorted({bk_twin(e.spec) for e in cache.find(arch, family="wgrad_tma") if e.spec is not None and e.spec.bk == 64})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--arch", default="sm_90")
    a = ap.parse_args()
    from skwgrad.aot.build import build
    from skwgrad.aot.sweep import SweepItem
    from skwgrad.cache.store import Cache

    want = twins(Cache(a.cache), a.arch)
    summary = build([SweepItem(a.arch, s) for s in want], Cache(a.cache), progress=False, retry_failed=True)
    print(f"{len(want)} 128-row twins: {len(summary.built)} built, {len(summary.failed)} failed")


if __name__ == "__main__":  # the build's worker processes re-import this file
    main()
