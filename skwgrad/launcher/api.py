"""The Python API: ``skwgrad.wgrad(x, dy, ...)`` and ``skwgrad.plan(...)``.

Layout rules for the arrays are in ``skwgrad.launcher.arrays`` (PyTorch-shaped tensors in
channels-last memory, or contiguous channels-last-shaped arrays; the result is PyTorch's
weight-gradient shape in channels-last memory). Plans are cached per (device, problem, cache,
options), so calling ``wgrad`` again on the same shapes costs one plan lookup and a launch.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path

from skwgrad.abi.conv import ConvProblem, parse_problem
from skwgrad.errors import ProblemError
from skwgrad.launcher import arrays
from skwgrad.launcher.backends import get_backend
from skwgrad.launcher.plan import Plan
from skwgrad.launcher.select import choose

PLAN_CACHE_SIZE = 256
_plans: OrderedDict = OrderedDict()
_plans_lock = threading.Lock()
_caches: dict[str, object] = {}


def open_cache(cache=None):
    """``None``: the default cache (``$SKWGRAD_CACHE``, else ``$XDG_CACHE_HOME/skwgrad``); a path:
    that cache; anything else is used as a cache object (``find``, ``get``, ``load_binary``,
    ``tuned``, ``remember_tuned``)."""
    if cache is not None and not isinstance(cache, (str, os.PathLike)):
        return cache
    try:
        from skwgrad.cache import Cache
    except ImportError:  # pragma: no cover - the package layout of the cache
        from skwgrad.cache.store import Cache
    key = str(Path(cache).expanduser().resolve()) if cache is not None else "<default>:" + os.environ.get("SKWGRAD_CACHE", "")
    c = _caches.get(key)
    if c is None:
        c = _caches[key] = Cache(cache)
    return c


def _cache_id(cache) -> str:
    path = getattr(cache, "path", None)
    return f"path:{path}" if path is not None else f"id:{id(cache)}"


def _occupancy(backend):
    def occ(kernel):
        md = kernel.metadata
        fn = backend.load(kernel.key, kernel.loader, md["name"], int(md["threads"]), int(md["shared"]))
        return backend.max_active_per_cu(fn)

    return occ


def plan(
    problem,
    *,
    streamk: str = "auto",
    reduction: str = "auto",
    streamk_ctas: int = -1,
    tile=None,
    ks_count: int | None = None,
    cache=None,
    device: int | None = None,
    backend=None,
    dw_dtype: str | None = None,
    precision: str | None = None,
) -> Plan:
    """A launch plan for ``problem`` (a ``ConvProblem`` or the ``--problem`` text, e.g.
    ``"n=32,c=64,k=64,h=56,w=56,y=3,x=3,padding=1"``) on ``device`` (None: the current one).

    The plan is built once and cached; ``plan.launch(dy_ptr, x_ptr, dw_ptr, stream)`` launches on
    raw device pointers, ``plan(x, dy, out=None)`` on arrays.

    streamk: ``auto`` | ``off`` (split-K) | ``dp_sk`` | ``persistent``; reduction: ``auto`` or, for
    stream-K, ``linear``/``tree``/``atomic``/``workspace``, for split-K ``direct``/``atomic``/``two_stage``;
    streamk_ctas: the stream-K pool (-1: one CTA per CU for linear/tree, four for atomic/workspace);
    tile: ``(BM, BN, BK)`` to force a tile; ks_count: force the split-K degree; precision: for fp32
    inputs, ``ieee`` (the default) or ``tf32``."""
    if isinstance(problem, str):
        problem = parse_problem(problem)
    if not isinstance(problem, ConvProblem):
        raise ProblemError(f"plan() takes a ConvProblem or a problem string, got {type(problem).__name__}")
    if dw_dtype and dw_dtype != problem.dw_dtype:
        problem = ConvProblem(**{**_fields(problem), "dw_dtype": dw_dtype})
    if precision and precision != problem.precision:
        problem = ConvProblem(**{**_fields(problem), "precision": precision})
    be = backend if backend is not None else get_backend(device)
    c = open_cache(cache)
    tile = tuple(tile) if tile is not None else None
    key = (be.name, be.device, problem, _cache_id(c), streamk, reduction, streamk_ctas, tile, ks_count)
    with _plans_lock:
        p = _plans.get(key)
        if p is not None:
            _plans.move_to_end(key)
            return p
    choice = choose(
        problem, c, arch=be.arch, cus=be.compute_units, streamk=streamk, reduction=reduction,
        streamk_ctas=streamk_ctas, tile=tile, ks_count=ks_count, occupancy=_occupancy(be),
    )  # fmt: skip
    p = choice.plan(problem, be)
    p.choice = choice
    with _plans_lock:
        _plans[key] = p
        while len(_plans) > PLAN_CACHE_SIZE:
            _plans.popitem(last=False)
    return p


def _fields(problem: ConvProblem) -> dict:
    from dataclasses import fields

    return {f.name: getattr(problem, f.name) for f in fields(problem) if f.init}


def wgrad(
    x,
    dy,
    *,
    filter_size,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    out=None,
    streamk: str = "auto",
    reduction: str = "auto",
    streamk_ctas: int = -1,
    cache=None,
    stream=None,
    dw_dtype: str | None = None,
    tile=None,
    ks_count: int | None = None,
    layout: str = "auto",
    precision: str | None = None,
):
    """The weight gradient of a convolution: ``dW = wgrad(x, dy)`` for ``y = conv(x, W)``.

    x and dy: torch tensors (CUDA/ROCm; CPU copied), CuPy arrays, DLPack or
    ``__cuda_array_interface__`` device arrays, or numpy arrays (copied in and out), either
    PyTorch-shaped ``(N, C, [D,] H, W)`` in channels-last memory or ``(N, [D,] H, W, C)`` contiguous
    (see ``skwgrad.launcher.arrays``). filter_size/stride/padding/dilation: one int or one per
    spatial dim (padding also ``((lo, hi), ...)``); groups as in PyTorch.

    Returns dW shaped ``(K, C/groups, [Z,] Y, X)`` (PyTorch's weight shape) in channels-last memory,
    dtype = the dW dtype (``dw_dtype``, ``out``'s dtype, else the input dtype), written into
    ``out`` when given. The launch goes on ``stream`` (default: torch's / CuPy's current stream,
    else the default stream) and is asynchronous for device arrays. fp32 inputs are computed
    in full fp32 (``precision="ieee"``) unless ``precision="tf32"`` is asked for."""
    vx, vdy = arrays.view(x, "x"), arrays.view(dy, "dy")
    vout = arrays.view(out, "out") if out is not None else None
    if vout is not None:
        if dw_dtype and dw_dtype != vout.dtype:
            raise ProblemError(f"out is {vout.dtype} but dw_dtype={dw_dtype!r}")
        dw_dtype = vout.dtype
    if reduction == "atomic" and (dw_dtype or vx.dtype) != "fp32":
        raise ProblemError(
            f"the atomic reduction accumulates into dW, which must be fp32; the dW dtype is {dw_dtype or vx.dtype}: "
            f"pass dw_dtype='fp32' (or an fp32 out)"
        )
    problem, _ = arrays.problem_from_arrays(
        vx, vdy, filter_size=filter_size, stride=stride, padding=padding, dilation=dilation, groups=groups,
        dw_dtype=dw_dtype, layout=layout,
    )  # fmt: skip
    views = [vx, vdy] + ([vout] if vout is not None else [])
    dev, kind = arrays.device_of(views)
    be = get_backend(dev, kind if not os.environ.get("SKWGRAD_BACKEND") else None)
    p = plan(
        problem, streamk=streamk, reduction=reduction, streamk_ctas=streamk_ctas, tile=tile, ks_count=ks_count,
        cache=cache, backend=be, precision=precision,
    )  # fmt: skip
    return arrays.run_problem(p, problem, vx, vdy, out=out, stream=stream)


def tune(problem, *, cache=None, device=None, streamk: str = "all", reductions=None, iters: int = 20) -> list[dict]:
    """Time every cached kernel for ``problem`` on the device and remember the fastest in the
    cache (keyed by arch, CU count and problem); ``streamk="auto"`` then uses it. Returns the
    timings, fastest first."""
    from skwgrad.launcher.select import tune as _tune

    if isinstance(problem, str):
        problem = parse_problem(problem)
    be = get_backend(device)
    rows = _tune(problem, be, open_cache(cache), streamk=streamk, reductions=reductions, iters=iters)
    clear_plans()  # cached plans were chosen before the new record
    return rows


def clear_plans() -> None:
    with _plans_lock:
        _plans.clear()
