"""Cost model 13's cross-validation by shape set, reproduced from the repository alone
(benchmarks/results/costmodel_fit_2026-12-04_m13.json).

    .venv/bin/python benchmarks/cv_costmodel_m13.py --cache CACHE [--compile-missing] [--out F.json]

Every launch the product timed in RUNS (gpu_tma_auto.py records; padded launches left out) gets
the cost model's terms (fit_tma_terms.all_family_samples: the launch's geometry, occupancy from its
kernel's metadata). The kernels come from CACHE, an sm_90 cache, read as the source most of its
entries were built with. Each shape set is held out in turn (C3's four model sets together): the
TMA loop's constants and every class's fixed cost are refitted on the other sets by non-negative
least squares on ranking-weighted relative error (fit_tma_terms.fit_some), every other constant
held at model 12's, and each held-out row's pick among its timed launches is judged against the
fastest of them (within 5%, geomean). Variants: model 12 as shipped (model 13's built-in constants
with the refitted ones and the two new terms at model 12's values, benchmarks/prev_model12.args);
the refit without the new terms (held at 0); model 13 (the refit with main_loads_pointwise and
fixup_atomic_chain), held out, and fitted on every launch and judged in sample (the record's
constants).

The record had the metadata of every kernel of the default and broad presets (compiled on the
CPU); the runs' launches of kernels in neither preset (795 launches, 77 kernels) were left out, and
are counted as skipped here too. A kernel CACHE lacks is compiled for sm_90 from its preset spec
with --compile-missing (about 1 s each); otherwise its launches are skipped and counted, and the
numbers can differ slightly from the record's (a default-preset cache lacks the broad-only kernels;
those of these runs' launches are all in the default preset, so an sm_90 default cache of the
current source reproduces the record exactly: 4243 launches, C3 held out 54/77 with model 12 and
61/77 with model 13).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ab_caches import built_identity, reading_as  # noqa: E402  (benchmarks/ is the script's own directory)
from fit_tma_terms import FIT_ALL, all_family_samples, fit_some  # noqa: E402
from results_io import read_json  # noqa: E402

from skwgrad.abi import costmodel as M  # noqa: E402

RUNS = ("tma_auto_65_2026-12-04_v5.json", "tma_auto_corpus_2026-12-04_v5.json", "tma_auto_66_2026-12-04_v6.json",
        "tma_auto_83_2026-12-04_w3.json", "tma_auto_85_2026-12-04_w5.json", "tma_auto_88_2026-12-04_x5.json",
        "tma_auto_corpus_2026-12-04_z2.json", "tma_auto_2026-12-04_z7.json", "tma_auto_2026-12-04_a1.json",
        "tma_auto_2026-12-04_a2.json", "tma_auto_2026-12-04_a4.json", "tma_auto_2026-12-04_a5.json",
        "tma_auto_2026-12-04_a8.json", "tma_auto_2026-12-04_a9.json", "tma_auto_models_2026-12-04_c3.json")  # fmt: skip
C3 = "tma_auto_models_2026-12-04_c3"  # its four model sets are held out together
RECORD = RESULTS / "costmodel_fit_2026-12-04_m13.json"
NEW = ("main_loads_pointwise", "fixup_atomic_chain")
FIT_M12 = tuple(n for n in FIT_ALL if n not in NEW)
# summary name -> per-set name, as the record names them
VARIANTS = {"shipped": "shipped", "refit_no_new_term": "refit_no_new_term", "model13_held_out": "model13",
            "model13_final_in_sample": "model13_final_in_sample"}  # fmt: skip


def model12() -> np.ndarray:
    """Model 12's sm_90 constants: the built-in (model 13's) with those of benchmarks/prev_model12.args."""
    c = np.array(M.builtin("sm_90").constants, dtype=float)
    words = (ROOT / "benchmarks" / "prev_model12.args").read_text().split()
    for flag, setting in zip(words[::2], words[1::2]):
        if flag != "--prev-constant":
            raise SystemExit(f"prev_model12.args: unexpected {flag!r}")
        name, value = setting.split("=")
        c[M.TERMS.index(name)] = float(value)
    return c


class Kernels:
    """Each label's sm_90 kernel (spec, metadata): the cache's (entries of the identity most of it
    was built with), else compiled from the default / broad presets' spec (``compile_missing``),
    else none: the launch is skipped and counted."""

    def __init__(self, path: str, compile_missing: bool):
        from skwgrad.cache.store import Cache

        self.cache, self.ident = Cache(path, readonly=True), built_identity(path)
        self.compile_missing, self.compiled, self.missing, self.skipped = compile_missing, {}, set(), 0
        self.specs = None

    def lookup(self, label: str, arch: str = "sm_90") -> list:
        with reading_as(self.ident):
            found = [e for e in self.cache.lookup(label, arch=arch) if e.current and e.spec is not None]
        if not found and self.compile_missing:
            if label not in self.compiled:
                self.compiled[label] = self._compile(label)
            found = [self.compiled[label]] if self.compiled[label] else []
        if not found:
            self.missing.add(label)
            self.skipped += 1
        return found[:1]

    def _compile(self, label: str):
        from skwgrad.abi.conv import DTYPES
        from skwgrad.aot.compile import compile_spec
        from skwgrad.aot.sweep import sweep

        if self.specs is None:
            self.specs = {it.spec.label: it.spec for preset in ("default", "broad") for it in sweep(preset, ["sm_90"], tuple(DTYPES))}
        spec = self.specs.get(label)
        if spec is None:
            return None  # no longer in either preset (the record left it out too)
        try:
            compiled = compile_spec(spec, "sm_90")
        except Exception as e:  # a kernel this source cannot build: skipped like a missing one
            print(f"compiling {label} failed: {e}", file=sys.stderr)
            return None
        print(f"compiled {label}", file=sys.stderr, flush=True)
        return SimpleNamespace(spec=spec, metadata=dict(compiled.metadata))


def launches(kernels: Kernels) -> list[dict]:
    """Every timed launch of RUNS with its terms, each row named by run."""
    rows = []
    for name in RUNS:
        run = name.split(".json")[0]
        rows += [dict(r, run=run, row=f"{run}:{r['row']}") for r in all_family_samples(read_json(RESULTS / name), kernels)]
    return rows


def refit(rows: list[dict], idx, base: np.ndarray, names) -> np.ndarray:
    """``names`` fitted on rows[idx], every other constant (and a constant no launch there exercises) at ``base``."""
    values, seen = fit_some([rows[i] for i in idx], tuple(base), names)
    c = base.copy()
    for n, v, s in zip(names, values, seen):
        if s:
            c[M.TERMS.index(n)] = v
    return c


def judge(rows: list[dict], idx, pred: np.ndarray) -> dict:
    """Each row of rows[idx] with two or more timed launches: its pick (least ``pred``) against its fastest."""
    by_row: dict = {}
    for i in idx:
        by_row.setdefault(rows[i]["row"], []).append(i)
    ratios = [rows[min(ii, key=lambda i: pred[i])]["us"] / min(rows[i]["us"] for i in ii) for ii in by_row.values() if len(ii) > 1]
    return {"rows": len(ratios), "within_5pct": sum(x <= 1.05 for x in ratios), "logsum": sum(map(math.log, ratios))}


def total(res: dict, keep) -> dict:
    vs = [v for s, v in res.items() if keep(s)]
    n = sum(v["rows"] for v in vs)
    geomean = math.exp(sum(v["logsum"] for v in vs) / n) if n else None
    return {"rows": n, "within_5pct": sum(v["within_5pct"] for v in vs), "geomean": geomean}


def plain(v: dict) -> dict:
    return {"rows": v["rows"], "within_5pct": v["within_5pct"], "geomean": math.exp(v["logsum"] / v["rows"]) if v["rows"] else None}


def cell(v: dict) -> str:
    return f"{v['within_5pct']}/{v['rows']} {v['geomean']:.4f}" if v["rows"] else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True, help="an sm_90 skwgrad cache holding the runs' kernels (their metadata)")
    ap.add_argument("--compile-missing", action="store_true", help="compile the kernels the cache lacks (sm_90, on the CPU)")
    ap.add_argument("--out", help="write the result JSON here (the record's shape)")
    args = ap.parse_args()

    kernels = Kernels(args.cache, args.compile_missing)
    rows = launches(kernels)
    a = np.array([r["terms"].values for r in rows], dtype=float)
    floor = np.array([r["terms"].floor_us for r in rows], dtype=float)
    corpus = np.array([r["corpus"] for r in rows])
    sets = sorted(set(corpus))
    c3 = sorted({r["corpus"] for r in rows if r["run"] == C3})
    folds = [[s] for s in sets if s not in c3] + [c3]
    print(f"{len(rows)} launches ({kernels.skipped} skipped: {len(kernels.missing)} kernels missing; "
          f"{sum(1 for v in kernels.compiled.values() if v)} compiled), {len(sets)} shape sets", flush=True)  # fmt: skip

    base = model12()
    predict = lambda c: np.maximum(a @ c, floor)  # noqa: E731  (CostModel.predict, every launch at once)
    every = np.arange(len(rows))

    def held_out(names) -> dict:
        out = {}
        for held in folds:
            c = base if names is None else refit(rows, np.flatnonzero(~np.isin(corpus, held)), base, names)
            pred = predict(c)
            out.update({s: judge(rows, np.flatnonzero(corpus == s), pred) for s in held})
        return out

    final = refit(rows, every, base, FIT_ALL)
    res = {"shipped": held_out(None), "refit_no_new_term": held_out(FIT_M12), "model13_held_out": held_out(FIT_ALL),
           "model13_final_in_sample": {s: judge(rows, np.flatnonzero(corpus == s), predict(final)) for s in sets}}  # fmt: skip
    parts = {"c3_models": lambda s: s in c3, "other_sets": lambda s: s not in c3, "all": lambda s: True}
    summary = {k: {p: total(v, keep) for p, keep in parts.items()} for k, v in res.items()}
    record = read_json(RECORD) if RECORD.exists() else {}

    print(f"\n{'variant':26s} {'C3 models':>16s} {'other sets':>18s} {'all':>18s}   within 5% / rows, geomean pick / fastest")
    for k, s in summary.items():
        print(f"{k:26s} {cell(s['c3_models']):>16s} {cell(s['other_sets']):>18s} {cell(s['all']):>18s}")
        if k in record.get("summary", {}):
            r = record["summary"][k]
            print(f"{'  record':26s} {cell(r['c3_models']):>16s} {cell(r['other_sets']):>18s} {cell(r['all']):>18s}")
    print(f"\n{'set':36s} " + " ".join(f"{k[:16]:>16s}" for k in res))
    for s in sets:
        print(f"{s[:36]:36s} " + " ".join(f"{cell(plain(v[s])):>16s}" for v in res.values()))
    constants = {n: float(final[M.TERMS.index(n)]) for n in FIT_ALL}
    rec_c = record.get("constants", {})
    print("\nmodel 13 fitted on every launch (record):")
    print("  " + ", ".join(f"{n}={v:.6g} ({rec_c.get(n, float('nan')):.6g})" for n, v in constants.items()))

    if args.out:
        doc = {"model_version": M.MODEL_VERSION, "method": " ".join(__doc__.split("\n\n")[2].split()),
               "runs": [n.split(".json")[0] for n in RUNS], "cache_identity": list(kernels.ident), "launches": len(rows),
               "skipped_launches": kernels.skipped, "missing_kernels": sorted(kernels.missing),
               "compiled_kernels": sorted(k for k, v in kernels.compiled.items() if v), "new_terms": list(NEW), "summary": summary,
               "per_set": {s: {VARIANTS[k]: plain(v[s]) for k, v in res.items()} for s in sets},
               "constants": constants, "shipped_constants": {n: float(base[M.TERMS.index(n)]) for n in FIT_ALL}}  # fmt: skip
        Path(args.out).write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
