"""The stream-K partition (SPEC section 2) and the fixup protocols built on it.

Invariants are checked against brute force: ranges are rebuilt from the CTA list, owners and
contributors from range/tile intersections, and the linear / tree / atomic fixups are simulated
CTA by CTA (with a random interleaving) following the protocol in skwgrad/aot/kernels/wgrad.py.
"""

from __future__ import annotations

import bisect
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skwgrad.abi.arch import ARCHES
from skwgrad.abi.streamk import (
    MODES,
    POOL_CTAS_PER_CU,
    REDUCTIONS,
    StreamKPartition,
    default_pool,
    partition,
    resolve_pool,
)
from skwgrad.errors import ProblemError


# ---------------------------------------------------------------------------------------------
# Brute-force views of a partition
# ---------------------------------------------------------------------------------------------
def ranges(p: StreamKPartition) -> list[tuple[int, int]]:
    return [p.sk_range(c) for c in range(p.sk_ctas)]


class Brute:
    """Owner / contributors / segments recomputed from the CTA ranges alone."""

    def __init__(self, p: StreamKPartition):
        self.p = p
        self.ranges = ranges(p)
        self.starts = [s for s, _ in self.ranges]
        ipt = p.iters_per_tile
        self.touching: dict[int, list[int]] = {}
        self.segments: list[list[tuple[int, int, int]]] = []  # per CTA: (tile, lo, hi)
        for c, (s, e) in enumerate(self.ranges):
            segs = []
            it = s
            while it < e:
                tile = it // ipt
                hi = min(e, (tile + 1) * ipt)
                segs.append((tile, it, hi))
                self.touching.setdefault(tile, []).append(c)
                it = hi
            self.segments.append(segs)

    def cta_of(self, it: int) -> int:
        c = bisect.bisect_right(self.starts, it) - 1
        s, e = self.ranges[c]
        assert s <= it < e
        return c


# ---------------------------------------------------------------------------------------------
# Invariants
# ---------------------------------------------------------------------------------------------
def check_partition(num_tiles: int, ipt: int, pool: int) -> StreamKPartition:
    p = partition(num_tiles, ipt, pool)
    assert (p.num_tiles, p.iters_per_tile, p.pool) == (num_tiles, ipt, pool)
    assert p.dp_tiles + p.sk_tiles == num_tiles
    assert p.dp_tiles >= 0 and p.sk_tiles >= 0

    # When is everything data-parallel? Tiles that divide the pool, or too little SK work to give
    # every CTA of the pool an iteration.
    candidate = 0 if num_tiles % pool == 0 else (num_tiles if num_tiles <= pool else pool + num_tiles % pool)
    all_dp = num_tiles % pool == 0 or candidate * ipt < pool
    if all_dp:
        assert p.sk_ctas == 0 and p.sk_tiles == 0 and p.dp_tiles == num_tiles
        assert p.total_sk_iters == 0 and p.iters_per_sk_cta == 0 and p.extra_iters == 0
        assert p.max_linear_partners == 0 and p.tree_rounds == 0
        assert p.sk_iters_per_cta == 1  # clamped kernarg: the kernel never divides by zero
        assert p.kernarg_values()["sk_iters_per_cta"] == 1
        assert p.grid("dp_sk") == num_tiles
        assert p.grid("persistent") == min(pool, num_tiles)
        check_launch_covers_tiles(p)
        return p

    # Stream-K present: the whole pool, one to two waves of tiles ("two-tile" SK).
    assert p.sk_ctas == pool
    assert p.sk_tiles == candidate
    if num_tiles > pool:
        assert p.dp_tiles % pool == 0
        assert pool < p.sk_tiles < 2 * pool
    else:
        assert p.dp_tiles == 0 and p.sk_tiles == num_tiles
    assert p.total_sk_iters == p.sk_tiles * ipt

    # Ranges: contiguous, exactly covering the SK region, balanced, longer ones first.
    rs = ranges(p)
    assert rs[0][0] == p.dp_tiles * ipt == p.sk_begin
    assert rs[-1][1] == num_tiles * ipt
    for (s0, e0), (s1, _) in zip(rs, rs[1:]):
        assert e0 == s1
    lengths = [e - s for s, e in rs]
    assert min(lengths) >= 1
    assert max(lengths) - min(lengths) <= 1
    assert lengths == sorted(lengths, reverse=True)
    assert sum(lengths) == p.total_sk_iters
    assert min(lengths) == p.iters_per_sk_cta
    assert sum(1 for n in lengths if n > p.iters_per_sk_cta) == p.extra_iters

    # cta_of_iter is the inverse of sk_range: every iteration when small, boundaries otherwise.
    b = Brute(p)
    if p.total_sk_iters <= 300:
        probes = range(p.sk_begin, num_tiles * ipt)
    else:
        probes = sorted({x for s, e in rs for x in (s, e - 1, (s + e) // 2)})
    for it in probes:
        assert p.cta_of_iter(it) == b.cta_of(it)
    with pytest.raises(IndexError):
        p.cta_of_iter(p.sk_begin - 1)
    with pytest.raises(IndexError):
        p.cta_of_iter(num_tiles * ipt)

    # Owners and contributors, from the range/tile intersections.
    max_contrib = 0
    for tile in range(p.dp_tiles, num_tiles):
        touching = b.touching[tile]
        assert touching == list(range(touching[0], touching[-1] + 1))  # consecutive CTAs
        owner = touching[0]
        assert p.owner(tile) == owner
        assert p.contributors(tile) == tuple(touching[1:])
        # the owner's segment starts at the tile's first iteration
        first_seg = [seg for seg in b.segments[owner] if seg[0] == tile][0]
        assert first_seg[1] == tile * ipt
        max_contrib = max(max_contrib, len(touching) - 1)
        assert len(touching) - 1 <= p.max_linear_partners
        assert 2**p.tree_rounds >= len(touching)  # contributors + 1 fit in the tree
    assert p.tree_rounds == p.max_linear_partners.bit_length()
    # max_linear_partners is a bound: the owner covers at least one iteration, every later CTA
    # at least iters_per_sk_cta of the tile's remaining ipt - 1.
    assert max_contrib <= -(-(ipt - 1) // p.iters_per_sk_cta) == p.max_linear_partners

    # Only a CTA's first segment can start inside a tile: at most one non-owner segment per CTA.
    for c, segs in enumerate(b.segments):
        for tile, lo, hi in segs[1:]:
            assert lo == tile * ipt
        non_owner = [s for s in segs if s[1] != s[0] * ipt]
        assert len(non_owner) <= 1
        if non_owner:
            assert c in b.touching[non_owner[0][0]][1:]  # a contributor of that tile

    kv = p.kernarg_values()
    assert kv["sk_iters_per_cta"] == p.iters_per_sk_cta >= 1
    assert kv["sk_ctas"] == pool and kv["sk_dp_tiles"] == p.dp_tiles and kv["sk_pool"] == pool
    assert kv["sk_extra_iters"] == p.extra_iters and kv["sk_tree_rounds"] == p.tree_rounds
    assert kv["sk_iters_per_tile"] == ipt
    check_launch_covers_tiles(p)
    return p


def check_launch_covers_tiles(p: StreamKPartition):
    """Every DP tile runs exactly once and every SK CTA is launched, in both modes (the kernel's
    pid mapping: dp_sk = SK CTAs first, then one CTA per DP tile; persistent = pid, pid+pool..)."""
    for mode in MODES:
        grid = p.grid(mode)
        dp_runs: dict[int, int] = {}
        sk_seen = set()
        for pid in range(grid):
            if mode == "dp_sk":
                if pid < p.sk_ctas:
                    sk_seen.add(pid)
                else:
                    dp_runs[pid - p.sk_ctas] = dp_runs.get(pid - p.sk_ctas, 0) + 1
            else:
                for t in range(pid, p.dp_tiles, p.pool):
                    dp_runs[t] = dp_runs.get(t, 0) + 1
                if pid < p.sk_ctas:
                    sk_seen.add(pid)
        assert dp_runs == {t: 1 for t in range(p.dp_tiles)}, mode
        assert sk_seen == set(range(p.sk_ctas)), mode
        if mode == "dp_sk":
            assert grid == p.dp_tiles + p.sk_ctas
        else:
            assert grid <= p.pool
            # no idle CTA: each has a DP tile or an SK range
            assert all(pid < p.sk_ctas or pid < p.dp_tiles for pid in range(grid))
            if p.sk_ctas:
                assert grid == p.pool
                # DP work is even: dp_tiles is a multiple of the pool
                assert len({sum(1 for _ in range(pid, p.dp_tiles, p.pool)) for pid in range(grid)}) == 1


_pools = st.one_of(st.integers(1, 64), st.integers(65, 700), st.sampled_from([132, 256, 304, 1024, 1216]))


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(num_tiles=st.integers(1, 3000), ipt=st.integers(1, 5000), pool=_pools)
def test_partition_invariants_random(num_tiles, ipt, pool):
    check_partition(num_tiles, ipt, pool)


@settings(max_examples=1000, deadline=None)
@given(pool=st.integers(1, 300), waves=st.integers(0, 5), rem=st.integers(0, 3), ipt=st.integers(1, 300), data=st.data())
def test_partition_invariants_near_wave_boundaries(pool, waves, rem, ipt, data):
    # num_tiles = waves * pool + a small remainder: the cases where the two-tile rule matters.
    sign = data.draw(st.sampled_from([1, -1]))
    num_tiles = max(1, waves * pool + sign * rem)
    check_partition(num_tiles, ipt, pool)


def test_partition_invariants_exhaustive_small():
    for num_tiles in range(1, 17):
        for ipt in range(1, 17):
            for pool in range(1, 21):
                check_partition(num_tiles, ipt, pool)


# ---------------------------------------------------------------------------------------------
# Fixup simulation (linear, tree, atomic/workspace) with a random interleaving
# ---------------------------------------------------------------------------------------------
def _cta_program(p: StreamKPartition, b: Brute, c: int, variant: str):
    """CTA ``c`` of the SK pool, following _streamk_body in skwgrad/aot/kernels/wgrad.py.
    Yields ("wait", peer, tile) -> receives the peer's published intervals,
           ("publish", tile, acc), ("store", tile, acc, whole)."""
    ipt = p.iters_per_tile
    start, end = p.sk_range(c)
    it = start
    while it < end:
        tile = it // ipt
        ts, te = tile * ipt, (tile + 1) * ipt
        seg_end = min(end, te)
        acc = [(it, seg_end)]
        is_owner = it == ts
        if variant == "linear":
            if is_owner:
                last = b.cta_of(te - 1)
                for peer in range(c + 1, last + 1):
                    acc = acc + (yield ("wait", peer, tile))
                yield ("store", tile, acc, True)
            else:
                yield ("publish", tile, acc)
        elif variant == "tree":
            owner, last = b.cta_of(ts), b.cta_of(te - 1)
            local, count = c - owner, last - owner + 1
            active = True
            for rnd in range(p.tree_rounds):
                stride = 1 << rnd
                if active:
                    if local % (2 * stride) == 0:
                        if local + stride < count:
                            acc = acc + (yield ("wait", c + stride, tile))
                    else:
                        assert local % (2 * stride) == stride
                        yield ("publish", tile, acc)
                        active = False
            if is_owner:
                yield ("store", tile, acc, True)
            else:
                assert not active, f"CTA {c} still holds a partial of tile {tile} after the tree"
        else:  # atomic / workspace: no waits
            yield ("store", tile, acc, is_owner and seg_end == te)
        it = seg_end


def simulate(p: StreamKPartition, variant: str, rng: random.Random):
    b = Brute(p)
    progs = {c: _cta_program(p, b, c, variant) for c in range(p.sk_ctas)}
    pending = {c: next(progs[c], None) for c in progs}  # the action each CTA is blocked on
    flags: dict[int, list] = {}  # published partials, one slot per CTA
    events: dict[int, list] = {c: [] for c in progs}
    stores: dict[int, list] = {}
    while any(a is not None for a in pending.values()):
        runnable = [c for c, a in pending.items() if a is not None and (a[0] != "wait" or a[1] in flags)]
        assert runnable, f"deadlock: {[(c, a) for c, a in pending.items() if a is not None]}"
        c = rng.choice(runnable)
        action = pending[c]
        events[c].append(action[:3] if action[0] == "wait" else action[:2])  # (kind, [peer,] tile)
        send = None
        if action[0] == "wait":
            peer = action[1]
            assert peer > c, f"CTA {c} waits on lower CTA {peer}"
            send = flags[peer]
        elif action[0] == "publish":
            assert c not in flags, f"CTA {c} publishes twice"
            flags[c] = action[2]
        else:
            stores.setdefault(action[1], []).append((c, action[2], action[3]))
        try:
            pending[c] = progs[c].send(send) if send is not None else next(progs[c])
        except StopIteration:
            pending[c] = None
    return b, flags, events, stores


def check_fixup(p: StreamKPartition, variant: str, seed: int):
    rng = random.Random(seed)
    b, flags, events, stores = simulate(p, variant, rng)
    ipt = p.iters_per_tile
    contributors = {c for t in range(p.dp_tiles, p.num_tiles) for c in p.contributors(t)}
    for tile in range(p.dp_tiles, p.num_tiles):
        written = stores.get(tile, [])
        if variant in ("linear", "tree"):
            # exactly one store, by the owner, holding every iteration of the tile exactly once
            assert [w[0] for w in written] == [p.owner(tile)]
            parts = written[0][1]
        else:
            parts = [iv for w in written for iv in w[1]]
            wholes = [w for w in written if w[2]]
            # a plain (non-atomic) store is only right when nothing else touches the tile
            if wholes:
                assert len(written) == 1 and not p.contributors(tile)
        covered = sorted(parts)
        assert covered[0][0] == tile * ipt and covered[-1][1] == (tile + 1) * ipt
        for (_, e0), (s1, _) in zip(covered, covered[1:]):
            assert e0 == s1, f"tile {tile}: iterations lost or counted twice: {covered}"
    if variant in ("linear", "tree"):
        # every contributor publishes exactly once, nobody else publishes
        assert set(flags) == contributors
        for c, ev in events.items():
            pubs = [i for i, e in enumerate(ev) if e[0] == "publish"]
            waits = [i for i, e in enumerate(ev) if e[0] == "wait"]
            assert len(pubs) == (1 if c in contributors else 0)
            if not pubs:
                continue
            if variant == "linear":
                # a contributor publishes before any wait of its own
                assert all(w > pubs[0] for w in waits)
            else:
                # tree: an inner node folds its subtree first, but its publish still precedes
                # every wait of a later tile (the tiles it owns)
                pub_tile = ev[pubs[0]][1]
                assert pub_tile == b.segments[c][0][0]  # it publishes for its first segment
                for w in waits:
                    if ev[w][2] != pub_tile:
                        assert w > pubs[0]
    else:
        assert not flags and all(e[0] == "store" for ev in events.values() for e in ev)


_small = dict(num_tiles=st.integers(1, 14), ipt=st.integers(1, 14), pool=st.integers(1, 18), seed=st.integers(0, 2**32))


@pytest.mark.parametrize("variant", ["linear", "tree", "atomic"])
@settings(max_examples=600, deadline=None)
@given(**_small)
def test_fixup_simulation_small(variant, num_tiles, ipt, pool, seed):
    p = partition(num_tiles, ipt, pool)
    check_fixup(p, variant, seed)


@pytest.mark.parametrize("variant", ["linear", "tree"])
@settings(max_examples=60, deadline=None)
@given(num_tiles=st.integers(1, 40), ipt=st.integers(1, 200), pool=st.integers(1, 96), seed=st.integers(0, 2**32))
def test_fixup_simulation_medium(variant, num_tiles, ipt, pool, seed):
    check_fixup(partition(num_tiles, ipt, pool), variant, seed)


@pytest.mark.parametrize("variant", ["linear", "tree"])
def test_fixup_simulation_many_contributors(variant):
    # The plan example: 5 tiles x 1568 iterations over gfx942's 304 CUs: 63 partners per tile,
    # 6 tree rounds.
    p = partition(5, 1568, 304)
    assert (p.sk_ctas, p.iters_per_sk_cta, p.extra_iters) == (304, 25, 240)
    assert p.max_linear_partners == 63 and p.tree_rounds == 6
    check_fixup(p, variant, seed=1)
    # one tile spread over the whole pool: the owner folds every other CTA
    q = partition(1, 304, 304)
    assert q.contributors(0) == tuple(range(1, 304))
    check_fixup(q, variant, seed=2)


def test_fixup_simulation_detects_a_broken_protocol():
    """The simulator is not vacuous: a tree with one round too few loses partials."""
    p = partition(1, 8, 8)  # one tile, 8 CTAs of 1 iteration: needs 3 rounds
    assert p.tree_rounds == 3
    broken = StreamKPartition(**{**p.__dict__, "tree_rounds": 2})
    with pytest.raises(AssertionError):
        check_fixup(broken, "tree", seed=0)


# ---------------------------------------------------------------------------------------------
# Named examples and regressions
# ---------------------------------------------------------------------------------------------
def test_two_tile_example():
    # 10 tiles over 4 CTAs: 2 remain over 2 full waves -> SK takes one wave + the remainder.
    p = partition(10, 8, 4)
    assert (p.dp_tiles, p.sk_tiles, p.sk_ctas) == (4, 6, 4)
    assert ranges(p) == [(32, 44), (44, 56), (56, 68), (68, 80)]
    # tile t holds iterations [8t, 8t + 8): tile 5 = [40, 48) is split between CTA 0 and 1
    owners = {t: (p.owner(t), p.contributors(t)) for t in range(4, 10)}
    assert owners == {4: (0, ()), 5: (0, (1,)), 6: (1, ()), 7: (2, ()), 8: (2, (3,)), 9: (3, ())}
    # 12 iterations per CTA, 8 per tile: at most ceil(7 / 12) = 1 partner, 1 tree round
    assert (p.max_linear_partners, p.tree_rounds) == (1, 1)
    assert p.grid("dp_sk") == 8 and p.grid("persistent") == 4


def test_fewer_tiles_than_pool():
    p = partition(3, 10, 8)  # 30 iterations over 8 CTAs: 4,4,4,4,4,4,3,3
    assert (p.dp_tiles, p.sk_tiles, p.sk_ctas) == (0, 3, 8)
    assert [e - s for s, e in ranges(p)] == [4, 4, 4, 4, 4, 4, 3, 3]
    assert (p.iters_per_sk_cta, p.extra_iters) == (3, 6)


def test_gfx942_workspace_pool_regression():
    pool = default_pool(ARCHES["gfx942"].compute_units, "workspace")
    assert pool == 1216 == 4 * 304
    for ipt in range(1024, 1216):
        p = partition(1, ipt, pool)  # fewer iterations than CTAs: nothing to spread
        assert p.sk_ctas == 0 and p.dp_tiles == 1
        assert p.grid("dp_sk") == 1 and p.grid("persistent") == 1
        assert p.kernarg_values()["sk_iters_per_cta"] == 1
    p = partition(1, 1216, pool)  # exactly one iteration per CTA
    assert p.sk_ctas == 1216 and p.iters_per_sk_cta == 1 and p.extra_iters == 0
    assert p.max_linear_partners == 1215


def test_divisible_tiles_are_all_dp():
    for pool in (1, 7, 304):
        for waves in (1, 2, 5):
            p = partition(waves * pool, 1000, pool)
            assert p.sk_ctas == 0 and p.dp_tiles == waves * pool
            assert p.grid("persistent") == pool


@pytest.mark.parametrize("reduction, per_cu", [("linear", 1), ("tree", 1), ("atomic", 4), ("workspace", 4)])
@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_default_pool_per_reduction(reduction, per_cu, arch):
    cus = ARCHES[arch].compute_units
    assert default_pool(cus, reduction) == per_cu * cus
    assert resolve_pool(-1, cus, reduction) == per_cu * cus
    assert resolve_pool(17, cus, reduction) == 17


def test_arch_table_cu_counts():
    assert {a: ARCHES[a].compute_units for a in ARCHES} == {"gfx942": 304, "gfx950": 256, "sm_90": 132}
    assert set(POOL_CTAS_PER_CU) == set(REDUCTIONS)


@pytest.mark.parametrize("bad", [0, -2, -100])
def test_resolve_pool_refuses(bad):
    with pytest.raises(ProblemError, match=rf"streamk_ctas must be a positive CTA count or -1 .*got {bad}"):
        resolve_pool(bad, 304, "linear")


def test_default_pool_refusals():
    with pytest.raises(ProblemError, match="reduction 'fast' is not one of linear, tree, atomic, workspace"):
        default_pool(304, "fast")
    with pytest.raises(ProblemError, match="compute unit count must be positive, got 0"):
        default_pool(0, "linear")
    with pytest.raises(ProblemError, match="reduction 'fast' is not one of"):
        resolve_pool(-1, 304, "fast")


@pytest.mark.parametrize(
    "args, match",
    [
        ((0, 4, 4), "a partition needs tiles and iterations > 0, got 0 tiles x 4 iterations"),
        ((4, 0, 4), "a partition needs tiles and iterations > 0, got 4 tiles x 0 iterations"),
        ((4, 4, 0), "stream-K pool must be > 0, got 0"),
        ((4, 4, -1), "stream-K pool must be > 0, got -1"),
    ],
)
def test_partition_refusals(args, match):
    with pytest.raises(ProblemError, match=match):
        partition(*args)


def test_index_errors_and_bad_mode():
    p = partition(10, 8, 4)
    with pytest.raises(IndexError, match="SK CTA 4 out of range"):
        p.sk_range(4)
    with pytest.raises(IndexError, match="SK CTA -1 out of range"):
        p.sk_range(-1)
    with pytest.raises(IndexError, match=r"tile 3 is not an SK tile \[4, 10\)"):
        p.owner(3)
    with pytest.raises(IndexError, match="tile 10 is not an SK tile"):
        p.contributors(10)
    with pytest.raises(ProblemError, match="stream-K mode 'data_parallel' is not one of dp_sk, persistent"):
        p.grid("data_parallel")
    all_dp = partition(8, 8, 4)
    with pytest.raises(IndexError):
        all_dp.sk_range(0)
