"""Add trial depthwise window configurations to a cache, so ``gpu_dw_configs_ab.py`` can time them
beside the shipped window kernel and auto's pick (CPU; run after ``skwgrad compile-all --corpus``).

    python benchmarks/build_dw_configs.py --cache C --corpus SHAPES.csv --config 7:win7r2:32x32x4 --config 5:win7r5:32x16x4

A configuration is ``X:mode:BCxBPxWARPS[:vVEC]``: for every 2-D depthwise row of filter width X whose
stride and dilation along W are the mode's, the window kernel of that mode with BC channels per
CTA, BP strips a step and WARPS warps, in the row's dtypes and auto's epilogue (workspace for a
16-bit dW, atomic for fp32). VEC, the channel vector, defaults to 16 bytes of the dtype.
"""

from __future__ import annotations

import argparse
import csv


def config_spec(cfg: str, p, variant: str):
    """The ``KernelSpec`` of configuration ``cfg`` for problem ``p``, or None where it does not apply."""
    from skwgrad.abi.launch import dwconv_window
    from skwgrad.abi.spec import DTYPE_BYTES, KernelSpec

    parts = cfg.split(":")
    x, mode, shape = int(parts[0]), parts[1], parts[2]
    bc, bp, warps = (int(v) for v in shape.split("x"))
    widest = 16 // DTYPE_BYTES[p.dtype]
    vec = min(int(parts[3][1:]), widest) if len(parts) > 3 else widest
    win = dwconv_window(mode)
    if p.spatial_dims != 2 or (p.c, p.k) != (1, 1) or p.x != x or p.stride[2] != win.sw or p.dilation[2] != win.dl:
        return None
    if p.g % vec:
        return None
    return KernelSpec(
        "dwconv", variant, p.dtype, p.dw_dtype, spatial_dims=2, vec_c=vec, vec_k=vec, bm=bc, bn=x, bk=bp,
        num_warps=warps, num_stages=1, precision="ieee" if p.dtype == "fp32" else "", mode=mode,
    )  # fmt: skip


def default_variant(p) -> str:
    return "workspace" if p.dw_dtype == p.dtype != "fp32" else "atomic"


def depthwise_rows(paths):
    from skwgrad.abi.conv import from_row

    for path in paths:
        with open(path) as f:
            for row in csv.DictReader(f):
                p = from_row(row)
                if (p.c, p.k) == (1, 1) and p.g > 1:
                    yield row["name"], p


def build_trials(config_spec, what: str) -> None:
    """The command line of a trial builder (this file, build_walk_configs.py): for every depthwise row of
    the corpora and every ``--config``, ``config_spec(cfg, problem, variant)`` (None: it does not apply),
    built into ``--cache`` for ``--arch``."""
    ap = argparse.ArgumentParser(description=what)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--corpus", action="append", required=True)
    ap.add_argument("--config", action="append", required=True)
    ap.add_argument("--arch", default="sm_90")
    a = ap.parse_args()
    from skwgrad.aot.build import build
    from skwgrad.aot.sweep import SweepItem
    from skwgrad.cache.store import Cache

    cache = Cache(a.cache)
    want = set()
    for _, p in depthwise_rows(a.corpus):
        for cfg in a.config:
            s = config_spec(cfg, p, default_variant(p))
            if s is not None:
                want.add(s)
    summary = build([SweepItem(a.arch, s) for s in sorted(want, key=lambda s: s.label)], cache, progress=False, retry_failed=True)
    print(f"{len(want)} trial kernels: {len(summary.built)} built, {len(summary.failed)} failed")
    for f in summary.failed:
        print("failed:", f)


if __name__ == "__main__":  # the build's worker processes re-import this file
    build_trials(config_spec, __doc__.splitlines()[0])
