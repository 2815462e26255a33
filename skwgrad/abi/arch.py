"""Targets skwgrad builds for and their capabilities: the one table the sweep, the compile step,
selection and the offline tools read.

At run time the CU/SM count comes from the device itself; ``compute_units`` here is the
reference part's, for offline planning.
"""

from __future__ import annotations

from dataclasses import dataclass

from skwgrad.errors import ProblemError


@dataclass(frozen=True)
class Arch:
    name: str  # full target as the compiler spells it: "gfx942", "gfx950", "sm_90"
    backend: str  # "hip" or "cuda"
    compute_units: int  # CUs (AMD) or SMs (NVIDIA) of the reference part
    wave_size: int
    lds_bytes_per_cu: int
    part: str  # the reference part the numbers are for
    tf32: bool  # the matrix units take TF32 (xf32 MFMA / tf32 wgmma); gfx950 (CDNA4) dropped xf32
    # (bm, bn, bk, warps) of the default preset: the operand stages fit this arch's LDS / shared memory.
    default_tiles: tuple[tuple[int, int, int, int], ...]
    default_stages: int  # software pipeline depth of the default preset
    full_stages: tuple[int, ...]  # depths the full sweep tries
    # Tile rows below which a 16-bit matrix multiply falls back to a slower instruction: sm_90's
    # wgmma takes 64 rows per warpgroup (a 32-row tile runs mma.sync); AMD's MFMA takes 16 or 32.
    wide_mma_rows: int = 0
    # tf32 on sm_90 runs mma.sync, not wgmma: wgmma reads tf32 operands only K-major, and wgrad's
    # operands are both stored MN-major, so each tile went through registers back into shared
    # memory with a wait on every wgmma; mma.sync's fragment loads read either layout. H200 run
    # Q1 (session 12): 776 tf32 candidates 1.67x faster on mma.sync, none slower by more than 13%.
    tf32_mma_sync: bool = False
    # TMA with the im2col mode and warp specialization: the ``wgrad_tma`` family builds for it.
    tma_im2col: bool = False
    # Programmatic dependent launch (Hopper's griddepcontrol): a launch that zeroes dW first
    # (spec.dw_zeroed_before_launch) starts its kernel while the memset runs, and the kernel waits
    # for it only before its first write to dW. H200 run E2 (benchmarks/pdl_probe.py): the memset
    # cost 1.8-2.3 us a call whatever dW's size (5 KB-2 MB), 0.7-1.1 us so.
    dependent_launch: bool = False

    def default_warps(self, bm: int, bn: int, bk: int) -> int:
        """Warps of a tile: the default preset's choice when it has the tile, else 8 for tiles of
        128x128 outputs or more and 4 below (the sweep's rule for ``--tiles`` without ``w``)."""
        for tbm, tbn, tbk, w in self.default_tiles:
            if (tbm, tbn, tbk) == (bm, bn, bk):
                return w
        return 8 if bm * bn >= 128 * 128 else 4

    @property
    def precisions(self) -> tuple[str, ...]:
        """fp32 precisions this arch can build."""
        return ("ieee", "tf32") if self.tf32 else ("ieee",)


ARCHES: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch(
            "gfx942", "hip", 304, 64, 64 * 1024, "MI300X", tf32=True,
            default_tiles=((64, 64, 64, 4), (128, 64, 64, 4), (64, 128, 64, 4), (128, 128, 64, 8), (128, 128, 32, 8)),
            default_stages=2, full_stages=(2, 3),
        ),
        Arch(
            "gfx950", "hip", 256, 64, 160 * 1024, "MI355X", tf32=False,
            default_tiles=((64, 64, 64, 4), (128, 64, 64, 4), (64, 128, 64, 4), (128, 128, 64, 8), (256, 128, 64, 8)),
            default_stages=2, full_stages=(2, 3),
        ),
        # sm_90: the larger shared memory tiles and three stages (Triton's NVIDIA default depth).
        Arch(
            "sm_90", "cuda", 132, 32, 228 * 1024, "H200 SXM", tf32=True,
            default_tiles=((64, 64, 64, 4), (128, 64, 64, 4), (64, 128, 64, 4), (128, 128, 64, 8), (128, 256, 64, 8)),
            default_stages=3, full_stages=(2, 3, 4), wide_mma_rows=64, tf32_mma_sync=True, tma_im2col=True,
            dependent_launch=True,
        ),  # fmt: skip
    )
}


def get_arch(name: str) -> Arch:
    try:
        return ARCHES[name]
    except KeyError:
        raise ProblemError(
            f"arch {name!r} is not a skwgrad target; use one of {', '.join(ARCHES)}"
        ) from None
