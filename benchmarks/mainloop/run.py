"""Main-loop levers for the dense wgrad, measured on one NVIDIA H200 (issue 12, exploration).

Every variant is JIT-compiled by the GPU machine's Triton, checked against a float64 reference
(relative norm; the bf16 dW is NaN-poisoned before each checked launch) and timed with device
events (median of --reps after warm-up, a sleep kernel ahead so host launch cost stays out)
against cuDNN (``aten.convolution_backward``, output mask [False, True, False], channels_last,
cudnn.benchmark=True). The baseline is skwgrad's own ``wgrad_splitk`` source, JIT-launched here
with the same reduction as the variants (fp32 atomics into a zeroed buffer, then a cast) and no
integer specialization (as the AOT build compiles it: only pointers carry a divisibility hint).

    GPU machine:  python3 benchmarks/mainloop/run.py --out $OUT/mainloop.json
    CPU here:     python benchmarks/mainloop/run.py --selftest      (Triton interpreter, tiny shapes)

Timing columns per (row, variant): ``us`` = zero the fp32 buffer + kernel + cast to bf16 (what a
caller waits for), ``kernel_us`` = the kernel alone; both at the split-K degree that gave the
lowest ``us`` among a few (grid about 1x, 2x, 4x the SM count).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

if "--selftest" in sys.argv or "--dry" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"

sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

ROWS = [
    "r50_l1_3x3_64_n32",
    "r50_l2_3x3_128_n32",
    "r50_l3_3x3_256_n32",
    "r50_l4_3x3_512_n32",
    "r50_l1_1x1_64to64_n32",
    "unet_3x3_640_n8",
]
PEAK_FLOPS = 790e12  # H200 dense bf16, the roofline
PEAK_BYTES = 4.3e12


@dataclass(frozen=True)
class Problem:
    name: str
    n: int
    c: int
    k: int
    h: int
    w: int
    y: int
    x: int
    stride: int
    pad: int
    regime: str = ""

    @property
    def ho(self):
        return (self.h + 2 * self.pad - self.y) // self.stride + 1

    @property
    def wo(self):
        return (self.w + 2 * self.pad - self.x) // self.stride + 1

    @property
    def flops(self):
        return 2 * self.k * self.c * self.y * self.x * self.n * self.ho * self.wo

    @property
    def min_bytes(self):  # bf16 x, dy and dW, each once
        return 2 * (self.n * self.h * self.w * self.c + self.n * self.ho * self.wo * self.k + self.k * self.y * self.x * self.c)

    @property
    def roofline_us(self):
        return max(self.flops / PEAK_FLOPS, self.min_bytes / PEAK_BYTES) * 1e6


def read_rows(path, names):
    import csv

    out = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["name"] not in names:
                continue
            assert r["groups"] == "1" and r["d"] == "1" and r["z"] == "1" and r["dilation"] == "1", r
            assert r["dtype"] == "bf16", r
            out[r["name"]] = Problem(
                r["name"], int(r["n"]), int(r["in_channels"]), int(r["out_channels"]), int(r["h"]), int(r["w"]),
                int(r["y"]), int(r["x"]), int(r["stride"]), int(r["padding"]), r["regime"],
            )  # fmt: skip
    missing = [n for n in names if n not in out]
    if missing:
        raise SystemExit(f"rows not in {path}: {missing}")
    return [out[n] for n in names]


# ---------------------------------------------------------------------------------------------
# Variants
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    name: str
    kind: str  # "base" (skwgrad's wgrad_splitk) or "tma" (kernels.wgrad_tma)
    bm: int
    bn: int
    bk: int
    warps: int
    stages: int
    taps: int = 1
    addr: str = "carry"
    ws: bool = False
    mode: str = "4d"  # tma only: "4d", "dy2d", "rowseg", "gemm2d" (kernels.py)
    desc: str = "device"  # tma only: descriptors made on the device or encoded on the host
    what: str = ""

    @property
    def kernel_kind(self):
        return "tma_host" if self.kind == "tma" and self.desc == "host" else self.kind

    def applies(self, p: Problem) -> str:
        """'' if the variant runs on p, else why not."""
        if self.kind == "tma":
            if p.stride != 1:
                return "tma: stride 1 only"
            if p.c % 8 or p.k % 8:
                return "tma: C, K multiples of 8 (16-byte strides)"
            if self.taps == 3 and p.x != 3:
                return "taps=3 needs a 3-wide filter"
            if self.mode == "dy2d":
                wo = p.wo
                if wo & (wo - 1) or wo > self.bk or p.ho % (self.bk // wo):
                    return "dy2d: Wo a power of two <= BK, and BK / Wo dividing Ho"
            if self.mode == "rowseg":
                if self.desc == "host":
                    return "rowseg: per-tap descriptors are made on the device"
                if -(-p.wo // self.bk) * self.bk > 1.15 * p.wo:
                    return "rowseg: BK-wide row segments would pad Wo by more than 15%"
            if self.mode == "gemm2d" and not (p.y == p.x == 1 and p.pad == 0):
                return "gemm2d: 1x1 filters without padding"
        if p.k < self.bm or (self.kind == "tma" and p.c < self.bn):
            return "tile larger than the problem's K or C"
        return ""


VARIANTS = [
    Variant("base_64x128x64_w4s3", "base", 64, 128, 64, 4, 3,
            what="skwgrad wgrad_splitk source, the kernel bench's usual best tile (pointer gathers, carry-walked rows)"),
    Variant("base_128x128x64_w8s3", "base", 128, 128, 64, 8, 3, what="skwgrad wgrad_splitk, 128x128 tile"),
    Variant("tma_t1_64x64_k64_w4s4", "tma", 64, 64, 64, 4, 4,
            what="lever 1: 4-D TMA boxes for dy and x (padding = OOB zero fill), one tap per tile, carry-walked patches"),
    Variant("tma_t1_64x64_k64_w4s4_host", "tma", 64, 64, 64, 4, 4, desc="host",
            what="lever 1 with host-encoded descriptors (kernel parameters): no per-CTA descriptor set-up"),
    Variant("tma_t3_64x64_k64_w4s3_host", "tma", 64, 64, 64, 4, 3, taps=3, desc="host",
            what="lever 2 with host-encoded descriptors"),
    Variant("tma_t3_64x64_k64_w4s3", "tma", 64, 64, 64, 4, 3, taps=3,
            what="lever 2: tap-major, one dy box per three x boxes (kx = 0..2), three accumulators; 3 stages (92 KB: 2 CTAs/SM)"),
    Variant("tma_t3_64x64_k128_w4s3", "tma", 64, 64, 128, 4, 3, taps=3,
            what="lever 2+3: tap-major with a 128-row patch (half the loop trips per MMA)"),
    Variant("tma_t3_128x64_k64_w8s3", "tma", 128, 64, 64, 8, 3, taps=3,
            what="lever 2+3: tap-major, 128 output channels (2 warpgroups), K >= 128"),
    Variant("tma_t1_128x128_k64_w8s4", "tma", 128, 128, 64, 8, 4,
            what="lever 3: per-tap 128x128 wgmma tile, 4 stages, K, C >= 128"),
    Variant("tma_t1_64x64_k64_w4s4_dy2d", "tma", 64, 64, 64, 4, 4, mode="dy2d",
            what="lever 1, dy as a 2-D [N*Ho*Wo, K] descriptor (patch = whole output rows): dy^T stays in shared memory"),
    Variant("tma_t3_64x64_k64_w4s3_dy2d", "tma", 64, 64, 64, 4, 3, taps=3, mode="dy2d",
            what="lever 1+2: tap-major with the 2-D dy descriptor"),
    Variant("tma_t1_64x64_k64_w4s4_rowseg", "tma", 64, 64, 64, 4, 4, mode="rowseg",
            what="lever 1, 2-D dy descriptor over BK-wide output-row segments (Wo=56: 87.5% of the MMA work useful), dy^T in shared memory"),
    Variant("tma_t3_64x64_k64_w4s3_rowseg", "tma", 64, 64, 64, 4, 3, taps=3, mode="rowseg",
            what="lever 1+2: tap-major over row segments, three clipped x descriptors"),
    Variant("tma_t3_64x64_k32_w4s4_rowseg", "tma", 64, 64, 32, 4, 4, taps=3, mode="rowseg",
            what="lever 1+2: tap-major over 32-wide row segments (Wo=28: 87.5%)"),
    Variant("tma_t1_64x64_k64_w4s4_gemm2d", "tma", 64, 64, 64, 4, 4, mode="gemm2d",
            what="1x1: dy and x both plain 2-D descriptors (a TMA GEMM)"),
]  # fmt: skip


# Compiled by sass.py only (its first evidence), not timed: keeps the H200 run short. Warp
# specialization fails to compile this loop in Triton 3.6 and 3.9 alike (README).
SASS_ONLY = [
    Variant("tma_t1_64x64_k64_w4s4_ws", "tma", 64, 64, 64, 4, 4, addr="div", ws=True,
            what="lever 3: per-tap TMA + tl.range(warp_specialize=True)"),
    Variant("tma_t1_64x64_k64_w4s4_div", "tma", 64, 64, 64, 4, 4, addr="div",
            what="lever 1 with the patch coordinates recomputed by scalar division each trip"),
]  # fmt: skip


def choose_patch(p: Problem, bk: int):
    """(PN, PH, PW), powers of two with product bk, covering (N, Ho, Wo) with the least padding
    (out-of-bounds rows cost MMA work, not traffic); ties to the widest PW, then PH."""
    best = None
    for lw in range(int(math.log2(bk)) + 1):
        for lh in range(int(math.log2(bk)) - lw + 1):
            pw, ph = 1 << lw, 1 << lh
            pn = bk // (pw * ph)
            cover = (-(-p.n // pn) * pn) * (-(-p.ho // ph) * ph) * (-(-p.wo // pw) * pw)
            key = (cover, -pw, -ph)
            if best is None or key < best[0]:
                best = (key, (pn, ph, pw))
    return best[1]


BASE_SOURCE = ROOT / "skwgrad" / "aot" / "kernels" / "wgrad.py"


def _base_kernel():
    """skwgrad's wgrad_splitk, re-jitted without integer specialization (like the AOT build).
    The source file is loaded by path: it needs only Triton, whereas the package import chain
    (ABI checks, every other kernel family) is more than a benchmark on another Triton needs."""
    import importlib.util

    import triton

    spec = importlib.util.spec_from_file_location("skwgrad_wgrad_source", BASE_SOURCE)
    W = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(W)

    fn = W.wgrad_splitk.fn
    ints = [a for a in W.wgrad_splitk.arg_names if a not in ("dy", "x", "dw", "ws_ptr")]
    ints = [a for a in ints if a not in _BASE_CONSTEXPRS]
    return triton.jit(do_not_specialize=ints)(fn)


_BASE_CONSTEXPRS = ("BM", "BN", "BK", "IS_3D", "POINTWISE", "VEC_C", "VEC_K", "INPUT_PRECISION", "VARIANT", "X_CACHE")
_KERNELS = {}


def kernel(kind):
    if kind not in _KERNELS:
        if kind == "base":
            _KERNELS[kind] = _base_kernel()
        else:
            import triton

            import kernels as K

            fn = K.wgrad_tma if kind == "tma" else K.wgrad_tma_host
            ints = [a for a in fn.arg_names if a not in ("dy", "x", "dw32", "dy_desc", "x_desc")]
            ints = [a for a in ints if a not in ("BM", "BN", "PN", "PH", "PW", "TAPS", "ADDR", "WS", "MODE")]
            _KERNELS[kind] = triton.jit(do_not_specialize=ints)(fn.fn)
    return _KERNELS[kind]


def geometry(v: Variant, p: Problem):
    """(num_tiles, total reduction iterations, extra launch args)"""
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    if v.kind == "base":
        ng = p.y * p.x * p.c
        tiles = cdiv(p.k, v.bm) * cdiv(ng, v.bn)
        iters = cdiv(p.n * p.ho * p.wo, v.bk)
        return tiles, iters, {}
    tiles = cdiv(p.k, v.bm) * (p.y * p.x // v.taps) * cdiv(p.c, v.bn)
    if v.mode == "gemm2d":
        pn, ph, pw = 1, 1, v.bk
        n_pb, h_pb, w_pb = cdiv(p.n * p.ho * p.wo, v.bk), 1, 1
        return tiles, n_pb, dict(patch=(pn, ph, pw), pb=(n_pb, h_pb, w_pb))
    if v.mode == "dy2d":
        pn, ph, pw = 1, v.bk // p.wo, p.wo
    elif v.mode == "rowseg":
        pn, ph, pw = 1, 1, v.bk
    else:
        pn, ph, pw = choose_patch(p, v.bk)
    n_pb, h_pb, w_pb = cdiv(p.n, pn), cdiv(p.ho, ph), cdiv(p.wo, pw)
    return tiles, n_pb * h_pb * w_pb, dict(patch=(pn, ph, pw), pb=(n_pb, h_pb, w_pb))


def launch(v: Variant, p: Problem, x, dy, dw32, ks: int):
    """One split-K launch accumulating into the zeroed fp32 dw32 [K, Y, X, C]."""
    tiles, iters, g = geometry(v, p)
    ks = max(1, min(ks, iters))
    ks_iters = -(-iters // ks)
    ks = -(-iters // ks_iters)
    grid = (tiles * ks,)
    if v.kind == "base":
        kernel("base")[grid](
            dy, x, dw32,
            p.n, 1, p.c, p.k, 1, p.h, p.w, 1, p.y, p.x, 1, p.ho, p.wo,
            1, p.stride, p.stride, 0, p.pad, p.pad, 1, 1, 1,
            dw32, 0, ks_iters, ks,
            BM=v.bm, BN=v.bn, BK=v.bk, IS_3D=False, POINTWISE=(p.y == 1 and p.x == 1 and p.pad == 0 and p.stride == 1),
            VEC_C=8, VEC_K=8, INPUT_PRECISION="ieee", VARIANT="atomic", X_CACHE=".ca",
            num_warps=v.warps, num_stages=v.stages,
        )  # fmt: skip
    else:
        pn, ph, pw = g["patch"]
        n_pb, h_pb, w_pb = g["pb"]
        if v.desc == "host":
            dy, x = host_descriptors(v, p, x, dy, (pn, ph, pw))
        kernel(v.kernel_kind)[grid](
            dy, x, dw32,
            p.n, p.h, p.w, p.c, p.k, p.ho, p.wo, p.y, p.x, p.pad, p.pad,
            n_pb, h_pb, w_pb, ks_iters,
            BM=v.bm, BN=v.bn, PN=pn, PH=ph, PW=pw, TAPS=v.taps, ADDR=v.addr, WS=v.ws, MODE=v.mode,
            num_warps=v.warps, num_stages=v.stages,
        )  # fmt: skip
    return ks


def host_descriptors(v, p, x, dy, patch):
    """The TMA descriptors wgrad_tma builds on the device, built here (same shapes and boxes)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    pn, ph, pw = patch
    bk = pn * ph * pw
    r = p.n * p.ho * p.wo
    if v.mode == "4d":
        dyd = TensorDescriptor(dy, [p.n, p.ho, p.wo, p.k], [p.ho * p.wo * p.k, p.wo * p.k, p.k, 1], [pn, ph, pw, v.bm])
    else:
        dyd = TensorDescriptor(dy, [r, p.k], [p.k, 1], [bk, v.bm])
    if v.mode == "gemm2d":
        xd = TensorDescriptor(x, [r, p.c], [p.c, 1], [bk, v.bn])
    else:
        xd = TensorDescriptor(x, [p.n, p.h, p.w, p.c], [p.h * p.w * p.c, p.w * p.c, p.c, 1], [pn, ph, pw, v.bn])
    return dyd, xd


def ks_options(v, p, sms):
    tiles, iters, _ = geometry(v, p)
    return sorted({max(1, min(iters, -(-f * sms // tiles))) for f in (1, 2, 4, 8)})


# ---------------------------------------------------------------------------------------------
# Tensors, reference, cuDNN
# ---------------------------------------------------------------------------------------------
def make_inputs(torch, p: Problem, device, seed=1, dtype=None):
    """Fresh normal x [N, H, W, C] and dy [N, Ho, Wo, K] (bf16; the CPU self-test uses fp16: the
    Triton interpreter's bf16 loads are not faithful, see tests/test_kernels_interp.py)."""
    dtype = dtype or torch.bfloat16
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(p.n, p.h, p.w, p.c, generator=g).to(dtype).to(device)
    dy = torch.randn(p.n, p.ho, p.wo, p.k, generator=g).to(dtype).to(device)
    return x, dy


def conv_bwd_weight(torch, p: Problem, x, dy, dtype=None):
    """dW [K, Y, X, C] through aten (cuDNN on CUDA); x/dy NHWC tensors viewed as channels_last NCHW."""
    xt, dyt = x.permute(0, 3, 1, 2), dy.permute(0, 3, 1, 2)
    if dtype is not None:
        xt, dyt = xt.to(dtype), dyt.to(dtype)
    w = torch.empty(p.k, p.c, p.y, p.x, dtype=xt.dtype, device=x.device)
    st, pd = [p.stride] * 2, [p.pad] * 2

    def run():
        return torch.ops.aten.convolution_backward(dyt, xt, w, None, st, pd, [1, 1], False, [0, 0], 1, [False, True, False])[1]

    return run


def rel_err(torch, out, ref):
    out = out.double()
    if not bool(torch.isfinite(out).all()):
        return float("inf")
    return (torch.linalg.norm(out - ref) / torch.linalg.norm(ref)).item()


class Runner:
    """Buffers for one (problem, variant): zeroed fp32 accumulator, bf16 dW."""

    def __init__(self, torch, v, p, x, dy):
        self.torch, self.v, self.p, self.x, self.dy = torch, v, p, x, dy
        self.dw32 = torch.zeros(p.k, p.y, p.x, p.c, dtype=torch.float32, device=x.device)
        self.dw = torch.empty(p.k, p.y, p.x, p.c, dtype=x.dtype, device=x.device)
        self.ks = 1

    def zero(self):
        self.dw32.zero_()

    def kernel(self):
        return launch(self.v, self.p, self.x, self.dy, self.dw32, self.ks)

    def full(self):
        self.dw32.zero_()
        launch(self.v, self.p, self.x, self.dy, self.dw32, self.ks)
        self.dw.copy_(self.dw32)


def time_us(torch, fn, reps, before=None):
    """Median device time of fn (events around fn only; ``before`` runs outside them)."""
    for _ in range(3):
        if before:
            before()
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda._sleep(40_000_000)  # ~20 ms: longer than queueing reps launches
    for s, e in zip(starts, ends):
        if before:
            before()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends))


def _set_allocator(torch, device):
    import triton

    def alloc(size, alignment, stream):  # global scratch for on-device tensor descriptors
        return torch.empty(size, dtype=torch.int8, device=device)

    triton.set_allocator(alloc)


# ---------------------------------------------------------------------------------------------
# Compile ahead in worker processes (the JIT's disk cache is shared): compile time off the clock
# ---------------------------------------------------------------------------------------------
def _prewarm_one(a):
    """Child process: compile (and launch once) one (row, variant); a compiler abort kills only it."""
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    p = read_rows(a.corpus, [a.prewarm_one[0]])[0]
    v = next(v for v in VARIANTS + SASS_ONLY if v.name == a.prewarm_one[1])
    _set_allocator(torch, "cuda")
    x, dy = make_inputs(torch, p, "cuda")
    dw32 = torch.zeros(p.k * p.y * p.x * p.c, dtype=torch.float32, device="cuda")
    launch(v, p, x, dy, dw32, 1 << 30)
    torch.cuda.synchronize()
    return 0


def prewarm(a, pairs):
    """Compile every (row, variant) ahead in child processes (the JIT's disk cache is shared),
    a.jobs at a time; returns {(row, variant): error} for those that failed."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    def one(pv):
        p, v = pv
        cmd = [sys.executable, __file__, "--corpus", a.corpus, "--prewarm-one", p.name, v.name]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.compile_timeout)
        except subprocess.TimeoutExpired:
            return pv, f"compile timed out after {a.compile_timeout}s"
        if r.returncode:
            tail = [ln for ln in (r.stderr or "").splitlines() if ln.strip()][-3:]
            return pv, f"compile/launch failed (rc {r.returncode}): " + " | ".join(tail)[-400:]
        return pv, ""

    failed = {}
    with ThreadPoolExecutor(a.jobs) as ex:
        for (p, v), err in ex.map(one, pairs):
            if err:
                failed[(p.name, v.name)] = err
                print(f"compile {p.name} {v.name}: {err[:200]}", flush=True)
    return failed


def cmd_bench(a):
    import torch
    import triton

    variants = _pick(a.variants)
    if a.dry:  # CPU plumbing check: the interpreter, tiny shapes and tiles, wall-clock "timing"
        rows, dev, sms, reps = SELFTEST, "cpu", 4, 1
        variants = [_shrunk(v) for v in variants]
        timer = lambda torch, fn, reps, before=None: _wall_us(fn, before)  # noqa: E731
        sync = lambda: None  # noqa: E731
        a.jobs = 0
    else:
        rows = read_rows(a.corpus, [r for r in ROWS if not a.only or any(o in r for o in a.only.split(","))])
        dev, reps, timer, sync = "cuda", a.reps, time_us, torch.cuda.synchronize
    t_start = time.time()
    failed = {}
    if a.jobs > 0:
        todo = [(p, v) for p in rows for v in variants if not v.applies(p)]
        failed = prewarm(a, todo)
        print(f"prewarm: {len(todo)} (row, variant) compiles in {time.time() - t_start:.0f}s, {len(failed)} failed", flush=True)
    torch.backends.cudnn.benchmark = True
    _set_allocator(torch, dev)
    if not a.dry:
        sms = torch.cuda.get_device_properties(0).multi_processor_count
    results = []
    for p in rows:
        x, dy = make_inputs(torch, p, dev, dtype=torch.float16 if a.dry else None)
        cudnn = conv_bwd_weight(torch, p, x, dy)
        t_cudnn = timer(torch, cudnn, reps)
        ref = conv_bwd_weight(torch, p, x, dy, torch.float64)().permute(0, 2, 3, 1).contiguous()
        err_cudnn = rel_err(torch, cudnn().permute(0, 2, 3, 1), ref)
        row = {"name": p.name, "regime": p.regime, "problem": asdict(p), "gflop": p.flops / 1e9,
               "min_mbytes": p.min_bytes / 1e6, "roofline_us": p.roofline_us, "cudnn_us": t_cudnn,
               "cudnn_rel_err": err_cudnn, "cudnn_pct_roofline": 100 * p.roofline_us / t_cudnn, "variants": {}}  # fmt: skip
        for v in variants:
            why = v.applies(p)
            if why:
                row["variants"][v.name] = {"skipped": why}
                continue
            if (p.name, v.name) in failed:
                row["variants"][v.name] = {"error": failed[(p.name, v.name)]}
                continue
            R = Runner(torch, v, p, x, dy)
            rec = {"ks": {}, "geometry": {k: list(val) for k, val in geometry(v, p)[2].items()}}
            try:
                for ks in ks_options(v, p, sms):
                    R.ks = ks
                    R.dw.fill_(float("nan"))  # poisoned: every element must be written
                    R.full()
                    sync()
                    err = rel_err(torch, R.dw, ref)
                    us = timer(torch, R.full, reps)
                    kus = timer(torch, R.kernel, reps, before=R.zero)
                    grid = geometry(v, p)[0] * launch_ks(v, p, ks)
                    rec["ks"][str(ks)] = {"us": us, "kernel_us": kus, "rel_err": err, "ok": err <= a.tol, "grid": grid}
            except Exception as e:  # a compile or launch failure of one variant: record, go on
                rec["error"] = f"{type(e).__name__}: {str(e)[:400]}"
            ok = {k: r for k, r in rec["ks"].items() if r["ok"]}
            if ok:
                kbest = min(ok, key=lambda k: ok[k]["us"])
                b = ok[kbest]
                rec.update(best_ks=int(kbest), us=b["us"], kernel_us=b["kernel_us"], rel_err=b["rel_err"],
                           speedup_vs_cudnn=t_cudnn / b["us"], kernel_speedup_vs_cudnn=t_cudnn / b["kernel_us"],
                           pct_roofline=100 * p.roofline_us / b["us"], kernel_pct_roofline=100 * p.roofline_us / b["kernel_us"])  # fmt: skip
            elif rec["ks"]:
                rec["error"] = rec.get("error") or "no split-K degree within tolerance: " + ", ".join(
                    f"ks={k} err={r['rel_err']:.1e}" for k, r in rec["ks"].items()
                )
            row["variants"][v.name] = rec
            del R
        results.append(row)
        print(_row_line(row), flush=True)
        _write(a, results, triton, torch, t_start)
    _write(a, results, triton, torch, t_start)
    print(_summary(results, variants))
    print(f"total {time.time() - t_start:.0f}s; wrote {a.out}")
    bad = [(r["name"], n) for r in results for n, v in r["variants"].items() if "error" in v]
    return 1 if bad and a.strict else 0


def _pick(names, every=False):
    """Variants named in the comma list ``names`` (any, SASS-only ones too), else the timed set
    (``every``: and the SASS-only ones)."""
    if names:
        want = names.split(",")
        unknown = [n for n in want if n not in {v.name for v in VARIANTS + SASS_ONLY}]
        if unknown:
            raise SystemExit(f"unknown variants {unknown}; known: {[v.name for v in VARIANTS + SASS_ONLY]}")
        return [v for v in VARIANTS + SASS_ONLY if v.name in want]
    return VARIANTS + SASS_ONLY if every else list(VARIANTS)


def _shrunk(v):
    """A variant's tiles cut down to the self-test's tiny problems (patches follow bk)."""
    import dataclasses

    return dataclasses.replace(v, bm=16, bn=16 if v.kind == "tma" else 32, bk=16 if v.bk <= 64 else 32)


def _wall_us(fn, before=None):
    if before:
        before()
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e6


def launch_ks(v, p, ks):
    _, iters, _ = geometry(v, p)
    ks = max(1, min(ks, iters))
    return -(-iters // -(-iters // ks))


def _write(a, results, triton, torch, t_start):
    doc = {
        "what": "benchmarks/mainloop/run.py: dense wgrad main-loop levers vs cuDNN (issue 12)",
        "triton": triton.__version__, "torch": torch.__version__,
        "device": "cpu (--dry: Triton interpreter)" if a.dry else torch.cuda.get_device_name(0),
        "sms": None if a.dry else torch.cuda.get_device_properties(0).multi_processor_count, "reps": a.reps, "tol": a.tol,
        "roofline": {"flops_per_s": PEAK_FLOPS, "bytes_per_s": PEAK_BYTES},
        "base_source_sha256": hashlib.sha256(BASE_SOURCE.read_bytes()).hexdigest(),
        "variants": {v.name: asdict(v) for v in VARIANTS + SASS_ONLY}, "seconds": time.time() - t_start, "rows": results,
    }  # fmt: skip
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=1))


def _row_line(row):
    parts = [f"{row['name']:<24} cuDNN {row['cudnn_us']:7.1f}us ({row['cudnn_pct_roofline']:4.0f}% roof)"]
    for n, v in row["variants"].items():
        if "us" in v:
            parts.append(f"  {n:<28} {v['us']:7.1f}us (kernel {v['kernel_us']:6.1f}) {v['speedup_vs_cudnn']:5.2f}x "
                         f"{v['pct_roofline']:4.0f}% roof ks={v['best_ks']}")  # fmt: skip
        elif "error" in v:
            parts.append(f"  {n:<28} ERROR {v['error'][:160]}")
    return "\n".join(parts)


def _summary(results, variants):
    lines = ["", "speedup vs cuDNN (us incl. zero+cast / kernel only); geomean over the rows each variant ran on"]
    for v in variants:
        s = [r["variants"][v.name]["speedup_vs_cudnn"] for r in results if "us" in r["variants"].get(v.name, {})]
        k = [r["variants"][v.name]["kernel_speedup_vs_cudnn"] for r in results if "us" in r["variants"].get(v.name, {})]
        if s:
            g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
            lines.append(f"  {v.name:<28} {g(s):5.2f}x / {g(k):5.2f}x over {len(s)} rows")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# CPU self-test: the Triton interpreter on tiny shapes, every variant vs float64
# ---------------------------------------------------------------------------------------------
SELFTEST = [
    Problem("tiny_3x3", 2, 16, 16, 6, 5, 3, 3, 1, 1),
    Problem("tiny_3x3_k24", 3, 16, 24, 5, 7, 3, 3, 1, 1),
    Problem("tiny_3x3_w8", 2, 16, 16, 4, 8, 3, 3, 1, 1),  # dy2d applies: Wo = 8, PH = BK / 8 divides Ho
    Problem("tiny_3x3_w14", 2, 16, 16, 3, 14, 3, 3, 1, 1),  # rowseg applies: 16-wide segments of 14
    Problem("tiny_1x1", 2, 16, 16, 4, 6, 1, 1, 1, 0),
]


def cmd_selftest(a):
    import dataclasses

    import torch

    fails = 0
    for p in SELFTEST:
        x, dy = make_inputs(torch, p, "cpu", seed=sum(map(ord, p.name)), dtype=torch.float16)
        ref = conv_bwd_weight(torch, p, x, dy, torch.float64)().permute(0, 2, 3, 1).contiguous()
        for v in _pick(a.variants, every=True):
            v = _shrunk(v)
            if v.applies(p):
                continue
            for ks in (1, 3):
                R = Runner(torch, v, p, x, dy)
                R.ks = ks
                R.dw.fill_(float("nan"))
                R.full()
                err = rel_err(torch, R.dw, ref)
                ok = err <= a.tol
                fails += not ok
                g = geometry(v, p)[2]
                print(f"{'ok ' if ok else 'BAD'} {p.name:<12} {v.name:<28} ks={ks} {g} err={err:.2e}", flush=True)
    print(f"selftest: {fails} failures")
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="mainloop.json")
    ap.add_argument("--corpus", default=str(ROOT / "tests" / "data" / "wgrad_shapes.csv"))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--tol", type=float, default=1e-2)
    ap.add_argument("--jobs", type=int, default=12, help="processes compiling ahead (0: compile in line)")
    ap.add_argument("--only", default="", help="comma-separated substrings of row names")
    ap.add_argument("--variants", default="", help="comma-separated variant names (default all)")
    ap.add_argument("--strict", action="store_true", help="exit 1 if any variant failed")
    ap.add_argument("--compile-timeout", type=int, default=120, help="seconds per child compile")
    ap.add_argument("--selftest", action="store_true", help="CPU: Triton interpreter, tiny shapes")
    ap.add_argument("--dry", action="store_true", help="CPU: the bench path end to end on the self-test shapes")
    ap.add_argument("--prewarm-one", nargs=2, metavar=("ROW", "VARIANT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.prewarm_one:
        return _prewarm_one(a)
    return cmd_selftest(a) if a.selftest else cmd_bench(a)


if __name__ == "__main__":
    sys.exit(main() or 0)
