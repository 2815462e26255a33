"""Which cached kernel runs a problem, with which pool or split-K degree.

Candidates: the cache's entries for the device's arch whose spec admits the problem
(``KernelSpec.check_problem``: dtype, dW dtype, fp32 precision, 2-D/3-D, pointwise addressing,
channel alignment), narrowed to the widest channel vectors (``vec_c``, ``vec_k``) available, and the
pointwise kernel when the problem is pointwise. Tiles are ranked by a coarse model (padded work
per CTA slot, in waves); ``tune`` replaces the model by measurements.

``streamk="auto"`` (SPEC section 8): stream-K when the candidate's tiling gives few tiles over a
long reduction (``num_tiles < CUs`` and ``iters_per_tile >= SK_MIN_ITERS``) **and** the partition
of the pool it would launch with has ``sk_ctas > 0`` (an all-DP partition would only pay the
stream-K overheads) **and** the cache holds stream-K at the widest channel vectors split-K has
for the problem (auto never trades vector width for stream-K); otherwise split-K with ``ks_count = floor(occupancy * CUs / num_tiles)``
clamped to ``[1, iters_per_tile]`` (occupancy: max active CTAs per CU of the kernel, from the
backend; 1 offline). The auto reduction follows the seed: ``workspace`` (never waits, so it gets
the 4-CTAs-per-CU pool) when its Stage-2 is cached, then ``linear``, ``tree``, ``atomic``; split-K
uses ``direct`` for one split and ``two_stage`` (deterministic) or ``atomic`` (fp32 dW) for more.
A choice remembered by ``tune`` for (arch, CUs, problem) wins over all of this.

Every grid, partition and workspace size comes from ``skwgrad.abi.launch.launch_geometry``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

from skwgrad.abi import narrow
from skwgrad.abi.conv import ConvProblem
from skwgrad.abi.kernargs import I32_MAX, SK_REDUCTIONS, SPLITK_EPILOGUES
from skwgrad.abi.launch import STAGE2_BLOCK, dwconv_ks_count, grouped_ks_count, launch_geometry
from skwgrad.abi.streamk import MODES, WAITING_REDUCTIONS, resolve_pool
from skwgrad.errors import CacheError, ProblemError, SkwgradError
from skwgrad.launcher.options import LaunchOptions
from skwgrad.launcher.plan import MAIN_FAMILIES, Kernel, Plan

from skwgrad.abi.policy import (  # noqa: E402,F401  (the choices re-exported: one definition)
    AUTO_MODES, AUTO_SK_REDUCTIONS, REDUCTION_CHOICES, SK_MIN_ITERS, SK_ONLY, SPLITK_ONLY, STREAMK_CHOICES,
)  # fmt: skip


class NoKernelError(CacheError):
    """No cached kernel can run the problem; the message names the compile-all command."""


@dataclass(frozen=True)
class Choice:
    """A kernel and how to launch it: stream-K pool or split-K degree, and the Stage-2 reduce."""

    kernel: Kernel
    pool: int = 0  # stream-K CTA pool (0 for split-K)
    ks_count: int = 1  # split-K degree (1 for stream-K)
    stage2: Kernel | None = None
    reason: str = ""

    @property
    def spec(self):
        return self.kernel.spec

    @property
    def mode(self) -> str:
        return self.kernel.mode

    @property
    def reduction(self) -> str:
        return self.spec.variant

    def plan(self, problem: ConvProblem, backend) -> Plan:
        return Plan(problem, self.kernel, backend, pool=self.pool, ks_count=self.ks_count, stage2=self.stage2)

    def to_dict(self) -> dict:
        return {
            "key": self.kernel.key,
            "label": self.kernel.label,
            "family": self.spec.family,
            "variant": self.spec.variant,
            "mode": self.spec.mode,
            "pool": self.pool,
            "ks_count": self.ks_count,
            "stage2_key": self.stage2.key if self.stage2 else None,
        }


def problem_key(problem: ConvProblem) -> str:
    """What tuned choices are remembered under (with arch and CU count). ``describe()`` names
    the shape, stride/padding/dilation, the input dtype and the dW dtype."""
    return problem.describe()


# ---------------------------------------------------------------------------------------------
# Candidates
# ---------------------------------------------------------------------------------------------
_admits = narrow.admits


def candidates(cache, arch: str, problem: ConvProblem, *, family=None, mode=None, variant=None, tile=None,
               exclude=frozenset()) -> list[Kernel]:  # fmt: skip
    """Cached kernels for ``arch`` that admit ``problem`` (filters: family, mode, variant, tile;
    ``exclude``: keys of entries found damaged)."""
    fields = {"dtype": problem.dtype, "dw_dtype": problem.dw_dtype, "spatial_dims": problem.spatial_dims}
    if family:
        fields["family"] = family
    if mode:
        fields["mode"] = mode
    if variant:
        fields["variant"] = variant
    out = []
    for e in cache.find(arch, **fields):
        spec = e.spec
        if spec is None or spec.family not in MAIN_FAMILIES:
            continue
        if tile and (spec.bm, spec.bn, spec.bk) != tuple(tile):
            continue
        if e.key in exclude:
            continue
        if _admits(spec, problem):
            try:
                out.append(Kernel.from_entry(e, cache))
            except CacheError as err:  # one damaged entry: skip it, say so once, keep selecting
                _report_damaged(e, err)
    return out


_damaged_reported: set = set()


def _report_damaged(entry, err) -> None:
    key = getattr(entry, "key", None)
    if key not in _damaged_reported:
        _damaged_reported.add(key)
        warnings.warn(f"skipping damaged cache entry {str(key)[:12]}: {err}", stacklevel=3)


def _width_key(k: Kernel, problem: ConvProblem):
    return narrow.width_key(k.spec, problem)


def widest(kernels: list[Kernel], problem: ConvProblem) -> list[Kernel]:
    """Keep the kernels with the widest channel vectors per family (``skwgrad.abi.narrow``, the
    rule compile-all --corpus builds by)."""
    return narrow.widest(kernels, problem, spec_of=lambda k: k.spec)


def _narrower_streamk(cache, arch: str, problem: ConvProblem, tile) -> bool:
    """True when the widest cached stream-K kernel for the problem loads narrower channel
    vectors than the widest split-K one (``compile-all`` builds stream-K at fewer widths)."""
    sk = candidates(cache, arch, problem, family="wgrad_sk", tile=tile)
    sp = candidates(cache, arch, problem, family="wgrad", tile=tile)
    if not sk or not sp:
        return False
    return max(_width_key(k, problem) for k in sk) < max(_width_key(k, problem) for k in sp)


def _cost(k: Kernel, problem: ConvProblem, cus: int) -> tuple:
    """Coarse time model for ranking tiles: waves x per-CTA work (padded MACs), then larger tiles."""
    s = k.spec
    t = problem.tiling(s.bm, s.bn, s.bk)
    ks = max(1, min(cus // t.num_tiles, t.iters_per_tile))
    waves = math.ceil(t.num_tiles * ks / cus)
    per_cta = math.ceil(t.iters_per_tile / ks) * s.bm * s.bn * s.bk
    return (waves * per_cta, -(s.bm * s.bn), -s.bk, s.num_warps, s.num_stages, k.label)


def rank(kernels: list[Kernel], problem: ConvProblem, cus: int) -> list[Kernel]:
    return sorted(kernels, key=lambda k: _cost(k, problem, cus))


def find_stage2(cache, arch: str, dw_dtype: str) -> Kernel | None:
    for e in cache.find(arch, family="stage2", dw_dtype=dw_dtype):
        if e.spec is not None and e.spec.block == STAGE2_BLOCK:
            return Kernel.from_entry(e, cache)
    return None


# ---------------------------------------------------------------------------------------------
# The missing-kernel message
# ---------------------------------------------------------------------------------------------
def compile_all_command(problem: ConvProblem, arch: str, *, cache=None, streamk="auto", reduction="auto", tile=None) -> str:
    """The ``skwgrad compile-all`` command that builds every kernel selection could choose for
    ``problem`` on ``arch`` (compile-all's ``--problem`` sweep), into this cache. A forced mode,
    reduction or tile asks the ``full`` preset for it (the pruned default may not hold it)."""
    parts = ["skwgrad compile-all", f"--arch {arch}", f'--problem "{problem.describe()}"']
    forced_sk = streamk in MODES or reduction in SK_ONLY
    if streamk != "auto" or reduction != "auto" or tile:
        parts.append("--preset full")
        if streamk == "off" or reduction in SPLITK_ONLY or (reduction in SPLITK_EPILOGUES and not forced_sk):
            parts.append("--streamk off")
        elif forced_sk or reduction in SK_REDUCTIONS:
            parts.append(f"--streamk {streamk if streamk in MODES else 'all'}")
            if reduction in SK_REDUCTIONS:
                parts.append(f"--streamk-reductions {reduction}")
        if tile:
            parts.append("--tiles " + "x".join(map(str, tile)))
    path = getattr(cache, "path", None)
    if path is not None:
        parts.append(f"--cache {path}")
    return " ".join(parts)


def _no_kernel(problem, arch, what: str, *, cache=None, hint: str = "", **request) -> NoKernelError:
    cmd = compile_all_command(problem, arch, cache=cache, **request)
    where = getattr(cache, "path", None)
    head = f"no cached {what} for {problem.describe()} on {arch}" + (f" in {where}" if where is not None else "")
    stale = getattr(cache, "other_versions", lambda arch: 0)(arch)
    if stale:
        head += (
            f" (it holds {stale} {arch} entries built by another Triton or from other skwgrad kernel sources; "
            f"they are never served: rebuild with compile-all)"
        )
    return NoKernelError(f"{head}{hint}; build what selection can choose for it with:\n    {cmd}")


# ---------------------------------------------------------------------------------------------
# Choosing
# ---------------------------------------------------------------------------------------------
def _occ(occupancy, k: Kernel) -> int:
    return max(1, int(occupancy(k))) if occupancy else 1


def _ks_formula(problem: ConvProblem, k: Kernel, cus: int, occ: int) -> int:
    """``floor(occupancy * CUs / num_tiles)`` clamped to ``[1, iters_per_tile]``."""
    s = k.spec
    t = problem.tiling(s.bm, s.bn, s.bk)
    return max(1, min(occ * cus // t.num_tiles, t.iters_per_tile))


def _splitk_ks(problem: ConvProblem, k: Kernel, cus: int, occ: int) -> int:
    """The formula's degree, as the kernel's epilogue can take it (the depthwise and packed-group
    families size theirs in ``skwgrad.abi.launch``)."""
    s = k.spec
    if s.family == "dwconv":
        ks = dwconv_ks_count(problem, bc=s.bm, br=s.bk, compute_units=cus)
    elif s.family == "grouped":
        ks = grouped_ks_count(problem, gb=s.block, bm=s.bm, bn=s.bn, bk=s.bk, compute_units=cus)
    else:
        ks = _ks_formula(problem, k, cus, occ)
    if s.variant == "direct":
        return 1
    if s.variant == "two_stage":
        ks = max(1, min(ks, (I32_MAX - 255) // (4 * problem.dw_numel)))
    return ks


def _streamk_choice(problem, k: Kernel, cus, streamk_ctas, occupancy, stage2, *, forced: bool):
    """(Choice, None) if stream-K should run with ``k``, else (None, why not)."""
    s = k.spec
    pool = resolve_pool(streamk_ctas, cus, s.variant)
    if s.variant in ("workspace",) and stage2 is None:
        return None, "no Stage-2 reduce cached"
    geo = launch_geometry(
        problem, s.family, s.variant, bm=s.bm, bn=s.bn, bk=s.bk, mode=s.mode, pool=pool,
        flags_per_cta=s.flags_per_cta(int(k.metadata["threads"]) // s.num_warps) or None,
    )  # fmt: skip
    t, part = geo.tiling, geo.partition
    if s.variant in WAITING_REDUCTIONS and occupancy is not None and part.sk_ctas:
        if pool > _occ(occupancy, k) * cus:
            return None, f"pool {pool} exceeds co-resident CTAs"
    if forced:
        return Choice(k, pool=pool, stage2=stage2 if geo.workspace.needs_stage2 else None, reason="forced stream-K"), None
    if t.num_tiles >= cus:
        return None, f"{t.num_tiles} tiles >= {cus} CUs"
    if t.iters_per_tile < SK_MIN_ITERS:
        return None, f"{t.iters_per_tile} iterations per tile < {SK_MIN_ITERS}"
    if part.sk_ctas == 0:
        return None, "the partition is all data-parallel (sk_ctas = 0)"
    why = f"{t.num_tiles} tiles < {cus} CUs, {t.iters_per_tile} iterations per tile, sk_ctas = {part.sk_ctas}"
    return Choice(k, pool=pool, stage2=stage2 if geo.workspace.needs_stage2 else None, reason=why), None


def _tuned_choice(cache, arch, cus, problem, options: LaunchOptions) -> Choice | None:
    tuned = getattr(cache, "tuned", None)
    if tuned is None:
        return None
    got = tuned(arch, cus, problem_key(problem))
    if not got:
        return None
    try:
        entry = cache.get(got["key"])
        k = Kernel.from_entry(entry, cache)
        if k.arch != arch or not _admits(k.spec, problem) or not options.allows(k.spec.variant):
            return None
        stage2 = None
        if got.get("stage2_key"):
            stage2 = Kernel.from_entry(cache.get(got["stage2_key"]), cache)
        return Choice(k, pool=int(got.get("pool", 0)), ks_count=int(got.get("ks_count", 1)), stage2=stage2, reason="tuned")
    except (KeyError, TypeError, ValueError, SkwgradError):
        return None  # stale or foreign record: fall back to the rules


def _special_family_choice(problem, cache, arch, cus, o: LaunchOptions, stage2, exclude) -> Choice | None:
    """Depthwise problems (C = K = 1 per group) on the ``dwconv`` kernels, few channels per group
    on the packed-group ``grouped`` kernels, when cached; None sends the problem to the dense
    kernels. dwconv: the smallest cached tap count that holds the filter, the widest channel
    vectors; grouped: the best fill of the packed M tile (GB * K of BM), fewer groups on ties.
    Split-K degree from the family's own rule; ``direct`` at one split, else the epilogue."""
    if o.reduction not in ("auto", *SPLITK_EPILOGUES, "workspace"):
        return None
    depthwise = (problem.c, problem.k) == (1, 1)
    family = "dwconv" if depthwise else "grouped" if problem.g > 1 and max(problem.c, problem.k) <= 16 else None
    if family is None:
        return None
    ks_all = [k for k in candidates(cache, arch, problem, family=family, exclude=exclude) if o.allows(k.spec.variant)]
    ks_all = narrow.widest(ks_all, problem, spec_of=lambda k: k.spec)
    if not ks_all:
        return None
    if family == "dwconv":
        # the smallest tap count holding the filter; then the "taps" layout, the faster one on the
        # H200 wherever both were built (benchmarks/RESULTS.md, 2026-12-01)
        rank_key = lambda k: (k.spec.bn, k.spec.mode != "taps", k.label)  # noqa: E731
    else:
        rank_key = lambda k: (-(k.spec.block * problem.k) / k.spec.bm, k.spec.block, k.label)  # noqa: E731
    ks_all.sort(key=rank_key)
    lead = ks_all[0]
    same_config = [k for k in ks_all if rank_key(k)[:2] == rank_key(lead)[:2]]
    ls = lead.spec
    if family == "dwconv":
        n = dwconv_ks_count(problem, bc=ls.bm, br=ls.bk, compute_units=cus)
    else:
        n = grouped_ks_count(problem, gb=ls.block, bm=ls.bm, bn=ls.bn, bk=ls.bk, compute_units=cus)
    if o.reduction != "auto":
        prefs = (o.reduction,)
    elif n == 1:
        prefs = ("direct", "workspace", "two_stage", "atomic")
    elif o.deterministic:
        prefs = ("two_stage",)
    else:
        prefs = ("workspace", "atomic", "two_stage", "direct") if family == "dwconv" else ("two_stage", "atomic", "direct")
    for variant in prefs:
        for k in (k for k in same_config if k.spec.variant == variant):
            if variant in ("two_stage", "workspace") and stage2 is None:
                continue
            if variant == "atomic" and problem.dw_dtype != "fp32":
                continue
            kn = 1 if variant == "direct" else max(n, 1)
            if variant == "two_stage":
                kn = max(1, min(kn, (I32_MAX - 255) // (4 * problem.dw_numel)))
            return Choice(k, ks_count=kn, stage2=stage2 if variant in ("two_stage", "workspace") else None,
                          reason=f"{family} ks_count={kn}")  # fmt: skip
    return None


def choose(
    problem: ConvProblem,
    cache,
    *,
    arch: str,
    cus: int,
    options: LaunchOptions | None = None,
    occupancy=None,
    use_tuned: bool = True,
    exclude=frozenset(),
    **option_fields,
) -> Choice:
    """The kernel and launch settings for ``problem`` on a device of ``arch`` with ``cus`` CUs,
    under ``options`` (a ``LaunchOptions``, or its fields as keywords: validated once, there).

    ``occupancy(kernel) -> max active CTAs per CU`` (from the backend); None means 1 and skips
    the co-residency screen (offline)."""
    if options is None:
        options = LaunchOptions(**option_fields)
    elif option_fields:
        raise ProblemError(f"pass either options= or option keywords ({', '.join(sorted(option_fields))}), not both")
    o = options
    streamk, reduction, streamk_ctas, tile, ks_count = o.streamk, o.reduction, o.streamk_ctas, o.tile, o.ks_count
    if reduction == "atomic" and problem.dw_dtype != "fp32":
        raise ProblemError(
            f"the atomic reduction accumulates into dW, which must be fp32; this problem's dW is {problem.dw_dtype} "
            f"(ask for fp32 dW, or use another reduction)"
        )
    tile = tuple(tile) if tile is not None else None
    if use_tuned and streamk == "auto" and reduction == "auto" and tile is None and ks_count is None and streamk_ctas == -1:
        c = _tuned_choice(cache, arch, cus, problem, o)
        if c is not None and c.kernel.key not in exclude:
            return c
    stage2 = find_stage2(cache, arch, problem.dw_dtype)
    if streamk in ("auto", "off") and ks_count is None and tile is None:
        c = _special_family_choice(problem, cache, arch, cus, o, stage2, exclude)
        if c is not None:
            return c
    want_sk = streamk in MODES or (streamk == "auto" and reduction in SK_ONLY)
    try_sk = want_sk or (streamk == "auto" and ks_count is None and reduction in ("auto", "atomic"))
    try_splitk = not want_sk and streamk in ("auto", "off")
    notes = []
    if try_sk and not want_sk and _narrower_streamk(cache, arch, problem, tile):
        # Scalar loads cost far more than stream-K saves (H200, C=100/K=60: vec-1 stream-K 339 us,
        # vec-4 split-K 27 us): auto never trades vector width for stream-K.
        try_sk = False
        notes.append("stream-K is cached only at narrower channel vectors than split-K")
    if try_sk:
        modes = (streamk,) if streamk in MODES else AUTO_MODES
        reds = (reduction,) if reduction in SK_REDUCTIONS else tuple(r for r in AUTO_SK_REDUCTIONS if o.allows(r))
        sk = [k for k in candidates(cache, arch, problem, family="wgrad_sk", tile=tile, exclude=exclude) if k.spec.mode in modes and k.spec.variant in reds]
        sk = rank(widest(sk, problem), problem, cus)
        order = {(m, r): i for i, (m, r) in enumerate((m, r) for r in reds for m in modes)}
        sk.sort(key=lambda k: order[(k.spec.mode, k.spec.variant)])  # stable: keeps the tile rank
        for k in sk:
            c, why = _streamk_choice(problem, k, cus, streamk_ctas, occupancy, stage2, forced=want_sk)
            if c is not None:
                return c
            notes.append(f"{k.label}: {why}")
        if want_sk:
            if any(k.spec.variant == "workspace" for k in sk) and stage2 is None:
                raise _no_kernel(problem, arch, f"Stage-2 reduce ({problem.dw_dtype})", cache=cache)
            what = f"{'/'.join(modes)} stream-K kernel" + (f" with the {reduction} reduction" if reduction != "auto" else "")
            if sk:  # kernels exist but none can launch (co-residency)
                raise ProblemError(f"no {what} can run {problem.describe()} on {arch}: " + "; ".join(notes))
            raise _no_kernel(problem, arch, what + (f" of tile {tile}" if tile else ""), cache=cache, streamk=streamk,
                             reduction=reduction, tile=tile)  # fmt: skip
    if try_splitk:
        variants = (reduction,) if reduction in SPLITK_EPILOGUES else tuple(v for v in SPLITK_EPILOGUES if o.allows(v))
        ks_all = [k for k in candidates(cache, arch, problem, family="wgrad", tile=tile, exclude=exclude) if k.spec.variant in variants]
        ks_all = rank(widest(ks_all, problem), problem, cus)
        if ks_all:
            # The best-ranked tile decides how many splits are wanted; then the epilogue that fits.
            lead = ks_all[0]
            want = ks_count if ks_count is not None else _ks_formula(problem, lead, cus, _occ(occupancy, lead))
            if reduction in SPLITK_EPILOGUES:
                prefs = (reduction,)
            elif want == 1:
                prefs = tuple(v for v in ("direct", "two_stage", "atomic") if v in variants)
            else:
                prefs = tuple(v for v in ("two_stage", "atomic", "direct") if v in variants)
            for variant in prefs:
                for k in (k for k in ks_all if k.spec.variant == variant):
                    if variant == "two_stage" and stage2 is None:
                        notes.append(f"{k.label}: no Stage-2 reduce cached")
                        break
                    if variant == "direct":
                        if ks_count not in (None, 1):
                            raise ProblemError(
                                "the direct split-K epilogue stores dW once: ks_count must be 1 (use two_stage or atomic)"
                            )
                        n = 1
                    elif ks_count is not None:
                        n = ks_count
                    else:
                        n = _splitk_ks(problem, k, cus, _occ(occupancy, k))
                    reason = f"split-K ks_count={n}" + (f" ({'; '.join(notes[:2])})" if notes else "")
                    return Choice(k, ks_count=n, stage2=stage2 if variant == "two_stage" else None, reason=reason)
        if any(k.spec.variant == "two_stage" for k in ks_all) and stage2 is None:
            raise _no_kernel(problem, arch, f"Stage-2 reduce ({problem.dw_dtype})", cache=cache)
        what = "split-K kernel" + (f" with the {reduction} epilogue" if reduction != "auto" else "")
        if try_sk and not ks_all and not notes:
            what = "kernel"  # neither family has one
        raise _no_kernel(problem, arch, what + (f" of tile {tile}" if tile else ""), cache=cache, streamk=streamk,
                         reduction=reduction, tile=tile)  # fmt: skip
    raise _no_kernel(problem, arch, "kernel", cache=cache, streamk=streamk, reduction=reduction, tile=tile)


def all_choices(
    problem: ConvProblem,
    cache,
    *,
    arch: str,
    cus: int,
    streamk: str = "all",
    reductions=None,
    streamk_ctas: int = -1,
    tile=None,
    occupancy=None,
) -> list[Choice]:
    """Every cached kernel that admits the problem (``run-from-cache --all-candidates``, ``tune``),
    each with its default pool (stream-K) or the split-K formula's degree. ``streamk``: ``all``,
    ``off`` (split-K only), ``dp_sk`` or ``persistent`` (that stream-K mode only); ``reductions``:
    keep only these variants (stream-K reductions and split-K epilogues alike)."""
    if streamk not in ("all", "auto", "off", *MODES):
        raise ProblemError(f"streamk={streamk!r}: use one of all, off, {', '.join(MODES)}")
    reductions = tuple(reductions) if reductions else None
    tile = tuple(tile) if tile is not None else None
    stage2 = find_stage2(cache, arch, problem.dw_dtype)
    out = []
    for k in candidates(cache, arch, problem, tile=tile):
        s = k.spec
        if s.family == "wgrad_sk":
            if streamk == "off" or (streamk in MODES and s.mode != streamk):
                continue
            if reductions and s.variant not in reductions:
                continue
            if s.variant == "workspace" and stage2 is None:
                continue
            c, _ = _streamk_choice(problem, k, cus, streamk_ctas, occupancy, stage2, forced=True)
            if c is not None:
                out.append(c)
        else:
            if streamk in MODES or (reductions and s.variant not in reductions):
                continue
            if s.variant in ("two_stage", "workspace") and stage2 is None:
                continue
            n = _splitk_ks(problem, k, cus, _occ(occupancy, k))
            out.append(Choice(k, ks_count=n, stage2=stage2 if s.variant in ("two_stage", "workspace") else None, reason="candidate"))
    return out


# ---------------------------------------------------------------------------------------------
# Tuning
# ---------------------------------------------------------------------------------------------
def tune(problem: ConvProblem, backend, cache, *, streamk="all", reductions=None, warmup=3, iters=20, remember=True, seed=0,
         hold=None, native_us: float | None = None) -> list[dict]:
    """Time every cached candidate for ``problem`` on ``backend`` and remember the fastest
    (``cache.remember_tuned``), which ``choose(streamk='auto')`` then uses. Returns one row per
    candidate (fastest first): the choice, median microseconds, or the error that stopped it."""
    from skwgrad.launcher.hostdata import DeviceInputs

    cus = backend.compute_units
    choices = all_choices(
        problem, cache, arch=backend.arch, cus=cus, streamk=streamk, reductions=reductions,
        occupancy=lambda k: backend.max_active_per_cu(
            backend.load(k.key, k.loader, k.metadata["name"], int(k.metadata["threads"]), int(k.metadata["shared"]))
        ),
    )  # fmt: skip
    if not choices:
        raise _no_kernel(problem, backend.arch, "kernel", cache=cache)
    bufs = DeviceInputs.random(problem, backend, seed=seed)
    rows = []
    try:
        for c in choices:
            row = {**c.to_dict()}
            try:
                plan = c.plan(problem, backend)
                t = plan.time(bufs.dy, bufs.x, bufs.dw, warmup=warmup, iters=iters, hold=hold)
                row["us"] = t["median_us"]
            except SkwgradError as e:
                row["error"] = str(e)
            rows.append(row)
    finally:
        bufs.free()
    ok = sorted((r for r in rows if "us" in r), key=lambda r: r["us"])
    if ok and remember:
        best = {k: v for k, v in ok[0].items() if k != "us"}
        best["us"] = ok[0]["us"]
        if native_us is not None:  # the framework's own op, timed beside: a record can prefer it
            best["native_us"] = float(native_us)
        try:
            cache.remember_tuned(backend.arch, cus, problem_key(problem), best)
        except CacheError as e:  # a read-only cache still tunes; it just cannot remember
            warnings.warn(f"tuning result not remembered: {e}", stacklevel=2)
    return ok + [r for r in rows if "us" not in r]


__all__ = [
    "Choice", "NoKernelError", "candidates", "widest", "rank", "find_stage2", "choose", "all_choices",
    "tune", "problem_key", "compile_all_command", "SK_MIN_ITERS",
]  # fmt: skip
