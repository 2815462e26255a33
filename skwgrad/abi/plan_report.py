"""The offline ``skwgrad plan`` report: one launch resolved for an arch table entry, no GPU.

``streamk="auto"`` (the default, as in ``run-from-cache``) applies the launcher's selection rule
(``skwgrad.launcher.select``, SPEC section 8) to a cache that holds every kernel of the given tile
and a Stage-2 reduce, on the arch's reference CU count with occupancy 1 (the offline view). The
constants below are the launcher's; a test keeps them equal.

The report refuses what the launcher would: every scalar kernarg is packed through the launcher's
own packer (``skwgrad.abi.kernargs.Packer``), so a value that does not fit its 4-byte i32 slot
(``stride=2**40``, a pool of 3e9 CTAs) is an error here too, not a table row.
"""

from __future__ import annotations

from dataclasses import asdict

from skwgrad.abi.arch import get_arch
from skwgrad.abi.conv import ConvProblem, parse_problem
from skwgrad.abi.kernargs import I32_MAX, SK_REDUCTIONS, SPLITK_EPILOGUES, Packer, declaration
from skwgrad.abi.launch import launch_geometry
from skwgrad.abi.spec import KernelSpec
from skwgrad.abi.streamk import MODES, partition, resolve_pool
from skwgrad.errors import AbiError, ProblemError

from skwgrad.abi.policy import (  # noqa: E402  (the launcher's selection uses the same constants)
    AUTO_MODES, AUTO_SK_REDUCTIONS, REDUCTION_CHOICES, SK_MIN_ITERS, SK_ONLY, SPLITK_ONLY, STREAMK_CHOICES,
)  # fmt: skip
_FAKE_PTR = 1 << 20  # an aligned non-null address: pointers are the launcher's, not the plan's


def _check_options(streamk, reduction, streamk_ctas, ks_count):
    if streamk not in STREAMK_CHOICES:
        raise ProblemError(f"streamk={streamk!r}: use one of {', '.join(STREAMK_CHOICES)}")
    if reduction not in REDUCTION_CHOICES:
        raise ProblemError(f"reduction={reduction!r}: use one of {', '.join(REDUCTION_CHOICES)}")
    if streamk == "off" and reduction in SK_ONLY:
        raise ProblemError(f"wgrad epilogue {reduction!r} is not one of {', '.join(SPLITK_EPILOGUES)} (it is a stream-K reduction; split-K takes direct, atomic or two_stage)")
    if streamk in MODES and reduction in SPLITK_ONLY:
        raise ProblemError(f"stream-K reduction {reduction!r} is not one of {', '.join(SK_REDUCTIONS)} (it is a split-K epilogue)")
    if not isinstance(streamk_ctas, int) or isinstance(streamk_ctas, bool):
        raise ProblemError(f"streamk_ctas must be an integer, got {streamk_ctas!r}")
    if ks_count is not None:
        if not isinstance(ks_count, int) or isinstance(ks_count, bool) or ks_count <= 0:
            raise ProblemError(f"ks_count must be a positive integer, got {ks_count!r}")
        if streamk in MODES or reduction in SK_ONLY:
            raise ProblemError("ks_count is a split-K setting; stream-K kernels pin ks_count = 1 (use --streamk off)")
    for name, v in (("streamk_ctas", streamk_ctas), ("ks_count", ks_count)):
        if v is not None and not -(2**31) <= v <= I32_MAX:
            raise ProblemError(f"{name}={v} does not fit the kernels' signed 32-bit arguments (at most {I32_MAX})")


def _streamk_fits(problem: ConvProblem, tile, cus: int, pool: int) -> tuple[bool, str]:
    """The auto rule's stream-K test: few tiles, a long reduction, and SK CTAs in the partition."""
    t = problem.tiling(*tile)
    if t.num_tiles >= cus:
        return False, f"{t.num_tiles} tiles >= {cus} CUs"
    if t.iters_per_tile < SK_MIN_ITERS:
        return False, f"{t.iters_per_tile} iterations per tile < {SK_MIN_ITERS}"
    part = partition(t.num_tiles, t.iters_per_tile, pool)
    if part.sk_ctas == 0:
        return False, "the partition is all data-parallel (sk_ctas = 0)"
    return True, f"{t.num_tiles} tiles < {cus} CUs, {t.iters_per_tile} iterations per tile, sk_ctas = {part.sk_ctas}"


def resolve_choice(problem: ConvProblem, *, tile, cus: int, streamk: str, reduction: str, streamk_ctas: int, ks_count) -> dict:
    """(family, variant, mode, pool, ks_count, reason) as ``select.choose`` would pick them from a
    cache holding every kernel of ``tile``, with occupancy 1."""
    if reduction == "atomic" and problem.dw_dtype != "fp32":
        raise ProblemError(
            f"the atomic reduction accumulates into dW, which must be fp32; this problem's dW is {problem.dw_dtype} "
            f"(add dw_dtype=fp32 to the problem, or use another reduction)"
        )
    want_sk = streamk in MODES or (streamk == "auto" and reduction in SK_ONLY)
    try_sk = want_sk or (streamk == "auto" and ks_count is None and reduction in ("auto", "atomic"))
    notes = []
    if try_sk:
        modes = (streamk,) if streamk in MODES else AUTO_MODES
        reds = (reduction,) if reduction in SK_REDUCTIONS else AUTO_SK_REDUCTIONS
        for red in reds:
            for mode in modes:
                pool = resolve_pool(streamk_ctas, cus, red)
                if want_sk:
                    return {"family": "wgrad_sk", "variant": red, "mode": mode, "pool": pool, "ks_count": 1, "reason": "forced stream-K"}
                ok, why = _streamk_fits(problem, tile, cus, pool)
                if ok:
                    return {"family": "wgrad_sk", "variant": red, "mode": mode, "pool": pool, "ks_count": 1, "reason": why}
                notes.append(why)
    t = problem.tiling(*tile)
    want = ks_count if ks_count is not None else max(1, min(cus // t.num_tiles, t.iters_per_tile))
    if reduction in SPLITK_EPILOGUES:
        variant = reduction
    else:
        variant = "direct" if want == 1 else "two_stage"
    if variant == "direct":
        if ks_count not in (None, 1):
            raise ProblemError("the direct split-K epilogue stores dW once: ks_count must be 1 (use two_stage or atomic)")
        n = 1
    elif ks_count is not None:
        n = ks_count
    else:
        n = want
        if variant == "two_stage":
            n = max(1, min(n, (I32_MAX - 255) // (4 * problem.dw_numel)))
    reason = f"split-K ks_count={n}" + (f" (not stream-K: {'; '.join(dict.fromkeys(notes))})" if notes else "")
    return {"family": "wgrad", "variant": variant, "mode": "", "pool": 0, "ks_count": n, "reason": reason}


def plan_report(problem_text, *, arch, tile, streamk="auto", reduction="auto", streamk_ctas=-1, ks_count=None) -> dict:
    a = get_arch(arch)
    problem = problem_text if isinstance(problem_text, ConvProblem) else parse_problem(problem_text)
    reduction = reduction or "auto"
    _check_options(streamk, reduction, streamk_ctas, ks_count)
    if len(tuple(tile)) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in tile):
        raise ProblemError(f"tile must be (BM, BN, BK) integers, got {tile!r}")
    bm, bn, bk = tile
    problem.tiling(bm, bn, bk)  # positive tile sizes
    choice = resolve_choice(problem, tile=(bm, bn, bk), cus=a.compute_units, streamk=streamk, reduction=reduction,
                            streamk_ctas=streamk_ctas, ks_count=ks_count)  # fmt: skip
    family, variant, mode = choice["family"], choice["variant"], choice["mode"]
    # Flags per CTA follow from the kernel the sweep builds for this tile (its warps), never an option.
    warps = a.default_warps(bm, bn, bk)
    flags = KernelSpec(family, variant, "bf16", "fp32" if variant == "atomic" else "bf16", bm=bm, bn=bn, bk=bk,
                       num_warps=warps, mode=mode).flags_per_cta(a.wave_size)  # fmt: skip
    geo = launch_geometry(
        problem, family, variant, bm=bm, bn=bn, bk=bk, mode=mode, pool=choice["pool"],
        ks_count=choice["ks_count"], flags_per_cta=flags or None,
    )  # fmt: skip
    decl = declaration(family, variant)
    slots, size = decl.layout()
    kernargs, values = [], {}
    for s in slots:
        name = s.arg.name
        if s.arg.reserved:
            value = "0 (reserved)"
        elif s.arg.kind == "ptr":
            value = f"<{name}>"
            values[name] = _FAKE_PTR
        elif name in geo.scalars:
            value = values[name] = geo.scalars[name]
        else:
            raise AbiError(f"kernarg {name} has no value in the launch geometry")
        kernargs.append({"name": name, "offset": s.offset, "size": s.arg.size, "value": value})
    try:  # the launcher's packer: what it refuses, the plan refuses
        Packer(decl).pack(values)
    except AbiError as e:
        raise ProblemError(
            f"{e} (every scalar kernarg is a 4-byte signed integer, at most {I32_MAX}); the launcher "
            f"refuses this launch: {problem.describe()}"
        ) from None
    if geo.workspace.needs_stage2:
        sdecl = declaration("stage2", "reduce")
        Packer(sdecl).pack({"ws_ptr": _FAKE_PTR, "dw": _FAKE_PTR, **geo.stage2_scalars})
    p = problem
    ws = geo.workspace
    return {
        "problem": p.describe(),
        "arch": {"name": a.name, "compute_units": a.compute_units, "part": a.part},
        "kernel": {"family": family, "variant": variant, "mode": mode, "tile": f"{bm}x{bn}x{bk}", "num_warps": warps,
                   "flags_per_cta": flags},  # fmt: skip
        "selection": {"streamk": streamk, "reduction": reduction, "reason": choice["reason"]},
        "gemm": {
            "groups": p.g, "M": p.gemm_m, "N": p.gemm_n, "K": p.gemm_k,
            "output": f"{p.do}x{p.ho}x{p.wo}" if p.spatial_dims == 3 else f"{p.ho}x{p.wo}",
            "gflop": round(p.flops / 1e9, 3),
        },  # fmt: skip
        "tiling": asdict(geo.tiling),
        "partition": asdict(geo.partition) if geo.partition else None,
        "grid": geo.grid,
        "ks_count": geo.ks_count,
        "ks_iters": geo.ks_iters,
        "workspace": {
            "zeroed_bytes": ws.arena_bytes("zeroed"),
            "scratch_bytes": ws.arena_bytes("scratch"),
            "regions": [asdict(r) for r in ws.regions],
            "zero_dw": ws.zero_dw,
            "stage2_replicas": ws.replicas,
            "stage2_reset": ws.stage2_reset,
            "stage2_grid": geo.stage2_grid,
        },
        "kernargs": {"bytes": size, "args": kernargs},
    }


def format_report(r: dict) -> str:
    out = [f"problem   {r['problem']}", f"arch      {r['arch']['name']} ({r['arch']['part']}, {r['arch']['compute_units']} CUs)"]
    k = r["kernel"]
    out.append(f"kernel    {k['family']} / {k['variant']}{' / ' + k['mode'] if k['mode'] else ''}, tile {k['tile']}")
    sel = r.get("selection")
    if sel:
        out.append(f"selection --streamk {sel['streamk']} --reduction {sel['reduction']}: {sel['reason']}")
    g = r["gemm"]
    out.append(f"gemm      G={g['groups']} M={g['M']} N={g['N']} K={g['K']}  (output {g['output']}, {g['gflop']} GFLOP)")
    t = r["tiling"]
    out.append(f"tiles     {t['m_tiles']} x {t['n_tiles']} = {t['num_tiles']}, {t['iters_per_tile']} iterations per tile")
    part = r["partition"]
    if part:
        out.append(
            f"partition pool={part['pool']} dp_tiles={part['dp_tiles']} sk_tiles={part['sk_tiles']} "
            f"sk_ctas={part['sk_ctas']} iters_per_sk_cta={part['iters_per_sk_cta']} extra_iters={part['extra_iters']} "
            f"max_linear_partners={part['max_linear_partners']} tree_rounds={part['tree_rounds']}"
        )
    else:
        out.append(f"split-K   ks_count={r['ks_count']} ks_iters={r['ks_iters']}")
    out.append(f"grid      {r['grid']} CTAs")
    w = r["workspace"]
    regions = ", ".join(f"{x['name']}@{x['arena']}+{x['offset']}:{x['nbytes']}" for x in w["regions"]) or "none"
    out.append(
        f"workspace zeroed {w['zeroed_bytes']} + scratch {w['scratch_bytes']} bytes: {regions}; "
        f"zero dW: {'yes' if w['zero_dw'] else 'no'}; stage-2: "
        + (f"{w['stage2_replicas']} replica(s), {w['stage2_grid']} CTAs" if w["stage2_replicas"] else "none")
    )
    out.append(f"kernargs  {r['kernargs']['bytes']} bytes (+ the compiler's trailing scratch pointers, null)")
    from skwgrad.clikit import table

    rows = [(a["offset"], a["size"], a["name"], a["value"]) for a in r["kernargs"]["args"]]
    out += ["  " + line for line in table(rows, ["offset", "size", "name", "value"], align=["right", "right", "left", "left"]).splitlines()]
    return "\n".join(out)
