"""The PyTorch ops behind ``skwgrad.torch`` (imported on first use; needs torch).

Two ops, opaque to the tracers (no graph break) and traced through their fakes:

- ``skwgrad::conv_weight_grad(x, dy, weight_shape, stride, padding, dilation, groups, dw_dtype,
  name)``: dW shaped like the weight ``(K, C/groups, [Z,] Y, X)``, dtype ``dw_dtype`` (default:
  x's), always in channels-last memory (``channels_last`` / ``channels_last_3d`` strides exactly,
  on both paths, so the fake and the real op agree). It runs skwgrad's cached kernel when one
  fits, else PyTorch's native weight gradient (``aten.convolution_backward`` with output_mask
  ``[False, True, False]``), per shape; see ``NATIVE_REASONS``.
- ``skwgrad::conv(x, weight, bias, stride, padding, dilation, groups, name)``: the forward
  convolution (``aten.convolution``), with an autograd formula whose backward computes dX and
  the bias gradient with PyTorch and dW with ``conv_weight_grad``.

``conv2d``/``conv3d`` and patched modules run an ``autograd.Function`` (``_EagerConv``) whose
forward is ``aten.convolution`` and whose backward is ``aten.convolution_backward`` for dX and the
bias plus, for dW, ``conv_weight_grad``'s Python directly in eager mode or the op itself when
traced. torch.compile traces that function (no graph break): its compiled forward calls no skwgrad
op, its compiled backward calls ``skwgrad::conv_weight_grad``. ``skwgrad::conv`` is what the other
tracers record (export without dynamo, make_fx, FakeTensor, functorch transforms, jit tracing).
Why: a Python op's dispatch costs tens of microseconds of host time per call (custom_op's more),
enough to make a GPU step host-bound (H200 run V3: a compiled stack of small layers paid 229 us a
layer a step through ``skwgrad::conv``).

Which path each call took is counted per problem and per layer (``stats()``) and logged once per
(problem, layer, path, reason) on the ``skwgrad.torch`` logger at DEBUG (WARNING for a damaged
cache entry or a failed check). Counters count the weight gradients computed (eager calls and
compiled-graph executions of the op): under CUDA-graph replay the op's Python does not run, so only the warm-up and capture runs are counted.
"""

import csv
import logging
import os
import threading
from typing import Optional

import torch
from torch import Tensor, nn

from skwgrad.abi.conv import ConvProblem
from skwgrad.errors import (
    BackendError,
    CacheError,
    CaptureError,
    CheckFailed,
    DamagedEntryError,
    LayoutError,
    ProblemError,
    SkwgradError,
)

log = logging.getLogger("skwgrad.torch")

_DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
_DTYPES = {v: k for k, v in _DTYPE_NAMES.items()}

# Why a weight gradient ran natively (the keys of stats()[...]["reasons"]).
NATIVE_REASONS = {
    "disabled": "skwgrad.torch.enabled(False) (or SKWGRAD_TORCH=0) is in effect",
    "device": "the tensors are not on a CUDA/ROCm device (CPU, MPS, ...)",
    "dtype": "x/dy are not fp16/bf16/fp32, differ, or dW is neither their dtype nor fp32",
    "problem": "skwgrad refuses the problem (e.g. a tensor past 2**31 elements)",
    "deterministic": "torch.use_deterministic_algorithms(True) and this launcher cannot restrict itself to deterministic reductions",
    "tuned_native": "the tuned record for this problem says PyTorch's kernel is faster",
    "no_kernel": "no cached kernel fits the problem (build one with compile-all)",
    "damaged_entry": "a cache entry failed its integrity check",
    "cache": "the kernel cache is unusable",
    "backend": "no usable GPU runtime for skwgrad (cuda-bindings / hip-python)",
    "layout": "the tensors' memory layout was refused",
    "capture": "the launch could not be captured into the current CUDA graph",
    "check_failed": "verify mode compared skwgrad's dW with PyTorch's and they differ",
}
# Reasons that hold for the problem until clear_decisions(): the next call goes native at once.
_STICKY = {"device", "dtype", "problem", "deterministic", "tuned_native", "no_kernel", "damaged_entry", "cache",
           "backend", "layout", "check_failed"}  # fmt: skip

# verify mode: max|dW - dW_native| / max|dW_native| allowed, by the coarser of input and dW dtype.
_VERIFY_BOUND = {"bf16": 2e-2, "fp16": 4e-3, "tf32": 4e-3, "fp32": 1e-4}


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------
class _Config:
    def __init__(self):
        self.enabled = os.environ.get("SKWGRAD_TORCH", "1").strip().lower() not in ("0", "off", "false", "no")
        self.verify = os.environ.get("SKWGRAD_TORCH_VERIFY", "0").strip().lower() in ("1", "on", "true", "yes")
        self.cache = None  # None: the launcher's default ($SKWGRAD_CACHE, else $XDG_CACHE_HOME/skwgrad)
        self.streamk = "auto"
        self.reduction = "auto"


_cfg = _Config()
_UNSET = object()


def configure(*, cache=_UNSET, verify=_UNSET, streamk=_UNSET, reduction=_UNSET, tune=_UNSET) -> dict:
    """Set how the op calls skwgrad: ``cache`` (a path or cache object; None = the default cache),
    ``verify`` (compare the first skwgrad dW of every problem with PyTorch's and fall back for
    that problem when they differ; also ``SKWGRAD_TORCH_VERIFY=1``), ``streamk``/``reduction``
    (passed to ``skwgrad.wgrad``), ``tune`` (the launcher's tune on first use,
    ``skwgrad.launcher.api.set_tuning``: True/False, None = ``$SKWGRAD_TUNE``; the first call of a
    new shape then times the cached kernels and PyTorch's own weight gradient, and the shape
    falls back to PyTorch, reason ``tuned_native``, when PyTorch's was faster). Forgets earlier
    per-problem decisions. Returns the settings."""
    if cache is not _UNSET:
        _cfg.cache = cache
    if verify is not _UNSET:
        _cfg.verify = bool(verify)
    if streamk is not _UNSET:
        _cfg.streamk = streamk
    if reduction is not _UNSET:
        _cfg.reduction = reduction
    if tune is not _UNSET:
        _api()["api"].set_tuning(None if tune is None else bool(tune))
    clear_decisions()
    return {"enabled": _cfg.enabled, "verify": _cfg.verify, "cache": _cfg.cache, "streamk": _cfg.streamk,
            "reduction": _cfg.reduction, "tune": _tuning_on()}  # fmt: skip


def _tuning_on():
    """The launcher's tune-on-first-use setting (None when the launcher cannot be imported)."""
    try:
        return bool(_api()["api"].tuning_enabled())
    except Exception:
        return None


class enabled:
    """Switch skwgrad's weight gradient on or off for the whole process, like
    ``torch.set_grad_enabled``: ``enabled(False)`` switches it off at once; used as a context
    manager (``with skwgrad.torch.enabled(False): ...``) it restores the previous state on exit.
    Off, every ``conv_weight_grad`` runs PyTorch's native weight gradient (counted as reason
    ``disabled``). The flag is read when the op runs: in eager mode and compiled graphs at every
    call, for a CUDA graph when it is captured."""

    def __init__(self, mode: bool = True):
        self.prev = _cfg.enabled
        _cfg.enabled = bool(mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _cfg.enabled = self.prev
        return False


def is_enabled() -> bool:
    return _cfg.enabled


# ---------------------------------------------------------------------------------------------
# Counters
# ---------------------------------------------------------------------------------------------
_lock = threading.Lock()
_by_problem: dict = {}
_by_layer: dict = {}
_skipped_modules: dict = {}
_counted: dict = {}  # (problem, layer, path, reason, cast) -> the counter entries it adds to (and was logged)
_LOUD = {"damaged_entry", "cache", "check_failed", "capture"}


def _entry(table, key, problem=None):
    e = table.get(key)
    if e is None:
        e = table[key] = {"skwgrad": 0, "native": 0, "reasons": {}}
        if problem is not None:
            e["problem"] = problem
    return e


def _count(desc: str, layer: str, path: str, reason: str | None, detail: str = "", cast: bool = False) -> None:
    token = (desc, layer, path, reason, cast)
    with _lock:
        entries = _counted.get(token)
        first = entries is None
        if first:
            entries = _counted[token] = [_entry(_by_problem, desc)] + ([_entry(_by_layer, layer, desc)] if layer else [])
        for e in entries:
            e[path] += 1
            if cast:
                e["dw_cast"] = e.get("dw_cast", 0) + 1
            if reason:
                e["reasons"][reason] = e["reasons"].get(reason, 0) + 1
    if first:  # logged once per (problem, layer, path, reason, cast)
        level = logging.WARNING if reason in _LOUD else logging.DEBUG
        log.log(level, "wgrad %s%s: %s%s%s%s", desc, f" (layer {layer})" if layer else "", path,
                f" [{reason}: {NATIVE_REASONS.get(reason, reason)}]" if reason else "",
                " (dW computed in the input dtype and widened: no fp32-dW kernel)" if cast else "",
                f": {detail}" if detail else "")  # fmt: skip


def stats() -> dict:
    """A snapshot of which path the weight gradients took:
    ``{"skwgrad": n, "native": n, "reasons": {reason: n}, "problems": {problem: {...}},
    "layers": {layer name: {"skwgrad", "native", "reasons", "problem"}}, "skipped_modules":
    {reason: n}}`` (problem = ``ConvProblem.describe()``; layers are the names ``patch`` gave).
    An entry's ``dw_cast`` counts skwgrad calls that had no fp32-dW kernel for half inputs and
    computed dW in the input dtype, then widened it (as PyTorch's autocast does)."""
    import copy

    with _lock:
        problems = copy.deepcopy(_by_problem)
        layers = copy.deepcopy(_by_layer)
        skipped = dict(_skipped_modules)
    reasons: dict = {}
    for e in problems.values():
        for r, n in e["reasons"].items():
            reasons[r] = reasons.get(r, 0) + n
    return {
        "skwgrad": sum(e["skwgrad"] for e in problems.values()),
        "dw_cast": sum(e.get("dw_cast", 0) for e in problems.values()),
        "native": sum(e["native"] for e in problems.values()),
        "reasons": reasons,
        "problems": problems,
        "layers": layers,
        "skipped_modules": skipped,
    }


def reset_stats() -> None:
    """Zero the counters (the per-problem decisions stay; see ``clear_decisions``)."""
    with _lock:
        _by_problem.clear()
        _by_layer.clear()
        _skipped_modules.clear()
        _counted.clear()


# ---------------------------------------------------------------------------------------------
# Shapes, layouts, dtypes
# ---------------------------------------------------------------------------------------------
def _cl_format(sd: int):
    return torch.channels_last_3d if sd == 3 else torch.channels_last


def _cl_strides(shape) -> tuple:
    """The strides ``torch.empty(shape, memory_format=channels_last[_3d])`` gives."""
    shape = tuple(shape)
    try:
        got = _CL_STRIDES.get(shape)
    except TypeError:  # symbolic sizes are not hashable
        return _cl_strides_of(shape)
    if got is None:
        got = _CL_STRIDES[shape] = _cl_strides_of(shape)
    return got


_CL_STRIDES: dict = {}


def _cl_strides_of(shape) -> tuple:
    k, c, *sp = shape
    strides = [0] * len(shape)
    acc = 1
    strides[1] = acc
    acc *= c
    for i in range(len(sp) - 1, -1, -1):
        strides[2 + i] = acc
        acc *= sp[i]
    strides[0] = acc
    return tuple(strides)


def _is_cl(t: Tensor) -> bool:
    sd = t.dim() - 2
    return sd in (2, 3) and t.is_contiguous(memory_format=_cl_format(sd)) and not t.is_contiguous()


def _as_cl(t: Tensor, shape, dtype) -> Tensor:
    """t with dtype and exact channels-last strides (t itself when it already has them)."""
    if t.dtype == dtype and tuple(t.shape) == tuple(shape) and tuple(t.stride()) == _cl_strides(shape):
        return t
    out = torch.empty(shape, dtype=dtype, device=t.device, memory_format=_cl_format(len(shape) - 2))
    out.copy_(t)
    return out


def _tup(v, sd: int, what: str) -> list:
    if isinstance(v, int):
        return [v] * sd
    v = [int(e) for e in v]
    if len(v) == 1:
        return v * sd
    if len(v) != sd:
        raise ValueError(f"{what} must be one int or {sd} ints, got {v!r}")
    return v


def _resolve_padding(padding, ksize, dilation, sd: int):
    """A symmetric per-dim padding list, or None for a 'same' padding PyTorch makes asymmetric."""
    if isinstance(padding, str):
        if padding == "valid":
            return [0] * sd
        if padding == "same":
            total = [d * (k - 1) for d, k in zip(dilation, ksize)]
            if any(t % 2 for t in total):
                return None
            return [t // 2 for t in total]
        raise ValueError(f"padding={padding!r}: use 'valid', 'same', an int or a tuple")
    return _tup(padding, sd, "padding")


def _fp32_precision() -> str:
    """How PyTorch runs fp32 convolutions here: 'tf32' or 'ieee' (cuDNN's setting)."""
    try:
        p = torch.backends.cudnn.conv.fp32_precision
        if p in ("tf32", "ieee"):
            return p
    except AttributeError:
        pass
    return "tf32" if torch.backends.cudnn.allow_tf32 else "ieee"


def _problem(x_shape, weight_shape, stride, padding, dilation, groups, xdt: str, wdt: str, precision: str) -> ConvProblem:
    return ConvProblem.from_torch(
        batch=int(x_shape[0]), in_channels=int(x_shape[1]), out_channels=int(weight_shape[0]),
        input_size=tuple(int(s) for s in x_shape[2:]), kernel_size=tuple(int(s) for s in weight_shape[2:]),
        stride=tuple(stride), padding=tuple(padding),
        dilation=tuple(dilation), groups=int(groups), dtype=xdt, dw_dtype=wdt if wdt != xdt else "",
        precision=precision if xdt == "fp32" else "",
    )  # fmt: skip


def _plain_desc(x, weight_shape, stride, padding, dilation, groups, dw_dtype) -> str:
    return (f"n={x.shape[0]},c={x.shape[1]},k={weight_shape[0]},g={groups},in={'x'.join(map(str, x.shape[2:]))},"
            f"filter={'x'.join(map(str, weight_shape[2:]))},stride={'x'.join(map(str, stride))},"
            f"padding={'x'.join(map(str, padding))},dilation={'x'.join(map(str, dilation))},"
            f"dtype={str(x.dtype).replace('torch.', '')},dw_dtype={str(dw_dtype).replace('torch.', '')}")  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The launcher, imported on the first GPU call only
# ---------------------------------------------------------------------------------------------
_launcher = None


def _api():
    global _launcher
    if _launcher is None:
        from skwgrad.launcher import api

        # The launcher's options (LaunchOptions) take deterministic=.
        _launcher = {"api": api, "deterministic": True, "native_preferred": getattr(api, "native_preferred", None)}
    return _launcher


def _reason_of(e: SkwgradError) -> str:
    try:
        from skwgrad.launcher.select import NoKernelError
    except Exception:  # pragma: no cover - the launcher always has it
        NoKernelError = ()
    if NoKernelError and isinstance(e, NoKernelError):
        return "no_kernel"
    for cls, reason in ((DamagedEntryError, "damaged_entry"), (CacheError, "cache"), (CaptureError, "capture"),
                        (BackendError, "backend"), (LayoutError, "layout"), (ProblemError, "problem"),
                        (CheckFailed, "check_failed")):  # fmt: skip
        if isinstance(e, cls):
            return reason
    return "problem"


# ---------------------------------------------------------------------------------------------
# Per-problem decisions
# ---------------------------------------------------------------------------------------------
_decisions: dict = {}
_verified: set = set()


def clear_decisions() -> None:
    """Forget which problems fell back (e.g. after building kernels into the cache)."""
    with _lock:
        _decisions.clear()
        _verified.clear()


def _gpu_device(x: Tensor) -> bool:
    return x.device.type == "cuda"  # ROCm builds of PyTorch call their GPUs "cuda" too


def _decide(x, dy, weight_shape, stride, padding, dilation, groups, dw_dtype, deterministic, precision):
    """[description, problem or None, sticky native reason or None, dtype skwgrad computes dW in
    (None: the dW dtype), whether the tuned record was read again after the first launch, the
    launcher's resolved calls (``_skwgrad_wgrad``)], memoised per shape."""
    # weight_shape, stride, padding and dilation are tuples (_prepare); shapes are torch.Size (tuples)
    key = (x.device, x.shape, dy.shape, weight_shape, stride, padding, dilation, groups, x.dtype, dy.dtype, dw_dtype,
           deterministic, precision)  # fmt: skip
    d = _decisions.get(key)
    if d is not None:
        return key, d
    problem, reason = None, None
    xdt, wdt = _DTYPE_NAMES.get(x.dtype), _DTYPE_NAMES.get(dw_dtype)
    if xdt is None or dy.dtype != x.dtype or wdt not in (xdt, "fp32"):
        reason = "dtype"
    else:
        try:
            problem = _problem(x.shape, weight_shape, stride, padding, dilation, groups, xdt, wdt, precision)
        except ProblemError:
            reason = "problem"
    desc = problem.describe() if problem is not None else _plain_desc(x, weight_shape, stride, padding, dilation, groups, dw_dtype)
    if reason is None and not _gpu_device(x):
        reason = "device"
    if reason is None:
        try:
            launcher = _api()
        except (ImportError, SkwgradError):
            launcher, reason = None, "backend"
        if launcher is not None:
            if deterministic and not launcher["deterministic"]:
                reason = "deterministic"
            elif launcher["native_preferred"] is not None:
                try:
                    if launcher["native_preferred"](problem, cache=_cfg.cache, device=x.device.index):
                        reason = "tuned_native"
                except SkwgradError as e:
                    reason = _reason_of(e)
    d = [desc, problem, reason, None, False, {}]
    with _lock:
        _decisions[key] = d
    return key, d


def _native_wgrad(x, dy, weight_shape, stride, padding, dilation, groups, dw_dtype) -> Tensor:
    sd = len(weight_shape) - 2
    # Only the weight's shape, dtype and memory format matter to the backend; this follows the
    # activations' format, as the weight of a channels-last model is channels-last too.
    fmt = _cl_format(sd) if (_is_cl(x) or _is_cl(dy)) else torch.contiguous_format
    w = torch.empty(weight_shape, dtype=x.dtype, device=x.device, memory_format=fmt)
    dw = torch.ops.aten.convolution_backward.default(
        dy, x, w, None, stride, padding, dilation, False, [0] * sd, groups, [False, True, False]
    )[1]
    return _as_cl(dw, weight_shape, dw_dtype)


def _skwgrad_wgrad(x, dy, weight_shape, stride, padding, dilation, groups, dw_dtype, deterministic, precision,
                   calls=None) -> Tensor:
    """skwgrad's dW, channels-last, allocated by torch's caching allocator. ``calls`` (a decision's
    dict) remembers the launcher's resolved call per (dW dtype, x's and dy's strides), so a repeated
    call only launches (``skwgrad.launcher.api.torch_call``)."""
    api = _api()["api"]
    ck = (dw_dtype, x.stride(), dy.stride())
    got = calls.get(ck) if calls is not None else None
    gen = api.calls_generation()
    if got is None or got[0] != gen:
        kw = dict(filter_size=tuple(weight_shape[2:]), stride=tuple(stride), padding=tuple(padding),
                  dilation=tuple(dilation), groups=groups, cache=_cfg.cache, dw_dtype=_DTYPE_NAMES[dw_dtype],
                  layout="nchw")  # torch tensors are PyTorch-shaped, whatever the strides  # fmt: skip
        if _cfg.streamk != "auto":
            kw["streamk"] = _cfg.streamk
        if _cfg.reduction != "auto":
            kw["reduction"] = _cfg.reduction
        if deterministic:
            kw["deterministic"] = True
        if x.dtype == torch.float32:
            kw["precision"] = precision
        got = (gen, api.torch_call(x, dy, **kw))
        if calls is not None:
            calls[ck] = got
    return got[1](x, dy, None, None)


def _capturing() -> bool:
    try:
        return torch.cuda.is_current_stream_capturing()
    except Exception:  # pragma: no cover
        return False


def _verify(dw, x, dy, weight_shape, stride, padding, dilation, groups, dw_dtype, problem):
    ref = _native_wgrad(x, dy, weight_shape, stride, padding, dilation, groups, torch.float32)
    err = float((dw.float() - ref).abs().max()) / max(float(ref.abs().max()), 1e-30)
    names = [problem.dtype if problem.dtype != "fp32" else (problem.precision or "fp32"), problem.dw_dtype]
    bound = max(_VERIFY_BOUND.get(n, 1e-4) for n in names)
    if not err <= bound:
        raise CheckFailed(f"skwgrad dW differs from PyTorch's by {err:.3g} (relative to max |dW|), bound {bound:.3g}")


def _recheck_tuned(d, x, weight_shape, stride, padding, dilation, groups, precision) -> None:
    """Once per shape, after its first skwgrad launch: read the tuned record again. With tune on
    first use, that launch is what timed the candidates and PyTorch's op (the record did not
    exist when the shape was first decided); when PyTorch's was faster, later calls go native
    (sticky ``tuned_native``). The record is keyed by the problem as launched (its dW dtype is
    the input dtype when dW was computed so and widened)."""
    problem, compute = d[1], d[3]
    pref = _api()["native_preferred"]
    if pref is None or problem is None:
        return
    if compute is not None:
        xdt = _DTYPE_NAMES.get(x.dtype)
        problem = _problem(x.shape, weight_shape, stride, padding, dilation, groups, xdt, _DTYPE_NAMES[compute], precision)
    try:
        if pref(problem, cache=_cfg.cache, device=x.device.index):
            d[2] = "tuned_native"
    except SkwgradError:
        pass  # the launch just worked: an unreadable record leaves the decision as it is


def _prepare(x, dy, weight_shape, stride, padding, dilation, groups, dw_dtype) -> tuple:
    """The settings and the memoised decision of one weight gradient: (weight_shape, stride,
    padding, dilation, dw_dtype, deterministic, precision, key, decision, native reason known
    before trying skwgrad or None)."""
    weight_shape, stride, padding, dilation = tuple(weight_shape), tuple(stride), tuple(padding), tuple(dilation)
    dw_dtype = dw_dtype if dw_dtype is not None else x.dtype
    deterministic = torch.are_deterministic_algorithms_enabled()
    precision = _fp32_precision() if x.dtype == torch.float32 else ""
    key, d = _decide(x, dy, weight_shape, stride, padding, dilation, groups, dw_dtype, deterministic, precision)
    reason = d[2]
    if reason is None and not _cfg.enabled:
        reason = "disabled"
    return weight_shape, stride, padding, dilation, dw_dtype, deterministic, precision, key, d, reason


def _wgrad(x, dy, weight_shape, stride, padding, dilation, groups, dw_dtype, name, prepared=None) -> Tensor:
    if prepared is None:
        prepared = _prepare(x, dy, weight_shape, stride, padding, dilation, groups, dw_dtype)
    weight_shape, stride, padding, dilation, dw_dtype, deterministic, precision, key, d, reason = prepared
    desc, problem, _, compute = d[:4]
    detail = ""
    if reason is None:
        args = (x, dy, weight_shape, stride, padding, dilation, groups)
        try:
            try:
                dw = _skwgrad_wgrad(*args, compute or dw_dtype, deterministic, precision, d[5])
            except SkwgradError as e:
                # Half inputs with an fp32 weight (autocast) and no fp32-dW kernel: compute dW in
                # the input dtype and widen it, which is what PyTorch's autocast does natively.
                if compute is not None or dw_dtype == x.dtype or _reason_of(e) != "no_kernel":
                    raise
                dw = _skwgrad_wgrad(*args, x.dtype, deterministic, precision, d[5])
                d[3] = compute = x.dtype
            if compute is not None:
                dw = _as_cl(dw, weight_shape, dw_dtype)
            if _cfg.verify and key not in _verified and not _capturing():
                _verify(dw, x, dy, weight_shape, stride, padding, dilation, groups, dw_dtype, problem)
                with _lock:
                    _verified.add(key)
        except SkwgradError as e:
            reason, detail = _reason_of(e), str(e).splitlines()[0] if str(e) else type(e).__name__
            if reason in _STICKY:
                d[2] = reason
        else:
            _count(desc, name, "skwgrad", None, cast=compute is not None)
            if not d[4]:
                d[4] = True
                _recheck_tuned(d, x, weight_shape, stride, padding, dilation, groups, precision)
            return dw
    _count(desc, name, "native", reason, detail)
    return _native_wgrad(x, dy, weight_shape, stride, padding, dilation, groups, dw_dtype)


# ---------------------------------------------------------------------------------------------
# The ops
# ---------------------------------------------------------------------------------------------
# skwgrad::conv_weight_grad is declared with torch.library.Library (define + one kernel), not
# torch.library.custom_op: the op has no autograd formula of its own (it is a backward), and
# custom_op wraps every call in Python layers (an autograd kernel, a backend wrapper that checks
# aliasing, a dynamo guard) that cost more host time than the op's own work. H200 run V2:
# 113 us per call through custom_op against 47 us for its Python body and 27 us for
# skwgrad.wgrad on the same small layer; compiled graphs call the op through this dispatcher.
_LIB = torch.library.Library("skwgrad", "FRAGMENT")
_LIB.define(
    "conv_weight_grad(Tensor x, Tensor dy, SymInt[] weight_shape, int[] stride, int[] padding, int[] dilation, "
    "int groups, ScalarType? dw_dtype=None, str name='') -> Tensor"
)


class _NoDoubleBackward(torch.autograd.Function):
    """Marks skwgrad's dW as not differentiable once more: a backward through it raises (the
    native path's dW keeps PyTorch's own double-backward graph)."""

    @staticmethod
    def forward(ctx, dw, x, dy):
        return dw.view_as(dw)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(
            "skwgrad::conv_weight_grad has no double backward: a gradient through skwgrad's weight gradient "
            "(create_graph=True, then backward through dW) is not supported; run that model unpatched "
            "(skwgrad.torch.unpatch) or with skwgrad.torch.enabled(False)"
        )


def _conv_weight_grad_kernel(x, dy, weight_shape, stride, padding, dilation, groups, dw_dtype=None, name=""):
    dw = _wgrad(x, dy, weight_shape, stride, padding, dilation, groups, dw_dtype, name)
    if dw.grad_fn is None and torch.is_grad_enabled() and (x.requires_grad or dy.requires_grad):
        dw = _NoDoubleBackward.apply(dw, x, dy)
    return dw


# One kernel for every backend (CPU and the others take the native path). The Autograd key falls
# through to it, so it sees autograd as the caller does: the native path's aten ops record their
# own graph, and skwgrad's dW is marked above (the check costs nothing when grad mode is off).
_LIB.impl("conv_weight_grad", _conv_weight_grad_kernel, "CompositeExplicitAutograd")
_LIB.impl("conv_weight_grad", torch.library.fallthrough_kernel, "Autograd")


@torch.library.register_fake("skwgrad::conv_weight_grad", lib=_LIB)
def _conv_weight_grad_fake(x, dy, weight_shape, stride, padding, dilation, groups, dw_dtype=None, name=""):
    return torch.empty(list(weight_shape), dtype=dw_dtype if dw_dtype is not None else x.dtype, device=x.device,
                       memory_format=_cl_format(len(weight_shape) - 2))  # fmt: skip


_CONV_WEIGHT_GRAD = torch.ops.skwgrad.conv_weight_grad.default


def conv_weight_grad(
    x: Tensor,
    dy: Tensor,
    weight_shape: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    dw_dtype: Optional[torch.dtype] = None,
    name: str = "",
) -> Tensor:
    """dW of ``y = conv(x, W)`` given ``dy``: shaped ``weight_shape`` (PyTorch's weight shape),
    dtype ``dw_dtype`` (default x's; fp32 with half inputs under autocast), channels-last
    strides. stride/padding/dilation: one value per spatial dim (padding symmetric). ``name``
    labels the call in ``stats()["layers"]``. skwgrad's kernel when one fits, else PyTorch's.
    Calls the op ``torch.ops.skwgrad.conv_weight_grad`` (what a traced graph records)."""
    return _CONV_WEIGHT_GRAD(x, dy, weight_shape, stride, padding, dilation, groups, dw_dtype, name)


def _params_like(x, weight, bias):
    """Under autocast the weight and bias stay in their dtype; the forward runs in x's."""
    w = weight if weight.dtype == x.dtype else weight.to(x.dtype)
    b = bias if bias is None or bias.dtype == x.dtype else bias.to(x.dtype)
    return w, b


@torch.library.custom_op("skwgrad::conv", mutates_args=())
def _conv_op(
    x: Tensor,
    weight: Tensor,
    bias: Optional[Tensor],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    name: str = "",
) -> Tensor:
    w, b = _params_like(x, weight, bias)
    return torch.ops.aten.convolution(x, w, b, stride, padding, dilation, False, [0] * (x.dim() - 2), groups)


@_conv_op.register_fake
def _conv_op_fake(x, weight, bias, stride, padding, dilation, groups, name=""):
    w, b = _params_like(x, weight, bias)
    return torch.ops.aten.convolution(x, w, b, stride, padding, dilation, False, [0] * (x.dim() - 2), groups)


def _conv_setup(ctx, inputs, output):
    x, weight, bias, stride, padding, dilation, groups, name = inputs
    ctx.save_for_backward(x, weight)
    ctx.conv = (list(stride), list(padding), list(dilation), groups, name)
    ctx.bias_dtype = bias.dtype if bias is not None else None


def _conv_backward(ctx, grad):
    x, weight = ctx.saved_tensors
    stride, padding, dilation, groups, name = ctx.conv
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    sd = x.dim() - 2
    gx = gw = gb = None
    if need_x or need_b:
        w = weight if weight.dtype == x.dtype else weight.to(x.dtype)
        gx, _, gb = torch.ops.aten.convolution_backward(
            grad, x, w, [weight.shape[0]] if need_b else None, stride, padding, dilation, False, [0] * sd, groups,
            [need_x, False, need_b],
        )  # fmt: skip
        if gb is not None and gb.dtype != ctx.bias_dtype:
            gb = gb.to(ctx.bias_dtype)
    if need_w:
        gw = torch.ops.skwgrad.conv_weight_grad(x, grad, list(weight.shape), stride, padding, dilation, groups,
                                                weight.dtype, name)  # fmt: skip
    return gx, gw, gb, None, None, None, None, None


_conv_op.register_autograd(_conv_backward, setup_context=_conv_setup)


# ---------------------------------------------------------------------------------------------
# The eager path: the same computation without the custom-op dispatcher
# ---------------------------------------------------------------------------------------------
# A custom op's call (schema parsing of the arguments, the Python autograd kernel it generates, the
# nested conv_weight_grad call in the backward) costs some hundred microseconds of host time per
# convolution, enough to make a GPU step host-bound, eager or compiled without CUDA graphs. So the
# patched convolution is this autograd.Function: the forward is aten.convolution, the backward
# computes dX/dbias with one aten.convolution_backward and dW with _wgrad, the Python behind
# skwgrad::conv_weight_grad (same decisions, fallbacks, counters, deterministic handling, dtypes
# and streams), or with the op itself where the backward is traced. torch.compile traces the
# function; the other tracers (make_fx, FakeTensor and functorch modes, jit) record skwgrad::conv.
_PLAIN_TYPES = (Tensor, nn.Parameter)


_dispatch_modes = torch._C._len_torch_dispatch_stack
_jit_tracing = torch._C._is_tracing
_functorch_active = torch._C._are_functorch_transforms_active


def _eager(x, weight, bias) -> bool:
    """Whether this call runs eagerly on plain tensors (not traced), so _EagerConv may run it.
    is_compiling() comes first: under dynamo it is a constant and the rest is never traced. The
    other checks call torch._C directly (``torch.jit.is_tracing()`` and friends are Python
    wrappers around them: host time on every conv of every step)."""
    if torch.compiler.is_compiling():
        return False
    if type(x) not in _PLAIN_TYPES or type(weight) not in _PLAIN_TYPES or (bias is not None and type(bias) not in _PLAIN_TYPES):
        return False
    # meta tensors, FakeTensor/proxy/functional modes, jit tracing, functorch transforms
    return not (x.is_meta or _dispatch_modes() or _jit_tracing() or _functorch_active())


_aten_convolution = torch.ops.aten.convolution.default
_aten_convolution_backward = torch.ops.aten.convolution_backward.default


class _EagerConv(torch.autograd.Function):
    """skwgrad::conv with its autograd formula, as a plain autograd.Function. Under autocast the
    forward casts the weight (and bias) to x's dtype once and saves the cast weight for the dX of
    the backward, as autocast's own convolution does, instead of casting it again there."""

    @staticmethod
    def forward(ctx, x, weight, bias, stride, padding, dilation, groups, name):
        w, b = _params_like(x, weight, bias)
        y = _aten_convolution(x, w, b, stride, padding, dilation, False, [0] * (x.dim() - 2), groups)
        ctx.save_for_backward(x, w)
        ctx.conv = (stride, padding, dilation, groups, name)
        ctx.weight_meta = (list(weight.shape), weight.dtype)
        ctx.bias_dtype = bias.dtype if bias is not None else None
        return y

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        stride, padding, dilation, groups, name = ctx.conv
        weight_shape, weight_dtype = ctx.weight_meta
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        gx = gw = gb = None
        prepared = None
        # create_graph=True, or a traced backward (compiled autograd): dW through the op.
        traced = torch.is_grad_enabled() or not _eager(x, grad, None)
        if need_w and not traced:
            prepared = _prepare(x, grad, weight_shape, stride, padding, dilation, groups, weight_dtype)
            reason = prepared[-1]
            if reason is not None:
                # dW is PyTorch's (known before any launch): one convolution_backward for all three
                # gradients, as PyTorch's own convolution does; counted as _wgrad counts it.
                _count(prepared[8][0], name, "native", reason)
                gx, gw, gb = _aten_convolution_backward(
                    grad, x, w, [weight_shape[0]] if need_b else None, stride, padding, dilation, False,
                    [0] * (x.dim() - 2), groups, [need_x, True, need_b],
                )  # fmt: skip
                if gb is not None and gb.dtype != ctx.bias_dtype:
                    gb = gb.to(ctx.bias_dtype)
                return gx, _as_cl(gw, weight_shape, weight_dtype), gb, None, None, None, None, None
        if need_x or need_b:
            # w is the weight as the forward used it (cast to x's dtype there): no cast here.
            gx, _, gb = _aten_convolution_backward(
                grad, x, w, [weight_shape[0]] if need_b else None, stride, padding, dilation, False,
                [0] * (x.dim() - 2), groups, [need_x, False, need_b],
            )  # fmt: skip
            if gb is not None and gb.dtype != ctx.bias_dtype:
                gb = gb.to(ctx.bias_dtype)
        if need_w:
            if traced:
                gw = torch.ops.skwgrad.conv_weight_grad(x, grad, weight_shape, stride, padding, dilation, groups,
                                                        weight_dtype, name)  # fmt: skip
            else:
                gw = _wgrad(x, grad, weight_shape, stride, padding, dilation, groups, weight_dtype, name, prepared)
        return gx, gw, gb, None, None, None, None, None


# Eagerly (_eager: no functorch transform, no tracer), Function.apply's Python adds nothing to the
# C apply it ends in but the unwrapping of functorch's dead wrappers, which only exist under those
# transforms; the C apply bound to _EagerConv skips that per-conv host time.
try:
    _eager_conv_apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, _EagerConv)
except (AttributeError, KeyError, TypeError):  # pragma: no cover - a torch that moved it
    _eager_conv_apply = _EagerConv.apply


# ---------------------------------------------------------------------------------------------
# torch.nn.functional-compatible convolutions
# ---------------------------------------------------------------------------------------------
def _autocast_dtype(x: Tensor):
    dev = x.device.type
    if x.dtype in (torch.float32, torch.float16, torch.bfloat16) and torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return None


_CONV_ARGS: dict = {}


def _conv_args(sd, stride, padding, dilation, ksize) -> tuple:
    """[stride], [padding] (None: asymmetric 'same'), [dilation], one value per spatial dim;
    memoised in eager mode (the lists are shared: callers do not change them)."""
    key = None
    if not torch.compiler.is_compiling():
        key = (sd, stride, padding, dilation, tuple(ksize))
        try:
            got = _CONV_ARGS.get(key)
        except TypeError:  # a list argument (torch.nn.functional takes those too)
            key = got = None
        if got is not None:
            return got
    stride, dilation = _tup(stride, sd, "stride"), _tup(dilation, sd, "dilation")
    got = (stride, _resolve_padding(padding, ksize, dilation, sd), dilation)
    if key is not None:
        with _lock:
            _CONV_ARGS[key] = got
    return got


def _conv(sd, input, weight, bias, stride, padding, dilation, groups, name):
    native = torch.nn.functional.conv3d if sd == 3 else torch.nn.functional.conv2d
    if input.dim() == sd + 1:  # unbatched, as torch.nn.functional allows
        return _conv(sd, input.unsqueeze(0), weight, bias, stride, padding, dilation, groups, name).squeeze(0)
    if input.dim() != sd + 2 or weight.dim() != sd + 2:
        return native(input, weight, bias, stride, padding, dilation, groups)  # PyTorch's own error message
    stride, pad, dilation = _conv_args(sd, stride, padding, dilation, weight.shape[2:])
    amp = _autocast_dtype(input)
    if amp is not None:
        if input.dtype != amp:
            input = input.to(amp)
    elif input.dtype != weight.dtype or (bias is not None and bias.dtype != input.dtype):
        pad = None  # mixed dtypes outside autocast: PyTorch's error (or its behaviour)
    if pad is None:  # asymmetric 'same' padding: the whole convolution stays PyTorch's
        return native(input, weight, bias, stride, padding, dilation, groups)
    if torch.compiler.is_compiling():  # dynamo traces the function (through Function.apply)
        return _EagerConv.apply(input, weight, bias, stride, pad, dilation, int(groups), name)
    if _eager(input, weight, bias):
        return _eager_conv_apply(input, weight, bias, stride, pad, dilation, int(groups), name)
    return torch.ops.skwgrad.conv(input, weight, bias, stride, pad, dilation, int(groups), name)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, name: str = ""):
    """``torch.nn.functional.conv2d`` whose weight gradient is skwgrad's (see the module doc);
    ``name`` labels the layer in ``stats()``."""
    return _conv(2, input, weight, bias, stride, padding, dilation, groups, name)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, name: str = ""):
    """``torch.nn.functional.conv3d`` whose weight gradient is skwgrad's."""
    return _conv(3, input, weight, bias, stride, padding, dilation, groups, name)


# ---------------------------------------------------------------------------------------------
# patch / unpatch
# ---------------------------------------------------------------------------------------------
def _patched_conv_forward(self, input, weight, bias):
    if self.padding_mode != "zeros":  # patch() leaves these alone; a later change of mode lands here
        return self._skwgrad_native_forward(input, weight, bias)
    sd = 3 if isinstance(self, nn.Conv3d) else 2
    return _conv(sd, input, weight, bias, self.stride, self.padding, self.dilation, self.groups, self._skwgrad_name)


class SkwgradConv2d(nn.Conv2d):
    """What ``patch`` turns an ``nn.Conv2d`` into (same parameters and state dict)."""

    _conv_forward = _patched_conv_forward

    def _skwgrad_native_forward(self, input, weight, bias):
        return nn.Conv2d._conv_forward(self, input, weight, bias)


class SkwgradConv3d(nn.Conv3d):
    """What ``patch`` turns an ``nn.Conv3d`` into."""

    _conv_forward = _patched_conv_forward

    def _skwgrad_native_forward(self, input, weight, bias):
        return nn.Conv3d._conv_forward(self, input, weight, bias)


_SUBCLASSES: dict = {nn.Conv2d: SkwgradConv2d, nn.Conv3d: SkwgradConv3d}


def _patched_class(cls):
    got = _SUBCLASSES.get(cls)
    if got is None:
        got = _SUBCLASSES[cls] = type(
            "Skwgrad" + cls.__name__, (cls,),
            {"_conv_forward": _patched_conv_forward, "__module__": __name__,
             "_skwgrad_native_forward": lambda self, i, w, b, _cls=cls: _cls._conv_forward(self, i, w, b)},
        )  # fmt: skip
    return got


class PatchReport(dict):
    """``{"patched": [layer names], "skipped": {layer name: reason}}``."""

    @property
    def patched(self) -> list:
        return self["patched"]

    @property
    def skipped(self) -> dict:
        return self["skipped"]


def _skip_reason(m) -> str | None:
    cls = type(m)
    if isinstance(m, nn.modules.lazy.LazyModuleMixin):
        return "lazy module (run one forward first)"
    if m.padding_mode != "zeros":
        return f"padding_mode={m.padding_mode!r} (only 'zeros' is routed)"
    base = nn.Conv3d if isinstance(m, nn.Conv3d) else nn.Conv2d
    if cls._conv_forward is not base._conv_forward:
        return f"{cls.__name__} overrides _conv_forward"
    if _DTYPE_NAMES.get(m.weight.dtype) is None:
        return f"weight dtype {m.weight.dtype}"
    return None


def patch(model: nn.Module) -> PatchReport:
    """Route every ``nn.Conv2d`` / ``nn.Conv3d`` of ``model`` (itself included) through
    ``skwgrad.torch.conv2d``/``conv3d``: forward and dX stay PyTorch's, dW is skwgrad's where a
    cached kernel fits. Parameters, buffers, hooks and the state dict are untouched (the module's
    class becomes a subclass with a different ``_conv_forward``). Convs with another
    ``padding_mode``, lazy convs and subclasses that override ``_conv_forward`` are left alone and
    counted (``stats()["skipped_modules"]``). Idempotent. Returns what was patched and skipped."""
    report = PatchReport(patched=[], skipped={})
    for name, m in model.named_modules():
        label = name or type(m).__name__
        if getattr(m, "_skwgrad_orig_class", None) is not None:
            report["patched"].append(label)
            continue
        if isinstance(m, (nn.Conv1d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
            why = f"{type(m).__name__} (only Conv2d/Conv3d are routed)"
        elif isinstance(m, (nn.Conv2d, nn.Conv3d)):
            why = _skip_reason(m)
        else:
            continue
        if why is not None:
            report["skipped"][label] = why
            with _lock:
                _skipped_modules[why] = _skipped_modules.get(why, 0) + 1
            log.debug("patch: left %s alone: %s", label, why)
            continue
        m._skwgrad_orig_class = type(m)
        m._skwgrad_name = label
        m.__class__ = _patched_class(type(m))
        report["patched"].append(label)
    log.debug("patch: %d conv layers routed through skwgrad, %d left alone", len(report["patched"]), len(report["skipped"]))
    return report


def unpatch(model: nn.Module) -> int:
    """Undo ``patch``: every patched conv gets its original class back. Returns how many."""
    n = 0
    for m in model.modules():
        orig = getattr(m, "_skwgrad_orig_class", None)
        if orig is None:
            continue
        m.__class__ = orig
        del m._skwgrad_orig_class, m._skwgrad_name
        n += 1
    return n


# ---------------------------------------------------------------------------------------------
# record_shapes: a corpus CSV of a model's wgrad problems
# ---------------------------------------------------------------------------------------------
CORPUS_FIELDS = ("name", "n", "in_channels", "out_channels", "groups", "d", "h", "w", "z", "y", "x", "stride",
                 "padding", "dilation", "dtype", "dw_dtype", "precision", "regime")  # fmt: skip


def _dtype_name(dt) -> str | None:
    if dt is None:
        return None
    if isinstance(dt, str):
        return dt if dt in _DTYPES else None
    return _DTYPE_NAMES.get(dt)


def _dims_text(vals, sd: int) -> str:
    vals = [int(v) for v in vals]
    if sd == 2 and len(set(vals)) == 1:
        return str(vals[0])
    return "x".join(map(str, vals))  # 3-D: always per dim, so a flat 3-D problem stays 3-D


def _row(name, p: ConvProblem, regime: str) -> dict:
    sd = p.spatial_dims
    cut = 3 - sd
    return {
        "name": name, "n": p.n, "in_channels": p.c * p.g, "out_channels": p.k * p.g, "groups": p.g,
        "d": p.di, "h": p.hi, "w": p.wi, "z": p.z, "y": p.y, "x": p.x,
        "stride": _dims_text(p.stride[cut:], sd), "padding": _dims_text(p.pad_lo[cut:], sd),
        "dilation": _dims_text(p.dilation[cut:], sd), "dtype": p.dtype, "dw_dtype": p.dw_dtype,
        "precision": p.precision if p.dtype == "fp32" else "", "regime": regime,
    }  # fmt: skip


def record_shapes(model: nn.Module, example_input, path, *, dtype=None, dw_dtype=None, regime: str = "recorded"):
    """Run one forward of ``model`` on ``example_input`` (a tensor, or a tuple of positional
    arguments) under ``torch.no_grad()``, record the weight-gradient problem of every Conv2d /
    Conv3d (``padding_mode='zeros'``; patched or not) and write them, one row per distinct
    problem, as a corpus CSV at ``path`` (the format ``skwgrad.abi.conv.read_corpus`` and
    ``compile-all --corpus`` read; ``name`` is the first layer with that problem).

    dtype: the input dtype the kernels will see (``torch.bfloat16`` or ``"bf16"``...); default:
    autocast's dtype when the forward runs under autocast, else the input's. dw_dtype: default
    the weight's when it is fp32 and the inputs are half (autocast), else the input dtype.
    Returns ``[(name, ConvProblem)]`` in the order written."""
    seen: dict = {}
    skipped: list = []
    names = {m: (n or type(m).__name__) for n, m in model.named_modules()}

    def hook(m, args):
        x = args[0]
        sd = 3 if isinstance(m, nn.Conv3d) else 2
        label = names.get(m, type(m).__name__)
        if x.dim() == sd + 1:
            x = x.unsqueeze(0)
        xdt = _dtype_name(dtype) or _dtype_name(_autocast_dtype(x)) or _dtype_name(x.dtype)
        wdt_given = _dtype_name(dw_dtype)
        if xdt is None:
            skipped.append((label, f"input dtype {x.dtype}"))
            return
        if wdt_given is not None:
            wdt = wdt_given
        else:
            wn = _dtype_name(m.weight.dtype)
            wdt = "fp32" if (wn == "fp32" and xdt in ("bf16", "fp16")) else xdt
        dil = _tup(m.dilation, sd, "dilation")
        pad = _resolve_padding(m.padding, m.weight.shape[2:], dil, sd)
        if pad is None:
            skipped.append((label, "asymmetric 'same' padding runs natively"))
            return
        try:
            p = _problem(tuple(x.shape), tuple(m.weight.shape), _tup(m.stride, sd, "stride"), pad, dil, m.groups, xdt,
                         wdt, _fp32_precision() if xdt == "fp32" else "")  # fmt: skip
        except ProblemError as e:
            skipped.append((label, str(e)))
            return
        seen.setdefault(p, label)

    handles = []
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Conv3d)) and m.padding_mode == "zeros":
            handles.append(m.register_forward_pre_hook(hook))
    args = example_input if isinstance(example_input, tuple) else (example_input,)
    try:
        with torch.no_grad():
            model(*args)
    finally:
        for h in handles:
            h.remove()
    for label, why in skipped:
        log.info("record_shapes: %s not recorded: %s", label, why)
    rows = [(name.replace(",", "_"), p) for p, name in seen.items()]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CORPUS_FIELDS)
        w.writeheader()
        for name, p in rows:
            w.writerow(_row(name, p, regime))
    return rows


__all__ = [
    "conv2d", "conv3d", "conv_weight_grad", "patch", "unpatch", "enabled", "is_enabled", "configure", "stats",
    "reset_stats", "clear_decisions", "record_shapes", "PatchReport", "NATIVE_REASONS", "SkwgradConv2d",
    "SkwgradConv3d",
]  # fmt: skip

