"""What the JIT kernel prototypes share (dw_vert_proto.py, grouped_walk_proto.py, dw_sweep_proto.py): timing every
configuration of a row at several split degrees against a float64 reference, auto and cuDNN timed the same way
beside them, and the command line that runs a corpus and writes the record. Nothing here is product code.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from pathlib import Path

# Imported before triton by the prototypes: the repository and benchmarks/ on the path, and for --interpret-check
# Triton's interpreter, which is chosen when triton is imported.
ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "benchmarks"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))
if "--interpret-check" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"

from graph_timing import graph_time  # noqa: E402


def split_range(tiles: int, total: int, ctas_per_cu: float, cus: int) -> tuple[int, int]:
    """(splits, items per split) of a reduction of ``total`` items (rows, images) over which ``tiles`` CTAs each
    walk: about ``ctas_per_cu`` CTAs per CU in all, no split empty."""
    splits = max(1, min(total, math.ceil(ctas_per_cu * cus / tiles)))
    per = math.ceil(total / splits)
    return math.ceil(total / per), per


def geo(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def time_configs(torch, dw, ref, configs, split_choices, launch, usable=lambda cfg: True) -> dict:
    """Per configuration and split choice: ``launch(cfg, c)`` -> (fn, geometry), ``fn`` run once on a NaN-poisoned
    ``dw`` and checked against ``ref`` (relative norm), then graph-timed if within 1e-4. ``usable(cfg)`` False:
    skipped (e.g. vectors that would be misaligned: a fault would end the run)."""
    rn = ref.norm().item()
    out = {}
    for cfg in configs:
        if not usable(cfg):
            continue
        for c in split_choices:
            key = f"{cfg}_s{c:g}"
            try:
                fn, geometry = launch(cfg, c)
                dw.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                err = ((dw.double().reshape(ref.shape) - ref).norm() / rn).item()
                rec = dict(geometry, rel_err=err, ok=bool(err < 1e-4))
                if rec["ok"]:
                    rec["us"] = graph_time(torch, fn)
            except Exception as e:  # noqa: BLE001  (recorded: which configuration could not run)
                rec = {"error": f"{type(e).__name__}: {e}"[:300]}
            out[key] = rec
    return out


def auto_and_cudnn(torch, p, xc, dyc, weight_shape, ref, as_ref) -> dict:
    """``skwgrad.wgrad`` (auto, fp32 dW; ``as_ref`` maps its dW onto ``ref``'s layout) and cuDNN's weight gradient
    on the same channels-last NCHW views, graph-timed like the prototype."""
    import skwgrad

    kw = dict(filter_size=(p.y, p.x), stride=(1, 1), padding=(p.pad_lo[1], p.pad_lo[2]), dilation=(1, 1), dw_dtype="fp32", groups=p.g)
    got = skwgrad.wgrad(xc, dyc, **kw)
    out = {"auto_rel_err": ((as_ref(got.double()) - ref).norm() / ref.norm()).item()}
    out["auto_us"] = graph_time(torch, lambda: skwgrad.wgrad(xc, dyc, **kw))
    w = torch.empty(weight_shape, device=xc.device, dtype=xc.dtype).contiguous(memory_format=torch.channels_last)
    args = ([1, 1], [p.pad_lo[1], p.pad_lo[2]], [1, 1], False, [0, 0], p.g, [False, True, False])
    out["cudnn_us"] = graph_time(torch, lambda: torch.ops.aten.convolution_backward(dyc, xc, w, None, *args))
    return out


def best_of(row: dict) -> dict:
    """The row's fastest verified configuration, set as ``best`` / ``best_us``."""
    ok = {k: v["us"] for k, v in row["configs"].items() if v.get("us")}
    if ok:
        row["best"] = min(ok, key=ok.get)
        row["best_us"] = ok[row["best"]]
    return row


def parser(doc: str, configs) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--corpus", action="append")
    ap.add_argument("--out")
    ap.add_argument("--configs", default=",".join(configs), help="comma list of CONFIGS names")
    ap.add_argument("--splits", default="2,4,8", help="comma list of CTAs per CU the split degree aims at")
    ap.add_argument("--interpret-check", action="store_true", help="numerics on the CPU under Triton's interpreter")
    return ap


def run_corpora(args, triton_version: str, applies, run_row, extra_summary=None) -> dict:
    """Every row of ``args.corpus`` that ``applies``: ``run_row(torch, p, name, cus, splits, configs)``, printed and
    written to ``args.out`` as it goes; then the summary (best and auto against cuDNN and each other)."""
    import torch

    from skwgrad.abi.conv import from_row

    torch.backends.cudnn.benchmark = True
    configs = tuple(args.configs.split(","))
    splits = tuple(float(v) for v in args.splits.split(","))
    cus = torch.cuda.get_device_properties(0).multi_processor_count
    doc = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "triton": triton_version, "rows": []}  # fmt: skip
    for corpus in args.corpus:
        with open(corpus) as f:
            for row in csv.DictReader(f):
                p = from_row(row)
                if not applies(p):
                    continue
                t0 = time.time()
                r = run_row(torch, p, row["name"], cus, splits, configs)
                r["corpus"] = Path(corpus).name
                doc["rows"].append(r)
                print(f"{row['name'][:44]:44s} cudnn {r['cudnn_us']:8.1f} auto {r['auto_us']:8.1f} best {r.get('best_us', 0):8.1f} "
                      f"{r.get('best', '-')} [{time.time() - t0:.1f}s]", flush=True)  # fmt: skip
                Path(args.out).write_text(json.dumps(doc, indent=1))
    rows = [r for r in doc["rows"] if r.get("best_us")]
    doc["summary"] = {"rows": len(rows), "best_vs_auto": geo([r["auto_us"] / r["best_us"] for r in rows]),
                      "best_vs_cudnn": geo([r["cudnn_us"] / r["best_us"] for r in rows]),
                      "auto_vs_cudnn": geo([r["cudnn_us"] / r["auto_us"] for r in rows]),
                      "rows_at_1p5x_cudnn": sum(r["cudnn_us"] / r["best_us"] >= 1.5 for r in rows),
                      **(extra_summary(rows, configs) if extra_summary else {})}  # fmt: skip
    print("summary", json.dumps(doc["summary"]))
    Path(args.out).write_text(json.dumps(doc, indent=1))
    return doc


def main(doc: str, configs, triton_version: str, applies, run_row, interpret_check=None, extra_summary=None) -> None:
    args = parser(doc, configs).parse_args()
    if args.interpret_check:
        if interpret_check is None:
            raise SystemExit("this prototype has no --interpret-check")
        return interpret_check()
    if not args.corpus or not args.out:
        raise SystemExit("--corpus and --out are required" + (" (or --interpret-check)" if interpret_check else ""))
    run_corpora(args, triton_version, applies, run_row, extra_summary)
