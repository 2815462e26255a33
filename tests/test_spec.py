"""KernelSpec: what a compile-time spec may be, its readable label, and which launch shapes a
built kernel admits (check_problem)."""

from __future__ import annotations

import itertools
import json

import pytest

from skwgrad.abi.conv import ConvProblem
from skwgrad.abi.kernargs import declaration
from skwgrad.abi.spec import KernelSpec
from skwgrad.errors import AbiError

SK = dict(family="wgrad_sk", variant="linear", dtype="bf16", dw_dtype="bf16", vec_c=8, vec_k=8,
          bm=128, bn=128, bk=64, num_warps=8, num_stages=2, mode="dp_sk")  # fmt: skip
SPLITK = {**SK, "family": "wgrad", "variant": "two_stage", "mode": ""}


def spec(**kw):
    return KernelSpec(**{**SK, **kw})


# ---------------------------------------------------------------------------------------------
# Labels
# ---------------------------------------------------------------------------------------------
def test_label_spec_example():
    assert spec().label == "wgrad_sk_bf16_2d_v8v8_128x128x64_w8s2_dpsk_linear"


@pytest.mark.parametrize(
    "kw, label",
    [
        (dict(mode="persistent", variant="tree"), "wgrad_sk_bf16_2d_v8v8_128x128x64_w8s2_persistent_tree"),
        (dict(variant="atomic", dw_dtype="fp32"), "wgrad_sk_bf16_dwfp32_2d_v8v8_128x128x64_w8s2_dpsk_atomic"),
        (dict(spatial_dims=3, vec_c=1, vec_k=4), "wgrad_sk_bf16_3d_v1v4_128x128x64_w8s2_dpsk_linear"),
        (dict(pointwise=True, bm=64, bn=32, bk=16, num_warps=4, num_stages=3),
         "wgrad_sk_bf16_2dpw_v8v8_64x32x16_w4s3_dpsk_linear"),
        (dict(dtype="fp32", dw_dtype="fp32", vec_c=4, vec_k=4, precision="tf32", variant="workspace"),
         "wgrad_sk_fp32tf32_2d_v4v4_128x128x64_w8s2_dpsk_workspace"),
    ],
)  # fmt: skip
def test_label_format(kw, label):
    assert spec(**kw).label == label


@pytest.mark.parametrize("variant", ["direct", "atomic", "two_stage", "workspace"])
def test_splitk_labels_carry_no_streamk_fields(variant):
    s = KernelSpec(**{**SPLITK, "variant": variant, "dw_dtype": "fp32" if variant == "atomic" else "bf16"})
    dw = "_dwfp32" if variant == "atomic" else ""
    assert s.label == f"wgrad_bf16{dw}_2d_v8v8_128x128x64_w8s2_{variant}"
    stem = s.label.removesuffix(f"_{variant}")  # ("workspace" itself spells "ks")
    assert not any(m in stem for m in ("dpsk", "persistent", "linear", "tree", "pool", "ks"))


@pytest.mark.parametrize("dtype, dw, prec, vec", [("bf16", "bf16", "", 8), ("fp16", "fp16", "", 8), ("bf16", "fp32", "", 8),
                                               ("fp32", "fp32", "ieee", 4), ("fp32", "fp32", "tf32", 4)])  # fmt: skip
def test_splitk_and_grouped_workspace_accept_16bit_and_fp32(dtype, dw, prec, vec):
    # the split-K workspace epilogue: any dW dtype the family takes (its replica is f32 whatever dW is)
    base = dict(dtype=dtype, dw_dtype=dw, precision=prec, vec_c=vec, vec_k=vec, mode="")
    s = KernelSpec(**{**SPLITK, **base, "variant": "workspace"})
    g = KernelSpec(**{**SPLITK, **base, "family": "grouped", "variant": "workspace", "block": 4, "bm": 64, "bn": 64})
    dt = dtype + prec + (f"_dw{dw}" if dw != dtype else "")
    assert s.label == f"wgrad_{dt}_2d_v{vec}v{vec}_128x128x64_w8s2_workspace"
    assert g.label == f"grouped_{dt}_2d_v{vec}v{vec}_g4_64x64x64_w8s2_workspace"
    assert s.label != KernelSpec(**{**SK, **base, "mode": "dp_sk", "variant": "workspace"}).label  # not the stream-K kernel's
    assert s.kernarg_decl == declaration("wgrad", "workspace") and g.kernarg_decl == declaration("grouped", "workspace")
    s.check_problem(ConvProblem(n=2, c=16, k=16, hi=8, wi=8, y=3, x=3, pad_lo=(0, 1, 1), pad_hi=(0, 1, 1), dtype=dtype,
                                dw_dtype=dw, precision=prec))  # fmt: skip


def test_stage2_label():
    assert KernelSpec("stage2", "reduce", "fp16", "fp16", block=1024).label == "stage2_fp16_b1024_w4"
    assert KernelSpec("stage2", "reduce", "fp32", "fp32", block=256, num_warps=8).label == "stage2_fp32_b256_w8"


def _valid_specs():
    for family, variant in [("wgrad", v) for v in ("direct", "atomic", "two_stage", "workspace")] + [
        ("wgrad_sk", v) for v in ("linear", "tree", "atomic", "workspace")
    ]:
        modes = ("dp_sk", "persistent") if family == "wgrad_sk" else ("",)
        for dtype, dw, mode, dims, pw, vc, vk, tile, w, s in itertools.product(
            ("bf16", "fp32"), ("same", "fp32"), modes, (2, 3), (False, True), (1, 4), (1, 4),
            ((64, 64, 32), (128, 64, 32)), (4, 8), (2, 3),
        ):  # fmt: skip
            dw_dtype = dtype if dw == "same" else "fp32"
            if variant == "atomic" and dw_dtype != "fp32":
                continue
            for prec in ("ieee", "tf32") if dtype == "fp32" else ("",):
                yield KernelSpec(
                    family, variant, dtype, dw_dtype, spatial_dims=dims, pointwise=pw, vec_c=vc, vec_k=vk,
                    bm=tile[0], bn=tile[1], bk=tile[2], num_warps=w, num_stages=s, mode=mode, precision=prec,
                )  # fmt: skip
    for dt in ("fp16", "bf16", "fp32"):
        for block in (256, 1024):
            for w in (4, 8):
                yield KernelSpec("stage2", "reduce", dt, dt, block=block, num_warps=w)


def test_labels_are_unique_and_name_no_launch_values():
    specs = list(dict.fromkeys(_valid_specs()))
    labels = [s.label for s in specs]
    assert len(specs) > 1000
    assert len(set(labels)) == len(labels), "two different specs share a label"
    jsons = {s.canonical_json() for s in specs}
    assert len(jsons) == len(specs)


def test_canonical_json_round_trip():
    s = spec(variant="tree", mode="persistent", spatial_dims=3)
    d = json.loads(s.canonical_json())
    assert KernelSpec.from_dict(d) == s
    assert s.canonical_json() == json.dumps(d, sort_keys=True, separators=(",", ":"))
    assert list(d) == sorted(d)
    with pytest.raises(AbiError, match="kernel spec has unknown field"):
        KernelSpec.from_dict({**d, "pool": 304})
    with pytest.raises(AbiError, match=r"unknown field\(s\) ks_count, pool"):
        KernelSpec.from_dict({**d, "pool": 304, "ks_count": 2})


def test_kernarg_decl():
    assert spec().kernarg_decl == declaration("wgrad_sk", "linear")
    assert KernelSpec(**SPLITK).kernarg_decl == declaration("wgrad", "two_stage")


# ---------------------------------------------------------------------------------------------
# validate() refusals
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(family="conv"), "kernel family 'conv' is not one of"),
        (dict(variant="two_stage"), "stream-K reduction 'two_stage' is not one of"),
        (dict(family="wgrad", variant="linear", mode=""), "wgrad epilogue 'linear' is not one of"),
        (dict(dtype="fp64"), "dtypes must be among fp16, bf16, fp32"),
        (dict(dw_dtype="int8"), "dtypes must be among"),
        (dict(dtype="bf16", dw_dtype="fp16"), "dW is the input dtype or fp32"),
        (dict(spatial_dims=1), "spatial_dims is 2 or 3"),
        (dict(variant="atomic"), "the atomic reduction accumulates into dW, which must be fp32"),
        (dict(family="wgrad", variant="atomic", mode=""), "atomic reduction accumulates into dW, which must be fp32"),
        (dict(bm=8), "bm must be a power of two >= 16"),
        (dict(bn=96), "bn must be a power of two >= 16"),
        (dict(bk=0), "bk must be a power of two >= 16"),
        (dict(vec_c=16), r"vec_c must be a power of two <= 8 \(16-byte loads\)"),
        (dict(vec_k=3), "vec_k must be a power of two <= 8"),
        (dict(vec_c=0), "vec_c must be a power of two"),
        (dict(dtype="fp32", dw_dtype="fp32", precision="ieee", vec_c=8), "vec_c must be a power of two <= 4"),
        (dict(num_warps=3), "num_warps is 1, 2, 4, 8 or 16"),
        (dict(num_warps=32), "num_warps is 1, 2, 4, 8 or 16"),
        (dict(num_stages=0), "num_stages >= 1"),
        (dict(mode=""), "stream-K mode must be one of dp_sk, persistent"),
        (dict(mode="stream"), "stream-K mode must be one of dp_sk, persistent"),
        (dict(family="wgrad", variant="two_stage", mode="dp_sk"), "only wgrad_sk kernels have a stream-K mode"),
        (dict(dtype="fp32", dw_dtype="fp32", vec_c=4, vec_k=4), r"fp32 input needs a precision \(ieee or tf32\)"),
        (dict(precision="tf32"), "fp32 input needs a precision .*other dtypes none"),
        (dict(dtype="fp32", dw_dtype="fp32", vec_c=4, vec_k=4, precision="fp64"), "precision must be one of ieee, tf32"),
        (dict(block=1024), "only stage2 kernels have a block size"),
    ],
)
def test_validate_refusals(kw, match):
    with pytest.raises(AbiError, match=match):
        spec(**kw)


def test_validate_message_names_the_spec():
    with pytest.raises(AbiError, match=r"^invalid kernel spec \(wgrad_sk_bf16_2d_v8v8_128x128x48_w8s2_dpsk_linear\): bk"):
        spec(bk=48)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(dtype="bf16", dw_dtype="fp32"), "stage2 has one dtype: the element dtype"),
        (dict(block=0), "stage2 block must be a power of two"),
        (dict(block=1000), "stage2 block must be a power of two"),
        (dict(num_warps=5), "num_warps is 1, 2, 4, 8 or 16"),
        (dict(bm=128), "stage2 takes only a dtype, block and num_warps; bm must keep the default"),
        (dict(mode="dp_sk", num_stages=3), "num_stages, mode must keep the default"),
        (dict(variant="sum"), "stage2 variant 'sum' is not 'reduce'"),
    ],
)
def test_stage2_refusals(kw, match):
    with pytest.raises(AbiError, match=match):
        KernelSpec(**{**dict(family="stage2", variant="reduce", dtype="fp32", dw_dtype="fp32", block=1024), **kw})


@pytest.mark.parametrize(
    "kw",
    [
        dict(), dict(variant="atomic", dw_dtype="fp32"), dict(dtype="fp16", dw_dtype="fp32"),
        dict(dtype="fp32", dw_dtype="fp32", vec_c=4, vec_k=1, precision="ieee"),
        dict(bm=16, bn=16, bk=16, num_warps=1, num_stages=1), dict(spatial_dims=3, pointwise=True),
        dict(family="wgrad", variant="direct", mode=""),
    ],
)  # fmt: skip
def test_valid_specs_accepted(kw):
    s = spec(**kw)
    assert s.label.startswith(s.family)


# ---------------------------------------------------------------------------------------------
# check_problem
# ---------------------------------------------------------------------------------------------
def problem(**kw):
    base = dict(n=2, c=64, k=64, hi=8, wi=8, y=3, x=3, pad_lo=(0, 1, 1), pad_hi=(0, 1, 1))
    return ConvProblem(**{**base, **kw})


def test_check_problem_accepts():
    spec().check_problem(problem())
    spec(vec_c=1, vec_k=1).check_problem(problem(c=3, k=5))
    spec(spatial_dims=3).check_problem(problem(di=4, z=3, pad_lo=(1, 1, 1), pad_hi=(1, 1, 1), spatial_dims=3))
    spec(pointwise=True).check_problem(problem(y=1, x=1, pad_lo=(0, 0, 0), pad_hi=(0, 0, 0)))
    spec().check_problem(problem(y=1, x=1, pad_lo=(0, 0, 0), pad_hi=(0, 0, 0)))  # general kernel, 1x1 problem
    spec(variant="atomic", dw_dtype="fp32").check_problem(problem(dw_dtype="fp32"))


@pytest.mark.parametrize(
    "s, p, match",
    [
        (dict(), dict(dtype="fp16"), "is built for bf16 input / bf16 dW; the problem has fp16 / fp16"),
        (dict(), dict(dw_dtype="fp32"), "is built for bf16 input / bf16 dW; the problem has bf16 / fp32"),
        (dict(dw_dtype="fp32", variant="workspace"), dict(), "bf16 input / fp32 dW; the problem has bf16 / bf16"),
        (dict(), dict(spatial_dims=3, di=2, z=1), "is a 2-D kernel; the problem is 3-D"),
        (dict(spatial_dims=3), dict(), "is a 3-D kernel; the problem is 2-D"),
        (dict(pointwise=True), dict(), r"addresses x as a plain matrix \(1x1, stride 1, no padding\); the problem has a 1x3x3 filter"),
        (dict(pointwise=True), dict(y=1, x=1, pad_lo=(0, 0, 0), pad_hi=(0, 0, 0), stride=(1, 2, 2)), "plain matrix"),
        (dict(pointwise=True), dict(y=1, x=1, pad_lo=(0, 0, 0), pad_hi=(0, 0, 1)), "plain matrix"),
        (dict(vec_c=8), dict(c=12), "loads x and stores dW 8 channels at a time; C per group = 12 is not a multiple of 8"),
        (dict(vec_k=4), dict(k=6), "loads dy 4 channels at a time; K per group = 6 is not a multiple of 4"),
        (dict(vec_c=2, vec_k=1), dict(c=1, k=1, g=64), "C per group = 1 is not a multiple of 2")  # depthwise,
    ],
)  # fmt: skip
def test_check_problem_refusals(s, p, match):
    with pytest.raises(AbiError, match=match):
        spec(**s).check_problem(problem(**p))


def test_check_problem_groups_are_per_group_channels():
    # ConvProblem's c/k are per group: the vector width applies to them, not to the totals
    spec(vec_c=8, vec_k=8).check_problem(problem(c=8, k=8, g=8))
    with pytest.raises(AbiError, match="C per group = 4"):
        spec(vec_c=8, vec_k=4).check_problem(problem(c=4, k=8, g=16))


def test_stage2_check_problem():
    s2 = KernelSpec("stage2", "reduce", "fp32", "fp32", block=1024)
    s2.check_problem(problem(dw_dtype="fp32"))
    s2.check_problem(problem(dtype="fp16", dw_dtype="fp32", c=8, k=8))
    with pytest.raises(AbiError, match="reduces into fp32; the problem's dW is bf16"):
        s2.check_problem(problem())
