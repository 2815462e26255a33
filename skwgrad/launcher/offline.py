"""``skwgrad plan``: what the launcher would run for a problem, without a GPU.

The launcher's own selection (``skwgrad.launcher.select.choose``) picks from a cache: the user's
cache (``--cache``), or the kernels ``compile-all`` would build for the problem (an offline
``SpecCache`` the caller fills from the sweep). The arch's reference CU count stands in for the
device's, and occupancy is estimated from each kernel's threads, shared memory and registers
(``skwgrad.abi.costmodel.offline_occupancy``). The report is the chosen launch's
(``skwgrad.abi.plan_report.launch_report``), with the model's prediction, the next-ranked
candidates and what was rejected.
"""

from __future__ import annotations

import itertools

from skwgrad.abi import narrow
from skwgrad.abi.arch import get_arch
from skwgrad.abi.conv import DTYPE_BYTES, ConvProblem, parse_problem
from skwgrad.abi.kernargs import SK_REDUCTIONS, SPLITK_EPILOGUES
from skwgrad.abi.launch import stage2_spec
from skwgrad.abi.plan_report import check_options, launch_report
from skwgrad.abi.spec import KernelSpec
from skwgrad.abi.streamk import MODES
from skwgrad.errors import AbiError
from skwgrad.abi.costmodel import padding_us
from skwgrad.launcher import select as S
from skwgrad.launcher.options import LaunchOptions

ALTERNATIVES = 4  # candidates listed (the pick first)


def plan(problem_text, *, arch: str, cache, tile=None, streamk="auto", reduction="auto", streamk_ctas=-1, ks_count=None) -> dict:
    a = get_arch(arch)
    problem = problem_text if isinstance(problem_text, ConvProblem) else parse_problem(problem_text)
    reduction = reduction or "auto"
    check_options(streamk, reduction, streamk_ctas, ks_count)
    if tile is not None:
        tile = tuple(tile)
        problem.tiling(*tile)  # positive tile sizes
    o = LaunchOptions(streamk=streamk, reduction=reduction, streamk_ctas=streamk_ctas, tile=tile, ks_count=ks_count)
    choice = S.choose(problem, cache, arch=arch, cus=a.compute_units, options=o, use_tuned=False)
    alternatives, rejected = [choice], []
    if choice.predicted_us is not None:
        ranking = S.rank_choices(problem, cache, arch=arch, cus=a.compute_units, options=o)
        alternatives = ranking.choices[:ALTERNATIVES]
        rejected = [str(r) for r in ranking.rejected]
    selection = {
        "streamk": streamk, "reduction": reduction, "reason": choice.reason,
        "predicted_us": choice.predicted_us, "occupancy": choice.occupancy or None,
        "alternatives": [{"label": c.kernel.label, "family": c.spec.family, "pool": c.pool, "ks_count": c.ks_count,
                          "predicted_us": c.predicted_us,
                          **({"padded": c.padding.describe()} if c.padding is not None else {})} for c in alternatives],
        "rejected": rejected,
    }  # fmt: skip
    if choice.padding is None:
        return launch_report(problem, arch=arch, spec=choice.spec, pool=choice.pool, ks_count=choice.ks_count, selection=selection)
    pad = choice.padding  # the kernel runs the padded problem; the copies and their staging come first
    r = launch_report(pad.padded, arch=arch, spec=choice.spec, pool=choice.pool, ks_count=choice.ks_count, selection=selection)
    r["problem"] = problem.describe()
    r["padding"] = {
        "padded_problem": pad.padded.describe(), "what": pad.describe(), "staging_bytes": pad.staging_bytes,
        "offsets": dict(pad.offsets), "predicted_us": padding_us(pad, arch), "pad_kernels": [k.label for k in choice.pad_kernels],
        "copies": [{"operand": c.operand, "dtype": c.dtype, "grid": c.grid, **c.scalars()} for c in pad.copies],
        "launches": [{"operands": list(pl.operands), "grid": pl.grid, "split": pl.split} for pl in pad.launches],
    }  # fmt: skip
    r["workspace"]["scratch_bytes"] = pad.scratch_bytes(r["workspace"]["scratch_bytes"])
    return r


def every_kernel(problem: ConvProblem, arch: str, tiles=None) -> list[KernelSpec]:
    """Every split-K epilogue and stream-K mode x reduction at ``tiles`` (default: the arch's
    default tiles), at the widest channel vectors that admit the problem, plus the Stage-2 reduce:
    the kernels a forced request could run once built (``--preset full`` with the request's
    filters), whether or not a preset holds them."""
    a = get_arch(arch)
    prec = problem.precision if problem.dtype == "fp32" else ""
    w = 16 // DTYPE_BYTES[problem.dtype]
    widths = [v for v in (w, w // 2, w // 4, w // 8, 1) if v >= 1]
    tiles = [tuple(t) for t in tiles] if tiles else [(bm, bn, bk) for bm, bn, bk, _ in a.default_tiles]
    out = []
    for (bm, bn, bk), vc, vk in itertools.product(tiles, widths, widths):
        base = dict(dtype=problem.dtype, dw_dtype=problem.dw_dtype, spatial_dims=problem.spatial_dims, pointwise=problem.is_pointwise,
                    vec_c=vc, vec_k=vk, bm=bm, bn=bn, bk=bk, num_warps=a.default_warps(bm, bn, bk), num_stages=a.default_stages,
                    precision=prec)  # fmt: skip
        kinds = [("wgrad", v, "") for v in SPLITK_EPILOGUES] + [("wgrad_sk", r, m) for m in MODES for r in SK_REDUCTIONS]
        for family, variant, mode in kinds:
            try:
                spec = KernelSpec(family, variant, mode=mode, **base)
            except AbiError:
                continue  # (atomic with a half-precision dW, a pointwise 3-D kernel, ...)
            if narrow.admits(spec, problem):
                out.append(spec)
    out = narrow.widest(out, problem)
    try:
        out.append(stage2_spec(problem.dw_dtype))
    except AbiError:
        pass
    return out
