"""Can the dW zeroing before an atomic launch hide behind the kernel? (H200, Triton JIT on the device)

    python benchmarks/pdl_probe.py --out pdl.json

Run E1 measured the dW memset before auto's atomic launches at about 2 us of device time per call
whatever dW's size (5 KB to 2 MB): a dependent launch's gap, not bytes. Hopper's programmatic
dependent launch lets a kernel start before the one before it in the stream has finished: the first
kernel says so (``griddepcontrol.launch_dependents``), the second is launched with the
programmatic-serialization attribute and waits (``griddepcontrol.wait``) only where it needs the
first one's writes, here just before its atomic adds. A stand-in for an atomic wgrad launch (a
grid of 264 CTAs that reads memory for about ``--target-us`` and then adds its sums into dW) is
timed, each case the median of ``--iters`` event-timed pairs behind a stream hold:
``alone`` (no zeroing, wrong dW), ``memset`` (dW.zero_(), then the kernel), ``zero_kernel`` (a
Triton zeroing kernel, then the kernel, plain launches), ``zero_pdl`` (the zeroing kernel triggers
its dependents at once, the kernel is launched with ``launch_pdl`` and waits before its adds) and
``memset_pdl``. Each case's dW is checked against ``memset``'s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import triton
import triton.language as tl

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # older layouts
    from triton.language.extra.cuda.gdc import gdc_launch_dependents, gdc_wait


@triton.jit
def zero_kernel(p, n, BLOCK: tl.constexpr, TRIGGER: tl.constexpr):
    if TRIGGER:
        gdc_launch_dependents()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(p + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


@triton.jit
def work_kernel(x, dw, n_dw, rows, iters, WAIT: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(iters):
        r = (pid * iters + i) % rows
        acc += tl.load(x + r * BLOCK + offs)
    if WAIT:
        gdc_wait()
    tl.atomic_add(dw + (pid * BLOCK + offs) % n_dw, acc, sem="relaxed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--commit", default="")
    a = ap.parse_args()
    BLOCK, GRID = 1024, 264
    rows = 1 << 15
    x = torch.randn(rows * BLOCK, device="cuda")
    doc = {"date": time.strftime("%Y-%m-%d"), "commit": a.commit, "device": torch.cuda.get_device_name(), "triton": triton.__version__,
           "script": "benchmarks/pdl_probe.py", "rows": []}  # fmt: skip
    for n_dw in (1296, 147456, 524288):  # 5 KB (a depthwise dW), 576 KB, 2 MB (a 1x1 1024->512 fp32 dW)
        for work_iters in (8, 32):
            dw = torch.empty(n_dw, device="cuda")
            zgrid = (triton.cdiv(n_dw, 1024),)

            def work(wait, pdl):
                kw = {"launch_pdl": True} if pdl else {}
                work_kernel[(GRID,)](x, dw, n_dw, rows, work_iters, WAIT=wait, BLOCK=BLOCK, num_warps=4, **kw)

            cases = {
                "alone": lambda: work(False, False),
                "memset": lambda: (dw.zero_(), work(False, False)),
                "zero_kernel": lambda: (zero_kernel[zgrid](dw, n_dw, BLOCK=1024, TRIGGER=False, num_warps=4), work(False, False)),
                "zero_pdl": lambda: (zero_kernel[zgrid](dw, n_dw, BLOCK=1024, TRIGGER=True, num_warps=4), work(True, True)),
                "memset_pdl": lambda: (dw.zero_(), work(True, True)),
            }
            rec = {"dw_elems": n_dw, "work_iters": work_iters}
            ref = None
            for name, fn in cases.items():
                try:
                    for _ in range(3):
                        fn()
                    torch.cuda.synchronize()
                    dw.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    got = dw.clone()
                    if name == "memset":
                        ref = got
                    rec[f"{name}_ok"] = None if name == "alone" or ref is None else bool(torch.allclose(got, ref, rtol=1e-5, atol=1e-3))
                    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.iters)]
                    torch.cuda._sleep(50_000_000)  # hold the stream: every pair queues before the device reaches it
                    for e0, e1 in evs:
                        e0.record()
                        fn()
                        e1.record()
                    torch.cuda.synchronize()
                    rec[name + "_us"] = statistics.median(e0.elapsed_time(e1) * 1e3 for e0, e1 in evs)
                except Exception as e:  # noqa: BLE001  (recorded: this Triton may lack PDL)
                    rec[name + "_error"] = f"{type(e).__name__}: {e}"[:300]
            doc["rows"].append(rec)
            print(json.dumps(rec), flush=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
