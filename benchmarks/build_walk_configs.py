"""Add trial row-walk depthwise configurations (``dwconv_walk``) to a cache, so
``gpu_dwconv_walk_ab.py`` times them beside auto's launch (CPU; after ``skwgrad compile-all``).

    python benchmarks/build_walk_configs.py --cache C --corpus SHAPES.csv --config 7:32x4x1:v1 --config 5:32x4x2:v1

A configuration is ``KS:BCxBPxBW:vVEC``: for every 2-D depthwise row with a KS x KS filter at stride and
dilation 1 whose channels VEC divides, the walk kernel with BC channels and BP strips of BW output
columns per CTA (4 warps: BC * BP = 128 * VEC keeps one channel vector a thread), in the row's dtypes
and the epilogue its dW takes (workspace for a 16-bit dW, atomic for fp32). Why: the default builds
only the 3x3 kernel (4 channels a thread); 5x5 and 7x7 hold 25 and 49 accumulators a channel, so
fewer channels a thread (sm_90 bf16, session 28: 7x7 at one channel 255 registers and no local
memory, 5x5 at one channel and strips of 2 166, at two channels 202-223).
"""

from __future__ import annotations

from build_dw_configs import build_trials


def config_spec(cfg: str, p, variant: str):
    """The ``KernelSpec`` of configuration ``cfg`` for problem ``p``, or None where it does not apply."""
    from skwgrad.abi.spec import KernelSpec

    ks, shape, vec = cfg.split(":")
    ks, vec = int(ks), int(vec[1:])
    bc, bp, bw = (int(v) for v in shape.split("x"))
    if p.spatial_dims != 2 or (p.y, p.x) != (ks, ks) or p.stride[1:] != (1, 1) or p.dilation[1:] != (1, 1) or p.g % vec:
        return None
    return KernelSpec("dwconv_walk", variant, p.dtype, p.dw_dtype, vec_c=vec, vec_k=vec, bm=bc, bn=ks, bk=bp, block=bw,
                      num_warps=4, num_stages=3, precision="ieee" if p.dtype == "fp32" else "")  # fmt: skip


if __name__ == "__main__":  # the build's worker processes re-import this file
    build_trials(config_spec, __doc__.splitlines()[0])
