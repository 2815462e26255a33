"""Offline study of the depthwise (``dwconv``) split-K rule on recorded H200 timings.

For every depthwise row of the ``select_all_*`` files (``calibrate --dry-run``: every candidate the
search timed, the dwconv kernels at the split degrees of 1, 2, 4, 8 CTAs per SM beside the rule's),
take the dwconv kernel configuration auto uses (``select._special_family_choice``'s ranking over
today's sm_90 default kernels), its time at every timed split degree, and score split rules:
rows within 5% of the fastest timed degree and the geomean chosen/fastest, per shape set and
leave-one-set-out (a rule's constants fitted on every set but one, the left-out set scored).

A rule may only be scored where the launch it asks for was timed: split degrees are keyed by the
launch they resolve to (``dwconv_geometry``: steps per split), and a rule whose pick was not timed
on a row is scored there at the nearest timed launch in log(steps per split) (counted and reported).

    python benchmarks/analyze_dwconv_ks.py            # tables + leave-one-set-out
    python benchmarks/analyze_dwconv_ks.py --rows     # the per-row table too
    python benchmarks/analyze_dwconv_ks.py --compile-regs /tmp/regs.txt   # sm_90 registers, no GPU
    python benchmarks/analyze_dwconv_ks.py --regs /tmp/regs.txt           # + the model at those
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from results_io import read_json  # noqa: E402  (benchmarks/ is the script's own directory)
from skwgrad.abi import launch, narrow  # noqa: E402
from skwgrad.abi.conv import parse_problem  # noqa: E402
from skwgrad.abi.launch import dwconv_geometry, dwconv_tiling, dwconv_window  # noqa: E402
from skwgrad.aot import sweep  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RES = os.path.join(HERE, "results")
CUS = 132

# shape set -> the select_all file of a run on today's kernel source (depthwise.py unchanged since
# 9e04525, run D1); the *_prefetch_e2 files (run E2's reverted double buffer) and the sessions 1-3
# files (older kernel source) are left out. corpus: the G7 file (E3-G1 time the same two rows
# again: used for the run-to-run noise only).
SETS = {
    "random_dw15": "select_all_random_dw15_2026-12-01_d1.json",
    "random_dw16": "select_all_random_dw16_2026-12-01_d2.json",
    "random_dw17": "select_all_random_dw17_2026-12-01_d3.json",
    "random_dw18": "select_all_random_dw18_2026-12-01_d5.json",
    "random_dw21": "select_all_random_dw21_2026-12-01_e6.json",
    "random_dw22": "select_all_random_dw22_2026-12-01_f1.json",
    "random_dw25": "select_all_random_dw25_2026-12-01_f3.json",
    "random_dw27": "select_all_random_dw27_2026-12-02_g7.json",
    "dwcorpus": "select_all_dwcorpus_2026-12-01_d1.json",
    "dws1": "select_all_dws1_2026-12-01_d4.json",
    "corpus": "select_all_corpus_2026-12-02_g7.json",
}
REPEATS = ["select_all_corpus_2026-12-01_e3.json", "select_all_corpus_2026-12-01_e5.json",
           "select_all_corpus_2026-12-01_f2.json", "select_all_corpus_2026-12-02_g1.json",
           "select_all_corpus_2026-12-02_g7.json"]  # fmt: skip

SPLIT_PREFS = ("workspace", "atomic", "two_stage", "direct")  # _special_family_choice, n > 1
ONE_PREFS = ("direct", "workspace", "two_stage", "atomic")  # n == 1


def default_specs():
    out = []
    for dt in ("bf16", "fp16", "fp32"):
        out += sweep.dwconv_specs("default", "sm_90", dt)
    return out


def default_labels() -> set[str]:
    return {s.label for s in default_specs()}


def auto_config(problem, specs):
    """The dwconv configuration ``_special_family_choice`` takes from today's sm_90 default for
    ``problem`` (admitting, widest vectors, window first, fewest taps, the "taps" layout)."""
    ok = [s for s in specs if (s.dtype, s.dw_dtype, s.spatial_dims) == (problem.dtype, problem.dw_dtype, problem.spatial_dims)]
    ok = narrow.selectable(ok, problem)
    if not ok:
        return None
    key = lambda s: ((not s.dwconv_window.bw, s.bn), s.mode != "taps", s.label)  # noqa: E731
    lead = min(ok, key=key)
    return (lead.dtype, lead.dw_dtype, lead.vec_c, lead.bm, lead.bn, lead.bk, lead.mode, lead.spatial_dims)


def rank_key(spec: dict, label: str):
    bw = dwconv_window(spec["mode"]).bw
    return ((not bw, spec["bn"]), spec["mode"] != "taps", label)


def config_of(spec: dict):
    return (spec["dtype"], spec["dw_dtype"], spec["vec_c"], spec["bm"], spec["bn"], spec["bk"], spec["mode"], spec["spatial_dims"])


class Row:
    """One depthwise problem on auto's dwconv configuration: times keyed by steps per split."""

    def __init__(self, set_name, name, problem, spec, times, label):
        self.set, self.name, self.p, self.label = set_name, name, problem, label
        self.bc, self.taps, self.br, self.mode = spec["bm"], spec["bn"], spec["bk"], spec["mode"]
        self.win = dwconv_window(self.mode)
        t = dwconv_tiling(problem, self.bc, self.taps, self.br, self.mode)
        self.tiles, self.steps = t.num_tiles, t.iters_per_tile
        self.times = times  # ks_iters -> (ks_count, us)
        self.best_iters = min(times, key=lambda i: times[i][1])
        self.best_us = times[self.best_iters][1]
        p = problem
        self.rows = p.n * p.do * p.ho * p.wo  # N*Do*Ho*Wo
        self.filter_taps = p.z * p.y * p.x
        self.elt = {"bf16": 2, "fp16": 2, "fp32": 4}[p.dtype]

    def iters_for(self, ks: int) -> int:
        ks = max(1, min(ks, self.steps))
        return math.ceil(self.steps / ks)

    def time_for(self, ks: int):
        """(us, exact) for the launch a requested ks resolves to."""
        it = self.iters_for(ks)
        if it in self.times:
            return self.times[it][1], True
        near = min(self.times, key=lambda i: (abs(math.log(i / it)), i))
        return self.times[near][1], False

    def rule_ks(self, ctas_per_cu=None) -> int:
        return launch.dwconv_ks_count(self.p, bc=self.bc, br=self.br, compute_units=CUS, ctas_per_cu=ctas_per_cu, mode=self.mode)

    def bytes_per_step(self) -> float:
        """Input bytes one step of one CTA reads (dy + x, one channel block): a rough traffic scale."""
        if self.win.bw:
            cols = self.win.bw * self.win.sw + (self.p.x - 1) * self.win.dl
            return self.br * self.bc * self.elt * (self.win.bw + self.win.tr * cols)
        return self.br * self.bc * self.elt * (1 + self.filter_taps)


def load_rows(files: dict[str, str], labels: set[str], log=print) -> list[Row]:
    specs = default_specs()
    rows = []
    for set_name, fname in files.items():
        d = read_json(os.path.join(RES, fname))
        assert d["compute_units"] == CUS, fname
        by = defaultdict(list)
        for r in d["rows"]:
            if r["family"] == "dwconv" and r["label"] in labels:
                by[(r["name"], r["problem"])].append(r)
        for (name, ptext), rs in by.items():
            p = parse_problem(ptext)
            want = auto_config(p, specs)
            same = [r for r in rs if config_of(r["spec"]) == want]
            if not same:
                log(f"  skip {set_name}/{name}: today's auto config {want} not timed in {fname}")
                continue
            lead = same[0]
            spec = lead["spec"]
            times = {}  # ks_iters -> (ks, us, variant rank)
            for r in same:
                s = r["spec"]
                geo = dwconv_geometry(p, s["variant"], bc=s["bm"], taps=s["bn"], br=s["bk"], ks_count=r["ks_count"], mode=s["mode"])
                prefs = ONE_PREFS if geo.ks_count == 1 else SPLIT_PREFS
                if s["variant"] not in prefs:
                    continue
                pr = prefs.index(s["variant"])
                old = times.get(geo.ks_iters)
                if old is None or pr < old[2] or (pr == old[2] and r["us"] < old[1]):
                    times[geo.ks_iters] = (geo.ks_count, r["us"], pr)
            if not times:
                log(f"  skip {set_name}/{name}: no timing of auto's config")
                continue
            times = {i: (k, us) for i, (k, us, _) in times.items()}
            rows.append(Row(set_name, name, p, spec, times, lead["label"]))
    return rows


def load_ks_sweep(path: str, set_name: str, bc: int = 32) -> list[Row]:
    """Rows of a ``dw_mma_proto.py ks`` file (run U5): the 7x7 stride-1 window kernel at ``bc``
    channels per CTA, every split degree timed (atomic epilogue into an fp32 dW)."""
    d = read_json(path)
    rows = []
    for r in d["rows"]:
        q = r["problem"]
        p = parse_problem(f"n={q['n']},c={q['groups']},k={q['groups']},g={q['groups']},h={q['h']},w={q['w']},y=7,x=7,padding=3,"
                          f"dtype={q['dtype']},dw_dtype={q['dw_dtype']}")
        spec = {"bm": bc, "bn": 7, "bk": 32, "mode": "win7"}
        times = {}
        for x in r["launches"]:
            if x["bc"] == bc and x["ok"]:
                geo = dwconv_geometry(p, "atomic", bc=bc, taps=7, br=32, ks_count=x["ks"], mode="win7")
                if geo.ks_iters not in times or x["us"] < times[geo.ks_iters][1]:
                    times[geo.ks_iters] = (geo.ks_count, x["us"])
        rows.append(Row(set_name, r["name"], p, spec, times, f"dwconv_{q['dtype']}_2d_v8_c{bc}t7r32_w4s1_win7_atomic"))
    return rows


# -- rules -------------------------------------------------------------------------------------
# A rule: (row, params) -> requested ks_count. Each comes with a grid of its constants.


def rule_old(row: Row, prm=None) -> int:
    """The rule before this study: window kernels at 2 CTAs per SM (DWCONV_WIN_CTAS_PER_CU, each
    split >= 2 steps), gather kernels at 4 (>= 8 steps)."""
    if row.win.bw:
        return row.rule_ks(2)
    return row.rule_ks()


def rule_shipped(row: Row, prm=None) -> int:
    """Whatever skwgrad.abi.launch.dwconv_ks_count does now."""
    return row.rule_ks()


def _clamp(row: Row, want: int, min_steps: int) -> int:
    return max(1, min(want, row.steps // min_steps, row.steps))


def rule_work_target(row: Row, prm) -> int:
    """Window kernels: split while each CTA keeps at least S steps, at most H CTAs per SM, at
    least L CTAs per SM where the steps allow (the prior attempt was L=2, H=8)."""
    lo, hi, s = prm
    if not row.win.bw:
        return row.rule_ks()
    want_hi = math.ceil(hi * CUS / row.tiles)
    want_lo = math.ceil(lo * CUS / row.tiles)
    ks = max(want_lo, min(want_hi, row.steps // s))
    return _clamp(row, ks, launch.DWCONV_WIN_MIN_STEPS)


SEARCH_CTAS_PER_CU = (1, 2, 4, 8)  # select.DWCONV_SEARCH_CTAS_PER_CU: the degrees the search times


def products_per_step(row: Row) -> int:
    """Multiply-adds per channel in one step of a window CTA: BR strips x BW columns x TR x X taps."""
    return row.br * row.win.bw * row.win.tr * row.p.x


def tile_elements(row: Row) -> int:
    """dW elements one window CTA adds in its epilogue: its live channels x its TR x X taps."""
    return min(row.bc, row.p.g) * row.win.tr * row.p.x


def model_cost(row: Row, iters: int, resident: int, a: float, c: float) -> float:
    """Waves of ``resident`` CTAs per SM, each CTA a + iters x products per step (its fixed cost
    and its loop), plus c per dW element per split for the atomic epilogue, whose updates of one
    channel block's elements serialize (same addresses) however many SMs run them."""
    ks = math.ceil(row.steps / iters)
    waves = math.ceil(ks * row.tiles / (resident * CUS))
    return waves * (a + iters * products_per_step(row)) + c * ks * tile_elements(row)


def model_cost_sat(row: Row, iters: int, resident: int, a: float, c: float, sat: float) -> float:
    """``model_cost`` with an SM's speed: it runs m = ceil(ks x tiles / CUS) CTAs, in
    ceil(m / resident) waves if fewer than ``sat`` co-resident CTAs already fill its issue slots
    (latency-bound: a CTA's time whatever its neighbours), else m / sat CTA-times (issue-bound: CTAs
    share the SM). sat >= resident is ``model_cost``."""
    ks = math.ceil(row.steps / iters)
    m = math.ceil(ks * row.tiles / CUS)
    per_cta = a + iters * products_per_step(row)
    return max(math.ceil(m / resident), m / sat) * per_cta + c * ks * tile_elements(row)


def make_model_rule(resident_fn, cost=None):
    def rule(row: Row, prm) -> int:
        if not row.win.bw:
            return row.rule_ks()
        best = None
        for cpc in SEARCH_CTAS_PER_CU:
            ks = row.rule_ks(cpc)
            it = row.iters_for(ks)
            t = cost(row, it, resident_fn(row), *prm) if cost else model_cost(row, it, resident_fn(row), *prm)
            if best is None or t < best[0] - 1e-9:
                best = (t, ks)
        return best[1]
    return rule


REGS = {}  # label without the variant -> sm_90 registers (--regs FILE, from compiling the default)


def resident_true(row: Row) -> int:
    """CTAs per SM by the compiled kernel's registers (65536 / (regs x 128 threads))."""
    base = row.label.rsplit("_", 1)[0]
    return max(1, 65536 // (REGS[base] * 128))


MODEL_GRID = [(a, c) for a in (0, 1000, 2000, 4000, 8000) for c in (0.5, 1, 1.5, 2, 3, 5, 10)]


RULES = {
    "old": (rule_old, [None]),
    "work_target": (rule_work_target, [(lo, hi, s) for lo in (0.5, 1, 2) for hi in (2, 4, 8) if hi > lo
                                        for s in (2, 4, 6, 8, 12, 16, 24, 32)]),
    "model_R2": (make_model_rule(lambda r: 2), MODEL_GRID),
    # the shipped form: residency by the mode's (TR, SW), from the sm_90 default's registers
    "model_Rmode": (make_model_rule(lambda r: launch.DWCONV_WIN_RESIDENT.get((r.win.tr, r.win.sw), 2)), MODEL_GRID),
    "shipped_constants": (rule_shipped, [None]),  # not refit per fold: its A, C saw every set
    # model_Rmode with the SM's issue-bound speed (model_cost_sat): sat co-resident CTAs fill an SM
    "model_sat": (make_model_rule(lambda r: launch.DWCONV_WIN_RESIDENT.get((r.win.tr, r.win.sw), 2), model_cost_sat),
                  [(a, c, sat) for a, c in MODEL_GRID for sat in (1, 1.5, 2, 3, 99)]),
}


def score(rows, fn, prm):
    """(within 5%, n, sum log ratio, inexact picks)."""
    w = n = inexact = 0
    s = 0.0
    for r in rows:
        us, exact = r.time_for(fn(r, prm))
        ratio = us / r.best_us
        w += ratio <= 1.05
        n += 1
        s += math.log(ratio)
        inexact += not exact
    return w, n, s, inexact


def objective(sc):
    w, n, s, _ = sc
    return (w, -s)  # more rows within 5%, then the smaller geomean


def fit(rows, name):
    fn, grid = RULES[name]
    return max(grid, key=lambda prm: (objective(score(rows, fn, prm)), str(prm)))


def loso(rows, name, sets):
    fn, _ = RULES[name]
    out = {}
    for s in sets:
        train = [r for r in rows if r.set != s]
        test = [r for r in rows if r.set == s]
        prm = fit(train, name)
        out[s] = (prm, score(test, fn, prm))
    return out


def fmt(sc):
    w, n, s, inex = sc
    if not n:
        return "-"
    return f"{w}/{n} {math.exp(s / n):.3f}" + (f" ({inex} inexact)" if inex else "")


def noise(labels):
    """Run-to-run spread of the same launch in the corpus repeats (E3, E5, F2, G1, G7)."""
    seen = defaultdict(list)
    for f in REPEATS:
        d = read_json(os.path.join(RES, f))
        for r in d["rows"]:
            if r["family"] == "dwconv" and r["label"] in labels:
                seen[(r["name"], r["label"], r["ks_count"])].append(r["us"])
    spreads = [max(v) / min(v) for v in seen.values() if len(v) >= 3]
    spreads.sort()
    return len(spreads), spreads[len(spreads) // 2], spreads[-1]


def _compile_regs(spec):
    import warnings

    warnings.filterwarnings("ignore")
    from skwgrad.aot.compile import compile_spec

    md = compile_spec(spec, "sm_90").metadata
    return spec.label, md.get("regs"), md.get("shared"), md.get("threads")


def compile_regs(path):
    """Compile the sm_90 default's window kernels here (Triton, no GPU) and write their registers."""
    from concurrent.futures import ProcessPoolExecutor

    specs = [s for s in default_specs() if s.dwconv_window.bw]
    with ProcessPoolExecutor(os.cpu_count() or 2) as ex, open(path, "w") as out:
        for t in ex.map(_compile_regs, specs):
            out.write(repr(t) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", action="store_true")
    ap.add_argument("--window-only", action="store_true", help="score window-kernel rows only")
    ap.add_argument("--regs", help="file of (label, regs, shared, threads) tuples: adds the model at the kernels' own residency")
    ap.add_argument("--compile-regs", metavar="FILE", help="write that file (compiles 24 kernels) and exit")
    ap.add_argument("--ks-sweep", action="append", default=[], metavar="SET=FILE",
                    help="add the rows of a dw_mma_proto.py ks file (run U5) as shape set SET")
    args = ap.parse_args()
    if args.compile_regs:
        compile_regs(args.compile_regs)
        return
    if args.regs:
        import ast
        for line in open(args.regs):
            t = ast.literal_eval(line.strip())
            REGS[t[0].rsplit("_", 1)[0]] = t[1]
        RULES["model_Rregs"] = (make_model_rule(resident_true), MODEL_GRID)
    labels = default_labels()
    rows = load_rows(SETS, labels)
    for spec in args.ks_sweep:
        name, path = spec.split("=", 1)
        rows += load_ks_sweep(path, name)
        SETS[name] = path
    if args.window_only:
        rows = [r for r in rows if r.win.bw]
    sets = list(SETS)
    print(f"{len(rows)} depthwise rows ({sum(1 for r in rows if r.win.bw)} on window kernels)")
    if args.rows:
        print("| set | row | kernel | tiles | steps | N*Ho*Wo | taps | s | old ks (iters) | best ks (iters) | times ks:us | old/best | new ks | new/best |")
        print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
        for r in rows:
            k = rule_old(r)
            us, _ = r.time_for(k)
            kn = r.rule_ks()
            un, _ = r.time_for(kn)
            ts = " ".join(f"{ks}:{u:.1f}" for i, (ks, u) in sorted(r.times.items(), key=lambda x: -x[0]))
            kl = r.label.split("_w4s1_")[0].split("_2d_")[-1] + ("/" + r.mode if r.mode else "")
            print(f"| {r.set} | {r.name} | {kl} | {r.tiles} | {r.steps} | {r.rows} | {r.filter_taps} | {r.p.stride[2]} "
                  f"| {k} ({r.iters_for(k)}) | {r.times[r.best_iters][0]} ({r.best_iters}) | {ts} | {us / r.best_us:.3f} | {kn} | {un / r.best_us:.3f} |")
    n, med, worst = noise(labels)
    print(f"\nnoise: {n} dwconv launches timed in >= 3 corpus runs: max/min median {med:.3f}, worst {worst:.3f}")
    print("\nin-sample (all sets), best constants per rule:")
    for name in RULES:
        prm = fit(rows, name)
        print(f"  {name:12s} {str(prm):18s} {fmt(score(rows, RULES[name][0], prm))}")
    print("\nleave-one-set-out (constants fitted on the other sets):")
    res = {name: loso(rows, name, sets) for name in RULES}
    hdr = "| set | rows | " + " | ".join(RULES) + " |"
    print(hdr)
    print("|---|---:|" + "---|" * len(RULES))
    for s in sets:
        cells = [fmt(res[name][s][1]) + ("" if name in ("old", "shipped_constants") else f" {res[name][s][0]}") for name in RULES]
        print(f"| {s} | {res['old'][s][1][1]} | " + " | ".join(cells) + " |")
    for name in RULES:
        tot = [sum(res[name][s][1][i] for s in sets) for i in range(4)]
        print(f"  LOSO total {name:12s} {fmt(tot)}")


if __name__ == "__main__":
    main()
