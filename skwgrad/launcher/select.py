"""Which cached kernel runs a problem, with which pool or split-K degree: policy + search.

Candidates: the cache's entries for the device's arch whose spec admits the problem
(``KernelSpec.check_problem``: dtype, dW dtype, fp32 precision, 2-D/3-D, pointwise addressing,
channel alignment), narrowed to the widest channel vectors (``vec_c``, ``vec_k``) per family
(``skwgrad.abi.narrow``, the rule ``compile-all --corpus`` builds by).

``choose`` takes, in order: a tuned record for (arch, CUs, problem) when the request is all
``auto`` (``tune``, ``--tune``, tune-on-first-use); the depthwise (``dwconv``) or packed-group
(``grouped``) family when it applies; else the search. The search (``rank_choices``) lists every
(kernel, launch setting) the request allows: split-K at ``direct`` (one split) and the reducing
epilogues at split degrees for 1..8 CTAs per CU over the tiles, stream-K at pools of 1..4 CTAs
per CU (waiting reductions only up to what is co-resident; partitions with no stream-K work
dropped), plus, for channel counts the vector kernels cannot load, the vector kernels on the
channel-padded problem (``skwgrad.abi.padding``: the copies priced on top), and ranks them by the
cost model's predicted time (``skwgrad.abi.costmodel``: the constants calibrated into the cache for
the device, else the arch's built-in ones). What could
not launch is kept as structured ``Rejected`` reasons, which the missing-kernel errors and
``skwgrad plan`` print. The SPEC's section-8 rule (stream-K for few tiles over a long reduction,
the ``ks_count`` formula, four workspace CTAs per CU) was the starting point; the H200 timings
replaced it by the measured model (benchmarks/RESULTS.md).

Every grid, partition and workspace size comes from ``skwgrad.abi.launch.launch_geometry``.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass

from skwgrad.abi import narrow
from skwgrad.abi.conv import ConvProblem
from skwgrad.abi.kernargs import I32_MAX, SK_REDUCTIONS, SPLITK_EPILOGUES
from skwgrad.abi.costmodel import MODELLED_FAMILIES, CostModel, builtin, fit, offline_occupancy, padding_us
from skwgrad.abi.costmodel import terms as cost_terms
from skwgrad.abi.arch import ARCHES
from skwgrad.abi.padding import channel_padding, pad_spec, padding_if_possible
from skwgrad.abi.launch import DWCONV_TMA_FILTER_WIDTHS, STAGE2_BLOCK, dwconv_ks_count, dwconv_tiling, dwconv_tma_ks_count, dwconv_tma_tiling, dwconv_walk_ks_count, grouped_ks_count, grouped_packed, spec_geometry, takes_pool, tma_tiling, tma_unsupported
from skwgrad.abi.streamk import MODES, WAITING_REDUCTIONS
from skwgrad.errors import CacheError, ProblemError, SkwgradError
from skwgrad.launcher.options import LaunchOptions
from skwgrad.launcher.plan import MAIN_FAMILIES, Kernel, PaddedPlan, Plan

from skwgrad.abi.policy import (  # noqa: E402,F401  (the choices re-exported: one definition)
    AUTO_MODES, AUTO_SK_REDUCTIONS, REDUCTION_CHOICES, SK_MIN_ITERS, SK_ONLY, SK_POOL_CTAS_PER_CU, SPLITK_CTAS_PER_CU,
    SPLITK_ONLY, STREAMK_CHOICES,
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
    predicted_us: float | None = None  # the cost model's prediction (dense families)
    terms: object = dataclasses.field(default=None, repr=False, compare=False)  # costmodel.Terms
    occupancy: int = 0  # CTAs per CU the prediction assumed (0: not ranked)
    padding: object = None  # skwgrad.abi.padding.ChannelPadding: the kernel runs the channel-padded problem
    pad_kernels: tuple = ()  # the pad kernels of a padded launch, one per element dtype it copies

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
        if self.padding is not None:
            return PaddedPlan(problem, self.kernel, backend, padding=self.padding, pool=self.pool, ks_count=self.ks_count,
                              stage2=self.stage2, pad_kernels={k.spec.dtype: k for k in self.pad_kernels})  # fmt: skip
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
            **({"padded": self.padding.describe(), "pad_keys": [k.key for k in self.pad_kernels]} if self.padding is not None else {}),
            **({"predicted_us": round(self.predicted_us, 3), "occupancy": self.occupancy} if self.predicted_us is not None else {}),
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
    if streamk != "auto" or reduction != "auto" or tile:
        parts.append("--preset full")
        if streamk == "off" or reduction in SPLITK_ONLY:
            parts.append("--streamk off")
        elif streamk in MODES or reduction in SK_REDUCTIONS:
            # a reduction both families take (atomic, workspace) under streamk=auto: its stream-K
            # kernels too (split-K is always built), since split-K's may not exist for this dW
            # (workspace: 16-bit dW of the input dtype only)
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
# Choosing: policy (the requests a launch may take) + search (the model ranks what is launchable)
# ---------------------------------------------------------------------------------------------
def _occ(occupancy, k: Kernel, arch: str) -> int:
    if occupancy is not None:
        return max(1, int(occupancy(k)))
    return offline_occupancy(k.metadata, arch)


def _two_stage_cap(problem: ConvProblem) -> int:
    """Most split-K replicas a two-stage launch can address: f32 replicas of dW under i32 offsets."""
    return (I32_MAX - 255) // (4 * problem.dw_numel)


def _family_ks(problem: ConvProblem, s, cus: int, resident: int | None = None, threads: int = 128) -> int:
    """The split-K degree rule of the depthwise and packed-group families (``skwgrad.abi.launch``);
    ``resident``: the kernel's co-resident CTAs per CU, which the depthwise window rule prices waves
    by; ``threads``: its threads per CTA (the window rule's cost of a step per channel)."""
    if s.family == "dwconv":
        return dwconv_ks_count(problem, bc=s.bm, br=s.bk, compute_units=cus, mode=s.mode, resident=resident, threads=threads)
    if s.family == "dwconv_walk":
        return dwconv_walk_ks_count(problem, bc=s.bm, bp=s.bk, bw=s.block, compute_units=cus)
    return grouped_ks_count(problem, gb=s.block, bm=s.bm, bn=s.bn, bk=s.bk, compute_units=cus)


def _special_ks(problem: ConvProblem, k: Kernel, cus: int) -> int:
    """That degree, as kernel ``k``'s epilogue can take it."""
    return _as_epilogue_takes(problem, k, _family_ks(problem, k.spec, cus, threads=k.metadata["threads"]))


def _as_epilogue_takes(problem: ConvProblem, k: Kernel, ks: int) -> int:
    if k.spec.variant == "direct":
        return 1
    if k.spec.variant == "two_stage":
        return max(1, min(ks, _two_stage_cap(problem)))
    return ks


# CTAs per CU the search (tune, calibrate) also tries for a depthwise kernel's split degree, beside
# the family rule's: the rule is a starting point, the timings say where it is wrong.
DWCONV_SEARCH_CTAS_PER_CU = (1, 2, 4, 8)


def _dwconv_search_ks(problem: ConvProblem, k: Kernel, cus: int) -> list[int]:
    s = k.spec
    got = {_as_epilogue_takes(problem, k, dwconv_ks_count(problem, bc=s.bm, br=s.bk, compute_units=cus, ctas_per_cu=c, mode=s.mode))
           for c in DWCONV_SEARCH_CTAS_PER_CU}  # fmt: skip
    return sorted(got)


def _splitk_degrees(problem: ConvProblem, k: Kernel, cus: int, o: LaunchOptions) -> list[int]:
    """Split-K degrees the search tries for kernel ``k``: the forced one, else 1 for ``direct``
    and, for the reducing epilogues, enough splits for 1..8 CTAs per CU over the tiles
    (``SPLITK_CTAS_PER_CU``), within [2, iterations per tile] and the replica bound."""
    s = k.spec
    if s.family == "wgrad_tma":
        t = tma_tiling(problem, s.bm, s.bn, s.bk, s.block)
    else:
        t = (grouped_packed(problem, s.block) if s.family == "grouped" else problem).tiling(s.bm, s.bn, s.bk)
    if o.ks_count is not None:
        if s.variant == "direct" and o.ks_count != 1:
            return []
        return [o.ks_count]  # out of range: launch_geometry says so
    if s.variant == "direct":
        return [1]
    top = t.iters_per_tile
    if s.variant == "two_stage":
        top = min(top, _two_stage_cap(problem))
    out = sorted({max(2, min(math.ceil(m * cus / t.num_tiles), top)) for m in SPLITK_CTAS_PER_CU})
    return [n for n in out if 2 <= n <= top]


def _pools(k: Kernel, cus: int, occ: int, o: LaunchOptions) -> list[int]:
    """Stream-K pools the search tries: the forced one, else 1..4 CTAs per CU
    (``SK_POOL_CTAS_PER_CU``); a waiting reduction only up to what is co-resident."""
    if o.streamk_ctas != -1:
        return [o.streamk_ctas]
    per_cu = [m for m in SK_POOL_CTAS_PER_CU if k.spec.variant not in WAITING_REDUCTIONS or m <= occ]
    return [m * cus for m in per_cu]


def _geometry(problem: ConvProblem, s, threads: int, **setting):
    """The launch geometry of a dense kernel (spec ``s``, ``threads`` per CTA) at one pool or
    split-K degree, with the flags its linear/tree CTAs publish (``KernelSpec.flags_per_cta``)."""
    return spec_geometry(problem, s, threads=threads, **setting)


@dataclass(frozen=True)
class Rejected:
    """A kernel (or one launch of it) the search could not take, and why."""

    label: str
    why: str

    def __str__(self) -> str:
        return f"{self.label}: {self.why}"


@dataclass
class Ranking:
    """Every launchable candidate of a request, best predicted first, and what was rejected."""

    choices: list
    rejected: list
    model: CostModel | None = None

    def best(self) -> Choice | None:
        return self.choices[0] if self.choices else None


def model_for(cache, arch: str, cus: int) -> CostModel:
    """The cost model selection ranks by: the one calibrated into the cache for (arch, CUs), else
    the built-in constants of the arch (``skwgrad.abi.costmodel.builtin``)."""
    stored = cache.cost_model(arch, cus) if hasattr(cache, "cost_model") else None
    return stored if stored is not None else builtin(arch)


def _families(o: LaunchOptions, problem: ConvProblem | None = None) -> tuple[str, ...]:
    """The modelled families a request may take: split-K, stream-K, the packed-group kernels
    (split-K on the packed problem) for few channels per group, and the TMA im2col kernels
    (split-K, sm_90) where TMA can address the problem."""
    packed = ("grouped",) if problem is not None and grouped_applies(problem) and o.tile is None else ()
    packed += ("wgrad_tma",) if problem is not None and not tma_unsupported(problem) else ()
    if o.streamk in MODES or o.reduction in SK_ONLY or o.streamk_ctas != -1:
        return ("wgrad_sk",)
    if o.streamk == "off" or o.ks_count is not None or o.reduction in SPLITK_ONLY:
        return ("wgrad", *packed)
    return ("wgrad", "wgrad_sk", *packed)


# Channels per group up to which the packed-group kernels are searched (H200 run P4, 15 layers
# with 32 per group: the 2-group 64-row tile, fill 1, made auto 1.11x faster than the dense
# kernels alone, 15/15 verified), and up to which over-filled tiles (fill > 1) compete when no tile
# fills at most 1 (measured to 16: beyond, only tiles of fill <= 1 are ranked).
PACKED_MAX_CHANNELS = 32
OVERFILLED_MAX_CHANNELS = 16


def grouped_applies(problem: ConvProblem) -> bool:
    """Few channels per group: the packed-group kernels can run it (``skwgrad.abi.launch``)."""
    return problem.g > 1 and (problem.c, problem.k) != (1, 1) and max(problem.c, problem.k) <= PACKED_MAX_CHANNELS


def _drop_narrow_packed_tiles(kernels, problem: ConvProblem, arch: str, rejected: list) -> list:
    """Packed-group kernels whose tile is narrower than the arch's wide matrix instruction
    (``Arch.wide_mma_rows``) go when a wide one runs the problem too, for 16-bit inputs: H200 runs
    D1/D2, 8 grouped rows with both cached: the 64-row tile (g8 64x64) 11-24% faster on 4 of them,
    within 5% on 3, 10% slower on 1 (a short one); the model, fitted on a few such timings, ranked
    the 32-row one first on all four (resnext g32: 45.4 vs 36.4 us). fp32 inputs keep both (there
    the 32-row tile ran 1.9x faster)."""
    rows = ARCHES[arch].wide_mma_rows if arch in ARCHES else 0
    if not rows or problem.dtype == "fp32":
        return kernels
    grouped = [k for k in kernels if k.spec.family == "grouped"]
    if not any(k.spec.bm >= rows for k in grouped):
        return kernels
    out = []
    for k in kernels:
        if k.spec.family == "grouped" and k.spec.bm < rows:
            rejected.append(Rejected(k.label, f"a {k.spec.bm}-row packed tile under {arch}'s {rows}-row matrix instruction, and a wide one runs this problem"))
            continue
        out.append(k)
    return out


def _best_filled_packed_tiles(kernels, problem: ConvProblem, rejected: list) -> list:
    """The packed-group kernels whose M tile the problem's groups fill best go on: a tile packs GB
    groups of K output channels into BM rows, fill GB * K / BM, and the largest fill of at most 1
    is kept (the others are said why). More groups than rows (fill > 1) load x for groups whose
    rows are in another tile; fewer (fill < 1) leave rows empty. H200 runs I3-I5: with 4 channels
    per group the 16-group 64-row tile (fill 1) ran 1.0-1.4x the 8-group ones (fill 1/2), with 16
    the 4-group 64-row tile 1.13-1.78x the dense kernels; with 8, the 8-group tile stays. When no
    cached tile fills at most 1, the over-filled ones compete up to OVERFILLED_MAX_CHANNELS per
    group and are rejected beyond (run P4 measured packed tiles past 16 per group at fill 1 only)."""
    grouped = [k for k in kernels if k.spec.family == "grouped"]
    fill = {k.label: k.spec.block * problem.k / k.spec.bm for k in grouped}
    best = max((f for f in fill.values() if f <= 1), default=None)
    if best is None:
        if max(problem.c, problem.k) <= OVERFILLED_MAX_CHANNELS:
            return kernels
        for k in grouped:
            rejected.append(Rejected(k.label, f"packs {k.spec.block} groups of {problem.k} output channels into {k.spec.bm} rows "
                                              f"(fill {fill[k.label]:.3g}); over {OVERFILLED_MAX_CHANNELS} channels per group only a "
                                              f"packed tile filled at most 1 runs (none is cached)"))  # fmt: skip
        return [k for k in kernels if k.spec.family != "grouped"]
    out = []
    for k in kernels:
        if k.spec.family == "grouped" and fill[k.label] != best:
            rejected.append(Rejected(k.label, f"packs {k.spec.block} groups of {problem.k} output channels into {k.spec.bm} rows "
                                              f"(fill {fill[k.label]:.3g}), and a packed tile filled {best:.3g} runs this problem"))  # fmt: skip
            continue
        out.append(k)
    return out


def rank_choices(problem: ConvProblem, cache, *, arch: str, cus: int, options: LaunchOptions, occupancy=None,
                 exclude=frozenset(), model: CostModel | None = None) -> Ranking:  # fmt: skip
    """The search: every (kernel, pool or ks_count) of the dense families that ``options`` allow,
    at the widest cached channel vectors, that can launch, ranked by the cost model's predicted
    time (ties: label, then pool/ks_count, so the order is deterministic). A problem whose channel
    counts the 16-byte vector kernels cannot load also gets those kernels on its channel-padded
    problem (``skwgrad.abi.padding``), predicted as the kernel plus the copies (``padding_us``)."""
    o = options
    model = model or model_for(cache, arch, cus)
    rejected: list[Rejected] = []
    out = _search(problem, cache, arch=arch, cus=cus, o=o, occupancy=occupancy, exclude=exclude, model=model, rejected=rejected)
    padding = padding_if_possible(problem)
    if padding is not None:  # the vector kernels on the channel-padded problem, the copies priced on top
        pads = pad_kernels(cache, arch, padding, exclude=exclude)
        if pads is None:
            rejected.append(Rejected("channel padding", f"no pad kernel ({', '.join(sorted({c.dtype for c in padding.copies}))}) cached"))
        else:
            extra = padding_us(padding, arch)
            got = _search(padding.padded, cache, arch=arch, cus=cus, o=o, occupancy=occupancy, exclude=exclude, model=model,
                          rejected=rejected, what="padded ")  # fmt: skip
            out += [dataclasses.replace(c, padding=padding, pad_kernels=pads, predicted_us=c.predicted_us + extra) for c in got]
    out.sort(key=lambda c: (c.predicted_us, c.kernel.label, c.pool, c.ks_count, c.padding is not None))
    seen, ranked = set(), []
    for c in out:  # one launch per (kernel, pool, ks_count, padded): two settings can resolve alike
        key = (c.kernel.key, c.pool, c.ks_count, c.padding is not None)
        if key not in seen:
            seen.add(key)
            ranked.append(c)
    return Ranking(ranked, rejected, model)


def find_pad(cache, arch: str, dtype: str) -> Kernel | None:
    for e in cache.find(arch, family="pad", dtype=dtype):
        if e.spec is not None and e.spec == pad_spec(dtype):
            return Kernel.from_entry(e, cache)
    return None


def pad_kernels(cache, arch: str, padding, *, exclude=frozenset()) -> tuple | None:
    """The pad kernels a padded launch needs (one per element dtype it copies), or None when one
    is not cached."""
    out = []
    for d in sorted({c.dtype for c in padding.copies}):
        k = find_pad(cache, arch, d)
        if k is None or k.key in exclude:
            return None
        out.append(k)
    return tuple(out)


def _search(problem: ConvProblem, cache, *, arch: str, cus: int, o: LaunchOptions, occupancy, exclude, model: CostModel,
            rejected: list, what: str = "") -> list:  # fmt: skip
    """Every launchable (kernel, pool or ks_count) of ``problem``, predicted (unsorted);
    what cannot launch goes to ``rejected``, labels prefixed by ``what``."""
    stage2 = find_stage2(cache, arch, problem.dw_dtype)
    fams = _families(o, problem)
    tile = tuple(o.tile) if o.tile is not None else None
    rejected_here: list[Rejected] = []
    kernels = []
    for fam in fams:
        ks = [k for k in candidates(cache, arch, problem, family=fam, tile=tile, exclude=exclude)]
        if o.streamk in MODES:
            ks = [k for k in ks if k.spec.mode == o.streamk]
        if o.reduction != "auto":
            ks = [k for k in ks if k.spec.variant == o.reduction]
        for k in ks:
            if not o.allows(k.spec.variant):
                rejected_here.append(Rejected(k.label, f"{k.spec.variant} is not deterministic"))
        kernels += widest([k for k in ks if o.allows(k.spec.variant)], problem)
    kernels = _best_filled_packed_tiles(kernels, problem, rejected_here)
    kernels = _drop_narrow_packed_tiles(kernels, problem, arch, rejected_here)
    if "wgrad_sk" in fams and "wgrad" in fams and _narrower_streamk(cache, arch, problem, tile):
        # Scalar loads cost far more than stream-K saves (H200, C=100/K=60: vec-1 stream-K 339 us,
        # vec-4 split-K 27 us): auto never trades vector width for stream-K.
        for k in kernels:
            if k.spec.family == "wgrad_sk":
                rejected_here.append(Rejected(k.label, "stream-K is cached only at narrower channel vectors than split-K"))
        kernels = [k for k in kernels if k.spec.family != "wgrad_sk"]
    out = []
    for k in kernels:
        s = k.spec
        if s.variant in ("two_stage", "workspace") and stage2 is None:
            rejected_here.append(Rejected(k.label, f"no Stage-2 reduce ({problem.dw_dtype}) cached"))
            continue
        if s.variant == "atomic" and problem.dw_dtype != "fp32":
            rejected_here.append(Rejected(k.label, "atomic accumulates into dW, which must be fp32"))
            continue
        occ = _occ(occupancy, k, arch)
        if s.family == "wgrad_sk":
            settings = [dict(pool=p) for p in _pools(k, cus, occ, o)]
        elif s.family == "grouped" and o.ks_count is None:  # the family's own degree, and the search's
            settings = [dict(ks_count=n) for n in sorted({_special_ks(problem, k, cus), *_splitk_degrees(problem, k, cus, o)})]
        elif s.family == "wgrad_tma" and s.mode == "persistent":  # every co-resident CTA walks the units
            settings = [dict(ks_count=n, pool=occ * cus) for n in _splitk_degrees(problem, k, cus, o)]
        elif s.family == "wgrad_tma" and s.mode == "streamk":  # every co-resident CTA walks an equal range
            settings = [dict(pool=occ * cus)] if o.ks_count is None else []
        else:
            settings = [dict(ks_count=n) for n in _splitk_degrees(problem, k, cus, o)]
        if not settings:
            rejected_here.append(Rejected(k.label, "no split-K degree or pool of the request fits it"))
        for st in settings:
            try:
                geo = _geometry(problem, s, int(k.metadata["threads"]), **st)
            except ProblemError as e:
                rejected_here.append(Rejected(k.label, f"{st}: {e}"))
                continue
            part = geo.partition
            if part is not None:
                if s.variant in WAITING_REDUCTIONS and part.sk_ctas and part.pool > occ * cus:
                    rejected_here.append(Rejected(k.label, f"pool {part.pool} exceeds the {occ * cus} co-resident CTAs a waiting reduction needs"))
                    continue
                if part.sk_ctas == 0 and o.streamk_ctas == -1 and o.streamk not in MODES and o.reduction == "auto":
                    rejected_here.append(Rejected(k.label, f"pool {part.pool}: the partition is all data-parallel (sk_ctas = 0)"))
                    continue
            t = cost_terms(problem, s, geo, arch=arch, compute_units=cus, occupancy=occ,
                           stack_bytes=int(k.metadata.get("stack_bytes", 0)))  # fmt: skip
            us = model.predict(t)
            out.append(Choice(k, pool=st.get("pool", 0), ks_count=geo.ks_count if s.family != "wgrad_sk" else 1,
                              stage2=stage2 if geo.workspace.needs_stage2 else None, predicted_us=us,
                              terms=t, occupancy=occ))  # fmt: skip
    rejected += [Rejected(what + r.label, r.why) for r in rejected_here]
    return out


def _describe(c: Choice) -> str:
    how = f"pool {c.pool}" if c.spec.family == "wgrad_sk" else f"ks_count {c.ks_count}" + (f" pool {c.pool}" if c.pool else "")
    return f"{c.kernel.label} {how}" + (f" padded {c.padding.describe()}" if c.padding is not None else "")


def _with_reason(c: Choice, ranking: Ranking) -> Choice:
    m = ranking.model
    top = ", ".join(f"{n} {v:.1f}" for n, v in list(m.explain(c.terms).items())[:3])
    reason = f"model ({m.source}): {c.predicted_us:.1f} us predicted [{top}]"
    if c.padding is not None:
        reason += f"; padded {c.padding.describe()}, the copies {padding_us(c.padding, c.kernel.arch):.1f} us of it"
    if len(ranking.choices) > 1:
        r = ranking.choices[1]
        reason += f"; runner-up {_describe(r)} {r.predicted_us:.1f} us"
    return dataclasses.replace(c, reason=reason)


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
        padding, pads = None, ()
        if got.get("pad_keys"):  # a padded launch: the padding follows from the problem, the copies' kernels are named
            padding = channel_padding(problem)
            pads = tuple(Kernel.from_entry(cache.get(key), cache) for key in got["pad_keys"])
            if padding is None or sorted(p.spec.dtype for p in pads) != sorted({c.dtype for c in padding.copies}):
                return None
            if any(p.spec.family != "pad" or p.arch != arch for p in pads):
                return None
        run = padding.padded if padding is not None else problem
        if k.arch != arch or not _admits(k.spec, run) or not options.allows(k.spec.variant):
            return None
        stage2 = None
        if got.get("stage2_key"):
            stage2 = Kernel.from_entry(cache.get(got["stage2_key"]), cache)
        return Choice(k, pool=int(got.get("pool", 0)), ks_count=int(got.get("ks_count", 1)), stage2=stage2, reason="tuned",
                      padding=padding, pad_kernels=pads)  # fmt: skip
    except (KeyError, TypeError, ValueError, SkwgradError):
        return None  # stale or foreign record: fall back to the model


def _strip_loads(problem: ConvProblem, spec) -> int:
    """x vectors a dwconv window kernel loads per output row and tap row: its strips (Wo rounded up
    to BW columns) times the window each strip reads (SW * (BW - 1) + DL * (X - 1) + 1 columns); 0
    for a gather kernel. A narrower strip computes fewer padding columns but loads more window per
    column: strips of 5 win where 7 wastes many columns (15 px: 21 loads against 27), strips of 7
    where it wastes few (57 px: 81 against 84; 113 px: 153 against 161)."""
    w = spec.dwconv_window
    if not w.bw:
        return 0
    return -(-problem.wo // w.bw) * (w.sw * (w.bw - 1) + w.dl * (problem.x - 1) + 1)


# Depthwise layers of at least this many channels take the TMA row-box kernels (``dwconv_tma``,
# sm_90) where cached. H200, session 19 (benchmarks/RESULTS.md): as a prototype 1.06-1.27x the window
# kernels on all 10 such layers (256-768 channels, 13-28 px, 3x3 and 5x5) and 0.74-0.93x on most
# layers below 128 channels or at 57-112 px; in the product (run X7, 14 layers of 256-768 channels
# drawn before they were timed) 1.113x, faster on 12; at 184-200 channels mixed (0.84-1.14).
DWCONV_TMA_MIN_CHANNELS = 256
# The channel block of a window kernel, where a mode has several (sweep.DWCONV_WINDOW_BLOCKS_WAVE32):
# none that pads the channels DWCONV_WIN_MAX_PADDING times the least-padding block or more (a 32-channel
# block on 16, 40 or 48 channels: masked lanes); of the rest the widest whose launch has at least
# DWCONV_WIN_MIN_TILES tiles (channel blocks x tap-row groups), else the narrowest (few tiles leave
# few CTAs a split). H200 runs B2/B3 (3x3: 32 channels 1.089x at 72-768 channels, where it has 3+
# blocks, 0.65-0.93x at 16-64, 1-2 blocks) and B4 (7x7, 7 tap-row groups: 16 channels 1.135x where
# 32 pads by a quarter or more, 0.79-1.0x elsewhere).
DWCONV_WIN_MAX_PADDING = 1.25
DWCONV_WIN_MIN_TILES = 3


def _channel_block_rank(problem: ConvProblem, spec, blocks) -> int:
    """0 for the channel block ``blocks`` (the bm of the cached kernels of ``spec``'s mode) that the
    rule above takes for ``problem``, 1 for another it allows, 2 for one that pads too much."""
    padded = {b: -(-problem.g // b) * b for b in blocks}
    allowed = [b for b in blocks if padded[b] < DWCONV_WIN_MAX_PADDING * min(padded.values())]
    tiled = [b for b in allowed if dwconv_tiling(problem, b, 1, 1, spec.mode).num_tiles >= DWCONV_WIN_MIN_TILES]
    best = max(tiled) if tiled else min(allowed)
    return 0 if spec.bm == best else 1 if spec.bm in allowed else 2


def _dwconv_tma_choice(problem, cache, arch, cus, o: LaunchOptions, stage2, exclude) -> Choice | None:
    """A depthwise problem of DWCONV_TMA_MIN_CHANNELS+ channels and a filter width of
    DWCONV_TMA_FILTER_WIDTHS on a cached ``dwconv_tma`` kernel that admits it (atomic for an fp32
    dW, workspace with Stage-2 for a 16-bit one), at the family's split rule; None otherwise
    (deterministic runs too: its adds are atomic)."""
    if problem.g < DWCONV_TMA_MIN_CHANNELS or o.deterministic or o.reduction not in ("auto", "atomic", "workspace"):
        return None
    if problem.x not in DWCONV_TMA_FILTER_WIDTHS:
        return None
    ks_all = sorted(candidates(cache, arch, problem, family="dwconv_tma", exclude=exclude), key=lambda k: k.label)
    for k in ks_all:
        if not o.allows(k.spec.variant) or (k.spec.variant == "workspace" and stage2 is None):
            continue
        n = dwconv_tma_ks_count(problem, bc=k.spec.bm, taps=k.spec.bn, wt=k.spec.bk, compute_units=cus)
        return Choice(k, ks_count=n, stage2=stage2 if k.spec.variant == "workspace" else None, reason=f"dwconv_tma ks_count={n}")
    return None


def _dwconv_tma_search_ks(problem: ConvProblem, k: Kernel, cus: int) -> list[int]:
    """Split degrees the search times for a dwconv_tma kernel: 1, 2 (the rule) and 4 CTAs per CU."""
    s = k.spec
    t = dwconv_tma_tiling(problem, s.bm, s.bn, s.bk)
    return sorted({max(1, min(math.ceil(c * cus / t.num_tiles), t.iters_per_tile)) for c in (1, 2, 4)})


def _dwconv_walk_search_ks(problem: ConvProblem, k: Kernel, cus: int) -> list[int]:
    """Split degrees the search times for a dwconv_walk kernel: the rule's and 1, 2, 4 CTAs per CU.
    Auto does not take the family yet: its prototype ran 1.155x auto's launch on 3x3 layers of 55-112
    px (H200 run G1), but the product kernel has not run on a GPU (the rule that would take it:
    benchmarks/proposals/dwconv_walk_auto.diff). The search times it, its rule's degree right after
    auto's launch, so tuning (``--tune``, tune on first use) finds it where it is faster."""
    s = k.spec
    return sorted({_family_ks(problem, s, cus), *(dwconv_walk_ks_count(problem, bc=s.bm, bp=s.bk, bw=s.block, compute_units=cus,
                                                                        ctas_per_cu=c) for c in (1, 2, 4))})  # fmt: skip


def _special_family_choice(problem, cache, arch, cus, o: LaunchOptions, stage2, exclude, occupancy=None) -> Choice | None:
    """Depthwise problems (C = K = 1 per group) on the ``dwconv`` kernels, few channels per group
    on the packed-group ``grouped`` kernels, when cached; None sends the problem to the dense
    kernels (the cost model does not cover these families). dwconv: a cached window kernel
    that admits the problem (its filter width, stride and dilation along W), else the smallest
    cached tap count that holds the filter; the widest channel vectors; grouped: the best fill
    of the packed M tile (GB * K of BM), fewer groups on ties. Split-K degree from the family's own rule;
    ``direct`` at one split, else the epilogue."""
    if o.reduction not in ("auto", *SPLITK_EPILOGUES, "workspace"):
        return None
    if (problem.c, problem.k) != (1, 1):
        return None
    tma = _dwconv_tma_choice(problem, cache, arch, cus, o, stage2, exclude)
    window = _dwconv_window_choice(problem, cache, arch, cus, o, stage2, exclude, occupancy)
    if window is None or tma is None:
        return window or tma
    # a wide channel block (_channel_block_rank) before the TMA family, which goes before
    # the narrowest block (H200 runs B2, B3: 3x3 layers of 376-768 channels on strips of 7, the
    # 32-channel kernel 1.04-1.26x faster than the family on 7 of 7; on strips of 5 at 29 px
    # 0.95-1.00x, and the 16-channel one below the family since session 19)
    narrowest = min(k.spec.bm for k in candidates(cache, arch, problem, family="dwconv", exclude=exclude)
                    if k.spec.mode == window.spec.mode and k.spec.variant == window.spec.variant)  # fmt: skip
    return window if window.spec.bm > narrowest else tma


def _dwconv_window_choice(problem, cache, arch, cus, o: LaunchOptions, stage2, exclude, occupancy=None) -> Choice | None:
    """The depthwise ``dwconv`` kernel (window before gather, see the ranking below) at its split rule."""
    family = "dwconv"
    ks_all = [k for k in candidates(cache, arch, problem, family=family, exclude=exclude) if o.allows(k.spec.variant)]
    ks_all = narrow.widest(ks_all, problem, spec_of=lambda k: k.spec)
    if not ks_all:
        return None
    if family == "dwconv":
        # a window kernel (mode win<BW>[r<TR>][s<SW>][d<DL>]: it admits only the filter width,
        # stride and dilation along W it was built for) before any gather kernel; then the
        # smallest tap count holding the filter; then the "taps" layout, the faster one on the
        # H200 wherever both were built (benchmarks/RESULTS.md, 2026-12-01). Among window kernels,
        # the strip width that loads the fewest x vectors per output row (_strip_loads), the widest
        # on ties (H200 runs W6, X1: at 57 and 113 px, where 5 saves 3-5% of the columns, strips of
        # 7 were as fast or 7% faster)
        # then the channel block (_channel_block_rank) among the kernels of the mode
        blocks = {}
        for k in ks_all:
            blocks.setdefault(k.spec.mode, set()).add(k.spec.bm)
        rank_key = lambda k: ((not k.spec.dwconv_window.bw, k.spec.bn, _strip_loads(problem, k.spec), -k.spec.dwconv_window.bw),  # noqa: E731
                              k.spec.mode != "taps", _channel_block_rank(problem, k.spec, blocks[k.spec.mode]), k.label)  # fmt: skip
    else:
        rank_key = lambda k: (-(k.spec.block * problem.k) / k.spec.bm, k.spec.block, k.label)  # noqa: E731
    ks_all.sort(key=rank_key)
    lead = ks_all[0]
    same_config = [k for k in ks_all if rank_key(k)[:2] == rank_key(lead)[:2]]
    n = _family_ks(problem, lead.spec, cus, resident=_occ(occupancy, lead, arch), threads=lead.metadata["threads"])
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
            if k.spec.bm != lead.spec.bm:  # another channel block: its own degree
                n = _family_ks(problem, k.spec, cus, resident=_occ(occupancy, k, arch), threads=k.metadata["threads"])
            kn = 1 if variant == "direct" else max(n, 1)
            if variant == "two_stage":
                kn = max(1, min(kn, _two_stage_cap(problem)))
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
    model: CostModel | None = None,
    **option_fields,
) -> Choice:
    """The kernel and launch settings for ``problem`` on a device of ``arch`` with ``cus`` CUs,
    under ``options`` (a ``LaunchOptions``, or its fields as keywords: validated once, there).

    In order: a tuned record for (arch, CUs, problem) when the request is all ``auto``; the
    depthwise / packed-group family when it applies; else the best-ranked launchable candidate
    of ``rank_choices`` (the cost model's prediction). ``occupancy(kernel) -> max active CTAs
    per CU`` (from the backend); None estimates it from the kernel's metadata (offline)."""
    if options is None:
        options = LaunchOptions(**option_fields)
    elif option_fields:
        raise ProblemError(f"pass either options= or option keywords ({', '.join(sorted(option_fields))}), not both")
    o = options
    if o.reduction == "atomic" and problem.dw_dtype != "fp32":
        raise ProblemError(
            f"the atomic reduction accumulates into dW, which must be fp32; this problem's dW is {problem.dw_dtype} "
            f"(ask for fp32 dW, or use another reduction)"
        )
    if o.reduction == "direct" and o.ks_count not in (None, 1):
        raise ProblemError("the direct split-K epilogue stores dW once: ks_count must be 1 (use two_stage, workspace or atomic)")
    auto = o.streamk == "auto" and o.reduction == "auto" and o.tile is None and o.ks_count is None and o.streamk_ctas == -1
    if use_tuned and auto:
        c = _tuned_choice(cache, arch, cus, problem, o)
        if c is not None and c.kernel.key not in exclude:
            return c
    stage2 = find_stage2(cache, arch, problem.dw_dtype)
    if o.streamk in ("auto", "off") and o.ks_count is None and o.tile is None:
        c = _special_family_choice(problem, cache, arch, cus, o, stage2, exclude, occupancy)
        if c is not None:
            return c
    ranking = rank_choices(problem, cache, arch=arch, cus=cus, options=o, occupancy=occupancy, exclude=exclude, model=model)
    best = ranking.best()
    if best is not None:
        return _with_reason(best, ranking)
    raise _nothing_launchable(problem, cache, arch, o, ranking)


def _nothing_launchable(problem, cache, arch, o: LaunchOptions, ranking: Ranking) -> SkwgradError:
    fams = _families(o)
    if any("Stage-2" in r.why for r in ranking.rejected) and not any("Stage-2" not in r.why for r in ranking.rejected):
        return _no_kernel(problem, arch, f"Stage-2 reduce ({problem.dw_dtype})", cache=cache)
    if ranking.rejected and any("co-resident" in r.why or "ks_count" in r.why for r in ranking.rejected):
        err = ProblemError(f"no cached kernel can launch {problem.describe()} on {arch} as asked: "
                           + "; ".join(map(str, ranking.rejected[:6])))  # fmt: skip
        err.rejected = list(ranking.rejected)
        return err
    if fams == ("wgrad_sk",):
        modes = (o.streamk,) if o.streamk in MODES else AUTO_MODES
        what = f"{'/'.join(modes)} stream-K kernel" + (f" with the {o.reduction} reduction" if o.reduction != "auto" else "")
    elif fams == ("wgrad",):
        what = "split-K kernel" + (f" with the {o.reduction} epilogue" if o.reduction != "auto" else "")
    else:
        what = "kernel"
    tile = tuple(o.tile) if o.tile is not None else None
    err = _no_kernel(problem, arch, what + (f" of tile {tile}" if tile else ""), cache=cache, streamk=o.streamk,
                     reduction=o.reduction, tile=tile,
                     hint="" if not ranking.rejected else " (rejected: " + "; ".join(map(str, ranking.rejected[:4])) + ")")  # fmt: skip
    err.rejected = list(ranking.rejected)
    return err


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
    model: CostModel | None = None,
) -> list[Choice]:
    """Every launch the search space holds for the problem (``run-from-cache --all-candidates``,
    ``tune``), ranked by the model: the dense families at every pool / split-K degree the search
    tries, and the depthwise / packed-group kernels at their own degree. ``streamk``: ``all``,
    ``off`` (split-K only), ``dp_sk`` or ``persistent`` (that stream-K mode only); ``reductions``:
    keep only these variants (stream-K reductions and split-K epilogues alike)."""
    if streamk not in ("all", "auto", "off", *MODES):
        raise ProblemError(f"streamk={streamk!r}: use one of all, off, {', '.join(MODES)}")
    reductions = tuple(reductions) if reductions else None
    tile = tuple(tile) if tile is not None else None
    o = LaunchOptions(streamk="auto" if streamk in ("all", "auto") else streamk, streamk_ctas=streamk_ctas, tile=tile)
    ranking = rank_choices(problem, cache, arch=arch, cus=cus, options=o, occupancy=occupancy, model=model)
    out = [c for c in ranking.choices if not reductions or c.spec.variant in reductions]
    special = []
    if streamk in ("all", "auto", "off") and tile is None and streamk_ctas == -1:
        stage2 = find_stage2(cache, arch, problem.dw_dtype)
        pick = _special_family_choice(problem, cache, arch, cus, LaunchOptions(), stage2, frozenset(), occupancy)
        for k in [k for fam in ("dwconv", "dwconv_tma", "dwconv_walk") for k in candidates(cache, arch, problem, family=fam)]:
            s = k.spec
            if reductions and s.variant not in reductions:
                continue
            if s.variant in ("two_stage", "workspace") and stage2 is None:
                continue
            st2 = stage2 if s.variant in ("two_stage", "workspace") else None
            lead = pick is not None and k.key == pick.kernel.key
            search = {"dwconv_tma": _dwconv_tma_search_ks, "dwconv_walk": _dwconv_walk_search_ks}.get(s.family, _dwconv_search_ks)
            degrees = search(problem, k, cus)
            for n in degrees:
                if lead and n == pick.ks_count:
                    continue
                special.append(Choice(k, ks_count=n, stage2=st2, reason="candidate"))
            if lead:
                special.insert(0, Choice(k, ks_count=pick.ks_count, stage2=pick.stage2, reason="candidate"))
        # the row-walk kernels at their rule's degree next (_dwconv_walk_search_ks says why)
        walk_rule = [x for x in special if x.spec.family == "dwconv_walk" and x.ks_count == _family_ks(problem, x.spec, cus)
                     and not (pick is not None and x.kernel.key == pick.kernel.key)]  # fmt: skip
        head = 1 if pick is not None else 0  # auto's launch stays first
        special = special[:head] + walk_rule + [x for x in special[head:] if x not in walk_rule]
    # A depthwise problem's own family first (the rule's pick leading): a ``top`` cut of this list
    # (tune on first use) must time what auto would run, not only dense kernels.
    return special + out if (problem.c, problem.k) == (1, 1) else out + special


# ---------------------------------------------------------------------------------------------
# Tuning and calibration
# ---------------------------------------------------------------------------------------------
def backend_occupancy(backend):
    """``occupancy(kernel)`` from the device: max co-resident CTAs per CU of the loaded kernel."""

    def occ(k: Kernel) -> int:
        md = k.metadata
        return backend.max_active_per_cu(backend.load(k.key, k.loader, md["name"], int(md["threads"]), int(md["shared"])))

    return occ


def tune(problem: ConvProblem, backend, cache, *, streamk="all", reductions=None, warmup=3, iters=20, remember=True, seed=0,
         hold=None, native_us: float | None = None, top: int | None = None) -> list[dict]:  # fmt: skip
    """Time the search space of ``problem`` on ``backend`` (every candidate, or the ``top`` best
    predicted by the cost model) and remember the fastest (``cache.remember_tuned``), which
    ``choose`` then uses. Returns one row per candidate (fastest first): the choice, its
    predicted and median microseconds, or the error that stopped it."""
    from skwgrad.launcher.hostdata import DeviceInputs

    cus = backend.compute_units
    choices = all_choices(problem, cache, arch=backend.arch, cus=cus, streamk=streamk, reductions=reductions,
                          occupancy=backend_occupancy(backend))  # fmt: skip
    if top is not None:
        choices = choices[: max(1, int(top))]
    if not choices:
        raise _no_kernel(problem, backend.arch, "kernel", cache=cache)
    bufs = DeviceInputs.random(problem, backend, seed=seed)
    rows = []
    try:
        for c in choices:
            row = {**c.to_dict()}
            try:
                plan = c.plan(problem, backend)
                n = iters
                if plan.time(bufs.dy, bufs.x, bufs.dw, warmup=1, iters=1)["median_us"] > SLOW_CANDIDATE_US:
                    n = max(3, iters // 4)  # a hopeless candidate is timed less, not skipped
                t = plan.time(bufs.dy, bufs.x, bufs.dw, warmup=warmup, iters=n, hold=hold)
                row["us"] = t["median_us"]
            except SkwgradError as e:
                row["error"] = str(e)
            rows.append(row)
    finally:
        bufs.free()
    ok = sorted((r for r in rows if "us" in r), key=lambda r: r["us"])
    if ok and remember:
        best = {k: v for k, v in ok[0].items() if k not in ("us", "terms", "spec")}
        best["us"] = ok[0]["us"]
        if native_us is not None:  # the framework's own op, timed beside: a record can prefer it
            best["native_us"] = float(native_us)
        try:
            cache.remember_tuned(backend.arch, cus, problem_key(problem), best)
        except CacheError as e:  # a read-only cache still tunes; it just cannot remember
            warnings.warn(f"tuning result not remembered: {e}", stacklevel=2)
    return ok + [r for r in rows if "us" not in r]


SLOW_CANDIDATE_US = 5000.0


def samples_of(rows, problem: ConvProblem, cache, *, arch: str, cus: int, stack_bytes: dict | None = None) -> list:
    """(Terms, measured us) of the timed dense rows of ``tune`` (what ``fit`` takes).
    ``stack_bytes``: per key, for entries built before their metadata recorded it."""
    out = []
    for r in rows:
        if "us" not in r or r.get("family") not in MODELLED_FAMILIES or not r.get("occupancy"):
            continue  # (a row with no occupancy was not ranked by the model: nothing to fit)
        if r.get("pad_keys"):
            continue  # a padded launch: its copies are priced apart (costmodel.padding_us), not by the fitted terms
        entry = cache.get(r["key"])
        spec = entry.spec
        # the launch as timed: a pool (stream-K; persistent / stream-K TMA with their degree too) or a degree
        setting = dict(pool=int(r["pool"]) if takes_pool(spec) else 0, ks_count=1 if spec.family == "wgrad_sk" else int(r["ks_count"]))
        geo = _geometry(problem, spec, int(entry.metadata["threads"]), **setting)
        stack = int(entry.metadata.get("stack_bytes", (stack_bytes or {}).get(r["key"], 0)))
        out.append((cost_terms(problem, spec, geo, arch=arch, compute_units=cus, occupancy=int(r["occupancy"]), stack_bytes=stack),
                    float(r["us"])))  # fmt: skip
    return out


def calibrate(problems, backend, cache, *, warmup=3, iters=20, seed=0, remember=True, remember_tuned=True, on_problem=None,
              hold=None) -> dict:  # fmt: skip
    """Time the whole search space of every problem (remembering each fastest choice unless
    ``remember_tuned`` is off), fit the cost model's constants to all the dense timings (weighted
    toward each problem's fastest candidates, ``costmodel.ranking_weights``; a term no timing
    exercises keeps the built-in constant) and store them with the cache (``remember``).
    Returns the model and, per problem, the fastest choice and the one the fitted model ranks first
    (with both measured times)."""
    arch, cus = backend.arch, backend.compute_units
    per_problem, samples, groups, fastest = [], [], [], {}
    for p in problems:
        rows = tune(p, backend, cache, warmup=warmup, iters=iters, seed=seed, remember=remember and remember_tuned, hold=hold)
        got = samples_of(rows, p, cache, arch=arch, cus=cus)
        samples += got
        groups += [problem_key(p)] * len(got)
        if rows and "us" in rows[0]:  # tune's rows: fastest first, any family
            fastest[problem_key(p)] = rows[0]["us"]
        per_problem.append((p, rows))
        if on_problem is not None:
            on_problem(p, rows)
    model = fit(samples, arch=arch, groups=groups, fastest=fastest)  # weighted toward each problem's fastest candidates
    if remember:
        cache.remember_model(arch, cus, model)
    report = []
    for p, rows in per_problem:
        timed = [r for r in rows if "us" in r]
        if not timed:
            report.append({"problem": p.describe(), "error": "no candidate ran"})
            continue
        best = timed[0]
        dense = [r for r in timed if r.get("family") in MODELLED_FAMILIES]
        pick = None
        if dense:
            preds = [(model.predict(t), r) for (t, _), r in zip(samples_of(dense, p, cache, arch=arch, cus=cus), dense)]
            pick = min(preds, key=lambda pr: (pr[0], pr[1]["label"]))[1]
        report.append({"problem": p.describe(), "tuned": best, "model_pick": pick,
                       "model_over_tuned": (pick["us"] / best["us"]) if pick else None})  # fmt: skip
    return {"model": model, "problems": report, "samples": len(samples)}


__all__ = [
    "Choice", "NoKernelError", "Ranking", "Rejected", "candidates", "widest", "find_stage2", "choose", "rank_choices",
    "all_choices", "tune", "calibrate", "samples_of", "model_for", "problem_key", "compile_all_command", "SK_MIN_ITERS",
    "find_pad", "pad_kernels",
]  # fmt: skip
