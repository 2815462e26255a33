"""The depthwise window split rule against the same rule under other costs, in one pass.

    python benchmarks/gpu_dw_split_ab.py --cache CACHE --corpus SHAPES.csv --prev-costs 2000,2 --out ab.json

Per depthwise row (``gpu_fused_ab.run_row``: every launch verified three times against float64 with
dW and the workspace poisoned, medians of event-timed launches in interleaved rounds, cuDNN beside):
``auto``, the shipped selection, and ``auto_prev``, the same selection with the window rule's two
costs (launch.DWCONV_WIN_CTA_COST, DWCONV_WIN_ATOMIC_COST) set to ``--prev-costs``; where both ask
for the same launch it is timed once.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

PREV = (2000.0, 2.0)


def entrants(p, cache, arch, cus, occ):
    from skwgrad.abi import launch
    from skwgrad.launcher.select import choose

    auto = choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False)
    saved = launch.DWCONV_WIN_CTA_COST, launch.DWCONV_WIN_ATOMIC_COST
    launch.DWCONV_WIN_CTA_COST, launch.DWCONV_WIN_ATOMIC_COST = PREV
    try:
        prev = choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False)
    finally:
        launch.DWCONV_WIN_CTA_COST, launch.DWCONV_WIN_ATOMIC_COST = saved
    return {"auto": auto, "auto_prev": prev}


def main():
    global PREV
    from gpu_fused_ab import ab_parser

    ap = ab_parser(__doc__, end_to_end=False)
    ap.add_argument("--prev-costs", default="2000,2", help="CTA cost, atomic cost of the rule compared against")
    a = ap.parse_args()
    PREV = tuple(float(v) for v in a.prev_costs.split(","))

    from compare_auto_tuned import geo
    from gpu_fused_ab import ab_rows

    doc = ab_rows(a, "benchmarks/gpu_dw_split_ab.py", lambda p: (p.c, p.k) == (1, 1) and p.g > 1, entrants, end_to_end=False)
    doc["prev_costs"] = PREV
    t = lambda r, k: (r["rows"].get(k) or {}).get("us")  # noqa: E731
    both = [r for r in doc["rows"] if t(r, "auto") and t(r, "auto_prev")]
    changed = [r for r in both if r["rows"]["auto_prev"].get("same_as") != "auto"]
    doc["summary"] = {
        "rows": len(doc["rows"]), "all_ok": all(r["all_ok"] for r in doc["rows"]), "changed_rows": len(changed),
        "prev_over_auto_geomean": geo([t(r, "auto_prev") / t(r, "auto") for r in both]),
        "changed_prev_over_auto_geomean": geo([t(r, "auto_prev") / t(r, "auto") for r in changed]),
        "changed_faster_rows": sum(1 for r in changed if t(r, "auto") < t(r, "auto_prev")),
        "auto_over_cudnn_speed": geo([r["cudnn_us"] / t(r, "auto") for r in both if r.get("cudnn_us")]),
        "at_1_5x_cudnn": sum(1 for r in both if r.get("cudnn_us") and r["cudnn_us"] / t(r, "auto") >= 1.5),
    }  # fmt: skip
    Path(a.out).write_text(json.dumps(doc, indent=1, default=str))
    print("summary", json.dumps(doc["summary"]))


if __name__ == "__main__":
    main()
