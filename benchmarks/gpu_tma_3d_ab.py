"""3-D layers on the TMA im2col kernels (a 5-D x map) against what auto ran before, in one pass.

    python benchmarks/gpu_tma_3d_ab.py --cache CACHE --corpus SHAPES.csv [--corpus ...] --out ab.json

Per 16-bit 3-D row (not depthwise), with the timing and verification of ``gpu_fused_ab.run_row``
(every launch verified three times against float64 with dW and the workspace poisoned, medians of
event-timed launches in interleaved rounds, cuDNN beside):
- ``auto``: ``choose`` (no tuned records), which may take a 3-D ``wgrad_tma`` kernel;
- ``before``: auto with the 3-D TMA kernels left out (what it ran before they existed);
- ``tma_<i>``: the model's ``--top`` best-ranked 3-D TMA launches;
- ``other_<i>``: its ``--top-other`` best-ranked launches of the other families;
so a row's best TMA and best other launch can be set side by side, not only auto's picks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def entrants(p, cache, arch, cus, occ, top, top_other, prev_3d_price=None):
    from gpu_tma_auto import prev_model

    from skwgrad.launcher.select import all_choices, choose

    tma3 = frozenset(e.key for e in cache.find(arch, family="wgrad_tma") if e.spec is not None and e.spec.spatial_dims == 3)
    out = {"auto": choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False),
           "before": choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False, exclude=tma3)}  # fmt: skip
    if prev_3d_price is not None:  # auto under the built-in model with another 3-D TMA price
        model = prev_model(arch, {"main_iter_tma_3d": prev_3d_price})
        out["auto_prev"] = choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False, model=model)
    n_tma = n_other = 0
    for c in all_choices(p, cache, arch=arch, cus=cus, occupancy=occ):
        if c.spec.family == "wgrad_tma" and n_tma < top:
            out[f"tma_{n_tma}"] = c
            n_tma += 1
        elif c.spec.family != "wgrad_tma" and n_other < top_other:
            out[f"other_{n_other}"] = c
            n_other += 1
        if n_tma >= top and n_other >= top_other:
            break
    return out


def summarize(rows: list[dict]) -> dict:
    from compare_auto_tuned import geo

    def us(r, k):
        return r["rows"].get(k, {}).get("us")

    def best(r, prefix):
        got = [v["us"] for k, v in r["rows"].items() if (k.startswith(prefix) or (k in ("auto", "before") and v.get("family") and
               (v["family"] == "wgrad_tma") == (prefix == "tma_"))) and v.get("us")]  # fmt: skip
        return min(got) if got else None

    timed = [r for r in rows if us(r, "auto") and us(r, "before")]
    out = {
        "rows": len(rows), "all_ok": all(r["all_ok"] for r in rows), "timed": len(timed),
        "auto_takes_tma": sum(1 for r in timed if r["rows"]["auto"].get("family") == "wgrad_tma"),
        "before_over_auto": geo([us(r, "before") / us(r, "auto") for r in timed]),
        "auto_faster_rows": sum(us(r, "auto") < us(r, "before") for r in timed),
        "auto_slower_5pct_rows": sum(us(r, "auto") > 1.05 * us(r, "before") for r in timed),
        "auto_vs_cudnn": geo([r["cudnn_us"] / us(r, "auto") for r in timed if r.get("cudnn_us")]),
        "before_vs_cudnn": geo([r["cudnn_us"] / us(r, "before") for r in timed if r.get("cudnn_us")]),
    }  # fmt: skip
    pairs = [(best(r, "tma_"), best(r, "other_"), r.get("cudnn_us")) for r in rows]
    pairs = [x for x in pairs if x[0] and x[1]]
    out["best_other_over_best_tma"] = geo([o / t for t, o, _ in pairs])
    out["best_tma_vs_cudnn"] = geo([c / t for t, _, c in pairs if c])
    out["best_of_all_vs_cudnn"] = geo([c / min(t, o) for t, o, c in pairs if c])
    allbest = [(min(v["us"] for v in r["rows"].values() if v.get("us")), us(r, "auto")) for r in timed]
    out["auto_within_5pct_of_best"] = sum(a <= 1.05 * b for b, a in allbest)
    out["auto_over_best"] = geo([a / b for b, a in allbest])
    prev = [(us(r, "auto_prev"), us(r, "auto")) for r in timed if us(r, "auto_prev")]
    if prev:
        out["auto_prev_over_auto"] = geo([p / a for p, a in prev])
        out["auto_slower_than_prev_5pct_rows"] = sum(a > 1.05 * p for p, a in prev)
        out["auto_prev_vs_cudnn"] = geo([r["cudnn_us"] / us(r, "auto_prev") for r in timed if us(r, "auto_prev") and r.get("cudnn_us")])
    return out


def main():
    from gpu_fused_ab import ab_parser, ab_rows

    ap = ab_parser(__doc__, top=4)  # --top: the model's best 3-D TMA launches timed beside auto
    ap.add_argument("--top-other", type=int, default=3, help="the model's best launches of the other families")
    ap.add_argument("--prev-3d-price", type=float, default=None, help="also time auto_prev: auto at this main_iter_tma_3d price")
    a = ap.parse_args()

    keep = lambda p: p.dtype != "fp32" and p.spatial_dims == 3 and (p.c, p.k) != (1, 1)  # noqa: E731
    doc = ab_rows(a, "benchmarks/gpu_tma_3d_ab.py", keep,
                  lambda p, cache, arch, cus, occ: entrants(p, cache, arch, cus, occ, a.top, a.top_other, a.prev_3d_price),
                  end_to_end=a.end_to_end)  # fmt: skip
    doc["summary"] = summarize(doc["rows"])
    Path(a.out).write_text(json.dumps(doc, indent=1, default=str))
    print("summary", json.dumps(doc["summary"]))


if __name__ == "__main__":
    main()
