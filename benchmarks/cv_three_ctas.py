"""The constant of one cost-model term (model 14's ``main_iter_tma_three_ctas``, model 15's
``fill_tma_extra_waves``), chosen one shape set left out at a time (benchmarks/RESULTS.md, session
27), reproduced from the repository.

    .venv/bin/python benchmarks/cv_three_ctas.py --cache CACHE [--term fill_tma_extra_waves]

Every launch the product timed in cv_costmodel_m13.RUNS and in runs F1/F2 (gpu_tma_auto.py records;
padded launches and kernels CACHE lacks left out; F4 and F5 added in session 28) gets the built-in model's terms. The term's
constant is taken from its GRID: per fold (a shape set of one run) the value whose picks among each
row's timed launches are within 5% of the fastest on the most rows of the other folds (then the
least geomean), judged on the held-out fold; every other constant stays at the built-in value (the term's own at 0, and
the terms after it, added later, at 0 too: the model the term was chosen against).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from cv_costmodel_m13 import RESULTS, RUNS, Kernels  # noqa: E402
from fit_tma_terms import all_family_samples  # noqa: E402
from results_io import read_json  # noqa: E402

from skwgrad.abi import costmodel as M  # noqa: E402

GRIDS = {
    "main_iter_tma_three_ctas": (0.0, 0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.0175, 0.02),
    "fill_tma_extra_waves": (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0),
}
F_RUNS = ("tma_auto_corpus_2026-12-04_f2.json", "pw_tiles_models_2026-12-04_f1.json", "pw_tiles_random_2026-12-04_f1.json",
          "tma_three_ctas_2026-12-04_f4.json", "tma_auto_extra_waves_2026-12-04_f5.json", "tma_auto_fresh_2026-12-04_g1.json")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True, help="an sm_90 default cache (the kernels' metadata)")
    ap.add_argument("--term", default="main_iter_tma_three_ctas", choices=tuple(GRIDS))
    args = ap.parse_args()
    NEW, GRID = args.term, GRIDS[args.term]
    kernels = Kernels(args.cache, False)
    rows = []
    for name in (*RUNS, *F_RUNS):
        run = name.split(".json")[0]
        rows += [dict(r, row=f"{run}:{r['row']}", fold=f"{run}|{r['corpus']}") for r in all_family_samples(read_json(RESULTS / name), kernels)]
    a = np.array([r["terms"].values for r in rows], dtype=float)
    floor = np.array([r["terms"].floor_us for r in rows])
    us = np.array([r["us"] for r in rows])
    row_of = np.array([r["row"] for r in rows])
    fold_of = np.array([r["fold"] for r in rows])
    c = np.array(M.builtin("sm_90").constants, dtype=float)
    j = M.TERMS.index(NEW)
    c[j:] = 0.0

    def judge(idx, k):
        pred = np.maximum(a @ c + k * a[:, j], floor)
        by: dict = {}
        for i in idx:
            by.setdefault(row_of[i], []).append(i)
        r = [us[min(ii, key=lambda i: pred[i])] / us[ii].min() for ii in by.values() if len(ii) > 1]
        return len(r), sum(x <= 1.05 for x in r), sum(map(math.log, r))

    print(f"{len(rows)} launches ({kernels.skipped} skipped: kernels the cache lacks)")
    for k in GRID:
        n, w, s = judge(range(len(rows)), k)
        print(f"in sample {NEW}={k:<7g} {w}/{n} within 5%, geomean {math.exp(s / n):.4f}")
    held, base = [0, 0, 0.0], [0, 0, 0.0]
    chosen = []
    for f in sorted(set(fold_of)):
        train, test = np.flatnonzero(fold_of != f), np.flatnonzero(fold_of == f)
        k = max(GRID, key=lambda v: (judge(train, v)[1], -judge(train, v)[2]))
        chosen.append(k)
        for acc, v in ((held, judge(test, k)), (base, judge(test, 0.0))):
            for i in range(3):
                acc[i] += v[i]
    print(f"chosen per fold: {sorted(set(chosen))}")
    print(f"held out: {held[1]}/{held[0]} within 5%, geomean {math.exp(held[2] / held[0]):.4f}; "
          f"without the term {base[1]}/{base[0]}, {math.exp(base[2] / base[0]):.4f}")  # fmt: skip


if __name__ == "__main__":
    main()
