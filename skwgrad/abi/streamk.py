"""Stream-K partition: CK Tile's StreamKTilePartitioner (DP + "two-tile" SK), resolved on the host.

Output tiles that divide the CTA pool run data-parallel (one CTA per tile, no reduction). The
remainder (plus one full wave, when there is more than one) is spread over ``sk_ctas`` stream-K
CTAs, each owning a contiguous, balanced range of MAC iterations that may straddle tiles.

Global iteration ``i`` belongs to tile ``i // iters_per_tile``. SK CTA ``c`` owns
``[start(c), end(c))`` inside the SK region ``[dp_tiles * iters_per_tile, num_tiles * iters_per_tile)``.
The **owner** of an SK tile is the CTA whose segment starts at the tile's first iteration; the
**contributors** are the CTAs after it that touch the tile. Only a CTA's first segment can start
inside a tile, so a CTA contributes (publishes a partial) to at most one tile.

Everything derived is computed once, in ``partition()``; the kernel reads the ``sk_*`` kernargs
and the workspace reads ``sk_ctas``, so nothing recomputes it with different rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

from skwgrad.errors import ProblemError

MODES = ("dp_sk", "persistent")
REDUCTIONS = ("linear", "tree", "atomic", "workspace")
# Reductions where a CTA waits on another: their pool must be co-resident (one CTA per CU).
WAITING_REDUCTIONS = ("linear", "tree")
# CTAs per CU of the default pool. A CTA that never waits can be stacked several per CU so a
# CTA stalled on memory has others to hide behind (the seed measured 4 streams per CU best).
POOL_CTAS_PER_CU = {"linear": 1, "tree": 1, "atomic": 4, "workspace": 4}


def default_pool(compute_units: int, reduction: str) -> int:
    """The pool ``streamk_ctas = -1`` resolves to."""
    if reduction not in POOL_CTAS_PER_CU:
        raise ProblemError(f"reduction {reduction!r} is not one of {', '.join(REDUCTIONS)}")
    if compute_units <= 0:
        raise ProblemError(f"compute unit count must be positive, got {compute_units}")
    return POOL_CTAS_PER_CU[reduction] * compute_units


def resolve_pool(streamk_ctas: int, compute_units: int, reduction: str) -> int:
    """``-1`` is the reduction's default pool; any other value must be positive."""
    if streamk_ctas == -1:
        return default_pool(compute_units, reduction)
    if not isinstance(streamk_ctas, int) or streamk_ctas <= 0:
        raise ProblemError(
            f"streamk_ctas must be a positive CTA count or -1 (the default pool), got {streamk_ctas!r}"
        )
    return streamk_ctas


@dataclass(frozen=True)
class StreamKPartition:
    num_tiles: int
    iters_per_tile: int
    pool: int
    dp_tiles: int
    sk_tiles: int
    sk_ctas: int
    total_sk_iters: int
    iters_per_sk_cta: int  # raw: 0 for an all-DP partition
    extra_iters: int
    max_linear_partners: int
    tree_rounds: int

    # -- the SK ranges ----------------------------------------------------------------------
    @property
    def sk_begin(self) -> int:
        """First global iteration of the SK region."""
        return self.dp_tiles * self.iters_per_tile

    def sk_range(self, cta: int) -> tuple[int, int]:
        """Global iterations ``[start, end)`` of SK CTA ``cta``."""
        if not 0 <= cta < self.sk_ctas:
            raise IndexError(f"SK CTA {cta} out of range [0, {self.sk_ctas})")
        start = self.sk_begin + cta * self.iters_per_sk_cta + min(cta, self.extra_iters)
        return start, start + self.iters_per_sk_cta + (1 if cta < self.extra_iters else 0)

    def cta_of_iter(self, it: int) -> int:
        """The SK CTA whose range holds global iteration ``it`` (the kernel's inverse map)."""
        rel = it - self.sk_begin
        if not 0 <= rel < self.total_sk_iters:
            raise IndexError(f"iteration {it} is not in the SK region")
        boundary = self.extra_iters * (self.iters_per_sk_cta + 1)
        if rel < boundary:
            return rel // (self.iters_per_sk_cta + 1)
        return self.extra_iters + (rel - boundary) // self.iters_per_sk_cta

    def owner(self, tile: int) -> int:
        """The SK CTA whose segment starts at the first iteration of SK ``tile``."""
        self._check_sk_tile(tile)
        return self.cta_of_iter(tile * self.iters_per_tile)

    def contributors(self, tile: int) -> tuple[int, ...]:
        """The SK CTAs after the owner that touch ``tile``, in CTA order."""
        self._check_sk_tile(tile)
        first = self.owner(tile)
        last = self.cta_of_iter((tile + 1) * self.iters_per_tile - 1)
        return tuple(range(first + 1, last + 1))

    def _check_sk_tile(self, tile: int):
        if not self.dp_tiles <= tile < self.num_tiles:
            raise IndexError(f"tile {tile} is not an SK tile [{self.dp_tiles}, {self.num_tiles})")

    # -- launch -----------------------------------------------------------------------------
    def grid(self, mode: str) -> int:
        """CTAs to launch. ``dp_sk``: the SK CTAs first (pid < sk_ctas), then one per DP tile.
        ``persistent``: ``pool`` CTAs, each looping over DP tiles ``pid, pid + pool, ...`` and then
        its SK range."""
        if mode == "dp_sk":
            return self.dp_tiles + self.sk_ctas
        if mode == "persistent":
            return self.pool if self.sk_ctas else min(self.pool, self.dp_tiles)
        raise ProblemError(f"stream-K mode {mode!r} is not one of {', '.join(MODES)}")

    @property
    def sk_iters_per_cta(self) -> int:
        """The kernarg: clamped to >= 1 so an all-DP launch never divides by zero."""
        return max(self.iters_per_sk_cta, 1)

    def kernarg_values(self) -> dict[str, int]:
        """The ``sk_*`` scalar kernargs (buffers and the epoch are the launcher's)."""
        return {
            "sk_iters_per_tile": self.iters_per_tile,
            "sk_dp_tiles": self.dp_tiles,
            "sk_ctas": self.sk_ctas,
            "sk_iters_per_cta": self.sk_iters_per_cta,
            "sk_extra_iters": self.extra_iters,
            "sk_pool": self.pool,
            "sk_tree_rounds": self.tree_rounds,
        }


def partition(num_tiles: int, iters_per_tile: int, pool: int) -> StreamKPartition:
    """SPEC section 2, CK Tile's arithmetic."""
    if num_tiles <= 0 or iters_per_tile <= 0:
        raise ProblemError(
            f"a partition needs tiles and iterations > 0, got {num_tiles} tiles x {iters_per_tile} iterations"
        )
    if pool <= 0:
        raise ProblemError(f"stream-K pool must be > 0, got {pool}")
    rem = num_tiles % pool
    if rem == 0:
        sk_tiles = 0
    else:
        sk_tiles = min(num_tiles, pool + rem if num_tiles > pool else num_tiles)
    if sk_tiles * iters_per_tile < pool:  # too little to spread: all DP
        sk_tiles = 0
    sk_ctas = pool if sk_tiles else 0
    total_sk_iters = sk_tiles * iters_per_tile
    iters_per_sk_cta = total_sk_iters // sk_ctas if sk_ctas else 0
    extra_iters = total_sk_iters % sk_ctas if sk_ctas else 0
    if sk_ctas:
        max_linear_partners = -(-(iters_per_tile - 1) // iters_per_sk_cta)
    else:
        max_linear_partners = 0
    return StreamKPartition(
        num_tiles=num_tiles,
        iters_per_tile=iters_per_tile,
        pool=pool,
        dp_tiles=num_tiles - sk_tiles,
        sk_tiles=sk_tiles,
        sk_ctas=sk_ctas,
        total_sk_iters=total_sk_iters,
        iters_per_sk_cta=iters_per_sk_cta,
        extra_iters=extra_iters,
        max_linear_partners=max_linear_partners,
        tree_rounds=max_linear_partners.bit_length(),
    )
