"""GPU tests of the launcher (pytest -m gpu). Skipped only when the machine has no GPU at all;
anything else missing (cuda-bindings / hip-python, torch with CUDA, CuPy, the kernels) fails.

Kernels: the specs of ``gpu_specs(arch)`` (small 32x32x32 tiles, so small shapes have partial
tiles and many stream-K CTAs). They come from ``$SKWGRAD_CACHE`` when set (matched by spec, so a
cache carried from the build machine is used whatever Triton is installed here), else they are
compiled here with ``compile_spec`` (needs Triton 3.9). On a build machine:

    python tests/test_gpu_launcher.py build-cache DIR        # compiles gpu_specs('sm_90') into DIR

then carry DIR to the GPU machine and run ``SKWGRAD_CACHE=DIR pytest -m gpu tests/``.

What is checked: every {dp_sk, persistent} x {linear, tree, atomic, workspace} and split-K
{direct, atomic, two_stage, workspace} on dense / strided / dilated / grouped / depthwise / 3-D /
asymmetric-padding shapes with a partial last M tile, with outputs and workspaces poisoned (NaN
bytes) before each run, against a float64 reference; an all-DP partition and a tile shared by 4+
stream-K CTAs; linear/tree launched 25 times with dW and partials poisoned before each launch,
bit-identical; one binary on several shapes; ``skwgrad.wgrad`` on torch CUDA tensors against
PyTorch's own weight gradient; CuPy and ``__cuda_array_interface__`` inputs; the host time of a
repeated plan launch (printed; limit ``$SKWGRAD_HOST_US_LIMIT``, default 20 us).
"""

from __future__ import annotations

import glob
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from skwgrad.abi.conv import ConvProblem, parse_problem
from skwgrad.abi.launch import STAGE2_BLOCK
from skwgrad.abi.padding import channel_padding, pad_spec
from skwgrad.abi.streamk import partition
from skwgrad.abi.spec import KernelSpec
from skwgrad.errors import CacheError

TILE = (32, 32, 32)


def gpu_present() -> bool:
    return bool(
        glob.glob("/dev/nvidia[0-9]*")
        or os.path.exists("/dev/nvidiactl")
        or (os.path.exists("/dev/kfd") and glob.glob("/dev/dri/renderD*"))
    )


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_present(), reason="no GPU present (no /dev/nvidia* or /dev/kfd)")]


# ---------------------------------------------------------------------------------------------
# The kernels these tests need
# ---------------------------------------------------------------------------------------------
def _k(family, variant, dtype="bf16", dw=None, *, dims=2, vc=1, vk=1, mode="", tile=TILE, warps=4, stages=2, precision="ieee"):
    dw = dw or ("fp32" if variant == "atomic" else dtype)
    return KernelSpec(family, variant, dtype, dw, spatial_dims=dims, vec_c=vc, vec_k=vk, bm=tile[0], bn=tile[1], bk=tile[2],
                      num_warps=warps, num_stages=stages, mode=mode, precision=precision if dtype == "fp32" else "")  # fmt: skip


SK_KINDS = [(m, r) for m in ("dp_sk", "persistent") for r in ("linear", "tree", "atomic", "workspace")]
SPLITK_KINDS = ["direct", "atomic", "two_stage", "workspace"]


def gpu_specs(arch: str = "sm_90") -> list[KernelSpec]:
    out = []
    for dims in (2, 3):
        for v in SPLITK_KINDS:
            out.append(_k("wgrad", v, dims=dims))
        for m, r in SK_KINDS:
            out.append(_k("wgrad_sk", r, dims=dims, mode=m))
    # Vectorised kernels for the API tests, and fp16 ones for CuPy / __cuda_array_interface__.
    out += [_k("wgrad", "direct", vc=8, vk=8), _k("wgrad", "two_stage", vc=8, vk=8),
            _k("wgrad_sk", "linear", vc=8, vk=8, mode="dp_sk"), _k("wgrad_sk", "workspace", vc=8, vk=8, mode="dp_sk")]  # fmt: skip
    out += [_k("wgrad", "direct", "fp16"), _k("wgrad_sk", "tree", "fp16", mode="persistent")]
    out += [_k("wgrad", "direct", "fp32", precision=pr) for pr in ("ieee", "tf32")]
    out += [KernelSpec("stage2", "reduce", d, d, block=STAGE2_BLOCK, num_warps=4) for d in ("bf16", "fp32", "fp16")]
    out += [pad_spec(d) for d in ("bf16", "fp32")]  # the channel-padding copies (unaligned channel counts)
    if arch == "sm_90":  # the TMA families build for sm_90 only
        out += [spec for spec, _ in TMA_KINDS + TMA_3D_KINDS] + [spec for spec, _ in DWCONV_TMA_KINDS]
    return out


def _tma(variant, dw, *, bn=64, taps=1, mode="", regs=0, dims=2):
    return KernelSpec("wgrad_tma", variant, "bf16", dw, spatial_dims=dims, vec_c=8, vec_k=8, bm=64, bn=bn, bk=64, block=taps,
                      num_warps=4, num_stages=3, mode=mode, max_regs=regs)  # fmt: skip


# (kernel, settings it is launched at): every epilogue, the persistent and stream-K walks, 2 taps per tile
TMA_KINDS = [
    (_tma("direct", "bf16"), [{}]),
    (_tma("atomic", "fp32"), [{"ks_count": 1}, {"ks_count": 3}]),
    (_tma("workspace", "bf16"), [{"ks_count": 2}]),
    (_tma("direct", "bf16", bn=128, taps=2), [{}]),
    (_tma("workspace", "fp32", mode="persistent"), [{"pool": 5, "ks_count": 1}, {"pool": 7, "ks_count": 3}]),
    (_tma("atomic", "fp32", mode="streamk"), [{"pool": 5}, {"pool": 11}]),
    # two or three CTAs an SM (max_regs): the MMA warps grow through setmaxnreg out of the producer's share
    (_tma("atomic", "fp32", regs=128), [{"ks_count": 3}]),
    (_tma("workspace", "bf16", bn=128, taps=2, mode="persistent", regs=128), [{"pool": 9, "ks_count": 2}]),
    (_tma("workspace", "bf16", regs=80), [{"ks_count": 1}, {"ks_count": 2}]),  # three CTAs an SM
]
# 3-D problems (x through a 5-D im2col map): every epilogue, 2 taps per tile, two CTAs an SM
TMA_3D_KINDS = [
    (_tma("direct", "bf16", dims=3), [{}]),
    (_tma("atomic", "fp32", dims=3), [{"ks_count": 3}]),
    (_tma("workspace", "bf16", bn=128, taps=2, regs=128, dims=3), [{"ks_count": 1}, {"ks_count": 2}]),
]


def _dwtma(variant, dtype="bf16", *, k=3):
    return KernelSpec("dwconv_tma", variant, dtype, "fp32" if variant == "atomic" else dtype, vec_c=8, vec_k=8, bm=32, bn=k, bk=16,
                      num_warps=4, num_stages=3)  # fmt: skip


# The TMA depthwise family: both epilogues, 3x3 and 5x5, at 1 split, a few, and one step a split
DWCONV_TMA_KINDS = [
    (_dwtma("atomic"), [1, 3, 10**6]),
    (_dwtma("workspace"), [1, 4]),
    (_dwtma("atomic", "fp16", k=5), [2, 10**6]),
    (_dwtma("workspace", k=5), [3]),
]
# partial channel blocks (40, 72), partial row and column blocks, no padding, asymmetric padding
DWCONV_TMA_SHAPES = {
    "dw40_9x21": "n=3,c=40,k=40,g=40,h=9,w=21,padding=1",
    "dw72_13x11": "n=2,c=72,k=72,g=72,h=13,w=11,padding=1",
    "dw32_10x12_nopad": "n=2,c=32,k=32,g=32,h=10,w=12",
    "dw64_15x17_asym": "n=2,c=64,k=64,g=64,h=15,w=17,pad_lo=1x0,pad_hi=0x1",
}


class KernelSet:
    """A read-only cache (find/get/load_binary/tuned/remember_tuned) over a list of Kernels."""

    def __init__(self, kernels):
        self.kernels = {k.key: k for k in kernels}
        self._tuned = {}

    def find(self, arch, **fields):
        return sorted((k for k in self.kernels.values() if k.arch == arch and all(getattr(k.spec, f) == v for f, v in fields.items())),
                      key=lambda k: k.label)  # fmt: skip

    def get(self, key):
        try:
            return self.kernels[key]
        except KeyError:
            raise CacheError(f"no kernel {key}") from None

    def load_binary(self, entry):
        return (entry if not isinstance(entry, str) else self.kernels[entry]).loader()

    def tuned(self, arch, cus, problem_key):
        return self._tuned.get((arch, cus, problem_key))

    def remember_tuned(self, arch, cus, problem_key, choice):
        self._tuned[(arch, cus, problem_key)] = choice


def _from_cache(path, arch, specs):
    """Kernels of ``specs`` found in the cache at ``path``, matched by spec (any compiler)."""
    from skwgrad.cache import Cache
    from skwgrad.launcher.plan import Kernel

    cache = Cache(path)
    try:
        entries = cache.entries(arch, all_versions=True)
    except TypeError:
        entries = cache.find(arch)
    by_spec = {}
    for e in entries:
        if e.spec is not None:
            by_spec.setdefault(e.spec, e)

    def loader(e):
        def load():
            try:
                return cache.load_binary(e)
            except Exception:  # noqa: BLE001  (built by another Triton, or none installed here: the bytes are what we want)
                return cache.load_binary(e, allow_stale=True)

        return load

    found = {}
    for s in specs:
        e = by_spec.get(s)
        if e is not None:
            found[s] = Kernel(e.key, e.spec, e.arch, dict(e.metadata), loader(e))
    return found


def _compile(arch, specs):
    from skwgrad.aot.compile import compile_spec
    from skwgrad.launcher.plan import Kernel

    found = {}
    for s in specs:
        found[s] = Kernel.from_compiled(compile_spec(s, arch))
    return found


@pytest.fixture(scope="session")
def backend():
    from skwgrad.launcher.backends import get_backend

    return get_backend()  # a GPU is present: a BackendError here is a failure, not a skip


@pytest.fixture(scope="session")
def kernels(backend):
    arch = backend.arch
    specs = gpu_specs(arch)
    found = {}
    path = os.environ.get("SKWGRAD_CACHE")
    if path:
        found = _from_cache(path, arch, specs)
    missing = [s for s in specs if s not in found]
    if missing:
        try:
            found.update(_compile(arch, missing))
        except Exception as e:  # noqa: BLE001
            names = "\n  ".join(s.label for s in missing)
            pytest.fail(
                f"{len(missing)} test kernel(s) for {arch} are not in SKWGRAD_CACHE={path!r} and cannot be compiled here "
                f"({type(e).__name__}: {e}).\nBuild them on the build machine with\n"
                f"  python tests/test_gpu_launcher.py build-cache DIR --arch {arch}\n"
                f"and set SKWGRAD_CACHE=DIR. Missing:\n  {names}"
            )
    return found


@pytest.fixture(scope="session")
def kset(kernels):
    return KernelSet(kernels.values())


def _stage2(kernels, dw):
    return next(k for s, k in kernels.items() if s.family == "stage2" and s.dw_dtype == dw)


# ---------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------
SHAPES = {
    # K = 40 with BM = 32: a partial last M tile (and partial N / K tiles) everywhere.
    "dense": "n=2,c=16,k=40,h=9,w=11,y=3,x=3,padding=1",
    "strided": "n=2,c=8,k=40,h=13,w=12,y=3,x=3,stride=2,padding=1",
    "dilated": "n=2,c=8,k=40,h=12,w=12,y=3,x=3,dilation=2,padding=2",
    "grouped": "n=2,c=32,k=160,g=4,h=8,w=8,y=3,x=3,padding=1",
    "depthwise": "n=2,c=24,k=24,g=24,h=10,w=10,y=5,x=5,padding=2",
    "3d": "n=1,c=8,k=40,d=5,h=6,w=6,z=3,y=3,x=3,padding=1",
    "asym_pad": "n=2,c=8,k=40,h=7,w=9,y=3,x=2,pad_lo=0x1,pad_hi=2x0",
}
LONG = "n=8,c=8,k=16,h=32,w=32,y=3,x=3,padding=1"
# TMA shapes: channels per group multiples of 8; the grouped ones packed 8, 3 and 1 to a tile
TMA_SHAPES = {  # 4+ blocks of 64 output positions: every split count of TMA_KINDS has rows
    "dense": "n=3,c=72,k=80,h=9,w=11,y=3,x=3,padding=1",
    "strided": "n=7,c=16,k=24,h=13,w=12,y=3,x=3,stride=2,padding=1",
    "dilated": "n=2,c=16,k=8,h=12,w=12,y=3,x=3,dilation=2,padding=2",
    "grouped_8x8": "n=5,c=256,k=256,g=32,h=7,w=9,y=3,x=3,padding=1",
    "grouped_16to8": "n=5,c=96,k=48,g=6,h=8,w=8,y=3,x=3,padding=1",
    "grouped_wide": "n=8,c=160,k=144,g=2,h=6,w=6,y=3,x=3,padding=1",
}  # 3 tiles x 256 iterations: many CTAs per tile
# 3-D TMA shapes: strided and dilated depth, a 1x3x3 and a 3x1x1 filter (R(2+1)D), asymmetric
# padding, grouped; every corner inside the 5-D map's [-16, 15]
TMA_3D_SHAPES = {
    "3d_dense": "n=2,c=24,k=40,d=5,h=6,w=7,z=3,y=3,x=3,padding=1",
    "3d_strided": "n=3,c=16,k=16,d=9,h=10,w=8,z=3,y=3,x=3,stride=2,padding=1",
    "3d_dilated": "n=2,c=16,k=24,d=8,h=7,w=7,z=3,y=3,x=3,dilation=2x1x2,padding=2x1x2",
    "3d_spatial": "n=2,c=32,k=16,d=6,h=9,w=9,z=1,y=3,x=3,padding=0x1x1",
    "3d_temporal": "n=2,c=16,k=32,d=8,h=8,w=8,z=3,y=1,x=1,padding=1x0x0",
    "3d_asym": "n=2,c=16,k=16,d=6,h=7,w=8,z=2,y=3,x=2,pad_lo=1x0x1,pad_hi=0x2x0",
    "3d_grouped": "n=2,c=64,k=64,g=4,d=5,h=6,w=6,z=3,y=3,x=3,padding=1",
}


def with_dw(p: ConvProblem, dw: str) -> ConvProblem:
    from dataclasses import fields

    return ConvProblem(**{**{f.name: getattr(p, f.name) for f in fields(p) if f.init}, "dw_dtype": dw})


def sk_pools(p: ConvProblem, tile=TILE) -> dict:
    """A pool with stream-K work next to DP tiles where possible, and an all-DP pool."""
    t = p.tiling(*tile)
    out = {}
    for pool in range(2, 64):
        part = partition(t.num_tiles, t.iters_per_tile, pool)
        if part.sk_ctas and ("sk" not in out or (part.dp_tiles and not out.get("mixed"))):
            out["sk"] = pool
            out["mixed"] = bool(part.dp_tiles)
        if not part.sk_ctas and "dp" not in out:
            out["dp"] = pool
    return out


def max_contributors(p: ConvProblem, pool: int, tile=TILE) -> int:
    t = p.tiling(*tile)
    part = partition(t.num_tiles, t.iters_per_tile, pool)
    return max((len(part.contributors(tile_)) + 1 for tile_ in range(part.dp_tiles, part.num_tiles)), default=0)


def run_checked(backend, plan, inputs, ref):
    """dW and the scratch workspace poisoned (NaN), one launch, the result vs the float64
    reference, and the zeroed arena (flags, workspace replica) left zero by the kernels."""
    from skwgrad.reference import relative_error, tolerance

    p = plan.problem
    inputs.poison_dw(0xFF)
    plan.poison(byte=0xFF)
    plan.launch(inputs.dy, inputs.x, inputs.dw, 0)
    out = inputs.read_dw()
    err = relative_error(out, ref)
    tol = tolerance(p.dtype, p.dw_dtype, plan.spec.precision)
    assert err <= tol, f"{plan!r}: relative error {err:.3e} > {tol:.1e}"
    left = plan.zeroed_bytes_nonzero()
    assert left == 0, f"{plan!r}: {left} bytes of the zeroed arena left non-zero (flags/replica not reset)"
    return out


@pytest.fixture(scope="session")
def problem_inputs(backend):
    from skwgrad.launcher.hostdata import DeviceInputs
    from skwgrad.reference import wgrad_reference

    made = {}

    def get(text, dw="bf16", dtype="bf16"):
        key = (text, dw, dtype)
        if key not in made:
            p = with_dw(parse_problem(text + f",dtype={dtype}"), dw)
            inp = DeviceInputs.random(p, backend, seed=len(made))
            made[key] = (p, inp, wgrad_reference(p, inp.x64, inp.dy64))
        return made[key]

    yield get
    for _, inp, _ in made.values():
        inp.free()


# ---------------------------------------------------------------------------------------------
# Every mode x reduction on every shape
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("mode,reduction", SK_KINDS)
def test_stream_k_every_mode_and_reduction(backend, kernels, problem_inputs, shape, mode, reduction):
    from skwgrad.launcher.plan import Plan

    dw = "fp32" if reduction == "atomic" else "bf16"
    p, inputs, ref = problem_inputs(SHAPES[shape], dw)
    k = kernels[_k("wgrad_sk", reduction, dims=p.spatial_dims, mode=mode)]
    pools = sk_pools(p)
    assert "sk" in pools, f"{shape}: no pool gives stream-K work"
    for name in ("sk", "dp"):
        if name not in pools:
            continue
        plan = Plan(p, k, backend, pool=pools[name], stage2=_stage2(kernels, dw))
        assert (plan.geometry.partition.sk_ctas > 0) == (name == "sk")
        run_checked(backend, plan, inputs, ref)


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("variant", SPLITK_KINDS)
def test_split_k_every_epilogue(backend, kernels, problem_inputs, shape, variant):
    from skwgrad.launcher.plan import Plan

    dw = "fp32" if variant == "atomic" else "bf16"
    p, inputs, ref = problem_inputs(SHAPES[shape], dw)
    k = kernels[_k("wgrad", variant, dims=p.spatial_dims)]
    ipt = p.tiling(*TILE).iters_per_tile
    for ks in ([1] if variant == "direct" else sorted({1, 2, 3, ipt})):
        plan = Plan(p, k, backend, ks_count=ks, stage2=_stage2(kernels, dw))
        run_checked(backend, plan, inputs, ref)


# every TMA kind on every shape of its dims: 2-D (4-D im2col) and 3-D (5-D)
TMA_CASES = [(shapes[name], kinds[k]) for shapes, kinds in ((TMA_SHAPES, TMA_KINDS), (TMA_3D_SHAPES, TMA_3D_KINDS))
             for name in shapes for k in range(len(kinds))]  # fmt: skip
TMA_CASE_IDS = [f"{name}-{k}" for shapes, kinds in ((TMA_SHAPES, TMA_KINDS), (TMA_3D_SHAPES, TMA_3D_KINDS))
                for name in shapes for k in range(len(kinds))]  # fmt: skip


@pytest.mark.parametrize("case", range(len(TMA_CASES)), ids=TMA_CASE_IDS)
def test_tma_every_epilogue_and_walk(backend, kernels, problem_inputs, case):
    from skwgrad.launcher.plan import Plan

    if backend.arch != "sm_90":
        pytest.skip("the TMA im2col family builds for sm_90 only")
    text, (spec, settings) = TMA_CASES[case]
    p, inputs, ref = problem_inputs(text, spec.dw_dtype)
    for setting in settings:
        plan = Plan(p, kernels[spec], backend, stage2=_stage2(kernels, spec.dw_dtype), **setting)
        run_checked(backend, plan, inputs, ref)


@pytest.mark.parametrize("shape", list(DWCONV_TMA_SHAPES))
@pytest.mark.parametrize("kind", range(len(DWCONV_TMA_KINDS)))
def test_dwconv_tma_every_epilogue(backend, kernels, problem_inputs, shape, kind):
    from skwgrad.launcher.plan import Plan

    if backend.arch != "sm_90":
        pytest.skip("the TMA depthwise family builds for sm_90 only")
    spec, degrees = DWCONV_TMA_KINDS[kind]
    k = spec.bn
    text = DWCONV_TMA_SHAPES[shape] + f",y={k},x={k}"
    if k == 5:
        text = text.replace("padding=1", "padding=2")
    p, inputs, ref = problem_inputs(text, spec.dw_dtype, spec.dtype)
    steps = Plan(p, kernels[spec], backend, ks_count=1, stage2=_stage2(kernels, spec.dw_dtype)).geometry.tiling.iters_per_tile
    for ks in degrees:
        plan = Plan(p, kernels[spec], backend, ks_count=min(ks, steps), stage2=_stage2(kernels, spec.dw_dtype))
        run_checked(backend, plan, inputs, ref)


@pytest.mark.parametrize("mode,reduction", SK_KINDS)
def test_many_contributors_per_tile(backend, kernels, problem_inputs, mode, reduction):
    from skwgrad.launcher.plan import Plan

    dw = "fp32" if reduction == "atomic" else "bf16"
    p, inputs, ref = problem_inputs(LONG, dw)
    pool = 16
    assert max_contributors(p, pool) >= 4
    plan = Plan(p, kernels[_k("wgrad_sk", reduction, mode=mode)], backend, pool=pool, stage2=_stage2(kernels, dw))
    run_checked(backend, plan, inputs, ref)


@pytest.mark.parametrize("mode,reduction", [(m, r) for m, r in SK_KINDS if r in ("linear", "tree")])
def test_linear_and_tree_are_bit_identical_over_repeated_launches(backend, kernels, problem_inputs, mode, reduction):
    from skwgrad.launcher.plan import Plan

    p, inputs, ref = problem_inputs(LONG, "bf16")
    pool = 16
    assert max_contributors(p, pool) >= 4
    plan = Plan(p, kernels[_k("wgrad_sk", reduction, mode=mode)], backend, pool=pool)
    outs = set()
    for i in range(25):
        run_checked(backend, plan, inputs, ref)  # dW and partials NaN; the flags carry the hand-off
        outs.add(inputs.read_dw_raw())
    assert len(outs) == 1, f"{len(outs)} different results over 25 launches of {plan!r}"


def test_one_binary_serves_several_shapes(backend, kernels, problem_inputs):
    from skwgrad.launcher.plan import Plan

    k = kernels[_k("wgrad_sk", "linear", mode="dp_sk")]
    n = 0
    for shape, text in SHAPES.items():
        p, inputs, ref = problem_inputs(text, "bf16")
        if p.spatial_dims != 2:
            continue
        run_checked(backend, Plan(p, k, backend, pool=sk_pools(p)["sk"]), inputs, ref)
        n += 1
    assert n >= 5
    assert sum(1 for f in backend.loaded() if f.key == k.key) == 1  # loaded once


# ---------------------------------------------------------------------------------------------
# The Python API on torch / CuPy / __cuda_array_interface__ arrays
# ---------------------------------------------------------------------------------------------
def _torch_case(text, dtype="bf16", seed=0):
    import torch

    p = parse_problem(text + f",dtype={dtype}")
    sd = p.spatial_dims
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    fmt = torch.channels_last_3d if sd == 3 else torch.channels_last
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((p.n, p.g * p.c, *(p.di, p.hi, p.wi)[3 - sd :]), generator=g).to(dt)
    dy = torch.randn((p.n, p.g * p.k, *(p.do, p.ho, p.wo)[3 - sd :]), generator=g).to(dt)
    return p, x.cuda().contiguous(memory_format=fmt), dy.cuda().contiguous(memory_format=fmt)


def _torch_ref(p, x, dy):
    """PyTorch's weight gradient in float64 on the CPU (symmetric padding)."""
    import torch

    sd = p.spatial_dims
    w = torch.zeros((p.g * p.k, p.c, *(p.z, p.y, p.x)[3 - sd :]), dtype=torch.float64)
    return torch.ops.aten.convolution_backward(
        dy.double().cpu(), x.double().cpu(), w, None, list(p.stride[3 - sd :]), list(p.pad_lo[3 - sd :]),
        list(p.dilation[3 - sd :]), False, [0] * sd, p.g, [False, True, False],
    )[1]  # fmt: skip


@pytest.mark.parametrize("shape", ["dense", "strided", "dilated", "grouped", "depthwise", "3d"])
@pytest.mark.parametrize("streamk,reduction", [("auto", "auto"), ("dp_sk", "linear"), ("persistent", "tree"), ("off", "two_stage")])
def test_wgrad_on_torch_tensors_equals_pytorch(backend, kset, shape, streamk, reduction):
    import torch

    import skwgrad
    from skwgrad.reference import relative_error, tolerance

    assert torch.cuda.is_available(), "torch has no CUDA on a GPU machine"
    p, x, dy = _torch_case(SHAPES[shape])
    sd = p.spatial_dims
    kw = dict(filter_size=(p.z, p.y, p.x)[3 - sd :], stride=p.stride[3 - sd :], padding=p.pad_lo[3 - sd :],
              dilation=p.dilation[3 - sd :], groups=p.g, cache=kset, streamk=streamk, reduction=reduction)  # fmt: skip
    if streamk in ("dp_sk", "persistent"):
        kw["streamk_ctas"] = sk_pools(p)["sk"]
    dw = skwgrad.wgrad(x, dy, **kw)
    torch.cuda.synchronize()
    assert dw.shape == (p.g * p.k, p.c, *(p.z, p.y, p.x)[3 - sd :]) and dw.dtype == torch.bfloat16 and dw.is_cuda
    assert dw.is_contiguous(memory_format=torch.channels_last_3d if sd == 3 else torch.channels_last)
    ref = _torch_ref(p, x, dy)
    err = relative_error(dw.double().cpu().numpy(), ref.numpy())
    assert err <= tolerance("bf16", "bf16"), f"relative error {err:.3e} vs PyTorch's float64 weight gradient"
    # and against cuDNN's own bf16 result, loosely
    cud = torch.ops.aten.convolution_backward(dy, x, torch.empty_like(dw), None, list(p.stride[3 - sd :]), list(p.pad_lo[3 - sd :]),
                                              list(p.dilation[3 - sd :]), False, [0] * sd, p.g, [False, True, False])[1]  # fmt: skip
    assert relative_error(dw.double().cpu().numpy(), cud.double().cpu().numpy()) < 3 * tolerance("bf16", "bf16")


def test_wgrad_fp32_dw_and_out(backend, kset):
    import torch

    import skwgrad
    from skwgrad.reference import relative_error

    p, x, dy = _torch_case(SHAPES["dense"])
    out = torch.full((p.k, p.c, 3, 3), float("nan"), dtype=torch.float32, device="cuda").contiguous(memory_format=torch.channels_last)
    got = skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=kset, out=out, streamk="dp_sk", reduction="atomic", streamk_ctas=5)
    torch.cuda.synchronize()
    assert got is out
    assert relative_error(out.double().cpu().numpy(), _torch_ref(p, x, dy).numpy()) <= 1e-3


def test_wgrad_fp32_is_ieee_unless_tf32_is_asked_for(backend, kset):
    import torch

    import skwgrad
    from skwgrad.reference import relative_error, tolerance

    p, x, dy = _torch_case(SHAPES["dense"], dtype="fp32")
    ref = _torch_ref(p, x, dy).numpy()
    full = skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=kset, streamk="off")
    fast = skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=kset, streamk="off", precision="tf32")
    torch.cuda.synchronize()
    e_full = relative_error(full.double().cpu().numpy(), ref)
    e_fast = relative_error(fast.double().cpu().numpy(), ref)
    print(f"fp32 ieee rel err {e_full:.2e}, tf32 {e_fast:.2e}")
    assert e_full <= tolerance("fp32", "fp32", "ieee")
    assert e_fast <= tolerance("fp32", "fp32", "tf32")
    assert e_fast > 10 * e_full  # the tf32 kernel really ran: 10-bit mantissas, far larger error


def test_wgrad_runs_on_the_torch_current_stream(backend, kset):
    import torch

    import skwgrad

    p, x, dy = _torch_case(SHAPES["dense"])
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        dw = skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=kset)
    s.synchronize()
    ref = skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=kset)
    torch.cuda.synchronize()
    assert torch.equal(dw, ref)


def test_cupy_and_cuda_array_interface_inputs(backend, kset):
    import cupy
    import torch

    import skwgrad
    from skwgrad.launcher.hostdata import DeviceArray
    from skwgrad.reference import relative_error, tolerance

    p, x, dy = _torch_case(SHAPES["dense"], dtype="fp16")
    ref = _torch_ref(p, x, dy).numpy()
    xn = x.permute(0, 2, 3, 1).contiguous()  # (N, H, W, C) contiguous
    dyn = dy.permute(0, 2, 3, 1).contiguous()
    xc, dyc = cupy.asarray(xn), cupy.asarray(dyn)
    dw = skwgrad.wgrad(xc, dyc, filter_size=3, padding=1, cache=kset)
    cupy.cuda.get_current_stream().synchronize()
    assert isinstance(dw, cupy.ndarray) and dw.shape == (p.k, p.c, 3, 3)
    assert relative_error(cupy.asnumpy(dw).astype(np.float64), ref) <= tolerance("fp16", "fp16")

    class CAI:
        def __init__(self, t):
            self.t = t
            self.__cuda_array_interface__ = t.__cuda_array_interface__

    dw2 = skwgrad.wgrad(CAI(xn), CAI(dyn), filter_size=3, padding=1, cache=kset)
    assert isinstance(dw2, DeviceArray)
    torch.cuda.synchronize()
    assert relative_error(dw2.to_numpy(), ref) <= tolerance("fp16", "fp16")
    got = torch.as_tensor(dw2, device="cuda")  # consumers read it through __cuda_array_interface__
    assert got.shape == (p.k, p.c, 3, 3)


def test_numpy_inputs_are_copied_in_and_out(backend, kset):
    import torch

    import skwgrad
    from skwgrad.reference import relative_error, tolerance

    p, x, dy = _torch_case(SHAPES["strided"], dtype="fp16")
    xn = x.permute(0, 2, 3, 1).contiguous().cpu().numpy()
    dyn = dy.permute(0, 2, 3, 1).contiguous().cpu().numpy()
    dw = skwgrad.wgrad(xn, dyn, filter_size=3, stride=2, padding=1, cache=kset)
    assert isinstance(dw, np.ndarray) and dw.dtype == np.float16
    assert relative_error(dw.astype(np.float64), _torch_ref(p, x, dy).numpy()) <= tolerance("fp16", "fp16")
    del torch


def test_nchw_contiguous_tensors_are_read_as_pytorch_reads_them(backend, kset):
    """The default memory format is converted, never reread as NHWC (C == K here on purpose)."""
    import torch

    import skwgrad

    g = torch.Generator(device="cuda").manual_seed(4)
    x = torch.randn((4, 16, 12, 12), device="cuda", generator=g).bfloat16()
    dy = torch.randn((4, 16, 12, 12), device="cuda", generator=g).bfloat16()
    w = torch.zeros((16, 16, 3, 3), dtype=torch.float64, device="cuda")
    ref = torch.ops.aten.convolution_backward(dy.double(), x.double(), w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                              [False, True, False])[1]  # fmt: skip
    got = skwgrad.wgrad(x, dy, filter_size=3, padding=1, cache=kset)
    assert tuple(got.shape) == (16, 16, 3, 3)
    assert float((got.double() - ref).norm() / ref.norm()) < 2e-2


def test_torch_call_is_wgrads_call_resolved_once(backend, kset):
    """api.torch_call resolves what wgrad runs without launching; its call then computes dW of any
    pair with those shapes and strides (channels-last or not), with nothing resolved again, until
    clear_plans() changes the generation."""
    import torch

    from skwgrad.launcher import api

    g = torch.Generator(device="cuda").manual_seed(5)
    w = torch.zeros((16, 16, 3, 3), dtype=torch.float64, device="cuda")
    for cl in (True, False):
        kw = dict(filter_size=(3, 3), stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1, cache=kset,
                  dw_dtype="fp32", layout="nchw")  # fmt: skip
        pairs = []
        for _ in range(2):
            x = torch.randn((4, 16, 12, 12), device="cuda", generator=g).bfloat16()
            dy = torch.randn((4, 16, 12, 12), device="cuda", generator=g).bfloat16()
            if cl:
                x, dy = x.contiguous(memory_format=torch.channels_last), dy.contiguous(memory_format=torch.channels_last)
            pairs.append((x, dy))
        gen = api.calls_generation()
        call = api.torch_call(*pairs[0], **kw)
        resolved = api.stats["calls_resolved"]
        assert api.torch_call(*pairs[1], **kw) is call and api.stats["calls_resolved"] == resolved
        for x, dy in pairs:
            ref = torch.ops.aten.convolution_backward(dy.double(), x.double(), w, None, [1, 1], [1, 1], [1, 1], False,
                                                      [0, 0], 1, [False, True, False])[1]  # fmt: skip
            got = call(x, dy, None, None)
            assert got.dtype == torch.float32 and got.stride() == (144, 1, 48, 16)  # channels-last dW
            assert float((got.double() - ref).norm() / ref.norm()) < 2e-2
        assert api.calls_generation() == gen
        api.clear_plans()
        assert api.calls_generation() == gen + 1


def test_tensors_on_different_devices_are_refused(backend, kset):
    import torch

    import skwgrad
    from skwgrad.errors import ProblemError

    p, x, dy = _torch_case(SHAPES["dense"])
    if torch.cuda.device_count() < 2:
        # one device: the other refusal that needs a real GPU, a CPU tensor beside a CUDA one
        with pytest.raises(ProblemError, match="all be device arrays or all host arrays"):
            skwgrad.wgrad(x, dy.cpu(), filter_size=3, padding=1, cache=kset)
        return
    with pytest.raises(ProblemError, match="different devices"):
        skwgrad.wgrad(x, dy.to("cuda:1"), filter_size=3, padding=1, cache=kset)


def test_run_from_cache_rows_with_cudnn_baseline(backend, kset):
    from skwgrad.abi.conv import parse_problem as pp
    from skwgrad.launcher.commands import format_table, run_problems

    problems = [("dense", "", pp(SHAPES["dense"])), ("long", "", pp(LONG))]
    rows, ok = run_problems(problems, backend=backend, cache=kset, streamk="all", verify=True, bench=True,
                            baseline="cudnn", iters=20, warmup=3)  # fmt: skip
    print("\n" + format_table(rows))
    assert ok and len(rows) >= 10
    assert all(r["ok"] and r["us"] > 0 and r["tflops"] > 0 for r in rows)
    assert all(r.get("cudnn_us", 0) > 0 and r["ratio"] > 0 for r in rows), [r.get("cudnn_note") for r in rows]


def test_the_cudnn_baseline_runs_in_benchmark_mode_and_restores_the_callers_settings(backend, monkeypatch):
    """Every skwgrad ratio is against cuDNN's fastest algorithm (benchmark mode), whatever the
    caller set; ``benchmark=None`` times what the caller's own settings run. Both leave them as found."""
    import torch

    from skwgrad.abi.conv import parse_problem as pp
    from skwgrad.launcher import baseline

    seen = []
    real = baseline._time_cudnn

    def spy(*a):
        seen.append((torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32))
        return real(*a)

    monkeypatch.setattr(baseline, "_time_cudnn", spy)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    p = pp(SHAPES["dense"])
    us, note = baseline.cudnn_time(p, backend, warmup=2, iters=5)
    assert us and us > 0, note
    us, note = baseline.cudnn_time(p, backend, warmup=2, iters=5, benchmark=None)
    assert us and us > 0, note
    assert seen == [(True, False), (False, False)]  # a 16-bit problem: tf32 off while timing
    assert torch.backends.cudnn.benchmark is False and torch.backends.cudnn.allow_tf32 is True


def _captured(plan, x, dy, out):
    """A CUDA graph of one ``plan(x, dy, out=out)`` call, warmed up first on the capturing stream."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        plan(x, dy, out=out)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plan(x, dy, out=out)
    return graph


# ---------------------------------------------------------------------------------------------
# Channel padding
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["n=2,c=30,k=20,h=12,w=11,y=3,x=3,padding=1", "n=3,c=12,k=50,h=9,w=9,y=3,x=3,stride=2,padding=1",
                                  "n=2,c=70,k=18,h=8,w=8,y=1,x=1"])
def test_unaligned_channels_run_padded_eager_and_in_a_cuda_graph(backend, kset, text):
    """The padded route (pad x/dy, the 8-wide kernel on the padded problem, pad dW back) on torch
    tensors: against PyTorch's float64 weight gradient, dW poisoned, then captured into a CUDA
    graph and replayed on fresh inputs copied into the captured tensors."""
    import torch

    from skwgrad.launcher.options import LaunchOptions
    from skwgrad.launcher.plan import PaddedPlan
    from skwgrad.launcher.select import backend_occupancy, rank_choices
    from skwgrad.reference import relative_error, tolerance

    p, x, dy = _torch_case(text, seed=11)
    assert channel_padding(p) is not None
    r = rank_choices(p, kset, arch=backend.arch, cus=backend.compute_units, options=LaunchOptions(), occupancy=backend_occupancy(backend))
    padded = [c for c in r.choices if c.padding is not None]
    assert padded, [str(x) for x in r.rejected][:5]
    for c in padded[:3]:  # the three best-ranked padded launches
        plan = c.plan(p, backend)
        assert isinstance(plan, PaddedPlan)
        out = torch.full((p.g * p.k, p.c, p.y, p.x), float("nan"), device="cuda", dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
        plan.poison(byte=0xFF, stream=torch.cuda.current_stream().cuda_stream)
        plan(x, dy, out=out)
        torch.cuda.synchronize()
        err = relative_error(out.double().cpu().numpy(), _torch_ref(p, x, dy).numpy())
        assert err <= tolerance("bf16", "bf16"), (c.kernel.label, err)
        assert plan.zeroed_bytes_nonzero() == 0
    plan = padded[0].plan(p, backend)
    graph = _captured(plan, x, dy, out)
    _, x2, dy2 = _torch_case(text, seed=12)
    x.copy_(x2)
    dy.copy_(dy2)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    err = relative_error(out.double().cpu().numpy(), _torch_ref(p, x2, dy2).numpy())
    assert err <= tolerance("bf16", "bf16"), err


# ---------------------------------------------------------------------------------------------
# Atomic launches start while dW's memset runs (abi.arch.Arch.dependent_launch)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", [SHAPES["dense"], SHAPES["depthwise"], SHAPES["grouped"], TMA_SHAPES["dense"], LONG])
def test_atomic_launches_after_the_dw_memset_eager_and_in_a_cuda_graph(backend, kset, text):
    """Every family's best-ranked atomic launch (dW zeroed, then the kernel, a dependent launch on
    sm_90 that waits for the memset before its first add) and its best-ranked launch with a Stage-2
    reduce (a dependent launch that waits for the kernel first): dW poisoned with NaN before each of
    10 eager launches, then captured into a CUDA graph and replayed on fresh inputs with dW poisoned
    again. A kernel that wrote dW before the memset finished, or a Stage-2 that read the replicas
    early, leaves NaNs, a double sum or a partial one."""
    import torch

    from skwgrad.abi.spec import dw_zeroed_before_launch
    from skwgrad.launcher.options import LaunchOptions
    from skwgrad.launcher.select import backend_occupancy, rank_choices
    from skwgrad.reference import relative_error

    p, x, dy = _torch_case(text + ",dw_dtype=fp32", seed=21)
    r = rank_choices(p, kset, arch=backend.arch, cus=backend.compute_units, options=LaunchOptions(), occupancy=backend_occupancy(backend))
    by_family = {}
    for c in r.choices:
        if c.padding is None and (dw_zeroed_before_launch(c.spec.variant) or c.spec.variant in ("workspace", "two_stage")):
            by_family.setdefault((c.spec.family, dw_zeroed_before_launch(c.spec.variant)), c)
    assert any(atomic for _, atomic in by_family), [str(x) for x in r.rejected][:5]
    sd = p.spatial_dims
    fmt = torch.channels_last_3d if sd == 3 else torch.channels_last
    shape = (p.g * p.k, p.c, *(p.z, p.y, p.x)[3 - sd :])
    ref = _torch_ref(p, x, dy).numpy()
    for fam, c in sorted(by_family.items()):
        plan = c.plan(p, backend)
        assert plan.layout.zero_dw == fam[1] and (fam[1] or plan.layout.needs_stage2)
        out = torch.empty(shape, dtype=torch.float32, device="cuda").contiguous(memory_format=fmt)
        for _ in range(10):
            out.fill_(float("nan"))
            plan(x, dy, out=out)
        torch.cuda.synchronize()
        err = relative_error(out.double().cpu().numpy(), ref)
        assert err <= 1e-3, (c.kernel.label, err)
        graph = _captured(plan, x, dy, out)
        _, x2, dy2 = _torch_case(text + ",dw_dtype=fp32", seed=22)
        x_saved, dy_saved = x.clone(), dy.clone()
        x.copy_(x2)
        dy.copy_(dy2)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        err = relative_error(out.double().cpu().numpy(), _torch_ref(p, x2, dy2).numpy())
        assert err <= 1e-3, (c.kernel.label, "graph", err)
        x.copy_(x_saved)
        dy.copy_(dy_saved)


# ---------------------------------------------------------------------------------------------
# Host time of a repeated launch
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["linear", "workspace"])
def test_host_time_of_a_repeated_plan_launch(backend, kernels, problem_inputs, reduction):
    from skwgrad.launcher.plan import Plan

    p, inputs, ref = problem_inputs(SHAPES["dense"], "bf16")
    plan = Plan(p, kernels[_k("wgrad_sk", reduction, mode="dp_sk")], backend, pool=sk_pools(p)["sk"], stage2=_stage2(kernels, "bf16"))
    run_checked(backend, plan, inputs, ref)
    batches, per = 10, 200
    host = 0.0
    for _ in range(batches):
        backend.stream_synchronize(0)
        t0 = time.perf_counter()
        for _ in range(per):
            plan.launch(inputs.dy, inputs.x, inputs.dw, 0)
        host += time.perf_counter() - t0
    backend.stream_synchronize(0)
    us = host / (batches * per) * 1e6
    dev = plan.time(inputs.dy, inputs.x, inputs.dw, iters=50)
    limit = float(os.environ.get("SKWGRAD_HOST_US_LIMIT", "20"))
    print(f"\n{backend.device_name}: plan.launch host time {us:.2f} us/launch ({reduction}, "
          f"{'main + Stage-2' if plan.stage2 else 'one kernel'}; target < 10 us); device time median {dev['median_us']:.1f} us")  # fmt: skip
    assert us < limit, f"host time per launch {us:.2f} us exceeds {limit} us"


# ---------------------------------------------------------------------------------------------
# Building the kernels on a build machine
# ---------------------------------------------------------------------------------------------
def _build_cache(argv):
    import argparse

    from skwgrad.aot.compile import compile_spec
    from skwgrad.cache import Cache

    ap = argparse.ArgumentParser(prog="python tests/test_gpu_launcher.py build-cache")
    ap.add_argument("dir")
    ap.add_argument("--arch", default="sm_90")
    a = ap.parse_args(argv)
    cache = Cache(a.dir)
    specs = gpu_specs(a.arch)
    for i, s in enumerate(specs, 1):
        t0 = time.time()
        key = cache.put(compile_spec(s, a.arch))
        print(f"[{i}/{len(specs)}] {s.label} {key[:12]} ({time.time() - t0:.1f} s)", flush=True)
    print(f"{len(specs)} kernels for {a.arch} in {cache.path}; on the GPU machine: SKWGRAD_CACHE={cache.path} pytest -m gpu tests/")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "build-cache":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        _build_cache(sys.argv[2:])
    else:
        print(__doc__)
