"""Triton kernel sources. Each kernel's runtime parameters are checked, at import, to be exactly
the ABI declaration of its (family, variant): the declaration is the source of truth and the
Triton signature is generated from it (``skwgrad.aot.compile``)."""

from __future__ import annotations

from skwgrad.abi.kernargs import DWCONV_TMA_VARIANTS, DWCONV_WALK_VARIANTS, GROUPED_VARIANTS, SPLITK_EPILOGUES, TMA_VARIANTS, declaration
from skwgrad.abi.identity import source_hash  # noqa: F401  (re-exported: the cache key's source part)
from skwgrad.aot.kernels import depthwise, dwconv_tma, grouped, pad, stage2, tma, wgrad


# (family, variant) -> jit function; what each must take, in order, before its constexprs.
_KERNELS = {
    **{("wgrad", v): wgrad.wgrad_splitk for v in SPLITK_EPILOGUES},
    **{("wgrad_sk", v): wgrad.wgrad_streamk_fixup for v in ("linear", "tree")},
    **{("wgrad_sk", v): wgrad.wgrad_streamk for v in ("atomic", "workspace")},
    ("stage2", "reduce"): stage2.stage2_reduce,
    ("pad", "rows"): pad.pad_rows,
    **{("dwconv", v): depthwise.dwconv_wgrad for v in ("direct", "atomic", "two_stage", "workspace")},
    **{("grouped", v): grouped.grouped_wgrad for v in GROUPED_VARIANTS},
    **{("wgrad_tma", v): tma.wgrad_tma for v in TMA_VARIANTS},
    **{("dwconv_tma", v): dwconv_tma.dwconv_tma for v in DWCONV_TMA_VARIANTS},
    **{("dwconv_walk", v): depthwise.dwconv_walk_wgrad for v in DWCONV_WALK_VARIANTS},
}


def _runtime_params(fn) -> list[str]:
    if hasattr(fn, "params"):  # JITFunction
        return [p.name for p in fn.params if not p.is_constexpr]
    import inspect  # InterpretedFunction (TRITON_INTERPRET=1)

    import triton.language as tl

    return [p.name for p in inspect.signature(fn.fn).parameters.values() if p.annotation is not tl.constexpr]


for (_family, _variant), _fn in _KERNELS.items():
    _want = list(declaration(_family, _variant).source_names)
    _have = _runtime_params(_fn)
    if _have != _want:
        raise ImportError(f"{_fn.__name__} parameters {_have} differ from the {_family}/{_variant} ABI {_want}")


def kernel_for(spec, target):
    """(jit function, constexpr values) for a ``KernelSpec`` on ``target`` (an ``abi.arch.Arch``)."""
    fn = _KERNELS[(spec.family, spec.variant)]
    if spec.family == "stage2":
        consts = stage2.constexprs(spec, target)
    elif spec.family == "pad":
        consts = pad.constexprs(spec)
    elif spec.family == "dwconv":
        consts = depthwise.constexprs(spec, target)
    elif spec.family == "dwconv_walk":
        consts = depthwise.walk_constexprs(spec, target)
    elif spec.family == "grouped":
        consts = grouped.constexprs(spec, target)
    elif spec.family == "wgrad_tma":
        consts = tma.constexprs(spec)
    elif spec.family == "dwconv_tma":
        consts = dwconv_tma.constexprs(spec)
    else:
        consts = wgrad.constexprs(spec, target)
    return fn, consts
