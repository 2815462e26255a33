"""Stage-2 reduce: sum the f32 replicas of dW in replica order, cast to the dW dtype.

Serves the two-stage split-K epilogue (one replica per split) and the workspace split-K epilogue
and stream-K reduction (one replica). The order is fixed, so two-stage split-K is deterministic.

``reset`` != 0 stores zeros back into the replicas it read: the workspace replica (split-K or
stream-K) is accumulated with atomics and so must start at zero; resetting it here keeps it zero at rest
and saves a memset per launch (which also keeps the launch graph-replayable). Two-stage
split-K replicas are stored whole by every split and need no reset.


On an arch with ``dependent_launch`` the launcher starts it while the main kernel before it
finishes (a programmatic dependent launch, as the atomic launches after the dW memset), so its
first act is to wait for that kernel (``griddepcontrol.wait``): everything it reads, that kernel
wrote.

Each step loads UNROLL replicas (``abi.spec.STAGE2_UNROLL``) before adding them, so their
latencies overlap; the adds keep replica order (replicas past the last add 0.0).
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from skwgrad.abi.spec import STAGE2_UNROLL


@triton.jit
def stage2_reduce(ws_ptr, dw, numel, replicas, reset, BLOCK: tl.constexpr, UNROLL: tl.constexpr, GDC_WAIT: tl.constexpr):
    if GDC_WAIT:
        gdc_wait()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for r0 in range(0, replicas, UNROLL):
        vals = ()
        for u in tl.static_range(UNROLL):
            m = mask & (tl.full([BLOCK], r0 + u, tl.int32) < replicas)  # replicas past the last: none
            vals = vals + (tl.load(ws_ptr + (r0 + u) * numel + offs, mask=m, other=0.0),)
        for u in tl.static_range(UNROLL):
            acc += vals[u]
        if reset != 0:
            for u in tl.static_range(UNROLL):
                m = mask & (tl.full([BLOCK], r0 + u, tl.int32) < replicas)
                tl.store(ws_ptr + (r0 + u) * numel + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=m)
    tl.store(dw + offs, acc.to(dw.dtype.element_ty), mask=mask)


def constexprs(spec, target) -> dict:
    return {"BLOCK": spec.block, "UNROLL": STAGE2_UNROLL, "GDC_WAIT": target.dependent_launch}
