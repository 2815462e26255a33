"""Triton kernel sources. Each kernel's runtime parameters are checked, at import, to be exactly
the ABI declaration of its (family, variant): the declaration is the source of truth and the
Triton signature is generated from it (``skwgrad.aot.compile``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from skwgrad.abi.kernargs import ABI_VERSION, declaration
from skwgrad.aot.kernels import stage2, wgrad

FLAGS_PER_CTA = wgrad.FLAGS_PER_CTA
_SOURCES = sorted(Path(__file__).parent.glob("*.py"))

# (family, variant) -> jit function; what each must take, in order, before its constexprs.
_KERNELS = {
    **{("wgrad", v): wgrad.wgrad_splitk for v in ("direct", "atomic", "two_stage")},
    **{("wgrad_sk", v): wgrad.wgrad_streamk_fixup for v in ("linear", "tree")},
    **{("wgrad_sk", v): wgrad.wgrad_streamk for v in ("atomic", "workspace")},
    ("stage2", "reduce"): stage2.stage2_reduce,
}


def _runtime_params(fn) -> list[str]:
    return [p.name for p in fn.params if not p.is_constexpr]


for (_family, _variant), _fn in _KERNELS.items():
    _want = list(declaration(_family, _variant).names)
    _have = _runtime_params(_fn)
    if _have != _want:
        raise ImportError(f"{_fn.__name__} parameters {_have} differ from the {_family}/{_variant} ABI {_want}")


def kernel_for(spec):
    """(jit function, constexpr values) for a ``KernelSpec``."""
    fn = _KERNELS[(spec.family, spec.variant)]
    consts = stage2.constexprs(spec) if spec.family == "stage2" else wgrad.constexprs(spec)
    return fn, consts


def source_hash() -> str:
    """sha256 over the kernel sources and the ABI version: part of every cache key."""
    h = hashlib.sha256(f"abi={ABI_VERSION}\n".encode())
    for path in _SOURCES:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()
