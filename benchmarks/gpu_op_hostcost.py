"""Where the host time of the PyTorch op goes on the GPU path: the ``skwgrad::conv_weight_grad``
custom op against ``skwgrad.wgrad`` on the same channels-last tensors, the op's Python body
(``_wgrad``) called without the dispatcher, and PyTorch's own weight gradient; each as wall time
per call over back-to-back calls (host-bound on small layers), then a cProfile of the op's calls. ``--stack``: a small stack of 1x1 convolutions (host-bound)
trained under torch.compile's default mode (no CUDA graphs: every op call pays its dispatch),
patched against unpatched, step time per layer.

    SKWGRAD_CACHE=DIR python benchmarks/gpu_op_hostcost.py --problem "n=4,c=64,k=64,h=28,w=28,y=1,x=1" --out op.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402


def per_call(fn, n=2000, warm=200) -> float:
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n // 5):
            fn()
        torch.cuda.synchronize()
        runs.append((time.perf_counter() - t0) / (n // 5) * 1e6)
    return statistics.median(runs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--problem", action="append", default=[])
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default="", help="the commit the tree is at (recorded)")
    ap.add_argument("--profile-calls", type=int, default=1000)
    ap.add_argument("--stack", action="append", default=[], help="LAYERS,N,C,H: time a compiled stack of 1x1 convolutions too")
    ap.add_argument("--check", action="append", default=[], help="LAYERS,N,C,H: that stack's dW, patched against unpatched, eager and compiled")
    a = ap.parse_args()
    import skwgrad
    import skwgrad.torch as st
    from skwgrad.abi.conv import parse_problem
    from skwgrad.torch import _ops as O

    doc = {"date": time.strftime("%Y-%m-%d"), "commit": a.commit, "torch": torch.__version__, "device": torch.cuda.get_device_name(),
           "rows": []}  # fmt: skip
    for text in a.problem:
        p = parse_problem(text)
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[p.dtype]
        cl = torch.channels_last
        x = torch.randn(p.n, p.c, p.hi, p.wi, device="cuda", dtype=dt).contiguous(memory_format=cl)
        dy = torch.randn(p.n, p.k, p.ho, p.wo, device="cuda", dtype=dt).contiguous(memory_format=cl)
        w = torch.empty(p.k, p.c, p.y, p.x, device="cuda", dtype=dt).contiguous(memory_format=cl)
        args = ([p.stride[1], p.stride[2]], [p.pad_lo[1], p.pad_lo[2]], [p.dilation[1], p.dilation[2]])
        ws = list(w.shape)
        dwt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[p.dw_dtype]
        kw = dict(filter_size=(p.y, p.x), stride=tuple(args[0]), padding=tuple(args[1]), dilation=tuple(args[2]), dw_dtype=p.dw_dtype)
        fns = {
            "api": lambda: skwgrad.wgrad(x, dy, **kw),
            "op": lambda: st.conv_weight_grad(x, dy, ws, *args, 1, dwt, "bench"),
            "op_overload": lambda: torch.ops.skwgrad.conv_weight_grad.default(x, dy, ws, *args, 1, dwt, "bench"),
            "body": lambda: O._wgrad(x, dy, ws, *args, 1, dwt, "bench"),
            "torch": lambda: torch.ops.aten.convolution_backward(dy, x, w, None, *args, False, [0, 0], 1, [False, True, False])[1],
        }
        row = {"problem": text, "wall_us": {k: per_call(f) for k, f in fns.items()}, "op_path": st.stats().get("layers", {}).get("bench")}
        pr = cProfile.Profile()
        torch.cuda.synchronize()
        pr.enable()
        for _ in range(a.profile_calls):
            fns["op"]()
        pr.disable()
        torch.cuda.synchronize()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
        row["profile_top"] = s.getvalue()[-6000:]
        doc["rows"].append(row)
        print(json.dumps(row["wall_us"]), text, flush=True)
        print(row["profile_top"][:4000], flush=True)
    doc["checks"] = []
    for spec in a.check:
        doc["checks"].append(check_stack(spec))
        print(json.dumps(doc["checks"][-1]), flush=True)
    doc["stacks"] = []
    for spec in a.stack:
        doc["stacks"].append(compiled_stack(spec))
        print(json.dumps(doc["stacks"][-1]), flush=True)
    Path(a.out).write_text(json.dumps(doc, indent=1))


def stack_model(spec: str, *, seed: int):
    """LAYERS,N,C,H: LAYERS Conv2d(C, C, 1) + ReLU, channels last, and an N x C x H x H input."""
    from torch import nn

    layers, n, c, h = (int(v) for v in spec.split(","))
    torch.manual_seed(seed)
    ref = nn.Sequential(*[m for _ in range(layers) for m in (nn.Conv2d(c, c, 1, bias=False), nn.ReLU())]).cuda()
    x = torch.randn(n, c, h, h, device="cuda").contiguous(memory_format=torch.channels_last)
    return ref.to(memory_format=torch.channels_last), x, layers


def check_stack(spec: str) -> dict:
    """The stack's weight gradients, patched against unpatched, eager and under torch.compile
    (default mode), from the same weights and input: the forwards run the same kernels, so dW is
    the only difference (a leaf). Relative norm error per layer, and who computed each dW."""
    import copy

    import skwgrad.torch as st

    ref, x, _ = stack_model(spec, seed=1)
    out = {"spec": spec}
    for mode in ("eager", "compiled"):
        grads = {}
        for name in ("unpatched", "patched"):
            m = copy.deepcopy(ref)
            if name == "patched":
                st.patch(m)
            f = torch.compile(m) if mode == "compiled" else m
            st.reset_stats()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                f(x).float().square().mean().backward()
            grads[name] = [p.grad.double() for p in m.parameters()]
            out[f"{mode}_{name}_stats"] = {k: v for k, v in st.stats().items() if k in ("skwgrad", "native", "reasons")}
        out[f"{mode}_rel_err"] = [float((a - b).norm() / b.norm()) for a, b in zip(grads["patched"], grads["unpatched"])]
    return out


def compiled_stack(spec: str, steps: int = 200) -> dict:
    """LAYERS,N,C,H: LAYERS Conv2d(C, C, 1) + ReLU on N x C x H x H, channels last, bf16 autocast,
    forward + backward per step, torch.compile (default mode), unpatched then patched."""
    import copy

    import skwgrad.torch as st

    ref, x, layers = stack_model(spec, seed=0)
    out = {"spec": spec}
    for name in ("unpatched", "patched"):
        m = copy.deepcopy(ref)
        if name == "patched":
            st.patch(m)
        f = torch.compile(m)
        st.reset_stats()

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                f(x).float().square().mean().backward()

        out[f"{name}_step_us"] = per_call(step, n=steps, warm=20)
        out[f"{name}_stats"] = {k: v for k, v in st.stats().items() if k in ("skwgrad", "native", "reasons")}
    out["patched_extra_us_per_layer"] = (out["patched_step_us"] - out["unpatched_step_us"]) / layers
    return out


if __name__ == "__main__":
    main()
