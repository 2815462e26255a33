"""Where compile time goes, per kernel and per Triton stage (CPU only, no GPU).

    python benchmarks/compile_profile.py --out benchmarks/results/compile_profile.json [--arch gfx942 ...]

For each arch it compiles a few representative kernels (split-K and stream-K at the default
preset's tiles, the Stage-2 reduce) through ``skwgrad.aot.compile.compile_spec``, each with its own
empty Triton cache, and records Triton's own stage timer (``triton.knobs.compilation.listener``):

* ``front_end``: ``make_ir``, Python AST -> TTIR (Triton's code generator);
* ``ttir``: TTIR passes; ``ttgir``: TTIR -> TTGIR and the GPU passes (pipelining, layouts);
* ``llir``: TTGIR -> LLVM IR and LLVM's optimiser;
* ``ptx`` / ``amdgcn``: LLVM's code generator;
* ``cubin``: ptxas (a subprocess); ``hsaco``: ld.lld (in process);
* ``store``: writing the stages to the Triton cache; ``skwgrad``: compile_spec's own work around
  ``triton.compile`` (kernarg layout check against the object, metadata).

The first kernel of the process also pays Triton's one-time set-up (dialect loading, the
backends); it is reported as ``first_in_process`` and each kernel is compiled a second time into
another empty cache, whose times are the steady state a long-lived worker sees. Wall times on a
shared machine: the load average at the start and end is recorded with them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def kernels(arch: str):
    from skwgrad.abi.arch import ARCHES
    from skwgrad.abi.spec import KernelSpec

    st = ARCHES[arch].default_stages
    out = [
        ("splitk direct 128x128x64 v8v8", KernelSpec("wgrad", "direct", "bf16", "bf16", vec_c=8, vec_k=8, bm=128, bn=128, bk=64, num_warps=8, num_stages=st)),
        ("splitk two_stage 64x64x64 v1v1", KernelSpec("wgrad", "two_stage", "bf16", "bf16", vec_c=1, vec_k=1, bm=64, bn=64, bk=64, num_warps=4, num_stages=st)),
        ("splitk atomic 3-D pointwise 128x64x64 v8v8", KernelSpec("wgrad", "atomic", "bf16", "fp32", spatial_dims=3, pointwise=True, vec_c=8, vec_k=8, bm=128, bn=64, bk=64, num_warps=4, num_stages=st)),
        ("streamk dp_sk linear 128x128x64 v8v8", KernelSpec("wgrad_sk", "linear", "bf16", "bf16", vec_c=8, vec_k=8, bm=128, bn=128, bk=64, num_warps=8, num_stages=st, mode="dp_sk")),
        ("streamk persistent workspace 64x128x64 v1v8", KernelSpec("wgrad_sk", "workspace", "bf16", "bf16", vec_c=1, vec_k=8, bm=64, bn=128, bk=64, num_warps=4, num_stages=st, mode="persistent")),
        ("stage2 fp32", KernelSpec("stage2", "reduce", "fp32", "fp32", block=1024, num_warps=4)),
    ]
    # the cost model of benchmarks/COMPILE.md: stream-K mode x reduction x channel vectors at one tile
    for mode in ("dp_sk", "persistent"):
        for red in ("linear", "workspace"):
            for vc in (8, 1):
                out.append((f"model {mode} {red} 64x128x64 v{vc}v8", KernelSpec(
                    "wgrad_sk", red, "bf16", "bf16", vec_c=vc, vec_k=8, bm=64, bn=128, bk=64, num_warps=4, num_stages=st, mode=mode)))
    for variant in ("direct", "two_stage"):
        for vc in (8, 1):
            out.append((f"model splitk {variant} 64x128x64 v{vc}v8", KernelSpec(
                "wgrad", variant, "bf16", "bf16", vec_c=vc, vec_k=8, bm=64, bn=128, bk=64, num_warps=4, num_stages=st)))
    return out


def profile_one(spec, arch):
    import triton
    from triton import knobs

    from skwgrad.aot.compile import compile_spec

    got = {}

    def listener(*, src, metadata, metadata_group, times, cache_hit, **kw):
        got["times"] = times
        got["hit"] = cache_hit

    with tempfile.TemporaryDirectory(prefix="skwgrad-prof-") as d:
        knobs.cache.dir = d
        os.environ["TRITON_CACHE_DIR"] = d
        knobs.compilation.listener = listener
        c0, t0 = os.times(), time.perf_counter()
        ck = compile_spec(spec, arch)
        wall, c1 = time.perf_counter() - t0, os.times()
        knobs.compilation.listener = None
    t = got["times"]
    stages = {"front_end": t.ir_initialization / 1e6}
    for name, us in t.lowering_stages:
        stages[name] = us / 1e6
    stages["store"] = t.store_results / 1e6
    stages["skwgrad"] = max(0.0, wall - t.total / 1e6)
    assert not got["hit"]
    cpu = (c1.user - c0.user) + (c1.system - c0.system) + (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "stages_s": {k: round(v, 4) for k, v in stages.items()}, "bytes": len(ck.binary),
            "triton": triton.__version__}  # fmt: skip


def worker_start_seconds() -> float:
    """A fresh interpreter importing what a compile worker imports (spawn start-up)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import skwgrad.aot.compile, skwgrad.aot.kernels, triton.compiler"], check=True, cwd=ROOT)
    return round(time.perf_counter() - t0, 3)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--arch", action="append", default=None)
    ap.add_argument("--once", action="store_true", help="compile each kernel once (the first pays Triton's set-up)")
    ap.add_argument("--only", default="", help="comma list of substrings of the kernel names to compile (default: all)")
    ap.add_argument("--disable-line-info", action="store_true",
                    help="compile without line info (triton knobs.compilation.disable_line_info), to measure what it costs")
    args = ap.parse_args()
    import warnings

    warnings.filterwarnings("ignore")
    for name in list(os.environ):
        if name.startswith(("TRITON_", "AMDGCN_", "MLIR_", "LLVM_")):
            del os.environ[name]
    arches = args.arch or ["gfx942", "gfx950", "sm_90"]
    if args.disable_line_info:
        from triton import knobs

        knobs.compilation.disable_line_info = True
    only = [o for o in args.only.split(",") if o]
    report = {
        "what": "per-kernel compile time by Triton stage (benchmarks/compile_profile.py)",
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": sys.version.split()[0],
                    "loadavg_start": os.getloadavg()},  # fmt: skip
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip(),
        "worker_start_s": worker_start_seconds(),
        "disable_line_info": bool(args.disable_line_info),
        "arches": {},
    }
    first = True
    for arch in arches:
        rows = []
        for label, spec in kernels(arch):
            if only and not any(o in label for o in only):
                continue
            cold = profile_one(spec, arch)
            warm = cold if args.once and not first else profile_one(spec, arch)  # same process, another empty Triton cache
            if first:
                report["first_in_process"] = {"kernel": f"{label} on {arch}", **cold}
                first = False
            rows.append({"kernel": label, "label": spec.label, **warm})
            print(f"{arch:7s} {label:45s} {warm['wall_s']:6.2f} s wall {warm['cpu_s']:6.2f} s cpu  " + "  ".join(f"{k} {v:.2f}" for k, v in warm["stages_s"].items()), flush=True)
        tot = {}
        for r in rows:
            for k, v in r["stages_s"].items():
                tot[k] = tot.get(k, 0.0) + v
        wall = sum(r["wall_s"] for r in rows)
        report["arches"][arch] = {"kernels": rows, "wall_s": round(wall, 3), "cpu_s": round(sum(r["cpu_s"] for r in rows), 3),
                                  "share": {k: round(v / wall, 3) for k, v in tot.items()}}  # fmt: skip
    report["machine"]["loadavg_end"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
