"""Build here, run on the H200: the Gluon TMA-im2col wgrad main loop (``gluon_wgrad.py``) against cuDNN.

    # build machine (Triton 3.9, no GPU): cubins + launch metadata into one folder
    .venv/bin/python benchmarks/mainloop/gluon_run.py build --out .device/gluon
    # H200 (torch, cuda-bindings; no Triton needed): check against float64, time against cuDNN
    python3 benchmarks/mainloop/gluon_run.py run --objs .device/gluon --corpus tests/data/wgrad_shapes.csv --out $OUT/g.json

The device side loads each cubin with the driver API, encodes the two TMA descriptors on the host
(``cuTensorMapEncodeTiled`` for dy, ``cuTensorMapEncodeIm2col`` for x, as Triton's own launcher
does from the kernel's ``tensordesc_meta``) and packs the parameters at the offsets the PTX
declares. Per row and configuration it tries a few split-K degrees (grid about 1x, 2x, 4x the SMs,
and ks = 1), checks each against a float64 reference (fp32 buffer NaN-free and within 1e-3), and
times ``zero + kernel + cast`` (what a caller waits for) and the kernel alone, CUDA events, median
of 30 after warm-up, with cuDNN (``aten.convolution_backward``, channels last, benchmark mode)
timed the same way in the same process.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# (BM, CB, BK, stages, warps, warp-specialized, direct epilogue, NT taps per tile): a tile is
# BM output channels x NT taps x CB input channels; shared memory 64-192 KB
TILES = [(128, 128, 64, 4, 8), (128, 256, 64, 3, 8), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4), (64, 64, 64, 4, 4)]
MULTI_TAP = [(64, 64, 64, 4, 4, 2), (128, 64, 64, 4, 8, 2), (64, 64, 64, 3, 4, 4)]
CONFIGS = (
    [(64, 64, 64, 4, 4, False, False, 1)]  # run E1's loop (no warp specialization), for reference
    + [t + (True, direct, 1) for t in TILES for direct in (False, True)]
    + [t[:5] + (True, direct, t[5]) for t in MULTI_TAP for direct in (False, True)]
)
INT_ARGS = ["HoWo", "Wo", "C", "K", "X", "TAPS", "stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w",
            "m_tiles", "c_tiles", "ks_iters", "total_iters"]  # fmt: skip
_PARAM = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(b8|u32|u64|s32|s64|b32|b64)(?:\s+\.ptr\s+\.global\s+\.align\s+\d+)?\s+(\w+?)(?:\[(\d+)\])?\s*[,)]")


def param_layout(ptx: str, name: str) -> list[tuple[int, int]]:
    """(offset, size) of every .entry parameter, 128-byte tensor maps included (aligned 64)."""
    m = re.search(r"\.entry\s+" + re.escape(name) + r"\s*\((.*?)\n\)", ptx, re.S)
    out, off = [], 0
    for align, ty, _, count in _PARAM.findall(m.group(1) + ")"):
        size = int(count) if count else int(ty[1:]) // 8
        a = int(align) if align else size
        off = -(-off // a) * a
        out.append((off, size))
        off += size
    return out


def cmd_build(args):
    sys.path.insert(0, str(HERE))
    import gluon_wgrad as gw

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    index = []
    for dtype in args.dtypes.split(","):
        for bm, cb, bk, st, w, ws, direct, nt in CONFIGS:
            t0 = time.time()
            cubin, meta, asm = gw.build(bm, cb, bk, st, w, dtype, ws=ws, direct=direct, nt=nt)
            meta["params"] = param_layout(asm["ptx"], meta["name"])
            cols = f"{nt}x{cb}" if nt > 1 else f"{cb}"
            tag = f"{dtype}_{bm}x{cols}x{bk}_s{st}w{w}" + ("_ws" if ws else "") + ("_direct" if direct else "")
            (out / f"{tag}.cubin").write_bytes(cubin)
            meta["tag"] = tag
            index.append(meta)
            print(f"{tag}: shared {meta['shared']} B, {len(meta['params'])} params, {time.time() - t0:.1f} s", flush=True)
    (out / "index.json").write_text(json.dumps(index, indent=1))


# ---------------------------------------------------------------------------------------------
# device side
# ---------------------------------------------------------------------------------------------
class Gpu:
    def __init__(self):
        import ctypes

        import torch
        from cuda.bindings import driver as cu

        self.cu, self.torch, self.ctypes = cu, torch, ctypes
        torch.cuda.init()
        torch.zeros(1, device="cuda")  # the primary context, shared with torch
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.funcs = {}

    def check(self, res, what):
        err = res[0]
        if int(err) != 0:
            raise RuntimeError(f"{what}: {err}")
        return res[1] if len(res) == 2 else res[1:]

    def load(self, cubin: bytes, meta):
        cu = self.cu
        mod = self.check(cu.cuModuleLoadData(cubin), "cuModuleLoadData")
        fn = self.check(cu.cuModuleGetFunction(mod, meta["name"].encode()), "cuModuleGetFunction")
        if meta["shared"] > 48 * 1024:
            self.check(
                cu.cuFuncSetAttribute(fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, meta["shared"]),
                "cuFuncSetAttribute",
            )
        # The driver's layout wins: a 128-byte tensor map is 64-byte aligned in the *absolute*
        # parameter space (which starts at c[0x0][0x210] on sm_90), so the first one sits at
        # offset 48 of the kernarg block, not 0 as natural alignment from 0 would put it.
        got = [tuple(int(v) for v in self.check(cu.cuFuncGetParamInfo(fn, i), "cuFuncGetParamInfo")) for i in range(len(meta["params"]))]
        if [s for _, s in got] != [s for _, s in meta["params"]]:
            raise RuntimeError(f"{meta['tag']}: param sizes {got} != PTX {meta['params']}")
        meta["ptx_params"], meta["params"] = meta["params"], got
        return mod, fn

    def tmap_bytes(self, tmap) -> bytes:
        return self.ctypes.string_at(tmap.getPtr(), 128)

    def encode_tiled(self, t, shape, td):
        cu = self.cu
        rank = len(shape)
        dims, strides = _dims_strides(t, shape)
        res = cu.cuTensorMapEncodeTiled(
            cu.CUtensorMapDataType(_host_dtype(td["elem_type"])), rank, t.data_ptr(), _u64(dims), _u64(strides),
            _u32(reversed(td["block_size"])), _u32([1] * rank),
            cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, cu.CUtensorMapSwizzle(td["swizzle"]),
            cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B, cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )  # fmt: skip
        return self.tmap_bytes(self.check(res, "cuTensorMapEncodeTiled"))

    def encode_im2col(self, t, shape, td, lower, upper, elem_strides):
        cu = self.cu
        rank = len(shape)
        dims, strides = _dims_strides(t, shape)
        res = cu.cuTensorMapEncodeIm2col(
            cu.CUtensorMapDataType(_host_dtype(td["elem_type"])), rank, t.data_ptr(), _u64(dims), _u64(strides),
            list(reversed(lower)), list(reversed(upper)), int(td["block_size"][1]), int(td["block_size"][0]),
            _u32(reversed(elem_strides)),
            cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, cu.CUtensorMapSwizzle(td["swizzle"]),
            cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B, cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )  # fmt: skip
        return self.tmap_bytes(self.check(res, "cuTensorMapEncodeIm2col"))


def _dims_strides(t, shape):
    """The driver's view of a packed tensor: dims innermost first, byte strides of the outer dims."""
    dims = [int(s) for s in reversed(shape)]
    strides, acc = [], t.element_size()
    for s in reversed(shape[1:]):
        acc *= int(s)
        strides.append(acc)
    return dims, strides


def _u64(vals):
    from cuda.bindings import driver as cu

    return [cu.cuuint64_t(int(v)) for v in vals]


def _u32(vals):
    from cuda.bindings import driver as cu

    return [cu.cuuint32_t(int(v)) for v in vals]


def _host_dtype(device_enum: int) -> int:
    # Triton's device-side TMA dtype enum differs from the driver's for 8-10 (driver.py)
    return {8: 10, 9: 8, 10: 9}.get(device_enum, device_enum)


def pack(meta, values) -> bytes:
    """values: one per parameter: bytes (tensor maps) or int; the trailing scratch pointers are 0."""
    import struct

    params = meta["params"]
    size = params[-1][0] + params[-1][1]
    buf = bytearray(size)
    for (off, sz), v in zip(params, values + [0] * (len(params) - len(values))):
        if isinstance(v, (bytes, bytearray)):
            buf[off : off + sz] = v
        else:
            buf[off : off + sz] = struct.pack({4: "<i", 8: "<q"}[sz], v)
    return bytes(buf)


def load_rows(path, only=None):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            if only and r["name"] not in only:
                continue
            g = int(r.get("groups") or 1)
            if g != 1 or int(r.get("d") or 1) != 1 or int(r.get("z") or 1) != 1:
                continue  # dense 2-D only (3-D needs the 5-D im2col variant)
            if r["dtype"] not in ("bf16", "fp16") or int(r["in_channels"]) % 8 or int(r["out_channels"]) % 8:
                continue  # TMA strides are 16-byte multiples
            rows.append(r)
    return rows


def run_row(gpu, r, kernels, reps, warmup):
    import torch

    cu = gpu.cu
    n, c, k = int(r["n"]), int(r["in_channels"]), int(r["out_channels"])
    h, w, y, x_ = int(r["h"]), int(r["w"]), int(r["y"]), int(r["x"])
    s, p, d = int(r["stride"]), int(r["padding"]), int(r["dilation"])
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[r["dtype"]]
    ho = (h + 2 * p - d * (y - 1) - 1) // s + 1
    wo = (w + 2 * p - d * (x_ - 1) - 1) // s + 1
    R = n * ho * wo
    torch.manual_seed(hash(r["name"]) % 2**31)
    xt = torch.randn(n, h, w, c, device="cuda", dtype=dt)  # NHWC memory
    dyt = torch.randn(n, ho, wo, k, device="cuda", dtype=dt)
    x_nchw = xt.permute(0, 3, 1, 2)  # channels-last views
    dy_nchw = dyt.permute(0, 3, 1, 2)
    wt = torch.empty(k, c, y, x_, device="cuda", dtype=dt).to(memory_format=torch.channels_last)
    ref = torch.ops.aten.convolution_backward(
        dy_nchw.double(), x_nchw.double(), wt.double(), None, [s, s], [p, p], [d, d], False, [0, 0], 1, [False, True, False]
    )[1].permute(0, 2, 3, 1).float()  # [K, Y, X, C]
    refn = ref.norm().item()

    def cudnn():
        return torch.ops.aten.convolution_backward(dy_nchw, x_nchw, wt, None, [s, s], [p, p], [d, d], False, [0, 0], 1, [False, True, False])[1]

    out = {"name": r["name"], "shape": dict(n=n, c=c, k=k, h=h, w=w, y=y, x=x_, stride=s, padding=p, dilation=d, dtype=r["dtype"]),
           "gflop": 2.0 * k * c * y * x_ * R / 1e9}  # fmt: skip
    out["cudnn_us"] = time_us(cudnn, reps, warmup)
    dw32 = torch.zeros(k, y * x_, c, device="cuda", dtype=torch.float32)
    dwo = torch.empty(k, y, x_, c, device="cuda", dtype=dt)
    taps = y * x_
    upper_h = (ho - 1) * s + 1 - h - p
    upper_w = (wo - 1) * s + 1 - w - p
    stream = torch.cuda.current_stream().cuda_stream
    results = []
    for meta, fn in kernels:
        cfg = meta["config"]
        if cfg["dtype"] != r["dtype"]:
            continue
        bm, cb, bk, nt = cfg["BM"], cfg.get("CB", cfg["BN"]), cfg["BK"], cfg.get("NT", 1)
        if bm > max(64, k) or cb > max(64, c) or nt > 1 and c > cb:  # a tile mostly padding
            continue
        td = meta["tensordesc_meta"]
        try:
            dy_map = gpu.encode_tiled(dyt, [R, k], td[0])
            x_map = gpu.encode_im2col(xt, [n, h, w, c], td[1], [-p, -p], [upper_h, upper_w], [1, s, s, 1])
        except Exception as e:  # noqa: BLE001
            results.append({"tag": meta["tag"], "error": str(e)[:300]})
            continue
        m_tiles, c_tiles = -(-k // bm), -(-c // cb)
        tiles = m_tiles * -(-taps // nt) * c_tiles
        total = -(-R // bk)
        direct = cfg.get("direct", False)
        degrees = [1] if direct else sorted({1} | {max(1, min(total, round(f * gpu.sms / tiles))) for f in (1, 2, 4)})
        out_t = dwo if direct else dw32
        for ks in degrees:
            ks_iters = -(-total // ks)
            ks = -(-total // ks_iters)
            ints = dict(HoWo=ho * wo, Wo=wo, C=c, K=k, X=x_, TAPS=taps, stride_h=s, stride_w=s, pad_h=p, pad_w=p,
                        dil_h=d, dil_w=d, m_tiles=m_tiles, c_tiles=c_tiles, ks_iters=ks_iters, total_iters=total)  # fmt: skip
            vals = [dy_map, R, k, k, 1, x_map, n, h, w, c, h * w * c, w * c, c, 1, out_t.data_ptr()] + [ints[a] for a in INT_ARGS]
            blob = pack(meta, vals)
            import ctypes

            cbuf = ctypes.create_string_buffer(blob, len(blob))
            csize = ctypes.c_size_t(len(blob))
            cfgarr = (ctypes.c_void_p * 5)(1, ctypes.addressof(cbuf), 2, ctypes.addressof(csize), 0)
            grid = tiles * ks
            threads = 32 * meta["num_warps"]  # warp-specialized: the producer warps too

            def launch():
                (err,) = cu.cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, meta["shared"], stream, None, ctypes.addressof(cfgarr))
                if int(err) != 0:
                    raise RuntimeError(f"launch: {err}")

            def full():
                if direct:  # the kernel stores dW itself: nothing to zero, nothing to cast
                    launch()
                    return
                dw32.zero_()
                launch()
                dwo.copy_(dw32.view(k, y, x_, c))

            row = {"tag": meta["tag"], "ks": ks, "grid": grid}
            try:
                out_t.fill_(float("nan"))  # poison: the direct kernel must write every element
                if not direct:
                    out_t.zero_()
                launch()
                torch.cuda.synchronize()
                got = out_t.view(k, y, x_, c).float()
                row["rel_err"] = float(((got - ref).norm() / refn).item()) if torch.isfinite(got).all() else float("nan")
                # fp32 buffer: accumulation order only (1e-3); a dW in bf16/fp16 adds its rounding
                row["ok"] = row["rel_err"] <= (1e-2 if direct else 1e-3)
                row["us"] = time_us(full, reps, warmup)
                row["kernel_us"] = time_us(launch, reps, warmup)
            except Exception as e:  # noqa: BLE001
                row["error"] = str(e)[:300]
                torch.cuda.synchronize()
            results.append(row)
    good = [q for q in results if q.get("ok")]
    out["variants"] = results
    if good:
        best = min(good, key=lambda q: q["us"])
        out["best"] = best
        out["speedup_vs_cudnn"] = out["cudnn_us"] / best["us"]
        out["kernel_speedup_vs_cudnn"] = out["cudnn_us"] / min(q["kernel_us"] for q in good)
        out["tflops"] = out["gflop"] / best["us"] * 1e-3
    return out


def time_us(fn, reps, warmup, sleep_cycles=2_000_000):
    """Median device time of ``reps`` event-timed calls, all queued behind a GPU sleep of
    ``sleep_cycles`` first (so the calls' host time never shows)."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    torch.cuda._sleep(sleep_cycles)  # queue every launch before the first event
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) * 1e3 for a, b in ev)
    return t[len(t) // 2]


def cmd_run(args):
    import torch

    torch.backends.cudnn.benchmark = True
    gpu = Gpu()
    objs = Path(args.objs)
    kernels = []
    for meta in json.loads((objs / "index.json").read_text()):
        _, fn = gpu.load((objs / f"{meta['tag']}.cubin").read_bytes(), meta)
        kernels.append((meta, fn))
    only = set(args.only.split(",")) if args.only else None
    doc = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(), "sms": gpu.sms,
           "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "rows": []}  # fmt: skip
    for corpus in args.corpus:
        for r in load_rows(corpus, only):
            t0 = time.time()
            res = run_row(gpu, r, kernels, args.reps, args.warmup)
            res["corpus"] = Path(corpus).name
            doc["rows"].append(res)
            b = res.get("best")
            print(f"{res['name']:44s} cudnn {res['cudnn_us']:8.1f}  "
                  + (f"best {b['us']:8.1f} ({b['tag']} ks={b['ks']}) {res['speedup_vs_cudnn']:.2f}x kernel {res['kernel_speedup_vs_cudnn']:.2f}x" if b else "no correct variant")
                  + f"  [{time.time() - t0:.1f}s]", flush=True)  # fmt: skip
            bad = [q for q in res["variants"] if not q.get("ok")]
            for q in bad[:3]:
                print("   not ok:", q, flush=True)
            Path(args.out).write_text(json.dumps(doc, indent=1))
    sp = [r["speedup_vs_cudnn"] for r in doc["rows"] if "speedup_vs_cudnn" in r]
    if sp:
        import math

        doc["summary"] = {"rows": len(doc["rows"]), "correct_rows": len(sp), "geomean_vs_cudnn": math.exp(sum(map(math.log, sp)) / len(sp))}
        print("summary", doc["summary"])
    Path(args.out).write_text(json.dumps(doc, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", required=True)
    b.add_argument("--dtypes", default="bf16,fp16")
    r = sub.add_parser("run")
    r.add_argument("--objs", required=True)
    r.add_argument("--corpus", action="append", required=True)
    r.add_argument("--only", default="")
    r.add_argument("--out", required=True)
    r.add_argument("--reps", type=int, default=30)
    r.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    {"build": cmd_build, "run": cmd_run}[args.cmd](args)


if __name__ == "__main__":
    main()
