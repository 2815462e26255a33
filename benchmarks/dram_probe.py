"""How fast the GPU reads memory in practice, for the memory-bound 1x1 layers (issue 12): JIT on the device.

    python3 benchmarks/dram_probe.py --out R.json

Session 27 (run F1) found every launch of ResNet-50's and MobileNetV2's 1x1 layers at 56-112 px, cuDNN's
too, moving x and dy at 2.6-3.2 TB/s (device events, launch included). Whether that is the H200's
practical ceiling or a gap decides whether those layers are worth a kernel. Per size, the same
bytes read three ways, each a CUDA graph of REPS launches timed with device events, each replay
after an L2 flush (a 256 MB write; at sizes over the H200's 50 MB L2 every launch reads memory): ``torch.sum`` over one bf16 tensor; a Triton kernel that streams one
tensor in 16-byte vectors and writes one float per CTA (``read1``); the same over two tensors of
the layer's x and dy sizes (``read2``, what a 1x1 wgrad must read). Nothing here is product code.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from graph_timing import graph_time  # noqa: E402

REPS = 10


@triton.jit
def _read(a, n, out, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(ITERS):
        offs = (pid * ITERS + i) * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(a + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(out + pid, tl.sum(acc, axis=0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--mb", default="32,64,100,200", help="comma list of sizes (MB of bf16) to read")
    args = ap.parse_args()
    import torch

    flush = torch.empty(64 << 20, dtype=torch.float32, device="cuda")

    def flush_l2():
        flush.add_(1)
    doc = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(0), "rows": []}
    block, iters = 4096, 8
    for mb in (float(v) for v in args.mb.split(",")):
        n = int(mb * 1e6) // 2
        a = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        x, dy = a[: n // 5], a[n // 5 :]  # a 1x1 layer's x and dy in the 64 -> 256 proportion
        parts = (triton.cdiv(n, block * iters),)
        out = torch.empty(parts[0] + 2 * triton.cdiv(n, block * iters), device="cuda")
        row = {"mb": mb}
        row["torch_sum_us"] = graph_time(torch, lambda: a.sum(dtype=torch.float32), REPS, before_replay=flush_l2)
        row["read1_us"] = graph_time(torch, lambda: _read[parts](a, n, out, BLOCK=block, ITERS=iters, num_warps=8), REPS, before_replay=flush_l2)

        def two():
            for t in (x, dy):
                m = t.numel()
                _read[(triton.cdiv(m, block * iters),)](t, m, out, BLOCK=block, ITERS=iters, num_warps=8)

        row["read2_us"] = graph_time(torch, two, REPS, before_replay=flush_l2)
        for k in ("torch_sum", "read1", "read2"):
            row[f"{k}_tb_s"] = mb * 1e6 / row[f"{k}_us"] / 1e6
        doc["rows"].append(row)
        print(json.dumps(row), flush=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
