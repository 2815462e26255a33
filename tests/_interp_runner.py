"""Run wgrad kernels through the Triton interpreter (TRITON_INTERPRET=1, CPU, torch tensors).

Invoked by tests/test_kernels_interp.py in a subprocess, since the interpreter is chosen when
the kernels are decorated. Reads a JSON list of cases on stdin, prints one JSON result per case.
Only reductions where no CTA waits on another can run here: the interpreter runs CTAs one after
another, so an owner waiting for a later CTA's flag would spin forever.
"""

import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from skwgrad.abi.conv import parse_problem  # noqa: E402
from skwgrad.abi.launch import STAGE2_BLOCK, spec_geometry  # noqa: E402
from skwgrad.aot.kernels import kernel_for  # noqa: E402
from skwgrad.abi.spec import KernelSpec  # noqa: E402
from skwgrad.reference import relative_error, tolerance, wgrad_reference  # noqa: E402

from skwgrad.abi.arch import get_arch  # noqa: E402

WAVE = 32  # the interpreter has no lanes; any wave size gives the same numerics
TARGET = get_arch("sm_90")
TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


@triton.jit
def _gdc_wait_done():
    tl.static_assert(True)


def _no_grid_dependency():
    """The interpreter runs the launcher's memset, then the kernel, to the end, so an atomic
    kernel's wait for the memset (``gdc_wait``, which it cannot execute) has nothing to wait for."""
    from skwgrad.aot.kernels import depthwise, grouped, stage2, wgrad

    for m in (depthwise, grouped, stage2, wgrad):
        m.gdc_wait = _gdc_wait_done


_no_grid_dependency()


def run(case):
    p = parse_problem(case["problem"])
    spec = KernelSpec(**case["spec"])
    spec.check_problem(p)
    geo = spec_geometry(p, spec, threads=WAVE * spec.num_warps, pool=case.get("pool", 0), ks_count=case.get("ks_count", 1))
    rng = np.random.default_rng(case.get("seed", 0))
    x64 = rng.standard_normal(p.x_shape)
    dy64 = rng.standard_normal(p.dy_shape)
    x = torch.tensor(x64).to(TORCH[p.dtype])
    dy = torch.tensor(dy64).to(TORCH[p.dtype])
    dw = torch.full((p.dw_numel,), float("nan"), dtype=TORCH[p.dw_dtype])  # poisoned
    if geo.workspace.zero_dw:
        dw.zero_()
    # The two arenas: zeroed (zero at rest; the kernels must leave it zero) and scratch (poisoned).
    lay = geo.workspace
    zeroed = torch.zeros((max(lay.arena_bytes("zeroed") // 4, 64),), dtype=torch.float32)
    scratch = torch.full((max(lay.arena_bytes("scratch") // 4, 64),), float("nan"), dtype=torch.float32)
    arena = {"zeroed": zeroed, "scratch": scratch}

    def buf(region, dtype=torch.float32):
        r = lay.region(region)
        return arena[r.arena][r.offset // 4 :].view(dtype)

    args = {"dy": dy, "x": x, "dw": dw, "ws_bytes": 0, **geo.scalars}
    args["ws_ptr"] = buf("replicas") if lay.needs_stage2 else scratch
    if "sk_flags" in spec.kernarg_decl.names:
        args["sk_flags"] = buf("flags", torch.int32)
        args["sk_partials"] = buf("partials")
    fn, consts = kernel_for(spec, TARGET)
    names = [n for n in spec.kernarg_decl.names]
    fn[(geo.grid,)](*[args[n] for n in names], **consts)
    if geo.workspace.needs_stage2:
        s2 = KernelSpec("stage2", "reduce", p.dw_dtype, p.dw_dtype, block=STAGE2_BLOCK)
        fn2, consts2 = kernel_for(s2, TARGET)
        fn2[(geo.stage2_grid,)](args["ws_ptr"], dw, **geo.stage2_scalars, **consts2)
    # Rebuild the reference from the rounded inputs the kernel saw.
    ref = wgrad_reference(p, x.to(torch.float64).numpy(), dy.to(torch.float64).numpy())
    out = dw.to(torch.float64).numpy().reshape(p.dw_shape)
    err = relative_error(out, ref)
    part = geo.partition
    return {
        "label": spec.label,
        "problem": case["problem"],
        "rel_err": err,
        "tol": tolerance(p.dtype, p.dw_dtype, spec.precision),
        "grid": geo.grid,
        "sk_ctas": part.sk_ctas if part else 0,
        "dp_tiles": part.dp_tiles if part else geo.tiling.num_tiles,
        "ks_count": geo.ks_count,
        "zeroed_left_nonzero": int(torch.count_nonzero(zeroed)),  # the zero-at-rest contract
        "zeroed_bytes": lay.arena_bytes("zeroed"),  # what of it the launch used (flags, a workspace replica)
        "dw_numel": p.dw_numel,
    }


if __name__ == "__main__":
    for case in json.load(sys.stdin):
        print(json.dumps(run(case)), flush=True)
