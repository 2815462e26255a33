"""The row-walk depthwise kernels (``dwconv_walk``) against what auto took before them, in one pass.

    python benchmarks/gpu_dwconv_walk_ab.py --cache CACHE --corpus SHAPES.csv --out ab.json

Per depthwise row (the timing and verification of ``gpu_fused_ab.run_row``: every launch verified
against float64 with dW and the workspace poisoned, medians of event-timed launches in interleaved
rounds, cuDNN beside): ``auto``, and ``before``: the depthwise choice with the dwconv_walk kernels
left out (what auto ran before the family). Where auto takes the walk kernel, ``walk_alt`` times
it at the search's split degree nearest the rule's (a check of the split rule); where a walk
kernel admits the layer but the rule (select.DWCONV_WALK_MIN_ROWS) leaves it out, ``walk`` times
it beside (the rule's other side).
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
    from skwgrad.launcher.options import LaunchOptions
    from skwgrad.launcher.select import Choice, _dwconv_walk_search_ks, _family_ks, _special_family_choice, candidates, choose, find_stage2

    auto = choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False)
    out = {"auto": auto}
    stage2 = find_stage2(cache, arch, p.dw_dtype)
    walk_keys = frozenset(e.key for e in cache.find(arch, family="dwconv_walk"))
    before = _special_family_choice(p, cache, arch, cus, LaunchOptions(), stage2, walk_keys, occ)
    if before is not None:
        out["before"] = before
    if auto.spec.family == "dwconv_walk":
        others = [n for n in _dwconv_walk_search_ks(p, auto.kernel, cus) if n != auto.ks_count]
        if others:
            n = min(others, key=lambda n: abs(n - auto.ks_count))
            out["walk_alt"] = Choice(auto.kernel, ks_count=n, stage2=auto.stage2, reason="the rule's neighbour")
        return out
    for k in sorted(candidates(cache, arch, p, family="dwconv_walk"), key=lambda k: k.label):
        if k.spec.variant == "workspace" and stage2 is None:
            continue
        n = _family_ks(p, k.spec, cus)
        out["walk"] = Choice(k, ks_count=n, stage2=stage2 if k.spec.variant == "workspace" else None, reason="walk below the rule")
        break
    return out


def main():
    from gpu_fused_ab import ab_parser

    a = ab_parser(__doc__).parse_args()

    from compare_auto_tuned import geo
    from gpu_fused_ab import ab_rows

    doc = ab_rows(a, "benchmarks/gpu_dwconv_walk_ab.py", lambda p: (p.c, p.k) == (1, 1) and p.g > 1, entrants,
                  end_to_end=a.end_to_end)
    us = lambda r, k: r["rows"].get(k, {}).get("us")  # noqa: E731
    walk_rows = [r for r in doc["rows"] if r["rows"]["auto"].get("family") == "dwconv_walk"]
    doc["summary"] = {
        "rows": len(doc["rows"]), "all_ok": all(r["all_ok"] for r in doc["rows"]), "walk_rows": len(walk_rows),
        "before_over_walk": geo([us(r, "before") / us(r, "auto") for r in walk_rows if us(r, "before") and us(r, "auto")]),
        "walk_faster_rows": sum(1 for r in walk_rows if us(r, "before") and us(r, "auto") and us(r, "auto") < us(r, "before")),
        "alt_over_rule": geo([us(r, "walk_alt") / us(r, "auto") for r in walk_rows if us(r, "walk_alt") and us(r, "auto")]),
        "auto_vs_cudnn_walk_rows": geo([r["cudnn_us"] / us(r, "auto") for r in walk_rows if r.get("cudnn_us") and us(r, "auto")]),
        "before_vs_cudnn_walk_rows": geo([r["cudnn_us"] / us(r, "before") for r in walk_rows if r.get("cudnn_us") and us(r, "before")]),
        "below_rule_auto_over_walk": geo([us(r, "auto") / us(r, "walk") for r in doc["rows"] if us(r, "walk") and us(r, "auto")]),
        "below_rule_rows": sum(1 for r in doc["rows"] if us(r, "walk")),
        "api_vs_torch_walk_rows": geo([r["host"]["torch_wall_us"] / r["host"]["api_wall_us"] for r in walk_rows if r.get("host")]),
    }  # fmt: skip
    Path(a.out).write_text(json.dumps(doc, indent=1, default=str))
    print("summary", json.dumps(doc["summary"]))


if __name__ == "__main__":
    main()
