"""Run cases through the Triton interpreter in a subprocess (``_interp_runner.py``): the
interpreter is chosen when the kernels are decorated, so it cannot be switched on in the test
process. One place for the four interpreter test files."""

import json
import os
import subprocess
import sys
from pathlib import Path

RUNNER = Path(__file__).with_name("_interp_runner.py")


def run_interpreter(todo: list[dict], *, timeout: int = 900) -> dict:
    """Case id -> the runner's result, for each case dict of ``todo`` (it must have an ``id``)."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(Path(__file__).parents[1]))
    proc = subprocess.run([sys.executable, str(RUNNER)], input=json.dumps(todo), capture_output=True, text=True, env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == len(todo)
    return {c["id"]: r for c, r in zip(todo, lines)}


def check_dwconv_cases(cases, results) -> None:
    """Each depthwise case ran at the split degree its geometry resolves to, and its spec admits
    its problem (the claim behind each case id)."""
    from skwgrad.abi.conv import parse_problem
    from skwgrad.abi.launch import dwconv_geometry
    from skwgrad.abi.spec import KernelSpec

    for cid, problem, sp, ks in cases:
        p = parse_problem(problem)
        geo = dwconv_geometry(p, sp["variant"], bc=sp["bm"], taps=sp["bn"], br=sp["bk"], ks_count=ks, mode=sp["mode"])
        assert results[cid]["ks_count"] == geo.ks_count == ks, cid
        KernelSpec(**sp).check_problem(p)


def window_spec(variant, dtype="fp16", dw=None, *, vec=8, bc=16, kx=3, bp=4, mode="win4", sd=2) -> dict:
    """KernelSpec fields of a depthwise window kernel (the window interpreter files' cases)."""
    return dict(family="dwconv", variant=variant, dtype=dtype, dw_dtype=dw or dtype, vec_c=vec, vec_k=vec,
                bm=bc, bn=kx, bk=bp, num_warps=4, num_stages=1, mode=mode,
                precision="ieee" if dtype == "fp32" else "", spatial_dims=sd)  # fmt: skip


def depthwise_problem(g, rest) -> str:
    """A depthwise problem of ``g`` channels, batch 2, and the rest of its fields."""
    return f"n=2,c={g},k={g},g={g},{rest}"
