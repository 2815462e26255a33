"""The offline ``skwgrad plan`` report: one launch resolved for an arch table entry, no GPU."""

from __future__ import annotations

from dataclasses import asdict

from skwgrad.abi.arch import get_arch
from skwgrad.abi.conv import parse_problem
from skwgrad.abi.kernargs import declaration
from skwgrad.abi.launch import launch_geometry
from skwgrad.abi.spec import KernelSpec
from skwgrad.abi.streamk import resolve_pool


def plan_report(problem_text, *, arch, tile, streamk, reduction, streamk_ctas, ks_count) -> dict:
    a = get_arch(arch)
    problem = parse_problem(problem_text)
    bm, bn, bk = tile
    if streamk == "off":
        family, variant, mode, pool = "wgrad", reduction or "two_stage", "", 0
    else:
        family, variant, mode = "wgrad_sk", reduction or "linear", streamk
        declaration(family, variant)
        pool = resolve_pool(streamk_ctas, a.compute_units, variant)
        ks_count = 1
    problem.tiling(bm, bn, bk)  # the tile itself, checked first
    # Flags per CTA follow from the kernel the sweep builds for this tile (its warps), never an option.
    warps = a.default_warps(bm, bn, bk)
    flags = KernelSpec(family, variant, "bf16", "bf16" if variant != "atomic" else "fp32", bm=bm, bn=bn, bk=bk,
                       num_warps=warps, mode=mode).flags_per_cta(a.wave_size)  # fmt: skip
    geo = launch_geometry(
        problem, family, variant, bm=bm, bn=bn, bk=bk, mode=mode, pool=pool,
        ks_count=ks_count, flags_per_cta=flags or None,
    )  # fmt: skip
    decl = declaration(family, variant)
    slots, size = decl.layout()
    kernargs = []
    for s in slots:
        name = s.arg.name
        if s.arg.reserved:
            value = "0 (reserved)"
        elif s.arg.kind == "ptr":
            value = f"<{name}>"
        else:
            value = geo.scalars[name]
        kernargs.append({"name": name, "offset": s.offset, "size": s.arg.size, "value": value})
    p = problem
    ws = geo.workspace
    return {
        "problem": p.describe(),
        "arch": {"name": a.name, "compute_units": a.compute_units, "part": a.part},
        "kernel": {"family": family, "variant": variant, "mode": mode, "tile": f"{bm}x{bn}x{bk}", "num_warps": warps,
                   "flags_per_cta": flags},  # fmt: skip
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
    out.append(f"  {'offset':>6}  {'size':>4}  {'name':<18} value")
    for a in r["kernargs"]["args"]:
        out.append(f"  {a['offset']:>6}  {a['size']:>4}  {a['name']:<18} {a['value']}")
    return "\n".join(out)
