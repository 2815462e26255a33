"""Timing helpers shared by run-from-cache, tuning and tune-on-first-use: PyTorch's own weight
gradient as the baseline, and a stream hold that keeps host overhead out of device timings."""

from __future__ import annotations


def stream_hold():
    """A callable that holds a stream for ~25 ms (torch's sleep kernel), or None without torch.
    Timing queues all launches behind it so host overhead stays out of the device times."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None

    def hold(stream: int):
        with torch.cuda.stream(torch.cuda.ExternalStream(stream) if stream else torch.cuda.default_stream()):
            torch.cuda._sleep(50_000_000)

    return hold


def cudnn_time(problem, backend, *, warmup=5, iters=50, seed=0, benchmark: bool | None = True) -> tuple[float | None, str]:
    """Median microseconds of PyTorch's weight gradient (cuDNN / MIOpen) on channels-last
    inputs: ``aten.convolution_backward(..., output_mask=[False, True, False])``.

    ``benchmark``: cuDNN's benchmark mode for the timing (True, the default: the library's fastest
    algorithm, the baseline every skwgrad ratio is against; without it cuDNN's heuristic pick ran
    some 7x7 layers 25-35x slower, H200 run T4); None keeps the caller's setting (what the caller's
    own native op would run)."""
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "torch has no CUDA/ROCm device"
    p = problem
    sd = p.spatial_dims
    if p.pad_lo != p.pad_hi:
        return None, "asymmetric padding"
    dev = torch.device("cuda", backend.device)
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[p.dtype]
    fmt = torch.channels_last_3d if sd == 3 else torch.channels_last
    sp_in = (p.di, p.hi, p.wi)[3 - sd :]
    sp_out = (p.do, p.ho, p.wo)[3 - sd :]
    flt = (p.z, p.y, p.x)[3 - sd :]
    g = torch.Generator(device=dev).manual_seed(seed)
    x = torch.randn((p.n, p.g * p.c, *sp_in), device=dev, dtype=dt, generator=g).contiguous(memory_format=fmt)
    dy = torch.randn((p.n, p.g * p.k, *sp_out), device=dev, dtype=dt, generator=g).contiguous(memory_format=fmt)
    w = torch.empty((p.g * p.k, p.c, *flt), device=dev, dtype=dt).contiguous(memory_format=fmt)
    args = (list(p.stride[3 - sd :]), list(p.pad_lo[3 - sd :]), list(p.dilation[3 - sd :]), False, [0] * sd, p.g, [False, True, False])

    def run():
        return torch.ops.aten.convolution_backward(dy, x, w, None, *args)

    stream = torch.cuda.current_stream(dev)
    # cuDNN computes fp32 convolutions in tf32 unless told not to: match the problem's precision.
    before = torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark
    torch.backends.cudnn.allow_tf32 = p.precision == "tf32"
    if benchmark is not None:
        torch.backends.cudnn.benchmark = benchmark
    try:
        times = _time_cudnn(torch, dev, stream, run, warmup, iters)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = before
    us = sorted(a.elapsed_time(b) * 1e3 for a, b in times)
    return us[len(us) // 2], ""


def _time_cudnn(torch, dev, stream, run, warmup, iters):
    with torch.cuda.device(dev):
        for _ in range(warmup):
            run()
        torch.cuda.synchronize(dev)
        times = []
        torch.cuda._sleep(50_000_000)  # hold the stream: the events then bracket device work only
        for _ in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(stream)
            run()
            b.record(stream)
            times.append((a, b))
        torch.cuda.synchronize(dev)
    return times
