"""What the TMA im2col family (``wgrad_tma``) gives a user through ``auto``, measured in one pass.

    python benchmarks/gpu_tma_auto.py --cache CACHE --corpus tests/data/wgrad_shapes.csv [--corpus ...] --out tma.json

Per dense or grouped 16-bit row the cache serves, in one process on one device, timed the same way (median of
``--iters`` event-timed launches behind a stream hold, rounds interleaved):
- ``auto``: ``choose`` (no tuned records), the shipped selection, TMA kernels included;
- ``auto_old``: the best-ranked candidate of the other families (what auto picked before them);
- ``tma_best``: the fastest of the ``--top`` TMA candidates the model ranks first (best-of);
- ``old1``..: the next ``--top-old`` - 1 candidates of the other families by rank, so the best
  measured launch of a row (``best_us``, what a tuner among these would keep) is not only TMA's;
- cuDNN (``aten.convolution_backward``, channels last, benchmark mode);
and the user's call end to end: ``plan(x, dy)`` on torch tensors, host included, for ``auto``.
Every timed launch is checked first against the float64 reference, dW poisoned (0xFF) before it,
workspace too. Rows where auto takes a non-TMA kernel still count: that is what the user gets.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def _geo(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def stage_twins(choice, cache, arch, stages):
    """The cached kernels of ``choice``'s spec with another ring depth, at its launch setting."""
    import dataclasses

    from skwgrad.launcher.plan import Kernel

    out = []
    for n in stages:
        want = dataclasses.replace(choice.spec, num_stages=n)
        if want == choice.spec:
            continue
        e = next((e for e in cache.find(arch, family="wgrad_tma") if e.spec == want), None)
        if e is not None:
            out.append(dataclasses.replace(choice, kernel=Kernel.from_entry(e, cache), predicted_us=None))
    return out


@contextmanager
def fill_ceiling_off():
    """The cost model without its TMA fill ceiling (what ranked before it), for ``auto_prev``."""
    from skwgrad.abi import costmodel as M

    saved = dict(M.TMA_FILL_CEILING)
    M.TMA_FILL_CEILING.clear()
    try:
        yield
    finally:
        M.TMA_FILL_CEILING.update(saved)


def prev_model(arch: str, constants: dict):
    """The built-in model of ``arch`` with some constants replaced (name -> value)."""
    from dataclasses import replace

    from skwgrad.abi.costmodel import TERMS, builtin

    m = builtin(arch)
    c = list(m.constants)
    for name, value in constants.items():
        c[TERMS.index(name)] = value
    return replace(m, constants=tuple(c))


def run_row(p, name, backend, cache, occ, hold, *, top, rounds, iters, seed, end_to_end_too=True, twins=(), top_old=1,
            prev_no_fill_ceiling=False, prev_constants=None, extra=(), extra_n=3, each_kernel=False):  # fmt: skip
    from ab_timing import verify_and_time

    from skwgrad.launcher.baseline import cudnn_time
    from skwgrad.launcher.hostdata import DeviceInputs
    from skwgrad.launcher.options import LaunchOptions
    from skwgrad.launcher.select import choose, rank_choices
    from skwgrad.reference import tolerance, wgrad_reference

    arch, cus = backend.arch, backend.compute_units
    # kernels on trial (``extra``: configurations the sweep does not build) are timed as trial<i>
    # only: auto, the other entrants and the row's best are what the shipped default gives
    trial = frozenset(e.key for e in cache.find(arch) if any(sub in e.label for sub in extra))
    auto = choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False, exclude=trial)
    ranked_all = rank_choices(p, cache, arch=arch, cus=cus, options=LaunchOptions(), occupancy=occ).choices
    ranked = [c for c in ranked_all if c.kernel.key not in trial]
    olds = [c for c in ranked if c.spec.family != "wgrad_tma"][: max(1, top_old)]
    old = olds[0] if olds else None
    tma_all = [c for c in ranked if c.spec.family == "wgrad_tma"]
    tma = tma_all[:top]
    for mode in ("", "persistent", "streamk"):  # and the best-ranked launch of each TMA mode, for the fit
        best = next((c for c in tma_all if c.spec.mode == mode), None)
        if best is not None and best not in tma:
            tma.append(best)
    trials = [c for sub in extra for c in [c for c in ranked_all if sub in c.kernel.label][:extra_n]]
    if each_kernel:  # every cached kernel of the other families at its best-ranked launch (a tile table judged)
        seen = {c.kernel.key for c in olds}
        for c in ranked:
            if c.spec.family != "wgrad_tma" and c.kernel.key not in seen:
                seen.add(c.kernel.key)
                olds.append(c)
    if twins:  # the same kernels and settings with deeper (or shallower) rings
        tma = tma + [t for c in tma for t in stage_twins(c, cache, arch, twins)]
    entrants = {"auto": auto}
    if prev_no_fill_ceiling or prev_constants:  # auto under the model before a change
        model = prev_model(arch, prev_constants or {})
        with fill_ceiling_off() if prev_no_fill_ceiling else nullcontext():
            entrants["auto_prev"] = choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False, exclude=trial, model=model)
    if old is not None:
        entrants["auto_old"] = old
    for i, c in enumerate(olds[1:], start=1):
        entrants[f"old{i}"] = c
    for i, c in enumerate(tma):
        entrants[f"tma{i}"] = c
    for i, c in enumerate(trials):
        entrants[f"trial{i}"] = c
    bufs = DeviceInputs.random(p, backend, seed=seed)
    out = {"name": name, "problem": p.describe(), "rows": {}}
    try:
        ref = wgrad_reference(p, bufs.x64, bufs.dy64)
        tol = tolerance(p.dtype, p.dw_dtype, p.precision)
        out["rows"], plans = verify_and_time(p, entrants, backend, bufs, ref, tol, hold, rounds=rounds, iters=iters)
        out["cudnn_us"], out["cudnn_note"] = cudnn_time(p, backend, iters=iters, seed=seed)
        out["host"] = end_to_end(p, iters=iters) if "auto" in plans and end_to_end_too else None
    finally:
        bufs.free()
    r = out["rows"]
    t = lambda k: r.get(k, {}).get("us")  # noqa: E731
    tma_times = [t(k) for k in r if k.startswith("tma") and t(k)]
    out["auto_us"], out["auto_old_us"], out["auto_prev_us"] = t("auto"), t("auto_old"), t("auto_prev")
    out["tma_best_us"] = min(tma_times) if tma_times else None
    all_times = [t(k) for k in r if t(k) and not k.startswith("trial")]
    trial_times = [t(k) for k in r if k.startswith("trial") and t(k)]
    out["trial_best_us"] = min(trial_times) if trial_times else None
    out["best_us"] = min(all_times) if all_times else None
    out["all_ok"] = all(x.get("ok") for x in r.values())
    return out


def end_to_end(p, *, iters):
    """The user's call, host included, wall time per call over ``iters`` back-to-back calls,
    synchronized at the end, on channels-last torch tensors: ``skwgrad.wgrad`` (the Python launch
    API) on the same tensors each call and alternating between two pairs (so the TMA kernels
    re-point their tensor maps on every call), the ``skwgrad::conv_weight_grad`` custom op (what
    traced graphs call; eager models patched by ``skwgrad.torch.patch`` take an autograd function
    instead), and PyTorch's own weight gradient on the same tensors."""
    import torch

    import skwgrad
    import skwgrad.torch as st

    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[p.dtype]
    dwt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[p.dw_dtype]
    dims = range(3 - p.spatial_dims, 3)  # 2-D: (h, w); 3-D: (d, h, w)
    cl = torch.channels_last if p.spatial_dims == 2 else torch.channels_last_3d
    sp = lambda vals: [vals[i] for i in dims]  # noqa: E731
    # c and k are per group: the tensors hold g groups of them (run V1 and V3 left g out, so their
    # grouped rows timed another, ungrouped problem end to end)
    pairs = [(torch.randn(p.n, p.g * p.c, *sp((p.di, p.hi, p.wi)), device="cuda", dtype=dt).contiguous(memory_format=cl),
              torch.randn(p.n, p.g * p.k, *sp((p.do, p.ho, p.wo)), device="cuda", dtype=dt).contiguous(memory_format=cl))
             for _ in range(2)]  # fmt: skip
    x, dy = pairs[0]
    w = torch.empty(p.g * p.k, p.c, *sp((p.z, p.y, p.x)), device="cuda", dtype=dt).contiguous(memory_format=cl)
    args = (sp(p.stride), sp(p.pad_lo), sp(p.dilation))
    kw = dict(filter_size=tuple(sp((p.z, p.y, p.x))), stride=tuple(args[0]), padding=tuple(args[1]), dilation=tuple(args[2]),
              dw_dtype=p.dw_dtype, groups=p.g)  # fmt: skip
    i = [0]

    def api():
        return skwgrad.wgrad(x, dy, **kw)

    def api_alternating():
        i[0] ^= 1
        a, b = pairs[i[0]]
        return skwgrad.wgrad(a, b, **kw)

    def op():
        return st.conv_weight_grad(x, dy, list(w.shape), *args, p.g, dwt, "bench")

    def theirs():
        return torch.ops.aten.convolution_backward(dy, x, w, None, *args, False, [0] * p.spatial_dims, p.g, [False, True, False])[1]

    out = {}
    for name, fn in (("api", api), ("api_alternating", api_alternating), ("op", op), ("torch", theirs)):
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        out[f"{name}_wall_us"] = (time.perf_counter() - t0) / iters * 1e6
    out["op_path"] = st.stats().get("layers", {}).get("bench")
    st.reset_stats()
    return out


def summarize(rows: list[dict], all_rows: list[dict]) -> dict:
    """Geomeans over the timed rows (auto, the best non-TMA launch by rank, the best timed launch
    of any family, each against cuDNN; auto against the best timed launch) and counts."""

    def ratio(num, den):
        return _geo([r[num] / r[den] for r in rows if r.get(num) and r.get(den)])

    # the grouped rows' end-to-end calls of runs before a595f5c timed an ungrouped problem: read
    # those runs' end-to-end numbers on dense rows only
    return {
        "rows": len(all_rows), "timed": len(rows), "all_ok": all(r.get("all_ok") for r in all_rows if "rows" in r),
        "auto_vs_cudnn": ratio("cudnn_us", "auto_us"), "auto_old_vs_cudnn": ratio("cudnn_us", "auto_old_us"),
        "auto_speedup_over_old": ratio("auto_old_us", "auto_us"), "auto_speedup_over_prev": ratio("auto_prev_us", "auto_us"),
        "trial_best_over_best": ratio("best_us", "trial_best_us"),
        "auto_differs_from_prev": sum(1 for r in rows if "auto_prev" in r["rows"] and r["rows"]["auto_prev"].get("same_as") != "auto"), "best_of_vs_cudnn": ratio("cudnn_us", "best_us"),
        "auto_within_5pct_of_best": sum(1 for r in rows if r.get("best_us") and r["auto_us"] <= 1.05 * r["best_us"]),
        "auto_over_best": ratio("auto_us", "best_us"),
        "auto_takes_tma": sum(1 for r in rows if r["rows"]["auto"]["family"] == "wgrad_tma"),
        **{f"end_to_end_{k}_vs_torch": _geo([r["host"]["torch_wall_us"] / r["host"][f"{k}_wall_us"] for r in rows if r.get("host")])
           for k in ("api", "api_alternating", "op")},
    }  # fmt: skip


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--corpus", action="append", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--top", type=int, default=4)
    ap.add_argument("--top-old", type=int, default=1, help="time the N best-ranked candidates of the other families (auto_old, old1..)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-end-to-end", action="store_true", help="device time only (no host-included calls)")
    ap.add_argument("--prev-no-fill-ceiling", action="store_true",
                    help="also time auto_prev: auto under the cost model without its TMA fill ceiling")
    ap.add_argument("--prev-constant", action="append", default=[], metavar="NAME=VALUE",
                    help="also time auto_prev: auto under the built-in model with this constant replaced (repeatable)")
    ap.add_argument("--extra", action="append", default=[],
                    help="also time the --extra-n best-ranked TMA launches whose kernel label holds this text")
    ap.add_argument("--extra-n", type=int, default=3)
    ap.add_argument("--each-kernel", action="store_true", help="also time every cached kernel of the other families at its best-ranked launch")
    ap.add_argument("--fp32", action="store_true", help="the fp32 rows (ieee or tf32; no TMA kernel applies) instead of the 16-bit ones")
    ap.add_argument("--stage-twins", default="", help="comma list of ring depths: time each TMA entrant's cached twins at them too")
    args = ap.parse_args()
    import torch

    torch.backends.cudnn.benchmark = True
    from compare_auto_tuned import timing_device

    from skwgrad.abi.conv import from_row
    from skwgrad.cache.store import Cache
    from skwgrad.launcher.select import NoKernelError

    prev_constants = {k: float(v) for k, v in (a.split("=", 1) for a in args.prev_constant)}
    backend, occ, hold = timing_device()
    cache = Cache(args.cache)
    doc = {"date": time.strftime("%Y-%m-%d"), "device": backend.device_name, "cus": backend.compute_units,
           "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "rows": []}  # fmt: skip
    import csv

    for corpus in args.corpus:
        with open(corpus) as f:
            for row in csv.DictReader(f):
                p = from_row(row)
                if p.is_depthwise or (p.dtype == "fp32") != args.fp32:
                    continue  # dense and grouped 16-bit rows: where the TMA family can apply (--fp32: the others)
                t0 = time.time()
                try:
                    res = run_row(p, row["name"], backend, cache, occ, hold, top=args.top, rounds=args.rounds, iters=args.iters, seed=args.seed,
                                  end_to_end_too=not args.no_end_to_end,
                                  twins=tuple(int(x) for x in args.stage_twins.split(",") if x), top_old=args.top_old,
                                  prev_no_fill_ceiling=args.prev_no_fill_ceiling, prev_constants=prev_constants,
                                  extra=tuple(args.extra), extra_n=args.extra_n, each_kernel=args.each_kernel)
                except NoKernelError as e:
                    res = {"name": row["name"], "problem": p.describe(), "error": str(e)[:300]}
                res["corpus"] = Path(corpus).name
                doc["rows"].append(res)
                a, o, b, c = (res.get(k) for k in ("auto_us", "auto_old_us", "tma_best_us", "cudnn_us"))
                auto_k = res.get("rows", {}).get("auto", {}).get("kernel", "-")
                print(f"{row['name'][:40]:40s} cudnn {c or 0:8.1f} auto {a or 0:8.1f} old {o or 0:8.1f} tma {b or 0:8.1f} "
                      f"ok={res.get('all_ok')} {auto_k} [{time.time() - t0:.1f}s]", flush=True)  # fmt: skip
                Path(args.out).write_text(json.dumps(doc, indent=1))
    rows = [r for r in doc["rows"] if r.get("auto_us") and r.get("cudnn_us")]
    doc["summary"] = summarize(rows, doc["rows"])
    doc["summary_by_set"] = {c: summarize([r for r in rows if r["corpus"] == c], [r for r in doc["rows"] if r["corpus"] == c])
                             for c in sorted({r["corpus"] for r in doc["rows"]})}  # fmt: skip
    print("summary", json.dumps(doc["summary"]))
    Path(args.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
