"""The offline ``skwgrad plan`` report of one launch, no GPU: the launch geometry, workspace and
kernarg block of the kernel the launcher's own selection picked (``skwgrad.launcher.offline``
selects; this module only reports and checks the request's options).

The report refuses what the launcher would: every scalar kernarg is packed through the launcher's
own packer (``skwgrad.abi.kernargs.Packer``), so a value that does not fit its 4-byte i32 slot
(``stride=2**40``, a pool of 3e9 CTAs) is an error here too, not a table row.
"""

from __future__ import annotations

from dataclasses import asdict

from skwgrad.abi.arch import get_arch
from skwgrad.abi.conv import ConvProblem
from skwgrad.abi.kernargs import I32_MAX, SK_REDUCTIONS, SPLITK_EPILOGUES, Packer, declaration
from skwgrad.abi.launch import spec_geometry
from skwgrad.abi.spec import KernelSpec
from skwgrad.abi.streamk import MODES
from skwgrad.errors import AbiError, ProblemError

from skwgrad.abi.policy import REDUCTION_CHOICES, SK_ONLY, SPLITK_ONLY, STREAMK_CHOICES  # noqa: E402
_FAKE_PTR = 1 << 20  # an aligned non-null address: pointers are the launcher's, not the plan's


def check_options(streamk, reduction, streamk_ctas, ks_count):
    if streamk not in STREAMK_CHOICES:
        raise ProblemError(f"streamk={streamk!r}: use one of {', '.join(STREAMK_CHOICES)}")
    if reduction not in REDUCTION_CHOICES:
        raise ProblemError(f"reduction={reduction!r}: use one of {', '.join(REDUCTION_CHOICES)}")
    if streamk == "off" and reduction in SK_ONLY:
        raise ProblemError(f"wgrad epilogue {reduction!r} is not one of {', '.join(SPLITK_EPILOGUES)} (it is a stream-K reduction; split-K takes {', '.join(SPLITK_EPILOGUES)})")
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


def launch_report(problem: ConvProblem, *, arch: str, spec: KernelSpec, pool: int = 0, ks_count: int = 1,
                  selection: dict | None = None) -> dict:  # fmt: skip
    """The report of one launch of ``spec``: GEMM view, partition, grid, workspace (with the flags
    the kernel really publishes: ``KernelSpec.flags_per_cta``) and the kernarg block, packed by the
    launcher's own packer."""
    a = get_arch(arch)
    family, variant, mode = spec.family, spec.variant, spec.mode
    bm, bn, bk = spec.bm, spec.bn, spec.bk
    flags = spec.flags_per_cta(a.wave_size)
    geo = spec_geometry(problem, spec, threads=spec.threads_per_cta(a.wave_size), pool=pool, ks_count=ks_count)
    decl = spec.kernarg_decl
    slots, size = decl.layout()
    kernargs, values = [], {}
    for s in slots:
        name = s.arg.name
        if s.arg.reserved:
            value = "0 (reserved)"
        elif s.arg.kind == "ptr":
            value = f"<{name}>"
            values[name] = _FAKE_PTR
        elif s.arg.kind == "tmap":  # encoded by the driver at plan time from this request
            req = next(r for r in geo.tensor_maps if f"{r.operand}_map" == name)
            value = (f"<tensor map: {req.mode} {req.operand} {list(req.shape)}"
                     + (f", corners {list(req.lower)}/{list(req.upper)}, strides {list(req.element_strides[1:-1])}" if req.lower else "")
                     + ">")  # fmt: skip
            values[name] = bytes(128)
        elif name in geo.scalars:
            value = values[name] = geo.scalars[name]
        else:
            raise AbiError(f"kernarg {name} has no value in the launch geometry")
        kernargs.append({"name": name, "offset": s.offset, "size": s.arg.size, "value": value})
    try:  # the launcher's packer: what it refuses, the plan refuses
        Packer(decl, 2 if geo.tensor_maps else 0).pack(values)
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
        "kernel": {"family": family, "variant": variant, "mode": mode, "tile": f"{bm}x{bn}x{bk}", "num_warps": spec.num_warps,
                   "flags_per_cta": flags, "label": spec.label},  # fmt: skip
        "selection": selection or {},
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
            # the kernel starts while that memset runs and waits for it before writing dW
            "dependent_launch": ws.zero_dw and a.dependent_launch,
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
        for alt in sel.get("alternatives", [])[1:]:
            how = f"pool {alt['pool']}" if alt["family"] == "wgrad_sk" else f"ks_count {alt['ks_count']}"
            how += f" pool {alt['pool']}" if alt["family"] == "wgrad_tma" and alt.get("pool") else ""
            pred = f"{alt['predicted_us']:.1f} us" if alt.get("predicted_us") is not None else "not modelled"
            out.append(f"  next    {alt['label']} {how}{' padded ' + alt['padded'] if alt.get('padded') else ''}: {pred}")
        if sel.get("rejected"):
            out.append(f"  rejected {len(sel['rejected'])}: " + "; ".join(sel["rejected"][:3]) + ("; ..." if len(sel["rejected"]) > 3 else ""))
    pad = r.get("padding")
    if pad:
        copies = ", ".join(f"{c['operand']} ({c['rows']} rows {c['width']}->{c['dst_pitch']}, {c['grid']} CTAs)" for c in pad["copies"])
        out.append(f"padding   {pad['what']}: the kernel runs {pad['padded_problem']}; copies {copies}; "
                   f"{pad['staging_bytes']} bytes of staging in scratch; {pad['predicted_us']:.1f} us predicted")
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
        f"zero dW: {('yes, the kernel a dependent launch' if w['dependent_launch'] else 'yes') if w['zero_dw'] else 'no'}; stage-2: "
        + (f"{w['stage2_replicas']} replica(s), {w['stage2_grid']} CTAs" if w["stage2_replicas"] else "none")
    )
    out.append(f"kernargs  {r['kernargs']['bytes']} bytes (+ the compiler's trailing scratch pointers, null)")
    from skwgrad.clikit import table

    rows = [(a["offset"], a["size"], a["name"], a["value"]) for a in r["kernargs"]["args"]]
    out += ["  " + line for line in table(rows, ["offset", "size", "name", "value"], align=["right", "right", "left", "left"]).splitlines()]
    return "\n".join(out)
