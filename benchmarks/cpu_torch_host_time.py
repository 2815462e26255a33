"""Host time of a patched convolution on CPU (a micro-benchmark, not a test).

A stack of small convolutions on tiny CPU tensors, so the arithmetic is negligible and what is
timed is mostly the Python/dispatcher work per layer: forward + backward of the unpatched model,
of the model after ``skwgrad.torch.patch`` (on CPU every weight gradient falls back to PyTorch's,
reason ``device``; with ``--off`` skwgrad is switched off, reason ``disabled``), in fp32 and
under bf16 autocast. Prints the median step time of each and the extra host time per patched
conv layer (forward + backward).

    PYTHONPATH=. python benchmarks/cpu_torch_host_time.py [--layers 16] [--reps 200] [--json out.json]
"""

import argparse
import contextlib
import copy
import json
import statistics
import time

import torch
from torch import nn

import skwgrad.torch as st


def model(layers: int, ch: int) -> nn.Module:
    mods = []
    for i in range(layers):
        mods.append(nn.Conv2d(ch, ch, 3, padding=1, bias=(i % 2 == 0)))
        mods.append(nn.ReLU())
    return nn.Sequential(*mods).to(memory_format=torch.channels_last)


def step_times(m, x, reps: int, amp: bool) -> list:
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if amp else contextlib.nullcontext
    out = []
    for i in range(reps + 10):
        m.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        with ctx():
            y = m(x)
        y.float().sum().backward()
        t1 = time.perf_counter()
        if i >= 10:
            out.append(t1 - t0)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--ch", type=int, default=4)
    ap.add_argument("--hw", type=int, default=4)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--off", action="store_true", help="switch skwgrad off (skwgrad.torch.enabled(False))")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    ref = model(a.layers, a.ch)
    pat = copy.deepcopy(ref)
    st.patch(pat)
    x = torch.randn(1, a.ch, a.hw, a.hw).contiguous(memory_format=torch.channels_last).requires_grad_()
    res = {"layers": a.layers, "ch": a.ch, "hw": a.hw, "reps": a.reps, "off": a.off, "torch": torch.__version__}
    with st.enabled(not a.off):
        for amp in (False, True):
            tag = "bf16_autocast" if amp else "fp32"
            # Interleave the two models (a few rounds) so that drift in machine load hits both.
            tn, tp = [], []
            for _ in range(3):
                tn += step_times(ref, x, a.reps // 3, amp)
                tp += step_times(pat, x, a.reps // 3, amp)
            n_us, p_us = statistics.median(tn) * 1e6, statistics.median(tp) * 1e6
            res[tag] = {"native_step_us": round(n_us, 1), "patched_step_us": round(p_us, 1),
                        "extra_us_per_conv": round((p_us - n_us) / a.layers, 1),
                        "native_us_per_conv": round(n_us / a.layers, 1),
                        "patched_us_per_conv": round(p_us / a.layers, 1)}  # fmt: skip
            print(f"{tag:14s} native {n_us:8.1f} us/step  patched {p_us:8.1f} us/step"
                  f"  extra {(p_us - n_us) / a.layers:6.1f} us per conv (fwd+bwd), {a.layers} convs",
                  flush=True)  # fmt: skip
    s = st.stats()
    res["stats"] = {"skwgrad": s["skwgrad"], "native": s["native"], "reasons": s["reasons"]}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
