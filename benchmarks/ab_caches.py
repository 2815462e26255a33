"""One kernel source against another, in one pass: the same launches timed from two caches built
from different kernel sources (same sweep, so the same labels), interleaved.

For each problem of ``--corpus``: auto's pick and the model's ``--top`` best dense launches in cache
A, each matched in cache B by (label, pool, ks_count); every matched pair is timed ``--rounds``
times, A and B alternating (who goes first rotates), median of ``--iters`` event-timed launches
each behind a stream hold, on the same fresh random inputs. Each is scored by the median of its
rounds; per pair ``b_over_a`` < 1 means B's kernel is faster. B's outputs are checked against A's
(relative norm) on the first launch of each pair, so a wrong kernel cannot win.

    python benchmarks/ab_caches.py --a OLD_CACHE --b NEW_CACHE --corpus FILE.csv [--corpus ...] --out ab.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from compare_auto_tuned import geo, timing_device  # noqa: E402  (benchmarks/ is the script's own directory)

DENSE = ("wgrad", "wgrad_sk", "grouped")


def built_identity(cache_dir) -> tuple[str, str]:
    """(compiler, kernel source hash) most of the cache's entries were built with."""
    db = sqlite3.connect(f"file:{Path(cache_dir) / 'index.sqlite'}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT compiler, source_hash FROM entries GROUP BY 1, 2 ORDER BY COUNT(*) DESC LIMIT 1").fetchone()
    finally:
        db.close()
    if row is None:
        raise SystemExit(f"{cache_dir}: no entries")
    return tuple(row)


@contextlib.contextmanager
def reading_as(ident):
    """Read a cache as the source that built it: the two caches come from two kernel sources, and
    a cache hands out only the entries of the process's own identity (a benchmark-only patch of
    the store's identity, as fit_costmodel.py reads older caches)."""
    import skwgrad.cache.store as store

    saved = store._identity
    store._identity = lambda: ident
    try:
        yield
    finally:
        store._identity = saved


def _pairs(p, a, b, backend, occ, top, families=DENSE):
    """(plan A, plan B, A's choice, is auto's pick) for the launches both caches hold; ``a`` and
    ``b`` are (cache, identity); the ranked launches are those of ``families``."""
    from skwgrad.launcher.select import all_choices, choose

    arch, cus = backend.arch, backend.compute_units
    with reading_as(a[1]):
        auto = choose(p, a[0], arch=arch, cus=cus, occupancy=occ, use_tuned=False)
        ranked = [c for c in all_choices(p, a[0], arch=arch, cus=cus, occupancy=occ) if c.spec.family in families]
        ident = lambda c: (c.kernel.label, c.pool, c.ks_count)  # noqa: E731
        wanted = [auto] + [c for c in ranked if ident(c) != ident(auto)][:top]
        plans_a = [(c, c.plan(p, backend)) for c in wanted]
    with reading_as(b[1]):
        in_b = {ident(c): c for c in all_choices(p, b[0], arch=arch, cus=cus, occupancy=occ)}
        return [(pa, in_b[ident(c)].plan(p, backend), c, c is auto) for c, pa in plans_a if ident(c) in in_b]


def ab_problem(p, a, b, backend, *, occ, top, rounds, iters, hold, seed=0, families=DENSE):
    import numpy as np

    from skwgrad.launcher.hostdata import DeviceInputs
    from skwgrad.reference import relative_error, tolerance

    out = []
    bufs = DeviceInputs.random(p, backend, seed=seed)
    try:
        for pa, pb, ca, is_auto in _pairs(p, a, b, backend, occ, top, families):
            res = []
            for pl in (pa, pb):  # one checked launch each, dW poisoned first: B must compute what A computes
                bufs.poison_dw()
                pl.launch(bufs.dy, bufs.x, bufs.dw)
                res.append(bufs.read_dw())
            err = relative_error(res[1], res[0])
            if not np.isfinite(err) or err > tolerance(p.dtype, p.dw_dtype, ca.spec.precision):
                raise RuntimeError(f"{ca.kernel.label} p{ca.pool} k{ca.ks_count}: B's dW differs from A's (relative error {err:.2e})")
            times = {"a": [], "b": []}
            for i in range(rounds):
                for k in (("a", "b") if i % 2 == 0 else ("b", "a")):
                    pl = pa if k == "a" else pb
                    times[k].append(pl.time(bufs.dy, bufs.x, bufs.dw, warmup=2, iters=iters, hold=hold)["median_us"])
            ua, ub = statistics.median(times["a"]), statistics.median(times["b"])
            out.append({"kernel": ca.kernel.label, "pool": ca.pool, "ks": ca.ks_count, "auto": is_auto, "a_us": ua, "b_us": ub,
                        "b_over_a": ub / ua, "b_vs_a_rel_err": err, "a_rounds_us": times["a"], "b_rounds_us": times["b"]})  # fmt: skip
    finally:
        bufs.free()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="cache of the reference kernel source")
    ap.add_argument("--b", required=True, help="cache of the kernel source under test")
    ap.add_argument("--corpus", action="append", required=True)
    ap.add_argument("--top", type=int, default=3, help="the model's best dense launches timed beside auto's pick")
    ap.add_argument("--families", default=",".join(DENSE), help="comma list: the families whose best-ranked launches are timed")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=0, help="stop starting new problems after this many seconds")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    from skwgrad.abi.conv import read_corpus
    from skwgrad.cache import Cache
    from skwgrad.launcher.select import problem_key

    backend, occ, hold = timing_device()
    ca, cb = (Cache(a.a, readonly=True), built_identity(a.a)), (Cache(a.b, readonly=True), built_identity(a.b))
    doc = {"method": __doc__.split("\n\n")[0], "top": a.top, "rounds": a.rounds, "iters": a.iters, "arch": backend.arch,
           "compute_units": backend.compute_units, "a_identity": list(ca[1]), "b_identity": list(cb[1]), "sets": {}}  # fmt: skip
    t0 = time.time()
    for path in a.corpus:
        rows = []
        for name, _regime, prob in read_corpus(path):
            if a.budget_s and time.time() - t0 > a.budget_s:
                print(f"budget reached after {len(rows)} problems of {Path(path).name}", flush=True)
                break
            row = {"name": name, "problem": problem_key(prob)}
            try:
                row["pairs"] = ab_problem(prob, ca, cb, backend, occ=occ, top=a.top, rounds=a.rounds, iters=a.iters,
                                          hold=hold, families=tuple(a.families.split(",")))  # fmt: skip
            except Exception as e:  # noqa: BLE001  (one problem's failure is recorded, the rest still run)
                row["error"] = f"{type(e).__name__}: {e}"
            rows.append(row)
            for q in row.get("pairs", []):
                print(f"{name[:40]:40s} {q['kernel'][:52]:52s} p{q['pool']} k{q['ks']} A {q['a_us']:8.1f} B {q['b_us']:8.1f} "
                      f"B/A {q['b_over_a']:.3f} err {q['b_vs_a_rel_err']:.1e}{'  (auto)' if q['auto'] else ''}", flush=True)  # fmt: skip
            if "error" in row:
                print(f"{name}: {row['error']}", flush=True)
        pairs = [q for r in rows for q in r.get("pairs", [])]
        autos = [q for q in pairs if q["auto"]]
        best = [min(r["pairs"], key=lambda q: q["b_us"])["b_us"] / min(r["pairs"], key=lambda q: q["a_us"])["a_us"]
                for r in rows if r.get("pairs")]
        s = {"problems": len(rows), "pairs": len(pairs), "geomean_b_over_a": geo([q["b_over_a"] for q in pairs]),
             "geomean_b_over_a_auto": geo([q["b_over_a"] for q in autos]), "geomean_best_b_over_best_a": geo(best),
             "b_faster": sum(1 for q in pairs if q["b_over_a"] < 1), "max_rel_err": max((q["b_vs_a_rel_err"] for q in pairs), default=None)}  # fmt: skip
        doc["sets"][Path(path).name] = {"summary": s, "rows": rows}
        print(f"{Path(path).name}: {json.dumps(s)}", flush=True)
        Path(a.out).write_text(json.dumps(doc, indent=1))
    Path(a.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
