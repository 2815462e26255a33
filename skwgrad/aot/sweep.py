"""Which kernels ``skwgrad compile-all`` builds: presets, filters and the stream-K pruning rules.

An item of a sweep is ``(arch, KernelSpec)``. Every spec is a code object that serves any problem
its ``check_problem`` admits, so a sweep enumerates compile-time choices only (SPEC section 5):
input dtype, dW dtype, 2-D/3-D, pointwise, channel alignment ``(vec_c, vec_k)``, tile, warps,
stages, stream-K mode, reduction / split-K epilogue and fp32 precision.

Presets
-------
``smoke``
    A handful of small-tile kernels per requested arch and dtype (bf16 unless ``--dtype`` says
    otherwise) that still holds one kernel of *every* family and variant: split-K
    ``direct``/``atomic``/``two_stage``, stream-K ``{dp_sk, persistent} x {linear, tree,
    atomic, workspace}``, and the Stage-2 reduce for each dW dtype a ``two_stage``/``workspace``
    kernel writes. It is what CI compiles and what the README builds, and what the GPU tests
    need to exercise every mode x reduction; that is why it holds ``persistent x tree``, which
    the pruned presets never build (below). Smoke is therefore *not* a subset of ``default``.
    The split-K ``workspace`` epilogue is not in it (its code is the atomic epilogue's with the
    replica's pointer; the compile, interpreter and GPU tests build their own).
``default``
    What a deployment needs, pruned by measured use (benchmarks/COMPILE.md, "The pruned default",
    gives the data): the two tiles the H200 tuned run used, 64x128x64 (4 warps) and 128x128x64
    (8 warps), with BK 32 for fp32, at the arch's default stages, on every arch (both fit the
    gfx942 LDS at two stages); 2-D, 2-D pointwise and 3-D (a 3-D 1x1 problem runs on the 3-D
    kernel); every dtype. dW dtype and fp32 precision come as *full* sets where the measured
    problems are (bf16 with dW bf16 and fp32; fp16 with dW fp32, as under autocast; fp32 at
    tf32 where the arch has it, else ieee) and *minimal* ones elsewhere (fp16 dW of fp16; ieee
    where the arch has tf32): the larger tile, split-K ``direct``/``two_stage`` at ``(1,1)`` and
    ``(W,W)``, stream-K ``dp_sk`` ``workspace`` at ``(W,W)``. A full set holds:
    split-K ``direct`` and ``two_stage`` at ``(1,1)``, ``(1,W)``, ``(W,1)``, ``(W,W)`` and
    ``(W/2,W/2)`` (pointwise only at ``(W,W)`` and ``(W/2,W/2)``), and the first-layer ``(1,W)``
    kernel also at 64x64 (C = 3: the tile the kernel bench's best conv1 split-K used); on sm_90 the
    2-D ``(1,1)`` kernels of the 16-bit sets at 64x64 and 64x128 with 8 warps instead of 64x128
    with 4 (scalar loads: the threads bound the loop, ``_SCALAR_TILES_SM90``). Stream-K
    ``dp_sk x {linear, workspace}`` at ``(W,W)`` (the persistent mode and the scalar stream-K
    kernels measured within 0.13% / never within 3% of the best on the H200: ``broad`` keeps them).
    Beside every 16-bit ``two_stage`` split-K kernel whose dW is the input dtype (2-D, 3-D, the
    extra and first-layer tiles; and the packed-group ones, below), its ``workspace`` twin:
    atomics into one f32 replica instead of ks_count stored ones and a Stage-2 over one replica
    (H200 run P3: auto takes it on 9 of the 24 corpus rows, vae and ResNet-50 3x3 N=256 1.14-1.16x
    faster; over 22 pairs of new layers it ran 0.96x its two-stage kernel); an fp32 dW has the
    ``atomic`` epilogue for that (broad/full).
    Not in default (``broad``/``full`` keep them): the ``atomic`` split-K epilogue and stream-K
    reduction (no tuned choice ever used them), stream-K at ``(1,W)`` (conv1 runs split-K at
    parity, 184 vs 189 us), the 128x64 and arch-specific large tiles. Every problem still has a
    kernel: the scalar split-K exists for every dtype, dW dtype, precision and dimensionality.
``broad``
    The default before the pruning (kept to compare against, and for users who tune widely): a
    few tiles per arch chosen to fit the arch's LDS / shared memory (``Arch.default_tiles`` in
    ``skwgrad.abi.arch``), one warps/stages choice per tile, both 2-D and 3-D, pointwise and
    not, every dtype (fp32 at ``ieee`` and, where the arch has it, ``tf32``), dW in the input
    dtype and in fp32, and for split-K the channel alignments ``{1, W} x {1, W}`` (``vec = 1``
    serves any channel count, ``W`` the aligned common case) plus the intermediate diagonal
    ``(2, 2)``, ``(4, 4)`` (C=100, K=60 ran 5x slower on scalar loads on the H200); the other
    mixed pairs are served by ``vec = 1``, and ``full`` has them all. Split-K and packed-group
    epilogues: ``direct``, ``two_stage``, ``atomic`` (fp32 dW) and, as in the default, the
    ``workspace`` twin of each ``two_stage`` kernel of a 16-bit dW in the input dtype (``full`` too).
``full``
    The whole space: BM, BN in {32, 64, 128, 256}, BK in {32, 64, 128}, 4 and 8 warps (8 only on
    tiles of at least 64x64 outputs: fewer outputs than threads is never a useful kernel),
    2 and 3 stages (and 4 on sm_90), every ``(vec_c, vec_k)`` pair of power-of-two widths up to
    ``W``, 2-D/3-D, pointwise, every dtype/precision/dW dtype. Tiles whose A+B operand slices
    alone (``(BM + BN) * BK`` elements of one stage, halved: the least any Triton backend here
    keeps in LDS) exceed the arch's shared memory are dropped before compiling; the build checks
    the real ``shared`` figure of each code object against the arch and records a failure for
    any that could never launch.

Stream-K pruning (``broad`` and ``full``; ``default`` prunes further, above), after the seed's "Cache them only where they are used"
-----------------------------------------------------------------------------------------------
Stream-K kernels were first built for every geometry x mode x reduction x all 16 vector-width
pairs; almost none of them were ever selected. They are kept only where stream-K is used:

* at the widest vector width ``W = 16 bytes / element size`` (8 for fp16/bf16, 4 for fp32), for
  ``(W, W)`` and ``(W, 1)``, both modes, every requested reduction except ``tree``. Stream-K pays
  off on filter-sized outputs with a long reduction, i.e. ordinary dense layers, whose channel
  counts are multiples of 8; ``(W, 1)`` is the seed's ``(vector_size_a, vector_size_b)`` order
  with A = dy and B = x (CK's wgrad GEMM), i.e. ``vec_k = W, vec_c = 1``: the first-layer case
  (C = 3 input channels, K wide). ``tree`` only wins over ``linear`` when many CTAs share a tile,
  which at these widths the default pools do not produce.
* fully scalar (``vec_c = vec_k = 1``), ``dp_sk x {tree, workspace}``, on tiles with
  ``BN >= 128``, not pointwise: large-filter depthwise layers (C = K = 1 per group, so
  ``Ng = Z*Y*X`` is the whole tile row and the reduction ``N*Ho*Wo`` is long). There the
  partition gives many CTAs per tile and ``tree``'s log-depth fix-up pays off.

Shapes at the other vector widths are served by the split-K kernels, which are kept at every
width. The rules change which stream-K specs exist, never a spec's fields, so with
``--streamk off`` the split-K keys and labels are exactly the ones a build without stream-K
would make (a spec's key depends on the spec alone, SPEC section 7).

Corpus-driven sweeps (``compile-all --corpus FILE`` / ``--problem TEXT``, ``sweep_for_problems``):
of a preset's specs, exactly those selection could choose for the given problems (the launcher's
narrowing, ``skwgrad.abi.narrow``), plus their Stage-2 reduces.

Kernel families register an enumerator (``register_family``): every sweep, presets and corpus
alike, asks each registered family for its specs per arch and dtype (``FamilyContext``).

Filters: ``--arch``, ``--dtype``, ``--streamk off|dp_sk|persistent|all`` (which stream-K modes;
split-K is always built, it is the fallback every shape has), ``--streamk-reductions`` (subset of
linear, tree, atomic, workspace), ``--tiles`` (``BMxBNxBK[wW][sS]`` list replacing the preset's
tiles; without ``w``/``s`` the preset picks warps/stages). The Stage-2 reduce is added for each
dW dtype that a selected ``two_stage`` or ``workspace`` kernel writes.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass

from skwgrad.abi.arch import ARCHES
from skwgrad.abi.conv import DTYPE_BYTES, DTYPES
from skwgrad.abi.kernargs import HELPER_FAMILIES, SK_REDUCTIONS
from skwgrad.abi.launch import DWCONV_TMA_FILTER_WIDTHS, dwconv_window, stage2_spec
from skwgrad.abi.padding import pad_spec, padding_if_possible
from skwgrad.abi.streamk import MODES
from skwgrad.abi.spec import KernelSpec
from skwgrad.errors import SkwgradError

PRESETS = ("smoke", "default", "broad", "full")
STREAMK_CHOICES = ("off", *MODES, "all")
SMOKE_DTYPES = ("bf16",)


class SweepError(SkwgradError, ValueError):
    """A preset or filter that names nothing skwgrad builds."""


@dataclass(frozen=True, order=True)
class SweepItem:
    arch: str
    spec: KernelSpec


@dataclass(frozen=True)
class Tile:
    bm: int
    bn: int
    bk: int
    num_warps: int | None = None  # None: the preset chooses
    num_stages: int | None = None

    def __str__(self):
        s = f"{self.bm}x{self.bn}x{self.bk}"
        if self.num_warps:
            s += f"w{self.num_warps}"
        if self.num_stages:
            s += f"s{self.num_stages}"
        return s


_TILE_RE = re.compile(r"^(\d+)x(\d+)x(\d+)(?:w(\d+))?(?:s(\d+))?$")


def parse_tiles(text: str | None) -> tuple[Tile, ...] | None:
    """``"64x64x32,128x128x64w8s2"`` -> tiles; None/empty -> None (the preset's tiles)."""
    if not text:
        return None
    tiles = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        m = _TILE_RE.match(part.lower())
        if not m:
            raise SweepError(f"tile {part!r}: expected BMxBNxBK with optional wWARPS and sSTAGES, e.g. 128x128x64 or 128x128x64w8s2")
        bm, bn, bk = (int(v) for v in m.group(1, 2, 3))
        w = int(m.group(4)) if m.group(4) else None
        s = int(m.group(5)) if m.group(5) else None
        for name, v in (("BM", bm), ("BN", bn), ("BK", bk)):
            if v < 16 or v & (v - 1):
                raise SweepError(f"tile {part!r}: {name} = {v} must be a power of two >= 16")
        if w is not None and w not in (1, 2, 4, 8, 16):
            raise SweepError(f"tile {part!r}: warps must be 1, 2, 4, 8 or 16")
        if s is not None and s < 1:
            raise SweepError(f"tile {part!r}: stages must be >= 1")
        tiles.append(Tile(bm, bn, bk, w, s))
    if not tiles:
        raise SweepError(f"--tiles {text!r} names no tile; e.g. --tiles 64x64x32,128x128x64")
    return tuple(tiles)


def widest_vec(dtype: str) -> int:
    """W: the widest vector (16-byte loads) in elements of ``dtype``."""
    return 16 // DTYPE_BYTES[dtype]


def vec_widths(dtype: str) -> tuple[int, ...]:
    w = widest_vec(dtype)
    return tuple(1 << i for i in range(w.bit_length()))


def precisions(dtype: str, arch: str, preset: str = "full") -> tuple[str, ...]:
    if dtype != "fp32":
        return ("",)
    if preset == "smoke":
        return ("ieee",)
    return ARCHES[arch].precisions


def dw_dtypes(dtype: str) -> tuple[str, ...]:
    return (dtype,) if dtype == "fp32" else (dtype, "fp32")


def _variants_for(family: str, dw_dtype: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """Split-K epilogues or stream-K reductions a dW dtype admits (atomic needs fp32 dW)."""
    return tuple(v for v in allowed if v != "atomic" or dw_dtype == "fp32")


def _with_workspace(variants: tuple[str, ...], dtype: str, dw_dtype: str) -> tuple[str, ...]:
    """The split-K (``wgrad``, ``grouped``) epilogues of a geometry plus the ``workspace`` twin of
    its ``two_stage`` kernel where dW is the 16-bit input dtype: one atomically accumulated replica
    instead of ks_count stored ones (fp32 dW has ``atomic`` for that)."""
    if "two_stage" in variants and dw_dtype == dtype != "fp32":
        return (*variants, "workspace")
    return variants


# -- tile tables: the per-arch defaults live in ``skwgrad.abi.arch`` ------------------------
_FULL_DIMS = (32, 64, 128, 256)
_FULL_BK = (32, 64, 128)
_FULL_WARPS = (4, 8)
_SMOKE_TILE = Tile(32, 32, 32, 4, 2)  # smallest MFMA/wgmma-friendly tile: fastest to compile
_SMOKE_TREE_TILE = Tile(32, 128, 32, 4, 2)  # the scalar dp_sk tree kernel follows the BN >= 128 rule


# The pruned ``default`` (benchmarks/COMPILE.md, "The pruned default"): the two tiles of the H200
# tuned run, BK 32 for fp32 (the fp32 rows ran at BK 32); the first-layer (1, W) split-K kernel
# also at BM=BN=64; a minimal dW/precision set (``_default_dw_sets``) only on the larger tile.
_DEFAULT_TILES = {2: (Tile(64, 128, 64, 4), Tile(128, 128, 64, 8)), 4: (Tile(64, 128, 32, 4), Tile(128, 128, 32, 8))}
_FIRST_LAYER_TILE = {2: Tile(64, 64, 64, 4), 4: Tile(64, 64, 32, 4)}
# Two more tiles at the widest vectors only, for the 2-D and pointwise kernels of the full sets
# (every candidate of both presets timed on the H200 over the corpus, benchmarks/COMPILE.md "The
# default after run C1"): 64x64 where a problem has few output tiles (more CTAs: 1x1 N=32, 3x3 64
# channels N=256) and 128x256 where it has many and a long K per tile (3x3 320-640 channels).
# 128x256 goes where its fp32 tile (128 KiB) fits the LDS, as the workspace stream-K kernel needs
# it: sm_90 and gfx950, not gfx942 (64 KiB; its split-K kernels would fit, at 48 KiB).
_SMALL_TILE = {2: Tile(64, 64, 64, 4), 4: Tile(64, 64, 32, 4)}
_WIDE_TILE = {2: Tile(128, 256, 64, 8), 4: Tile(128, 256, 32, 8)}


def _default_tiles(dtype: str) -> tuple[Tile, ...]:
    return _DEFAULT_TILES[DTYPE_BYTES[dtype]]


def _default_extra_tiles(ctx: "FamilyContext", pointwise: bool) -> list[Tile]:
    """The (W, W)-only tiles of a full set (none with --tiles): 64x64, and 128x256 for 2-D
    non-pointwise kernels where it fits."""
    if ctx.tiles:
        return []
    b, stages = DTYPE_BYTES[ctx.dtype], ARCHES[ctx.arch].default_stages
    out = [_SMALL_TILE[b]] + ([] if pointwise else [_WIDE_TILE[b]])
    # the stream-K workspace kernel stages its fp32 tile in LDS: a tile goes where that fits
    return [Tile(t.bm, t.bn, t.bk, t.num_warps, stages) for t in out if t.bm * t.bn * 4 <= ARCHES[ctx.arch].lds_bytes_per_cu]


def _fits(arch: str, dtype: str, bm: int, bn: int, bk: int) -> bool:
    """False only when the tile can never fit: half of one stage's A+B slices over the LDS."""
    return (bm + bn) * bk * DTYPE_BYTES[dtype] // 2 <= ARCHES[arch].lds_bytes_per_cu


def _tile_configs(preset: str, arch: str, dtype: str, tiles: tuple[Tile, ...] | None) -> list[Tile]:
    """Fully specified tiles (warps and stages set) for one arch/dtype."""
    if tiles is not None:
        out = []
        for t in tiles:
            warps = [t.num_warps] if t.num_warps else ([8] if t.bm * t.bn >= 128 * 128 else [4])
            stages = [t.num_stages] if t.num_stages else [ARCHES[arch].default_stages]
            out += [Tile(t.bm, t.bn, t.bk, w, s) for w in warps for s in stages]
        return out
    if preset == "default":
        return [Tile(t.bm, t.bn, t.bk, t.num_warps, ARCHES[arch].default_stages) for t in _default_tiles(dtype)]
    if preset == "broad":
        return [
            Tile(bm, bn, bk, w, ARCHES[arch].default_stages)
            for bm, bn, bk, w in ARCHES[arch].default_tiles
            if _fits(arch, dtype, bm, bn, bk)
        ]
    if preset == "full":
        out = []
        for bm, bn, bk in itertools.product(_FULL_DIMS, _FULL_DIMS, _FULL_BK):
            if not _fits(arch, dtype, bm, bn, bk):
                continue
            for w in _FULL_WARPS:
                if w == 8 and bm * bn < 64 * 64:
                    continue
                out += [Tile(bm, bn, bk, w, s) for s in ARCHES[arch].full_stages]
        return out
    raise AssertionError(preset)


def _spec(family, variant, dtype, dw, prec, tile: Tile, *, dims=2, pw=False, vc=1, vk=1, mode=""):
    return KernelSpec(
        family, variant, dtype, dw, spatial_dims=dims, pointwise=pw, vec_c=vc, vec_k=vk,
        bm=tile.bm, bn=tile.bn, bk=tile.bk, num_warps=tile.num_warps, num_stages=tile.num_stages,
        mode=mode, precision=prec,
    )  # fmt: skip


@dataclass(frozen=True)
class FamilyContext:
    """What a family's enumerator is asked for: one arch and input dtype of one sweep."""

    preset: str  # smoke | default | full
    arch: str
    dtype: str
    modes: tuple[str, ...]  # requested stream-K modes (empty with --streamk off)
    reductions: tuple[str, ...]  # requested stream-K reductions
    tiles: tuple[Tile, ...] | None  # --tiles, or None for the preset's tiles

    @property
    def configs(self) -> list[Tile]:
        """The preset's (or --tiles') fully specified tiles for this arch/dtype (not smoke)."""
        return _tile_configs(self.preset, self.arch, self.dtype, self.tiles)

    @property
    def smoke_tiles(self) -> list[Tile]:
        """Smoke's tiles: the smallest tile, or --tiles with warps/stages defaulted to 4/2."""
        return [t if t.num_warps and t.num_stages else Tile(t.bm, t.bn, t.bk, t.num_warps or 4, t.num_stages or 2)
                for t in (self.tiles or (_SMOKE_TILE,))]  # fmt: skip


# Family name -> enumerator(ctx) -> specs. A kernel family registers here (``register_family``)
# and every sweep, the corpus-driven one included, then holds its specs; the Stage-2 reduce is
# added for the dW dtypes of any ``two_stage``/``workspace`` spec, whatever family it is in.
FAMILY_ENUMERATORS: dict = {}


def register_family(name: str, enumerate_fn) -> None:
    """Add (or replace) the enumerator of one kernel family: ``enumerate_fn(ctx: FamilyContext)``
    returns that family's ``KernelSpec``s for ``ctx.arch`` / ``ctx.dtype`` under ``ctx.preset``
    and the filters (it must honour ``ctx.tiles`` and, if it has stream-K specs, ``ctx.modes`` /
    ``ctx.reductions``)."""
    FAMILY_ENUMERATORS[name] = enumerate_fn


def _geometries(ctx: FamilyContext):
    """(precision, dW dtype, tile, spatial dims, pointwise) of the default/full presets."""
    return itertools.product(precisions(ctx.dtype, ctx.arch, ctx.preset), dw_dtypes(ctx.dtype), ctx.configs, (2, 3), (False, True))


def _splitk_specs(ctx: FamilyContext) -> list[KernelSpec]:
    """Split-K (``wgrad``): at every vector width of the preset, every epilogue the dW dtype admits."""
    dtype, W = ctx.dtype, widest_vec(ctx.dtype)
    if ctx.preset == "smoke":
        prec = precisions(dtype, ctx.arch, "smoke")[0]
        out = []
        for t in ctx.smoke_tiles:
            out += [
                _spec("wgrad", "direct", dtype, dtype, prec, t, vc=W, vk=W),
                _spec("wgrad", "two_stage", dtype, dtype, prec, t, vc=W, vk=W),
                _spec("wgrad", "atomic", dtype, "fp32", prec, t, vc=W, vk=W),
                _spec("wgrad", "direct", dtype, dtype, prec, t, dims=3, vc=1, vk=W),  # 3-D, first-layer C
                _spec("wgrad", "direct", dtype, dtype, prec, t, pw=True, vc=W, vk=W),  # pointwise
            ]
        return out
    if ctx.preset == "default":
        return _default_splitk(ctx)
    if ctx.preset == "full":
        pairs = list(itertools.product(vec_widths(dtype), vec_widths(dtype)))
    else:
        # {1, W} x {1, W}, plus the intermediate diagonal (2, 2), (4, 4): channel counts that are
        # multiples of 4 but not 8 (C=100, K=60) otherwise fall back to scalar loads, ~5x slower.
        pairs = list(itertools.product((1, W), (1, W))) + [(w, w) for w in vec_widths(dtype) if 1 < w < W]
    out = []
    for prec, dw, t, dims, pw in _geometries(ctx):
        for variant in _with_workspace(_variants_for("wgrad", dw, ("direct", "atomic", "two_stage")), dtype, dw):
            for vc, vk in pairs:
                out.append(_spec("wgrad", variant, dtype, dw, prec, t, dims=dims, pw=pw, vc=vc, vk=vk))
    return out


def _streamk_specs(ctx: FamilyContext) -> list[KernelSpec]:
    """Stream-K (``wgrad_sk``) under the pruning rules of the module docstring."""
    dtype, W, modes, reductions = ctx.dtype, widest_vec(ctx.dtype), ctx.modes, ctx.reductions
    out = []
    if ctx.preset == "smoke":
        prec = precisions(dtype, ctx.arch, "smoke")[0]
        for t in ctx.smoke_tiles:
            tree_tile = t if ctx.tiles else _SMOKE_TREE_TILE
            for mode in modes:
                for red in reductions:
                    if red == "tree":
                        # dp_sk: the scalar depthwise kernel of the pruning rule; persistent: (W, W).
                        if mode == "dp_sk":
                            out.append(_spec("wgrad_sk", "tree", dtype, dtype, prec, tree_tile, mode=mode))
                        else:
                            out.append(_spec("wgrad_sk", "tree", dtype, dtype, prec, t, vc=W, vk=W, mode=mode))
                        continue
                    # atomic needs fp32 dW; persistent workspace writes fp32 dW so the fp32 Stage-2 is built.
                    dw = "fp32" if red == "atomic" or (red == "workspace" and mode == "persistent") else dtype
                    out.append(_spec("wgrad_sk", red, dtype, dw, prec, t, vc=W, vk=W, mode=mode))
        return out
    if ctx.preset == "default":
        return _default_streamk(ctx)
    for prec, dw, t, dims, pw in _geometries(ctx):
        # stream-K at W: (W, W) and (W, 1) = (vec_k W, vec_c 1); every requested reduction but tree
        for mode in modes:
            for red in _variants_for("wgrad_sk", dw, tuple(r for r in reductions if r != "tree")):
                for vc, vk in ((W, W), (1, W)):
                    out.append(_spec("wgrad_sk", red, dtype, dw, prec, t, dims=dims, pw=pw, vc=vc, vk=vk, mode=mode))
        # scalar dp_sk x {tree, workspace} for large-filter depthwise: BN >= 128, not pointwise
        if "dp_sk" in modes and t.bn >= 128 and not pw:
            for red in ("tree", "workspace"):
                if red in reductions:
                    out.append(_spec("wgrad_sk", red, dtype, dw, prec, t, dims=dims, mode="dp_sk"))
    return out


_DEFAULT_GEOMETRIES = ((2, False), (2, True), (3, False))  # 3-D pointwise runs on the 3-D kernel
_DEFAULT_SPLITK = ("direct", "two_stage")  # atomic: never chosen by tuning; broad/full keep it
_DEFAULT_SK = ("linear", "workspace")  # atomic stream-K: never chosen by tuning; tree: never within 3% of the best
# 3-D: every timed 3-D row (5 of the 100 timed on the H200) ran fastest on workspace stream-K, and
# neither a direct split-K nor a linear stream-K kernel was needed for the best of any of the 100;
# two-stage split-K stays as the 3-D fallback for channels stream-K cannot load.
_DEFAULT_SPLITK_3D = ("two_stage",)
_DEFAULT_SK_3D = ("workspace",)
# dp_sk only: over 60 shapes timed on the H200 (run B1, every candidate of the search space), the
# best without the persistent mode is 0.13% slower in geomean (worst row 2.7%); persistent kernels
# are half of the stream-K kernels, the dearest to compile. The scalar (1,1) stream-K kernels are
# gone too: never within 3% of the best on any of the 60 (depthwise runs on its own family).
_DEFAULT_SK_MODES = ("dp_sk",)


def _default_pairs(dtype: str, pointwise: bool, dims: int = 2) -> list[tuple[int, int]]:
    """(1,1), (1,W), (W,1), (W,W) and (W/2,W/2); pointwise addressing only at (W,W), (W/2,W/2)
    (the pointwise rows all have aligned channels; unaligned 1x1 runs on the general kernel);
    3-D at (1,1), (1,W), (W,W) (every timed 3-D row ran fastest on stream-K at (W,W); the rest is
    the fallback for any channel count and the one-channel input)."""
    W = widest_vec(dtype)
    if pointwise:
        return [(W, W), (W // 2, W // 2)]
    if dims == 3:
        return [(1, 1), (1, W), (W, W)]
    return [(1, 1), (1, W), (W, 1), (W, W), (W // 2, W // 2)]


def _default_dw_sets(ctx: FamilyContext) -> list[tuple[str, str, bool]]:
    """(precision, dW dtype, full?) of the default: the full set where the measured corpora
    put their problems, a minimal one (still serving every problem) elsewhere.

    bf16: dW bf16 (the kernel corpus) and fp32 (every row ``skwgrad.torch.record_shapes`` wrote
    under autocast: fp32 weights); fp16: dW fp32 (autocast with GradScaler keeps fp32 weights),
    fp16 dW minimal; fp32: tf32 where the arch has it (PyTorch's default for convolutions, which
    skwgrad.torch follows), ieee minimal there; ieee on gfx950."""
    d = ctx.dtype
    if d == "bf16":
        return [("", "bf16", True), ("", "fp32", True)]
    if d == "fp16":
        return [("", "fp32", True), ("", "fp16", False)]
    if "tf32" in ARCHES[ctx.arch].precisions:
        return [("tf32", "fp32", True), ("ieee", "fp32", False)]
    return [("ieee", "fp32", True)]


# Scalar loads (vec 1: channel counts with no common power-of-two factor the vector kernels need)
# issue one load per element, so the threads of a CTA bound the loop: on the H200 the 2-D (1, 1)
# split-K kernels at 64x128 ran 1.7-2.9x faster with 8 warps than with 4 on all 14 unaligned layers
# timed (run G6, benchmarks/RESULTS.md), and a 64x64 8-warp tile was the fastest on 7 of them (few
# output tiles). sm_90 and 16-bit inputs only: no AMD GPU and no fp32 or 3-D row measured it.
_SCALAR_TILES_SM90 = (Tile(64, 64, 64, 8), Tile(64, 128, 64, 8))


def _scalar_tiles(ctx: FamilyContext, tiles: list[Tile]) -> list[Tile]:
    """The default's tiles for the 2-D (1, 1) split-K kernels."""
    if ctx.tiles or ctx.arch != "sm_90" or DTYPE_BYTES[ctx.dtype] != 2:
        return tiles
    stages = ARCHES[ctx.arch].default_stages
    return [Tile(t.bm, t.bn, t.bk, t.num_warps, stages) for t in _SCALAR_TILES_SM90] + [t for t in tiles if t.bm * t.bn > 64 * 128]


def _default_splitk(ctx: FamilyContext) -> list[KernelSpec]:
    dtype, W = ctx.dtype, widest_vec(ctx.dtype)
    tiles = ctx.configs
    out = []
    for prec, dw, full in _default_dw_sets(ctx):
        if not full:  # minimal: the larger tile, (1,1) and (W,W)
            for t in (tiles if ctx.tiles else tiles[-1:]):
                for dims, pw in _DEFAULT_GEOMETRIES:
                    for variant in _with_workspace(_DEFAULT_SPLITK if dims == 2 else _DEFAULT_SPLITK_3D, dtype, dw):
                        for vc, vk in ([(W, W)] if pw else [(1, 1), (W, W)]):
                            out.append(_spec("wgrad", variant, dtype, dw, prec, t, dims=dims, pw=pw, vc=vc, vk=vk))
            continue
        for dims, pw in _DEFAULT_GEOMETRIES:
            for variant in _with_workspace(_DEFAULT_SPLITK if dims == 2 else _DEFAULT_SPLITK_3D, dtype, dw):
                for vc, vk in _default_pairs(dtype, pw, dims):
                    scalar = (vc, vk) == (1, 1) and dims == 2
                    for t in _scalar_tiles(ctx, tiles) if scalar else tiles:
                        out.append(_spec("wgrad", variant, dtype, dw, prec, t, dims=dims, pw=pw, vc=vc, vk=vk))
                for t in _default_extra_tiles(ctx, pw) if dims == 2 else []:
                    out.append(_spec("wgrad", variant, dtype, dw, prec, t, dims=dims, pw=pw, vc=W, vk=W))
        # first layer (C = 3): the (1, W) kernel also at BM = BN = 64 (K = 64, Ng = 7*7*3)
        for t in ([] if ctx.tiles else [_FIRST_LAYER_TILE[DTYPE_BYTES[dtype]]]):
            t = Tile(t.bm, t.bn, t.bk, t.num_warps, ARCHES[ctx.arch].default_stages)
            for variant in _with_workspace(_DEFAULT_SPLITK, dtype, dw):
                out.append(_spec("wgrad", variant, dtype, dw, prec, t, vc=1, vk=W))
    return out


def _default_streamk(ctx: FamilyContext) -> list[KernelSpec]:
    dtype, W = ctx.dtype, widest_vec(ctx.dtype)
    out = []
    for prec, dw, full in _default_dw_sets(ctx):
        for dims, pw in _DEFAULT_GEOMETRIES:
            # a minimal set's one stream-K kernel at both tiles (fp16 dW, 3x3 64 channels N=32:
            # 47 us at 128x128, 34 at 64x128); a full set's also at the extra tiles
            tiles = ctx.configs + (_default_extra_tiles(ctx, pw) if full and dims == 2 else [])
            for t in tiles:
                for mode in [m for m in ctx.modes if m in _DEFAULT_SK_MODES] or list(ctx.modes):
                    for red in (_DEFAULT_SK if full and dims == 2 else _DEFAULT_SK_3D if full else ("workspace",)):
                        if red in ctx.reductions:
                            out.append(_spec("wgrad_sk", red, dtype, dw, prec, t, dims=dims, pw=pw, vc=W, vk=W, mode=mode))
    return out


register_family("wgrad", _splitk_specs)
register_family("wgrad_sk", _streamk_specs)
register_family("dwconv", lambda ctx: dwconv_specs(ctx.preset, ctx.arch, ctx.dtype, ctx.tiles))
register_family("grouped", lambda ctx: grouped_specs(ctx.preset, ctx.arch, ctx.dtype, ctx.tiles))
register_family("wgrad_tma", lambda ctx: tma_specs(ctx.preset, ctx.arch, ctx.dtype, ctx.tiles))
register_family("dwconv_tma", lambda ctx: dwconv_tma_specs(ctx.preset, ctx.arch, ctx.dtype, ctx.tiles))
register_family("dwconv_walk", lambda ctx: dwconv_walk_specs(ctx.preset, ctx.arch, ctx.dtype, ctx.tiles))


def _needs_stage2(spec: KernelSpec) -> bool:
    return spec.variant in ("two_stage", "workspace")


def resolve_arches(arches) -> tuple[str, ...]:
    arches = tuple(dict.fromkeys(arches or ()))
    for a in arches:
        if a not in ARCHES:
            raise SweepError(f"arch {a!r} is not a skwgrad target; use one of {', '.join(ARCHES)}")
    return arches or tuple(ARCHES)


def resolve_dtypes(dtypes, preset: str) -> tuple[str, ...]:
    dtypes = tuple(dict.fromkeys(dtypes or ()))
    for d in dtypes:
        if d not in DTYPES:
            raise SweepError(f"dtype {d!r} is not supported; use one of {', '.join(DTYPES)}")
    if dtypes:
        return dtypes
    return SMOKE_DTYPES if preset == "smoke" else DTYPES


def resolve_modes(streamk: str) -> tuple[str, ...]:
    if streamk not in STREAMK_CHOICES:
        raise SweepError(f"--streamk {streamk!r}: use one of {', '.join(STREAMK_CHOICES)}")
    return () if streamk == "off" else MODES if streamk == "all" else (streamk,)


def resolve_reductions(reductions) -> tuple[str, ...]:
    if reductions is None or reductions == "" or reductions == ():
        return SK_REDUCTIONS
    if isinstance(reductions, str):
        reductions = [r.strip() for r in reductions.split(",") if r.strip()]
    bad = [r for r in reductions if r not in SK_REDUCTIONS]
    if bad or not reductions:
        raise SweepError(
            f"--streamk-reductions {','.join(reductions)!r}: each must be one of {', '.join(SK_REDUCTIONS)} (comma separated)"
        )
    return tuple(r for r in SK_REDUCTIONS if r in reductions)


def sweep(
    preset: str = "default",
    arches=None,
    dtypes=None,
    streamk: str = "all",
    reductions=None,
    tiles=None,
) -> list[SweepItem]:
    """Every (arch, spec) the preset and filters select, Stage-2 included; sorted, no duplicates.

    ``tiles`` is a list of ``Tile`` or the ``--tiles`` text."""
    if preset not in PRESETS:
        raise SweepError(f"preset {preset!r} is not one of {', '.join(PRESETS)}")
    arches = resolve_arches(arches)
    dtypes = resolve_dtypes(dtypes, preset)
    modes = resolve_modes(streamk)
    reductions = resolve_reductions(reductions)
    if isinstance(tiles, str):
        tiles = parse_tiles(tiles)
    tiles = tuple(tiles) if tiles else None
    items: set[SweepItem] = set()
    for arch in arches:
        specs: list[KernelSpec] = []
        for dtype in dtypes:
            ctx = FamilyContext(preset, arch, dtype, modes, reductions, tiles)
            for enumerate_fn in FAMILY_ENUMERATORS.values():
                specs += enumerate_fn(ctx)
        for dw in sorted({s.dw_dtype for s in specs if _needs_stage2(s)}):
            specs.append(stage2_spec(dw))
        specs += _pad_specs(specs)
        items.update(SweepItem(arch, s) for s in specs)
    return sorted(items, key=lambda it: (list(ARCHES).index(it.arch), it.spec))


@dataclass
class ProblemSweep:
    """The corpus-driven sweep: ``items`` to build and, per problem, what it gets."""

    items: list  # SweepItem, sorted, Stage-2 included
    problems: list  # (name, ConvProblem)
    per_problem: dict  # (name index, arch) -> number of main kernels selection could choose
    unserved: list  # (name, arch): no spec of the preset and filters admits the problem

    def to_dict(self) -> dict:
        return {
            "problems": len(self.problems),
            "unserved": [{"problem": n, "arch": a} for n, a in self.unserved],
        }


def _admission_key(spec: KernelSpec) -> tuple:
    # No precision here: the depthwise kernels (fp32 FMAs) admit ieee and tf32 problems alike;
    # ``selectable`` (check_problem) decides precision per spec.
    return (spec.dtype, spec.dw_dtype, spec.spatial_dims)


def sweep_for_problems(
    problems,
    preset: str = "default",
    arches=None,
    dtypes=None,
    streamk: str = "all",
    reductions=None,
    tiles=None,
) -> ProblemSweep:
    """Exactly the kernels selection could choose for ``problems`` on ``arches``: the preset's
    (and filters') main-kernel specs that admit at least one problem, narrowed per problem the way
    the launcher narrows (``skwgrad.abi.narrow.selectable``: per family the widest channel
    vectors, pointwise addressing for a pointwise problem), plus the Stage-2 reduce for each dW
    dtype a chosen ``two_stage``/``workspace`` kernel writes.

    ``problems``: ``ConvProblem``s or ``(name, ConvProblem)`` pairs. Without ``dtypes`` the
    problems' own input dtypes are swept."""
    from skwgrad.abi.narrow import selectable

    named = [(p if isinstance(p, tuple) else (p.describe(), p)) for p in problems]
    if not named:
        raise SweepError("no problems given: pass --corpus FILE or --problem TEXT")
    if not dtypes:
        dtypes = sorted({p.dtype for _, p in named}, key=list(DTYPES).index)
    base = sweep(preset, arches=arches, dtypes=dtypes, streamk=streamk, reductions=reductions, tiles=tiles)
    arches = resolve_arches(arches)
    by_arch: dict[str, dict] = {a: {} for a in arches}
    for it in base:
        if it.spec.family not in HELPER_FAMILIES:
            by_arch[it.arch].setdefault(_admission_key(it.spec), []).append(it.spec)
    items: set[SweepItem] = set()
    per_problem, unserved = {}, []
    for arch in arches:
        chosen: set[KernelSpec] = set()
        padded_dtypes: set = set()
        for i, (name, p) in enumerate(named):
            group = by_arch[arch].get((p.dtype, p.dw_dtype, p.spatial_dims), [])
            keep = selectable(group, p)
            per_problem[(i, arch)] = len(keep)
            if not keep:
                unserved.append((name, arch))
            chosen.update(keep)
            padding = padding_if_possible(p)
            if padding is not None:  # and the vector kernels of its channel-padded problem, with the copies
                more = selectable(group, padding.padded)
                if more:
                    chosen.update(more)
                    padded_dtypes.update((p.dtype, p.dw_dtype))
        for dw in sorted({s.dw_dtype for s in chosen if _needs_stage2(s)}):
            chosen.add(stage2_spec(dw))
        chosen.update(pad_spec(d) for d in padded_dtypes)
        items.update(SweepItem(arch, s) for s in chosen)
    out = sorted(items, key=lambda it: (list(ARCHES).index(it.arch), it.spec))
    return ProblemSweep(out, named, per_problem, unserved)


def _pad_specs(specs) -> list[KernelSpec]:
    """The channel-padding copy for each element dtype a padded launch of ``specs`` moves: the
    input dtype and the dW dtype of every dense kernel at the widest vectors (``skwgrad.abi.padding``:
    the route that runs unaligned channel counts on them)."""
    dense = [s for s in specs if s.family in ("wgrad", "wgrad_sk") and s.vec_c == s.vec_k == widest_vec(s.dtype)]
    return [pad_spec(d) for d in sorted({d for s in dense for d in (s.dtype, s.dw_dtype)})]


def counts(items) -> Counter:
    """(arch, dtype, family) -> number of kernels. Stage-2 counts under its dW dtype."""
    return Counter((it.arch, it.spec.dtype, it.spec.family) for it in items)


def format_counts(items, title: str = "") -> str:
    c = counts(items)
    families = (*FAMILY_ENUMERATORS, *sorted({f for _, _, f in c} - set(FAMILY_ENUMERATORS) - set(HELPER_FAMILIES)), *HELPER_FAMILIES)
    rows = [("arch", "dtype", *families, "total")]
    for arch, dtype in sorted({(a, d) for a, d, _ in c}, key=lambda ad: (list(ARCHES).index(ad[0]), ad[1])):
        n = [c[(arch, dtype, f)] for f in families]
        rows.append((arch, dtype, *map(str, n), str(sum(n))))
    per_arch = Counter()
    for (a, _, _), n in c.items():
        per_arch[a] += n
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [title] if title else []
    lines += ["  ".join(v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))) for r in rows]
    for a, n in per_arch.items():
        lines.append(f"{a}: {n} kernels")
    lines.append(f"total: {sum(c.values())} kernels")
    return "\n".join(lines)


# -- depthwise family (``dwconv``) --------------------------------------------------------------
# Its own configurations, not GEMM tiles: (BC channels per CTA, TAPS_P2, BR rows per step, warps),
# one per filter-size class: 16 taps (3x3, 1x1..4x4), 32 (5x5, 3x3x3), 64 (7x7). ``--tiles`` names
# GEMM tiles, so with it no dwconv kernel is added. Channel widths {1, W/2, W}: vec 1 serves any G.
# Variants: direct (ks_count = 1), two_stage (deterministic split-K, the Stage-2 reduce over
# ks_count replicas), workspace (dW in the input dtype: atomics into one f32 replica, Stage-2 over
# one) and, for fp32 dW, atomic. Smoke: workspace, two_stage and a 3-D scalar atomic kernel.
DWCONV_CONFIGS = {
    # taps: (BC, BR, warps). sm_90 (32 lanes): ~1 tap per thread at 16 taps; the wave-64 CDNA
    # parts spread the same block over twice the lanes.
    16: (64, 4, 4),
    32: (64, 4, 4),
    64: (64, 2, 4),
}
DWCONV_SMOKE = (16, (64, 4, 4))
# The default's vector-width kernels, from the H200 depthwise bench (benchmarks/RESULTS.md,
# 2026-12-01): every tap of a row in one thread ("taps") on small channel blocks was the fastest
# dwconv kernel on every 3x3 and 5x5 row (MobileNetV2 144ch: 92 us vs 250 us for (64, 4) without
# it); 7x7 kept the plain layout on 32 channels. taps: (BC, BR, warps, mode).
DWCONV_DEFAULT = {16: (16, 32, 4, "taps"), 32: (16, 16, 4, "taps"), 64: (32, 2, 4, "")}


# The window kernels (mode ``win<BW>[r<TR>]``, see depthwise._dwconv_win): filter width X ->
# (mode, BP strips per step), for stride and dilation 1 along W at the widest vector. Chosen by the
# sm_90 SASS of the inner loop (instructions per multiply-add product, bf16: 3x3 win7r3 2.47,
# 5x5 win7 2.45, 7x7 win7 2.14, vs 11.3 for the taps-inner default; win14r3 spills) with no
# local memory; BC = 16 channels per CTA on 32-lane parts, 32 on wave-64 parts (one 16-byte
# vector per thread per strip), 4 warps. In every preset but smoke (default: direct plus one split
# epilogue per dW dtype); benchmarks/gpu_depthwise.py times them against the gather kernels and cuDNN.
# 5x5 and 7x7 retuned on the H200 (run D4, 12 stride-1 bf16 depthwise rows, 13 configurations at
# 1-8 CTAs per SM each): 5x5 with all 5 tap rows in one CTA and 16 strips per step (dy read once for
# every row, not once per tap-row CTA) 1.1-1.8x faster than win7 at 64 on 4 of 5 rows (200ch 56px:
# 76.8 vs 139.8 us), 7% slower on the smallest; 7x7 at 32 strips 2-9% faster on 4 of 5 rows (win7r7
# needs 217 registers and lost); 3x3 stays (r16/r32/r64 within 3-6%, either way by row).
DWCONV_WINDOW = {3: ("win7r3", 64), 5: ("win7r5", 16), 7: ("win7", 32)}
# And strips of 5 for the 3-wide filter at stride 1 (2-D): selection takes the strip width that
# computes the fewest output columns, ceil(Wo / BW) * BW (the widest on ties), so a layer whose
# width is not a multiple of 7 (15, 29, 57, 113 px) runs strips of 5. The work per output column
# is the same within 3% at widths 4, 5 and 7 (sm_90 PTX, bf16: ~2.25 instructions per product
# beyond the kernel's fixed part). H200 run W6 (the 15 3x3 stride-1 depthwise rows of W2, every
# launch verified, each kernel at its best split degree): win5r3 was faster than win7r3 on all 5
# rows of 15 and 57 px (4-10%); on the 10 rows whose width 7 divides (14-112 px) win7r3 was faster
# on 9 (one tie), by up to 19%, and keeps them.
DWCONV_WINDOW_NARROW = {3: ("win5r3", 64)}
# Stride 2 along W (MobileNet / EfficientNet downsampling layers; the gather kernels ran them at
# 0.3-0.7x cuDNN on the H200, benchmarks/RESULTS.md 2026-12-01): the same strips of 7 outputs, the
# window is then the 2 * 7 + X - 2 contiguous x columns they read (same registers, ~1.7x the x
# loads per product). 2-D only (strided 3-D depthwise layers are rare). Dilation 2 (``d2``) is
# the same code, for the 3-wide filter, in broad/full (H200 run C2, dw3x3 dilation 2 256ch: 19.7
# us against 37.9 for the best gather kernel and 226 for cuDNN).
DWCONV_WINDOW_STRIDED = {3: ("win7r3s2", 64), 5: ("win7s2", 64), 7: ("win7s2", 64)}
# On wave32 (sm_90) the stride-2 kernels take 32 strips per step, not 64: a stride-2 layer has a
# quarter of the outputs and needs the smaller step to fill the SMs (H200 run C2: r32 fastest or
# within 2% of the fastest on all 7 rows where both were timed, 3x3 and 5x5, up to 28% ahead at
# 576ch 15x15 N=64; 7x7 follows unmeasured). Wave64 keeps 64: at 32 the gfx942/gfx950 ISA loses
# its 16-byte channel-vector loads (tests/test_depthwise_compile.py), and no AMD GPU measured it.
DWCONV_STRIDED_BR_WAVE32 = 32
DWCONV_WINDOW_DILATED = {3: ("win7r3d2", 64)}
# Channels per CTA of a window kernel on wave32 where it is not 16: the 7x7 stride-1 kernel (32
# strips) takes 32, so each thread holds one 16-byte vector (8 channels) per strip instead of 4
# channels in 8 bytes: per product, 2.14 instructions instead of 2.57 (sm_90 SASS, bf16), 168
# registers instead of 96. H200 run U3 (benchmarks/dw_mma_proto.py window, 6 stride-1 7x7 rows,
# best of 5 split degrees each): 1.05x geomean, 0.97-1.28x (96ch 56px N=64: 105 us against 135,
# cuDNN 124). The strided and 3x3 / 5x5 kernels stay at 16 (U3: 0.89-1.16x, no consistent gain).
DWCONV_WINDOW_BC_WAVE32 = {"win7": 32}
# A second channel block per mode on wave32 (2-D), (channels, strips) at the same channel-strips a
# step; selection picks the block per layer (select._channel_block_rank).
# - 3x3 stride 1: 32 channels, 32 strips (180 registers). H200 run B2 (gpu_dw_configs_ab.py, 18 3x3
#   stride-1 rows of two sets drawn before it, every launch verified, three split degrees each): at
#   the split rule's degree 1.089x auto's launch on the 13 rows of 72-768 channels (faster on 12: 768
#   ch 13 px 24.6 -> 19.5 us, 392 ch 28 px 27.1 -> 23.8, over the TMA depthwise kernel there) and
#   0.65-0.93x on the 5 rows of 16-64 channels. 64 channels a CTA (16 strips) was as fast at its
#   best degree but 1.17x off it at the rule's; 8 warps lost. Run B3 (sets drawn after B2, auto
#   against auto before, same process): 1.00-1.28x on 8 layers of 96-392 channels on strips of 7.
#   The strips of 5 at 32 channels ran 0.92-1.00x (3 layers): not built.
# - 7x7 stride 1: 16 channels, 64 strips (168 registers, the same loop as the 32-channel one) for
#   layers that 32-channel blocks pad by a quarter or more (16, 40, 48 channels). Run B4: on the 6
#   such rows of 27 7x7 rows (two sets drawn before it) 1.135x the 32-channel kernel at the rule's
#   degree (16 ch 111 px 42.6 -> 28.1 us, 48 ch 57 px 64.7 -> 49.8; one fp32 row 0.88x); where it
#   saves less padding it lost (56-520 channels, down to 0.79x).
# - 5x5 and 7x7 stride 2 (``win7s2``): 32 channels, 16 strips (95 / 107 registers, the same loop). Run
#   B6 (random_dw_s2_2026120432, drawn before it): at the rule's degree 1.05-1.52x on all 10 rows of
#   64-384 channels (5x5 64 ch 111 px 56.8 -> 37.4 us, 384 ch 28 px 46.8 -> 31.4; 7x7 184 ch 56 px
#   68.6 -> 48.3), slower on 16 and 48 channels (which the padding rule keeps at 16). The 3x3 one
#   (``win7r3s2``) at 32 x 16 was mixed (0.81-1.09x, 2 fp32 rows lost): not built.
DWCONV_WINDOW_BLOCKS_WAVE32 = {"win7r3": (32, 32), "win7": (16, 64), "win7s2": (32, 16)}


def dwconv_window_specs(arch: str, dtype: str, dw: str, variants, *, dims=2, strided=False, dilated=False) -> list[KernelSpec]:
    """The window kernels for one arch, dtype and dW dtype (3-D: the 3-wide class only; the
    stride-2 and dilation-2 ones, ``strided`` / ``dilated``, in 2-D only)."""
    W = widest_vec(dtype)
    bc = 16 * ARCHES[arch].wave_size // 32
    configs = list(DWCONV_WINDOW.items())
    if dims == 2:
        configs += list(DWCONV_WINDOW_NARROW.items())
        configs += list(DWCONV_WINDOW_STRIDED.items()) if strided else []
        configs += list(DWCONV_WINDOW_DILATED.items()) if dilated else []
    out = []
    for x, (mode, bp) in configs:
        if dims == 3 and x != 3:
            continue
        channels = bc
        if ARCHES[arch].wave_size == 32:
            bp = DWCONV_STRIDED_BR_WAVE32 if dwconv_window(mode).sw > 1 else bp
            channels = DWCONV_WINDOW_BC_WAVE32.get(mode, bc)
        for variant in variants:
            out.append(_dwconv_spec(variant, dtype, dw, x, (channels, bp, 4), dims=dims, vec=W, mode=mode))
            if dims == 2 and ARCHES[arch].wave_size == 32 and mode in DWCONV_WINDOW_BLOCKS_WAVE32:
                block = DWCONV_WINDOW_BLOCKS_WAVE32[mode]
                out.append(_dwconv_spec(variant, dtype, dw, x, (*block, 4), dims=dims, vec=W, mode=mode))
    return out


def _dwconv_spec(variant, dtype, dw, taps, cfg, *, dims=2, vec=1, mode=""):
    bc, br, warps = cfg
    prec = "ieee" if dtype == "fp32" else ""
    return KernelSpec(
        "dwconv", variant, dtype, dw, spatial_dims=dims, vec_c=vec, vec_k=vec,
        bm=bc, bn=taps, bk=br, num_warps=warps, num_stages=1, precision=prec, mode=mode,
    )  # fmt: skip


def _dwconv_split(dtype: str, dw: str) -> str:
    """The default's split epilogue: workspace for dW in the input dtype, atomic for fp32 dW."""
    return "workspace" if dw == dtype != "fp32" else "atomic"


def dwconv_specs(preset: str, arch: str, dtype: str, tiles=None) -> list[KernelSpec]:
    """The dwconv kernels of a preset for one arch and dtype (the same for every arch today)."""
    if tiles:
        return []
    W = widest_vec(dtype)
    if preset == "smoke":
        taps, cfg = DWCONV_SMOKE
        return [
            _dwconv_spec("workspace" if dtype != "fp32" else "direct", dtype, dtype, taps, cfg, vec=W),
            _dwconv_spec("two_stage", dtype, dtype, taps, cfg, vec=W),
            _dwconv_spec("atomic", dtype, "fp32", taps, cfg, dims=3, vec=1),
        ]
    out = []
    if preset == "default":
        # The pruned default: 2-D at widths {1, W} for every filter class, 3-D at W for the 3x3x3
        # class; direct plus one split-K epilogue per dW dtype (workspace for the input dtype,
        # atomic for fp32 dW). two_stage (deterministic) and W/2 stay in broad/full.
        shapes = [(2, vec, t) for vec in (1, W) for t in DWCONV_CONFIGS] + [(3, W, 32)]
        for dw, (dims, vec, taps) in itertools.product(dw_dtypes(dtype), shapes):
            split = _dwconv_split(dtype, dw)
            if vec == W and dims == 2:  # the measured configuration; vec 1 (any G) keeps the plain one
                bc, br, warps, mode = DWCONV_DEFAULT[taps]
                cfg, kw = (bc, br, warps), {"mode": mode}
            else:
                cfg, kw = DWCONV_CONFIGS[taps], {}
            for variant in ("direct", split):
                out.append(_dwconv_spec(variant, dtype, dw, taps, cfg, dims=dims, vec=vec, **kw))
        # window kernels, 2-D at stride 1 and 2 along W and the 3-wide one at dilation 2, the split
        # epilogue only (a minimal set, as in the dense default): the dearest kernels to compile
        # (3-5 s of CPU each against 1 for a gather kernel; benchmarks/COMPILE.md "The default
        # after run C1"). A one-split problem runs the split kernel at ks_count 1; 3-D depthwise
        # runs on the gather kernels (the H200: 95 us for 3x3x3 64ch); broad/full keep every
        # window kernel. fp16 with an fp16 dW has them too: without, its 5x5 and 7x7 layers ran on
        # the gather kernels at 0.44-0.51x cuDNN (H200 run P2, session 11); and so does dilation 2:
        # a 3x3 768ch layer at dilation 2 ran the gather kernel at 0.44x cuDNN (run P3; C2 measured
        # the dilated window kernel 1.9x faster than the best gather kernel).
        for dw in dw_dtypes(dtype):
            out += dwconv_window_specs(arch, dtype, dw, (_dwconv_split(dtype, dw),), dims=2, strided=True, dilated=True)
        return out
    # {1, W/2, W}: vec 1 serves any G; W/2 the channel counts that are multiples of W/2 only (G = 100)
    for dw, dims, vec, (taps, cfg) in itertools.product(dw_dtypes(dtype), (2, 3), (1, W // 2, W), DWCONV_CONFIGS.items()):
        variants = _variants_for("wgrad", dw, ("direct", "atomic", "two_stage")) + (("workspace",) if dw == dtype != "fp32" else ())
        for variant in variants:
            out.append(_dwconv_spec(variant, dtype, dw, taps, cfg, dims=dims, vec=vec))
    for dw, dims in itertools.product(dw_dtypes(dtype), (2, 3)):
        variants = _variants_for("wgrad", dw, ("direct", "atomic", "two_stage")) + (("workspace",) if dw == dtype != "fp32" else ())
        out += dwconv_window_specs(arch, dtype, dw, variants, dims=dims, strided=True, dilated=True)
    return out


# -- packed-group family (``grouped``) ----------------------------------------------------------
# (GB groups per tile, BM): GB * K = BM for K = 4, 8, 16 per group at BM 32 and 64; BN = BK = 64
# (and the 16-bit GROUPED_DEFAULT_16BIT tiles), 4 warps. Vector widths (W, W) (GB * C and GB * K are multiples of 8 for these K) and (1, 1)
# on the 2-D two-stage kernels. Every two-stage kernel of a 16-bit dW in the input dtype has its
# workspace twin (``_with_workspace``). ``--tiles`` names the dense tiles, so with it none is added.
GROUPED_CONFIGS = ((2, 32), (4, 32), (8, 32), (4, 64), (8, 64), (16, 64))
# The default's other packed tiles (16-bit inputs), (GB, BM, BN): GB * K = BM = 64 for 16 and 4
# channels per group, and GB = 8 at 64x128 (half the rows) where G is not a multiple of 16.
# H200 runs I3 / I5, every candidate timed (benchmarks/RESULTS.md, tenth session): 4 channels per
# group, auto 1.18-1.32x faster on the three rows with a cached tile for them; 16 per group, the
# 4-group 64-row tile 1.13-1.78x faster than the default's best on 17 of 19 rows (the other two
# have no G % 4 == 0), geomean 1.35x.
# And GB = 2 at 64x64 for 32 channels per group (H200 run P4: the best 2-group tile against the
# best other kernel, 1.03x geomean over 15 layers with 32 per group, faster on 9; auto 1.11x faster).
GROUPED_DEFAULT_16BIT = ((4, 64, 64), (16, 64, 128), (8, 64, 128), (2, 64, 64))
GROUPED_SMOKE = (4, 32)


def _grouped_spec(variant, dtype, dw, prec, gb, bm, arch, *, dims=2, vec=1, bn=64):
    return KernelSpec(
        "grouped", variant, dtype, dw, spatial_dims=dims, vec_c=vec, vec_k=vec, bm=bm, bn=bn, bk=64, block=gb,
        num_warps=4, num_stages=ARCHES[arch].default_stages, precision=prec,
    )  # fmt: skip


def grouped_specs(preset: str, arch: str, dtype: str, tiles=None) -> list[KernelSpec]:
    """The grouped kernels of a preset for one arch and dtype."""
    if tiles:
        return []
    W = widest_vec(dtype)
    if preset == "smoke":
        gb, bm = GROUPED_SMOKE
        prec = precisions(dtype, arch, "smoke")[0]
        return [
            _grouped_spec("two_stage", dtype, dtype, prec, gb, bm, arch, vec=W),
            _grouped_spec("atomic", dtype, "fp32", prec, gb, bm, arch, dims=3, vec=1),
        ]
    out = []
    if preset == "default":
        # The pruned default: 2-D, widths W, GB*K = BM for K = 8 at BM 32 and 64, direct and
        # two_stage (and its workspace twin for a 16-bit dW of the input dtype). The rest stays in broad/full.
        for prec, dw, (gb, bm) in itertools.product(precisions(dtype, arch, preset), dw_dtypes(dtype), ((4, 32), (8, 64))):
            for variant in _with_workspace(("direct", "two_stage"), dtype, dw):
                out.append(_grouped_spec(variant, dtype, dw, prec, gb, bm, arch, vec=W))
        if dtype != "fp32":
            out += [_grouped_spec(variant, dtype, dw, prec, gb, bm, arch, vec=W, bn=bn)
                    for prec, dw, (gb, bm, bn) in itertools.product(precisions(dtype, arch, preset), dw_dtypes(dtype),
                                                                    GROUPED_DEFAULT_16BIT)
                    for variant in _with_workspace(("direct", "two_stage"), dtype, dw)]  # fmt: skip
        return out
    for prec, dw, dims, (gb, bm) in itertools.product(precisions(dtype, arch, preset), dw_dtypes(dtype), (2, 3), GROUPED_CONFIGS):
        for variant in _with_workspace(_variants_for("wgrad", dw, ("direct", "atomic", "two_stage")), dtype, dw):
            out.append(_grouped_spec(variant, dtype, dw, prec, gb, bm, arch, dims=dims, vec=W))
            if dims == 2 and variant in ("two_stage", "workspace"):  # the scalar fallback, and its workspace twin
                out.append(_grouped_spec(variant, dtype, dw, prec, gb, bm, arch, dims=dims, vec=1))
    return out


# -- TMA im2col family (``wgrad_tma``, sm_90 only) ----------------------------------------------
# (BM, BN, BK, taps per tile, warps, stages): the configurations that were fastest on at least one
# of 43 dense 16-bit rows on the H200 (runs R2/R3, benchmarks/mainloop/gluon_run.py; shared memory
# 64-192 KB, one or two CTAs per SM). 2 and 4 taps per tile (a dy box shared by several taps) won
# on C <= 64. Every 16-bit input, dW in the input dtype (direct, workspace) and in fp32 (direct,
# atomic): direct for the many-tile layers that need no split, the others split the reduction.
TMA_CONFIGS = (
    (128, 128, 64, 1, 8, 4), (128, 256, 64, 1, 8, 3), (64, 128, 64, 1, 4, 4), (128, 64, 64, 1, 4, 4),
    (64, 64, 64, 1, 4, 4), (64, 128, 64, 2, 4, 4), (128, 128, 64, 2, 8, 4), (64, 256, 64, 4, 4, 5),
)  # fmt: skip
# Ring depths (H200 run T3, every default TMA kernel's twin at its own launch setting on 53 rows of
# three sets, verified, interleaved): 64x256 with 4 taps 6.6% faster at 5 slots than at 3 (15
# launches, 0.89-1.00x); 6 or 8 slots elsewhere 0.99-1.03x (no change), so those keep theirs.
TMA_SMOKE = ((64, 64, 64, 1, 4, 3),)
# Persistent twins (a pool of one CTA per SM walks the work units; the ring runs on across them,
# so a unit's loads start while the last one's tile is stored): for the many short units of
# layers with a short reduction and many tiles, where run S1 priced a fill of about 1.8 us per
# CTA wave (fill_tma).
TMA_PERSISTENT = ((128, 128, 64, 1, 8, 4), (64, 128, 64, 1, 4, 4), (128, 64, 64, 1, 4, 4))
# Stream-K twins (the pool's CTAs walk equal ranges of all tiles' iterations and add their partial
# tiles; adding epilogues only), in broad and full only: H200 run S4 timed them on 74 rows; fastest
# on 10 (ResNet-50 l3 29.5 us against 32.5, 5x5 192->128 27.2 against 33.3), but the best of all
# launches moved by 0.9% geomean, and ranked by the model their picks and mispicks cancelled
# (auto 1.002x slower with them than without). Their equal ranges start at offsets no other
# tile's CTAs share, so layers whose x and dy outgrow the L2 read them again per tile (vae 3x3:
# 261 us against 120; the refetch_tma term prices it).
TMA_STREAMK = ((128, 128, 64, 1, 8, 4), (64, 128, 64, 1, 4, 4), (128, 64, 64, 1, 4, 4), (64, 128, 64, 2, 4, 4))


def tma_max_regs(bm: int, bn: int, warps: int) -> int:
    """Registers a thread of a TMA kernel is launched with (``KernelSpec.max_regs``): 4-warp tiles
    run several CTAs an SM. At one (the compiler's 255 registers x 256 threads fill the SM) their
    loop waits on latency, about 0.26 us an iteration whatever N (runs X9, Y1).
    - Two CTAs (128 registers) for tiles up to 64x128. H200 run Y2, 36 layers (grouped and dense,
      two sets drawn before it), each launch against its one-CTA build at the same split: 1.138x
      faster (geomean of 108 pairs, faster on 84, the slowest 0.913x). Y4 (69 layers): auto 1.047x
      the previous default, grouped layers 1.065x cuDNN against 0.984x.
    - Three CTAs (80 registers; 3 x 66 KB of shared memory) for 64x64. Run Y5, 26 layers, against
      the two-CTA build: 1.084x at the same split (78 pairs, faster on 49, 0.882-1.504x; the
      losses are launches of 1-4 splits), the best three-CTA launch 1.159x the best two-CTA one
      (faster on 22 of 26). 64x128 does not compile at 80.
    The 64x256 4-tap tile does not compile at 128 (ptxas asks for 154) and its 205 KB of shared
    memory fit one CTA anyway; 8-warp tiles (384 threads) would need 85 (ptxas refuses 80-88)."""
    from skwgrad.abi.spec import TMA_THREE_CTA_REGS, TMA_TWO_CTA_REGS

    if warps != 4 or bm * bn > 64 * 128:
        return 0
    return TMA_THREE_CTA_REGS if (bm, bn) == (64, 64) else TMA_TWO_CTA_REGS


def tma_specs(preset: str, arch: str, dtype: str, tiles=None) -> list[KernelSpec]:
    """The TMA im2col kernels of a preset for one arch and dtype (none where the arch has no TMA
    im2col, for fp32 inputs, or with ``--tiles``, which names the Triton kernels' tiles)."""
    if tiles or dtype == "fp32" or not ARCHES[arch].tma_im2col:
        return []
    W = widest_vec(dtype)
    out = []
    configs = [(c, "", 2) for c in (TMA_SMOKE if preset == "smoke" else TMA_CONFIGS)]
    configs += [(c, "persistent", 2) for c in (TMA_PERSISTENT if preset != "smoke" else ())]
    configs += [(c, "streamk", 2) for c in (TMA_STREAMK if preset in ("broad", "full") else ())]
    # 3-D (5-D im2col): the 2-D tiles one CTA per work unit; a 3-D layer's reduction (N*Do*Ho*Wo)
    # is long, which the persistent and stream-K walks are not for
    configs += [(c, "", 3) for c in (TMA_CONFIGS if preset != "smoke" else ())]
    for (bm, bn, bk, taps, warps, stages), mode, dims in configs:
        for dw in dw_dtypes(dtype):
            for variant in ("direct", "workspace" if dw == dtype else "atomic"):
                if variant == "direct" and mode == "streamk":
                    continue
                if preset == "smoke" and (variant, dw) not in (("workspace", dtype), ("atomic", "fp32")):
                    continue
                out.append(KernelSpec("wgrad_tma", variant, dtype, dw, spatial_dims=dims, vec_c=W, vec_k=W, bm=bm, bn=bn,
                                      bk=bk, num_warps=warps, num_stages=stages, block=taps, mode=mode,
                                      max_regs=tma_max_regs(bm, bn, warps)))  # fmt: skip
    return out


# -- TMA depthwise family (``dwconv_tma``, sm_90) --------------------------------------------------
# (filter width, BC channels, WT columns, warps, stages): 32 channels x 16 columns, 3 ring slots,
# 4 warps was the fastest configuration of benchmarks/dw_tma_proto.py on 9 of the 10 layers of
# 256+ channels it was timed on (H200, session 19; the tenth, 256 ch 28 px: 4% behind 16 x 32).
# Selection takes it from DWCONV_TMA_MIN_CHANNELS (skwgrad.launcher.select), after the 32-channel 3x3
# window kernel (DWCONV_WINDOW_BLOCKS_WAVE32: 1.04-1.26x faster on 3x3 layers of 376-768 channels, H200
# runs B2 and B3). 80 registers (3x3), 160 (5x5), 61-67 KB of shared memory, no spills. The default
# preset builds the widths the product runs (launch.DWCONV_TMA_FILTER_WIDTHS), broad and full all.
DWCONV_TMA_CONFIGS = ((3, 32, 16, 4, 3), (5, 32, 16, 4, 3))


def dwconv_tma_specs(preset: str, arch: str, dtype: str, tiles=None) -> list[KernelSpec]:
    """The TMA depthwise kernels of a preset for one arch and dtype: sm_90, 16-bit inputs, the
    atomic epilogue for an fp32 dW and workspace for a 16-bit one; none in smoke or with ``--tiles``."""
    if tiles or preset == "smoke" or dtype == "fp32" or not ARCHES[arch].tma_im2col:
        return []
    W = widest_vec(dtype)
    return [
        KernelSpec("dwconv_tma", "workspace" if dw == dtype else "atomic", dtype, dw, vec_c=W, vec_k=W, bm=bc, bn=k, bk=wt,
                   num_warps=warps, num_stages=stages)  # fmt: skip
        for k, bc, wt, warps, stages in DWCONV_TMA_CONFIGS
        if preset in ("broad", "full") or k in DWCONV_TMA_FILTER_WIDTHS
        for dw in dw_dtypes(dtype)
    ]


# -- row-walk depthwise family (``dwconv_walk``) ------------------------------------------------------
# 16 channels x one strip of 2 output columns a thread, 4 channels a load: 4 warps hold 16 channels x a
# wave's worth of strips (32 on sm_90, 64 on wave64 AMD), one channel vector a thread. The H200
# prototype's fastest (benchmarks/dw_vert_proto.py, runs F2, F3, G1): 4 channels a load beat 8 (2x the
# registers: 0.58-0.86x), strips of 2 beat 4 and 7. 3x3 filters only: at 4 channels a thread the 5x5 window
# spills (benchmarks/build_walk_configs.py builds 5x5 / 7x7 trial configurations at 1-2 channels a thread).
DWCONV_WALK_CONFIG = dict(bm=16, bn=3, block=2, vec=4, num_warps=4, num_stages=3)


def dwconv_walk_specs(preset: str, arch: str, dtype: str, tiles=None) -> list[KernelSpec]:
    """The row-walk depthwise kernels of a preset for one arch and dtype: 16-bit inputs, the atomic
    epilogue for an fp32 dW and workspace for a 16-bit one (smoke: the atomic one only); none with
    ``--tiles``."""
    if tiles or dtype == "fp32":
        return []
    c = DWCONV_WALK_CONFIG
    dws = ("fp32",) if preset == "smoke" else dw_dtypes(dtype)
    return [
        KernelSpec("dwconv_walk", "workspace" if dw == dtype else "atomic", dtype, dw, vec_c=c["vec"], vec_k=c["vec"], bm=c["bm"],
                   bn=c["bn"], bk=ARCHES[arch].wave_size, block=c["block"], num_warps=c["num_warps"], num_stages=c["num_stages"])  # fmt: skip
        for dw in dws
    ]
