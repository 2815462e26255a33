"""Trial depthwise window configurations against the shipped window kernel and auto's pick, in one pass.

    python benchmarks/gpu_dw_configs_ab.py --cache CACHE --corpus SHAPES.csv --config 7:win7r2:32x32x4 ... --out ab.json

Per 2-D depthwise row, in one process on one device (``gpu_fused_ab.run_row``: every launch verified
three times against float64 with dW and the workspace poisoned, medians of event-timed launches in
interleaved rounds, cuDNN beside): ``auto``; ``before``, what auto took before the 32-channel 3x3
window kernels (``before_choice``); ``shipped``, the default's window kernel of the row's
filter at the family's split rule; and each ``--config`` (``build_dw_configs.py``'s format) cached
for the row, at the rule's degree for that kernel (``c<i>``), twice it (``c<i>_x2``) and half it
(``c<i>_h2``), so a configuration is not judged by a rule fitted to another one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def shipped_config(p) -> str | None:
    """The default sweep's first window configuration of ``p``'s filter at dilation 1, stride 1 or 2
    along W (sm_90)."""
    from skwgrad.aot.sweep import DWCONV_STRIDED_BR_WAVE32, DWCONV_WINDOW, DWCONV_WINDOW_BC_WAVE32, DWCONV_WINDOW_STRIDED

    if p.dilation[2] != 1 or p.stride[2] not in (1, 2):
        return None
    if p.stride[2] == 2:
        if p.x not in DWCONV_WINDOW_STRIDED:
            return None
        return f"{p.x}:{DWCONV_WINDOW_STRIDED[p.x][0]}:16x{DWCONV_STRIDED_BR_WAVE32}x4"
    if p.x not in DWCONV_WINDOW:
        return None
    mode, bp = DWCONV_WINDOW[p.x]
    return f"{p.x}:{mode}:{DWCONV_WINDOW_BC_WAVE32.get(mode, 16)}x{bp}x4"


def before_choice(p, cache, arch, cus, occ):
    """What auto took before the second channel blocks (fbac82e's parent): auto with the kernels of
    ``sweep.DWCONV_WINDOW_BLOCKS_WAVE32`` left out, so each window mode has its one block and the TMA
    depthwise family goes before it at 256+ channels (the split rule is the same for those kernels:
    their channels per thread are the ones it was fitted at)."""
    from skwgrad.aot.sweep import DWCONV_WINDOW_BLOCKS_WAVE32
    from skwgrad.launcher.select import choose

    second = {(m, bm, bk) for m, (bm, bk) in DWCONV_WINDOW_BLOCKS_WAVE32.items()}
    keys = frozenset(e.key for e in cache.find(arch, family="dwconv") if (e.spec.mode, e.spec.bm, e.spec.bk) in second)
    return choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False, exclude=keys)


def entrants(p, cache, arch, cus, occ, configs):
    from build_dw_configs import config_spec

    from skwgrad.launcher.plan import Kernel
    from skwgrad.launcher.select import _as_epilogue_takes, _family_ks, choose

    auto = choose(p, cache, arch=arch, cus=cus, occupancy=occ, use_tuned=False)
    out = {"auto": auto, "before": before_choice(p, cache, arch, cus, occ)}
    if auto.spec.family not in ("dwconv", "dwconv_tma"):
        return out
    variant = auto.spec.variant
    named = [("shipped", shipped_config(p))] + [(f"c{i}", c) for i, c in enumerate(configs)]
    for name, cfg in named:
        spec = config_spec(cfg, p, variant) if cfg else None
        e = next((e for e in cache.find(arch, family="dwconv") if e.spec == spec), None) if spec else None
        if e is None:
            continue
        k = Kernel.from_entry(e, cache)
        n = _as_epilogue_takes(p, k, _family_ks(p, spec, cus, resident=occ(k) if occ else None))
        out[name] = dataclasses.replace(auto, kernel=k, ks_count=n, pool=0, reason=name)
        if name != "shipped":
            for tag, m in (("x2", 2 * n), ("h2", max(1, n // 2))):
                if m != n:
                    out[f"{name}_{tag}"] = dataclasses.replace(auto, kernel=k, ks_count=_as_epilogue_takes(p, k, m), pool=0, reason=name)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--corpus", action="append", required=True)
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=200.0)
    ap.add_argument("--end-to-end", action="store_true", help="also the user's call, host included (gpu_tma_auto.end_to_end: the API, the op, PyTorch's)")
    a = ap.parse_args()
    import torch

    torch.backends.cudnn.benchmark = True
    from build_dw_configs import depthwise_rows
    from compare_auto_tuned import geo, timing_device
    from gpu_fused_ab import run_row

    from skwgrad.cache.store import Cache

    backend, occ, hold = timing_device()
    cache = Cache(a.cache)
    doc = {"date": time.strftime("%Y-%m-%d"), "commit": a.commit, "device": backend.device_name, "cus": backend.compute_units,
           "cudnn": torch.backends.cudnn.version(), "script": "benchmarks/gpu_dw_configs_ab.py", "configs": a.config,
           "corpus": a.corpus, "rows": []}  # fmt: skip
    t0 = time.time()
    for name, p in depthwise_rows(a.corpus):
        if time.time() - t0 > a.budget_s:
            print("budget spent; rows left out", flush=True)
            break
        ent = entrants(p, cache, backend.arch, backend.compute_units, occ, a.config)
        r = run_row(p, name, backend, cache, occ, hold, rounds=a.rounds, iters=a.iters, seed=0, entrants=ent, end_to_end_too=a.end_to_end)
        r["labels"] = {k: v.spec.label for k, v in ent.items()}
        r["ks"] = {k: v.ks_count for k, v in ent.items()}
        doc["rows"].append(r)
        t = {k: v.get("us") for k, v in r["rows"].items()}
        print(f"{name[:44]:44s} cudnn {r.get('cudnn_us') or 0:6.1f} " + " ".join(f"{k} {v or 0:6.1f}" for k, v in t.items())
              + f" ok={r['all_ok']}", flush=True)  # fmt: skip
        Path(a.out).write_text(json.dumps(doc, indent=1, default=str))

    def best(r, prefix):
        v = [x["us"] for k, x in r["rows"].items() if (k == prefix or k.startswith(prefix + "_")) and x.get("us")]
        return min(v) if v else None

    s = {"rows": len(doc["rows"]), "all_ok": all(r["all_ok"] for r in doc["rows"])}
    for i, cfg in enumerate(a.config):
        pairs = [(best(r, "shipped"), best(r, f"c{i}")) for r in doc["rows"]]
        pairs = [(x, y) for x, y in pairs if x and y]
        s[cfg] = {
            "rows": len(pairs),
            "shipped_over_best_geomean": geo([x / y for x, y in pairs]),  # > 1: the configuration is faster
            "faster_rows": sum(1 for x, y in pairs if y < x),
            "at_rule_over_best": geo([r["rows"][f"c{i}"]["us"] / best(r, f"c{i}") for r in doc["rows"] if r["rows"].get(f"c{i}", {}).get("us")]),
        }  # fmt: skip
    ab = [(r["rows"]["before"]["us"], r["rows"]["auto"]["us"], r["labels"]["before"] != r["labels"]["auto"] or r["ks"]["before"] != r["ks"]["auto"])
          for r in doc["rows"] if r["rows"].get("before", {}).get("us") and r["rows"]["auto"].get("us")]  # fmt: skip
    s["before_over_auto_geomean"] = geo([b / x for b, x, _ in ab])  # > 1: auto is faster than before
    s["changed_rows"] = sum(1 for *_, c in ab if c)
    s["changed_before_over_auto_geomean"] = geo([b / x for b, x, c in ab if c])
    s["changed_faster_rows"] = sum(1 for b, x, c in ab if c and x < b)
    s["before_over_cudnn_geomean"] = geo([r["cudnn_us"] / r["rows"]["before"]["us"] for r in doc["rows"] if r.get("cudnn_us") and r["rows"].get("before", {}).get("us")])
    s["at_1_5x_cudnn_auto"] = sum(1 for r in doc["rows"] if r.get("cudnn_us") and r["rows"]["auto"].get("us") and r["cudnn_us"] / r["rows"]["auto"]["us"] >= 1.5)
    s["lowest_auto_over_cudnn"] = min((r["cudnn_us"] / r["rows"]["auto"]["us"] for r in doc["rows"] if r.get("cudnn_us") and r["rows"]["auto"].get("us")), default=None)
    for k in ("api", "api_alternating", "op"):  # the user's call against PyTorch's, host included
        s[f"end_to_end_{k}_vs_torch"] = geo([r["host"]["torch_wall_us"] / r["host"][f"{k}_wall_us"] for r in doc["rows"] if r.get("host")])
    s["end_to_end_rows"] = sum(1 for r in doc["rows"] if r.get("host"))
    cud = [(r["cudnn_us"], min(x["us"] for x in r["rows"].values() if x.get("us"))) for r in doc["rows"] if r.get("cudnn_us")]
    s["best_over_cudnn_geomean"] = geo([c / b for c, b in cud])  # > 1: faster than cuDNN
    s["auto_over_cudnn_geomean"] = geo([r["cudnn_us"] / r["rows"]["auto"]["us"] for r in doc["rows"] if r.get("cudnn_us") and r["rows"]["auto"].get("us")])
    doc["summary"] = s
    Path(a.out).write_text(json.dumps(doc, indent=1, default=str))
    print("summary", json.dumps(s, indent=1))


if __name__ == "__main__":
    main()
