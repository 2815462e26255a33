"""Fit the cost model to ``skwgrad calibrate`` timings and report how its picks compare with the
fastest candidate per problem, on a split of shapes: constants are fitted on the ``--train``
files only, and every file is reported (the others are shapes the fit never saw).

    python benchmarks/fit_costmodel.py --cache CACHE --train calib_fit.json [--train ...] \\
        --eval calib_corpus.json [--eval ...] [--out fit.json]
    python benchmarks/fit_costmodel.py --cache CACHE --cv-by-set --train a.json --train b.json --train c.json \\
        [--eval extra.json ...] [--out cv.json]

``--cv-by-set``: cross-validation by file: for each ``--train`` file (or ``a.json+b.json``: one
shape set timed twice, judged on its last file), fit on the other ones and
report auto on it (per-set score and every miss: auto's pick vs the fastest, both measured and
predicted times); then fit on all of them (the constants to ship) and report each file under
that fit, and the ``--eval`` files (extra held-out sets) under both. A file given as
``FILE@CACHE`` is read with that cache (its keys); ``--final-train`` adds calibrate timings to the
final fit only (they stay held out in every fold).

CACHE must hold the timed entries (the keys in the files); nothing runs on a GPU. Per problem:
the model's pick among the dense candidates (the families the model covers), its measured time,
the fastest measured candidate of any family, and auto's pick as ``choose`` makes it (which
takes the depthwise / packed-group family by its rule where it applies).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # results_io, also when this file is imported from elsewhere

from skwgrad.abi.conv import parse_problem  # noqa: E402
from skwgrad.abi.costmodel import MODELLED_FAMILIES, default_prior, fit, offline_occupancy  # noqa: E402
from skwgrad.abi.launch import STAGE2_BLOCK  # noqa: E402
from skwgrad.launcher import select as S  # noqa: E402
from results_io import read_json  # noqa: E402


# Files timed before the Stage-2 reduce loaded STAGE2_UNROLL replicas per step (``--stale-stage2``):
# their candidates that sum several replicas (two-stage split-K) ran a slower Stage-2 than today's,
# so they are left out; every other timing of theirs stands (the kernels are the same).
STALE_STAGE2: set[str] = set()


def load(paths):
    docs = [(p, read_json(p)) for p in paths]
    rows = defaultdict(list)
    meta = {}
    for path, d in docs:
        for r in d["rows"]:
            if str(path) in STALE_STAGE2 and r.get("variant") == "two_stage":
                continue
            rows[r["problem"]].append(r)
            meta[r["problem"]] = (r.get("name", ""), d["arch"], d["compute_units"])
    return rows, meta


def samples(rows, meta, cache, stack=None):
    out = {}
    for prob, rs in rows.items():
        _, arch, cus = meta[prob]
        p = parse_problem(prob)
        dense = [r for r in rs if "us" in r and r.get("family") in MODELLED_FAMILIES and r.get("occupancy")]
        out[prob] = (p, dense, S.samples_of(dense, p, cache, arch=arch, cus=cus, stack_bytes=stack))
    return out


def _predictions(model, rows, meta, cache, stack=None):
    """(key, pool, ks_count) -> the model's predicted us, for every timed dense row."""
    out = {}
    for prob, (p, dense, ss) in samples(rows, meta, cache, stack).items():
        for r, (t, _) in zip(dense, ss):
            out[(prob, r["key"], r["pool"], r["ks_count"])] = model.predict(t)
    return out


def evaluate(model, rows, meta, cache, stack=None):
    """Per problem: auto's pick as ``select.choose`` makes it with ``model`` (no tuned records;
    the occupancy the device reported for each kernel), its measured time, and the fastest."""
    from skwgrad.launcher.plan import Kernel

    report = []
    preds = _predictions(model, rows, meta, cache, stack)
    for prob, rs in rows.items():
        name, arch, cus = meta[prob]
        timed = sorted((r for r in rs if "us" in r), key=lambda r: r["us"])
        if not timed:
            continue
        p = parse_problem(prob)
        occ = {r["key"]: r["occupancy"] for r in rs if r.get("occupancy")}
        measured = {(r["key"], r["pool"], r["ks_count"]): r for r in timed}
        if stack is not None:  # entries built before their metadata recorded the stack size

            class _Stacked:
                def __init__(self, c):
                    self._c = c

                def __getattr__(self, n):
                    return getattr(self._c, n)

                def find(self, arch, **kw):
                    es = self._c.find(arch, **kw)
                    return [e if "stack_bytes" in e.metadata else _with_stack(e, stack.get(e.key, 0)) for e in es]

            view = _Stacked(cache)
        else:
            view = cache
        # the occupancy the device reported for each timed dense kernel; the depthwise rows record none, so
        # their kernels get the estimate from their metadata (what auto's split rule sees offline)
        ch = S.choose(p, view, arch=arch, cus=cus, occupancy=lambda k: occ.get(k.key) or offline_occupancy(k.metadata, arch),
                      model=model, use_tuned=False)  # fmt: skip
        got = measured.get((ch.kernel.key, ch.pool, ch.ks_count))
        best = timed[0]
        best_pred = preds.get((prob, best["key"], best["pool"], best["ks_count"]))
        report.append({
            "name": name, "problem": prob, "best_label": best["label"], "best_pool": best["pool"], "best_ks": best["ks_count"],
            "best_us": best["us"], "auto_label": ch.kernel.label, "auto_pool": ch.pool, "auto_ks": ch.ks_count,
            "auto_family": ch.spec.family, "auto_us": got and got["us"], "auto_predicted_us": ch.predicted_us,
            "best_predicted_us": best_pred, "ratio": (got["us"] / best["us"]) if got else None,
        })  # fmt: skip
    return report


def fit_files(paths, cache, stack=None):
    """Fit on ``paths``; a term no sample exercises keeps the physical default prior, not the
    shipped constants (which were fitted on every set, the held-out one too). ``cache``: one
    cache, or a function path -> the cache holding that file's keys."""
    cache_of = cache if callable(cache) else (lambda _p: cache)
    all_s, groups, fastest, arch = [], [], {}, None
    for path in paths:
        rows, meta = load([path])
        arch = arch or next(iter(meta.values()))[1]
        for prob, (_, _, ss) in samples(rows, meta, cache_of(path), stack).items():
            all_s += ss
            groups += [(path, prob)] * len(ss)
        fastest.update({(path, prob): us for prob, us in fastest_of(rows).items()})
    return fit(all_s, arch=arch, prior=default_prior(arch), groups=groups, fastest=fastest)


def fastest_of(rows) -> dict:
    """Problem -> its fastest timed candidate of any family (what the rank weights are relative to)."""
    return {prob: min(r["us"] for r in rs if "us" in r) for prob, rs in rows.items() if any("us" in r for r in rs)}


def _miss_line(r) -> str:
    f = lambda x: f"{x:.1f}" if x is not None else "-"  # noqa: E731
    return (f"    {r['name']:32s} {r['ratio'] or 0:.2f}  auto {r['auto_label']} p{r['auto_pool']} k{r['auto_ks']} "
            f"{f(r['auto_us'])} us (pred {f(r['auto_predicted_us'])})\n{'':38s}fastest {r['best_label']} p{r['best_pool']} "
            f"k{r['best_ks']} {f(r['best_us'])} us (pred {f(r['best_predicted_us'])})")  # fmt: skip


def _report_set(label, rep) -> dict:
    s = summary(rep)
    print(f"{label:58s} {s.get('within_5pct')}/{s.get('timed')} within 5%  geomean {s.get('geomean_auto_over_best', 0):.3f}"
          f"  worst {s.get('worst', 0):.2f}")  # fmt: skip
    for r in rep:
        if r["ratio"] is None or r["ratio"] > 1.05:
            print(_miss_line(r))
    return s


def _total(sums) -> dict:
    n = sum(s["timed"] for s in sums)
    logs = sum(math.log(s["geomean_auto_over_best"]) * s["timed"] for s in sums)
    return {"timed": n, "within_5pct": sum(s["within_5pct"] for s in sums),
            "share_within_5pct": sum(s["within_5pct"] for s in sums) / n, "geomean_auto_over_best": math.exp(logs / n)}  # fmt: skip


def cross_validate(sets, extra, cache, stack=None, final_extra=()) -> dict:
    """Fit on all sets but one, report auto on that one (each in turn); then the fit on all
    (plus ``final_extra``: more timings, in calibrate's format, for the shipped constants only).
    ``cache``: one cache, or a function path -> the cache holding that file's keys."""
    cache_of = cache if callable(cache) else (lambda _p: cache)
    doc = {"method": "cross-validation by shape set: fit on the other sets, auto (select.choose with the fitted model, "
                     "the device's occupancy per kernel, no tuned records) on the held-out one", "folds": {}}  # fmt: skip
    held = []
    groups = [g if isinstance(g, (list, tuple)) else [g] for g in sets]
    for group in groups:
        others = [p for g in groups if g is not group for p in g]
        model = fit_files(others, cache, stack)
        path = group[-1]  # a set timed more than once is judged on its last file (the newest candidates)
        rows, meta = load([path])
        rep = evaluate(model, rows, meta, cache_of(path), stack)
        print(f"fold: fit on {', '.join(Path(p).name for p in others)} (fit error {model.fit_error:.3f})")
        s = _report_set(f"  held out {' + '.join(Path(p).name for p in group)}", rep)
        held.append(s)
        fold = {"fit_on": [Path(p).name for p in others], "model": json.loads(model.to_json()), "summary": s, "rows": rep}
        for e in extra:
            er, em = load([e])
            r2 = evaluate(model, er, em, cache_of(e), stack)
            fold.setdefault("extra", {})[Path(e).name] = {"summary": _report_set(f"  extra {Path(e).name}", r2), "rows": r2}
        doc["folds"][Path(path).name] = fold
    tot = _total(held)
    print(f"cross-validated, all sets: {tot['within_5pct']}/{tot['timed']} ({tot['share_within_5pct']:.0%}) within 5%,"
          f" geomean {tot['geomean_auto_over_best']:.3f}")  # fmt: skip
    doc["cross_validated"] = tot
    fitted = [*(p for g in groups for p in g), *final_extra]
    model = fit_files(fitted, cache, stack)
    print(f"fit on all {len(fitted)} sets (fit error {model.fit_error:.3f}, {model.samples} timings):")
    doc["final"] = {"model": json.loads(model.to_json()), "fit_on": [Path(p).name for p in fitted], "sets": {}}
    for path in dict.fromkeys([*(g[-1] for g in groups), *final_extra, *extra]):  # a set's last file, as in the folds
        rows, meta = load([path])
        rep = evaluate(model, rows, meta, cache_of(path), stack)
        doc["final"]["sets"][Path(path).name] = {"split": "train" if path in fitted else "held-out",
                                                 "summary": _report_set(f"  {Path(path).name}", rep), "rows": rep}  # fmt: skip
    print("constants:", ", ".join(f"{t} {c:.6g}" for t, c in zip(doc["final"]["model"]["terms"], model.constants)))
    return doc


def _with_stack(entry, nbytes):
    import dataclasses

    return dataclasses.replace(entry, metadata={**entry.metadata, "stack_bytes": int(nbytes)})


def summary(rep):
    rs = [r["ratio"] for r in rep if r["ratio"] is not None]
    if not rs:
        return {}
    return {"rows": len(rep), "timed": len(rs), "within_5pct": sum(1 for x in rs if x <= 1.05),
            "share_within_5pct": sum(1 for x in rs if x <= 1.05) / len(rs),
            "geomean_auto_over_best": math.exp(sum(math.log(x) for x in rs) / len(rs)), "worst": max(rs)}  # fmt: skip


def _built_identity(path):
    """(compiler, source hash) of most entries of the cache at ``path``."""
    import sqlite3

    db = sqlite3.connect(f"file:{Path(path) / 'index.sqlite'}?mode=ro", uri=True)
    ids = db.execute("SELECT compiler, source_hash, COUNT(*) FROM entries GROUP BY 1, 2 ORDER BY 3 DESC").fetchall()
    db.close()
    return tuple(ids[0][:2]) if ids else None


def _read_as_built(path):
    """Timings stay valid after the kernel sources change (the keys do not): read the cache as the
    build that made it (its entries' compiler and source hash), not as this checkout. Called again
    before each use of another cache (the files of one fit may come from several builds)."""
    import skwgrad.cache.store as store

    ident = _built_identity(path)
    if ident and ident != store._identity():
        store._identity = lambda: ident
        print(f"reading {path} as built by {ident[0]}, sources {ident[1][:12]}")
    # and with the Stage-2 block that build used (selection looks for today's)
    S.STAGE2_BLOCK = _stage2_block(path) or STAGE2_BLOCK


def _stage2_block(path):
    import sqlite3

    db = sqlite3.connect(f"file:{Path(path) / 'index.sqlite'}?mode=ro", uri=True)
    rows = db.execute("SELECT spec_json FROM entries WHERE label LIKE 'stage2_%'").fetchall()
    db.close()
    blocks = {json.loads(r[0]).get("block") for r in rows}
    return blocks.pop() if len(blocks) == 1 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--train", action="append", required=True)
    ap.add_argument("--eval", action="append", default=[])
    ap.add_argument("--stack-bytes", help="JSON {key: stack bytes per thread} for entries whose metadata lacks it")
    ap.add_argument("--out")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--cv-by-set", action="store_true", help="cross-validate by --train file (see above)")
    ap.add_argument("--final-train", action="append", default=[],
                    help="with --cv-by-set: more calibrate timings for the final fit only (held out in every fold)")
    ap.add_argument("--stale-stage2", action="append", default=[],
                    help="a --train/--eval file (as given, without @CACHE) timed before the unrolled Stage-2: its two-stage timings are left out")
    a = ap.parse_args()
    STALE_STAGE2.update(a.stale_stage2)
    from skwgrad.cache import Cache

    _read_as_built(a.cache)
    cache = Cache(a.cache, create=False)
    stack = json.loads(Path(a.stack_bytes).read_text()) if a.stack_bytes else None
    if a.cv_by_set:
        # FILE@CACHE: a file whose keys live in another cache (same build identity)
        caches, where = {}, {}
        for spec in [f for t in [*a.train, *a.eval, *a.final_train] for f in t.split("+")]:
            path, _, other = spec.partition("@")
            where[path] = other or None
            if other and other not in caches:
                caches[other] = Cache(other, create=False)
        def cache_of(path):
            other = where.get(path)
            _read_as_built(other or a.cache)  # the identity of the build whose keys the file holds
            return caches[other] if other else cache

        strip = lambda xs: [x.partition("@")[0] for x in xs]  # noqa: E731
        sets = [strip(t.split("+")) for t in a.train]  # "a.json@C1+b.json@C2": one shape set timed twice
        doc = cross_validate(sets, strip(a.eval + a.final_train), cache_of, stack, final_extra=strip(a.final_train))
        if a.out:
            Path(a.out).write_text(json.dumps(doc, indent=1))
        return
    train_rows, train_meta = load(a.train)
    tsamp = samples(train_rows, train_meta, cache, stack)
    arch = next(iter(train_meta.values()))[1]
    model = fit([s for _, _, ss in tsamp.values() for s in ss], arch=arch, groups=[prob for prob, (_, _, ss) in tsamp.items() for _ in ss],
                fastest=fastest_of(train_rows))
    doc = {"model": json.loads(model.to_json()), "train": [Path(p).name for p in a.train], "sets": {}}
    for path in a.train + a.eval:
        rows, meta = load([path])
        rep = evaluate(model, rows, meta, cache, stack)
        s = summary(rep)
        split = "train" if path in a.train else "held-out"
        doc["sets"][Path(path).name] = {"split": split, "summary": s, "rows": rep}
        print(f"{Path(path).name:40s} {split:8s} auto within 5% of the fastest: {s.get('within_5pct')}/{s.get('timed')}"
              f"  geomean auto/fastest {s.get('geomean_auto_over_best', 0):.3f}  worst {s.get('worst', 0):.2f}")  # fmt: skip
        if a.verbose:
            for r in rep:
                if r["ratio"] is None or r["ratio"] > 1.05:
                    print(f"    {r['name']:34s} {r['ratio'] or 0:.2f}  auto {r['auto_label']} p{r['auto_pool']} k{r['auto_ks']} {r['auto_us'] or 0:.1f}"
                          f"  fastest {r['best_label']} p{r['best_pool']} k{r['best_ks']} {r['best_us']:.1f}")  # fmt: skip
    print("constants:", {t: round(c, 5) for t, c in zip(doc["model"]["terms"], model.constants)}, f"fit error {model.fit_error:.3f}")
    if a.out:
        Path(a.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
