"""The channel-padding copy (``skwgrad.abi.padding``): ``dst[r, c] = src[row(r) * src_pitch + c]``
for ``c < width`` and 0 for ``width <= c < dst_pitch``, over ``rows`` destination rows, where
``row(r) = (r // group_rows) * src_group_rows + r % group_rows`` (dW of several groups keeps K of
each group's K_pad rows). Every destination element is written, so the destination needs no
memset. One CTA covers BLOCK consecutive destination elements; the source reads of a warp are
consecutive too (rows follow each other in memory), so both sides coalesce."""

import triton
import triton.language as tl


@triton.jit
def pad_rows(src, dst, rows, width, src_pitch, dst_pitch, group_rows, src_group_rows, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < rows * dst_pitch
    r = offs // dst_pitch
    c = offs - r * dst_pitch
    g = r // group_rows
    src_row = g * src_group_rows + (r - g * group_rows)
    v = tl.load(src + src_row * src_pitch + c, mask=mask & (c < width), other=0)
    tl.store(dst + offs, v, mask=mask)


def constexprs(spec) -> dict:
    return {"BLOCK": spec.block}
