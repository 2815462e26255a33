"""skwgrad.torch on whole models, on the GPU machine: gradients of a patched model vs PyTorch's,
fallbacks per layer, backward time vs native, torch.compile(fullgraph=True) with graph-break
count, mode="reduce-overhead" (CUDA graphs) for many steps with gradient checks against eager,
and torch.library.opcheck on CUDA tensors.

    python benchmarks/gpu_torch_model.py --out out/torch_model.json [--cache DIR]

Models: torchvision ResNet-50 and MobileNetV2 (random init), batch 32, channels_last, bf16
autocast (fp32 weights: dW comes back fp32). The kernels come from the cache (``--cache`` or
$SKWGRAD_CACHE); every shape without a fitting kernel falls back to PyTorch and is counted, so
the script runs on any cache, an empty one included. Each model's wgrad shapes are also written
as a corpus CSV beside the JSON (``skwgrad compile-all --corpus`` builds a cache for them).
The JSON is rewritten after every phase, so a run cut short still leaves what it measured; the
phases stop starting once ``--budget-s`` (default 285 s) is near.

CPU smoke run (no torchvision needed): ``--device cpu --models tiny --compile-backend aot_eager``.
"""

import argparse
import copy
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import skwgrad.torch as st  # noqa: E402

# Patched vs native, eager: only conv weight gradients differ (forward and dX are PyTorch's in
# both). Native autocast rounds dW to bf16 once (2**-9 relative); skwgrad keeps it in fp32, or
# rounds once more when it widens a bf16 dW. Bound on max|dW - dW_native| / max|dW_native|:
DW_BOUND = {"bf16": 2.0**-7, "fp16": 2.0**-9, "fp32": 1e-3}
# Compiled vs eager: inductor fuses and rounds differently in bf16 all through the network, so the
# comparison is per parameter on the norm: ||g_compiled - g_eager|| / ||g_eager||.
COMPILED_NORM_BOUND = 5e-2


def _git_commit():
    try:
        root = Path(__file__).resolve().parents[1]
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or None  # fmt: skip
    except Exception:
        return None


def environment(dev):
    env = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": _git_commit(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "skwgrad_cache": os.environ.get("SKWGRAD_CACHE"),
    }
    try:
        import torchvision

        env["torchvision"] = torchvision.__version__
    except ImportError:
        env["torchvision"] = None
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        env.update(gpu=p.name, sms=p.multi_processor_count, cudnn=torch.backends.cudnn.version())
    return env


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------
class Tiny(nn.Module):
    """For a CPU smoke run: a stem, a grouped bottleneck, a depthwise/pointwise pair, a head."""

    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.b1 = nn.Sequential(nn.Conv2d(16, 16, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                nn.Conv2d(16, 16, 3, 2, 1, groups=4, bias=False), nn.BatchNorm2d(16), nn.ReLU())  # fmt: skip
        self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU6(),
                                nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32))  # fmt: skip
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        return self.fc(self.dw(self.b1(self.stem(x))).mean((2, 3)))


def build_model(name):
    if name == "tiny":
        return Tiny()
    import torchvision

    return getattr(torchvision.models, name)(weights=None)


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------
class Timer:
    def __init__(self, dev):
        self.cuda = dev.type == "cuda"

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def ms(self, a, b):
        if self.cuda:
            b.synchronize()
            return a.elapsed_time(b)
        return (b - a) * 1e3


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def grads_of(model):
    return {n.removeprefix("_orig_mod."): (p.grad.detach().clone() if p.grad is not None else None)
            for n, p in model.named_parameters()}  # fmt: skip


def max_rel(a, b):
    """max|a - b| / max|b| (0 when both are zero)."""
    d = (a.double() - b.double()).abs().max().item()
    m = b.double().abs().max().item()
    return 0.0 if d == 0 else (d / m if m else float("inf"))


def norm_rel(a, b):
    d = (a.double() - b.double()).norm().item()
    m = b.double().norm().item()
    return 0.0 if d == 0 else (d / m if m else float("inf"))


class Runner:
    def __init__(self, a, dev):
        self.a, self.dev = a, dev
        self.amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.amp)
        self.timer = Timer(dev)

    def step(self, model, x, target, *, timed=False):
        """One forward + backward; returns (loss, forward ms, backward ms)."""
        model.zero_grad(set_to_none=True)
        t0 = self.timer.mark() if timed else None
        with torch.autocast(self.dev.type, dtype=self.amp, enabled=self.amp is not None):
            out = model(x)
            loss = F.cross_entropy(out.float(), target)
        t1 = self.timer.mark() if timed else None
        loss.backward()
        t2 = self.timer.mark() if timed else None
        if timed:
            return loss.detach(), self.timer.ms(t0, t1), self.timer.ms(t1, t2)
        return loss.detach(), None, None


class Budget:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        return self.end - time.monotonic()


def phase(res, key, fn, save, budget, need_s):
    """Run one phase into res[key]; record its error instead of stopping the script."""
    if budget.left() < need_s:
        res[key] = {"skipped": f"time budget: {budget.left():.0f} s left, this phase needs about {need_s:.0f} s"}
        print(f"  {key}: skipped ({res[key]['skipped']})", flush=True)
        save()
        return None
    t = time.monotonic()
    try:
        out = fn()
    except Exception as e:  # the script must go on to the next phase and leave its JSON
        res[key] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=20)}
        print(f"  {key}: ERROR {type(e).__name__}: {e}", flush=True)
        out = None
    else:
        res[key] = out
    if isinstance(res[key], dict):
        res[key]["seconds"] = round(time.monotonic() - t, 2)
    save()
    return out


# ---------------------------------------------------------------------------------------------
# Phases
# ---------------------------------------------------------------------------------------------
def grad_check(run, ref, pat, report, x, target):
    st.reset_stats()
    run.step(ref, x, target)
    g_ref = grads_of(ref)
    l_pat, _, _ = run.step(pat, x, target)
    g_pat = grads_of(pat)
    s = st.stats()
    dtype = run.a.amp if run.amp is not None else "fp32"
    bound = DW_BOUND[dtype]
    conv_w = {f"{name}.weight" for name in report.patched}
    per = {}
    for n, g in g_ref.items():
        if g is None or g_pat[n] is None:
            per[n] = None if g is None and g_pat[n] is None else float("inf")
            continue
        per[n] = max_rel(g_pat[n], g)
    layers = []
    for name in report.patched:
        e = s["layers"].get(name, {})
        layers.append({
            "layer": name, "problem": e.get("problem"), "path": "skwgrad" if e.get("skwgrad") else "native",
            "reasons": e.get("reasons", {}), "dw_cast": e.get("dw_cast", 0), "rel_err": per.get(f"{name}.weight"),
        })  # fmt: skip
    conv_errs = [v for n, v in per.items() if n in conv_w and v is not None]
    other_errs = [v for n, v in per.items() if n not in conv_w and v is not None]
    sk_errs = [row["rel_err"] for row in layers if row["path"] == "skwgrad" and row["rel_err"] is not None]
    worst = max(per.items(), key=lambda kv: -1 if kv[1] is None else kv[1])
    out = {
        "metric": "max|g_patched - g_native| / max|g_native| per parameter, one training step, same weights and batch",
        "dtype": dtype,
        "bound": bound,
        "max_rel_conv_weight": max(conv_errs, default=0.0),
        "max_rel_skwgrad_layers": max(sk_errs, default=None),
        "max_rel_other_params": max(other_errs, default=0.0),
        "worst_param": worst[0],
        "pass": all(v is not None and v <= bound for v in per.values()),
        "loss": float(l_pat),
        "layers_patched": len(report.patched),
        "layers_skipped": report.skipped,
        "wgrad_skwgrad": s["skwgrad"],
        "wgrad_native": s["native"],
        "wgrad_dw_cast": s["dw_cast"],
        "fallback_reasons": s["reasons"],
        "per_layer": layers,
        "per_param": per,
    }
    print(f"  grads: max rel err conv dW {out['max_rel_conv_weight']:.3g} (skwgrad layers "
          f"{out['max_rel_skwgrad_layers']}), other params {out['max_rel_other_params']:.3g}, bound {bound:.3g}: "
          f"{'PASS' if out['pass'] else 'FAIL'}; wgrad skwgrad {s['skwgrad']} / native {s['native']} {s['reasons']}",
          flush=True)  # fmt: skip
    return out


def timing(run, ref, pat, x, target, steps):
    def measure(model, ctx):
        fw, bw = [], []
        with ctx:
            for i in range(steps + 3):
                _, f, b = run.step(model, x, target, timed=True)
                if i >= 3:
                    fw.append(f)
                    bw.append(b)
        _sync(run.dev)
        return {"forward_ms": statistics.median(fw), "backward_ms": statistics.median(bw),
                "backward_ms_min": min(bw), "backward_ms_max": max(bw), "steps": steps}  # fmt: skip

    import contextlib

    out = {"metric": f"median of {steps} steps (3 warm-up), CUDA events around loss.backward()"}
    out["native"] = measure(ref, contextlib.nullcontext())
    st.reset_stats()
    out["skwgrad"] = measure(pat, contextlib.nullcontext())
    s = st.stats()
    out["skwgrad"]["wgrad_calls"] = {"skwgrad": s["skwgrad"], "native": s["native"], "reasons": s["reasons"]}
    out["patched_disabled"] = measure(pat, st.enabled(False))
    out["backward_speedup_vs_native"] = out["native"]["backward_ms"] / out["skwgrad"]["backward_ms"]
    out["op_overhead_ms"] = out["patched_disabled"]["backward_ms"] - out["native"]["backward_ms"]
    print(f"  backward: native {out['native']['backward_ms']:.2f} ms, skwgrad {out['skwgrad']['backward_ms']:.2f} ms "
          f"(x{out['backward_speedup_vs_native']:.3f}), patched+disabled {out['patched_disabled']['backward_ms']:.2f} ms",
          flush=True)  # fmt: skip
    return out


def explain(run, pat, x):
    torch._dynamo.reset()
    with torch.autocast(run.dev.type, dtype=run.amp, enabled=run.amp is not None):
        ex = torch._dynamo.explain(pat)(x)
    torch._dynamo.reset()
    out = {
        "graph_break_count": ex.graph_break_count,
        "graph_count": ex.graph_count,
        "op_count": ex.op_count,
        "break_reasons": [str(getattr(r, "reason", r))[:500] for r in ex.break_reasons],
        "skwgrad_ops_in_graph": sum(
            1 for g in ex.graphs for n in g.graph.nodes if "skwgrad" in str(getattr(n, "target", ""))
        ),
    }
    print(f"  dynamo: {out['graph_count']} graph(s), {out['graph_break_count']} break(s), "
          f"{out['skwgrad_ops_in_graph']} skwgrad ops in the graph", flush=True)  # fmt: skip
    return out


def compiled_run(run, pat, x, target, steps, checks):
    from torch._dynamo.utils import counters

    a = run.a
    torch._dynamo.reset()
    counters.clear()
    kw = {"fullgraph": True, "dynamic": False, "backend": a.compile_backend}
    if a.compile_backend == "inductor" and a.compile_mode != "default":
        kw["mode"] = a.compile_mode
    cm = torch.compile(pat, **kw)
    opt = torch.optim.SGD(pat.parameters(), lr=1e-3)
    cudagraphs = kw.get("mode") == "reduce-overhead"
    st.reset_stats()
    step_ms, check_rows, first_ms = [], [], None
    check_at = set(checks)
    for i in range(steps):
        if cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        t0 = time.perf_counter()
        loss_c, f, b = run.step(cm, x, target, timed=i >= 3)
        if i < 3:
            _sync(run.dev)
            if i == 0:
                first_ms = (time.perf_counter() - t0) * 1e3
        else:
            step_ms.append(f + b)
        if i in check_at:
            g_c = grads_of(pat)
            stats_c = st.stats()
            loss_e, _, _ = run.step(pat, x, target)  # eager, same module, same weights
            g_e = grads_of(pat)
            errs = {n: norm_rel(g_c[n], g) for n, g in g_e.items() if g is not None and g_c[n] is not None}
            missing = [n for n, g in g_e.items() if (g is None) != (g_c[n] is None)]
            worst = max(errs.items(), key=lambda kv: kv[1])
            check_rows.append({
                "step": i, "loss_compiled": float(loss_c), "loss_eager": float(loss_e),
                "max_norm_rel": worst[1], "worst_param": worst[0], "median_norm_rel": statistics.median(errs.values()),
                "missing_grads": missing, "wgrad_calls_so_far": {"skwgrad": stats_c["skwgrad"], "native": stats_c["native"]},
                "pass": worst[1] <= COMPILED_NORM_BOUND and not missing,
            })  # fmt: skip
            print(f"  compiled step {i}: loss {float(loss_c):.5f} vs eager {float(loss_e):.5f}, max grad norm-rel "
                  f"{worst[1]:.3g} ({worst[0]})", flush=True)  # fmt: skip
        opt.step()
    _sync(run.dev)
    s = st.stats()
    out = {
        "options": {k: str(v) for k, v in kw.items()},
        "steps": steps,
        "first_step_ms (compile included)": first_ms,
        "step_ms_median": statistics.median(step_ms) if step_ms else None,
        "checks": check_rows,
        "check_metric": "||g_compiled - g_eager|| / ||g_eager|| per parameter (eager = the same patched module, same weights)",
        "check_bound": COMPILED_NORM_BOUND,
        "pass": bool(check_rows) and all(r["pass"] for r in check_rows),
        "wgrad_calls": {"skwgrad": s["skwgrad"], "native": s["native"], "reasons": s["reasons"],
                        "note": "under CUDA-graph replay the op's Python does not run: these count warm-up and capture"},
        "counters": {k: {kk: int(vv) for kk, vv in v.items()} for k, v in counters.items()
                     if k in ("graph_break", "inductor", "stats", "unimplemented")},
    }  # fmt: skip
    out["graph_breaks"] = sum(out["counters"].get("graph_break", {}).values())
    out["cudagraph_skips"] = out["counters"].get("inductor", {}).get("cudagraph_skips", 0)
    print(f"  compiled ({kw}): first step {first_ms:.0f} ms, then {out['step_ms_median']} ms/step; "
          f"graph breaks {out['graph_breaks']}, cudagraph skips {out['cudagraph_skips']}: "
          f"{'PASS' if out['pass'] else 'FAIL'}", flush=True)  # fmt: skip
    torch._dynamo.reset()
    return out


def opchecks(dev):
    cl = torch.channels_last
    g = torch.Generator(device=dev).manual_seed(0)
    rows = []
    cases = [
        # x shape, weight shape, stride, padding, dilation, groups, dtype, dW dtype
        ("dense3x3_bf16_dw_fp32", (8, 64, 28, 28), (64, 64, 3, 3), [1, 1], [1, 1], [1, 1], 1, torch.bfloat16, torch.float32),
        ("dense3x3_bf16", (8, 64, 28, 28), (128, 64, 3, 3), [2, 2], [1, 1], [1, 1], 1, torch.bfloat16, None),
        ("pointwise_bf16_dw_fp32", (8, 256, 14, 14), (64, 256, 1, 1), [1, 1], [0, 0], [1, 1], 1, torch.bfloat16, torch.float32),
        ("depthwise_bf16", (8, 96, 28, 28), (96, 1, 3, 3), [1, 1], [1, 1], [1, 1], 96, torch.bfloat16, None),
        ("dense3x3_fp32", (4, 32, 16, 16), (32, 32, 3, 3), [1, 1], [1, 1], [1, 1], 1, torch.float32, None),
    ]  # fmt: skip
    for name, xs, ws, stride, pad, dil, groups, dt, wdt in cases:
        st.reset_stats()
        x = torch.randn(xs, device=dev, generator=g).to(dt).contiguous(memory_format=cl)
        ys = F.conv2d(torch.empty(xs, device="meta"), torch.empty(ws, device="meta"), None, stride, pad, dil, groups).shape
        dy = torch.randn(ys, device=dev, generator=g).to(dt).contiguous(memory_format=cl)
        row = {"case": name}
        try:
            row["wgrad"] = torch.library.opcheck(torch.ops.skwgrad.conv_weight_grad.default,
                                                 (x, dy, list(ws), stride, pad, dil, groups, wdt, name))  # fmt: skip
        except Exception as e:
            row["wgrad"] = {"error": f"{type(e).__name__}: {str(e)[:2000]}"}
        s = st.stats()
        row["wgrad_path"] = {"skwgrad": s["skwgrad"], "native": s["native"], "reasons": s["reasons"]}
        try:
            xr = x.detach().clone().requires_grad_()
            # fp32 weight and bias with half x: the autocast case (the op runs the forward in x's dtype)
            w = torch.randn(ws, device=dev, generator=g, requires_grad=True)
            b = torch.randn(ws[0], device=dev, generator=g, requires_grad=True)
            args = (xr, w, b, stride, pad, dil, groups, name)
            row["conv"] = torch.library.opcheck(torch.ops.skwgrad.conv.default, args)
        except Exception as e:
            row["conv"] = {"error": f"{type(e).__name__}: {str(e)[:2000]}"}
        row["pass"] = all(isinstance(row[k], dict) and all(v == "SUCCESS" for v in row[k].values()) for k in ("wgrad", "conv"))
        rows.append(row)
        print(f"  opcheck {name}: {'PASS' if row['pass'] else 'FAIL'} (wgrad path {row['wgrad_path']})", flush=True)
    return {"cases": rows, "pass": all(r["pass"] for r in rows)}


# ---------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--cache", default=None, help="skwgrad cache (default: $SKWGRAD_CACHE, else the user cache)")
    ap.add_argument("--models", default="resnet50,mobilenet_v2")
    ap.add_argument("--compile-control", action="store_true", help="also run the compiled phase with skwgrad off")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--amp", default="bf16", choices=["bf16", "fp16", "none"])
    ap.add_argument("--steps", type=int, default=20, help="timed eager steps per configuration")
    ap.add_argument("--compile-steps", type=int, default=100)
    ap.add_argument("--checks", default="3,50,99", help="compiled steps checked against eager")
    ap.add_argument("--compile-backend", default="inductor")
    ap.add_argument("--compile-mode", default="reduce-overhead", help="default | reduce-overhead | max-autotune...")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--cudnn-benchmark", type=int, default=1)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget-s", type=float, default=285.0, help="stop starting phases past this (total)")
    ap.add_argument("--verbose", action="store_true", help="skwgrad.torch debug log on stderr")
    a = ap.parse_args()

    if a.verbose:
        import logging

        logging.basicConfig(level=logging.INFO)
        logging.getLogger("skwgrad.torch").setLevel(logging.DEBUG)
    budget = Budget(a.budget_s)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(dev)
    torch.backends.cudnn.benchmark = bool(a.cudnn_benchmark)
    if a.cache:
        st.configure(cache=a.cache)
    out_path = Path(a.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    res = {"version": 1, "env": environment(dev), "args": vars(a), "models": {}}

    def save():
        out_path.write_text(json.dumps(res, indent=1, default=str))

    save()
    print(f"env: {res['env']}", flush=True)
    run = Runner(a, dev)
    cl = torch.channels_last

    if dev.type == "cuda":
        print("== opcheck on CUDA tensors", flush=True)
        phase(res, "opcheck", lambda: opchecks(dev), save, budget, 20)

    models = [m for m in a.models.split(",") if m]
    for mi, name in enumerate(models):
        print(f"== {name}", flush=True)
        r = res["models"][name] = {}
        torch.manual_seed(0)
        try:
            ref = build_model(name).to(dev).to(memory_format=cl).train()
        except Exception as e:
            r["error"] = f"cannot build {name}: {type(e).__name__}: {e}"
            print("  " + r["error"], flush=True)
            save()
            continue
        # Dropout draws other masks in each run (and inductor's RNG is not eager's): off, so that
        # patched, native and compiled steps see the same function.
        dropouts = [m for m in ref.modules() if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0]
        for m in dropouts:
            m.p = 0.0
        pat = copy.deepcopy(ref)
        report = st.patch(pat)
        r["patch"] = {"patched": len(report.patched), "skipped": report.skipped, "dropout_set_to_0": len(dropouts)}
        gen = torch.Generator(device=dev).manual_seed(1)
        x = torch.randn(a.batch, 3, a.size, a.size, device=dev, generator=gen).contiguous(memory_format=cl)
        target = torch.randint(0, 1000, (a.batch,), device=dev, generator=gen)

        def shapes():
            p = out_path.with_name(f"{out_path.stem}_{name}_shapes.csv")
            with torch.autocast(dev.type, dtype=run.amp, enabled=run.amp is not None):
                rows = st.record_shapes(ref, x, p)
            return {"path": str(p), "problems": len(rows)}

        phase(r, "record_shapes", shapes, save, budget, 5)
        phase(r, "grad_check", lambda: grad_check(run, ref, pat, report, x, target), save, budget, 10)
        phase(r, "backward_time", lambda: timing(run, ref, pat, x, target, a.steps), save, budget, 15)
        phase(r, "dynamo_explain", lambda: explain(run, pat, x), save, budget, 30)
        if not a.no_compile:
            # Keep time for the models after this one: a compile is most of a model's budget.
            reserve = 75.0 * (len(models) - mi - 1)
            checks = [int(c) for c in a.checks.split(",") if c and int(c) < a.compile_steps]
            phase(r, "compiled", lambda: compiled_run(run, pat, x, target, a.compile_steps, checks), save, budget,
                  60 + reserve)  # fmt: skip
            if a.compile_control:
                # The same compiled run with skwgrad switched off (PyTorch's own weight gradient):
                # tells a wrong gradient of ours from a property of the check under CUDA graphs.
                def control():
                    with st.enabled(False):
                        return compiled_run(run, pat, x, target, a.compile_steps, checks)

                phase(r, "compiled_control_native", control, save, budget, 60 + reserve)
        del ref, pat
        if dev.type == "cuda":
            torch.cuda.empty_cache()

    res["total_seconds"] = round(a.budget_s - budget.left(), 1)
    summary = {}
    for name, r in res["models"].items():
        gc, bt, ex, co = (r.get(k) or {} for k in ("grad_check", "backward_time", "dynamo_explain", "compiled"))
        summary[name] = {
            "grads_pass": gc.get("pass"), "max_rel_conv_weight": gc.get("max_rel_conv_weight"), "bound": gc.get("bound"),
            "wgrad_skwgrad/native": f"{gc.get('wgrad_skwgrad')}/{gc.get('wgrad_native')}",
            "fallback_reasons": gc.get("fallback_reasons"),
            "backward_ms_native": (bt.get("native") or {}).get("backward_ms"),
            "backward_ms_skwgrad": (bt.get("skwgrad") or {}).get("backward_ms"),
            "graph_breaks": ex.get("graph_break_count"), "compiled_pass": co.get("pass"),
            "compiled_graph_breaks": co.get("graph_breaks"), "cudagraph_skips": co.get("cudagraph_skips"),
        }  # fmt: skip
    res["summary"] = summary
    if "opcheck" in res:
        res["summary"]["opcheck_pass"] = res["opcheck"].get("pass")
    save()
    print(json.dumps(summary, indent=1, default=str), flush=True)
    print(f"wrote {out_path} in {res['total_seconds']} s", flush=True)


if __name__ == "__main__":
    main()
