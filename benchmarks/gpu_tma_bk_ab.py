"""wgrad_tma launches at 64 rows a step against their 128-row twins (``bk``), in one pass.

    python benchmarks/gpu_tma_bk_ab.py --cache CACHE --corpus SHAPES.csv [--corpus ...] --out ab.json

Per 16-bit row (2-D and 3-D, not depthwise), with the timing and verification of
``gpu_fused_ab.run_row`` (every launch verified three times against float64 with dW and the
workspace poisoned, medians of event-timed launches in interleaved rounds, cuDNN beside): ``auto``;
``before``, auto with the 128-row kernels left out; the model's ``--top`` best-ranked launches of
64-row TMA kernels that have a twin in the cache (``o1_<n>``), each beside its twin at the same split
degree and pool (``o2_<n>``: half the steps, each twice as long). Twins: build_tma_bk_twins.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from build_tma_bk_twins import bk_twin  # noqa: E402


def entrants(p, cache, arch, cus, occ, top):
    from skwgrad.errors import ProblemError
    from skwgrad.launcher.plan import Kernel
    from skwgrad.launcher.select import Choice, all_choices, choose

    tma = [e for e in cache.find(arch, family="wgrad_tma") if e.spec is not None]
    twin_of = {e.spec: e for e in tma if e.spec.bk == 128}
    out = {"auto": choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False),
           "before": choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False,
                            exclude=frozenset(e.key for e in tma if e.spec.bk == 128))}  # fmt: skip
    n = 0
    for c in all_choices(p, cache, arch=arch, cus=cus, occupancy=occ):
        if n >= top:
            break
        s = c.spec
        if s.family != "wgrad_tma" or s.bk != 64 or bk_twin(s) not in twin_of:
            continue
        tw = Kernel.from_entry(twin_of[bk_twin(s)], cache)
        try:
            from skwgrad.abi.launch import spec_geometry

            spec_geometry(p, tw.spec, threads=int(tw.metadata["threads"]), pool=c.pool, ks_count=c.ks_count)
        except ProblemError:  # more splits than 128-row steps
            continue
        out[f"o1_{n}"] = c
        out[f"o2_{n}"] = Choice(tw, pool=c.pool, ks_count=c.ks_count, stage2=c.stage2, reason="128-row twin")
        n += 1
    return out


def main():
    from compare_auto_tuned import geo
    from gpu_fused_ab import ab_parser, ab_rows

    a = ab_parser(__doc__, top=3, end_to_end=False).parse_args()

    keep = lambda p: p.dtype != "fp32" and (p.c, p.k) != (1, 1)  # noqa: E731
    doc = ab_rows(a, "benchmarks/gpu_tma_bk_ab.py", keep, lambda p, cache, arch, cus, occ: entrants(p, cache, arch, cus, occ, a.top),
                  end_to_end=False)  # fmt: skip
    same, best, autos = [], [], []
    for r in doc["rows"]:
        t = {k: v.get("us") for k, v in r["rows"].items() if v.get("us")}
        same += [t[k] / t["o2_" + k[3:]] for k in t if k.startswith("o1_") and "o2_" + k[3:] in t]
        o1 = [v for k, v in t.items() if k.startswith("o1_")]
        o2 = [v for k, v in t.items() if k.startswith("o2_")]
        if o1 and o2:
            best.append(min(o1) / min(o2))
        if t.get("auto") and t.get("before"):
            autos.append((t["before"], t["auto"], r.get("cudnn_us")))
    doc["summary"] = {
        "rows": len(doc["rows"]), "all_ok": all(r["all_ok"] for r in doc["rows"]),
        "o1_over_o2_same_launch": geo(same), "pairs": len(same), "o2_faster": sum(x > 1 for x in same),
        "best_o1_over_best_o2": geo(best), "rows_o2_best_faster": sum(x > 1 for x in best),
        "before_over_auto": geo([b / x for b, x, _ in autos]), "auto_slower_5pct_rows": sum(x > 1.05 * b for b, x, _ in autos),
        "auto_vs_cudnn": geo([c / x for _, x, c in autos if c]), "before_vs_cudnn": geo([c / b for b, _, c in autos if c]),
    }  # fmt: skip
    Path(a.out).write_text(json.dumps(doc, indent=1, default=str))
    print("summary", json.dumps(doc["summary"]))


if __name__ == "__main__":
    main()
