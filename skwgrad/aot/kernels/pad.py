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
* scatter (``scatter == 1``, the padded dW back out: ``src_pitch % VEC == 0``): one vector of a
  source row per lane, loaded whole (skipped for the padded rows of each group); its elements
  below ``width`` are stored one by one into the caller's rows (dense, unaligned). Every
  destination element is some source element's image, written once.

Consecutive lanes take consecutive vectors, so both sides coalesce whatever the row width: the
3-channel stem (one vector per row) and a 1036-channel row (130 vectors) alike. One CTA covers
BLOCK elements (BLOCK // VEC vectors) of the side it walks."""

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
             BLOCK: tl.constexpr, VEC: tl.constexpr):  # fmt: skip
    BV: tl.constexpr = BLOCK // VEC
    per_row = (src_pitch // VEC).to(tl.uint32)  # vectors per source row (src_pitch % VEC == 0)
    src_rows = (rows // group_rows) * src_group_rows
    v = pid * BV + tl.arange(0, BV)  # source vectors
    r = v.to(tl.uint32) // per_row
    g = r // src_group_rows.to(tl.uint32)
    r = r.to(tl.int32)
    g = g.to(tl.int32)
    c0 = (v - r * per_row.to(tl.int32)) * VEC
    k = r - g * src_group_rows  # row within its group; rows past group_rows are padding
    keep = (v < src_rows * per_row.to(tl.int32)) & (k < group_rows)
    j = tl.arange(0, VEC)
    s = tl.multiple_of(v * VEC, VEC)
    val = tl.load(src + s[:, None] + j[None, :], mask=keep[:, None])
    # One store per column of the vectors, each a 1-D store over the vectors: a 2-D store at the
    # unaligned destination would get a scalar layout in which the row arithmetic is redone per
    # element; split hands each lane its own vector's elements without moving data.
    out = dst + (g * group_rows + k) * dst_pitch + c0
    _store_columns(out, val, keep, width - c0, 0, VEC)


@triton.jit
def _store_columns(out, val, keep, room, j0: tl.constexpr, n: tl.constexpr):
    """Store column ``i`` of ``val`` ([vectors, n]) at ``out + j0 + i`` where ``j0 + i < room``."""
    if n == 1:
        tl.store(out + j0, tl.reshape(val, (val.shape[0],)), mask=keep & (j0 < room))
    else:
        lo, hi = tl.split(tl.permute(tl.reshape(val, (val.shape[0], 2, n // 2)), (0, 2, 1)))
        _store_columns(out, lo, keep, room, j0, n // 2)
        _store_columns(out, hi, keep, room, j0 + n // 2, n // 2)


@triton.jit
def _copy(src, dst, rows, width, src_pitch, dst_pitch, group_rows, src_group_rows, scatter, pid,
          BLOCK: tl.constexpr, VEC: tl.constexpr):  # fmt: skip
    if scatter != 0:
        _scatter(src, dst, rows, width, src_pitch, dst_pitch, group_rows, src_group_rows, pid, BLOCK, VEC)
    else:
        _gather(src, dst, rows, width, src_pitch, dst_pitch, group_rows, src_group_rows, pid, BLOCK, VEC)


@triton.jit
def pad_rows(src0, dst0, src1, dst1,
             rows0, width0, src_pitch0, dst_pitch0, group_rows0, src_group_rows0, scatter0,
             rows1, width1, src_pitch1, dst_pitch1, group_rows1, src_group_rows1, scatter1,
             split, BLOCK: tl.constexpr, VEC: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    if pid < split:
        _copy(src0, dst0, rows0, width0, src_pitch0, dst_pitch0, group_rows0, src_group_rows0, scatter0, pid, BLOCK, VEC)
    else:
        _copy(src1, dst1, rows1, width1, src_pitch1, dst_pitch1, group_rows1, src_group_rows1, scatter1, pid - split,
              BLOCK, VEC)  # fmt: skip


def constexprs(spec) -> dict:
    from skwgrad.abi.padding import vector_width

    return {"BLOCK": spec.block, "VEC": vector_width(spec.dtype)}
