"""The Python API: ``skwgrad.wgrad(x, dy, ...)``, ``skwgrad.plan(...)`` and ``tune(...)``.

How arrays are read is ``skwgrad.launcher.layout`` (torch tensors by PyTorch's convention, in any
memory format; other arrays by whichever reading fits, ``layout=`` when both do). Options are one
``LaunchOptions``, validated before any device work.

The per-call fast path: a call is keyed on what the arrays already expose (type, shape, strides,
dtype, device) plus the options; the first call with a key reads the arrays, chooses a kernel and
builds the plan; every later call with that key only reads pointers and the stream, allocates dW
through the caller's allocator and launches. Plans and calls are shared between threads (a plan
serialises its own launches).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

from skwgrad.abi.conv import ConvProblem, parse_problem
from skwgrad.abi.spec import TMA_FAMILIES
from skwgrad.errors import DamagedEntryError, ProblemError, TensorMapError
from skwgrad.launcher import layout as L
from skwgrad.launcher.backends import get_backend
from skwgrad.launcher.calls import TorchCall, run_arrays
from skwgrad.launcher.interop import device_of, stream_int, stream_of, view
from skwgrad.launcher.options import LaunchOptions
from skwgrad.launcher.plan import Plan
from skwgrad.launcher.select import backend_occupancy, choose

log = logging.getLogger("skwgrad")
PLAN_CACHE_SIZE = 256
CALL_CACHE_SIZE = 1024
_plans: OrderedDict = OrderedDict()
_calls: dict = {}
_lock = threading.Lock()
_caches: dict[str, object] = {}
stats = {"plans_built": 0, "calls_resolved": 0, "tuned": 0}  # what the slow paths had to do (tests, debugging)
_tuning: bool | None = None  # set_tuning(); None: $SKWGRAD_TUNE decides
_generation = 0  # bumped by clear_plans(): a TorchCall held outside _calls is stale after it


def set_tuning(on: bool | None) -> None:
    """Tune on first use (the ``cudnn.benchmark`` / ``MIOPEN_FIND_MODE`` analogue): the first call
    of a new (arch, CU count, problem) with default options times every cached candidate (and
    PyTorch's own weight gradient, when torch is present) and records the fastest in the cache;
    later calls, in this process or any process that imports the exported cache, use the
    record without timing anything. Never while the stream is being captured. ``None`` returns
    the decision to ``$SKWGRAD_TUNE`` (1/true/on)."""
    global _tuning
    _tuning = on
    clear_plans()


def tuning_enabled() -> bool:
    if _tuning is not None:
        return _tuning
    return os.environ.get("SKWGRAD_TUNE", "").strip().lower() in ("1", "true", "yes", "on")


TUNE_TOP = 8  # candidates tune-on-first-use times: the cost model's best-ranked ones


def _tune_first_use(problem: ConvProblem, options: LaunchOptions, cache, be, stream) -> None:
    """Time the candidates of a problem nobody has tuned yet (see ``set_tuning``)."""
    if options != LaunchOptions(deterministic=options.deterministic, dw_dtype=options.dw_dtype, precision=options.precision):
        return  # an explicit request is the caller's choice, not a tuning question
    from skwgrad.launcher.select import problem_key
    from skwgrad.launcher.select import tune as tune_problem

    if cache.tuned(be.arch, be.compute_units, problem_key(problem)) is not None:
        return
    if stream is not None and be.stream_is_capturing(stream):
        return  # tuning synchronises the device: never inside a capture
    from skwgrad.launcher.baseline import cudnn_time, stream_hold

    # the native op as the caller's own settings run it (benchmark mode or not): the op falls back to that one
    native_us, _ = cudnn_time(problem, be, warmup=3, iters=10, benchmark=None) if be.name in ("cuda", "hip") else (None, "")
    # the model's best few, timed as the native op is (device time: the stream held while queueing)
    hold = stream_hold() if be.binary_kind == "cubin" else None
    rows = tune_problem(problem, be, cache, warmup=3, iters=10, native_us=native_us, hold=hold, top=TUNE_TOP)
    stats["tuned"] += 1
    log.info("tuned %s on %s: %d candidates, fastest %s", problem.describe(), be.arch, len(rows),
             f"{rows[0]['label']} {rows[0]['us']:.1f} us" if rows and "us" in rows[0] else "none")  # fmt: skip


def native_preferred(problem: ConvProblem, *, cache=None, device: int | None = None, backend=None) -> bool:
    """True when the cache's tuning record for ``problem`` on this device says the framework's
    own weight gradient was faster than every skwgrad candidate (the PyTorch op then falls back)."""
    from skwgrad.launcher.select import problem_key

    be = backend if backend is not None else get_backend(device)
    got = open_cache(cache).tuned(be.arch, be.compute_units, problem_key(problem))
    try:
        return bool(got) and got.get("native_us") is not None and float(got["native_us"]) < float(got["us"])
    except (TypeError, ValueError, KeyError):
        return False


def open_cache(cache=None):
    """``None``: the default cache (``$SKWGRAD_CACHE``, else ``$XDG_CACHE_HOME/skwgrad``); a path:
    that cache; anything else is used as a cache object (``find``, ``get``, ``load_binary``,
    ``tuned``, ``remember_tuned``)."""
    if cache is not None and not isinstance(cache, (str, os.PathLike)):
        return cache
    from skwgrad.cache import Cache

    key = str(Path(cache).expanduser().resolve()) if cache is not None else "<default>:" + os.environ.get("SKWGRAD_CACHE", "")
    c = _caches.get(key)
    if c is None:
        with _lock:
            c = _caches.get(key)
            if c is None:
                c = _caches[key] = Cache(cache, create=False)  # a reader never creates a cache
    return c


def _cache_id(cache) -> str:
    path = getattr(cache, "path", None)
    return f"path:{path}" if path is not None else f"id:{id(cache)}"


def _options(options: LaunchOptions | None, kw: dict) -> LaunchOptions:
    if options is not None:
        if not isinstance(options, LaunchOptions):
            raise ProblemError(f"options must be a LaunchOptions, got {type(options).__name__}")
        if kw:
            raise ProblemError(f"pass either options= or the option keywords ({', '.join(sorted(kw))}), not both")
        return options
    return LaunchOptions(**kw)


def plan_for(problem: ConvProblem, options: LaunchOptions, *, cache=None, backend=None, device=None, stream=None) -> Plan:
    """The cached plan for (device, problem, cache, options); built on first use (after timing
    the candidates when tune-on-first-use is on: ``set_tuning``)."""
    be = backend if backend is not None else get_backend(device)
    c = open_cache(cache)
    if options.dw_dtype and options.dw_dtype != problem.dw_dtype:
        problem = ConvProblem(**{**_fields(problem), "dw_dtype": options.dw_dtype})
    if options.precision and problem.dtype == "fp32" and options.precision != problem.precision:
        problem = ConvProblem(**{**_fields(problem), "precision": options.precision})
    if options.layout != "auto":  # how arrays are read never changes the kernel: one plan
        options = replace(options, layout="auto")
    key = (be.name, be.device, problem, _cache_id(c), options)
    p = _plans.get(key)
    if p is not None:
        return p
    with _lock:
        p = _plans.get(key)
        if p is not None:
            return p
        if tuning_enabled():
            _tune_first_use(problem, options, c, be, stream)
        damaged: set = set()
        while True:  # a damaged entry is skipped (reported once by the cache) and selection goes on
            try:
                choice = choose(problem, c, arch=be.arch, cus=be.compute_units, options=options, occupancy=backend_occupancy(be),
                                exclude=frozenset(damaged))  # fmt: skip
                p = choice.plan(problem, be)
                break
            except DamagedEntryError as e:
                key = getattr(e, "key", None)
                if key is None or key in damaged:
                    raise
                log.warning("skipping damaged cache entry %s: %s", key[:12], e)
                damaged.add(key)
            except TensorMapError as e:  # the driver refused the tensor maps: choose again without TMA
                if choice.kernel.key in damaged:
                    raise
                log.warning("%s cannot run %s here: %s; choosing again without it (and the other TMA kernels)",
                            choice.kernel.label, problem.describe(), e)  # fmt: skip
                damaged.add(choice.kernel.key)  # every TMA kernel encodes the same two maps of this problem
                damaged.update(x.key for fam in TMA_FAMILIES for x in c.find(be.arch, family=fam))
        p.choice = choice
        stats["plans_built"] += 1
        log.debug("%s on %s: %s (%s) grid=%d", problem.describe(), be.arch, p.label, choice.reason, p.grid)
        _plans[key] = p
        while len(_plans) > PLAN_CACHE_SIZE:
            _plans.popitem(last=False)
    return p


def plan(problem, *, options: LaunchOptions | None = None, cache=None, device: int | None = None, backend=None, **kw) -> Plan:
    """A launch plan for ``problem`` (a ``ConvProblem`` or the ``--problem`` text, e.g.
    ``"n=32,c=64,k=64,h=56,w=56,y=3,x=3,padding=1"``) on ``device`` (None: the current one).

    Options: a ``LaunchOptions`` or its fields as keywords (streamk, reduction, streamk_ctas, tile,
    ks_count, dw_dtype, precision, deterministic). ``plan.launch(dy_ptr, x_ptr, dw_ptr, stream)``
    launches on raw device pointers, ``plan(x, dy, out=None)`` on arrays."""
    opts = _options(options, kw)  # before any device work
    if isinstance(problem, str):
        problem = parse_problem(problem)
    if not isinstance(problem, ConvProblem):
        raise ProblemError(f"plan() takes a ConvProblem or a problem string, got {type(problem).__name__}")
    return plan_for(problem, opts, cache=cache, backend=backend, device=device)


def _fields(problem: ConvProblem) -> dict:
    from dataclasses import fields

    return {f.name: getattr(problem, f.name) for f in fields(problem) if f.init}


def _hashable(v):
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(i) for i in v)
    return v


def _torch_key(x, dy, out):
    """What the fast path keys a torch call on (AttributeError for other arrays)."""
    ko = None if out is None else (out.shape, out.stride(), out.dtype, out.device)
    return (x.shape, x.stride(), x.dtype, x.device, dy.shape, dy.stride(), dy.dtype, dy.device, ko)


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
    cache=None,
    stream=None,
    options: LaunchOptions | None = None,
    **kw,
):
    """The weight gradient of a convolution: ``dW = wgrad(x, dy)`` for ``y = conv(x, W)``.

    x and dy: torch tensors (read by PyTorch's (N, C, [D,] H, W) convention in any memory format;
    channels-last memory is used as is, other memory is converted), CuPy arrays, DLPack or
    ``__cuda_array_interface__`` device arrays, or numpy arrays (copied in and out): see
    ``skwgrad.launcher.layout``. filter_size/stride/padding/dilation: one int or one per spatial
    dim (padding also ``((lo, hi), ...)``); groups as in PyTorch. Options: a ``LaunchOptions`` or
    its fields as keywords (streamk, reduction, streamk_ctas, tile, ks_count, dw_dtype, precision,
    deterministic, layout).

    Returns dW shaped ``(K, C/groups, [Z,] Y, X)`` (PyTorch's weight shape) in channels-last memory,
    dtype = the dW dtype (``dw_dtype``, ``out``'s dtype, else the input dtype), written into
    ``out`` when given (any memory format for torch: copied in when not channels-last). The launch
    goes on ``stream`` (default: torch's / CuPy's current stream, else the default stream), is
    asynchronous for device arrays, and can be captured into a CUDA/HIP graph."""
    # The fast path: one tuple of what the arguments already are, one dict lookup.
    key = call = None
    try:
        tkey = _torch_key(x, dy, out)
    except AttributeError:  # not torch tensors
        tkey = None
    if tkey is not None:
        key, call = _lookup(tkey, filter_size, stride, padding, dilation, groups, cache, options, kw)
    if call is not None:
        return call(x, dy, out, None if stream is None else stream_int(stream))
    if tkey is not None and not (x.is_cuda and dy.is_cuda and (out is None or out.is_cuda)):
        tkey = None  # CPU tensors: copied like host arrays
    s = None if stream is None else stream_int(stream)
    vx, vdy = view(x, "x", s or 0), view(dy, "dy", s or 0)
    vout = view(out, "out") if out is not None else None
    gkey = None
    if tkey is None:  # other arrays: the views give the pointers anyway; reuse what they resolve to
        try:
            gkey = (_view_key(vx), _view_key(vdy), _view_key(vout), _hashable(filter_size), _hashable(stride),
                    _hashable(padding), _hashable(dilation), groups,
                    cache if cache is None or isinstance(cache, str) else id(cache), options,
                    tuple(sorted((k, _hashable(v)) for k, v in kw.items())))  # fmt: skip
            hit = _calls.get(gkey)
        except TypeError:
            gkey = hit = None
        if hit is not None:
            return run_arrays(hit[0], hit[1], vx, vdy, vout, s)
    p, reading = _resolve(vx, vdy, vout, s, filter_size, stride, padding, dilation, groups, cache, options, kw)
    if tkey is not None and key is not None:
        call = TorchCall(p, reading, vx, vout)
        _remember(key, call)
        return call(x, dy, out, s)
    _remember(gkey, (p, reading))
    return run_arrays(p, reading, vx, vdy, vout, s)


def torch_call(x, dy, *, filter_size, stride=1, padding=0, dilation=1, groups: int = 1, cache=None,
               options: LaunchOptions | None = None, **kw) -> TorchCall:
    """What ``wgrad(x, dy, ...)`` (same arguments, no ``out``) runs for CUDA torch tensors of x's and
    dy's shapes, strides, dtypes and device, resolved without launching anything: ``call(x2, dy2,
    None, None)`` computes dW of any such pair on torch's current stream, like ``wgrad`` does, but
    without its per-call key and lookup. For frameworks that remember one call per layer; a call
    stays valid until ``clear_plans()`` (``calls_generation()`` then changes)."""
    tkey = _torch_key(x, dy, None)
    if not (x.is_cuda and dy.is_cuda):
        raise ProblemError("torch_call takes CUDA (or ROCm) torch tensors; use wgrad() for other arrays")
    key, call = _lookup(tkey, filter_size, stride, padding, dilation, groups, cache, options, kw)
    if call is None:
        vx, vdy = view(x, "x", 0), view(dy, "dy", 0)
        p, reading = _resolve(vx, vdy, None, None, filter_size, stride, padding, dilation, groups, cache, options, kw)
        call = TorchCall(p, reading, vx, None)
        _remember(key, call)
    return call


def calls_generation() -> int:
    """Changes whenever the cached plans and calls are dropped (``clear_plans``)."""
    return _generation


def _lookup(tkey, filter_size, stride, padding, dilation, groups, cache, options, kw):
    """(the fast path's key of a torch call, its cached call or None); the key is None when some
    argument cannot be hashed (the slow path then reports what is wrong)."""
    try:
        key = (tkey, filter_size, stride, padding, dilation, groups, cache, options, tuple(kw.items()) if kw else ())
        return key, _calls.get(key)
    except TypeError:  # lists and such: the same key, made hashable (a little slower)
        try:
            key = (tkey, _hashable(filter_size), _hashable(stride), _hashable(padding), _hashable(dilation), groups,
                   cache, options, tuple((k, _hashable(v)) for k, v in kw.items()))  # fmt: skip
            return key, _calls.get(key)
        except TypeError:
            return None, None


def _resolve(vx, vdy, vout, s, filter_size, stride, padding, dilation, groups, cache, options, kw):
    """The slow path: read the viewed arrays, check every argument before any device work, and
    return (plan, reading)."""
    opts = _options(options, kw)  # every argument checked before any device work
    dw_dtype = opts.dw_dtype
    if vout is not None:
        if dw_dtype and dw_dtype != vout.dtype:
            raise ProblemError(f"out is {vout.dtype} but dw_dtype={dw_dtype!r}")
        dw_dtype = vout.dtype
    reading = L.read(
        vx, vdy, filter_size=filter_size, stride=stride, padding=padding, dilation=dilation, groups=groups,
        dw_dtype=dw_dtype, precision=opts.precision, layout=opts.layout,
    )  # fmt: skip
    if opts.reduction == "atomic" and reading.problem.dw_dtype != "fp32":
        raise ProblemError(
            f"the atomic reduction accumulates into dW, which must be fp32; the dW dtype is {reading.problem.dw_dtype}: "
            f"pass dw_dtype='fp32' (or an fp32 out)"
        )
    if vout is not None:
        L.out_packed(vout, reading.problem)  # shape/dtype/writable, before any device work
    views = [vx, vdy] + ([vout] if vout is not None else [])
    dev, kind = device_of(views)
    be = get_backend(dev, kind if not os.environ.get("SKWGRAD_BACKEND") else None)
    p = plan_for(reading.problem, opts, cache=cache, backend=be, stream=s if s is not None else stream_of(views, None))
    stats["calls_resolved"] += 1
    return p, reading


def _remember(key, value) -> None:
    if key is None:
        return
    with _lock:
        if len(_calls) >= CALL_CACHE_SIZE:
            _calls.clear()
        _calls[key] = value


def _view_key(v):
    return None if v is None else (v.kind, v.shape, v.strides, v.dtype, v.device, v.backend_kind)


def run_plan(plan_: Plan, x, dy, *, out=None, stream=None, layout: str = "auto"):
    """Launch ``plan_`` on arrays; the problem the arrays describe must be the plan's."""
    p = plan_.problem
    s = None if stream is None else stream_int(stream)
    vx, vdy = view(x, "x", s or 0), view(dy, "dy", s or 0)
    sd = p.spatial_dims
    reading = L.read(
        vx, vdy, filter_size=(p.z, p.y, p.x)[3 - sd :], stride=p.stride[3 - sd :],
        padding=tuple(zip(p.pad_lo, p.pad_hi))[3 - sd :], dilation=p.dilation[3 - sd :], groups=p.g,
        dw_dtype=p.dw_dtype, precision=p.precision or None, layout=layout,
    )  # fmt: skip
    if reading.problem != p:
        raise ProblemError(f"the arrays describe {reading.problem.describe()}; this plan is for {p.describe()}")
    vout = view(out, "out") if out is not None else None
    return run_arrays(plan_, reading, vx, vdy, vout, s)


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
    global _generation
    with _lock:
        _plans.clear()
        _calls.clear()
        _generation += 1
