"""A measured cost model: the predicted device time of one launch of a dense wgrad kernel.

Selection ranks every launchable (kernel, pool or ks_count) of a problem by this prediction, so
it must order candidates the way the device does. The prediction is linear in a handful of
per-arch constants, each the price of one named term; the terms come from what is known without
running anything (the launch geometry of ``skwgrad.abi.launch``, the kernel spec, the kernel's
co-residency on a CU and the CU count):

``main_*``   the main loop on the critical path. The CTAs are scheduled over ``CUs x r`` slots
             (``r``: CTAs resident per CU, at most the kernel's occupancy). The critical path is
             ``path_iters`` iterations (the longest CTA, or whole waves of the grid, whichever is
             longer: the wave quantization). One iteration of a CTA costs a fixed latency
             (``main_iter``), the MMA chain of one warp (``main_mac``: its share of the tile, so a
             128x128 tile on 8 warps chains as long as a 64x128 one on 4), and the CU's throughput
             shared by the ``r`` resident CTAs: matrix work (``main_mac_shared`` for 16-bit
             inputs; ``main_mac_tf32_shared`` and ``main_mac_ieee_shared`` for fp32 inputs, each
             path fitted on its own: H200 tf32 runs far below its peak ratio to bf16), vector
             loads issued and bytes read (``main_loads_shared``, ``main_bytes_shared``).
             ``main_loads_exposed``: a CU holding fewer than ``LOAD_HIDING_WARPS`` warps cannot
             hide its loads' latency behind other warps; the loads of the missing warps' share
             cost extra (a 4-warp CTA alone on a CU is much slower per load than two of them).
             For split-K (and grouped) the shared terms count the CTA-iterations of the busiest
             CU, ceil(grid / CUs) x iterations per CTA, not path x r: the tail wave of a grid
             beyond one wave holds fewer CTAs than a full one (1065 CTAs on 528 slots: 9 in the
             third wave, each alone on its CU), and the measured times order by it.
             ``main_mac_tf32``: one warp's chain of tf32 MMAs, priced apart from the 16-bit chain
             (tf32 MMAs issue and retire slower than the peak ratio says).
             ``main_loads_sk_gather``: the loads of the stream-K gather kernels (not the pointwise
             one), priced again: measured, stream-K candidates near the fastest on 3x3 / 5x5
             layers ran 6-8% slower than split-K's rate for the same loads said, 1x1 ones did not
             (likely because a stream-K CTA walks its range at an offset no other CTA shares, so
             the tap-shifted re-reads of x find less in L2 than split-K's CTAs of one split do;
             run F4 saw 18% against 45% L2 hits on one such row).
             ``main_iter_tma_pointwise``: a price per iteration on the critical path of a TMA
             launch on a 1x1 stride-1 layer, beyond the TMA loop's own (the im2col descriptor
             walks one tap; the pointwise Triton kernels read x as a plain matrix and ran faster
             than the TMA loop's constants said, relative to them).
             ``main_iter_tma_3d``: a price per CTA-iteration the busiest CU runs (``cu_iters``) of
             a TMA launch on a 3-D layer, beyond the TMA loop's own: x's 5-D im2col loads cost the
             SM more than the 4-D ones the loop's constants were fitted on (a CU's throughput, not
             one CTA's latency: it fitted the 3-D launches better than a price per path iteration).
             ``main_iter_tma_partial_box``: a price per CTA-iteration the busiest CU runs of a TMA
             launch with two or more CTAs an SM, times the share of its TMA boxes that reach past
             the tensor's channels (``tma_partial_box_share``: the dy box of a last output-channel
             block that K does not fill, the x boxes of a last input-channel block that C does not
             fill). Measured, such launches ran up to twice the time per iteration of the same tile
             on full boxes (64 output channels on a 128-row tile: 0.41-0.50 us per CTA-iteration of
             the busiest CU, 128 channels: 0.22), and the same GEMM at 112 and at 28 px ran the same
             151 us (H200 run A3): not the plane, the boxes. A CTA alone on its SM waits on its own
             MMA chain and hides it.
             ``main_iter_tma_three_ctas`` (model 14): a price per CTA-iteration the busiest CU runs of
             a TMA launch whose grid puts three CTAs on an SM (the 64x64 tile's occupancy): three
             producer warps and their MMA warps share one SM's TMA and issue slots, and such launches
             ran 1.14-1.18x what the shared throughput terms said, against 0.83-1.03x at one CTA an SM.
             ``fill_tma_extra_waves`` (model 15): the waves of a TMA grid beyond the first, priced on
             their own beyond ``fill_tma``: a CTA of a later wave fills its ring and stores its tile
             again, and multi-wave launches of the one-CTA tiles ran slower than the one-wave
             launches ``fill_tma`` was fitted on said.
             ``main_iter_grouped``: a price per iteration on the critical path of the packed-group
             (``grouped``) loop, which its loads and MMAs alone under-price (cross-validated by shape
             set on 21 sets: 5 more rows within 5% of the fastest, none fewer in any set).
             ``main_loads_pointwise`` (model 13): a credit per load on the critical path (path
             iterations x loads per iteration, entered negative) of the Triton kernels that address
             x as a plain matrix (``spec.pointwise``, split-K and stream-K): their loop has no
             im2col arithmetic (no division of the reduction index into image, row, column and
             tap, no bounds masks) ahead of each load, so one CTA's iteration is shorter than the
             shared load price, fitted mostly on im2col loops, says. A credit, not a price on the
             im2col loops, because those loops' constants come from the calibrate corpora and are
             held here; its constant stays far below ``main_loads_shared``'s (path <= cu_iters),
             so a launch's main-loop price stays positive. Measured (H200 C3 and V5-A9): 2dpw
             direct launches on 7-14 px planes ran 0.82x their model-12 prediction, the same
             tiles on 1x1 stride-2 layers (im2col) 1.01-1.03x.
``epilogue`` tile stores on the critical path (split-K: one per CTA the busiest CU runs; a persistent
             CTA's per DP tile it walks; a stream-K range one per tile it touches), in the bytes
             they write, times (stream-K) the ``r`` co-resident CTAs whose stores leave the same CU.
``epilogue_narrow`` the store instructions of those tile stores beyond full-width ones: a kernel
             whose dW rows are not 16-byte aligned (``vec_c`` below the store width, the
             scalar-load kernels of unaligned channel counts) stores one element per
             instruction. Zero for the vector kernels (collinear with ``epilogue`` otherwise).
             Measured (H200, runs H1/H2): a 5x5 522->1036 layer on the 1-wide 128x128 kernel,
             whose fp32 dW is 54 MB, ran 96 us against 50 predicted without it.
             ``main_loads_narrow``: likewise the loads beyond 16-byte ones, per thread, on the
             critical path (1-wide 128x128 kernels ran 1.43x their prediction, 64x64 1.03x).
``fixup_*``  stream-K: the partials the owner waits for and reads (linear: one after the other;
             tree: one per round); ``fixup_atomic``: the atomic adds of the workspace / atomic
             reductions and split-K epilogues (split-K: every split adds its whole tile),
             device-wide per CU (K elements): the L2 executes them and the issuing CTA does not
             wait, so what costs is their throughput, not one CTA's latency.
             ``fixup_atomic_chain`` (model 13): the splits that add into each dW element of an
             atomic or workspace launch (split-K, packed-group, TMA: ``ks_count``): adds to one
             address serialize in its L2 slice, so many splits onto a small dW cost more than
             their device-wide throughput (``fixup_atomic``) says (C3: 64x64 three-CTA TMA,
             1x1 64->64 at 56 px, 4096 dW elements, ks 131 / 262 / 392: 12.3 / 14.8 / 17.1 us,
             predicted 11.9 / 11.4 / 11.9).
``stage2``   the Stage-2 reduce: bytes of replicas it reads (and zeroes again, for the split-K and
             stream-K workspace replica) and of dW it writes; ``stage2_chain``: its latency
             chain, since each thread sums the replicas STAGE2_UNROLL at a time (steps x waves of
             Stage-2 CTAs): many splits of a small dW cost more than their bytes say.
``l2_refetch`` stream-K's inputs read again from memory: the SK tiles' CTAs walk the reduction at
             staggered offsets, so once x and dy outgrow the L2 (``L2_BYTES``) the rows one tile
             read are gone when the next one needs them (split-K runs the tiles of one split
             together and shares them). MiB per CU beyond the compulsory traffic, scaled by the
             share of the footprint the L2 cannot hold.
``launch``   per kernel launched (the main kernel, Stage-2, the dW zeroing of atomic).
``dram``     the compulsory traffic of x and dy, device-wide.
``main_spill`` spill traffic: the stack bytes per thread beyond ``SPILL_FREE_BYTES``, per
             iteration on the critical path (a kernel that spills heavily runs several times
             slower than its tile's other terms say).
``fixed_*``  a fixed cost per (family, variant) class.

``TMA_FILL_CEILING`` is not a price but a bound: a TMA launch takes at least the bytes its busiest CU
lands in shared memory over the SM's fill ceiling. The linear terms add latency and throughput, so
they cannot say that a loop which asks for more bytes per MAC than the SM can land (64x64 tiles,
three CTAs an SM, on a large layer) runs at the ceiling whatever its latency would allow.

Constants are fitted (``fit``) by non-negative least squares on relative error from timed
candidates (``skwgrad calibrate`` or ``--tune`` runs), each candidate weighted by how close it is
to its problem's fastest (``ranking_weights``: ranking only has to order those), and stored with
the cache; a term no timing exercises keeps the prior's constant. ``builtin`` holds the
constants fitted on the reference part of each arch where one was measured (a scaled prior
elsewhere). Depthwise (``dwconv``) kernels are not modelled: selection takes them by their own
rule; packed-group (``grouped``) kernels are priced as split-K on the packed problem.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from skwgrad.abi.arch import ARCHES
from skwgrad.abi.conv import DTYPE_BYTES, ConvProblem
from skwgrad.abi.launch import LaunchGeometry, grouped_packed, tma_groups_per_tile
from skwgrad.abi.spec import STAGE2_UNROLL
from skwgrad.errors import ProblemError

MODEL_VERSION = 15  # 15: a TMA grid's waves beyond the first, priced on their own; 14: the TMA loop's extra price per CTA-iteration of the busiest CU where three of its CTAs share an SM; 13: a credit per load on the critical path of the pointwise Triton loops, and a price per split adding into each dW element (atomic / workspace); 12: the TMA loop's extra price per CTA-iteration of the busiest CU with co-resident CTAs, by the share of its boxes partly past the channels; 11: the TMA loop's extra price per CTA-iteration of the busiest CU on a 3-D layer (5-D im2col); 10: the TMA loop's extra price per iteration on a 1x1 stride-1 layer; 9: the TMA im2col family's main-loop terms and classes; 2: per-warp MMA chain, fp32 matrix rate, Stage-2 chain, L2 refetch; 3: tf32 / ieee rates, exposed loads;
# 4: the Stage-2 chain counted in steps of STAGE2_UNROLL replicas; 5: split-K's throughput terms priced
# by the busiest CU's CTAs (tail wave), a tf32 per-warp chain, stream-K gather loads; 6: a per-iteration
# price of the packed-group loop; 7: the narrow stores and loads of the 1-wide kernels (zero in the
# shipped sm_90 constants: H200 runs I1/I2 timed a fit with them beside the shipped constants on new
# shapes and it picked no better; a device calibration fits them); 8: the split-K workspace epilogue's
# class (``fixed_splitk_workspace``); a stored model of version 7 lacks its constant and is not read
# (the built-in constants rank until the device is calibrated again)

# (family, variant) classes with a fixed cost of their own (prologue, epilogue and scheduling
# differences the other terms do not see): one 0/1 term each.
# grouped kernels take wgrad's classes (split-K on the packed problem). Appended classes go last,
# so the constants of the earlier ones keep their positions.
CLASSES = (
    ("wgrad", "direct"), ("wgrad", "two_stage"), ("wgrad", "atomic"),
    ("wgrad_sk", "linear"), ("wgrad_sk", "tree"), ("wgrad_sk", "workspace"), ("wgrad_sk", "atomic"),
    ("wgrad", "workspace"),  # model 8
    ("wgrad_tma", "direct"), ("wgrad_tma", "atomic"), ("wgrad_tma", "workspace"),  # model 9
)  # fmt: skip
_CLASS_PREFIX = {"wgrad": "splitk", "wgrad_sk": "sk", "wgrad_tma": "tma"}
TERMS = (
    "main_iter", "main_mac", "main_mac_shared", "main_loads_shared", "main_bytes_shared",
    "epilogue", "fixup_serial", "fixup_bytes", "fixup_atomic", "stage2", "launch", "dram", "main_spill",
    "main_mac_ieee_shared", "stage2_chain", "l2_refetch", "main_mac_tf32_shared", "main_loads_exposed",
    "main_mac_tf32", "main_loads_sk_gather", "main_iter_grouped", "epilogue_narrow",
    "main_loads_narrow", "main_iter_tma", "main_mac_tma", "main_bytes_tma", "fill_tma", "main_chain_tma", "refetch_tma",
    *(f"fixed_{_CLASS_PREFIX[f]}_{v}" for f, v in CLASSES),
    "main_iter_tma_pointwise",  # model 10
    "main_iter_tma_3d",  # model 11
    "main_iter_tma_partial_box",  # model 12
    "main_loads_pointwise", "fixup_atomic_chain",  # model 13
    "main_iter_tma_three_ctas",  # model 14
    "fill_tma_extra_waves",  # model 15
)  # fmt: skip

# Cost of one MAC relative to a bf16/fp16 MAC on the arch's matrix units (peak-rate ratios of
# the reference parts: H200 989/495/67 TF dense bf16/tf32/fp32; MI300X 1307/654/163;
# MI355X 2500/-/157).
MAC_COST = {
    "sm_90": {"": 1.0, "tf32": 2.0, "ieee": 15.0},
    "gfx942": {"": 1.0, "tf32": 2.0, "ieee": 8.0},
    "gfx950": {"": 1.0, "tf32": 2.0, "ieee": 16.0},
}
MODELLED_FAMILIES = ("wgrad", "wgrad_sk", "grouped", "wgrad_tma")  # grouped: split-K on the packed problem
# Last-level cache the CUs share, per arch (H200: 50 MiB L2; MI300X / MI355X: 256 MiB Infinity
# Cache). Only the l2_refetch term reads it.
L2_BYTES = {"sm_90": 50 << 20, "gfx942": 256 << 20, "gfx950": 256 << 20}
# Stage-2 CTAs (STAGE2_BLOCK elements, 4 warps) one CU runs at a time, for the chain's waves.
STAGE2_CTAS_PER_CU = 8


# The most KiB a TMA loop lands in one SM's shared memory per microsecond, per arch: a bound, not a
# price (``CostModel.predict`` takes the larger of it and the linear terms). H200 runs Y3-Z9: no
# one of 844 timed TMA launches passed 135.5 KiB/us; the 64x64 three-CTA launches of large layers
# ran into it at 1.3-1.85x their linear prediction (deeplab 3x3 512ch 64 px: 395 us against 214
# predicted, 128x128 persistent 241 us). Taken as the bound over V5-Z9's 227 rows, auto's pick
# among the timed launches changed on 3 rows, each to a faster launch (deeplab 1.64x -> 1.06x the
# fastest, vae 1.32x -> 1.00x), and on none to a slower one.
TMA_FILL_CEILING = {"sm_90": 140.0}


@dataclass(frozen=True)
class Terms:
    """The feature vector of one launch, in ``TERMS`` order, plus what it was computed from."""

    values: tuple
    resident: int  # r: CTAs per CU on the critical path
    path_iters: int
    floor_us: float = 0.0  # a bound no constant scales (TMA_FILL_CEILING); 0: none

    def as_dict(self) -> dict:
        return dict(zip(TERMS, self.values))


def _spec_mac_cost(arch: str, spec) -> float:
    table = MAC_COST.get(arch, MAC_COST["sm_90"])
    return table.get(spec.precision if spec.dtype == "fp32" else "", 1.0)


# Stack bytes per thread that cost nothing measurable (H200, 2026-12-01, runs C1/C2): the 128x256
# kernels with 432-520 B of stack run at their tile's predicted rate; the 760 B ones (128x256
# stream-K linear with an fp32 dW) 10-20% slower; 968 B and more 2-10x slower. Cross-validated
# by shape set, 512 ranks best (102/112 rows within 5%; 768: 100/112, 256: 99/113).
SPILL_FREE_BYTES = 512
# Warps a CU must hold to hide its loads' latency (H200 cross-validation: 12, 16 and 24 rank alike;
# 8 ranks as if the term were absent).
LOAD_HIDING_WARPS = 16


def tma_partial_box_share(problem: ConvProblem, spec) -> float:
    """The share of a ``wgrad_tma`` launch's TMA boxes that reach past the channels of the packed
    problem, averaged over its tiles: per CTA-iteration one dy box (BM output channels; partial in
    the last block of each group when BM does not divide K) and ``block`` x boxes (CB input
    channels each; partial in the last block when CB does not divide C)."""
    cb = spec.tma_channels
    packed = grouped_packed(problem, tma_groups_per_tile(problem, spec.bm, cb))
    dy = (1.0 if packed.k % spec.bm else 0.0) / math.ceil(packed.k / spec.bm)
    x = (1.0 if packed.c % cb else 0.0) / math.ceil(packed.c / cb)
    return (dy + spec.block * x) / (1 + spec.block)


def terms(problem: ConvProblem, spec, geo: LaunchGeometry, *, arch: str, compute_units: int, occupancy: int,
          stack_bytes: int = 0) -> Terms:  # fmt: skip
    """The model's terms for one launch of ``spec`` (family wgrad or wgrad_sk) with geometry
    ``geo``, on ``compute_units`` CUs where the kernel fits ``occupancy`` CTAs per CU and each
    thread spills ``stack_bytes`` (the object's metadata; 0 when unknown)."""
    if spec.family not in MODELLED_FAMILIES:
        raise ProblemError(f"the cost model covers {', '.join(MODELLED_FAMILIES)}, not {spec.family}")
    cus = max(1, int(compute_units))
    occ = max(1, int(occupancy))
    t = geo.tiling
    tiles, ipt = t.num_tiles, t.iters_per_tile
    grid = max(1, geo.grid)
    part = geo.partition
    total = tiles * ipt
    sk_len = 0
    splitk = spec.family in ("wgrad", "grouped", "wgrad_tma")
    tma = spec.family == "wgrad_tma"
    # a persistent TMA CTA walks ceil(units / grid) work units (split x tile) one after the other
    units_per_cta = math.ceil(tiles * geo.ks_count / grid) if tma and spec.mode == "persistent" else 1
    # a stream-K TMA CTA's range of ks_iters iterations touches 1 + (L - 1) / ipt tiles on average
    # and adds a partial tile at the end of each
    segments = 1.0 + (geo.ks_iters - 1) / ipt if tma and spec.mode == "streamk" else 1.0
    if splitk:
        longest = geo.ks_iters * units_per_cta
        grain = geo.ks_iters
    elif spec.mode == "dp_sk":
        sk_len = part.iters_per_sk_cta + (1 if part.extra_iters else 0) if part.sk_ctas else 0
        longest = max(ipt if part.dp_tiles else 0, sk_len)
        grain = ipt if part.dp_tiles else max(1, sk_len)
    else:  # persistent: each CTA walks DP tiles pid, pid + pool, ... then its SK range
        sk_len = part.iters_per_sk_cta + (1 if part.extra_iters else 0) if part.sk_ctas else 0
        longest = math.ceil(part.dp_tiles / part.pool) * ipt + sk_len
        grain = max(1, longest)
    resident = max(1, min(occ, math.ceil(grid / cus)))
    slots = cus * resident
    path = max(longest, grain * math.ceil(total / (slots * grain)))
    waves = math.ceil(grid / slots)
    # CTA-iterations the busiest CU runs, for the terms priced by the CU's shared throughput: a
    # split-K grid beyond one wave puts ceil(grid / CUs) CTAs on a CU, and its tail wave shares
    # the CU with fewer CTAs than a full wave (which path x r counts it as). Stream-K's CTAs are
    # one wave (the pool) or persistent: path x r is what its busiest CU runs.
    cu_iters = math.ceil(grid / cus) * longest if splitk else path * resident

    elt = DTYPE_BYTES[problem.dtype]
    out = DTYPE_BYTES[problem.dw_dtype]
    mac = spec.bm * spec.bn * spec.bk * _spec_mac_cost(arch, spec) / 65536.0  # a 64x128x64 tile: 8 units
    mac_warp = mac * 4 / max(1, spec.num_warps)  # one warp's share, in units of a 4-warp tile's
    fp32_in = spec.dtype == "fp32"
    loads = spec.bk * (spec.bm / max(1, spec.vec_k) + spec.bn / max(1, spec.vec_c)) / 1024.0
    nbytes = spec.bk * (spec.bm + spec.bn) * elt / 1024.0  # KiB per CTA-iteration
    landed = cu_iters * nbytes  # KiB the busiest CU loads (TMA: lands in shared memory)
    # loads beyond 16-byte ones, per thread (4 warps = 1): a narrow kernel's threads issue them in turn
    full = 16 // elt
    narrow_loads = spec.bk * (spec.bm * (1.0 / max(1, spec.vec_k) - 1.0 / full) + spec.bn * (1.0 / max(1, spec.vec_c) - 1.0 / full))
    narrow_loads = max(0.0, narrow_loads) * 4 / max(1, spec.num_warps) / 1024.0
    tile_out = spec.bm * spec.bn  # dW elements a tile stores or adds
    if tma and problem.g > 1 and spec.variant == "direct" and DTYPE_BYTES[problem.dw_dtype] == 2:
        # a TMA tile packing GB groups stores only its GB diagonal blocks. The 16-bit direct
        # epilogue (16-byte vectors through shared memory) costs 1/GB of a tile (H200 runs T1-T4:
        # counted whole, 0.85x the prediction at 8 groups a tile, 0.81x at 16); the fp32 one
        # (stores and adds from the wgmma registers, 42420f2) issues the whole tile's instructions,
        # masked: counted whole (runs V1, V3, V5: divided, the 128x128 grouped atomic launches ran
        # 1.1-1.26x their prediction; 5-fold by row over 122 rows 99 within 5% of the fastest,
        # geomean 1.025, against 92 and 1.036). The grouped family keeps the whole tile.
        tile_out /= tma_groups_per_tile(problem, spec.bm, spec.bn // max(1, spec.block))

    v = spec.variant
    partial = 4 if v in ("two_stage", "atomic", "workspace", "linear", "tree") else out
    stores = waves  # tile stores one CTA slot makes on the critical path
    if spec.family == "wgrad_sk":
        # an SK range of L iterations from an arbitrary offset touches 1 + (L - 1) / ipt tiles on
        # average and stores a partial or a tile at the end of each (216 one-iteration tiles on
        # 132 CTAs: two stores on the path, not one)
        sk_stores = 1.0 + (sk_len - 1) / ipt if sk_len else 0.0
        if spec.mode == "persistent":  # and a persistent CTA stores each DP tile it walks
            stores = math.ceil(part.dp_tiles / part.pool) + sk_stores
        else:
            stores = waves + max(0.0, sk_stores - 1.0)
    cu_stores = stores * resident  # the co-resident CTAs' stores share the CU
    if splitk:
        cu_stores = math.ceil(grid / cus) * units_per_cta * segments  # every CTA on the busiest CU stores once (a tail wave's fewer)
    epilogue = cu_stores * tile_out * partial / 1024.0
    # store instructions beyond 16-byte ones (a tile row stores min(vec_c, 16 / partial) elements
    # at a time), per thread: each thread issues its share of them one after the other, and the
    # busiest CU's CTAs run cu_stores / resident such chains in turn
    store_elems = max(1, min(spec.vec_c, 16 // partial))
    narrow_per_tile = tile_out * (1.0 / store_elems - partial / 16.0) * 4 / max(1, spec.num_warps)
    epilogue_narrow = cu_stores / resident * narrow_per_tile / 1024.0
    fix_serial = fix_bytes = fix_atomic = 0.0
    if spec.family == "wgrad_sk" and part.sk_ctas:
        if v == "linear":
            fix_serial = part.max_linear_partners
            fix_bytes = part.max_linear_partners * tile_out * 4 / 1024.0
        elif v == "tree":
            fix_serial = part.tree_rounds
            fix_bytes = part.tree_rounds * tile_out * 4 / 1024.0
        elif v in ("workspace", "atomic"):
            # every SK segment (one per CTA, plus one per tile boundary inside the SK range) adds its partial
            fix_atomic = (part.sk_ctas + part.sk_tiles) * tile_out / 1024.0 / cus
    elif v == "atomic" or (v == "workspace" and spec.family != "wgrad_sk"):  # split-K, grouped, TMA
        # split-K atomic / workspace: every split adds its tile, into dW or into the one replica
        fix_atomic = grid * segments * tile_out / 1024.0 / cus
    stage2_bytes = stage2_chain = 0.0
    launches = 1
    if geo.workspace.needs_stage2:
        launches += 1
        reps = geo.workspace.replicas
        stage2_bytes = (reps * (2 if geo.workspace.stage2_reset else 1) * problem.dw_numel * 4 + problem.dw_numel * out) / 1048576.0
        stage2_chain = float(math.ceil(reps / STAGE2_UNROLL) * math.ceil(geo.stage2_grid / (cus * STAGE2_CTAS_PER_CU)))
    if v == "atomic":
        launches += 1  # dW zeroed before the kernel
    footprint = (problem.x_numel + problem.dy_numel) * elt
    dram = footprint / 1048576.0 / cus
    refetch = 0.0
    if spec.family == "wgrad_sk" and part.sk_ctas:
        miss = max(0.0, 1.0 - L2_BYTES.get(arch, L2_BYTES["sm_90"]) / footprint)
        read = part.sk_tiles * ipt * spec.bk * (spec.bm + spec.bn) * elt  # the SK CTAs' loads, all tiles
        refetch = max(0.0, read - footprint * part.sk_tiles / tiles) * miss / 1048576.0 / cus
    refetch_tma = 0.0
    if tma and spec.mode == "streamk":
        # A stream-K TMA CTA walks its tile's rows at an offset no CTA of another tile shares (the
        # ranges are equal, the tiles' lengths are not a multiple of them), so once x and dy
        # outgrow the L2 every tile reads them from memory again: H200 run S4, 128-channel 3x3 at
        # 256 px (134 MB of x and dy, 9 tiles) 261 us on stream-K against 120 on the persistent
        # split-K kernel, which runs the taps of one split together. Priced on its own: the
        # Triton stream-K loops' l2_refetch constant is fitted on far smaller excess traffic.
        miss = max(0.0, 1.0 - L2_BYTES.get(arch, L2_BYTES["sm_90"]) / footprint)
        read = tiles * ipt * spec.bk * (spec.bm + spec.bn) * elt
        refetch_tma = max(0.0, read - footprint) * miss / 1048576.0 / cus
    if tma:
        # TMA issues the loads (no per-thread load instructions or addresses): the loop is priced
        # by its own per-iteration latency, matrix throughput and bytes landed in shared memory,
        # and the load terms of the Triton kernels are zero for it
        # fill_tma: each CTA a slot runs in turn first waits a whole TMA round trip (the ring fills
        # before the first wgmma) and sets up its barriers: many short splits pay it many times
        # main_chain_tma: one MMA warp's wgmma chain on the path (its own rate: the TMA loop waits on
        # mbarriers, not on its own loads, so its chain is not the Triton loop's)
        tma_terms = (float(path), cu_iters * mac, landed, float(waves), path * mac_warp, refetch_tma)
        chain = 0.0
        loads = narrow_loads = 0.0
        own = (0.0, 0.0, 0.0)
    else:
        tma_terms = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        chain = path * mac_warp
        own = (float(path), 0.0 if fp32_in else cu_iters * mac, landed)
    values = (
        own[0], chain, own[1], cu_iters * loads,
        own[2], epilogue, float(fix_serial), fix_bytes, fix_atomic, stage2_bytes, float(launches), dram,
        cu_iters * max(0, int(stack_bytes) - SPILL_FREE_BYTES) / 1024.0,
        cu_iters * mac if fp32_in and spec.precision != "tf32" else 0.0, stage2_chain, refetch,
        cu_iters * mac if fp32_in and spec.precision == "tf32" else 0.0,
        path * loads * max(0.0, LOAD_HIDING_WARPS / max(1, spec.num_warps) - resident),
        path * mac_warp if fp32_in and spec.precision == "tf32" else 0.0,
        cu_iters * loads if spec.family == "wgrad_sk" and not spec.pointwise else 0.0,
        float(path) if spec.family == "grouped" else 0.0, max(0.0, epilogue_narrow), path * narrow_loads,
        *tma_terms,
        *(1.0 if ("wgrad" if spec.family == "grouped" else spec.family, v) == c else 0.0 for c in CLASSES),
        float(path) if tma and problem.is_pointwise else 0.0,
        float(cu_iters) if tma and problem.spatial_dims == 3 else 0.0,
        cu_iters * tma_partial_box_share(problem, spec) if tma and resident >= 2 else 0.0,
        -float(path) * loads if spec.family in ("wgrad", "wgrad_sk") and spec.pointwise else 0.0,
        float(geo.ks_count) if v in ("atomic", "workspace") and spec.family in ("wgrad", "grouped", "wgrad_tma") else 0.0,
        float(cu_iters) if tma and resident >= 3 else 0.0,
        float(waves - 1) if tma else 0.0,
    )  # fmt: skip
    floor_us = landed / TMA_FILL_CEILING[arch] if tma and arch in TMA_FILL_CEILING else 0.0
    return Terms(values, resident, path, floor_us)


@dataclass(frozen=True)
class CostModel:
    """Per-arch constants (microseconds per unit of each term, ``TERMS`` order) and where they
    came from (``source``: "builtin", "fit", "cache"; ``samples``: timings fitted)."""

    arch: str
    constants: tuple
    source: str = "builtin"
    samples: int = 0
    fit_error: float = 0.0  # geomean |pred/measured - 1| over the fitted samples
    kept: tuple = ()  # terms no fitted sample exercised: their constants are the prior's

    def __post_init__(self):
        if len(self.constants) != len(TERMS):
            raise ProblemError(f"a cost model has {len(TERMS)} constants ({', '.join(TERMS)}), got {len(self.constants)}")
        if any(not math.isfinite(c) or c < 0 for c in self.constants):
            raise ProblemError("cost model constants must be finite and non-negative")

    def predict(self, t: Terms) -> float:
        return max(sum(c * x for c, x in zip(self.constants, t.values)), t.floor_us)

    def explain(self, t: Terms) -> dict:
        """Microseconds per term (the non-zero ones), largest first; where the fill ceiling binds,
        ``tma_fill_ceiling`` is the time it adds beyond the terms' sum."""
        parts = {n: c * x for n, c, x in zip(TERMS, self.constants, t.values) if c * x != 0}  # a credit (main_loads_pointwise) is negative
        extra = t.floor_us - sum(parts.values())
        if extra > 0:
            parts["tma_fill_ceiling"] = extra
        return dict(sorted(parts.items(), key=lambda kv: -kv[1]))

    def to_json(self) -> str:
        return json.dumps({"version": MODEL_VERSION, "arch": self.arch, "terms": list(TERMS), "constants": list(self.constants),
                           "source": self.source, "samples": self.samples, "fit_error": self.fit_error,
                           "kept": list(self.kept)}, sort_keys=True)  # fmt: skip

    @classmethod
    def from_json(cls, text: str, *, source: str | None = None) -> "CostModel":
        """Parse a stored model; raises ProblemError when it is not one this version reads."""
        try:
            d = json.loads(text)
            if not isinstance(d, dict) or d.get("version") != MODEL_VERSION or list(d.get("terms", ())) != list(TERMS):
                raise ValueError("another model version or term list")
            return cls(str(d["arch"]), tuple(float(c) for c in d["constants"]), source=source or str(d.get("source", "cache")),
                       samples=int(d.get("samples", 0)), fit_error=float(d.get("fit_error", 0.0)),
                       kept=tuple(str(k) for k in d.get("kept", ()) if k in TERMS))  # fmt: skip
        except (ValueError, TypeError, KeyError) as e:
            raise ProblemError(f"not a cost model of version {MODEL_VERSION}: {e}") from None


# -- fitting -------------------------------------------------------------------------------------
def nnls(a, b, *, iters: int = 0):
    """Lawson-Hanson non-negative least squares: argmin ||a x - b|| with x >= 0 (numpy arrays)."""
    import numpy as np

    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    m, n = a.shape
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    w = a.T @ (b - a @ x)
    limit = iters or 3 * n
    tol = 1e-10 * max(1.0, float(np.abs(a).max()) if a.size else 1.0)
    for _ in range(limit):
        if passive.all() or w[~passive].max(initial=-np.inf) <= tol:
            break
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
        w = a.T @ (b - a @ x)
    return x


# Ranking weights: selection only has to order the candidates of one problem that lie close to
# its fastest, so the fit weighs a candidate by how close it is: exp(-(t / t_fastest - 1) / TAU),
# plus a floor that keeps every candidate in the fit (a slow one must still be predicted slow).
RANK_TAU = 0.10
RANK_FLOOR = 0.10


def ranking_weights(times, groups, fastest=None) -> list:
    """Per sample: ``RANK_FLOOR + exp(-(t / t_fastest - 1) / RANK_TAU)``; ``groups`` names each
    sample's problem, ``fastest`` (problem -> us) its fastest candidate of any family (default:
    the fastest sample of the group). A dense candidate of a problem that another family runs
    far faster (a depthwise one) then weighs the floor: ranking never has to order it."""
    best: dict = dict(fastest or {})
    for t, g in zip(times, groups):
        best[g] = min(best.get(g, math.inf), t)
    return [RANK_FLOOR + math.exp(-(t / best[g] - 1.0) / RANK_TAU) for t, g in zip(times, groups)]


def fit(samples, *, arch: str, weights=None, prior: "CostModel | None" = None, groups=None, fastest=None) -> CostModel:
    """Fit the constants to ``samples``: (Terms, measured microseconds) pairs, minimising the
    relative error (each row scaled by 1/measured), optionally weighted per sample. ``groups``
    (the problem of each sample) weighs each by ``ranking_weights`` (``fastest``: problem -> its
    fastest time of any family), so the fit cares most about the candidates near each problem's
    fastest, where ranking happens.

    A term that no sample exercises (say the fp32 matrix rate, after a calibration of bf16
    shapes only) cannot be fitted: it keeps the ``prior``'s constant (default: the arch's
    built-in one), so the fitted model still prices it; those terms are named in ``kept``."""
    import numpy as np

    samples = list(samples)
    keep = [i for i, (_, us) in enumerate(samples) if us and us > 0 and math.isfinite(us)]
    if weights is not None:
        weights = [weights[i] for i in keep]
    samples = [(samples[i][0], float(samples[i][1])) for i in keep]
    if groups is not None and weights is None:
        groups = list(groups)
        weights = ranking_weights([us for _, us in samples], [groups[i] for i in keep], fastest)
    a = np.array([t.values for t, _ in samples], dtype=float).reshape(len(samples), len(TERMS))
    # only the terms the samples exercise are fitted (the others keep the prior's constants)
    fitted = int((np.abs(a) > 0).any(axis=0).sum())
    if not samples or len(samples) < fitted:
        raise ProblemError(f"fitting the {fitted} constants these timings exercise needs at least {fitted} timed samples, got {len(samples)}")
    y = np.array([us for _, us in samples], dtype=float)
    w = np.ones(len(samples)) if weights is None else np.asarray(weights, dtype=float)
    scale = w / y
    unseen = ~(np.abs(a) > 0).any(axis=0)
    base = np.array((prior or builtin(arch)).constants, dtype=float)
    fixed = np.where(unseen, base, 0.0)
    # columns normalised so the solver sees comparable magnitudes; constants scaled back
    a_s = a * scale[:, None]
    norm = np.abs(a_s).max(axis=0)
    norm[norm == 0] = 1.0
    x = nnls(a_s / norm, w - a_s @ fixed) / norm
    x = np.where(unseen, base, x)
    pred = a @ x
    err = float(np.exp(np.mean(np.log(np.maximum(np.abs(pred / y - 1.0), 1e-6)))))
    return CostModel(arch, tuple(float(c) for c in x), source="fit", samples=len(samples), fit_error=err,
                     kept=tuple(n for n, u in zip(TERMS, unseen) if u))  # fmt: skip


# -- constants ----------------------------------------------------------------------------------
# Fitted on the reference parts; see benchmarks/RESULTS.md for the run each comes from. An arch
# with no measured fit gets a prior scaled from sm_90 by the reference parts' peak rates; its
# first calibration on a device replaces it.
# The TMA im2col family (model 9): main_iter_tma, main_mac_tma, main_bytes_tma, fill_tma (per CTA
# wave: the ring fills before the first wgmma), main_chain_tma (one MMA warp's wgmma chain) and
# the fixed cost of its direct / atomic / workspace classes, fitted with every other constant held
# on the product's own timings of its launches (H200 runs S1 and S2, benchmarks/gpu_tma_auto.py:
# plan.time behind a stream hold, dW memset and Stage-2 included; benchmarks/fit_tma_terms.py
# --product; benchmarks/results/costmodel_tma_product_fit_2026-12-03_s2.json). Fitted on 443
# timings of the corpus and random_2026120334 / 41 (132 row timings), judged on the 25 dense
# 16-bit rows of random_2026120343 it never saw: the pick among the timed candidates (the best
# other family and the TMA launches) within 5% of the fastest on 20/25 rows, geomean 1.036,
# against 17/25, 1.087 for the constants run S2 ran (fitted on S1 alone, no chain term). The
# first constants, fitted on the mainloop harness's kernel-only timings (run R3), priced TMA
# 10-40% low. The workspace class takes the atomic one's constant (the same kernel).
# refetch_tma (stream-K TMA kernels, broad/full presets only) is a physical prior, not a fit: one
# MiB per SM re-read from memory at the H200's 4.3 TB/s over 132 SMs, about 32 us. Refitting every
# TMA constant on runs S1-S4 with it free (5.8) picked worse on the held-out random_2026120344
# rows (30/46 within 5% against 34/46 with these constants).
# Run V3 (2026-12-04): the TMA loop's constants (refetch_tma held) and every class's fixed cost
# (the constants that set one family against another) refitted together on every launch the
# product timed in runs T1, T2, T4, T6, T7, V1 and V3 (benchmarks/gpu_tma_auto.py: auto, the 3
# best-ranked launches of the other families and the 6 best-ranked TMA ones, each verified; the
# wide-epilogue TMA launches of runs before 42420f2 left out; 800 timings, 92 rows with two or more
# launches), the main-loop constants held (benchmarks/fit_tma_terms.py --product --all-families;
# benchmarks/results/costmodel_allfamily_fit_2026-12-04_v3.json). Fitted without V3's two sets
# (drawn after V1) and judged on them, the pick among each row's timed launches was within 5% of
# the fastest on 24/32 rows, geomean 1.031, against 19/32 and 1.060 with the constants before
# (classes 4.12504, 5.20626, 0, 5.66788, 0, 6.32689, 0, 6.32689; TMA loop 0.0965568, 0.00223633,
# 0, 1.8095, 0.0259607; TMA classes 3.17682, 6.42723, 6.42723); 5-fold by row over all 92 rows:
# 70/92, 1.036 against 62/92, 1.046. The timings are 16-bit inputs only; fp32 (tf32 / ieee)
# launches take the same fixed costs, not judged on this data.
# Model 13 (2026-12-04, CPU only, on recorded timings): the TMA loop's constants and every class's
# fixed cost refitted with main_loads_pointwise and fixup_atomic_chain (benchmarks/fit_tma_terms.py
# --product ... --all-families, which fits both) on every launch the product timed in runs V5-A9 and C3 (4243
# launches, 533 rows with two or more; kernel metadata compiled from HEAD's default and broad
# presets; padded launches left out). Cross-validated by shape set (fit without a set, judge each
# row's pick among its timed launches; C3's four model sets held out together): within 5% of the
# fastest on C3's 61/77 rows, geomean 1.031, against 54/77, 1.043 with model 12's constants (a
# refit without the two terms: 51/77, 1.045); the other 25 sets 364/456, 1.0281 against 357/456,
# 1.0285 (benchmarks/results/costmodel_fit_2026-12-04_m13.json). Model 12's: classes 4.41947,
# 6.56145, 0, 6.47068, 0, 6.82701, 0, 5.93179; TMA loop 0.12161, 0.00188543, 0, 1.49248, 0.023711;
# TMA classes 3.1349, 5.54863, 5.39034.
_CLASSES_SM90 = (3.83379, 6.04422, 0.0, 5.97529, 0.0, 6.69281, 0.0, 5.50395)
_TMA_LOOP_SM90 = (0.073869, 0.0, 0.00275165, 0.931691, 0.0207893, 32.0)
# The TMA atomic class kept its constant after the dependent launch (225e0d8) made its dW memset ~1 us
# cheaper: H200 run E5 timed it 1 us lower (4.40226) against this, in one process, on 25 rows; the
# lower constant moved 10 picks to TMA atomic launches (1x1 layers of 7-224 px) and ran 0.982x as
# fast (geomean), the pointwise launches they replaced faster on 7 of the 9 flipped model rows.
_TMA_CLASSES_SM90 = (3.21702, 5.36226, 6.26885)
_M13_SM90 = (0.0521317, 0.0111598)  # main_loads_pointwise, fixup_atomic_chain
# main_iter_tma_pointwise (model 10): on 1x1 stride-1 layers the TMA launches near each row's
# fastest ran 1.04-1.06x their prediction and the pointwise Triton kernels (x read as a plain
# matrix) 0.91-0.96x, in the product's timings of sessions 15-17 and on W4's sets alike. Fitted
# alone (everything else held) on runs T2, T4, T6, V1, V3, V5, V6: 1702 timings, 224 rows. 5-fold
# by row, three seeds: 184-187 rows within 5% of the fastest timed launch against 180, geomean
# 1.025 against 1.028. Held out: W3's sets (best of ~10 launches) 34/35 against 33/35; W4's
# (every candidate) 38/42 both, geomean 1.014 against 1.018 (benchmarks/RESULTS.md, session 18).
_TMA_POINTWISE_SM90 = (0.0375495,)
# main_iter_tma_3d (model 11): H200 run Z1 timed auto and the model's 4 best-ranked 3-D TMA launches
# of 18 3-D layers (random_3d_2026120401 and the corpus's two): they ran 1.2-2.8x their prediction,
# the 64x64 three-CTA launches most, so auto took a 3-D TMA launch on every row and ran 0.87x the
# kernels it took before them. Fitted alone (everything else held), weighted least squares on
# relative error over the 72 TMA launches: 0.125 us per CTA-iteration of the busiest CU, mean
# |error| 9.2% (a price per path iteration: 14%). Each row's pick among its timed launches: within
# 5% of the fastest on 15/18 rows (leave one row out: 15/18, geomean 1.021) against 5/18 (1.307).
# Kept after the producer warp lost its divisions (57b544a; run Z5: 3-D launches 0.928x the time). A
# refit on run Z7's 54 3-D TMA launches of the new loop gave 0.057 us (mean |error| 11.3% against
# 15.8%, in-sample picks 7/9 within 5% against 5/9), but on random_3d_2026120406 (run Z9, drawn
# before it) auto at 0.057 ran 0.986x auto at 0.125 (slower by more than 5% on 2 of 11 rows).
# Run Z9's failure came before model 12: with main_iter_tma_partial_box pricing the few-channel 3-D
# layers where the TMA loop is slow, a lower 3-D price picks better. Chosen from 0-0.125 one run
# left out at a time over the 81 3-D rows of runs Z2-A4: 0.02 in 5 of 7 folds (0 in the others);
# held-out picks within 5% of the fastest on 64/81 rows, geomean 1.028, against 58/81 and 1.049 at
# 0.125 (session 22). Run A8, random_3d_2026120419 drawn before it: auto 1.096x auto at 0.125, 5 of
# the 6 rows it changed faster.
_TMA_3D_SM90 = (0.02,)
# main_iter_tma_partial_box (model 12): over the product's timings of runs V5-A2 (2029 launches, 293
# rows with two or more; each kernel's metadata from its cache), TMA launches with two or three CTAs
# an SM ran 1.09x their prediction on full boxes (388), 1.33x with up to half their boxes partial
# (113) and 1.43x beyond (107); one CTA an SM 0.97x, 1.06x and 1.09x (few channels are typical of
# layers of large planes, where a first version of this term priced the plane and picked better
# on sets drawn before run A2, 7 of 8 changed rows faster; run A3 then found the plane was not the
# cause). Chosen from 0-0.3 by the pick among each row's timed launches, one run left out at a time
# (13 runs): 0.2 in every fold; the held-out picks within 5% of the fastest on 233/293 rows, geomean
# 1.0288, against 220/293 and 1.0416 without the term and 228/293, 1.0329 with the plane's; mean
# |log error| of the TMA launches 0.130 against 0.155 (benchmarks/RESULTS.md, session 22).
_TMA_PARTIAL_BOX_SM90 = (0.2,)
# main_iter_tma_three_ctas (model 14): H200 runs F1 and F2 (session 27) timed the 64x64 TMA kernel
# (the one that fits three CTAs an SM) at 1.14-1.18x its model-13 prediction where its grid put more
# than two CTAs on an SM (13 launches; at most one an SM 0.83-1.03x), and auto took it at 392 CTAs on
# the 56 px 1x1 rows of ResNet-50 (1.06-1.08x the fastest timed launch: the same kernel at 264 CTAs
# or a pointwise one) and at 256 CTAs on r50_l4's 1x1 (1.07x a 128x64 launch). Chosen from 0-0.02
# by the pick among each row's timed launches, one shape set of one run left out at a time (runs
# V5-A9, C3, F1, F2: 4985 launches whose kernels the default cache holds, 630 rows with two or more;
# benchmarks/cv_three_ctas.py): 0.005 or 0.01 per fold, 0.01 the best in sample; held out 506/630
# rows within 5% of the fastest, geomean 1.0281, against 497/630 and 1.0289 without it. Run F4, the
# 9 rows whose pick it changes: 1.027x faster (1.008x on the 4 from sets drawn for the run).
_TMA_THREE_CTAS_SM90 = (0.01,)
# fill_tma_extra_waves (model 15): a TMA grid's waves beyond the first (a persistent pool is one). On
# the corpus in run F2 auto took the one-CTA 128x256 kernel at 792 and 450 CTAs (6 and 4 waves) on
# deeplab and unet 1280, 1.07x and 1.16x the 128x128 persistent launch, which the model priced within
# 2% of them: each wave's CTAs fill their rings and store their tiles again, and fill_tma (fitted mostly
# on one-wave launches) prices a wave at 0.93 us. Chosen from 0-6 us as model 14's term (same launches
# and folds; benchmarks/cv_three_ctas.py --term fill_tma_extra_waves): 2 in every fold; held out
# 528/630 rows within 5% of the fastest, geomean 1.0243, against 507/630 and 1.0278 with model 14.
# Run F5 (session 28), the 10 rows whose pick it changes: 1.028x faster than model 14, auto within 5% of
# the fastest timed launch on 8 of them against 2; on the 7 from sets drawn before it 1.000x (5 faster,
# 2 slower: 0.88x and 0.81x, near-ties lost to other terms' errors). With F4 and F5 in the folds the
# constant is still 2 in every fold: held out 544/648 against 518/648.
_TMA_EXTRA_WAVES_SM90 = (2.0,)
_BUILTIN: dict[str, tuple] = {
    # H200 (132 SMs), 2026-12-01: every search-space candidate timed with a held stream, 21 shape
    # sets: the corpus (runs B1, C2, E3, E5), the unseen corpus and benchmarks/shapes/heldout_2026-12-01.csv
    # (B1, C2), the drawn layers of random_2026120113..17.csv (C1-D3), random_g_2026120117.csv (D3),
    # random_2026120119.csv / random_g_2026120119.csv (E4), random_2026120120.csv (E5),
    # random_2026120121.csv (E6), random_2026120122/23.csv, random_g/dw_2026120122.csv (F1),
    # random_2026120124.csv / random_g_2026120124.csv (F2) and random_2026120125.csv /
    # random_dw_2026120125.csv (F3). Runs before E3 timed the Stage-2 reduce that added one replica
    # per load: their two-stage timings are left out (fit_costmodel.py --stale-stage2). 15996 timings,
    # ranking-weighted fit, geomean |error| 6.4%. Cross-validated by shape set (fit on twenty sets,
    # auto on the twenty-first; a set timed more than once is judged on its last file): 386 of 454
    # rows within 5% of the fastest (85%), geomean 1.021; model 5 (no packed-group iteration term) on
    # the same 21 sets: 381/454 (84%), 1.023 (benchmarks/results/costmodel_cv21_v6_2026-12-01.json).
    # main_mac_tf32_shared and main_mac_tf32 (positions 16 and 18) refitted alone, the rest held,
    # after tf32 moved to mma.sync (abi.arch.tf32_mma_sync): H200 run Q1 timed 776 tf32 candidates
    # of 18 fp32 layers (benchmarks/shapes/tf32_2026-12-02.csv). Fitted on either half of the
    # layers, judged on the other: 15/18 within 5% of the fastest against 11/18 with the wgmma-era
    # constants (0.038096, 0.0864604), geomean 1.023 against 1.054.
    "sm_90": (0.0, 0.00900426, 0.0, 0.212028, 0.0, 0.0456073, 0.444303, 0.0160903, 0.0799129, 0.203409, 0.0, 3.46015, 2.71655, 0.0173752, 0.893363, 1.58984, 0.0175738, 0.00885671, 0.00940462, 0.0234799, 0.0400511, 0.0, 0.0,
              *_TMA_LOOP_SM90,
              *_CLASSES_SM90,
              *_TMA_CLASSES_SM90,
              *_TMA_POINTWISE_SM90,
              *_TMA_3D_SM90,
              *_TMA_PARTIAL_BOX_SM90,
              *_M13_SM90,
              *_TMA_THREE_CTAS_SM90,
              *_TMA_EXTRA_WAVES_SM90),
}
# bf16 matrix peak of sm_90 / the arch's. A prior, not a measurement: every term (the Stage-2
# chain and the L2 refetch too, whose L2 size the term itself reads per arch) is scaled alike
# until the first calibration on the device replaces it.
_PRIOR_SCALE = {"gfx942": 0.8, "gfx950": 0.5}


def default_prior(arch: str) -> CostModel:
    """The physically plausible starting constants (no measurement behind them)."""
    return CostModel(arch, _DEFAULT_PRIOR, source="prior")


def builtin(arch: str) -> CostModel:
    if arch in _BUILTIN:
        return CostModel(arch, _BUILTIN[arch], source="builtin")
    base = _BUILTIN.get("sm_90", _DEFAULT_PRIOR)
    s = _PRIOR_SCALE.get(arch, 1.0)
    return CostModel(arch, tuple(c * s for c in base), source="prior")


# A physically plausible starting point (microseconds per unit), used until a fit exists.
_DEFAULT_PRIOR = (
    0.02, 0.01, 0.005, 0.01, 0.002,  # main loop
    0.01, 0.5, 0.02, 0.01,  # epilogue, fix-up
    0.3, 3.0, 0.25, 0.05,  # stage2 (per MiB), launch, dram (per MiB per CU), spill
    0.03, 0.3, 25.0,  # ieee fp32-input matrix work, Stage-2 chain (per replica and wave), L2 refetch (per MiB per CU)
    0.03, 0.05,  # tf32 matrix work, exposed loads
    0.01, 0.0, 0.0,  # tf32 per-warp MMA chain, SK gather loads, packed-group iteration
    0.5, 0.01,  # narrow tile stores, narrow loads (per 1024 instructions per thread beyond 16-byte ones)
    0.02, 0.005, 0.002, 1.0, 0.01, 32.0,  # TMA loop: per iteration on the path, matrix work, bytes landed, per CTA wave (fill), MMA chain, refetch (per MiB per CU: 4.3 TB/s over 132 SMs)
    0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,  # fixed per class
    0.0,  # TMA loop on a 1x1 stride-1 layer, per iteration on the path
    0.0,  # TMA loop on a 3-D layer, per CTA-iteration of the busiest CU
    0.0,  # TMA loop with co-resident CTAs, per CTA-iteration of the busiest CU times its partial boxes' share
    0.0, 0.0,  # pointwise Triton loop's credit per load on the path; per split adding into each dW element
    0.0,  # TMA loop with three CTAs an SM, per CTA-iteration of the busiest CU
    0.0,  # TMA grid, per wave beyond the first
)


# -- channel padding (``skwgrad.abi.padding``) ------------------------------------------------------
# A padded launch adds its copies to the main kernel's predicted time: a price per element moved
# (read or written) by each kind of copy, plus a fixed cost per pad launch (x and dy share one
# launch, dW's copy is its own: ``ChannelPadding.launches``). Not terms of the fitted model (its
# timings ran no copies). Copies' cost = padded launch minus the same kernel on the padded problem
# (benchmarks/gpu_padding.py, 15 layers; benchmarks/RESULTS.md, tenth session), least squares on
# relative error. H200 run I4: gathers (x, dy into staging, 16-byte stores) 2.3 elements per ns,
# the row-tiled scatter (dW back out) 1.3, 2.3 us per launch; 9.2% rms. One rate for both kinds
# fitted no better than 21% (run I3, whose scatter moved 0.35 elements per ns). AMD: the same,
# not measured.
PAD_GATHER_ELEMENTS_PER_US = {"sm_90": 2.3e6}
PAD_SCATTER_ELEMENTS_PER_US = {"sm_90": 1.3e6}
PAD_LAUNCH_US = 2.3


def padding_us(padding, arch: str) -> float:
    """Predicted device time of a ``ChannelPadding``'s copies (all of them, in and out): the
    elements each kind of copy moves at its rate, plus the fixed cost of each pad launch made."""
    gather = PAD_GATHER_ELEMENTS_PER_US.get(arch, PAD_GATHER_ELEMENTS_PER_US["sm_90"])
    scatter = PAD_SCATTER_ELEMENTS_PER_US.get(arch, PAD_SCATTER_ELEMENTS_PER_US["sm_90"])
    moved = sum(c.elements_moved / (scatter if c.scatter else gather) for c in padding.copies)
    return moved + PAD_LAUNCH_US * len(padding.launches)


# -- co-residency without a device -----------------------------------------------------------------
_THREADS_PER_CU = {"cuda": 2048, "hip": 2048}
_REGS_PER_CU = {"cuda": 65536, "hip": 4 * 512 * 64}  # 32-bit registers (AMD: 4 SIMDs x 512 VGPRs x 64 lanes)
_REGS_GUESS = 128  # per thread, when the object does not say


def offline_occupancy(metadata: dict, arch: str) -> int:
    """CTAs of a kernel that fit one CU by its threads, shared memory and registers (the
    object's register count where its metadata has one, else a typical 128): what ranking assumes
    offline, where no device answers. On a device the backend's occupancy query replaces it."""
    a = ARCHES.get(arch)
    if a is None:
        return 1
    threads = max(1, int(metadata.get("threads", 128)))
    shared = int(metadata.get("shared", 0))
    amd = metadata.get("amd") or {}
    regs = int(metadata.get("regs", 0) or amd.get("vgpr_count", 0) or _REGS_GUESS)
    fits = [_THREADS_PER_CU[a.backend] // threads, _REGS_PER_CU[a.backend] // (regs * threads)]
    if shared:
        fits.append(a.lds_bytes_per_cu // shared)
    return max(1, min(fits + [32]))


__all__ = ["TERMS", "MODEL_VERSION", "TMA_FILL_CEILING", "tma_partial_box_share", "Terms", "CostModel", "terms", "fit", "ranking_weights", "nnls", "builtin", "default_prior", "offline_occupancy",
           "padding_us",
           "MODELLED_FAMILIES", "L2_BYTES"]  # fmt: skip
