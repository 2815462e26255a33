"""Channel padding: run a problem whose channel counts the vector kernels cannot load on those
kernels anyway, by copying x and dy into channel-padded buffers and dW back out.

A kernel that loads ``v`` channels at a time needs ``C % v == 0`` (x, dW) and ``K % v == 0`` (dy):
row starts are then 16-byte aligned. Channel counts with no such factor (C = 250, K = 1036) leave
only the scalar-load kernels, which the H200 ran 2-6x slower than cuDNN (benchmarks/RESULTS.md,
run G6). Padding C and K up to the widest vector (``W = 16 / element bytes``) with zeros changes
no output element: the padded channels of x and dy are zero, so their dW rows and columns are
zero and are dropped when dW is copied back.

A padded launch is (1) ``pad`` x into ``[rows, C_pad]`` and dy into ``[rows, K_pad]`` (each only
when its channel count is unaligned), (2) the main kernel (and Stage-2) on the padded problem with
a padded dW, (3) ``pad`` the padded dW back into the caller's ``[G, K, taps, C]``. The copies are
one small kernel (``family "pad"``: ``skwgrad.aot.kernels.pad``) that writes every element of its
destination, zeros past ``width``, so the staging buffers need no memset and hold anything at rest
(the scratch arena). One launch runs up to two copies: x and dy go together, dW's copy is its own
launch (``PadLaunch``), so a padded launch makes two pad launches. This module is the one place
that decides the padded problem, the copies' shapes, their launches and the staging layout; the
launcher and the cost model read it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from skwgrad.abi.conv import DTYPE_BYTES, ConvProblem
from skwgrad.abi.kernargs import I32_MAX, PAD_COPIES, PAD_COPY_SCALARS
from skwgrad.abi.workspace import ALIGN, _roundup
from skwgrad.errors import ProblemError

PAD_BLOCK = 2048  # elements per CTA of the pad kernel, of the side it walks (BLOCK / W 16-byte vectors)
PAD_WARPS = 4
PAD_SCATTER_COLS = 256  # columns of a scatter program's tile (PAD_BLOCK / 256 = 8 destination rows: each thread then maps 2 rows for its 16 elements)


def vector_width(dtype: str) -> int:
    """W: channels per 16-byte load of ``dtype``, what the padded channel counts are multiples of."""
    return 16 // DTYPE_BYTES[dtype]


def pad_spec(dtype: str):
    """The pad kernel for elements of ``dtype``: what the sweep builds and selection looks up."""
    from skwgrad.abi.spec import KernelSpec  # spec imports nothing of this module

    return KernelSpec("pad", "rows", dtype, dtype, block=PAD_BLOCK, num_warps=PAD_WARPS)


@dataclass(frozen=True)
class PadCopy:
    """One copy of the pad kernel: ``dst[r, c] = src[row(r) * src_pitch + c] if c < width
    else 0`` for ``r < rows``, ``c < dst_pitch``, where ``row(r) = (r // group_rows) *
    src_group_rows + r % group_rows`` (dW of several groups: each group's K rows out of K_pad).

    A gather (x and dy into staging: the destination's pitch a multiple of W, no groups to drop,
    ``row(r) = r``) walks the destination's 16-byte vectors; a scatter (the padded dW back into the
    caller's unaligned rows) walks tiles of destination rows (``skwgrad.aot.kernels.pad``)."""

    operand: str  # "x" | "dy" | "dw"
    dtype: str
    rows: int
    width: int
    src_pitch: int
    dst_pitch: int
    group_rows: int
    src_group_rows: int

    def __post_init__(self):
        w = vector_width(self.dtype)
        if not (0 < self.width <= min(self.src_pitch, self.dst_pitch) and 0 < self.group_rows <= self.src_group_rows
                and self.rows % self.group_rows == 0):  # fmt: skip
            raise ProblemError(f"pad copy of {self.operand}: inconsistent shape {self}")
        if not self.scatter and self.dst_pitch % w:
            raise ProblemError(f"pad copy of {self.operand}: a gather's destination pitch {self.dst_pitch} is not a multiple of {w} (16-byte vectors)")

    @property
    def scatter(self) -> bool:
        """The destination rows are not 16-byte aligned, or rows of each group are dropped (dW):
        the kernel walks tiles of destination rows; else the destination's vectors (gather)."""
        return self.dst_pitch % vector_width(self.dtype) != 0 or self.group_rows != self.src_group_rows

    @property
    def src_rows(self) -> int:
        return self.rows // self.group_rows * self.src_group_rows

    @property
    def numel(self) -> int:
        """Destination elements (every one is written)."""
        return self.rows * self.dst_pitch

    @property
    def grid(self) -> int:
        """Programs of this copy (of its launch's ``grid``): a gather's PAD_BLOCK destination
        elements each, a scatter's tile of PAD_BLOCK / PAD_SCATTER_COLS rows by PAD_SCATTER_COLS columns."""
        if self.scatter:
            return math.ceil(self.rows / (PAD_BLOCK // PAD_SCATTER_COLS)) * math.ceil(self.dst_pitch / PAD_SCATTER_COLS)
        return math.ceil(self.numel / PAD_BLOCK)

    @property
    def elements_moved(self) -> int:
        """Elements read (``width`` of each row) plus elements written (every destination element)."""
        return self.rows * self.width + self.numel

    @property
    def bytes_moved(self) -> int:
        return self.elements_moved * DTYPE_BYTES[self.dtype]

    def scalars(self) -> dict[str, int]:
        return {"rows": self.rows, "width": self.width, "src_pitch": self.src_pitch, "dst_pitch": self.dst_pitch,
                "group_rows": self.group_rows, "src_group_rows": self.src_group_rows, "scatter": int(self.scatter)}  # fmt: skip


# The scalars of an unused copy slot: no rows, and no programs in its launch.
_NO_COPY = {"rows": 0, "width": 0, "src_pitch": 0, "dst_pitch": 0, "group_rows": 1, "src_group_rows": 1, "scatter": 0}


@dataclass(frozen=True)
class PadLaunch:
    """One launch of the pad kernel: one or two copies of one dtype, copy 0 on the first
    ``split`` programs, copy 1 on the rest. What the launcher enqueues and the cost model counts."""

    copies: tuple[PadCopy, ...]

    def __post_init__(self):
        if not 1 <= len(self.copies) <= PAD_COPIES or len({c.dtype for c in self.copies}) != 1:
            raise ProblemError(f"a pad launch runs one or {PAD_COPIES} copies of one dtype, not {self.copies}")

    @property
    def dtype(self) -> str:
        return self.copies[0].dtype

    @property
    def operands(self) -> tuple[str, ...]:
        return tuple(c.operand for c in self.copies)

    @property
    def split(self) -> int:
        return self.copies[0].grid

    @property
    def grid(self) -> int:
        return sum(c.grid for c in self.copies)

    def scalars(self) -> dict[str, int]:
        """The launch's scalar kernargs (an unused copy slot: no rows)."""
        out = {"split": self.split}
        for i in range(PAD_COPIES):
            sc = self.copies[i].scalars() if i < len(self.copies) else _NO_COPY
            out.update({f"{n}{i}": sc[n] for n in PAD_COPY_SCALARS})
        return out

    def pointers(self, buffers: dict) -> dict[str, int]:
        """The launch's pointer kernargs from ``buffers[operand] = (src, dst)``; an unused slot
        repeats copy 0's (the packer wants real pointers; no program reads them)."""
        out = {}
        for i in range(PAD_COPIES):
            src, dst = buffers[self.copies[min(i, len(self.copies) - 1)].operand]
            out[f"src{i}"], out[f"dst{i}"] = src, dst
        return out


@dataclass(frozen=True)
class ChannelPadding:
    """How a problem runs padded: the padded problem, the copies in launch order (inputs before
    the main kernel, dW after) and where each padded buffer lies in the staging region."""

    problem: ConvProblem  # the caller's
    padded: ConvProblem  # what the kernels run
    before: tuple[PadCopy, ...]  # x and/or dy, into staging
    after: PadCopy  # padded dW (staging) into the caller's dW
    offsets: dict  # operand -> byte offset in the staging region ("x", "dy", "dw")
    staging_bytes: int

    @property
    def copies(self) -> tuple[PadCopy, ...]:
        return (*self.before, self.after)

    @property
    def launch_before(self) -> PadLaunch | None:
        """The inputs' copies, one launch (None: neither x nor dy is padded)."""
        return PadLaunch(self.before) if self.before else None

    @property
    def launch_after(self) -> PadLaunch:
        """dW's copy, its own launch (it follows the main kernel)."""
        return PadLaunch((self.after,))

    @property
    def launches(self) -> tuple[PadLaunch, ...]:
        """The pad launches in order: the inputs' (when any), then dW's."""
        return tuple(x for x in (self.launch_before, self.launch_after) if x is not None)

    @property
    def bytes_moved(self) -> int:
        return sum(c.bytes_moved for c in self.copies)

    def describe(self) -> str:
        p, q = self.problem, self.padded
        return f"C {p.c}->{q.c}, K {p.k}->{q.k}"

    def staging_offset(self, kernel_scratch_bytes: int) -> int:
        """Where the staging region starts in the scratch arena: after the main kernel's own scratch."""
        return _roundup(kernel_scratch_bytes)

    def scratch_bytes(self, kernel_scratch_bytes: int) -> int:
        """Scratch arena bytes of a padded launch: the main kernel's, then the staging region."""
        return self.staging_offset(kernel_scratch_bytes) + self.staging_bytes


def channel_padding(problem: ConvProblem, width: int | None = None) -> ChannelPadding | None:
    """The padding that lets the ``width``-channel vector kernels (default: 16-byte loads) run
    ``problem``; None when its channels are already multiples of ``width`` or the problem is one
    the depthwise / packed-group families run (at most 16 channels per group with groups), where
    padding would multiply the work. Raises ProblemError when a padded buffer outgrows the 32-bit
    element offsets of the kernels."""
    w = width or vector_width(problem.dtype)
    if problem.c % w == 0 and problem.k % w == 0:
        return None
    if problem.g > 1 and max(problem.c, problem.k) <= 16:
        return None
    cp, kp = _roundup(problem.c, w), _roundup(problem.k, w)
    padded = dataclasses.replace(problem, c=cp, k=kp)
    p = problem
    sp_in = p.n * p.di * p.hi * p.wi * p.g
    sp_out = p.n * p.do * p.ho * p.wo * p.g
    taps = p.z * p.y * p.x
    before = []
    offsets, at = {}, 0
    if cp != p.c:
        before.append(PadCopy("x", p.dtype, sp_in, p.c, p.c, cp, sp_in, sp_in))
        offsets["x"] = at
        at = _roundup(at + sp_in * cp * DTYPE_BYTES[p.dtype], ALIGN)
    if kp != p.k:
        before.append(PadCopy("dy", p.dtype, sp_out, p.k, p.k, kp, sp_out, sp_out))
        offsets["dy"] = at
        at = _roundup(at + sp_out * kp * DTYPE_BYTES[p.dtype], ALIGN)
    offsets["dw"] = at
    at = _roundup(at + padded.dw_numel * DTYPE_BYTES[p.dw_dtype], ALIGN)
    # dW [G, K_pad, taps, C_pad] -> [G, K, taps, C]: per group K * taps rows out of K_pad * taps
    after = PadCopy("dw", p.dw_dtype, p.g * p.k * taps, p.c, cp, p.c, p.k * taps, kp * taps)
    for c in (*before, after):
        # the kernel's element offsets (a CTA past the end included: masked lanes) stay in i32
        if max(c.numel, c.src_rows * c.src_pitch) > I32_MAX - PAD_BLOCK:
            raise ProblemError(
                f"padding {c.operand} of {problem.describe()} to {c.dst_pitch if c.operand != 'dw' else c.src_pitch} "
                f"channels makes a buffer of more than {I32_MAX} elements (32-bit offsets): split the batch"
            )
    return ChannelPadding(problem, padded, tuple(before), after, offsets, at)


def padding_if_possible(problem: ConvProblem, width: int | None = None) -> ChannelPadding | None:
    """``channel_padding``, or None when a padded buffer would outgrow the 32-bit offsets (the
    problem then runs unpadded only): what selection and the corpus sweep offer."""
    try:
        return channel_padding(problem, width)
    except ProblemError:
        return None


__all__ = ["ChannelPadding", "PadCopy", "PadLaunch", "channel_padding", "padding_if_possible", "pad_spec", "vector_width", "PAD_BLOCK", "PAD_SCATTER_COLS", "PAD_WARPS"]
