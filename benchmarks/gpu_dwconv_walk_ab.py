"""The row-walk depthwise kernels (``dwconv_walk``) against the launch auto takes without them, in one pass.

    python benchmarks/gpu_dwconv_walk_ab.py --cache CACHE --corpus SHAPES.csv --out ab.json [--end-to-end]

Per depthwise row (the timing and verification of ``gpu_fused_ab.run_row``: every launch verified
against float64 with dW and the workspace poisoned, medians of event-timed launches in interleaved
rounds, cuDNN beside): ``auto``; ``before``, the depthwise choice with the dwconv_walk kernels left
out (auto without the family); and, where a walk kernel admits the layer, ``walk`` at the family's
split rule (the same launch as auto where auto takes it) and ``walk_alt`` at the search's degree
nearest the rule's (a check of the split rule); trial configurations a cache also holds
(``build_walk_configs.py``: 5x5, 7x7) as ``walk1``, ``walk2``, ... at the split rule. The summary splits the rows at PROPOSED_MIN_ROWS
output rows, the threshold of benchmarks/proposals/dwconv_walk_auto.diff (the rule that would have
auto take the family): the speedup of the walk kernel over ``before`` on each side.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

PROPOSED_MIN_ROWS = 48


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
    from skwgrad.aot.sweep import DWCONV_WALK_CONFIG

    # the sweep's configuration first (``walk``), then trial ones (benchmarks/build_walk_configs.py) as walk1, walk2, ...
    c = DWCONV_WALK_CONFIG
    shipped = lambda s: (s.bm, s.bn, s.block, s.vec_c) == (c["bm"], c["bn"], c["block"], c["vec"])  # noqa: E731
    walks = sorted((k for k in candidates(cache, arch, p, family="dwconv_walk") if k.spec.variant != "workspace" or stage2 is not None),
                   key=lambda k: (not shipped(k.spec), k.label))  # fmt: skip
    for i, k in enumerate(walks):
        st2 = stage2 if k.spec.variant == "workspace" else None
        n = _family_ks(p, k.spec, cus)
        out[f"walk{i or ''}"] = Choice(k, ks_count=n, stage2=st2, reason="the family's split rule")
        others = [m for m in _dwconv_walk_search_ks(p, k, cus) if m != n]
        if others and i == 0:
            m = min(others, key=lambda m: abs(m - n))
            out["walk_alt"] = Choice(k, ks_count=m, stage2=st2, reason="the rule's neighbour")
    return out


def _best_walk(r) -> float | None:
    """The fastest verified walk launch of a row (``walk``, ``walk1``, ..., ``walk_alt``)."""
    ts = [v["us"] for k, v in r["rows"].items() if k.startswith("walk") and v.get("us")]
    return min(ts) if ts else None


def main():
    from gpu_fused_ab import ab_parser

    a = ab_parser(__doc__).parse_args()

    from compare_auto_tuned import geo
    from gpu_fused_ab import ab_rows

    doc = ab_rows(a, "benchmarks/gpu_dwconv_walk_ab.py", lambda p: (p.c, p.k) == (1, 1) and p.g > 1, entrants,
                  end_to_end=a.end_to_end)
    us = lambda r, k: r["rows"].get(k, {}).get("us")  # noqa: E731
    # the proposal's sides: 3x3 rows (the shipped configuration; trial 5x5 / 7x7 kernels are summed up apart)
    walked = [r for r in doc["rows"] if us(r, "walk") and us(r, "before") and ",y=3,x=3," in r["problem"]]
    from skwgrad.abi.conv import parse_problem

    side = {True: [], False: []}
    for r in walked:
        side[parse_problem(r["problem"]).ho >= PROPOSED_MIN_ROWS].append(r)
        r["proposed_rule_takes_walk"] = parse_problem(r["problem"]).ho >= PROPOSED_MIN_ROWS
    doc["summary"] = {
        "rows": len(doc["rows"]), "all_ok": all(r["all_ok"] for r in doc["rows"]),
        **{f"{name}_rows": len(rs) for name, rs in (("walk_side", side[True]), ("window_side", side[False]))},
        **{f"{name}_before_over_walk": geo([us(r, "before") / us(r, "walk") for r in rs]) for name, rs in (("walk_side", side[True]), ("window_side", side[False]))},
        "walk_side_faster_rows": sum(1 for r in side[True] if us(r, "walk") < us(r, "before")),
        "walk_side_walk_vs_cudnn": geo([r["cudnn_us"] / us(r, "walk") for r in side[True] if r.get("cudnn_us")]),
        "walk_side_before_vs_cudnn": geo([r["cudnn_us"] / us(r, "before") for r in side[True] if r.get("cudnn_us")]),
        "alt_over_rule": geo([us(r, "walk_alt") / us(r, "walk") for r in walked if us(r, "walk_alt")]),
        # where several walk kernels admit a row (trial configurations): the fastest of them against ``before``
        "best_walk_rows": sum(1 for r in doc["rows"] if us(r, "before") and _best_walk(r)),
        "before_over_best_walk": geo([us(r, "before") / _best_walk(r) for r in doc["rows"] if us(r, "before") and _best_walk(r)]),
        "best_walk_vs_cudnn": geo([r["cudnn_us"] / _best_walk(r) for r in doc["rows"] if r.get("cudnn_us") and _best_walk(r)]),
    }  # fmt: skip
    Path(a.out).write_text(json.dumps(doc, indent=1, default=str))
    print("summary", json.dumps(doc["summary"]))


if __name__ == "__main__":
    main()
