"""wgrad_tma launches at one CTA an SM against their two-CTA twins (``max_regs``), in one pass.

    python benchmarks/gpu_tma_regs_ab.py --cache CACHE --corpus SHAPES.csv --out ab.json

Per 16-bit 2-D row (the timing and verification of ``gpu_fused_ab.run_row``: every launch verified
three times against float64 with dW and the workspace poisoned, medians of event-timed launches in
interleaved rounds, cuDNN beside): ``auto``; ``before``, auto with the two-CTA kernels left out
(what it ran before they were the default's); unless ``--before-only``, the model's best-ranked
launches of the one-CTA 4-warp TMA kernels that have a twin in the cache (``o1_<n>``), each twin at
the same split degree or pool (``o2_<n>``) and, for a split launch, at twice the degree
(``o2x2_<n>``: the twin fits twice the CTAs an SM).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def entrants(p, cache, arch, cus, occ, top, before_only=False, base_regs=0, twin_regs=None, exclude_regs=None):
    from skwgrad.abi.conv import ConvProblem  # noqa: F401
    from skwgrad.abi.launch import spec_geometry
    from skwgrad.abi.spec import TMA_TWO_CTA_REGS
    from skwgrad.errors import ProblemError
    from skwgrad.launcher.select import Choice, all_choices, choose

    twin_regs = TMA_TWO_CTA_REGS if twin_regs is None else twin_regs
    per_sm = {0: 1, 128: 2, 80: 3}
    from skwgrad.launcher.plan import Kernel

    auto = choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False)
    out = {"auto": auto}
    # before: auto without the kernels of max_regs ``exclude_regs`` (default: every several-CTA build)
    left_out = frozenset(e.key for e in cache.find(arch, family="wgrad_tma") if e.spec is not None and e.spec.max_regs
                         and (exclude_regs is None or e.spec.max_regs == exclude_regs))  # fmt: skip
    if base_regs == 0 or exclude_regs is not None:
        out["before"] = choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False, exclude=left_out)
    if before_only:
        return out
    twin_of = {}
    for e in cache.find(arch, family="wgrad_tma"):
        if e.spec is not None and e.spec.max_regs == twin_regs:
            twin_of[dataclasses.replace(e.spec, max_regs=base_regs)] = e
    n = 0
    for c in all_choices(p, cache, arch=arch, cus=cus, occupancy=occ):
        if n >= top:
            break
        s = c.spec
        if s.family != "wgrad_tma" or s.max_regs != base_regs or s not in twin_of:
            continue
        tw = Kernel.from_entry(twin_of[s], cache)
        out[f"o1_{n}"] = c
        out[f"o2_{n}"] = Choice(tw, pool=c.pool, ks_count=c.ks_count, stage2=c.stage2, reason="two-CTA twin")
        if s.variant != "direct":
            try:
                steps = spec_geometry(p, s, pool=c.pool, ks_count=c.ks_count).tiling.iters_per_tile
            except ProblemError:  # a channel-padded launch: its geometry is the padded problem's
                steps = 0
            more = per_sm[twin_regs] / per_sm[base_regs]  # the twin fits this many times the CTAs an SM
            ks2 = max(c.ks_count + 1, round(more * c.ks_count))
            if ks2 <= steps:
                out[f"o2x2_{n}"] = Choice(tw, pool=round(more * c.pool) if c.pool else 0, ks_count=ks2, stage2=c.stage2,
                                          reason="twin, as many more CTAs as fit")  # fmt: skip
        n += 1
    return out


def main():
    from gpu_fused_ab import ab_parser

    ap = ab_parser(__doc__, top=3)
    ap.add_argument("--before-only", action="store_true", help="time auto, before and cuDNN only")
    ap.add_argument("--base-regs", type=int, default=0, help="the o1 launches' max_regs (0: the one-CTA builds)")
    ap.add_argument("--twin-regs", type=int, default=128, help="the o2 twins' max_regs (128: two CTAs an SM, 80: three)")
    ap.add_argument("--exclude-regs", type=int, default=None, help="before leaves out only the kernels of this max_regs")
    a = ap.parse_args()

    from compare_auto_tuned import geo
    from gpu_fused_ab import ab_rows

    keep = lambda p: p.dtype != "fp32" and p.spatial_dims == 2 and (p.c, p.k) != (1, 1)  # noqa: E731
    doc = ab_rows(a, "benchmarks/gpu_tma_regs_ab.py", keep,
                  lambda p, cache, arch, cus, occ: entrants(p, cache, arch, cus, occ, a.top, a.before_only, a.base_regs,
                                                            a.twin_regs, a.exclude_regs),
                  end_to_end=a.end_to_end)  # fmt: skip
    same, double, best = [], [], []
    for r in doc["rows"]:
        t = {k: v.get("us") for k, v in r["rows"].items() if v.get("us")}
        for k in [k for k in t if k.startswith("o1_")]:
            i = k[3:]
            if f"o2_{i}" in t:
                same.append(t[k] / t[f"o2_{i}"])
            if f"o2x2_{i}" in t:
                double.append(t[k] / t[f"o2x2_{i}"])
        o1 = [v for k, v in t.items() if k.startswith("o1_")]
        o2 = [v for k, v in t.items() if k.startswith("o2")]
        if o1 and o2:
            best.append(min(o1) / min(o2))
    timed = [r for r in doc["rows"] if r["rows"].get("before", {}).get("us") and r["rows"]["auto"].get("us")]
    pair = [(r["rows"]["before"]["us"], r["rows"]["auto"]["us"], r.get("cudnn_us")) for r in timed]
    doc["regs"] = {"base": a.base_regs, "twin": a.twin_regs, "before_leaves_out": a.exclude_regs}
    grouped = [x for x, r in zip(pair, timed) if ",g=" in r["problem"]]
    host = [r["host"] for r in doc["rows"] if r.get("host")]
    doc["summary"] = {
        "rows": len(doc["rows"]), "all_ok": all(r["all_ok"] for r in doc["rows"]),
        "api_vs_torch_wall": geo([h["torch_wall_us"] / h["api_wall_us"] for h in host]) if host else None,
        "op_vs_torch_wall": geo([h["torch_wall_us"] / h["op_wall_us"] for h in host if h.get("op_wall_us")]) if host else None,
        "before_over_auto": geo([b / a for b, a, _ in pair]), "auto_faster_rows": sum(a < b for b, a, _ in pair),
        "auto_slower_5pct_rows": sum(a > 1.05 * b for b, a, _ in pair), "pairs": len(pair),
        "auto_vs_cudnn": geo([c / a for _, a, c in pair if c]), "before_vs_cudnn": geo([c / b for b, _, c in pair if c]),
        "auto_vs_cudnn_grouped": geo([c / a for _, a, c in grouped if c]), "before_vs_cudnn_grouped": geo([c / b for b, _, c in grouped if c]),
        "o1_over_o2_same_launch": geo(same), "same_launch_pairs": len(same), "o2_faster_same": sum(x > 1 for x in same),
        "o1_over_o2_twice_ctas": geo(double), "twice_pairs": len(double), "o2_faster_twice": sum(x > 1 for x in double),
        "best_o1_over_best_o2": geo(best), "rows_o2_best_faster": sum(x > 1 for x in best),
    }  # fmt: skip
    Path(a.out).write_text(json.dumps(doc, indent=1, default=str))
    print("summary", json.dumps(doc["summary"]))


if __name__ == "__main__":
    main()
