"""Depthwise and small-group wgrad (``dwconv`` and ``grouped`` families) on an NVIDIA GPU: numerics
vs float64, device time of each candidate config, cuDNN's own weight gradient in the same run, and
% of the memory roofline.

Two steps, so the GPU machine never compiles:
  here (CPU):  python benchmarks/gpu_depthwise.py build --out .device/dwkernels   (--set window)
  GPU machine: python benchmarks/gpu_depthwise.py run --kernels .device/dwkernels --out dw.json
or from a skwgrad cache (``--cache`` or SKWGRAD_CACHE; what ``skwgrad compile-all --problem ...``
built for the rows, e.g. the strided rows: ``python benchmarks/gpu_depthwise.py problems --only _s2_,dil2``
prints the ``--problem`` flags; ``build --set strided-tune --cache C`` adds other stride-2 window
configurations and the dilation-2 one), where ``auto`` is then also the launcher's own pick
(``skwgrad.launcher.select.choose`` on that cache; ``auto_source`` in the JSON says which):
  GPU machine: python benchmarks/gpu_depthwise.py run --cache C --only _s2_,dil2 --out dws2.json

Stride-2 rows (``--only _s2_``): the stride-2 window kernels (mode ``win<BW>[r<TR>]s2``) against the
gather kernels (``best_gather``: the dwconv kernels without a window) and cuDNN, whose own dW is
checked against the float64 reference too (``torch_rel_err``).

``--set window`` (the default) times the window kernels (mode ``win<BW>[r<TR>]``) against the
current default's taps-layout kernels and cuDNN: per row ``best_window``, ``best_current`` and
the auto pick of the proposed rule (``window_auto``, else ``auto_choice``). ``--set tune`` is the
2026-12-01 sweep (1364 candidates).

The objects are launched the way benchmarks/gpu_kernels.py launches them (its ``Runtime`` and
``Launch``: cuda-bindings ``cuLaunchKernel`` with the ABI ``Packer``'s kernargs; grid and workspace
from ``skwgrad.abi.launch.launch_geometry``), never through Triton's runtime. dW and the workspace
are poisoned (NaN) before the numerics launch of every candidate. The float64 reference is
computed on the GPU tap by tap (exact for depthwise) and checked first against
``skwgrad.reference.wgrad_reference`` and torch's float64 weight gradient on a small shape.

Times are medians of ``--reps`` launches bracketed by CUDA events (after warm-up, with the host
queue filled behind a sleep kernel, see ``gpu_kernels._time``); a two-stage time includes its
Stage-2 reduce, an atomic time the memset of dW. cuDNN: ``aten.convolution_backward`` (weight
only) on channels-last tensors, with ``cudnn.benchmark`` off and on. Roofline: bytes of x + dy
(input dtype) + dW (dW dtype) over 4.3 TB/s; the H200's 50 MB L2 keeps part of the inputs of the
smaller rows across repeated launches, for both sides alike, so % can pass 100.

``auto`` in the table is the rule proposed for ``skwgrad.launcher.select`` (``auto_choice`` for
depthwise, ``auto_grouped`` for few channels per group).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from skwgrad.abi.conv import DTYPE_BYTES, parse_problem  # noqa: E402
from skwgrad.abi.launch import STAGE2_BLOCK, dwconv_ks_count, dwconv_tiling  # noqa: E402
from skwgrad.abi.spec import KernelSpec  # noqa: E402
from skwgrad.errors import AbiError, ProblemError  # noqa: E402

HBM_BYTES_PER_S = 4.3e12
WIDEST = {"fp16": 8, "bf16": 8, "fp32": 4}
CTAS_PER_CU_OPTIONS = (2, 4, 8, 16)  # split-K degrees tried per spec (dwconv_ks_count's knob)

# (name, problem). MobileNetV2 / EfficientNet / ConvNeXt layers and the feature rows of the issue.
SHAPES = [
    ("mnv2_dw3x3_144ch_56", "n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,padding=1"),
    ("convnext_dw7x7_384ch_14", "n=32,c=384,k=384,g=384,h=14,w=14,y=7,x=7,padding=3"),
    ("convnext_dw7x7_96ch_56", "n=32,c=96,k=96,g=96,h=56,w=56,y=7,x=7,padding=3"),
    ("mnv2_dw3x3_32ch_112", "n=32,c=32,k=32,g=32,h=112,w=112,y=3,x=3,padding=1"),
    ("mnv2_dw3x3_s2_96ch_112", "n=32,c=96,k=96,g=96,h=112,w=112,y=3,x=3,stride=2,padding=1"),
    ("mnv2_dw3x3_960ch_7", "n=32,c=960,k=960,g=960,h=7,w=7,y=3,x=3,padding=1"),
    ("effnet_dw5x5_240ch_28_fp16", "n=32,c=240,k=240,g=240,h=28,w=28,y=5,x=5,padding=2,dtype=fp16"),
    ("effnet_dw5x5_s2_144ch_56_fp16", "n=32,c=144,k=144,g=144,h=56,w=56,y=5,x=5,stride=2,padding=2,dtype=fp16"),
    ("dw3x3_dil2_256ch_32", "n=16,c=256,k=256,g=256,h=32,w=32,y=3,x=3,padding=2,dilation=2"),
    ("dw3x3x3_3d_64ch_16x28", "n=4,c=64,k=64,g=64,d=16,h=28,w=28,z=3,y=3,x=3,padding=1"),
    ("dw3x3_144ch_28_fp32", "n=32,c=144,k=144,g=144,h=28,w=28,y=3,x=3,padding=1,dtype=fp32"),
    ("dw3x3_144ch_56_dwfp32", "n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,padding=1,dw_dtype=fp32"),
    ("dw3x3_partial_200ch_28", "n=32,c=200,k=200,g=200,h=28,w=28,y=3,x=3,padding=1"),  # 200 = 3*64 + 8
    ("dw3x3_vec4_100ch_28", "n=32,c=100,k=100,g=100,h=28,w=28,y=3,x=3,padding=1"),  # G % 8 != 0
    ("dw3x3_vec1_75ch_28", "n=32,c=75,k=75,g=75,h=28,w=28,y=3,x=3,padding=1"),  # odd G: scalar loads
    # grouped (``grouped`` family: GB groups per MMA tile, block-diagonal)
    ("resnext_g32_256ch_28", "n=32,c=256,k=256,g=32,h=28,w=28,y=3,x=3,padding=1"),  # 8 per group
    ("resnext_g32_512ch_14", "n=32,c=512,k=512,g=32,h=14,w=14,y=3,x=3,padding=1"),  # 16 per group
    ("grouped_g64_256ch_28", "n=32,c=256,k=256,g=64,h=28,w=28,y=3,x=3,padding=1"),  # 4 per group
    ("grouped_g8_128ch_28", "n=32,c=128,k=128,g=8,h=28,w=28,y=3,x=3,padding=1"),  # 16 per group
    ("grouped_g4_64ch_56", "n=32,c=64,k=64,g=4,h=56,w=56,y=3,x=3,padding=1"),  # 16 per group
    ("grouped_g2_32ch_56", "n=32,c=32,k=32,g=2,h=56,w=56,y=3,x=3,padding=1"),  # 16 per group
    ("resnext_g32_256ch_28_fp16_s2", "n=32,c=256,k=256,g=32,h=56,w=56,y=3,x=3,stride=2,padding=1,dtype=fp16"),
    # stride-2 depthwise (the stride-2 window kernels): MobileNetV2 / EfficientNet-B0 downsampling
    # layers, the corpus rows (dW fp32), and shapes in no file of this project (other channel
    # counts, resolutions, odd widths, fp32, a 7x7 at stride 2)
    ("mnv2_dw3x3_s2_144ch_56", "n=32,c=144,k=144,g=144,h=56,w=56,y=3,x=3,stride=2,padding=1"),
    ("mnv2_dw3x3_s2_192ch_28", "n=32,c=192,k=192,g=192,h=28,w=28,y=3,x=3,stride=2,padding=1"),
    ("dw_3x3_s2_240_n32_dwfp32", "n=32,c=240,k=240,g=240,h=56,w=56,y=3,x=3,stride=2,padding=1,dw_dtype=fp32"),
    ("effnet_b0_dw5x5_s2_240_dwfp32", "n=32,c=240,k=240,g=240,h=28,w=28,y=5,x=5,stride=2,padding=2,dw_dtype=fp32"),
    ("effnet_dw5x5_s2_672ch_14", "n=32,c=672,k=672,g=672,h=14,w=14,y=5,x=5,stride=2,padding=2"),
    ("new_dw3x3_s2_576ch_15_n64_odd", "n=64,c=576,k=576,g=576,h=15,w=15,y=3,x=3,stride=2,padding=1"),
    ("new_dw7x7_s2_128ch_64_fp16", "n=16,c=128,k=128,g=128,h=64,w=64,y=7,x=7,stride=2,padding=3,dtype=fp16"),
    ("new_dw3x3_s2_120ch_57_fp32", "n=32,c=120,k=120,g=120,h=57,w=57,y=3,x=3,stride=2,padding=1,dtype=fp32"),
    ("new_dw5x5_s2_p0_336ch_33", "n=32,c=336,k=336,g=336,h=33,w=33,y=5,x=5,stride=2,padding=0"),
]
# depthwise through the MMA: GB channels per packed tile, block-diagonal (GB * 1 = BM)
DW_GROUPED_TUNE = [(16, (16, 64, 64, 4, 3)), (16, (16, 128, 64, 4, 3)), (16, (16, 64, 128, 4, 3)), (32, (32, 64, 64, 4, 3)),
                   (8, (16, 64, 64, 4, 3))]
GROUPED_TUNE = [  # (GB, (BM, BN, BK, warps, stages))
    (gb, t) for gb in (2, 4, 8, 16)
    for t in ((32, 64, 64, 4, 3), (64, 64, 64, 4, 3), (64, 128, 64, 4, 3), (32, 128, 64, 4, 3))
]


# ---------------------------------------------------------------------------------------------
# build (CPU)
# ---------------------------------------------------------------------------------------------
def _spec(variant, dtype, dw, taps, cfg, *, vec, dims=2, mode=""):
    bc, br, warps = cfg
    return KernelSpec("dwconv", variant, dtype, dw, spatial_dims=dims, vec_c=vec, vec_k=vec, bm=bc, bn=taps, bk=br,
                      num_warps=warps, num_stages=1, mode=mode, precision="ieee" if dtype == "fp32" else "")  # fmt: skip


# mode "taps" (every tap of a row inside one thread): (dtype, taps, (BC, BR, warps), vec)
TAPS_INNER_TUNE = [
    ("bf16", 16, (16, 32, 4), 8), ("bf16", 16, (32, 16, 4), 4), ("bf16", 32, (16, 16, 4), 8), ("bf16", 64, (16, 8, 4), 8),
    ("fp16", 16, (16, 32, 4), 8), ("fp16", 32, (16, 16, 4), 8), ("fp32", 16, (32, 16, 4), 4),
]


TUNE = {  # taps class -> extra (BC, BR, warps) beside the default sweep's DWCONV_CONFIGS
    16: [(64, 8, 4), (32, 8, 4), (32, 4, 4), (128, 4, 4), (64, 8, 8), (128, 8, 8), (64, 2, 4), (32, 2, 2), (64, 4, 2), (64, 8, 2)],
    32: [(32, 4, 4), (64, 2, 4), (64, 4, 8), (128, 4, 8), (32, 2, 2)],
    64: [(64, 4, 8), (32, 4, 4), (32, 2, 4), (128, 2, 8), (64, 1, 4), (32, 1, 2)],
}


def window_build_specs() -> list[KernelSpec]:
    """``--set window`` (the default): the window kernels (``sweep.DWCONV_WINDOW``, mode
    ``win<BW>[r<TR>]``) at every epilogue, beside the current default's kernels (the
    ``sweep.DWCONV_DEFAULT`` taps-layout configurations and what ``auto`` picks from the default
    sweep), the default's grouped picks and the Stage-2 reduces: new vs current vs cuDNN."""
    from skwgrad.aot.sweep import DWCONV_DEFAULT, dwconv_window_specs

    out = set()
    for dt in ("bf16", "fp16", "fp32"):
        for dw in ((dt, "fp32") if dt != "fp32" else ("fp32",)):
            variants = ("direct", "two_stage") + (("workspace",) if dw == dt != "fp32" else ("atomic",))
            for dims in (2, 3):
                out.update(dwconv_window_specs("sm_90", dt, dw, variants, dims=dims, strided=True, dilated=True))
        for taps, (bc, br, warps, mode) in DWCONV_DEFAULT.items():  # the current default, measured
            split = "atomic" if dt == "fp32" else "workspace"
            out.add(_spec(split, dt, "fp32" if dt == "fp32" else dt, taps, (bc, br, warps), vec=WIDEST[dt], mode=mode))
    return _with_default_picks(out, keep=lambda s: (s.family == "dwconv" and s.mode == "taps") or s.family == "grouped")


def _with_default_picks(out: set, keep=lambda s: False) -> list:
    """``out`` plus the default preset's kernels ``keep`` selects, what the proposed ``auto`` picks
    from the default for each row (deterministic too, for depthwise), and the Stage-2 reduces."""
    from skwgrad.aot.sweep import dwconv_specs, grouped_specs

    default = set()
    for dt in ("bf16", "fp16", "fp32"):
        default.update(dwconv_specs("default", "sm_90", dt))
        default.update(grouped_specs("default", "sm_90", dt))
    out.update(s for s in default if keep(s))
    for _, text in SHAPES:
        p = parse_problem(text)
        if (p.c, p.k) == (1, 1):
            picks = [auto_choice(p, default, 132), auto_choice(p, default, 132, deterministic=True)]
        else:
            picks = [auto_grouped(p, default, 132)]
        out.update(pick[0] for pick in picks if pick)
    for dt in ("bf16", "fp16", "fp32"):
        out.add(KernelSpec("stage2", "reduce", dt, dt, block=STAGE2_BLOCK, num_warps=4))
    return sorted(out)


def build_specs() -> list[KernelSpec]:
    """``--set tune``: the tuning candidates below, plus what the proposed ``auto`` picks for each
    row out of the default sweep (so the auto rows time the very kernels a default cache would hold)."""

    out = set()
    for dt in ("bf16", "fp16", "fp32"):
        W = WIDEST[dt]
        for taps, cfgs in TUNE.items():
            if dt != "bf16":
                cfgs = cfgs[:3]
            for cfg in cfgs:
                out.add(_spec("two_stage", dt, dt, taps, cfg, vec=W))
                out.add(_spec("atomic", dt, "fp32", taps, cfg, vec=W))
                if dt != "fp32":
                    out.add(_spec("workspace", dt, dt, taps, cfg, vec=W))
                if dt == "bf16" and taps == 32:
                    out.add(_spec("two_stage", dt, dt, taps, cfg, vec=W, dims=3))
                    out.add(_spec("workspace", dt, dt, taps, cfg, vec=W, dims=3))
        if dt == "bf16":  # the intermediate width for G % 8 == 4
            for cfg in TUNE[16][:3]:
                out.add(_spec("two_stage", dt, dt, 16, cfg, vec=4))
                out.add(_spec("workspace", dt, dt, 16, cfg, vec=4))
    for dt, taps, cfg, vec in TAPS_INNER_TUNE:
        if dt == "fp32":
            out.add(_spec("atomic", dt, "fp32", taps, cfg, vec=vec, mode="taps"))
        else:
            out.add(_spec("workspace", dt, dt, taps, cfg, vec=vec, mode="taps"))
            out.add(_spec("atomic", dt, "fp32", taps, cfg, vec=vec, mode="taps"))
    for dt in ("bf16", "fp16"):
        tune = GROUPED_TUNE if dt == "bf16" else [x for x in GROUPED_TUNE if x[0] in (4, 8) and x[1][1] == 64]
        for gb, (bm, bn, bk, w, st) in tune:
            out.add(KernelSpec("grouped", "two_stage", dt, dt, vec_c=8, vec_k=8, bm=bm, bn=bn, bk=bk, block=gb, num_warps=w, num_stages=st))
    for dt, dw, dims, variant in [("bf16", "bf16", 2, "two_stage"), ("fp16", "fp16", 2, "two_stage"),
                                  ("bf16", "fp32", 2, "atomic"), ("bf16", "bf16", 3, "two_stage")]:  # fmt: skip
        tune = DW_GROUPED_TUNE if (dt, dw, dims) == ("bf16", "bf16", 2) else DW_GROUPED_TUNE[:1] + DW_GROUPED_TUNE[3:4]
        for gb, (bm, bn, bk, w, st) in tune:
            out.add(KernelSpec("grouped", variant, dt, dw, spatial_dims=dims, vec_c=8, vec_k=8, bm=bm, bn=bn, bk=bk, block=gb,
                               num_warps=w, num_stages=st))  # fmt: skip
    return _with_default_picks(out)


# --set strided-tune: other strip widths / tap rows / strips per step of the stride-2 window
# kernels than the default's (sweep.DWCONV_WINDOW_STRIDED), for the strided rows' dtypes, and the
# dilation-2 window kernel, one split epilogue each: (dtype, dW dtype, variant, X, mode, BP). Built into a skwgrad cache (``--cache``)
# beside what compile-all put there; the launcher pick of ``run --cache`` ignores them.
STRIDED_TUNE = [
    ("bf16", "bf16", "workspace", 3, "win4r3s2", 64), ("bf16", "bf16", "workspace", 3, "win5r3s2", 64),
    ("bf16", "bf16", "workspace", 3, "win7r3s2", 32), ("bf16", "bf16", "workspace", 3, "win7s2", 64),
    ("bf16", "bf16", "workspace", 5, "win4s2", 64), ("bf16", "bf16", "workspace", 5, "win7s2", 32),
    ("fp16", "fp16", "workspace", 5, "win4s2", 64), ("fp16", "fp16", "workspace", 7, "win4s2", 64),
    ("fp16", "fp16", "workspace", 7, "win5s2", 64),
    ("bf16", "bf16", "workspace", 3, "win7r3d2", 64),  # dilation 2 (broad/full only): the dw3x3_dil2 row
    # every tap row of a 5x5 in one CTA, as the stride-1 default after run D4, and fewer strips per step
    ("bf16", "bf16", "workspace", 5, "win7r5s2", 16), ("bf16", "bf16", "workspace", 5, "win7r5s2", 32),
    ("bf16", "fp32", "atomic", 5, "win7r5s2", 16), ("bf16", "fp32", "atomic", 5, "win7r5s2", 32),
    ("fp16", "fp16", "workspace", 5, "win7r5s2", 16), ("fp16", "fp16", "workspace", 5, "win7r5s2", 32),
    ("bf16", "bf16", "workspace", 3, "win7r3s2", 16), ("bf16", "fp32", "atomic", 3, "win7r3s2", 16),
]


def strided_tune_specs() -> list[KernelSpec]:
    return [_spec(v, dt, dw, x, (16, bp, 4), vec=WIDEST[dt], mode=mode) for dt, dw, v, x, mode, bp in STRIDED_TUNE]


# --set s1-tune: stride-1 window configurations beside the default's (sweep.DWCONV_WINDOW: 3x3
# win7r3 / 5x5 and 7x7 win7, 64 strips per step): fewer or more strips per step, narrower strips,
# and every tap row in one CTA (dy read once for all rows, not once per tap-row CTA), for bf16 with
# the workspace (bf16 dW) and atomic (fp32 dW) epilogues. (X, mode, BP).
S1_TUNE = [
    (3, "win7r3", 32), (3, "win7r3", 16), (3, "win5r3", 64), (3, "win4r3", 64),
    (5, "win7", 32), (5, "win7", 16), (5, "win7r5", 16), (5, "win5", 64),
    (7, "win7", 32), (7, "win7", 16), (7, "win7r7", 16), (7, "win7r7", 8), (7, "win4", 64), (7, "win5", 64),
]


def s1_tune_specs() -> list[KernelSpec]:
    return [_spec(v, "bf16", dw, x, (16, bp, 4), vec=WIDEST["bf16"], mode=mode)
            for x, mode, bp in S1_TUNE for dw, v in (("bf16", "workspace"), ("fp32", "atomic"))]  # fmt: skip


def default_keys(arch: str = "sm_90") -> set:
    """Cache keys of the default preset's dwconv / grouped kernels (what ``auto`` may serve)."""
    from skwgrad.aot.sweep import dwconv_specs, grouped_specs
    from skwgrad.cache.store import Cache

    return {Cache.key_for(s, arch) for dt in ("bf16", "fp16", "fp32") for s in dwconv_specs("default", arch, dt) + grouped_specs("default", arch, dt)}


def _put_one(args):
    spec, cache_dir = args
    import warnings

    warnings.filterwarnings("ignore")
    from skwgrad.aot.compile import compile_spec
    from skwgrad.cache.store import Cache

    try:
        ck = compile_spec(spec, "sm_90")
        with Cache(cache_dir, create=False) as c:
            c.put(ck)
    except Exception as e:  # record and go on
        return spec.label, f"FAILED {type(e).__name__}: {str(e)[:300]}"
    return spec.label, f"{ck.metadata['compile_seconds']}s"


def cmd_build(a):
    from gpu_kernels import _compile_one

    if a.set in ("strided-tune", "s1-tune"):
        if not a.cache:
            raise SystemExit(f"--set {a.set} builds into a skwgrad cache: give --cache DIR (made by compile-all)")
        specs = strided_tune_specs() if a.set == "strided-tune" else s1_tune_specs()
        if a.count:
            print(f"{len(specs)} specs")
            return 0
        t0 = time.time()
        with ProcessPoolExecutor(a.jobs) as ex:
            res = list(ex.map(_put_one, [(s, a.cache) for s in specs]))
        failed = [r for r in res if r[1].startswith("FAILED")]
        for label, status in failed:
            print(label, status)
        print(f"{len(specs)} specs into {a.cache} in {time.time() - t0:.0f}s, {len(failed)} failed")
        return 1 if failed else 0
    if not a.out:
        raise SystemExit("give --out DIR")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    specs = window_build_specs() if a.set == "window" else build_specs()
    if a.count:
        print(f"{len(specs)} specs")
        return 0
    t0 = time.time()
    failed = 0
    with ProcessPoolExecutor(a.jobs) as ex:
        for label, status in ex.map(_compile_one, [(s, str(out)) for s in specs]):
            if status.startswith("FAILED"):
                failed += 1
                print(label, status)
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"{len(specs)} specs in {time.time() - t0:.0f}s, {size / 1e6:.1f} MB, {failed} failed")
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------
# run (GPU)
# ---------------------------------------------------------------------------------------------
def dw_reference(torch, p, x, dy):
    """float64 dW (``G K Z Y X C``) on the GPU: per tap, one strided window of padded x and a
    contraction over the rows (exact; depthwise is the case C = K = 1)."""
    xd = x.double().view(p.n, p.di, p.hi, p.wi, p.g, p.c)
    dyd = dy.double().view(p.n, p.do, p.ho, p.wo, p.g, p.k)
    (pld, plh, plw), (phd, phh, phw) = p.pad_lo, p.pad_hi
    xp = torch.nn.functional.pad(xd, (0, 0, 0, 0, plw, phw, plh, phh, pld, phd))
    (sd, sh, sw), (dd, dh, dl) = p.stride, p.dilation
    out = torch.empty(p.g, p.k, p.z, p.y, p.x, p.c, dtype=torch.float64, device=x.device)
    for kz, ky, kx in itertools.product(range(p.z), range(p.y), range(p.x)):
        d0, h0, w0 = kz * dd, ky * dh, kx * dl
        win = xp[:, d0 : d0 + (p.do - 1) * sd + 1 : sd, h0 : h0 + (p.ho - 1) * sh + 1 : sh, w0 : w0 + (p.wo - 1) * sw + 1 : sw]
        if p.c == p.k == 1:
            out[:, 0, kz, ky, kx, 0] = (win[..., 0] * dyd[..., 0]).sum(dim=(0, 1, 2, 3))
        else:
            out[:, :, kz, ky, kx, :] = torch.einsum("ndhwgk,ndhwgc->gkc", dyd, win)
    return out.reshape(p.dw_shape)


def torch_wgrad(torch, p, x, dy):
    """A closure running torch's weight gradient on channels-last views of x and dy."""
    sd = p.spatial_dims
    perm = (0, sd + 1, *range(1, sd + 1))
    xt = x.view(p.n, *p.x_shape[1:-2], p.g * p.c).permute(*perm)
    dyt = dy.view(p.n, *p.dy_shape[1:-2], p.g * p.k).permute(*perm)
    ksz = [p.z, p.y, p.x][3 - sd :]
    w = torch.empty(p.g * p.k, p.c, *ksz, dtype=x.dtype, device="cuda")
    st, pd, dl = list(p.stride[3 - sd :]), list(p.pad_lo[3 - sd :]), list(p.dilation[3 - sd :])
    if p.pad_lo != p.pad_hi:
        raise ValueError("torch rows need symmetric padding")

    def run():
        return torch.ops.aten.convolution_backward(dyt, xt, w, None, st, pd, dl, False, [0] * sd, p.g, [False, True, False])[1]

    return run


def roofline_us(p) -> float:
    nbytes = (p.x_numel + p.dy_numel) * DTYPE_BYTES[p.dtype] + p.dw_numel * DTYPE_BYTES[p.dw_dtype]
    return nbytes / HBM_BYTES_PER_S * 1e6


def widest_vec(g: int, dtype: str) -> int:
    w = WIDEST[dtype]
    while g % w:
        w //= 2
    return w


def taps_class(taps: int, classes) -> int | None:
    fit = [c for c in classes if c >= taps]
    return min(fit) if fit else None


def auto_choice(p, specs, sms, deterministic=False):
    """The rule proposed for ``select`` (``auto`` on a depthwise problem, C = K = 1 per group):
    family dwconv; the smallest taps class >= Z*Y*X; the default sweep's (BC, BR, warps) for that
    class (``sweep.DWCONV_CONFIGS``); dims and dtypes of the problem; the widest cached channel
    vector dividing G; ks_count = ``dwconv_ks_count(problem, bc, br, sms)``; variant ``direct``
    when ks_count == 1, else ``workspace`` (dW in the input dtype) or ``atomic`` (fp32 dW), and
    ``two_stage`` where the caller asks for a deterministic result (its Stage-2 loops over
    ks_count replicas, one dependent load each: slow when ks_count is in the hundreds)."""
    from skwgrad.aot.sweep import DWCONV_CONFIGS  # plain Python: no Triton on the GPU side

    cls = taps_class(p.z * p.y * p.x, sorted(DWCONV_CONFIGS))
    if cls is None:
        return None
    bc, br, warps = DWCONV_CONFIGS[cls]
    ks = dwconv_ks_count(p, bc=bc, br=br, compute_units=sms)
    variant = "direct" if ks == 1 else (deterministic and "two_stage") or ("atomic" if p.dw_dtype == "fp32" else "workspace")
    for vec in (8, 4, 2, 1):
        want = _spec(variant, p.dtype, p.dw_dtype, cls, (bc, br, warps), vec=vec, dims=p.spatial_dims) if vec <= WIDEST[p.dtype] else None
        if want in specs and p.g % vec == 0:
            return want, ks
    return None


def window_auto(p, specs, sms, deterministic=False):
    """The rule proposed for ``select`` with window kernels cached: a window kernel that admits
    the problem (X == bn, its stride and dilation along W, G % vec == 0; the widest vector) before
    any gather kernel; ks_count = ``dwconv_ks_count(..., mode=spec.mode)``; ``direct`` at one
    split, else workspace (dW in the input dtype) / atomic (fp32 dW), two_stage if deterministic."""
    fits = []
    for s in specs:
        if s.family != "dwconv" or not s.dwconv_window[0]:
            continue
        try:
            s.check_problem(p)
        except Exception:  # noqa: BLE001
            continue
        fits.append(s)
    if not fits:
        return None
    vmax = max(s.vec_c for s in fits)
    lead = sorted(s for s in fits if s.vec_c == vmax)[0]
    ks = dwconv_ks_count(p, bc=lead.bm, br=lead.bk, compute_units=sms, mode=lead.mode)
    variant = "direct" if ks == 1 else (deterministic and "two_stage") or ("atomic" if p.dw_dtype == "fp32" else "workspace")
    for s in fits:
        if s.vec_c == vmax and s.variant == variant and (s.bm, s.bn, s.bk, s.mode) == (lead.bm, lead.bn, lead.bk, lead.mode):
            return s, ks
    return None


def auto_grouped(p, specs, sms):
    """The rule proposed for ``select`` on a grouped problem with few channels per group: among
    ``sweep.GROUPED_CONFIGS`` the (GB, BM) with G % GB == 0 and GB*K <= BM that fills BM best
    (ties: the smaller GB, less MMA work off the diagonal); none (K > 16): the dense kernels.
    ks_count = ``grouped_ks_count`` (2 CTAs per SM over the packed tiles); ``direct`` at 1, else
    ``two_stage``."""
    from skwgrad.abi.launch import grouped_ks_count
    from skwgrad.aot.sweep import GROUPED_CONFIGS

    fits = [(gb * p.k / bm, -gb, gb, bm) for gb, bm in GROUPED_CONFIGS if p.g % gb == 0 and gb * p.k <= bm]
    if not fits:
        return None
    _, _, gb, bm = max(fits)
    ks = grouped_ks_count(p, gb=gb, bm=bm, bn=64, bk=64, compute_units=sms)
    variant = "direct" if ks == 1 else "two_stage"
    for vec in (8, 4, 2, 1):
        if vec > WIDEST[p.dtype]:
            continue
        want = KernelSpec("grouped", variant, p.dtype, p.dw_dtype, spatial_dims=p.spatial_dims, vec_c=vec, vec_k=vec,
                          bm=bm, bn=64, bk=64, block=gb, num_warps=4, num_stages=3, precision=p.precision)  # fmt: skip
        if want in specs:
            try:
                want.check_problem(p)
            except Exception:  # noqa: BLE001
                continue
            return want, ks
    return None


def candidates(p, specs, sms):
    """(spec, ks_count) pairs to time for problem p, and the auto choice."""
    from skwgrad.abi.launch import grouped_ks_count

    adm = []
    for s in specs:
        if s.family not in ("dwconv", "grouped") or s.variant == "direct":
            continue  # direct (ks_count = 1) is reached through `auto` where the rule says so
        try:
            s.check_problem(p)
        except Exception:  # noqa: BLE001
            continue
        adm.append(s)
    jobs = []
    if p.is_depthwise or (p.c, p.k) == (1, 1):
        adm = [s for s in adm if s.family == "dwconv"]
        win = [s for s in adm if s.dwconv_window[0]]
        adm = [s for s in adm if not s.dwconv_window[0]]
        if adm:
            vmax = max(s.vec_c for s in adm)
            tmin = min(s.bn for s in adm)
            adm = [s for s in adm if (s.vec_c == vmax or s.mode == "taps") and s.bn == tmin]
        for s in adm + win:
            ks_set = {dwconv_ks_count(p, bc=s.bm, br=s.bk, compute_units=sms, ctas_per_cu=c, mode=s.mode) for c in CTAS_PER_CU_OPTIONS}
            if s.dwconv_window.bw:  # also one step per split (past the rule's DWCONV_WIN_MIN_STEPS): small strided layers
                steps = dwconv_tiling(p, s.bm, s.bn, s.bk, s.mode).iters_per_tile
                ks_set.add(min(steps, max(1, math.ceil(4 * sms / dwconv_tiling(p, s.bm, s.bn, s.bk, s.mode).num_tiles))))
            for k in sorted(ks_set):
                jobs.append((s, k))
        auto = window_auto(p, specs, sms) or auto_choice(p, specs, sms)
        det = auto_choice(p, specs, sms, deterministic=True)
        if det and auto and det != auto:
            jobs.append(det)
        # the packed-group MMA kernel on depthwise (GB channels block-diagonal per tile)
        for s in specs:
            if s.family != "grouped" or s.variant == "direct" or s.block > s.bm:
                continue
            try:
                s.check_problem(p)
            except Exception:  # noqa: BLE001
                continue
            for c in (1, 2, 4):
                jobs.append((s, grouped_ks_count(p, gb=s.block, bm=s.bm, bn=s.bn, bk=s.bk, compute_units=sms, ctas_per_cu=c)))
    else:
        adm = [s for s in adm if s.family == "grouped" and s.block * p.k <= 2 * s.bm]
        for s in adm:
            for c in (1, 2, 4):
                jobs.append((s, grouped_ks_count(p, gb=s.block, bm=s.bm, bn=s.bn, bk=s.bk, compute_units=sms, ctas_per_cu=c)))
        auto = auto_grouped(p, specs, sms)
    return sorted(set(jobs)), auto


def _selected(only: str):
    only = [o for o in only.split(",") if o]
    return [(n, t) for n, t in SHAPES if not only or any(o in n for o in only)]


def cmd_problems(a):
    """The ``--problem`` flags of the selected rows (for ``skwgrad compile-all``)."""
    print(" ".join(f"--problem '{t}'" for _, t in _selected(a.only)))
    return 0


def cache_runtime(path: str, allow_stale: bool = False):
    """A ``gpu_kernels.Runtime`` holding the sm_90 dwconv / grouped / Stage-2 objects of a skwgrad
    cache (each read through ``Cache.load_binary``: sha256-checked and bound to its row), and the
    open cache (for the launcher's own pick). Entries of other kernel sources are refused unless
    ``allow_stale`` (then the launcher's pick is skipped: it never serves them)."""
    import tempfile

    from gpu_kernels import Runtime
    from skwgrad.cache.store import Cache

    cache = Cache(path, create=False)
    tmp = Path(tempfile.mkdtemp(prefix="dwcache-"))
    rt = Runtime(tmp)  # empty: filled from the cache below
    entries = [e for e in cache.entries("sm_90", all_versions=allow_stale) if e.spec and e.spec.family in ("dwconv", "grouped", "stage2")]
    if not entries:
        stale = cache.other_versions("sm_90")
        raise SystemExit(f"no current sm_90 dwconv/grouped kernels in {path}" + (f" ({stale} of other kernel sources: --allow-stale)" if stale else ""))
    for e in entries:
        f = tmp / f"{e.key}.cubin"
        f.write_bytes(cache.load_binary(e, allow_stale=allow_stale))
        rt.kernels[e.spec] = dict(e.metadata) | {"_cubin": f}
    return rt, cache


def launcher_auto(p, cache, sms, exclude=frozenset()):
    """What ``skwgrad.launcher.select.choose`` picks for p on this cache (auto options), as (spec,
    ks_count); ``exclude``: keys of entries it must not serve (tuning kernels outside the default)."""
    from skwgrad.launcher.select import choose

    try:
        c = choose(p, cache, arch="sm_90", cus=sms, exclude=frozenset(exclude))
    except Exception as e:  # noqa: BLE001  (no kernel: recorded, the row goes on)
        print(f"    launcher auto: {type(e).__name__}: {str(e)[:200]}", flush=True)
        return None
    return (c.spec, c.ks_count) if c.spec.family in ("dwconv", "grouped") else None


def torch_output(torch, p, out):
    """torch's dW (``G*K, C, [Z,] Y, X``) in skwgrad's ``G K Z Y X C`` layout."""
    w = out.reshape(p.g, p.k, p.c, p.z, p.y, p.x)
    return w.permute(0, 1, 3, 4, 5, 2).reshape(p.dw_shape)


def cmd_run(a):
    import torch

    from gpu_kernels import Launch, Runtime, _time, make_inputs
    from skwgrad.reference import relative_error, tolerance, wgrad_reference

    t_start = time.time()
    cache, tuning = None, set()
    if a.kernels:
        rt = Runtime(a.kernels)
    else:
        if not a.cache:
            raise SystemExit("give --kernels DIR (from `build`) or --cache DIR (or SKWGRAD_CACHE)")
        rt, cache = cache_runtime(a.cache, a.allow_stale)
        if a.allow_stale:
            cache = None
        else:  # the launcher pick serves only the default preset's dwconv / grouped kernels
            keep = default_keys()
            tuning = {e.key for e in cache.entries("sm_90") if e.spec and e.spec.family in ("dwconv", "grouped") and e.key not in keep}
            print(f"{len(tuning)} cached dwconv/grouped kernels outside the default preset: timed, never the launcher pick", flush=True)
    sms = rt.sms
    specs = [s for s in rt.kernels if s.family in ("dwconv", "grouped")]
    dev = torch.cuda.get_device_name(0)
    print(f"{dev}: {sms} SMs, {len(specs)} dwconv/grouped kernels", flush=True)

    # -- the reference itself, on a small asymmetric, strided, dilated shape --------------------
    for text in ["n=2,c=6,k=6,g=6,h=9,w=8,y=3,x=2,stride=2,pad_lo=1x0,pad_hi=0x1,dilation=2x1,dtype=fp32",
                 "n=2,c=4,k=4,g=4,d=4,h=5,w=5,z=3,y=3,x=3,padding=1,dtype=fp32",
                 "n=2,c=12,k=24,g=4,h=7,w=6,y=3,x=2,stride=2,padding=1,dilation=1x2,dtype=fp32"]:  # fmt: skip
        p = parse_problem(text)
        x, dy = make_inputs(rt, p, seed=5)
        got = dw_reference(torch, p, x, dy).cpu().numpy()
        want = wgrad_reference(p, x.double().cpu().numpy(), dy.double().cpu().numpy())
        assert relative_error(got, want) < 1e-12, ("reference self-check", text)
    p = parse_problem("n=2,c=8,k=8,g=8,h=9,w=9,y=3,x=3,padding=1,dtype=fp32")
    x, dy = make_inputs(rt, p, seed=6)
    tw = torch.ops.aten.convolution_backward(
        dy.double().view(2, 9, 9, 8).permute(0, 3, 1, 2), x.double().view(2, 9, 9, 8).permute(0, 3, 1, 2),
        torch.empty(8, 1, 3, 3, dtype=torch.float64, device="cuda"), None, [1, 1], [1, 1], [1, 1], False, [0, 0], 8,
        [False, True, False],
    )[1]  # fmt: skip
    assert relative_error(dw_reference(torch, p, x, dy).cpu().numpy(), tw.permute(0, 2, 3, 1).reshape(p.dw_shape).cpu().numpy()) < 1e-12

    # fp32 rows are ieee problems: cuDNN must not use TF32 either
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    rows, failures = [], 0
    for name, text in _selected(a.only):
        if time.time() - t_start > a.budget_s:
            print(f"-- time budget of {a.budget_s}s spent; skipping {name} and later rows", flush=True)
            break
        p = parse_problem(text)
        x, dy = make_inputs(rt, p, seed=1)
        ref = dw_reference(torch, p, x, dy).cpu().numpy()
        tol = tolerance(p.dtype, p.dw_dtype, p.precision)
        row = {"name": name, "problem": text, "roofline_us": roofline_us(p), "candidates": []}
        # cuDNN / torch
        tw = torch_wgrad(torch, p, x, dy)
        for bench in (False, True):
            torch.backends.cudnn.benchmark = bench
            row[f"torch_us_benchmark_{'on' if bench else 'off'}"] = _time(rt, tw, a.reps)
        torch.backends.cudnn.benchmark = False
        torch_us = min(row["torch_us_benchmark_off"], row["torch_us_benchmark_on"])
        row["torch_us"] = torch_us
        row["torch_rel_err"] = relative_error(torch_output(torch, p, tw()).double().cpu().numpy(), ref)
        cands, auto = candidates(p, set(specs), sms)
        jobs = [(sp, k, False) for sp, k in cands]
        if cache is not None:  # the launcher's own pick on this cache replaces the proposed rule's
            la = launcher_auto(p, cache, sms, tuning)
            row["auto_source"] = "launcher" if la else "proposed rule"
            auto = la or auto
        if auto:
            jobs.append((auto[0], auto[1], True))
        best, by_variant = None, {}
        for s, ks, is_auto in jobs:
            try:
                L = Launch(rt, s, p, x, dy, ks_count=ks)
            except (ProblemError, AbiError) as e:  # e.g. replicas past 32-bit offsets
                print(f"skip {name} {s.label} ks={ks}: {e}", flush=True)
                continue
            L.poison()
            L.run()
            torch.cuda.synchronize()
            err = relative_error(L.output().double().cpu().numpy(), ref)
            ok = err <= tol
            us = _time(rt, L.run, a.reps)
            c = {"label": s.label, "ks_count": L.geo.ks_count, "grid": L.geo.grid, "us": us, "rel_err": err, "tol": tol,
                 "ok": ok, "auto": is_auto}  # fmt: skip
            row["candidates"].append(c)
            failures += not ok
            if not ok:
                print(f"BAD {name} {s.label} ks={ks} err={err:.2e} tol={tol:.0e}", flush=True)
            else:
                if best is None or us < best["us"]:
                    best = c
                v = by_variant.get(s.variant)
                if v is None or us < v["us"]:
                    by_variant[s.variant] = c
            if is_auto:
                row["auto"] = c
            del L
        row["best"] = best
        row["best_by_variant"] = by_variant
        good = [c for c in row["candidates"] if c["ok"]]
        row["best_window"] = min((c for c in good if "_win" in c["label"]), key=lambda c: c["us"], default=None)
        row["best_current"] = min((c for c in good if "_win" not in c["label"]), key=lambda c: c["us"], default=None)
        row["best_gather"] = min((c for c in good if c["label"].startswith("dwconv_") and "_win" not in c["label"]),
                                 key=lambda c: c["us"], default=None)  # fmt: skip
        rows.append(row)
        fmt = lambda c: f"{c['us']:8.1f} us {row['roofline_us'] / c['us'] * 100:5.0f}% {torch_us / c['us']:5.2f}x {c['label']} ks={c['ks_count']}" if c else "      -"  # noqa: E731
        print(f"{name:<32} torch {row['torch_us_benchmark_off']:8.1f}/{row['torch_us_benchmark_on']:8.1f} us "
              f"roof {row['roofline_us']:6.1f} us | best {fmt(best)} | auto {fmt(row.get('auto'))}", flush=True)  # fmt: skip
        print(f"    window {fmt(row['best_window'])} | gather {fmt(row['best_gather'])} | current {fmt(row['best_current'])}"
              f" | torch rel_err {row['torch_rel_err']:.1e}", flush=True)  # fmt: skip
        print("    best per variant: " + ", ".join(f"{v} {c['us']:.1f} us ({c['label']} ks={c['ks_count']})" for v, c in sorted(by_variant.items())), flush=True)
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(_doc(dev, sms, rows, failures, a), indent=1))

    print("\nrow                              torch_us   best_us  auto_us  roof%best  best/torch  auto/torch")
    for r in rows:
        b, au = r["best"], r.get("auto")
        print(f"{r['name']:<32} {r['torch_us']:8.1f} {b['us'] if b else float('nan'):9.1f} {au['us'] if au else float('nan'):8.1f} "
              f"{(r['roofline_us'] / b['us'] * 100) if b else float('nan'):9.0f} {(r['torch_us'] / b['us']) if b else float('nan'):11.2f} "
              f"{(r['torch_us'] / au['us']) if au and au['ok'] else float('nan'):11.2f}")  # fmt: skip
    print("\nrow                              torch_us  window_us  gather_us  current_us  roof%window  torch/window  torch/gather  torch/current")
    for r in rows:
        w, g, c = r.get("best_window"), r.get("best_gather"), r.get("best_current")
        nan = float("nan")
        print(f"{r['name']:<32} {r['torch_us']:8.1f} {w['us'] if w else nan:10.1f} {g['us'] if g else nan:10.1f} {c['us'] if c else nan:11.1f} "
              f"{(r['roofline_us'] / w['us'] * 100) if w else nan:12.0f} {(r['torch_us'] / w['us']) if w else nan:13.2f} "
              f"{(r['torch_us'] / g['us']) if g else nan:13.2f} {(r['torch_us'] / c['us']) if c else nan:14.2f}")  # fmt: skip
    speed = [r["torch_us"] / r["auto"]["us"] for r in rows if r.get("auto") and r["auto"]["ok"]]
    if speed:
        print(f"auto vs torch: geomean {math.exp(sum(map(math.log, speed)) / len(speed)):.2f}x, min {min(speed):.2f}x over {len(speed)} rows")
    print(f"{sum(len(r['candidates']) for r in rows)} candidates, {failures} numerics failures, {time.time() - t_start:.0f}s")
    Path(a.out).write_text(json.dumps(_doc(dev, sms, rows, failures, a), indent=1))
    return 1 if failures else 0


def _doc(dev, sms, rows, failures, a):
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5).stdout.strip()
    except Exception:  # noqa: BLE001
        commit = ""
    return {
        "version": 1,
        "what": "dwconv depthwise wgrad vs torch/cuDNN (benchmarks/gpu_depthwise.py run)",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": dev,
        "sms": sms,
        "commit": commit,
        "reps": a.reps,
        "roofline_bytes_per_s": HBM_BYTES_PER_S,
        "failures": failures,
        "rows": rows,
    }


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", help="kernel directory (--set window / tune)")
    b.add_argument("--cache", help="skwgrad cache to add to (--set strided-tune)")
    b.add_argument("--jobs", type=int, default=os.cpu_count())
    b.add_argument("--set", choices=("window", "tune", "strided-tune", "s1-tune"), default="window",
                   help="window: the window kernels vs the current default's (this session); tune: the 2026-12-01 sweep")
    b.add_argument("--count", action="store_true", help="print the number of kernels and stop")
    q = sub.add_parser("problems", help="print the --problem flags of the selected rows (for skwgrad compile-all)")
    q.add_argument("--only", default="", help="comma-separated substrings of row names")
    r = sub.add_parser("run")
    src = r.add_mutually_exclusive_group()
    src.add_argument("--kernels", help="a directory from `build`")
    src.add_argument("--cache", default=os.environ.get("SKWGRAD_CACHE"), help="a skwgrad cache (env SKWGRAD_CACHE)")
    r.add_argument("--allow-stale", action="store_true", help="serve cache entries of other kernel sources (no launcher pick then)")
    r.add_argument("--out", required=True, help="JSON file")
    r.add_argument("--reps", type=int, default=25)
    r.add_argument("--only", default="", help="comma-separated substrings of row names")
    r.add_argument("--budget-s", type=float, default=200.0, help="stop starting rows after this many seconds")
    a = ap.parse_args()
    return {"build": cmd_build, "run": cmd_run, "problems": cmd_problems}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main() or 0)
