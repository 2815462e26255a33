"""Everything about one launch that follows from (problem, kernel family/variant, tile, pool or
ks_count): tiling, partition, grid, workspace layout and the scalar kernargs.

Both the offline ``skwgrad plan`` and the launcher's plans call ``launch_geometry``; neither
computes a grid, a partition or a workspace size of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from skwgrad.abi import kernargs
from skwgrad.abi.conv import ConvProblem, Tiling
from skwgrad.abi.streamk import StreamKPartition, partition
from skwgrad.abi.workspace import WorkspaceLayout, workspace_layout
from skwgrad.errors import AbiError, ProblemError

STAGE2_BLOCK = 1024  # elements per Stage-2 CTA; the stage2 spec in the cache uses the same


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
) -> LaunchGeometry:
    """Resolve one launch. ``pool`` is the stream-K CTA pool (already resolved from -1);
    ``ks_count`` the split-K degree (stream-K kernels pin it to 1)."""
    kernargs.declaration(family, variant)  # known family/variant
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
    elif family == "wgrad":
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
