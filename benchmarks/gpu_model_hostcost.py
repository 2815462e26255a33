"""Where a patched model's eager training step spends its host time, on the GPU machine.

For each torchvision model (random init, channels last, bf16 autocast, the same batch as
``gpu_torch_model.py``): the unpatched model, the model after ``skwgrad.torch.patch`` (auto), and the
patched model with skwgrad switched off (the wrapper alone), each timed per step two ways:
- host: wall time from the start of the step until ``loss.backward()`` returns, without a sync
  (what the Python thread spends queueing the step);
- step: wall time of the step with a sync at the end (what a training loop gets);
then a cProfile of a few patched steps: the functions with the most own time, per conv layer per
step, so the Python of the patch, of the launcher and of the driver bindings can be told apart.

    SKWGRAD_CACHE=DIR python benchmarks/gpu_model_hostcost.py --models efficientnet_b0,mobilenet_v2 --out F.json
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import skwgrad.torch as st  # noqa: E402


def _no_dropout(model):
    for m in model.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) or type(m).__name__ == "StochasticDepth":
            m.p = 0.0


def step_times(model, x, target, steps: int, *, amp=torch.bfloat16, warm: int = 3) -> dict:
    host, wall = [], []
    for i in range(steps + warm):
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=amp):
            loss = F.cross_entropy(model(x).float(), target)
        loss.backward()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if i >= warm:
            host.append((t1 - t0) * 1e3)
            wall.append((t2 - t0) * 1e3)
    return {"host_ms": statistics.median(host), "step_ms": statistics.median(wall), "steps": steps}


def profile(model, x, target, steps: int, convs: int, top: int) -> list[dict]:
    pr = cProfile.Profile()
    for i in range(steps + 1):
        model.zero_grad(set_to_none=True)
        if i == 1:
            pr.enable()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).float(), target)
        loss.backward()
    pr.disable()
    torch.cuda.synchronize()
    rows = []
    for (file, line, fn), (cc, nc, tt, ct, _) in pstats.Stats(pr).stats.items():
        rows.append({"function": f"{Path(file).name}:{line}:{fn}" if line else fn, "calls_per_step": nc / steps,
                     "own_us_per_conv_step": tt / steps / convs * 1e6, "cum_us_per_conv_step": ct / steps / convs * 1e6})  # fmt: skip
    rows.sort(key=lambda r: -r["own_us_per_conv_step"])
    return rows[:top]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="efficientnet_b0,mobilenet_v2,resnet50")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--profile-steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--commit", default="")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import torchvision

    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    doc = {"commit": a.commit, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "models": {}}
    for name in a.models.split(","):
        torch.manual_seed(0)
        ref = getattr(torchvision.models, name)(weights=None).to(dev).to(memory_format=torch.channels_last).train()
        _no_dropout(ref)
        pat = copy.deepcopy(ref)
        convs = len(st.patch(pat).patched)
        x = torch.randn(a.batch, 3, a.size, a.size, device=dev).contiguous(memory_format=torch.channels_last)
        target = torch.randint(0, 1000, (a.batch,), device=dev)
        r = {"conv_layers": convs}
        r["native"] = step_times(ref, x, target, a.steps)
        st.reset_stats()
        r["patched"] = step_times(pat, x, target, a.steps)
        s = st.stats()
        r["patched"]["wgrad_calls"] = {"skwgrad": s["skwgrad"], "native": s["native"], "reasons": s["reasons"]}
        with st.enabled(False):
            r["patched_off"] = step_times(pat, x, target, a.steps)
        # a second native pass: the machine's drift between the first and the last phase
        r["native_again"] = step_times(ref, x, target, a.steps)
        nat = min(r["native"]["host_ms"], r["native_again"]["host_ms"])
        r["host_us_per_conv_patched"] = (r["patched"]["host_ms"] - nat) / convs * 1e3
        r["host_us_per_conv_wrapper"] = (r["patched_off"]["host_ms"] - nat) / convs * 1e3
        r["profile"] = profile(pat, x, target, a.profile_steps, convs, a.top)
        doc["models"][name] = r
        print(f"{name}: {convs} convs; host ms native {r['native']['host_ms']:.2f}/{r['native_again']['host_ms']:.2f}, "
              f"patched {r['patched']['host_ms']:.2f}, off {r['patched_off']['host_ms']:.2f}; step ms native "
              f"{r['native']['step_ms']:.2f}/{r['native_again']['step_ms']:.2f}, patched {r['patched']['step_ms']:.2f}, "
              f"off {r['patched_off']['step_ms']:.2f}; host us a conv: patched +{r['host_us_per_conv_patched']:.1f}, "
              f"wrapper +{r['host_us_per_conv_wrapper']:.1f}", flush=True)  # fmt: skip
        for p in r["profile"][:14]:
            print(f"   {p['own_us_per_conv_step']:7.2f} us own ({p['cum_us_per_conv_step']:7.2f} cum) x{p['calls_per_step']:6.0f}  {p['function'][:90]}")
        Path(a.out).write_text(json.dumps(doc, indent=1))
        ref = pat = None
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
