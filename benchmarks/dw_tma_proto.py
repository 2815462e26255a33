"""Depthwise wgrad on sm_90 from TMA row boxes (issue 11, exploration): built here, run on the H200.

    dW[g, ky, kx] = sum over (n, ho, wo) of dy[n, ho, wo, g] * x[n, ho - p_h + ky*d_h, wo - p_w + kx*d_w, g]

Why: the product's window kernel (``skwgrad/aot/kernels/depthwise.py``) loads x and dy with plain
loads issued in the step that uses them; at 180 registers two 4-warp CTAs fit an SM and run P1
found 48% of its samples waiting on those loads. On small planes with many channels it runs
0.8-1.0x cuDNN (run W2). Here a ring of STAGES shared-memory slots is filled by TMA a few steps
ahead, so the loop only reads shared memory and multiplies:
- a step is BH output rows x WT output columns of one image, BC channels (the CTA's block);
- dy is the 4-D ``[N, Ho, Wo, G]`` tensor, one box ``[1, BH, WT, BC]`` a step;
- x is the 4-D ``[N, Hi, Wi, G]`` tensor, one box ``[1, 1, XW, BC]`` per x row the step reads
  (XR = BH + (KY-1)*DH rows), starting at column wo0 - p_w: rows and columns outside the image
  load as zero, which is exactly the padding; channels past G load as zero too. No masks, no
  address arithmetic in the loop;
- per output row and tap, each thread reads its [WT, BC] slice of the x row shifted by kx*DW
  from shared memory (compile-time offsets), converts it and adds x*dy into that tap's fp32
  accumulator (one FMA per product); the accumulators are summed over the columns once, at the
  end, and added into the fp32 dW with relaxed atomics (split-K over the steps).
Stride 1 along W only (a strided column walk would need TMA element strides).

    # build machine (Triton 3.9, no GPU): cubins + launch metadata into one folder
    .venv/bin/python benchmarks/dw_tma_proto.py build --out .device/dwtma
    # H200: check against float64, time against cuDNN and the product's auto pick (SKWGRAD_CACHE)
    python3 benchmarks/dw_tma_proto.py run --objs .device/dwtma --corpus F.csv --out $OUT/dwtma.json
Nothing here is product code: it is the record of what runs X1, X2 and X6 (session 19) measured.
Its v2 loop went into the product as the ``dwconv_tma`` family (skwgrad/aot/kernels/dwconv_tma.py),
which is the one to change.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "mainloop"))

# (KY=KX, WT output columns a step, BC channels, stages, warps); a step is 8 x rows
CONFIGS = [
    (3, 8, 128, 3, 8),
    (3, 16, 64, 3, 8),
    (3, 16, 32, 3, 4),
    (3, 32, 32, 3, 8),
    (3, 32, 16, 3, 4),
    (3, 64, 16, 3, 8),
    (3, 128, 8, 3, 8),
    (5, 16, 32, 3, 4),
    (5, 32, 16, 3, 4),
    (5, 64, 8, 3, 4),
]


def _kernel():
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

    @gluon.constexpr_function
    def _tile_layout(WT, BC, num_warps):
        vec = min(8, WT * BC // (32 * num_warps))
        tc = min(BC // vec, 32)
        return gl.BlockedLayout([1, vec], [32 // tc, tc], [num_warps, 1], [1, 0])

    @gluon.jit
    def _issue(dy_desc, x_desc, bar, dy_bufs, x_buf, dbase, step, c0, WS, BHB, pad_h, pad_w,
               BH: gl.constexpr, WT: gl.constexpr):  # fmt: skip
        DYB: gl.constexpr = dy_desc.block_type.shape[1]
        ws = step % WS
        q = step // WS
        hb = q % BHB
        n = q // BHB
        ho0 = hb * BH
        w0 = ws * WT
        mbarrier.expect(bar, (BH // DYB) * dy_desc.block_type.nbytes + x_desc.block_type.nbytes)
        for b in gl.static_range(BH // DYB):
            tma.async_load(dy_desc, [n, ho0 + b * DYB, w0, c0], bar, dy_bufs.index(dbase + b))
        tma.async_load(x_desc, [n, ho0 - pad_h, w0 - pad_w, c0], bar, x_buf)

    @gluon.jit
    def dw_rows(
        dy_desc, x_desc, dw, G, TAPS, pad_h, pad_w, WS, BHB, total_steps, ks_iters, cblocks,
        KY: gl.constexpr, KX: gl.constexpr, DH: gl.constexpr, DW: gl.constexpr, WT: gl.constexpr,
        STAGES: gl.constexpr, num_warps: gl.constexpr,
    ):  # fmt: skip
        DYB: gl.constexpr = dy_desc.block_type.shape[1]
        RB: gl.constexpr = x_desc.block_type.shape[1]
        XW: gl.constexpr = x_desc.block_type.shape[2]
        BC: gl.constexpr = x_desc.block_type.shape[3]
        BH: gl.constexpr = RB - (KY - 1) * DH  # output rows a step: the x box holds exactly their rows
        NDY: gl.constexpr = BH // DYB  # dy boxes a step
        dtype: gl.constexpr = dy_desc.dtype
        L: gl.constexpr = _tile_layout(WT, BC, num_warps)
        # The boxes land unswizzled (swizzle_byte_width=0), so a box is plain row-major
        # [rows * cols, BC]. A shared-memory view only slices at multiples of its length, so the
        # shifted window of tap (ky, kx) is a gather along the rows: per thread one vector load
        # (the index is the same for its channels), at a compile-time offset.
        PLAIN: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])

        pid = gl.program_id(0)
        cb = pid % cblocks
        split = pid // cblocks
        c0 = cb * BC
        it0 = split * ks_iters
        n_it = gl.minimum(ks_iters, total_steps - it0)

        dy_bufs = gl.allocate_shared_memory(dtype, [STAGES * NDY, 1, DYB, WT, BC], dy_desc.layout)
        x_bufs = gl.allocate_shared_memory(dtype, [STAGES, 1, RB, XW, BC], x_desc.layout)
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for q in gl.static_range(STAGES):
            mbarrier.init(bars.index(q), count=1)
        for q in gl.static_range(STAGES - 1):
            if q < n_it:
                _issue(dy_desc, x_desc, bars.index(q), dy_bufs, x_bufs.index(q), q * NDY, it0 + q, c0, WS, BHB,
                       pad_h, pad_w, BH, WT)  # fmt: skip

        cols = gl.arange(0, WT, layout=gl.SliceLayout(1, L))[:, None] + gl.zeros([WT, BC], gl.int32, layout=L)
        acc = ()
        for t in gl.static_range(KY * KX):
            acc = acc + (gl.zeros([WT, BC], gl.float32, layout=L),)
        for i in range(n_it):
            j = i + STAGES - 1
            if j < n_it:  # the slot of step i-1: every warp left it behind the barrier that ended i-1
                sj = j % STAGES
                _issue(dy_desc, x_desc, bars.index(sj), dy_bufs, x_bufs.index(sj), sj * NDY, it0 + j, c0, WS, BHB,
                       pad_h, pad_w, BH, WT)  # fmt: skip
            s = i % STAGES
            mbarrier.wait(bars.index(s), (i // STAGES) & 1)
            xb = x_bufs.index(s).reinterpret(shape=[RB * XW, BC], layout=PLAIN)
            for r in gl.static_range(BH):
                dyb = dy_bufs.index(s * NDY + r // DYB).reinterpret(shape=[DYB * WT, BC], layout=PLAIN)
                d = dyb.slice((r % DYB) * WT, WT, 0).load(L).to(gl.float32)
                nacc = ()
                for ky in gl.static_range(KY):
                    for kx in gl.static_range(KX):
                        xv = xb.gather(cols + ((r + ky * DH) * XW + kx * DW), 0).to(gl.float32)
                        nacc = nacc + (acc[ky * KX + kx] + xv * d,)
                acc = nacc
            gl.barrier()
        for q in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(q))
        offs = c0 + gl.arange(0, BC, layout=gl.SliceLayout(0, L))
        for t in gl.static_range(KY * KX):
            v = gl.sum(acc[t], axis=0)
            gl.atomic_add(dw + offs * TAPS + t, v, mask=offs < G, sem="relaxed")

    return dw_rows


def _layout_repr(rank):
    return f"NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank={rank})"


def build(cfg, dtype):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    k, wt, bc, stages, warps = cfg
    rb = 8  # x rows a step: 6 output rows of a 3x3 filter, 4 of a 5x5
    bh = rb - (k - 1)
    dyb = bh & -bh  # dy rows a box: the largest power of two dividing bh
    xw = 1 << (wt + k - 2).bit_length()
    sig = {
        "dy_desc": f"tensordesc<{dtype}[1,{dyb},{wt},{bc}],{_layout_repr(4)}>",
        "x_desc": f"tensordesc<{dtype}[1,{rb},{xw},{bc}],{_layout_repr(4)}>",
        "dw": "*fp32",
    }
    for name in ("G", "TAPS", "pad_h", "pad_w", "WS", "BHB", "total_steps", "ks_iters", "cblocks"):
        sig[name] = "i32"
    consts = {"KY": k, "KX": k, "DH": 1, "DW": 1, "WT": wt, "STAGES": stages, "num_warps": warps}
    for name in consts:
        sig[name] = "constexpr"
    src = GluonASTSource(_kernel(), sig, constexprs=consts, attrs={(2,): [["tt.divisibility", 16]]})
    kern = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "enable_fp_fusion": True})
    md = kern.metadata
    meta = {
        "name": md.name,
        "config": dict(K=k, RB=rb, BH=bh, DYB=dyb, WT=wt, XW=xw, BC=bc, stages=stages, num_warps=warps, dtype=dtype),
        "shared": md.shared,
        "num_warps": md.num_warps,
        "tensordesc_meta": list(getattr(md, "tensordesc_meta", None) or []),
    }
    return bytes(kern.asm["cubin"]), meta, kern.asm


def cmd_build(args):
    from gluon_run import param_layout

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    index = []
    for dtype in args.dtypes.split(","):
        for cfg in CONFIGS:
            t0 = time.time()
            cubin, meta, asm = build(cfg, dtype)
            meta["params"] = param_layout(asm["ptx"], meta["name"])
            c = meta["config"]
            tag = f"{dtype}_k{c['K']}_wt{c['WT']}_bc{c['BC']}_s{c['stages']}w{c['num_warps']}"
            meta["tag"] = tag
            regs, spill = _regs(asm["ptx"])
            meta["regs"], meta["spill_bytes"] = regs, spill
            (out / f"{tag}.cubin").write_bytes(cubin)
            index.append(meta)
            print(f"{tag}: shared {meta['shared']} B, regs {regs}, spill {spill} B, {len(meta['params'])} params, {time.time() - t0:.1f} s", flush=True)
    (out / "index.json").write_text(json.dumps(index, indent=1))


def _regs(ptx):
    """(registers, spill bytes) from ptxas -v on the kernel's PTX (Triton's own ptxas)."""
    import re
    import subprocess
    import tempfile

    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        out = subprocess.run([get_ptxas(90).path, "-v", "--gpu-name=sm_90a", str(src), "-o", str(Path(d) / "k.o")],
                             capture_output=True, text=True).stderr  # fmt: skip
    regs = re.search(r"Used (\d+) registers", out)
    spill = re.search(r"(\d+) bytes spill stores", out)
    return (int(regs.group(1)) if regs else -1), (int(spill.group(1)) if spill else -1)


# ---------------------------------------------------------------------------------------------
# device side
# ---------------------------------------------------------------------------------------------
def load_rows(paths, only):
    rows = []
    for path in paths:
        with open(path) as f:
            for r in csv.DictReader(f):
                g, c = int(r.get("groups") or 1), int(r["in_channels"])
                if g != c or int(r["out_channels"]) != c or int(r.get("d") or 1) != 1 or int(r.get("z") or 1) != 1:
                    continue
                if int(r["stride"]) != 1 or int(r["dilation"]) != 1 or int(r["y"]) != int(r["x"]) or int(r["x"]) not in (3, 5):
                    continue
                if r["dtype"] not in ("bf16", "fp16") or c % 8:
                    continue
                if only and not any(o in r["name"] for o in only):
                    continue
                r["_set"] = Path(path).stem
                rows.append(r)
    return rows


def pick_configs(kernels, r, tags=()):
    """The configurations of a row's filter size and dtype (those named in ``tags`` if any)."""
    k = int(r["x"])
    out = [(m, fn) for m, fn in kernels if m["config"]["K"] == k and m["config"]["dtype"] == r["dtype"]]
    return [(m, fn) for m, fn in out if not tags or m["tag"] in tags]


def time_us(fn, reps, warmup):
    """gluon_run's timing with a ~3 ms sleep ahead (a call's host time, up to ~90 us each, never shows)."""
    from gluon_run import time_us as timed

    return timed(fn, reps, warmup, sleep_cycles=6_000_000)


def run_row(gpu, r, kernels, reps, warmup, product, tags=(), fixed_ks=()):
    import ctypes

    import torch
    from gluon_run import pack

    cu = gpu.cu
    n, g = int(r["n"]), int(r["in_channels"])
    h, w, k = int(r["h"]), int(r["w"]), int(r["x"])
    p = int(r["padding"])
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[r["dtype"]]
    ho, wo = h + 2 * p - k + 1, w + 2 * p - k + 1
    taps = k * k
    torch.manual_seed(hash(r["name"]) % 2**31)
    xt = torch.randn(n, h, w, g, device="cuda", dtype=dt)
    dyt = torch.randn(n, ho, wo, g, device="cuda", dtype=dt)
    x_nchw, dy_nchw = xt.permute(0, 3, 1, 2), dyt.permute(0, 3, 1, 2)
    wt = torch.empty(g, 1, k, k, device="cuda", dtype=dt).to(memory_format=torch.channels_last)
    ref = torch.ops.aten.convolution_backward(
        dy_nchw.double(), x_nchw.double(), wt.double(), None, [1, 1], [p, p], [1, 1], False, [0, 0], g, [False, True, False]
    )[1].reshape(g, taps).float()
    refn = ref.norm().item()

    def cudnn():
        return torch.ops.aten.convolution_backward(dy_nchw, x_nchw, wt, None, [1, 1], [p, p], [1, 1], False, [0, 0], g, [False, True, False])[1]

    out = {"name": r["name"], "set": r["_set"], "problem": dict(n=n, g=g, h=h, w=w, k=k, padding=p, dtype=r["dtype"])}
    byts = (xt.numel() + dyt.numel()) * xt.element_size() + g * taps * 4
    out["roofline_us"] = byts / 4.3e12 * 1e6
    out["cudnn_us"] = time_us(cudnn, reps, warmup)
    if product is not None:
        out["product"] = product(r, xt, dyt, ref, refn)
    dw32 = torch.zeros(g, taps, device="cuda", dtype=torch.float32)
    dwo = None if (r.get("dw_dtype") or r["dtype"]) == "fp32" else torch.empty(g, taps, device="cuda", dtype=dt)
    out["dw_dtype"] = r.get("dw_dtype") or r["dtype"]
    stream = torch.cuda.current_stream().cuda_stream
    results = []
    for meta, fn in pick_configs(kernels, r, tags):
        c = meta["config"]
        bh, wtile, bc = c["BH"], c["WT"], c["BC"]
        if bc > 2 * max(g, 16) or wtile > 2 * max(wo, 8):
            continue  # mostly padding
        td = meta["tensordesc_meta"]
        try:
            dy_map = gpu.encode_tiled(dyt, [n, ho, wo, g], td[0])
            x_map = gpu.encode_tiled(xt, [n, h, w, g], td[1])
        except Exception as e:  # noqa: BLE001
            results.append({"tag": meta["tag"], "error": str(e)[:300]})
            continue
        cblocks = -(-g // bc)
        WS, BHB = -(-wo // wtile), -(-ho // bh)
        total = n * BHB * WS
        degrees = sorted({max(1, min(total, round(f * gpu.sms / cblocks))) for f in (1, 2, 3, 4, 6)})
        degrees = list(fixed_ks) or degrees
        for ks in degrees:
            ks_iters = -(-total // ks)
            ks = -(-total // ks_iters)
            # tensor maps: the 4-D descriptor's host fields (shape, strides) follow each map
            dyv = [dy_map, n, ho, wo, g, ho * wo * g, wo * g, g, 1]
            xv = [x_map, n, h, w, g, h * w * g, w * g, g, 1]
            vals = dyv + xv + [dw32.data_ptr(), g, taps, p, p, WS, BHB, total, ks_iters, cblocks]
            blob = pack(meta, vals)
            cbuf = ctypes.create_string_buffer(blob, len(blob))
            csize = ctypes.c_size_t(len(blob))
            cfgarr = (ctypes.c_void_p * 5)(1, ctypes.addressof(cbuf), 2, ctypes.addressof(csize), 0)
            grid = cblocks * ks
            threads = 32 * meta["num_warps"]

            def launch(fn=fn, grid=grid, threads=threads, meta=meta, cfgarr=cfgarr, keep=(cbuf, csize)):
                (err,) = cu.cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, meta["shared"], stream, None, ctypes.addressof(cfgarr))
                if int(err) != 0:
                    raise RuntimeError(f"launch: {err}")

            def full(launch=launch):
                dw32.zero_()
                launch()
                if dwo is not None:  # a 16-bit dW: the cast the product's Stage-2 does
                    dwo.copy_(dw32)

            row = {"tag": meta["tag"], "ks": ks, "grid": grid}
            try:
                errs = []
                for _ in range(2):
                    dw32.fill_(float("nan"))
                    dw32.zero_()
                    launch()
                    torch.cuda.synchronize()
                    errs.append(float(((dw32 - ref).norm() / refn).item()) if torch.isfinite(dw32).all() else float("nan"))
                row["rel_err"] = max(errs)
                row["ok"] = all(e <= 1e-3 for e in errs)
                if row["ok"]:
                    row["us"] = time_us(full, reps, warmup)
                    row["kernel_us"] = time_us(launch, reps, warmup)
            except Exception as e:  # noqa: BLE001
                row["error"] = str(e)[:300]
                torch.cuda.synchronize()
            results.append(row)
    out["variants"] = results
    good = [q for q in results if q.get("ok")]
    if good:
        best = min(good, key=lambda q: q["us"])
        out["best"] = best
        out["speedup_vs_cudnn"] = out["cudnn_us"] / best["us"]
        if out.get("product", {}).get("us"):
            out["speedup_vs_product"] = out["product"]["us"] / best["us"]
        out["pct_roofline"] = 100 * out["roofline_us"] / best["us"]
    return out


def product_timer(cache, reps, warmup):
    """skwgrad's auto pick for a row (run-from-cache path), timed with the same harness, or None."""
    if not cache:
        return None
    import skwgrad

    def run(r, xt, dyt, ref, refn):
        import torch

        g, k, p = int(r["in_channels"]), int(r["x"]), int(r["padding"])
        x_nchw, dy_nchw = xt.permute(0, 3, 1, 2), dyt.permute(0, 3, 1, 2)
        dw_dtype = r.get("dw_dtype") or r["dtype"]
        try:
            kw = dict(filter_size=k, stride=1, padding=p, dilation=1, groups=g)
            if dw_dtype == "fp32":
                kw["dw_dtype"] = "fp32"
            f = lambda: skwgrad.wgrad(x_nchw, dy_nchw, **kw)  # noqa: E731
            got = f()
            torch.cuda.synchronize()
            err = float(((got.float().reshape(g, k * k) - ref).norm() / refn).item())
            return {"us": time_us(f, reps, warmup), "rel_err": err, "dw_dtype": dw_dtype}
        except Exception as e:  # noqa: BLE001
            return {"error": f"{type(e).__name__}: {e}"[:300]}

    return run


def cmd_run(args):
    import torch
    from gluon_run import Gpu

    torch.backends.cudnn.benchmark = True
    gpu = Gpu()
    objs = Path(args.objs)
    kernels = []
    for meta in json.loads((objs / "index.json").read_text()):
        _, fn = gpu.load((objs / f"{meta['tag']}.cubin").read_bytes(), meta)
        kernels.append((meta, fn))
    only = [o for o in args.only.split(",") if o]
    doc = {"date": time.strftime("%Y-%m-%d"), "commit": args.commit, "device": torch.cuda.get_device_name(), "sms": gpu.sms,
           "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "script": "benchmarks/dw_tma_proto.py", "rows": []}  # fmt: skip
    product = product_timer(args.cache, args.reps, args.warmup)
    t_start = time.time()
    for r in load_rows(args.corpus, only):
        if time.time() - t_start > args.budget_s:
            print("budget spent; stopping", flush=True)
            break
        t0 = time.time()
        try:
            tags = [t for t in args.configs.split(",") if t]
            fixed = [int(v) for v in args.ks.split(",") if v]
            res = run_row(gpu, r, kernels, args.reps, args.warmup, product, tags, fixed)
        except Exception as e:  # noqa: BLE001
            res = {"name": r["name"], "error": f"{type(e).__name__}: {e}"[:300]}
        doc["rows"].append(res)
        b = res.get("best")
        pr = res.get("product", {})
        print(f"{res['name'][:40]:40s} cudnn {res.get('cudnn_us', 0):7.1f} product {pr.get('us', float('nan')):7.1f} "
              + (f"tma {b['us']:7.1f} ({b['tag']} ks={b['ks']}) {res['speedup_vs_cudnn']:.2f}x cudnn {res.get('speedup_vs_product', float('nan')):.2f}x product"
                 if b else f"no correct variant {res.get('error', '')}")
              + f" [{time.time() - t0:.1f}s]", flush=True)  # fmt: skip
        bad = [q for q in res.get("variants", []) if not q.get("ok")]
        for q in bad[:2]:
            print("   not ok:", q, flush=True)
        Path(args.out).write_text(json.dumps(doc, indent=1))
    geo = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else None  # noqa: E731
    sp = [r["speedup_vs_cudnn"] for r in doc["rows"] if "speedup_vs_cudnn" in r]
    spp = [r["speedup_vs_product"] for r in doc["rows"] if "speedup_vs_product" in r]
    prod_cudnn = [r["cudnn_us"] / r["product"]["us"] for r in doc["rows"] if r.get("product", {}).get("us")]
    doc["summary"] = {"rows": len(doc["rows"]), "correct_rows": len(sp), "tma_vs_cudnn_geomean": geo(sp),
                      "tma_vs_product_geomean": geo(spp), "product_vs_cudnn_geomean": geo(prod_cudnn),
                      "tma_rows_ge_1p5x_cudnn": sum(v >= 1.5 for v in sp), "tma_min_vs_cudnn": min(sp) if sp else None}  # fmt: skip
    print("summary", doc["summary"], flush=True)
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
    r.add_argument("--cache", default="")
    r.add_argument("--commit", default="")
    r.add_argument("--reps", type=int, default=30)
    r.add_argument("--warmup", type=int, default=3)
    r.add_argument("--budget-s", type=float, default=240)
    r.add_argument("--configs", default="", help="only these configuration tags (comma-separated)")
    r.add_argument("--ks", default="", help="only these split degrees (comma-separated)")
    args = ap.parse_args()
    {"build": cmd_build, "run": cmd_run}[args.cmd](args)


if __name__ == "__main__":
    main()
