"""Compile one ``KernelSpec`` for one target into code-object bytes plus checked metadata.

Runs on a machine with no GPU: ``triton.compile`` cross-compiles for gfx942/gfx950 (hsaco) and
sm_90 (cubin). The kernarg layout is read back from the object (AMD metadata note / PTX entry)
and must equal the ABI declaration plus the compiler's trailing null pointers; a kernel that
needs global scratch is refused (the launcher passes those pointers as null).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from skwgrad.abi import codeobject
from skwgrad.abi.arch import get_arch
from skwgrad.abi.identity import COMPILER, PINNED_TRITON
from skwgrad.aot.kernels import kernel_for
from skwgrad.abi.spec import TMA_FAMILIES, KernelSpec
from skwgrad.errors import AbiError


@dataclass(frozen=True)
class CompiledKernel:
    spec: KernelSpec
    arch: str
    binary: bytes  # hsaco (AMD) or cubin (NVIDIA)
    metadata: dict  # JSON-able: name, threads, shared, kernarg layout, resources, ...

    @property
    def name(self) -> str:
        return self.metadata["name"]


def triton_target(arch):
    """Triton's GPUTarget for an ``abi.arch.Arch`` (the abi stays free of Triton)."""
    from triton.backends.compiler import GPUTarget

    if arch.backend == "hip":
        return GPUTarget("hip", arch.name, arch.wave_size)
    return GPUTarget("cuda", int(arch.name.removeprefix("sm_")), arch.wave_size)


def check_build_compiler() -> None:
    """Building needs exactly the pinned Triton: anything else would file objects under a key
    that does not describe them."""
    import triton

    if triton.__version__ != PINNED_TRITON:
        raise AbiError(
            f"skwgrad builds with triton=={PINNED_TRITON} (pinned; it is part of every cache key), "
            f"found triton {triton.__version__}: pip install triton=={PINNED_TRITON}"
        )


def compiler_identity() -> str:
    """The compiler part of cache keys; building refuses any Triton but the pinned one."""
    check_build_compiler()
    return COMPILER


_ENV_LOCK = threading.Lock()


@contextlib.contextmanager
def _triton_switches(spec: KernelSpec, target):
    """Triton's codegen switches that only an environment variable reaches, pinned per compile
    (set or cleared, never inherited: the cache key cannot see the builder's environment).
    ``DISABLE_MMA_V3``: tf32 on an arch with ``tf32_mma_sync`` runs mma.sync (see ``abi.arch``)."""
    want = {"DISABLE_MMA_V3": "1" if target.tf32_mma_sync and spec.precision == "tf32" else None}
    with _ENV_LOCK:
        saved = {k: os.environ.get(k) for k in want}
        try:
            for k, v in want.items():
                _set_env(k, v)
            yield
        finally:
            for k, v in saved.items():
                _set_env(k, v)


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


_RES_USAGE = re.compile(r"Function (\S+):\s*REG:(\d+) STACK:(\d+)")


def _cubin_resources(cubin: bytes, name: str) -> tuple[int, int]:
    """(registers, stack bytes) per thread of kernel ``name``, read by the CUDA toolkit's
    ``cuobjdump -res-usage`` that ships with Triton's NVIDIA backend."""
    import triton.backends.nvidia as nv

    tool = Path(nv.__file__).parent / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory(prefix="skwgrad-res-") as d:
        f = Path(d) / "k.cubin"
        f.write_bytes(cubin)
        out = subprocess.run([str(tool), "-res-usage", str(f)], capture_output=True, text=True, timeout=60)
    for fn, regs, stack in _RES_USAGE.findall(out.stdout):
        if fn == name:
            return int(regs), int(stack)
    raise AbiError(f"cuobjdump -res-usage did not report kernel {name} ({out.returncode}: {out.stderr.strip()[:200]})")


def _check_tensor_maps(spec: KernelSpec, maps: list[dict]) -> None:
    """The compiler's descriptor metadata must describe the boxes the spec names
    (``KernelSpec.tensor_map_boxes``), 16-bit elements (Triton splits a box wider than the swizzle
    into several loads, so the recorded inner size may be narrower)."""
    want = [(im2col, box) for im2col, box in spec.tensor_map_boxes]
    got = [(bool(m.get("is_im2col")), [int(v) for v in m["block_size"]]) for m in maps]
    ok = len(got) == len(want) and all(
        g[0] == w[0] and len(g[1]) == len(w[1]) and g[1][:-1] == w[1][:-1] and w[1][-1] % g[1][-1] == 0 for g, w in zip(got, want)
    )
    if not ok:
        raise AbiError(f"{spec.label}: the object's tensor descriptors {got} do not describe its boxes {want}")
    if any(int(m.get("elem_size", 0)) != 2 for m in maps):
        raise AbiError(f"{spec.label}: tensor descriptors of {[m.get('elem_size') for m in maps]}-byte elements; the kernel reads 16-bit ones")


def compile_spec(spec: KernelSpec, arch: str, *, keep_asm: bool = False) -> CompiledKernel:
    import triton
    from triton.compiler import ASTSource

    check_build_compiler()
    target = get_arch(arch)
    if spec.precision and spec.precision not in target.precisions:
        raise AbiError(
            f"{spec.label}: {arch} has no TF32 matrix instructions; "
            f"build fp32 kernels for {arch} with precision 'ieee'"
        )
    if spec.family in TMA_FAMILIES and not target.tma_im2col:
        raise AbiError(f"{spec.label}: {arch} has no TMA; the {spec.family} family builds for sm_90 only")
    fn, consts = kernel_for(spec, target)
    decl = spec.kernarg_decl
    if spec.family in TMA_FAMILIES:
        from triton.experimental.gluon._runtime import GluonASTSource

        from skwgrad.aot.kernels import dwconv_tma, tma

        types = (tma if spec.family == "wgrad_tma" else dwconv_tma).descriptor_types(spec)
        signature = decl.triton_signature(spec.dtype, spec.dw_dtype, types)
        signature.update({name: "constexpr" for name in consts})
        src = GluonASTSource(fn, signature, constexprs=consts, attrs=decl.triton_attrs())
    else:
        signature = decl.triton_signature(spec.dtype, spec.dw_dtype)
        signature.update({name: "constexpr" for name in consts})
        src = ASTSource(fn, signature, constexprs=consts, attrs=decl.triton_attrs())
    t0 = time.perf_counter()
    with _triton_switches(spec, target):
        compiled = triton.compile(
            src,
            target=triton_target(target),
            # fp fusion pinned: Triton's default follows an environment variable the key cannot see.
            options={"num_warps": spec.num_warps, "num_stages": spec.num_stages, "enable_fp_fusion": True,
                     **({"maxnreg": spec.max_regs} if spec.max_regs else {})},
        )
    seconds = time.perf_counter() - t0
    md = compiled.metadata
    name = md.name
    if getattr(md, "global_scratch_size", 0):
        raise AbiError(f"{spec.label} on {arch} needs {md.global_scratch_size} bytes of global scratch; skwgrad passes none")
    if target.backend == "hip":
        binary = compiled.asm["hsaco"]
        amd = codeobject.amdgpu_summary(binary, name)
        actual = [(a["offset"], a["size"]) for a in amd["args"]]
        kernarg_size = amd["kernarg_segment_size"]
    else:
        binary = compiled.asm["cubin"]
        amd = None
        # the driver's layout (EIATTR_KPARAM_INFO), which PTX's natural alignment misses for tensor maps
        actual = [(p["offset"], p["size"]) for p in codeobject.cubin_params(bytes(binary), name)]
        kernarg_size = None
    regs, stack = (amd["vgpr_count"], amd["scratch_bytes"]) if amd else _cubin_resources(bytes(binary), name)
    tail = len(actual) - len(decl.args)
    if tail < 0:
        raise AbiError(f"{spec.label} on {arch}: the object has fewer kernargs than declared")
    slots, size = decl.layout(tail)
    codeobject.check_layout([(s.offset, s.arg.size) for s in slots], actual, f"{spec.label} on {arch}")
    if kernarg_size is not None and kernarg_size < size:
        raise AbiError(f"{spec.label} on {arch}: kernarg segment is {kernarg_size} bytes, declared {size}")
    threads = spec.threads_per_cta(target.wave_size)
    if md.num_warps * target.wave_size != threads:
        raise AbiError(f"{spec.label} on {arch}: the object runs {md.num_warps} warps per CTA, the spec says {threads // target.wave_size}")
    tensor_maps = [dict(d) for d in (getattr(md, "tensordesc_meta", None) or [])]
    if spec.family in TMA_FAMILIES:
        _check_tensor_maps(spec, tensor_maps)
    metadata = {
        "name": name,
        "arch": arch,
        "label": spec.label,
        "binary_kind": "hsaco" if target.backend == "hip" else "cubin",
        "num_warps": spec.num_warps,
        "threads": threads,
        "shared": md.shared,
        "kernarg": {
            "names": list(decl.names),
            "offsets": [s.offset for s in slots[: len(decl.args)]],
            "size": size,
            "tail_pointers": tail,
        },
        "flags_per_cta": spec.flags_per_cta(target.wave_size),
        "compiler": compiler_identity(),
        "compile_seconds": round(seconds, 3),
        "regs": regs,  # per thread (AMD: VGPRs): what offline occupancy and the cost model read
        "stack_bytes": stack,  # per thread: local stack / scratch, i.e. spills
        "amd": amd,
    }
    if tensor_maps:
        metadata["tensor_maps"] = tensor_maps  # per descriptor: box, swizzle, element type (the launcher encodes with them)
    if keep_asm:
        metadata["_asm"] = {k: v for k, v in compiled.asm.items() if isinstance(v, str)}
    return CompiledKernel(spec, arch, bytes(binary), metadata)
