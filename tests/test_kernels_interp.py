"""Numerics of the wgrad kernels through the Triton interpreter (CPU), against float64.

Only reductions where no CTA waits on another can run here (the interpreter runs CTAs one after
another): split-K direct/atomic/two-stage/workspace and stream-K atomic/workspace in both launch
modes. dW and the scratch arena start poisoned (NaN), the zeroed arena zero (as the launcher keeps
it); a workspace replica must be zero again after Stage-2.
bf16 is left to the GPU checks: the interpreter's bf16 loads are not faithful (seen with Triton
3.9: a bf16 direct wgrad came back with values off by 1e10 while fp16/fp32 matched).
"""

import pytest
from _interp import run_interpreter  # noqa: E402



def spec(family, variant, dtype="fp16", dw=None, *, vec=8, bm=16, bn=32, bk=16, mode="", pw=False, sd=2):
    prec = "ieee" if dtype == "fp32" else ""
    return dict(family=family, variant=variant, dtype=dtype, dw_dtype=dw or dtype, vec_c=vec, vec_k=vec,
                bm=bm, bn=bn, bk=bk, num_warps=4, num_stages=2, mode=mode, precision=prec,
                pointwise=pw, spatial_dims=sd)  # fmt: skip


SHAPES = {
    "dense": "n=2,c=16,k=24,h=9,w=9,y=3,x=3,padding=1",  # K=24: partial last M tile with BM=16
    "strided": "n=2,c=8,k=16,h=11,w=10,y=3,x=3,stride=2,padding=1",
    "dilated": "n=2,c=8,k=16,h=10,w=10,y=3,x=3,padding=2,dilation=2",
    "grouped": "n=2,c=16,k=32,g=2,h=7,w=7,y=3,x=3,padding=1",
    "asym_pad": "n=2,c=8,k=16,h=8,w=9,y=2,x=3,pad_lo=0x1,pad_hi=1x0",
    "pointwise": "n=2,c=16,k=16,h=6,w=6,y=1,x=1",
    "depthwise": "n=2,c=4,k=4,g=4,h=6,w=6,y=3,x=3,padding=1",
    "3d": "n=1,c=8,k=16,d=4,h=5,w=5,z=3,y=3,x=3,padding=1",
    # images smaller than one BK slice: the incremental row walk carries into n (and d) every step
    "tiny_images": "n=7,c=8,k=16,h=3,w=2,y=2,x=2,padding=1",
    "tiny_3d": "n=5,c=8,k=8,d=2,h=2,w=3,z=2,y=2,x=2,padding=1,stride=2",
}


def cases():
    out = []

    def add(name, shape, sp, **launch):
        out.append(dict(id=name, problem=SHAPES[shape] + f",dtype={sp['dtype']}" + (f",dw_dtype={sp['dw_dtype']}" if sp["dw_dtype"] != sp["dtype"] else ""), spec=sp, **launch))

    add("splitk_direct_dense", "dense", spec("wgrad", "direct"), ks_count=1)
    add("splitk_two_stage_strided", "strided", spec("wgrad", "two_stage"), ks_count=4)
    add("splitk_two_stage_fp32_dilated", "dilated", spec("wgrad", "two_stage", "fp32", vec=4), ks_count=4)
    add("splitk_atomic_grouped", "grouped", spec("wgrad", "atomic", "fp16", "fp32"), ks_count=2)
    add("splitk_direct_asym_pad", "asym_pad", spec("wgrad", "direct"), ks_count=1)
    add("splitk_direct_pointwise", "pointwise", spec("wgrad", "direct", pw=True), ks_count=1)
    add("splitk_two_stage_depthwise", "depthwise", spec("wgrad", "two_stage", vec=1, bm=16, bn=16, bk=32), ks_count=2)
    add("splitk_direct_3d", "3d", spec("wgrad", "direct", sd=3), ks_count=1)
    # workspace: every split adds into one f32 replica in the zeroed arena; Stage-2 casts and resets it
    add("splitk_workspace_dense", "dense", spec("wgrad", "workspace"), ks_count=4)
    add("splitk_workspace_dense_every_iteration", "dense", spec("wgrad", "workspace"), ks_count=11)  # one iteration a split
    add("splitk_workspace_one_split", "strided", spec("wgrad", "workspace"), ks_count=1)
    add("splitk_workspace_fp32_3d", "3d", spec("wgrad", "workspace", "fp32", vec=4, sd=3), ks_count=3)
    add("splitk_workspace_pointwise", "pointwise", spec("wgrad", "workspace", pw=True), ks_count=2)
    for mode in ("dp_sk", "persistent"):
        # pool 4 on 4 tiles x 11 iterations: all-DP; pool 3: one DP wave + SK; pool 7: SK over every tile
        add(f"sk_{mode}_workspace_dense_mix", "dense", spec("wgrad_sk", "workspace", mode=mode), pool=3)
        add(f"sk_{mode}_atomic_dense", "dense", spec("wgrad_sk", "atomic", "fp16", "fp32", mode=mode), pool=7)
        add(f"sk_{mode}_workspace_grouped", "grouped", spec("wgrad_sk", "workspace", mode=mode), pool=5)
        add(f"sk_{mode}_atomic_3d", "3d", spec("wgrad_sk", "atomic", "fp32", "fp32", vec=4, sd=3, mode=mode), pool=6)
        add(f"sk_{mode}_workspace_alldp", "dense", spec("wgrad_sk", "workspace", mode=mode), pool=2)
    add("sk_dp_sk_workspace_depthwise", "depthwise", spec("wgrad_sk", "workspace", vec=1, bm=16, bn=16, bk=32, mode="dp_sk"), pool=3)
    add("splitk_two_stage_tiny_images", "tiny_images", spec("wgrad", "two_stage"), ks_count=3)
    add("sk_persistent_workspace_tiny_3d", "tiny_3d", spec("wgrad_sk", "workspace", sd=3, mode="persistent"), pool=3)
    add("sk_persistent_atomic_strided", "strided", spec("wgrad_sk", "atomic", "fp16", "fp32", mode="persistent"), pool=4)
    return out


@pytest.fixture(scope="module")
def results():
    todo = cases()
    return run_interpreter(todo, timeout=900)


@pytest.mark.parametrize("case", [c["id"] for c in cases()])
def test_interpreter_numerics(results, case):
    r = results[case]
    assert r["rel_err"] <= r["tol"], r
    assert r["zeroed_left_nonzero"] == 0, r  # Stage-2 reset the (split-K or stream-K) workspace replica


def test_partitions_cover_what_they_claim(results):
    # The cases above must really exercise a DP+SK mix, pure SK and all-DP partitions.
    assert results["sk_dp_sk_workspace_dense_mix"]["sk_ctas"] > 0 and results["sk_dp_sk_workspace_dense_mix"]["dp_tiles"] > 0
    assert results["sk_dp_sk_atomic_dense"]["sk_ctas"] > 0 and results["sk_dp_sk_atomic_dense"]["dp_tiles"] == 0
    assert results["sk_dp_sk_workspace_alldp"]["sk_ctas"] == 0
    assert results["splitk_two_stage_strided"]["ks_count"] == 4
    # the workspace cases ran the split counts they name, through a replica in the zeroed arena
    ws = {c["id"]: c for c in cases() if c["spec"]["variant"] == "workspace" and c["spec"]["family"] == "wgrad"}
    assert {results[i]["ks_count"] for i in ws} == {1, 2, 3, 4, 11}
    assert all(results[i]["zeroed_bytes"] >= 4 * results[i]["dw_numel"] for i in ws)
