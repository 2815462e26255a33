"""The TMA depthwise kernels (``dwconv_tma``) against the window kernels auto took before them, in one pass.

    python benchmarks/gpu_dwconv_tma_ab.py --cache CACHE --corpus SHAPES.csv --out ab.json

Per depthwise row (the timing and verification of ``gpu_fused_ab.run_row``: every launch verified
three times against float64 with dW and the workspace poisoned, medians of event-timed launches in
interleaved rounds, cuDNN beside): ``auto`` and ``window``, the depthwise choice with the
dwconv_tma kernels left out (what auto ran before the family). Below DWCONV_TMA_MIN_CHANNELS,
where auto takes the window kernel, ``tma`` times the family's kernel beside it (the rule's other side).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def entrants(p, cache, arch, cus, occ):
    from skwgrad.abi.launch import dwconv_tma_ks_count
    from skwgrad.launcher.options import LaunchOptions
    from skwgrad.launcher.select import Choice, _special_family_choice, candidates, choose, find_stage2

    auto = choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False)
    out = {"auto": auto}
    stage2 = find_stage2(cache, arch, p.dw_dtype)
    if auto.spec.family == "dwconv_tma":
        tma_keys = frozenset(e.key for e in cache.find(arch, family="dwconv_tma"))
        w = _special_family_choice(p, cache, arch, cus, LaunchOptions(), stage2, tma_keys, occ)
        if w is not None:
            out["window"] = w
    else:  # below DWCONV_TMA_MIN_CHANNELS: the family too, where a kernel of it admits the layer
        for k in sorted(candidates(cache, arch, p, family="dwconv_tma"), key=lambda k: k.label):
            if k.spec.variant == "workspace" and stage2 is None:
                continue
            n = dwconv_tma_ks_count(p, bc=k.spec.bm, taps=k.spec.bn, wt=k.spec.bk, compute_units=cus)
            out["tma"] = Choice(k, ks_count=n, stage2=stage2 if k.spec.variant == "workspace" else None, reason="dwconv_tma below the rule")
            break
    return out


def main():
    from gpu_fused_ab import ab_parser

    a = ab_parser(__doc__).parse_args()

    from compare_auto_tuned import geo
    from gpu_fused_ab import ab_rows

    doc = ab_rows(a, "benchmarks/gpu_dwconv_tma_ab.py", lambda p: (p.c, p.k) == (1, 1) and p.g > 1, entrants,
                  end_to_end=a.end_to_end)
    pairs = [(r["rows"]["window"]["us"], r["rows"]["auto"]["us"]) for r in doc["rows"]
             if r["rows"].get("window", {}).get("us") and r["rows"]["auto"].get("us")]  # fmt: skip
    tma_rows = [r for r in doc["rows"] if r["rows"].get("window")]
    doc["summary"] = {
        "rows": len(doc["rows"]), "all_ok": all(r["all_ok"] for r in doc["rows"]),
        "tma_rows": len(tma_rows), "window_over_tma_geomean": geo([w / t for w, t in pairs]),
        "tma_faster_rows": sum(1 for w, t in pairs if t < w),
        "auto_vs_cudnn_tma_rows": geo([r["cudnn_us"] / r["rows"]["auto"]["us"] for r in tma_rows if r.get("cudnn_us") and r["rows"]["auto"].get("us")]),
        "below_rule_window_over_tma": geo([r["rows"]["auto"]["us"] / r["rows"]["tma"]["us"] for r in doc["rows"]
                                           if r["rows"].get("tma", {}).get("us") and r["rows"]["auto"].get("us")]),
        "api_vs_torch_tma_rows": geo([r["host"]["torch_wall_us"] / r["host"]["api_wall_us"] for r in tma_rows if r.get("host")]),
        "api_alternating_vs_torch_tma_rows": geo([r["host"]["torch_wall_us"] / r["host"]["api_alternating_wall_us"] for r in tma_rows if r.get("host")]),
        "window_vs_cudnn_tma_rows": geo([r["cudnn_us"] / r["rows"]["window"]["us"] for r in tma_rows if r.get("cudnn_us") and r["rows"]["window"].get("us")]),
    }  # fmt: skip
    Path(a.out).write_text(json.dumps(doc, indent=1, default=str))
    print("summary", json.dumps(doc["summary"]))


if __name__ == "__main__":
    main()
