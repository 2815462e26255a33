"""The channel-padding copies (``skwgrad.abi.padding``): one launch runs up to two copies, copy 0
on programs ``[0, split)`` and copy 1 on the rest (x and dy in one launch). Each copy is
``dst[r, c] = src[row(r) * src_pitch + c]`` for ``c < width`` and 0 for ``width <= c < dst_pitch``,
over ``rows`` destination rows, where ``row(r) = (r // group_rows) * src_group_rows + r %
group_rows`` (dW of several groups keeps K of each group's K_pad rows). Every destination element
is written, so the destination needs no memset.

The work is cut into 16-byte vectors (``VEC`` elements) of the padded, aligned side, so the row
arithmetic (two unsigned divisions) is done once per vector, not per element, and that side moves
whole vectors (st/ld .v4 on sm_90):

* gather (``scatter == 0``, x and dy into staging: ``dst_pitch % VEC == 0`` and no groups,
  ``row(r) = r``): one vector of a destination row per lane; VEC scalar loads of consecutive
  source elements (masked past ``width``, 0 there), one vector store. A destination vector never
  straddles two rows.
* scatter (``scatter == 1``, the padded dW back out into the caller's dense, unaligned rows, or
  rows of each group dropped): a tile of ``BLOCK // COLS`` destination rows by ``COLS`` columns
  per program, the row mapping once per row, one element per lane along each row.

In the gather consecutive lanes take consecutive vectors, so both sides coalesce whatever the row
width: the 3-channel stem (one vector per row) and a 1036-channel row (130 vectors) alike. One CTA
covers BLOCK elements of the side it walks."""

import triton
import triton.language as tl


@triton.jit
def _gather(src, dst, rows, width, src_pitch, dst_pitch, group_rows, src_group_rows, pid,
            BLOCK: tl.constexpr, VEC: tl.constexpr):  # fmt: skip
    BV: tl.constexpr = BLOCK // VEC
    per_row = (dst_pitch // VEC).to(tl.uint32)  # vectors per destination row (dst_pitch % VEC == 0)
    v = pid * BV + tl.arange(0, BV)  # destination vectors
    live = v < rows * per_row.to(tl.int32)
    r = (v.to(tl.uint32) // per_row).to(tl.int32)  # a gather has no groups: row(r) = r
    c0 = (v - r * per_row.to(tl.int32)) * VEC
    src_row = r
    j = tl.arange(0, VEC)
    room = width - c0  # columns of this vector that hold data (j < room), the rest are zeros
    val = tl.load(src + (src_row * src_pitch + c0)[:, None] + j[None, :], mask=live[:, None] & (j[None, :] < room[:, None]), other=0)
    d = tl.multiple_of(v * VEC, VEC)  # row starts of whole vectors: 16-byte aligned
    tl.store(dst + d[:, None] + j[None, :], val, mask=live[:, None])


@triton.jit
def _scatter(src, dst, rows, width, src_pitch, dst_pitch, group_rows, src_group_rows, pid,
             BLOCK: tl.constexpr, COLS: tl.constexpr):  # fmt: skip
    # A [BLOCK // COLS, COLS] tile of destination rows: the row mapping (two divisions) once per
    # row, then one element per lane along the row, so a warp's loads and stores are 32
    # consecutive elements of one row on both sides (the destination rows are not aligned, so
    # wider accesses would split anyway). H200 run I3: the earlier vector-per-lane scatter, whose
    # lanes' scalar stores lay 16 bytes apart, moved 0.35 elements per ns; the gather 2.1.
    BR: tl.constexpr = BLOCK // COLS
    chunks = tl.cdiv(dst_pitch, COLS)
    rb = pid // chunks
    c = (pid - rb * chunks) * COLS + tl.arange(0, COLS)
    r = rb * BR + tl.arange(0, BR)
    g = r // group_rows
    src_row = g * src_group_rows + (r - g * group_rows)
    live = (r < rows)[:, None] & (c < dst_pitch)[None, :]
    val = tl.load(src + (src_row * src_pitch)[:, None] + c[None, :], mask=live & (c < width)[None, :], other=0)
    tl.store(dst + (r * dst_pitch)[:, None] + c[None, :], val, mask=live)


@triton.jit
def _copy(src, dst, rows, width, src_pitch, dst_pitch, group_rows, src_group_rows, scatter, pid,
          BLOCK: tl.constexpr, VEC: tl.constexpr, COLS: tl.constexpr):  # fmt: skip
    if scatter != 0:
        _scatter(src, dst, rows, width, src_pitch, dst_pitch, group_rows, src_group_rows, pid, BLOCK, COLS)
    else:
        _gather(src, dst, rows, width, src_pitch, dst_pitch, group_rows, src_group_rows, pid, BLOCK, VEC)


@triton.jit
def pad_rows(src0, dst0, src1, dst1,
             rows0, width0, src_pitch0, dst_pitch0, group_rows0, src_group_rows0, scatter0,
             rows1, width1, src_pitch1, dst_pitch1, group_rows1, src_group_rows1, scatter1,
             split, BLOCK: tl.constexpr, VEC: tl.constexpr, COLS: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    if pid < split:
        _copy(src0, dst0, rows0, width0, src_pitch0, dst_pitch0, group_rows0, src_group_rows0, scatter0, pid, BLOCK, VEC, COLS)
    else:
        _copy(src1, dst1, rows1, width1, src_pitch1, dst_pitch1, group_rows1, src_group_rows1, scatter1, pid - split,
              BLOCK, VEC, COLS)  # fmt: skip


def constexprs(spec) -> dict:
    from skwgrad.abi.padding import PAD_SCATTER_COLS, vector_width

    return {"BLOCK": spec.block, "VEC": vector_width(spec.dtype), "COLS": PAD_SCATTER_COLS}
