"""Everything about one launch that follows from (problem, kernel family/variant, tile, pool or
ks_count): tiling, partition, grid, workspace layout and the scalar kernargs.

Both the offline ``skwgrad plan`` and the launcher's plans call ``launch_geometry``; neither
computes a grid, a partition or a workspace size of its own.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import NamedTuple

from skwgrad.abi import kernargs
from skwgrad.abi.conv import ConvProblem, Tiling
from skwgrad.abi.streamk import StreamKPartition, partition
from skwgrad.abi.workspace import WorkspaceLayout, workspace_layout
from skwgrad.errors import AbiError, ProblemError

STAGE2_BLOCK = 512  # elements per Stage-2 CTA (one 16-byte vector per thread of 4 warps; small dW still
# spreads over tens of CUs); the stage2 spec in the cache uses the same
STAGE2_WARPS = 4


def stage2_spec(dw_dtype: str):
    """The Stage-2 reduce kernel for a dW dtype: what the sweep builds and selection looks up."""
    from skwgrad.abi.spec import KernelSpec  # spec imports nothing of this module; kept local to stay that way

    return KernelSpec("stage2", "reduce", dw_dtype, dw_dtype, block=STAGE2_BLOCK, num_warps=STAGE2_WARPS)


@dataclass(frozen=True)
class LaunchGeometry:
    problem: ConvProblem
    family: str
    variant: str
    mode: str
    tiling: Tiling
    grid: int
    ks_count: int
    ks_iters: int
    partition: StreamKPartition | None
    workspace: WorkspaceLayout
    scalars: dict  # every non-pointer kernarg
    tensor_maps: tuple = ()  # wgrad_tma: the TensorMapRequest the host encodes per operand

    @property
    def stage2_grid(self) -> int:
        return math.ceil(self.problem.dw_numel / STAGE2_BLOCK) if self.workspace.needs_stage2 else 0

    @property
    def stage2_scalars(self) -> dict:
        return {
            "numel": self.problem.dw_numel,
            "replicas": self.workspace.replicas,
            "reset": int(self.workspace.stage2_reset),
        }


def launch_geometry(
    problem: ConvProblem,
    family: str,
    variant: str,
    *,
    bm: int,
    bn: int,
    bk: int,
    mode: str = "",
    pool: int = 0,
    ks_count: int = 1,
    flags_per_cta: int | None = None,
    groups_per_tile: int = 0,
    taps_per_tile: int = 0,
    strip_width: int = 0,
) -> LaunchGeometry:
    """Resolve one launch. ``pool`` is the stream-K CTA pool (already resolved from -1);
    ``ks_count`` the split-K degree (stream-K kernels pin it to 1); ``groups_per_tile`` /
    ``taps_per_tile`` / ``strip_width`` the spec's block of the grouped / wgrad_tma / dwconv_walk families."""
    kernargs.declaration(family, variant)  # known family/variant
    if family == "dwconv":
        return dwconv_geometry(problem, variant, bc=bm, taps=bn, br=bk, ks_count=ks_count, mode=mode)
    if family == "wgrad_tma":
        if bool(mode) != (pool > 0):
            raise AbiError(f"a persistent or stream-K wgrad_tma launch takes a CTA pool > 0, a one-CTA-per-unit one none "
                           f"(mode {mode!r}, pool {pool})")  # fmt: skip
        return tma_geometry(problem, variant, bm=bm, bn=bn, bk=bk, taps_per_tile=taps_per_tile, ks_count=ks_count, pool=pool,
                            streamk=mode == "streamk")  # fmt: skip
    if family == "grouped":
        return grouped_geometry(problem, variant, gb=groups_per_tile, bm=bm, bn=bn, bk=bk, ks_count=ks_count)
    if family == "dwconv_tma":
        return dwconv_tma_geometry(problem, variant, bc=bm, taps=bn, wt=bk, ks_count=ks_count)
    if family == "dwconv_walk":
        return dwconv_walk_geometry(problem, variant, bc=bm, bp=bk, bw=strip_width, ks_count=ks_count)
    tiling = problem.tiling(bm, bn, bk)
    if tiling.num_tiles > kernargs.I32_MAX or tiling.total_iters > kernargs.I32_MAX:
        raise ProblemError(f"{tiling.num_tiles} tiles x {tiling.iters_per_tile} iterations overflow the kernels' i32 counters")
    part = None
    if family == "wgrad_sk":
        if ks_count != 1:
            raise AbiError(f"stream-K kernels pin ks_count = 1, got {ks_count}")
        part = partition(tiling.num_tiles, tiling.iters_per_tile, pool)
        grid = part.grid(mode)
        ks_iters = tiling.iters_per_tile
    elif family == "wgrad":  # every epilogue but direct takes any ks_count (workspace: one replica whatever it is)
        if not 1 <= ks_count <= tiling.iters_per_tile:
            raise ProblemError(
                f"ks_count must be in [1, {tiling.iters_per_tile}] (the iterations per tile), got {ks_count}"
            )
        ks_iters = math.ceil(tiling.iters_per_tile / ks_count)
        # Splits past the last non-empty one would only store zeros: drop them.
        ks_count = math.ceil(tiling.iters_per_tile / ks_iters)
        grid = tiling.num_tiles * ks_count
        if grid > 2**31 - 1:
            raise ProblemError(f"grid of {grid} CTAs is too large")
    else:
        raise AbiError(f"family {family!r} is not a wgrad kernel")
    ws = workspace_layout(
        family,
        variant,
        dw_numel=problem.dw_numel,
        bm=bm,
        bn=bn,
        sk_ctas=part.sk_ctas if part else 0,
        ks_count=ks_count,
        flags_per_cta=flags_per_cta,
    )
    if ws.replicas and ws.replicas * problem.dw_numel > kernargs.I32_MAX:
        raise ProblemError(
            f"{ws.replicas} f32 replicas of dW ({problem.dw_numel} elements) overflow 32-bit offsets; "
            f"use fewer splits or another reduction"
        )
    scalars = dict(kernargs.problem_scalars(problem))
    scalars["ks_iters"] = ks_iters
    scalars["ks_count"] = ks_count
    if not kernargs.declaration(family, variant).args[kernargs.WS_INDEX].reserved:
        ws_bytes = ws.region("replicas").nbytes
        if ws_bytes > kernargs.I32_MAX:
            raise ProblemError(f"workspace of {ws_bytes} bytes does not fit the i32 ws_bytes kernarg")
        scalars["ws_bytes"] = ws_bytes
    if part is not None:
        scalars.update(part.kernarg_values())
    return LaunchGeometry(problem, family, variant, mode, tiling, grid, ks_count, ks_iters, part, ws, scalars)


# -- depthwise family (``dwconv``): channel blocks x row splits ---------------------------------
# A CTA owns BC channels and every tap; split s owns steps [s*ks_iters, (s+1)*ks_iters) of BR
# rows of the N*Do*Ho*Wo reduction. Grid = ceil(G / BC) * ks_count, split-major. The spec's
# (bm, bn, bk) are (BC, TAPS_P2, BR); the Tiling reports channel blocks as tiles and steps as
# iterations.
DWCONV_CTAS_PER_CU = 4  # enough resident CTAs to hide the gather latency (~4 waves of CTAs)
# window kernels read contiguous strips: 2 CTAs per CU was the fastest of 1, 2, 4, 8 on most window
# rows (H200 run D1, 19 depthwise rows: auto 1.05x the fastest geomean, 13 within 5%; at 4: 1.09x, 9).
# Now the split the search's ctas_per_cu override gives, and the residency of a window kernel
# DWCONV_WIN_RESIDENT does not name.
DWCONV_WIN_CTAS_PER_CU = 2
DWCONV_MIN_STEPS = 8  # a split does at least this many steps, or its epilogue dominates
# window kernels: one step is BR strips x BW columns x every tap of TR rows (7-21x a gather
# step's products), so fewer steps per split already hide the epilogue
DWCONV_WIN_MIN_STEPS = 2
# Filling the SMs (``fill_wave``): where DWCONV_WIN_MIN_STEPS leaves fewer CTAs than compute units (small
# layers: 45-72 CTAs on the H200's 132 SMs), a window split may go down to one step, and the cost
# below picks among the degrees. The same kernel at the degree that fills the SMs ran 7-18% faster
# on the four such rows timed both ways (runs W6 and X1: 120 ch 14 px 12.5 -> 11.4 us, 128 ch
# 15 px 14.2 -> 13.2, 136 ch 13 px 13.5 -> 11.4, 384 ch 14 px 14.0 -> 13.1).
# The window kernels' split degree is the cheapest, by a two-term cost, of the degrees the search
# times (1, 2, 4, 8 CTAs per CU: select.DWCONV_SEARCH_CTAS_PER_CU), so auto picks among launches
# the search measures. Cost, in multiply-adds per channel (benchmarks/analyze_dwconv_ks.py, 91
# window rows of 11 H200 shape sets, runs D1-G7):
#   waves * (DWCONV_WIN_CTA_COST + steps per CTA * BR*BW*TR*X)   the CTAs, DWCONV_WIN_RESIDENT per
#       CU at a time: a wave is paid whole (3x3 at 2 per SM: 264 CTAs of 5 steps 22 us, 432 of 3
#       steps 29 us, randdw_12 of random_dw21)
#   + DWCONV_WIN_ATOMIC_COST * ks_count * (live channels x TR*X taps of one CTA)   the epilogue's
#       atomics: the splits of one channel block add into the same dW elements, which serialize
#       however many SMs run them (5x5, 16 channels in one block: 128 / 256 / 448 / 896 splits
#       29.5 / 37.1 / 53.6 / 92.8 us, ~0.09 us a split; with 8 live channels half that)
# Left-one-set-out over those sets (each fold fits the two costs on the others): 84/97 depthwise
# rows within 5% of the fastest timed degree, geomean 1.020, against 72/97, 1.040 for 2 per CU.
DWCONV_WIN_SEARCH_CTAS_PER_CU = (1, 2, 4, 8)
# Refitted (8000, 3) -> (2000, 2) for the 7x7 kernel at 32 channels (H200 run U5, every split degree
# of it on 18 7x7 layers, benchmarks/analyze_dwconv_ks.py --ks-sweep): the 79 other window rows keep
# 71/79 within 5% (geomean 1.015 vs 1.016); the 7x7 rows go from 7/18 (1.103) to 11/18 (1.053); the
# 8 drawn before the refit, left out of its fold: 6/8 (1.041) against 3/8 (1.090).
# Refitted (2000, 2) -> (500, 0.25) for the window epilogue without a shuffle tree (session 25: a CTA's
# epilogue 2.3-5.4x fewer instructions, its adds one vector per tap group): H200 run D4, every
# split degree the search times on 47 window rows of three sets drawn before it
# (benchmarks/fit_dwconv_win_costs.py): (2000, 2) 29/47 within 5% of the fastest timed degree
# (geomean 1.048); fitted leaving each set out and judged on it 42/47 (1.016); (500, 0.25) on all 44/47 (1.014).
DWCONV_WIN_CTA_COST = 500  # a CTA's fixed cost (setup, first loads, epilogue)
DWCONV_WIN_ATOMIC_COST = 0.25  # one split's atomic add of one dW element, serialized per element
# CTAs per CU of the default window kernels, by (TR, SW) of the mode: 65536 registers / (128 threads
# x the sm_90 bf16 build's registers: win7r3 180 -> 2, win7r3s2 168 -> 3, win7r5 128 -> 4, win7 at
# 32 channels (sweep.DWCONV_WINDOW_BC_WAVE32) 168 -> 3, win7s2 95-107 -> 4). A kernel the table does
# not name: DWCONV_WIN_CTAS_PER_CU. On the GPU the device's occupancy query replaces the table.
DWCONV_WIN_RESIDENT = {(3, 1): 2, (3, 2): 3, (5, 1): 4, (1, 1): 3, (1, 2): 4}
# Channels per thread (BC over the CTA's threads) the two costs were fitted at, by (TR, SW, X) where
# not 16 / 128 (the sm_90 16-channel builds): the 7x7 stride-1 kernel's 32 / 128 (run U5). A CTA
# whose threads hold more channels does proportionally more work a step, so the loop term scales
# by channels per thread over this: the 32-channel 3x3 kernel (32 strips) then costs a step what the
# 16-channel one (64 strips) does. H200 run B2, that kernel at three degrees on 18 rows: the scaled
# rule's degree within 5% of the best on 16 (geomean 1.020), the unscaled one's on 13 (1.044).
DWCONV_WIN_FIT_CHANNELS_PER_THREAD = {(1, 1, 7): 32 / 128}


class DwWindow(NamedTuple):
    """A window-kernel mode ``win<BW>[r<TR>][s<SW>][d<DL>]``: BW output columns per thread strip,
    TR tap rows per CTA, stride SW and dilation DL along W (1 where not spelled)."""

    bw: int
    tr: int
    sw: int
    dl: int


NO_WINDOW = DwWindow(0, 0, 1, 1)  # a gather kernel's mode


def dwconv_window(mode: str) -> DwWindow:
    """The window of a window-kernel mode ``win<BW>[r<TR>][s<SW>][d<DL>]`` (e.g. ``win7r3``,
    ``win7r3s2``, ``win7d2``), ``NO_WINDOW`` (bw = 0) for the gather kernels; the one parser
    (``KernelSpec.dwconv_window`` reads the same)."""
    m = re.fullmatch(r"win([1-9]\d*)(?:r([1-9]\d*))?(?:s([1-9]\d*))?(?:d([1-9]\d*))?", mode)
    if not m:
        return NO_WINDOW
    return DwWindow(int(m.group(1)), int(m.group(2) or 1), int(m.group(3) or 1), int(m.group(4) or 1))


def dwconv_tiling(problem: ConvProblem, bc: int, taps: int, br: int, mode: str = "") -> Tiling:
    """Gather kernels: tiles = channel blocks, iterations = steps of BR rows. Window kernels
    (mode ``win<BW>[r<TR>][s<SW>][d<DL>]``): tiles = channel blocks x groups of TR tap rows
    (kz, ky), iterations = steps of BR strips of BW output columns (N*Do*Ho*ceil(Wo/BW) strips,
    whatever the stride and dilation along W)."""
    for name, v in (("BC", bc), ("TAPS", taps), ("BR", br)):
        if v <= 0:
            raise ProblemError(f"dwconv {name} must be positive, got {v}")
    cblocks = math.ceil(problem.g / bc)
    bw, tr = dwconv_window(mode)[:2]
    if bw:
        groups = math.ceil(problem.z * problem.y / tr)
        strips = problem.n * problem.do * problem.ho * math.ceil(problem.wo / bw)
        return Tiling(
            bm=bc, bn=taps, bk=br, m_tiles_per_group=1, m_tiles=cblocks * groups, n_tiles=1,
            num_tiles=cblocks * groups, iters_per_tile=math.ceil(strips / br),
        )  # fmt: skip
    return Tiling(
        bm=bc, bn=taps, bk=br, m_tiles_per_group=1, m_tiles=cblocks, n_tiles=1, num_tiles=cblocks,
        iters_per_tile=math.ceil(problem.gemm_k / br),
    )  # fmt: skip


def dwconv_ks_count(problem: ConvProblem, *, bc: int, br: int, compute_units: int, ctas_per_cu: int | None = None,
                    mode: str = "", resident: int | None = None, fill_wave: bool = True, threads: int = 128) -> int:  # fmt: skip
    """The split-K degree. With ``ctas_per_cu`` (the search's override), and for gather kernels
    (at DWCONV_CTAS_PER_CU): ``ctas_per_cu * compute_units`` CTAs over the channel blocks, each
    split keeping at least DWCONV_MIN_STEPS steps (DWCONV_WIN_MIN_STEPS for window kernels),
    clamped to [1, steps]. A window kernel's own degree: of those degrees at
    DWCONV_WIN_SEARCH_CTAS_PER_CU, the one of least ``_dwconv_win_cost`` (whole waves of resident
    CTAs plus the atomics of the splits into one channel block's dW; fewer splits on a tie).
    ``compute_units``: the device's CU/SM count (offline: ``Arch.compute_units``); ``resident``:
    the kernel's co-resident CTAs per CU (the device's occupancy query, or the estimate from its
    metadata; None: DWCONV_WIN_RESIDENT, the sm_90 16-bit builds'); ``threads``: the kernel's threads per CTA
    (a window step's cost per channel grows with channels per thread). ``fill_wave``: filling the SMs (above;
    False: the rule before it, for A/B runs)."""
    win = dwconv_window(mode)
    if ctas_per_cu is None and win.bw:
        if compute_units <= 0:
            raise ProblemError(f"dwconv_ks_count needs compute_units > 0, got {compute_units}")
        t = dwconv_tiling(problem, bc, 1, br, mode)
        best = None
        for c in DWCONV_WIN_SEARCH_CTAS_PER_CU:
            ks = dwconv_ks_count(problem, bc=bc, br=br, compute_units=compute_units, ctas_per_cu=c, mode=mode, fill_wave=fill_wave)
            cost = _dwconv_win_cost(problem, t, win, bc=bc, br=br, ks_count=ks, compute_units=compute_units, resident=resident,
                                    threads=threads)  # fmt: skip
            if best is None or cost < best[0]:
                best = (cost, ks)
        return best[1]
    if ctas_per_cu is None:
        ctas_per_cu = DWCONV_CTAS_PER_CU
    if compute_units <= 0 or ctas_per_cu <= 0:
        raise ProblemError(f"dwconv_ks_count needs compute_units > 0 and ctas_per_cu > 0, got {compute_units}, {ctas_per_cu}")
    t = dwconv_tiling(problem, bc, 1, br, mode)
    want = math.ceil(ctas_per_cu * compute_units / t.num_tiles)
    min_steps = DWCONV_WIN_MIN_STEPS if win.bw else DWCONV_MIN_STEPS
    cap = t.iters_per_tile // min_steps
    if win.bw and fill_wave and cap * t.num_tiles < compute_units:
        cap = t.iters_per_tile  # filling the SMs: down to one step a split rather than idle SMs
    return max(1, min(want, cap, t.iters_per_tile))


def _dwconv_win_cost(problem: ConvProblem, t: Tiling, win: DwWindow, *, bc: int, br: int, ks_count: int,
                     compute_units: int, resident: int | None = None, threads: int = 128) -> float:  # fmt: skip
    """A window launch's cost in multiply-adds per channel (DWCONV_WIN_CTA_COST's comment): the
    launch ``ks_count`` resolves to (steps per split, non-empty splits), in whole waves of
    DWCONV_WIN_RESIDENT CTAs per CU, plus its splits' atomics into one channel block's dW."""
    steps = t.iters_per_tile
    iters = math.ceil(steps / max(1, min(ks_count, steps)))
    ks = math.ceil(steps / iters)
    if not resident:
        resident = DWCONV_WIN_RESIDENT.get((win.tr, win.sw), DWCONV_WIN_CTAS_PER_CU)
    waves = math.ceil(ks * t.num_tiles / (resident * compute_units))
    taps = win.tr * problem.x  # the taps of one CTA: TR rows of the filter
    # a CTA's threads share its bc channels: a step's time per channel grows with channels per thread
    per_channel = (bc / threads) / DWCONV_WIN_FIT_CHANNELS_PER_THREAD.get((win.tr, win.sw, problem.x), 16 / 128)
    loop = waves * (DWCONV_WIN_CTA_COST + iters * br * win.bw * taps * per_channel)
    return loop + DWCONV_WIN_ATOMIC_COST * ks * min(bc, problem.g) * taps


def dwconv_geometry(problem: ConvProblem, variant: str, *, bc: int, taps: int, br: int, ks_count: int,
                    mode: str = "") -> LaunchGeometry:  # fmt: skip
    """Resolve one dwconv launch (``ks_count`` from ``dwconv_ks_count`` or the caller). A window
    kernel's ``ks_count`` past its steps is clamped to them (a caller sizing it by the gather
    rule, which counts steps of rows, not of strips, asks for more)."""
    kernargs.declaration("dwconv", variant)
    if (problem.c, problem.k) != (1, 1):
        raise ProblemError(f"dwconv is depthwise (C = K = 1 per group); the problem has C = {problem.c}, K = {problem.k}")
    tiling = dwconv_tiling(problem, bc, taps, br, mode)
    steps = tiling.iters_per_tile
    if steps > kernargs.I32_MAX or problem.gemm_k + br > kernargs.I32_MAX:
        raise ProblemError(f"{problem.gemm_k} rows overflow the kernel's i32 row counters")
    if dwconv_window(mode)[0]:
        ks_count = max(1, min(ks_count, steps))
    if not 1 <= ks_count <= steps:
        raise ProblemError(f"ks_count must be in [1, {steps}] (the steps of {br} rows), got {ks_count}")
    ks_iters = math.ceil(steps / ks_count)
    ks_count = math.ceil(steps / ks_iters)  # drop splits past the last non-empty one
    grid = tiling.num_tiles * ks_count
    if grid > kernargs.I32_MAX:
        raise ProblemError(f"grid of {grid} CTAs is too large")
    # the split-K layouts (workspace: one f32 replica, zero at rest, that Stage-2 resets)
    ws = dataclasses.replace(workspace_layout("wgrad", variant, dw_numel=problem.dw_numel, ks_count=ks_count), family="dwconv")
    if ws.replicas and ws.replicas * problem.dw_numel > kernargs.I32_MAX:
        raise ProblemError(f"{ws.replicas} f32 replicas of dW ({problem.dw_numel} elements) overflow 32-bit offsets; use fewer splits")
    scalars = dict(kernargs.problem_scalars(problem))
    scalars["ks_iters"] = ks_iters
    scalars["ks_count"] = ks_count
    if variant in ("two_stage", "workspace"):
        ws_bytes = ws.region("replicas").nbytes
        if ws_bytes > kernargs.I32_MAX:
            raise ProblemError(f"workspace of {ws_bytes} bytes does not fit the i32 ws_bytes kernarg")
        scalars["ws_bytes"] = ws_bytes
    return LaunchGeometry(problem, "dwconv", variant, mode, tiling, grid, ks_count, ks_iters, None, ws, scalars)


# -- row-walk depthwise family (``dwconv_walk``): channel blocks x column groups x row splits ------
# A CTA owns BC channels and BP strips of BW output columns (a strip: one image's column block) and
# walks down the output rows of its split, so each x row is loaded once per CTA and row (its KY - 1
# predecessors stay in registers) where the window kernels reload it for every output row that
# reads it. Tiles = ceil(G / BC) channel blocks x ceil(N * ceil(Wo / BW) / BP) column groups,
# iterations = output rows; grid = tiles x ks_count, split-major. Each split re-reads the KY - 1 x
# rows above its first output row.
def dwconv_walk_tiling(problem: ConvProblem, bc: int, bp: int, bw: int) -> Tiling:
    for name, v in (("BC", bc), ("BP", bp), ("BW", bw)):
        if v <= 0:
            raise ProblemError(f"dwconv_walk {name} must be positive, got {v}")
    p = problem
    tiles = math.ceil(p.g / bc) * math.ceil(p.n * math.ceil(p.wo / bw) / bp)
    return Tiling(bm=bc, bn=p.y * p.x, bk=bp, m_tiles_per_group=1, m_tiles=tiles, n_tiles=1, num_tiles=tiles,
                  iters_per_tile=p.ho)  # fmt: skip


def dwconv_walk_ks_count(problem: ConvProblem, *, bc: int, bp: int, bw: int, compute_units: int,
                         ctas_per_cu: float | None = None) -> int:  # fmt: skip
    """The row splits. With ``ctas_per_cu`` (the search's override): ``ctas_per_cu * compute_units``
    CTAs over the tiles, clamped to [1, Ho]. Else the degree of least busiest-SM work: the CTAs an
    SM runs, ceil(tiles * ks / compute_units), times the rows each walks, ceil(Ho / ks) plus the
    KY - 1 rows its window starts with (the CTAs of one SM share its load and issue throughput,
    resident or not); fewer splits on a tie (fewer partial sums). H200 run G1 (session 28): the
    degree this rule takes was the faster of the two timed on 7 of 7 layers at 55-112 px."""
    if compute_units <= 0:
        raise ProblemError(f"dwconv_walk_ks_count needs compute_units > 0, got {compute_units}")
    t = dwconv_walk_tiling(problem, bc, bp, bw)
    rows = t.iters_per_tile
    if ctas_per_cu is not None:
        return max(1, min(math.ceil(ctas_per_cu * compute_units / t.num_tiles), rows))
    best = None
    for ks in range(1, rows + 1):
        per = math.ceil(rows / ks)
        if math.ceil(rows / per) != ks:
            continue  # the same launch as a smaller degree (empty splits dropped)
        work = math.ceil(t.num_tiles * ks / compute_units) * (per + problem.y - 1)
        if best is None or work < best[0]:
            best = (work, ks)
    return best[1]


def dwconv_walk_geometry(problem: ConvProblem, variant: str, *, bc: int, bp: int, bw: int, ks_count: int) -> LaunchGeometry:
    kernargs.declaration("dwconv_walk", variant)
    p = problem
    if (p.c, p.k) != (1, 1) or p.spatial_dims != 2:
        raise ProblemError(f"dwconv_walk is 2-D depthwise (C = K = 1 per group); the problem has C = {p.c}, K = {p.k}, {p.spatial_dims}-D")
    tiling = dwconv_walk_tiling(p, bc, bp, bw)
    rows = tiling.iters_per_tile
    if not 1 <= ks_count <= rows:
        raise ProblemError(f"ks_count must be in [1, {rows}] (the output rows), got {ks_count}")
    ks_iters = math.ceil(rows / ks_count)
    ks_count = math.ceil(rows / ks_iters)  # drop splits past the last non-empty one
    grid = tiling.num_tiles * ks_count
    elements = max(p.n * p.hi * p.wi, p.n * p.ho * p.wo) * p.g  # x's or dy's, whichever is larger
    if grid > kernargs.I32_MAX or elements > kernargs.I32_MAX:
        raise ProblemError(f"grid of {grid} CTAs or {elements} elements of x / dy overflow the kernel's i32 offsets")
    ws = dataclasses.replace(workspace_layout("wgrad", variant, dw_numel=p.dw_numel, ks_count=ks_count), family="dwconv_walk")
    scalars = dict(kernargs.problem_scalars(p))
    scalars["ks_iters"] = ks_iters
    scalars["ks_count"] = ks_count
    if variant == "workspace":
        scalars["ws_bytes"] = ws.region("replicas").nbytes
    return LaunchGeometry(p, "dwconv_walk", variant, "", tiling, grid, ks_count, ks_iters, None, ws, scalars)


# -- packed-group family (``grouped``): GB groups per tile, block-diagonal ------------------------
# The kernel runs the split-K wgrad main loop on the packed problem (G/GB groups of GB*C -> GB*K
# channels; same memory layout) and stores the diagonal blocks; so tiling, grid and ks_count are
# the packed problem's, the workspace and the kernargs the real problem's.
GROUPED_CTAS_PER_CU = 2


def grouped_packed(problem: ConvProblem, gb: int) -> ConvProblem:
    if gb < 1 or problem.g % gb:
        raise ProblemError(f"groups per tile must divide G = {problem.g}, got {gb}")
    return dataclasses.replace(problem, g=problem.g // gb, c=problem.c * gb, k=problem.k * gb)


def grouped_ks_count(problem: ConvProblem, *, gb: int, bm: int, bn: int, bk: int, compute_units: int,
                     ctas_per_cu: int = GROUPED_CTAS_PER_CU) -> int:  # fmt: skip
    """Split-K degree filling the device with ``ctas_per_cu`` CTAs per CU over the packed tiles."""
    t = grouped_packed(problem, gb).tiling(bm, bn, bk)
    return max(1, min(math.ceil(ctas_per_cu * compute_units / t.num_tiles), t.iters_per_tile))


def grouped_geometry(problem: ConvProblem, variant: str, *, gb: int, bm: int, bn: int, bk: int, ks_count: int) -> LaunchGeometry:
    kernargs.declaration("grouped", variant)
    geo = launch_geometry(grouped_packed(problem, gb), "wgrad", variant, bm=bm, bn=bn, bk=bk, ks_count=ks_count)
    ws = dataclasses.replace(
        workspace_layout("wgrad", variant, dw_numel=problem.dw_numel, ks_count=geo.ks_count), family="grouped"
    )
    if ws.replicas and ws.replicas * problem.dw_numel > kernargs.I32_MAX:
        raise ProblemError(f"{ws.replicas} f32 replicas of dW ({problem.dw_numel} elements) overflow 32-bit offsets; use fewer splits")
    scalars = dict(kernargs.problem_scalars(problem))
    scalars["ks_iters"] = geo.ks_iters
    scalars["ks_count"] = geo.ks_count
    if variant in kernargs.WORKSPACE_VARIANTS:  # two_stage's ks_count replicas, workspace's one
        ws_bytes = ws.region("replicas").nbytes
        if ws_bytes > kernargs.I32_MAX:
            raise ProblemError(f"workspace of {ws_bytes} bytes does not fit the i32 ws_bytes kernarg")
        scalars["ws_bytes"] = ws_bytes
    return LaunchGeometry(problem, "grouped", variant, "", geo.tiling, geo.grid, geo.ks_count, geo.ks_iters, None, ws, scalars)


# -- TMA im2col family (``wgrad_tma``, sm_90): filter taps as tiles, BK-row blocks as iterations --
# A tile is BM output channels x T filter taps x CB = BN / T input channels (the spec's block is T);
# grid = ceil(K / BM) x ceil(taps / T) x ceil(C / CB) tiles x ks_count splits, split-major, on the
# packed problem (``tma_groups_per_tile``: GB groups of a grouped convolution as one). The
# reduction is the N*[Do*]Ho*Wo output positions in blocks of BK (any Ho, Wo: TMA im2col walks them).
# Limits of TMA im2col (CUDA driver API, cuTensorMapEncodeIm2col; PTX cp.async.bulk.tensor im2col
# offsets), by x's rank: 4-D [N, H, W, C] (2-D problems) pixel-box corners in [-2^7, 2^7 - 1] and
# tap offsets in [0, 2^8 - 1]; 5-D [N, D, H, W, C] (3-D) corners in [-2^4, 2^4 - 1] and offsets in
# [0, 2^5 - 1]; traversal strides <= 8; every stride a multiple of 16 bytes.
TMA_CORNER_RANGE = {4: (-(2**7), 2**7 - 1), 5: (-(2**4), 2**4 - 1)}
TMA_MAX_ELEMENT_STRIDE = 8
TMA_MAX_TAP_OFFSET = {4: 2**8 - 1, 5: 2**5 - 1}


@dataclass(frozen=True)
class TensorMapRequest:
    """What the host encodes into one tensor-map kernarg (the kernel's metadata adds the box,
    swizzle and element type): ``shape`` and ``strides`` (elements) outermost first, as the
    kernel's descriptor; for im2col the pixel-box corners and traversal strides of the spatial
    dims (h, w) and the element strides of every dim."""

    operand: str  # "dy" | "x": whose pointer the map holds
    mode: str  # "tiled" | "im2col"
    shape: tuple
    strides: tuple
    lower: tuple = ()
    upper: tuple = ()
    element_strides: tuple = ()


def _tma_corners(p: ConvProblem) -> tuple[tuple, tuple]:
    """The im2col pixel box of x's spatial dims ([d,] h, w): where the first and the last output
    position's window starts, relative to the tensor's first and last pixel."""
    dims = range(3 - p.spatial_dims, 3)
    outs, ins = (p.do, p.ho, p.wo), (p.di, p.hi, p.wi)
    lower = tuple(-p.pad_lo[i] for i in dims)
    upper = tuple((outs[i] - 1) * p.stride[i] + 1 - ins[i] - p.pad_lo[i] for i in dims)
    return lower, upper


def tma_unsupported(p: ConvProblem) -> str:
    """Why TMA im2col cannot run problem ``p`` (empty when it can): the one list the spec, the
    geometry and selection read."""
    from skwgrad.abi.conv import DTYPE_BYTES

    if p.dtype not in ("bf16", "fp16"):
        return f"TMA kernels take 16-bit inputs; the problem is {p.dtype}"
    rank = 2 + p.spatial_dims  # x: [N, [D,] H, W, C]
    vec = 16 // DTYPE_BYTES[p.dtype]
    if p.c % vec or p.k % vec:
        per = " per group" if p.g > 1 else ""
        return f"TMA strides and dW stores are 16-byte vectors: C = {p.c} and K = {p.k}{per} must be multiples of {vec}"
    dims = range(3 - p.spatial_dims, 3)
    if max(p.stride[i] for i in dims) > TMA_MAX_ELEMENT_STRIDE:
        return f"TMA im2col walks strides up to {TMA_MAX_ELEMENT_STRIDE}; the problem's stride is {p.stride[3 - p.spatial_dims:]}"
    lower, upper = _tma_corners(p)
    lo, hi = TMA_CORNER_RANGE[rank]
    if not all(lo <= v <= hi for v in lower + upper):
        return f"TMA im2col pixel-box corners {lower}/{upper} (from the padding) are outside [{lo}, {hi}] for a {rank}-D x"
    extent = max((f - 1) * p.dilation[i] for i, f in zip(dims, (p.z, p.y, p.x)[3 - p.spatial_dims :]))
    if extent > TMA_MAX_TAP_OFFSET[rank]:
        return f"TMA im2col tap offsets (filter extent x dilation, {extent}) exceed {TMA_MAX_TAP_OFFSET[rank]} for a {rank}-D x"
    if p.gemm_k > kernargs.I32_MAX or p.x_numel > kernargs.I32_MAX:
        return "the problem's output positions or x elements overflow the kernel's i32 indices"
    return ""


def tma_groups_per_tile(problem: ConvProblem, bm: int, cb: int) -> int:
    """GB, the groups one ``wgrad_tma`` tile packs (BM output x CB input channels per tap): the most
    that divide G and fit the tile both ways, so the packed problem has the fewest tiles; 1 when a
    group fills the tile (or the problem is dense)."""
    fit = min(bm // problem.k, cb // problem.c)
    return max(d for d in range(1, max(1, fit) + 1) if problem.g % d == 0)


def tma_tiling(problem: ConvProblem, bm: int, bn: int, bk: int, taps_per_tile: int) -> Tiling:
    """The tiles of the packed problem: G / GB packed groups x ceil(GB*K / BM) output-channel
    blocks (``m_tiles``) x ceil(taps / T) tap groups x ceil(GB*C / CB) input-channel blocks."""
    if taps_per_tile <= 0 or bn % taps_per_tile:
        raise ProblemError(f"wgrad_tma: {taps_per_tile} taps per tile must divide BN = {bn}")
    cb = bn // taps_per_tile
    packed = grouped_packed(problem, tma_groups_per_tile(problem, bm, cb))
    mpg = math.ceil(packed.k / bm)
    m = packed.g * mpg
    n = math.ceil(packed.z * packed.y * packed.x / taps_per_tile) * math.ceil(packed.c / cb)
    return Tiling(bm=bm, bn=bn, bk=bk, m_tiles_per_group=mpg, m_tiles=m, n_tiles=n, num_tiles=m * n,
                  iters_per_tile=math.ceil(problem.gemm_k / bk))  # fmt: skip


def tma_geometry(problem: ConvProblem, variant: str, *, bm: int, bn: int, bk: int, taps_per_tile: int, ks_count: int = 1,
                 pool: int = 0, streamk: bool = False) -> LaunchGeometry:  # fmt: skip
    """One launch of a ``wgrad_tma`` kernel: split-K over BK-row blocks with the wgrad epilogues'
    workspace (direct: ks_count 1; atomic: dW zeroed; workspace: one zeroed f32 replica + Stage-2).
    The work units are (split, tile) pairs; one CTA each, or with ``pool`` > 0 (the persistent
    kernels) min(units, pool) CTAs that walk them in turn. ``streamk``: the pool's CTAs instead
    walk equal ranges of all tiles' iterations (ks_iters = iterations per CTA, ks_count 1), each
    adding a partial tile wherever its range starts or ends inside one (atomic or workspace)."""
    kernargs.declaration("wgrad_tma", variant)
    why = tma_unsupported(problem)
    if why:
        raise ProblemError(why)
    p = problem
    tiling = tma_tiling(p, bm, bn, bk, taps_per_tile)
    total = tiling.iters_per_tile
    if not 1 <= ks_count <= total:
        raise ProblemError(f"ks_count must be in [1, {total}] (the {bk}-row blocks of the reduction), got {ks_count}")
    if variant == "direct" and ks_count != 1:
        raise ProblemError(f"the direct epilogue stores dW once: ks_count must be 1, got {ks_count}")
    ks_iters = math.ceil(total / ks_count)
    ks_count = math.ceil(total / ks_iters)
    grid = tiling.num_tiles * ks_count
    if grid > kernargs.I32_MAX:
        raise ProblemError(f"{grid} work units overflow the kernel's i32 unit index")
    if pool < 0:
        raise ProblemError(f"a persistent CTA pool must be positive, got {pool}")
    if streamk:
        if variant == "direct" or not pool:
            raise ProblemError("a stream-K TMA launch takes a CTA pool and an adding epilogue (atomic or workspace)")
        iters = tiling.num_tiles * total
        if iters > kernargs.I32_MAX:
            raise ProblemError(f"{iters} iterations over all tiles overflow the stream-K kernel's i32 positions")
        ks_count, ks_iters = 1, math.ceil(iters / pool)
        grid = math.ceil(iters / ks_iters)
    elif pool:
        grid = min(grid, pool)
    ws = workspace_layout("wgrad", variant, dw_numel=p.dw_numel, ks_count=ks_count)
    rows, taps = p.gemm_k, p.z * p.y * p.x
    gb = tma_groups_per_tile(p, bm, bn // taps_per_tile)
    ck, kk = p.g * p.c, p.g * p.k  # all groups' channels: one row of x, one row of dy
    # x as [N, [D,] H, W, C]: a 2-D problem's tensor has no D (and its depth scalars are trivial)
    dims = range(3 - p.spatial_dims, 3)
    x_shape = (p.n, *((p.di, p.hi, p.wi)[i] for i in dims), ck)
    x_strides = tuple(math.prod(x_shape[i + 1 :]) for i in range(len(x_shape)))
    scalars = {
        "dy_shape0": rows, "dy_shape1": kk, "dy_stride0": kk, "dy_stride1": 1,
        **{f"x_shape{i}": v for i, v in enumerate(x_shape)}, **{f"x_stride{i}": v for i, v in enumerate(x_strides)},
        "DoHoWo": p.do * p.ho * p.wo, "HoWo": p.ho * p.wo, "Wo": p.wo, "C": p.c, "K": p.k, "CP": gb * p.c, "KP": gb * p.k,
        "YX": p.y * p.x, "X": p.x, "TAPS": taps, "stride_d": p.stride[0], "stride_h": p.stride[1], "stride_w": p.stride[2],
        "pad_d": p.pad_lo[0], "pad_h": p.pad_lo[1], "pad_w": p.pad_lo[2],
        "dil_d": p.dilation[0], "dil_h": p.dilation[1], "dil_w": p.dilation[2],
        "m_tiles": tiling.m_tiles, "c_tiles": tiling.n_tiles // math.ceil(taps / taps_per_tile),
        "ks_iters": ks_iters, "total_iters": total,
    }  # fmt: skip
    lower, upper = _tma_corners(p)
    maps = (
        TensorMapRequest("dy", "tiled", (rows, kk), (kk, 1)),
        TensorMapRequest("x", "im2col", x_shape, x_strides, lower, upper, (1, *(p.stride[i] for i in dims), 1)),
    )  # fmt: skip
    mode = "streamk" if streamk else "persistent" if pool else ""
    return LaunchGeometry(p, "wgrad_tma", variant, mode, tiling, grid, ks_count, ks_iters, None, ws, scalars, maps)


# -- TMA depthwise family (``dwconv_tma``, sm_90): channel blocks x splits of row-box steps --------
# A step is BH = DWCONV_TMA_X_ROWS - (X - 1) output rows x WT columns of one image; steps walk
# (image, row block, column block). Split-K over the steps, grid = channel blocks x ks_count.
# Split rule: DWCONV_TMA_CTAS_PER_CU CTAs per CU over the channel blocks (H200, session 19,
# benchmarks/dw_tma_proto.py on 10 layers of 256-768 channels: the fastest of 5 timed degrees on 9,
# within 1% on the tenth; one CTA per SM ran 5-33% slower, 3-4 per SM 3-37% slower).
DWCONV_TMA_CTAS_PER_CU = 2
# Filter widths the family runs in the product: selection takes it for these only and the default
# preset builds only these (the broad and full presets build every DWCONV_TMA_CONFIGS width). Session
# 25 (H200 runs D1, D2), against the window kernels with the epilogue without a shuffle tree: on 8 5x5
# layers of 256-1152 channels at 7-28 px the window kernel ran 0.51-0.93x the family's time (geomean
# 0.77; EfficientNet-B0 1152 ch 7 px 13.8 against 27.1 us); on the two 3x3 layers the family took (strips
# of 5: 392 ch 29 px, 760 ch 15 px) it was 1.13-1.19x faster.
DWCONV_TMA_FILTER_WIDTHS = (3,)


def dwconv_tma_tiling(problem: ConvProblem, bc: int, taps: int, wt: int) -> Tiling:
    """tiles = channel blocks, iterations = row-box steps (N * ceil(Ho / BH) * ceil(Wo / WT))."""
    from skwgrad.abi.spec import DWCONV_TMA_X_ROWS  # the kernel's box, part of its cache key

    bh = DWCONV_TMA_X_ROWS - (taps - 1)
    if bc <= 0 or wt <= 0 or bh <= 0:
        raise ProblemError(f"dwconv_tma needs BC, WT > 0 and a filter of at most {DWCONV_TMA_X_ROWS} rows")
    cblocks = math.ceil(problem.g / bc)
    steps = problem.n * math.ceil(problem.ho / bh) * math.ceil(problem.wo / wt)
    return Tiling(bm=bc, bn=taps, bk=wt, m_tiles_per_group=1, m_tiles=cblocks, n_tiles=1, num_tiles=cblocks, iters_per_tile=steps)


def dwconv_tma_ks_count(problem: ConvProblem, *, bc: int, taps: int, wt: int, compute_units: int) -> int:
    """The split degree: DWCONV_TMA_CTAS_PER_CU CTAs per CU over the channel blocks, in [1, steps]."""
    if compute_units <= 0:
        raise ProblemError(f"dwconv_tma_ks_count needs compute_units > 0, got {compute_units}")
    t = dwconv_tma_tiling(problem, bc, taps, wt)
    return max(1, min(math.ceil(DWCONV_TMA_CTAS_PER_CU * compute_units / t.num_tiles), t.iters_per_tile))


def dwconv_tma_geometry(problem: ConvProblem, variant: str, *, bc: int, taps: int, wt: int, ks_count: int) -> LaunchGeometry:
    """One launch of a ``dwconv_tma`` kernel: ``atomic`` adds into the zeroed fp32 dW, ``workspace``
    into one zeroed f32 replica that Stage-2 casts into dW (and zeroes again). dy and x reach the
    kernel as 4-D tiled tensor maps over the channels-last tensors; their boxes come from the
    kernel's metadata."""
    kernargs.declaration("dwconv_tma", variant)
    p = problem
    if p.spatial_dims != 2 or (p.c, p.k) != (1, 1):
        raise ProblemError("dwconv_tma runs 2-D depthwise problems")
    t = dwconv_tma_tiling(p, bc, taps, wt)
    total = t.iters_per_tile
    if not 1 <= ks_count <= total:
        raise ProblemError(f"ks_count must be in [1, {total}] (the row-box steps of one channel block), got {ks_count}")
    ks_iters = math.ceil(total / ks_count)
    ks_count = math.ceil(total / ks_iters)
    grid = t.num_tiles * ks_count
    if grid > kernargs.I32_MAX or p.n * p.hi * p.wi * p.g > kernargs.I32_MAX:
        raise ProblemError(f"{grid} CTAs or {p.n * p.hi * p.wi * p.g} elements of x overflow the kernel's i32 counters")
    from skwgrad.abi.spec import DWCONV_TMA_X_ROWS

    ws = workspace_layout("wgrad", variant, dw_numel=p.dw_numel, ks_count=ks_count)
    g = p.g
    scalars = {
        "dy_shape0": p.n, "dy_shape1": p.ho, "dy_shape2": p.wo, "dy_shape3": g,
        "dy_stride0": p.ho * p.wo * g, "dy_stride1": p.wo * g, "dy_stride2": g, "dy_stride3": 1,
        "x_shape0": p.n, "x_shape1": p.hi, "x_shape2": p.wi, "x_shape3": g,
        "x_stride0": p.hi * p.wi * g, "x_stride1": p.wi * g, "x_stride2": g, "x_stride3": 1,
        "G": g, "TAPS": p.y * p.x, "pad_h": p.pad_lo[1], "pad_w": p.pad_lo[2],
        "WS": math.ceil(p.wo / wt), "BHB": math.ceil(p.ho / (DWCONV_TMA_X_ROWS - (taps - 1))),
        "total_steps": total, "ks_iters": ks_iters, "cblocks": t.num_tiles,
    }  # fmt: skip
    maps = (
        TensorMapRequest("dy", "tiled", (p.n, p.ho, p.wo, g), (p.ho * p.wo * g, p.wo * g, g, 1)),
        TensorMapRequest("x", "tiled", (p.n, p.hi, p.wi, g), (p.hi * p.wi * g, p.wi * g, g, 1)),
    )
    return LaunchGeometry(p, "dwconv_tma", variant, "", t, grid, ks_count, ks_iters, None, ws, scalars, maps)


def takes_pool(spec) -> bool:
    """Whether a launch of kernel ``spec`` is sized by a CTA pool: stream-K kernels, and the
    persistent / stream-K TMA kernels (which take a split-K degree too). Here, not on
    ``KernelSpec``: spec.py is part of every cache key."""
    return spec.family == "wgrad_sk" or (spec.family == "wgrad_tma" and bool(spec.mode))


def spec_geometry(problem: ConvProblem, spec, *, threads: int = 0, **setting) -> LaunchGeometry:
    """``launch_geometry`` for a ``KernelSpec`` (its tile, mode and block), at one pool or
    ``ks_count`` (``setting``); ``threads`` per CTA sizes the linear/tree flags."""
    wave = threads // spec.num_warps if threads else 0
    return launch_geometry(
        problem, spec.family, spec.variant, bm=spec.bm, bn=spec.bn, bk=spec.bk, mode=spec.mode,
        flags_per_cta=(spec.flags_per_cta(wave) or None) if wave else None,
        groups_per_tile=spec.block if spec.family == "grouped" else 0,
        taps_per_tile=spec.block if spec.family == "wgrad_tma" else 0,
        strip_width=spec.block if spec.family == "dwconv_walk" else 0, **setting,
    )  # fmt: skip
