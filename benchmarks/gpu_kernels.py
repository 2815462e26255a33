"""Kernel proof on an NVIDIA GPU: numerics of every family/mode/reduction, determinism of the
linear/tree fixups, and timings vs split-K and cuDNN over the corpus.

Two steps, so the GPU machine never compiles:
  here (CPU):  python benchmarks/gpu_kernels.py build --out .device/kernels
  GPU machine: python benchmarks/gpu_kernels.py check --kernels .device/kernels --out DIR
               python benchmarks/gpu_kernels.py bench --kernels .device/kernels --corpus tests/data/wgrad_shapes.csv --out DIR

The launch path is deliberately minimal and independent of ``skwgrad.launcher``, so it also
cross-checks it. Grid, partition and workspace come from ``launch_geometry``, and the kernarg
block is packed by the ABI ``Packer`` and passed to ``cuLaunchKernel`` one slot at a time,
where the launcher passes one packed buffer. Tensors and memsets go through torch, which is
also the cuDNN baseline. References are float64.
"""

from __future__ import annotations

import argparse
import dataclasses
import ctypes
import json
import math
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skwgrad.abi.conv import parse_problem, read_corpus  # noqa: E402
from skwgrad.abi.kernargs import Packer  # noqa: E402
from skwgrad.abi.launch import STAGE2_BLOCK, launch_geometry  # noqa: E402
from skwgrad.abi.streamk import default_pool  # noqa: E402
from skwgrad.abi.spec import KernelSpec  # noqa: E402
from skwgrad.errors import ProblemError  # noqa: E402

SK = [(m, r) for m in ("dp_sk", "persistent") for r in ("linear", "tree", "workspace")]
SPLITK = ("direct", "two_stage")


def _tiles():
    # (bm, bn, bk, warps, stages)
    return [
        (64, 128, 64, 4, 3),
        (128, 128, 64, 8, 3),
        (64, 256, 64, 8, 3),
        (128, 256, 64, 8, 3),
        (64, 64, 64, 4, 4),
        (64, 128, 128, 4, 3),
        (64, 256, 128, 8, 2),
        (64, 128, 64, 4, 4),
        (64, 128, 64, 8, 3),
        (128, 128, 64, 8, 4),
        (64, 64, 128, 4, 3),
        (64, 256, 32, 8, 4),
        (64, 128, 32, 4, 5),
    ]


def build_specs() -> list[KernelSpec]:
    specs = set()

    def fam(dtype, dw, tile, *, sd=2, pw=False, vc=8, vk=8, prec="", variants=True):
        bm, bn, bk, w, s = tile
        base = dict(dtype=dtype, dw_dtype=dw, spatial_dims=sd, pointwise=pw, vec_c=vc, vec_k=vk,
                    bm=bm, bn=bn, bk=bk, num_warps=w, num_stages=s, precision=prec)  # fmt: skip
        for v in SPLITK:
            if v == "direct" or variants:
                specs.add(KernelSpec("wgrad", v, **base))
        if variants:
            for m, r in SK:
                specs.add(KernelSpec("wgrad_sk", r, mode=m, **base))

    for t in _tiles():
        fam("bf16", "bf16", t)
    for t in _tiles()[:2] + _tiles()[5:6]:
        fam("bf16", "bf16", t, pw=True)
        fam("bf16", "bf16", t, sd=3)
        fam("fp16", "fp16", t)
        fam("bf16", "bf16", t, vc=4, vk=4)
    for t in [(64, 64, 32, 4, 3), (64, 128, 32, 4, 3), (128, 128, 32, 8, 3), (64, 128, 32, 4, 4), (128, 64, 32, 4, 3)]:
        fam("fp32", "fp32", t, vc=4, vk=4, prec="tf32")
    fam("fp32", "fp32", (64, 64, 32, 4, 3), vc=4, vk=4, prec="ieee")
    # grouped / depthwise: the generic kernel, small M tiles (a tile is mostly padding there)
    for t in [(16, 64, 64, 4, 3), (16, 128, 64, 4, 3)]:
        fam("bf16", "bf16", t)
    for t in [(16, 16, 128, 4, 3), (16, 64, 64, 4, 3), (64, 64, 64, 4, 4), (64, 128, 64, 4, 3), (64, 64, 32, 4, 4), (64, 32, 64, 4, 4)]:
        fam("bf16", "bf16", t, vc=1, vk=1)
    # C not a multiple of 8 but K is (ResNet conv1: C=3, K=64): vector dy loads
    for t in [(64, 64, 64, 4, 4), (64, 128, 64, 4, 3), (64, 64, 32, 4, 4)]:
        fam("bf16", "bf16", t, vc=1, vk=8)
    fam("bf16", "bf16", (16, 16, 128, 4, 3), vc=1, vk=1, sd=3)
    # fp32-dW kernels: the atomic reductions
    for base in [dict(dtype="bf16", vec_c=8, vec_k=8), dict(dtype="bf16", vec_c=1, vec_k=1, spatial_dims=3)]:
        kw = dict(dw_dtype="fp32", bm=64, bn=128, bk=64, num_warps=4, num_stages=3, **base)
        specs.add(KernelSpec("wgrad", "atomic", **kw))
        specs.add(KernelSpec("wgrad", "direct", **kw))
        for m in ("dp_sk", "persistent"):
            specs.add(KernelSpec("wgrad_sk", "atomic", mode=m, **kw))
            specs.add(KernelSpec("wgrad_sk", "workspace", mode=m, **kw))
    for dt in ("bf16", "fp16", "fp32"):
        specs.add(KernelSpec("stage2", "reduce", dt, dt, block=STAGE2_BLOCK, num_warps=4))
    return sorted(specs)


def _compile_one(args):
    spec, out = args
    import warnings

    warnings.filterwarnings("ignore")
    from skwgrad.aot.compile import compile_spec

    path = Path(out) / f"{spec.label}.json"
    if path.exists():
        return spec.label, "cached"
    try:
        ck = compile_spec(spec, "sm_90")
    except Exception as e:  # record and go on
        return spec.label, f"FAILED {type(e).__name__}: {str(e)[:300]}"
    (Path(out) / f"{spec.label}.cubin").write_bytes(ck.binary)
    path.write_text(json.dumps({"spec": spec.to_dict(), "metadata": ck.metadata}))
    return spec.label, f"{ck.metadata['compile_seconds']}s"


def cmd_build(a):
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    specs = build_specs()
    t0 = time.time()
    with ProcessPoolExecutor(a.jobs) as ex:
        for label, status in ex.map(_compile_one, [(s, str(out)) for s in specs]):
            if status.startswith("FAILED"):
                print(label, status)
    print(f"{len(specs)} specs in {time.time() - t0:.0f}s")


# ---------------------------------------------------------------------------------------------
# GPU side
# ---------------------------------------------------------------------------------------------
class Runtime:
    """The minimum of a CUDA launcher: load cubins, launch with the ABI-packed kernargs."""

    def __init__(self, kernel_dir):
        import torch
        from cuda.bindings import driver as cu

        self.torch, self.cu = torch, cu
        torch.zeros(1, device="cuda")  # primary context, current on this thread
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.kernels = {}
        for meta_path in sorted(Path(kernel_dir).glob("*.json")):
            d = json.loads(meta_path.read_text())
            spec = KernelSpec.from_dict(d["spec"])
            self.kernels[spec] = d["metadata"] | {"_cubin": meta_path.with_suffix(".cubin")}
        self._fn = {}

    def _check(self, res, what):
        err = res[0] if isinstance(res, tuple) else res
        if err != self.cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"{what} failed: {err}")
        return res[1] if isinstance(res, tuple) and len(res) > 1 else None

    def function(self, spec):
        if spec not in self._fn:
            cu = self.cu
            md = self.kernels[spec]
            mod = self._check(cu.cuModuleLoadData(md["_cubin"].read_bytes()), "cuModuleLoadData")
            fn = self._check(cu.cuModuleGetFunction(mod, md["name"].encode()), "cuModuleGetFunction")
            if md["shared"] > 48 * 1024:
                attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                self._check(cu.cuFuncSetAttribute(fn, attr, md["shared"]), "cuFuncSetAttribute")
            self._fn[spec] = (fn, mod)
        return self._fn[spec][0]

    def occupancy(self, spec):
        md = self.kernels[spec]
        return self._check(
            self.cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.function(spec), md["threads"], md["shared"]),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        )

    def launch(self, spec, grid, packer, buf):
        md = self.kernels[spec]
        fn = self.function(spec)
        base = ctypes.addressof(buf)
        params = (ctypes.c_void_p * len(packer.slots))(*[base + s.offset for s in packer.slots])
        stream = self.cu.CUstream(self.torch.cuda.current_stream().cuda_stream)
        self._check(
            self.cu.cuLaunchKernel(fn, grid, 1, 1, md["threads"], 1, 1, md["shared"], stream, ctypes.addressof(params), 0),
            "cuLaunchKernel",
        )


TORCH_DT = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


class Launch:
    """One problem x kernel x (pool | ks_count): buffers, packed kernargs, run()."""

    def __init__(self, rt, spec, problem, x, dy, *, pool=0, ks_count=1):
        torch = rt.torch
        self.rt, self.spec, self.p = rt, spec, problem
        md = rt.kernels[spec]
        self.geo = launch_geometry(
            problem, spec.family, spec.variant, bm=spec.bm, bn=spec.bn, bk=spec.bk, mode=spec.mode,
            pool=pool, ks_count=ks_count, flags_per_cta=md["flags_per_cta"] or None,
            groups_per_tile=spec.block if spec.family == "grouped" else 0,
        )  # fmt: skip
        self.dw = torch.empty(problem.dw_numel, dtype=getattr(torch, TORCH_DT[problem.dw_dtype]), device="cuda")
        ws = self.geo.workspace
        # The two arenas of the workspace layout: zeroed (zero at rest, the kernels restore it) and scratch.
        self.zeroed = torch.zeros(max(ws.arena_bytes("zeroed"), 256) // 4, dtype=torch.float32, device="cuda")
        self.scratch = torch.zeros(max(ws.arena_bytes("scratch"), 256) // 4, dtype=torch.float32, device="cuda")
        self.packer = Packer(spec.kernarg_decl, md["kernarg"]["tail_pointers"])
        values = {"dy": dy.data_ptr(), "x": x.data_ptr(), "dw": self.dw.data_ptr(), **self.geo.scalars}
        decl_names = set(spec.kernarg_decl.value_names())

        def at(region):
            r = ws.region(region)
            return (self.zeroed if r.arena == "zeroed" else self.scratch).data_ptr() + r.offset

        if "ws_ptr" in decl_names:
            values["ws_ptr"] = at("replicas")
        if "sk_flags" in decl_names:
            values["sk_flags"] = at("flags")
            values["sk_partials"] = at("partials")
        self._bytes = self.packer.pack(values)
        self.buf = (ctypes.c_char * self.packer.size).from_buffer(self._bytes)
        self.stage2 = None
        if self.geo.workspace.needs_stage2:
            s2 = KernelSpec("stage2", "reduce", problem.dw_dtype, problem.dw_dtype, block=STAGE2_BLOCK, num_warps=4)
            p2 = Packer(s2.kernarg_decl, rt.kernels[s2]["kernarg"]["tail_pointers"])
            self._b2 = p2.pack({"ws_ptr": at("replicas"), "dw": self.dw.data_ptr(), **self.geo.stage2_scalars})
            self.stage2 = (s2, p2, (ctypes.c_char * p2.size).from_buffer(self._b2))

    def run(self):
        ws = self.geo.workspace
        if ws.zero_dw:
            self.dw.zero_()
        self.rt.launch(self.spec, self.geo.grid, self.packer, self.buf)
        if self.stage2:
            s2, p2, b2 = self.stage2
            self.rt.launch(s2, self.geo.stage2_grid, p2, b2)

    def poison(self):
        """NaN over dW and the scratch arena; the zeroed arena must still be zero (checked)."""
        self.dw.fill_(float("nan"))
        self.scratch.fill_(float("nan"))

    def zeroed_left_nonzero(self) -> int:
        """Bytes of the zeroed arena the last launch left non-zero (the contract says 0)."""
        return int(self.rt.torch.count_nonzero(self.zeroed.view(self.rt.torch.int32)))

    def output(self):
        return self.dw.view(*self.p.dw_shape)


def make_inputs(rt, p, seed):
    import numpy as np

    torch = rt.torch
    rng = np.random.default_rng(seed)
    dt = getattr(torch, TORCH_DT[p.dtype])
    x = torch.tensor(rng.standard_normal(p.x_shape, dtype=np.float32)).to(dt).cuda()
    dy = torch.tensor(rng.standard_normal(p.dy_shape, dtype=np.float32)).to(dt).cuda()
    return x, dy


def reference(p, x, dy):
    from skwgrad.reference import wgrad_reference

    return wgrad_reference(p, x.double().cpu().numpy(), dy.double().cpu().numpy())


def pick(rt, p, **want):
    """Kernels admitting problem p whose spec matches ``want``."""
    out = []
    for spec in rt.kernels:
        if spec.family == "stage2":
            continue
        if any(getattr(spec, k) != v for k, v in want.items()):
            continue
        try:
            spec.check_problem(p)
        except Exception:
            continue
        out.append(spec)
    return out


CHECK_SHAPES = [
    # (name, problem) small shapes that exercise the partition and the geometry
    ("dense_pad", "n=4,c=64,k=96,h=17,w=17,y=3,x=3,padding=1"),  # partial last M tile (96 % 64)
    ("strided", "n=4,c=32,k=64,h=23,w=19,y=3,x=3,stride=2,padding=1"),
    ("dilated", "n=3,c=32,k=40,h=20,w=20,y=3,x=3,padding=2,dilation=2"),
    ("grouped", "n=4,c=64,k=64,g=4,h=14,w=14,y=3,x=3,padding=1"),
    ("3d", "n=2,c=16,k=24,d=6,h=10,w=10,z=3,y=3,x=3,padding=1"),
    ("depthwise", "n=4,c=24,k=24,g=24,h=16,w=16,y=3,x=3,padding=1"),
    ("pointwise", "n=4,c=64,k=64,h=16,w=16,y=1,x=1"),
    ("odd_vec4", "n=4,c=20,k=12,h=13,w=13,y=3,x=3,padding=1"),
]


def cmd_check(a):
    from skwgrad.reference import relative_error, tolerance

    rt = Runtime(a.kernels)
    torch = rt.torch
    rows, failures = [], 0
    Path(a.out).mkdir(parents=True, exist_ok=True)
    log = open(Path(a.out, "check_rows.log"), "w")

    def record(name, spec, launch, err, tol, extra=""):
        nonlocal failures
        left = launch.zeroed_left_nonzero()  # the zero-at-rest contract of flags / workspace replica
        ok = err <= tol and left == 0
        extra = f"{extra} zeroed-left={left}" if left else extra
        failures += not ok
        part = launch.geo.partition
        pinfo = (f"pool={part.pool} sk={part.sk_ctas} dp={part.dp_tiles} partners<={part.max_linear_partners}"
                 if part else f"ks={launch.geo.ks_count}")  # fmt: skip
        rows.append({"shape": name, "label": spec.label, "partition": pinfo, "rel_err": err, "tol": tol, "ok": ok, "note": extra})
        line = f"{'ok ' if ok else 'BAD'} {name:<12} {spec.label:<60} {pinfo:<40} err={err:.2e} tol={tol:.0e} {extra}"
        print(line, file=log, flush=True)
        if not ok:
            print(line, flush=True)

    for name, text in CHECK_SHAPES:
        for dw_dtype in ("bf16", "fp32"):
            p = parse_problem(text + (",dw_dtype=fp32" if dw_dtype == "fp32" else ""))
            specs = pick(rt, p, dtype="bf16", dw_dtype=dw_dtype)
            if not specs:
                print(f"-- no kernel for {name} {dw_dtype}")
                continue
            x, dy = make_inputs(rt, p, seed=hash((name, dw_dtype)) & 0xFFFF)
            ref = reference(p, x, dy)
            tol = tolerance(p.dtype, p.dw_dtype)
            for spec in specs:
                configs = []
                if spec.family == "wgrad":
                    it = p.tiling(spec.bm, spec.bn, spec.bk).iters_per_tile
                    configs = [dict(ks_count=1)] if spec.variant == "direct" else [dict(ks_count=min(3, it)), dict(ks_count=it)]
                else:
                    t = p.tiling(spec.bm, spec.bn, spec.bk)
                    # small pools force 4+ contributors per tile; a pool dividing the tiles is all-DP
                    configs = [dict(pool=max(1, min(rt.sms, t.total_iters // 5))), dict(pool=3), dict(pool=t.num_tiles)]
                for cfg in configs:
                    L = Launch(rt, spec, p, x, dy, **cfg)
                    L.poison()
                    L.run()
                    torch.cuda.synchronize()
                    out = L.output().double().cpu().numpy()
                    record(name, spec, L, relative_error(out, ref), tol)
    # fp16 / fp32 dtypes and 3-D on one shape each
    for text, dt, prec in [("n=4,c=64,k=64,h=15,w=15,y=3,x=3,padding=1,dtype=fp16", "fp16", ""),
                           ("n=4,c=32,k=64,h=15,w=15,y=3,x=3,padding=1,dtype=fp32,precision=tf32", "fp32", "tf32"),
                           ("n=4,c=32,k=64,h=15,w=15,y=3,x=3,padding=1,dtype=fp32", "fp32", "ieee")]:  # fmt: skip
        p = parse_problem(text)
        if not pick(rt, p, dtype=dt, precision=prec):
            raise SystemExit(f"check: no {dt} {prec} kernel built for {text}; rebuild with `build`")
        x, dy = make_inputs(rt, p, seed=7)
        ref = reference(p, x, dy)
        for spec in pick(rt, p, dtype=dt, precision=prec):
            cfg = dict(pool=5) if spec.family == "wgrad_sk" else dict(ks_count=1 if spec.variant == "direct" else 4)
            L = Launch(rt, spec, p, x, dy, **cfg)
            L.poison()
            L.run()
            torch.cuda.synchronize()
            record(f"{dt}{prec}", spec, L, relative_error(L.output().double().cpu().numpy(), ref), tolerance(dt, dt, prec))
    # one binary, several shapes
    one = [s for s in rt.kernels if s.family == "wgrad_sk" and s.variant == "linear" and s.dtype == "bf16"
           and s.vec_c == 8 and s.spatial_dims == 2 and not s.pointwise and (s.bm, s.bn) == (64, 128)][0]  # fmt: skip
    for text in ["n=2,c=8,k=8,h=31,w=7,y=5,x=1,padding=2", "n=8,c=128,k=64,h=12,w=12,y=3,x=3,stride=2,padding=1",
                 "n=1,c=16,k=200,h=40,w=40,y=1,x=3,padding=0x1"]:  # fmt: skip
        p = parse_problem(text)
        x, dy = make_inputs(rt, p, seed=11)
        L = Launch(rt, one, p, x, dy, pool=rt.sms)
        L.poison()
        L.run()
        torch.cuda.synchronize()
        record("one_binary", one, L, relative_error(L.output().double().cpu().numpy(), reference(p, x, dy)), 1e-2, text)
    # determinism: linear/tree 25 launches, dW and partials poisoned before each
    p = parse_problem("n=8,c=64,k=96,h=28,w=28,y=3,x=3,padding=1")
    x, dy = make_inputs(rt, p, seed=3)
    det = []
    for spec in pick(rt, p, dtype="bf16", dw_dtype="bf16", family="wgrad_sk"):
        if spec.variant not in ("linear", "tree"):
            continue
        t = p.tiling(spec.bm, spec.bn, spec.bk)
        L = Launch(rt, spec, p, x, dy, pool=min(rt.sms, t.total_iters // 6))
        first, same = None, True
        for _ in range(25):
            L.poison()
            L.run()
            torch.cuda.synchronize()
            out = L.output().clone()
            if first is None:
                first = out
            elif not torch.equal(out.view(torch.int16), first.view(torch.int16)):
                same = False
        part = L.geo.partition
        det.append({"label": spec.label, "launches": 25, "bit_identical": same, "max_contributors": part.max_linear_partners + 1,
                    "tree_rounds": part.tree_rounds, "pool": part.pool})  # fmt: skip
        failures += not same
        print(f"{'ok ' if same else 'BAD'} determinism {spec.label} pool={part.pool} partners<={part.max_linear_partners}: {'bit-identical' if same else 'DIFFERS'} x25", flush=True)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    Path(a.out, "check.json").write_text(json.dumps({"rows": rows, "determinism": det, "failures": failures}, indent=1))
    by_variant = {}
    for r in rows:
        lab = r["label"]
        key = "_".join(lab.split("_")[-2:]) if lab.startswith("wgrad_sk") else lab.split("_")[-1]
        ok, n = by_variant.get(key, (0, 0))
        by_variant[key] = (ok + r["ok"], n + 1)
    for key, (ok, n) in sorted(by_variant.items()):
        print(f"  {key:<22} {ok}/{n} within tolerance")
    worst = {}
    for r in rows:
        k = r["shape"]
        worst[k] = max(worst.get(k, 0.0), r["rel_err"])
    print("  worst rel err per shape: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
    print(f"check: {len(rows)} numerics rows, {len(det)} determinism rows, {failures} failures")
    return 1 if failures else 0


def _time(rt, fn, reps):
    """Median device time of ``fn``. A sleep kernel holds the stream while the host queues every
    (event, launch, event) triple, so host launch overhead (ours and torch's) stays out of the
    numbers: each pair of events brackets device work only."""
    torch = rt.torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda._sleep(50_000_000)  # ~25 ms at 2 GHz: longer than queueing reps launches
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends))


def cmd_bench(a):
    rt = Runtime(a.kernels)
    torch = rt.torch
    torch.backends.cudnn.benchmark = True
    # fp32 rows: skwgrad kernels and cuDNN at the same precision (the problem's, set here)
    torch.backends.cuda.matmul.allow_tf32 = a.fp32_precision == "tf32"
    torch.backends.cudnn.allow_tf32 = a.fp32_precision == "tf32"
    results = []
    for name, regime, p in read_corpus(a.corpus):
        if a.only and not any(o in name for o in a.only.split(",")):
            continue
        if p.dtype == "fp32":
            p = dataclasses.replace(p, precision=a.fp32_precision)
        x, dy = make_inputs(rt, p, seed=1)
        sd = p.spatial_dims
        perm = (0, sd + 1, *range(1, sd + 1))
        xt = x.view(p.n, *p.x_shape[1:-2], p.g * p.c).permute(*perm)
        dyt = dy.view(p.n, *p.dy_shape[1:-2], p.g * p.k).permute(*perm)
        ksz = [p.z, p.y, p.x][3 - sd :]
        w = torch.empty(p.g * p.k, p.c, *ksz, dtype=x.dtype, device="cuda")
        st, pd, dl = list(p.stride[3 - sd :]), list(p.pad_lo[3 - sd :]), list(p.dilation[3 - sd :])

        def cudnn():
            return torch.ops.aten.convolution_backward(dyt, xt, w, None, st, pd, dl, False, [0] * sd, p.g, [False, True, False])[1]

        t_cudnn = _time(rt, cudnn, a.reps)
        # reference: float64 on the GPU through the same op (cuDNN/native double), for the rel-err column
        ref = torch.ops.aten.convolution_backward(dyt.double(), xt.double(), w.double(), None, st, pd, dl, False, [0] * sd, p.g, [False, True, False])[1]
        ref = ref.permute(0, *range(2, 2 + sd), 1).reshape(p.dw_shape)
        ref_norm = torch.linalg.norm(ref).item()
        best = {"splitk": None, "streamk": None}
        rows = []
        for spec in pick(rt, p, dtype=p.dtype, dw_dtype=p.dw_dtype):
            t = p.tiling(spec.bm, spec.bn, spec.bk)
            if spec.family == "wgrad":
                if spec.variant == "direct":
                    ks_opts = [1]
                else:  # the occupancy-sized degree and a spread around it
                    fill = max(1, rt.occupancy(spec) * rt.sms // t.num_tiles)
                    ks_opts = sorted({min(k, t.iters_per_tile) for k in (fill, 4, 16, 64) if k >= 2})
                cfgs = [dict(ks_count=k) for k in ks_opts]
            else:
                occ = rt.occupancy(spec)
                pools = {default_pool(rt.sms, spec.variant)}
                if spec.variant == "workspace":
                    pools.add(rt.sms)
                pools = {pp for pp in pools if spec.variant not in ("linear", "tree") or pp <= occ * rt.sms}
                cfgs = [dict(pool=pp) for pp in sorted(pools)]
            for cfg in cfgs:
                try:
                    L = Launch(rt, spec, p, x, dy, **cfg)
                except ProblemError as e:  # e.g. a two-stage workspace past the i32 ws_bytes kernarg
                    print(f"skip {name} {spec.label} {cfg}: {e}", flush=True)
                    continue
                L.poison()
                L.run()
                err = (torch.linalg.norm(L.output().double() - ref) / ref_norm).item()
                if not math.isfinite(err):
                    err = float("inf")
                us = _time(rt, L.run, a.reps)
                kind = "splitk" if spec.family == "wgrad" else "streamk"
                if L.geo.partition is not None and L.geo.partition.sk_ctas == 0:
                    kind = "streamk_alldp"  # no SK CTAs: a DP kernel, not counted as stream-K
                row = {"label": spec.label, "cfg": cfg, "us": us, "rel_err": err, "kind": kind}
                rows.append(row)
                del L
                if err > 1e-2:
                    print(f"BAD numerics {name} {spec.label} {cfg} err={err:.2e}", flush=True)
                    continue
                k = kind
                if k not in best:
                    continue
                if best[k] is None or us < best[k]["us"]:
                    best[k] = row
        res = {"name": name, "regime": regime, "gflop": p.flops / 1e9, "cudnn_us": t_cudnn, "best": best, "candidates": rows}
        results.append(res)
        sk, sp = best["streamk"], best["splitk"]
        fmt = lambda r: f"{r['us']:8.1f} {r['label'][:48]:<48} {json.dumps(r['cfg'])}" if r else "   -"  # noqa: E731
        print(f"{name:<28} {regime:<18} cudnn {t_cudnn:8.1f} | splitK {fmt(sp)} | streamK {fmt(sk)}", flush=True)
        Path(a.out).mkdir(parents=True, exist_ok=True)
        Path(a.out, "bench.json").write_text(json.dumps(results, indent=1))
    # summary
    def geo(vals):
        vals = [v for v in vals if v]
        return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else float("nan")

    print("\nname                          regime             cuDNN_us  splitK_us streamK_us  best/cuDNN  SK/bestSplitK")
    for r in results:
        sk, sp = r["best"]["streamk"], r["best"]["splitk"]
        if not (sk or sp):
            print(f"{r['name']:<29} no correct candidate")
            continue
        bestus = min(v["us"] for v in (sk, sp) if v)
        print(f"{r['name']:<29} {r['regime']:<18} {r['cudnn_us']:8.1f} {sp['us'] if sp else float('nan'):10.1f} "
              f"{sk['us'] if sk else float('nan'):10.1f} {r['cudnn_us'] / bestus:10.2f} "
              f"{(sp['us'] / sk['us']) if (sk and sp) else float('nan'):12.2f}")  # fmt: skip
    few = [r for r in results if r["regime"] == "few_tiles_long_k"]
    print(f"few_tiles_long_k geomean: best-of/cuDNN speed = {geo([r['cudnn_us'] / min(v['us'] for v in (r['best']['streamk'], r['best']['splitk']) if v) for r in few]):.3f}x, "
          f"streamK/best-splitK speed = {geo([r['best']['splitk']['us'] / r['best']['streamk']['us'] for r in few if r['best']['streamk'] and r['best']['splitk']]):.3f}x")  # fmt: skip


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", required=True)
    b.add_argument("--jobs", type=int, default=os.cpu_count())
    c = sub.add_parser("check")
    c.add_argument("--kernels", required=True)
    c.add_argument("--out", required=True)
    r = sub.add_parser("bench")
    r.add_argument("--kernels", required=True)
    r.add_argument("--corpus", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--reps", type=int, default=30)
    r.add_argument("--only", default="", help="comma-separated substrings of row names")
    r.add_argument("--fp32-precision", choices=("ieee", "tf32"), default="tf32", help="fp32 rows, for both sides")
    a = ap.parse_args()
    return {"build": cmd_build, "check": cmd_check, "bench": cmd_bench}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main() or 0)
