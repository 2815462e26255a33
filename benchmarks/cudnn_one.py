"""PyTorch's weight gradient for one corpus row, after cudnn.benchmark warm-up, the measured call
inside an NVTX range "prof" (for ``ncu --nvtx --nvtx-include prof/``; benchmarks/gpu_profile.sh).
The tensors are built as skwgrad.launcher.baseline.cudnn_time builds them (channels last)."""

import csv
import sys

import torch

from skwgrad.abi.conv import from_row


def main(csv_path: str, name: str) -> None:
    row = next(r for r in csv.DictReader(open(csv_path)) if r["name"] == name)
    p = from_row(row)
    sd = p.spatial_dims
    torch.backends.cudnn.benchmark = True
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[p.dtype]
    fmt = torch.channels_last_3d if sd == 3 else torch.channels_last
    x = torch.randn((p.n, p.g * p.c, *(p.di, p.hi, p.wi)[3 - sd :]), device="cuda", dtype=dt).contiguous(memory_format=fmt)
    dy = torch.randn((p.n, p.g * p.k, *(p.do, p.ho, p.wo)[3 - sd :]), device="cuda", dtype=dt).contiguous(memory_format=fmt)
    w = torch.empty((p.g * p.k, p.c, *(p.z, p.y, p.x)[3 - sd :]), device="cuda", dtype=dt).contiguous(memory_format=fmt)
    args = (list(p.stride[3 - sd :]), list(p.pad_lo[3 - sd :]), list(p.dilation[3 - sd :]), False, [0] * sd, p.g, [False, True, False])
    for _ in range(5):
        torch.ops.aten.convolution_backward(dy, x, w, None, *args)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("prof")
    torch.ops.aten.convolution_backward(dy, x, w, None, *args)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
