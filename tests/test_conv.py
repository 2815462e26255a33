"""ConvProblem: output sizes, GEMM view, tiling, constructors, the --problem syntax, the corpus
and every refusal in skwgrad/abi/conv.py (SPEC section 1).

Expected values are derived independently: output sizes by counting the filter placements that
fit the padded input, tile counts by enumerating the tiles, element counts from the shapes.
"""

from __future__ import annotations

import csv
import itertools
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skwgrad.abi.conv import MAX_ELEMENTS, MAX_EXTENT, ConvProblem, parse_problem, problem_from_fields, read_corpus
from skwgrad.errors import ProblemError

HERE = Path(__file__).resolve().parent
CORPUS_COPY = HERE / "data" / "wgrad_shapes.csv"
# CI runs from a fresh clone with shared/ beside the repository root.
CORPUS_SHARED = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "wgrad_shapes.csv"


def brute_out(size: int, filt: int, stride: int, lo: int, hi: int, dil: int) -> int:
    """Count the output positions: filter placements whose every tap lies in the padded input."""
    padded = size + lo + hi
    count, o = 0, 0
    while o * stride + dil * (filt - 1) <= padded - 1:
        count += 1
        o += 1
    return count


# ---------------------------------------------------------------------------------------------
# Output size
# ---------------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(1, 40),
    filt=st.integers(1, 7),
    stride=st.integers(1, 4),
    lo=st.integers(0, 4),
    hi=st.integers(0, 4),
    dil=st.integers(1, 3),
)
def test_output_size_matches_brute_force_in_every_dim(size, filt, stride, lo, hi, dil):
    expected = brute_out(size, filt, stride, lo, hi, dil)
    kw = dict(n=1, c=1, k=1, spatial_dims=3)
    for axis in range(3):  # put the interesting dim in D, H and W in turn
        sizes = [3, 3, 3]
        filts = [1, 1, 1]
        strides, los, his, dils = [1, 1, 1], [0, 0, 0], [0, 0, 0], [1, 1, 1]
        sizes[axis], filts[axis], strides[axis] = size, filt, stride
        los[axis], his[axis], dils[axis] = lo, hi, dil
        args = dict(
            kw, di=sizes[0], hi=sizes[1], wi=sizes[2], z=filts[0], y=filts[1], x=filts[2],
            stride=tuple(strides), pad_lo=tuple(los), pad_hi=tuple(his), dilation=tuple(dils),
        )  # fmt: skip
        if expected == 0:
            with pytest.raises(ProblemError, match="empty output"):
                ConvProblem(**args)
            continue
        p = ConvProblem(**args)
        out = (p.do, p.ho, p.wo)
        assert out[axis] == expected
        assert [o for i, o in enumerate(out) if i != axis] == [3, 3]


def test_output_size_examples():
    # ResNet-50 conv1: 224, 7x7, stride 2, pad 3 -> 112.
    p = ConvProblem(n=1, c=3, k=64, hi=224, wi=224, y=7, x=7, stride=(1, 2, 2), pad_lo=(0, 3, 3), pad_hi=(0, 3, 3))
    assert (p.do, p.ho, p.wo) == (1, 112, 112)
    # Dilation 2, 3x3, pad 2 keeps the size.
    p = ConvProblem(n=1, c=1, k=1, hi=64, wi=64, y=3, x=3, pad_lo=(0, 2, 2), pad_hi=(0, 2, 2), dilation=(1, 2, 2))
    assert (p.ho, p.wo) == (64, 64)
    # Asymmetric padding: (5 + 0 + 3 - 3) // 1 + 1 = 6 in W, 3 in H.
    p = ConvProblem(n=1, c=1, k=1, hi=5, wi=5, y=3, x=3, pad_lo=(0, 0, 0), pad_hi=(0, 0, 3))
    assert (p.ho, p.wo) == (3, 6)
    # Stride larger than the filter skips input.
    p = ConvProblem(n=1, c=1, k=1, hi=10, wi=10, y=1, x=1, stride=(1, 4, 4))
    assert (p.ho, p.wo) == (3, 3)


def test_left_and_right_padding_are_separate():
    lo_only = ConvProblem(n=1, c=1, k=1, hi=8, wi=8, y=3, x=3, pad_lo=(0, 2, 0), pad_hi=(0, 0, 0))
    hi_only = ConvProblem(n=1, c=1, k=1, hi=8, wi=8, y=3, x=3, pad_lo=(0, 0, 0), pad_hi=(0, 2, 0))
    assert lo_only.ho == hi_only.ho == 8
    assert lo_only.wo == hi_only.wo == 6
    assert lo_only != hi_only  # the pads are part of the problem's identity


def test_output_size_against_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    cases = [
        # (input, kernel, stride, padding, dilation)
        ((9, 13), (3, 2), (2, 3), (1, 0), (1, 2)),
        ((7, 7), (7, 7), (1, 1), (0, 0), (1, 1)),
        ((20, 11), (3, 3), (3, 1), (2, 2), (3, 1)),
        ((5, 6, 7), (3, 1, 2), (2, 1, 3), (1, 0, 1), (1, 1, 2)),
    ]
    for size, ksz, stride, pad, dil in cases:
        sd = len(size)
        p = ConvProblem.from_torch(
            batch=1, in_channels=2, out_channels=3, input_size=size, kernel_size=ksz,
            stride=stride, padding=pad, dilation=dil,
        )  # fmt: skip
        conv = F.conv3d if sd == 3 else F.conv2d
        y = conv(torch.zeros(1, 2, *size), torch.zeros(3, 2, *ksz), stride=stride, padding=pad, dilation=dil)
        expected = tuple(y.shape[2:])
        got = (p.do, p.ho, p.wo) if sd == 3 else (p.ho, p.wo)
        assert got == expected


# ---------------------------------------------------------------------------------------------
# Shapes and the GEMM view
# ---------------------------------------------------------------------------------------------
def test_shapes_2d_and_3d():
    p = ConvProblem(n=2, g=3, c=4, k=5, hi=6, wi=7, y=3, x=1, pad_lo=(0, 1, 0), pad_hi=(0, 1, 0))
    assert p.x_shape == (2, 6, 7, 3, 4)
    assert p.dy_shape == (2, 6, 7, 3, 5)
    assert p.dw_shape == (3, 5, 3, 1, 4)
    q = ConvProblem(n=2, g=3, c=4, k=5, di=4, hi=6, wi=7, z=2, y=3, x=1, spatial_dims=3)
    assert q.x_shape == (2, 4, 6, 7, 3, 4)
    assert q.dy_shape == (2, 3, 4, 7, 3, 5)
    assert q.dw_shape == (3, 5, 2, 3, 1, 4)
    for prob in (p, q):
        assert prob.x_numel == math.prod(prob.x_shape)
        assert prob.dy_numel == math.prod(prob.dy_shape)
        assert prob.dw_numel == math.prod(prob.dw_shape)


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 4), g=st.integers(1, 4), c=st.integers(1, 9), k=st.integers(1, 9),
    d=st.integers(1, 5), h=st.integers(1, 9), w=st.integers(1, 9),
    z=st.integers(1, 3), y=st.integers(1, 3), x=st.integers(1, 3),
)  # fmt: skip
def test_gemm_view(n, g, c, k, d, h, w, z, y, x):
    pad = (z // 2, y // 2, x // 2)
    p = ConvProblem(n=n, g=g, c=c, k=k, di=d, hi=h, wi=w, z=z, y=y, x=x, pad_lo=pad, pad_hi=pad, spatial_dims=3)
    # dW[g] is M x Ng, dy[g]^T is M x Kg.
    assert p.gemm_m == k
    assert p.gemm_n == z * y * x * c
    assert p.gemm_k == n * p.do * p.ho * p.wo
    assert g * p.gemm_m * p.gemm_n == p.dw_numel
    assert g * p.gemm_m * p.gemm_k == p.dy_numel
    assert p.flops == 2 * p.dw_numel * p.gemm_k


@settings(max_examples=300, deadline=None)
@given(
    g=st.integers(1, 5), k=st.integers(1, 70), c=st.integers(1, 40), y=st.integers(1, 3),
    n=st.integers(1, 3), h=st.integers(1, 12),
    bm=st.sampled_from([1, 3, 16, 32]), bn=st.sampled_from([1, 5, 16, 64]), bk=st.sampled_from([1, 7, 16, 64]),
)  # fmt: skip
def test_tiling_counts_by_enumeration(g, k, c, y, n, h, bm, bn, bk):
    p = ConvProblem(n=n, g=g, c=c, k=k, hi=h + y, wi=h + 2 * y, y=y, x=y)
    t = p.tiling(bm, bn, bk)
    # Enumerate the tiles: groups fold into M, each group's rows are cut at BM.
    m_starts = [(gi, m0) for gi in range(g) for m0 in range(0, k, bm)]
    n_starts = list(range(0, p.gemm_n, bn))
    k_starts = list(range(0, p.gemm_k, bk))
    assert t.m_tiles == len(m_starts)
    assert t.m_tiles_per_group == len(m_starts) // g
    assert t.n_tiles == len(n_starts)
    assert t.num_tiles == len(list(itertools.product(m_starts, n_starts)))
    assert t.iters_per_tile == len(k_starts)
    assert t.total_iters == t.num_tiles * len(k_starts)
    # Partial tiles: the last M tile of a group covers k - last_start rows, never 0.
    assert 0 < k - m_starts[-1][1] <= bm
    assert (t.bm, t.bn, t.bk) == (bm, bn, bk)


def test_tiling_partial_tiles_and_groups_example():
    # K = 100 per group, 3 groups, BM 64: 2 M-tiles per group (64 + 36), 6 in all.
    p = ConvProblem(n=2, g=3, c=10, k=100, hi=5, wi=5, y=3, x=3)  # Ng = 90, Kg = 2*3*3 = 18
    t = p.tiling(64, 64, 8)
    assert (t.m_tiles_per_group, t.m_tiles, t.n_tiles, t.num_tiles, t.iters_per_tile) == (2, 6, 2, 12, 3)


@pytest.mark.parametrize("tile", [(0, 16, 16), (16, 0, 16), (16, 16, 0), (-16, 16, 16)])
def test_tiling_refuses_non_positive_tile(tile):
    p = ConvProblem(n=1, c=1, k=1, hi=1, wi=1, y=1, x=1)
    name = "BM BN BK".split()[[i for i, v in enumerate(tile) if v <= 0][0]]
    with pytest.raises(ProblemError, match=f"tile {name} must be positive"):
        p.tiling(*tile)


def test_pointwise_and_depthwise():
    assert ConvProblem(n=1, c=8, k=8, hi=4, wi=4, y=1, x=1).is_pointwise
    assert not ConvProblem(n=1, c=8, k=8, hi=4, wi=4, y=1, x=1, stride=(1, 2, 2)).is_pointwise
    assert not ConvProblem(n=1, c=8, k=8, hi=4, wi=4, y=1, x=1, pad_hi=(0, 0, 1)).is_pointwise
    assert not ConvProblem(n=1, c=8, k=8, hi=4, wi=4, y=3, x=1, pad_lo=(0, 1, 0), pad_hi=(0, 1, 0)).is_pointwise
    assert ConvProblem(n=1, g=8, c=1, k=1, hi=4, wi=4, y=3, x=3).is_depthwise
    assert not ConvProblem(n=1, g=1, c=1, k=1, hi=4, wi=4, y=3, x=3).is_depthwise
    assert not ConvProblem(n=1, g=8, c=2, k=2, hi=4, wi=4, y=3, x=3).is_depthwise


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("channels", [1, 2, 3, 4, 6, 8, 12, 16, 24, 100, 144])
def test_vector_width(dtype, channels):
    p = ConvProblem(n=1, c=1, k=1, hi=1, wi=1, y=1, x=1, dtype=dtype)
    elem = {"fp16": 2, "bf16": 2, "fp32": 4}[dtype]
    # Widest power of two whose vector is at most 16 bytes and divides the channels.
    expected = max(v for v in (1, 2, 4, 8, 16) if v * elem <= 16 and channels % v == 0)
    assert p.vector_width(channels) == expected


# ---------------------------------------------------------------------------------------------
# from_torch
# ---------------------------------------------------------------------------------------------
def test_from_torch_totals_become_per_group():
    p = ConvProblem.from_torch(
        batch=4, in_channels=96, out_channels=64, groups=32, input_size=(14, 15), kernel_size=3,
        stride=2, padding=1, dilation=1, dtype="fp16",
    )  # fmt: skip
    assert (p.n, p.g, p.c, p.k) == (4, 32, 3, 2)
    assert (p.di, p.hi, p.wi, p.z, p.y, p.x) == (1, 14, 15, 1, 3, 3)
    assert p.stride == (1, 2, 2) and p.pad_lo == p.pad_hi == (0, 1, 1) and p.dilation == (1, 1, 1)
    assert p.spatial_dims == 2 and p.dtype == "fp16" and p.dw_dtype == "fp16"


def test_from_torch_3d_and_pairs():
    p = ConvProblem.from_torch(
        batch=1, in_channels=4, out_channels=8, input_size=(5, 6, 7), kernel_size=(1, 3, 2),
        stride=(1, 2, 1), padding=((0, 1), (2, 0), (1, 1)), dilation=(2, 1, 1), dw_dtype="fp32",
    )  # fmt: skip
    assert p.spatial_dims == 3
    assert (p.di, p.hi, p.wi, p.z, p.y, p.x) == (5, 6, 7, 1, 3, 2)
    assert p.pad_lo == (0, 2, 1) and p.pad_hi == (1, 0, 1)
    assert p.dilation == (2, 1, 1) and p.stride == (1, 2, 1)
    assert p.dw_dtype == "fp32" and p.dtype == "bf16"
    q = ConvProblem.from_torch(
        batch=1, in_channels=4, out_channels=8, input_size=(6, 7), kernel_size=3, padding=((1, 2), (0, 3)),
    )  # fmt: skip
    assert q.pad_lo == (0, 1, 0) and q.pad_hi == (0, 2, 3)
    assert q.ho == brute_out(6, 3, 1, 1, 2, 1) and q.wo == brute_out(7, 3, 1, 0, 3, 1)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(input_size=(4,)), "input_size must have 2"),
        (dict(input_size=(4, 4, 4, 4)), "input_size must have 2"),
        (dict(input_size=7), "input_size must have 2"),
        (dict(groups=0), "groups must be a positive integer"),
        (dict(in_channels=0), "in_channels must be a positive integer"),
        (dict(out_channels=-4), "out_channels must be a positive integer"),
        (dict(in_channels=6, groups=4, out_channels=8), r"in_channels=6 is not divisible by groups=4"),
        (dict(in_channels=8, groups=4, out_channels=6), r"out_channels=6 is not divisible by groups=4"),
        (dict(kernel_size=(3, 3, 3)), "kernel_size must be one integer or 2 integers"),
        (dict(stride=(1,)), "stride must be one integer or 2 integers"),
        (dict(dilation=(1, 1.5)), "dilation must be one integer or 2 integers"),
        (dict(padding=(1, 1, 1)), "padding must be one integer or 2 integers"),
        (dict(padding=((1, 1),)), r"padding pairs must be one \(lo, hi\) per spatial dim"),
        (dict(padding=((1, 1, 1), (0, 0))), r"padding pairs must be one \(lo, hi\) per spatial dim"),
        (dict(input_size=(4, 4, 4), kernel_size=(3, 3)), "kernel_size must be one integer or 3 integers .*D first"),
    ],
)
def test_from_torch_refusals(kw, match):
    args = dict(batch=1, in_channels=4, out_channels=4, input_size=(8, 8), kernel_size=3)
    args.update(kw)
    with pytest.raises(ProblemError, match=match):
        ConvProblem.from_torch(**args)


# ---------------------------------------------------------------------------------------------
# ConvProblem refusals
# ---------------------------------------------------------------------------------------------
BASE = dict(n=2, c=4, k=4, hi=8, wi=8, y=3, x=3)


@pytest.mark.parametrize("name", ["n", "g", "c", "k", "di", "hi", "wi", "z", "y", "x"])
@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_refuses_non_positive_sizes(name, bad):
    with pytest.raises(ProblemError, match=f"^{name} must be a positive integer"):
        ConvProblem(**{**BASE, "spatial_dims": 3, name: bad})


@pytest.mark.parametrize("name", ["stride", "pad_lo", "pad_hi", "dilation"])
@pytest.mark.parametrize("bad", [(1, 1), 1, (1, 1, 1.0), (1, True, 1)])
def test_refuses_malformed_triples(name, bad):
    with pytest.raises(ProblemError, match=rf"{name} must be a \(d, h, w\) triple of integers"):
        ConvProblem(**{**BASE, name: bad})


@pytest.mark.parametrize("name", ["stride", "dilation"])
def test_refuses_non_positive_stride_dilation(name):
    with pytest.raises(ProblemError, match=f"{name} must be positive in every dim"):
        ConvProblem(**{**BASE, name: (1, 0, 1)})


@pytest.mark.parametrize("name", ["pad_lo", "pad_hi"])
def test_refuses_negative_padding(name):
    with pytest.raises(ProblemError, match=f"{name} must be >= 0 in every dim"):
        ConvProblem(**{**BASE, name: (0, 0, -1)})


def test_refuses_bad_spatial_dims():
    with pytest.raises(ProblemError, match="spatial_dims must be 2 or 3"):
        ConvProblem(**BASE, spatial_dims=1)


@pytest.mark.parametrize(
    "kw",
    [
        dict(di=2), dict(z=2), dict(stride=(2, 1, 1)), dict(pad_lo=(1, 0, 0)),
        dict(pad_hi=(1, 0, 0)), dict(dilation=(2, 1, 1)),
    ],
)  # fmt: skip
def test_2d_refuses_non_trivial_d_params(kw):
    with pytest.raises(ProblemError, match="a 2-D problem must have di=z=1.*use spatial_dims=3"):
        ConvProblem(**BASE, **kw)
    ConvProblem(**{"di": 3, **BASE, **kw, "spatial_dims": 3})  # the same is fine in 3-D


def test_refuses_channels_not_divisible_by_groups_via_parse():
    with pytest.raises(ProblemError, match="in_channels=10 is not divisible by groups=4"):
        parse_problem("n=1,c=10,k=8,g=4,h=4,w=4,y=1,x=1")
    with pytest.raises(ProblemError, match="out_channels=10 is not divisible by groups=4"):
        parse_problem("n=1,c=8,k=10,g=4,h=4,w=4,y=1,x=1")


@pytest.mark.parametrize(
    "kw, dim",
    [
        (dict(hi=2, y=3), "H"),
        (dict(wi=4, x=3, dilation=(1, 1, 2)), "W"),
        (dict(spatial_dims=3, di=1, z=2), "D"),
    ],
)
def test_refuses_empty_output(kw, dim):
    with pytest.raises(ProblemError, match=f"empty output in {dim}:.*output size must be >= 1"):
        ConvProblem(**{**BASE, **kw})


def test_padding_rescues_small_input():
    p = ConvProblem(**{**BASE, "hi": 2, "y": 3, "pad_lo": (0, 1, 0)})
    assert p.ho == 1


@pytest.mark.parametrize("dtype", ["fp64", "float16", "int8", "BF16"])
def test_refuses_unsupported_dtype(dtype):
    with pytest.raises(ProblemError, match=f"dtype '{dtype}' is not supported; use one of fp16, bf16, fp32"):
        ConvProblem(**BASE, dtype=dtype)


@pytest.mark.parametrize("dtype, dw", [("bf16", "fp16"), ("fp16", "bf16"), ("fp32", "bf16"), ("bf16", "fp64")])
def test_refuses_unsupported_dw_dtype(dtype, dw):
    with pytest.raises(ProblemError, match=f"dw_dtype '{dw}' is not supported with dtype '{dtype}'"):
        ConvProblem(**BASE, dtype=dtype, dw_dtype=dw)


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_accepts_same_or_fp32_dw(dtype):
    assert ConvProblem(**BASE, dtype=dtype).dw_dtype == dtype
    assert ConvProblem(**BASE, dtype=dtype, dw_dtype="fp32").dw_dtype == "fp32"


def test_int32_offset_limit_is_2_to_the_31():
    assert MAX_ELEMENTS == 2**31 - 1
    # x: n * hi * wi * g * c elements; dy and dW of a 1x1 problem are the same size or smaller.
    ok = ConvProblem(n=2**31 - 1, c=1, k=1, hi=1, wi=1, y=1, x=1)
    assert ok.x_numel == 2**31 - 1
    with pytest.raises(ProblemError, match=r"^x has 2147483648 elements; .*32-bit element offsets.*split the batch"):
        ConvProblem(n=2**15, c=2**8, k=1, hi=2**4, wi=2**4, y=1, x=1)


def test_int32_offset_limit_dy_and_dw():
    # dy larger than x: many output channels.
    with pytest.raises(ProblemError, match=r"^dy has 2147483648 elements"):
        ConvProblem(n=2**12, c=1, k=2**19, hi=1, wi=1, y=1, x=1)
    # dW larger than both: huge filter over a padded tiny input.
    with pytest.raises(ProblemError, match=r"^dW has 2147483648 elements"):
        ConvProblem(
            n=1, c=2**10, k=2**11, hi=1, wi=1, y=2**5, x=2**5, pad_lo=(0, 31, 31), pad_hi=(0, 0, 0)
        )  # fmt: skip
    # Just under the limit in dW is accepted.
    p = ConvProblem(n=1, c=2**10, k=2**11 - 1, hi=1, wi=1, y=2**5, x=2**5, pad_lo=(0, 31, 31))
    assert p.dw_numel == 2**31 - 2**20


# ---------------------------------------------------------------------------------------------
# parse_problem
# ---------------------------------------------------------------------------------------------
def test_parse_problem_spec_example():
    p = parse_problem("n=32,c=64,k=64,h=56,w=56,y=3,x=3,stride=1,padding=1")
    assert (p.n, p.g, p.c, p.k, p.hi, p.wi, p.y, p.x) == (32, 1, 64, 64, 56, 56, 3, 3)
    assert p.pad_lo == p.pad_hi == (0, 1, 1)
    assert (p.ho, p.wo) == (56, 56)
    assert p.dtype == "bf16" and p.dw_dtype == "bf16" and p.spatial_dims == 2
    assert p.gemm_k == 32 * 56 * 56 and p.gemm_n == 9 * 64


def test_parse_problem_totals_and_groups():
    p = parse_problem("n=8, c=256, k=128, g=32, h=28, w=28, y=3, x=3, padding=1, dtype=fp16")
    assert (p.g, p.c, p.k, p.dtype) == (32, 8, 4, "fp16")


def test_parse_problem_per_dim_values():
    p = parse_problem("n=1,c=4,k=4,h=10,w=10,y=1,x=7,padding=0x3,stride=1x2,dilation=2x1")
    assert p.pad_lo == p.pad_hi == (0, 0, 3)
    assert p.stride == (1, 1, 2) and p.dilation == (1, 2, 1)
    assert p.ho == brute_out(10, 1, 1, 0, 0, 2) and p.wo == brute_out(10, 7, 2, 3, 3, 1)


def test_parse_problem_3d():
    p = parse_problem("n=2,c=8,k=16,d=8,h=9,w=10,z=3,y=3,x=3,stride=2x1x1,padding=1,dilation=1x2x1")
    assert p.spatial_dims == 3
    assert (p.di, p.hi, p.wi, p.z) == (8, 9, 10, 3)
    assert p.stride == (2, 1, 1) and p.pad_lo == (1, 1, 1) and p.dilation == (1, 2, 1)
    assert (p.do, p.ho, p.wo) == (brute_out(8, 3, 2, 1, 1, 1), brute_out(9, 3, 1, 1, 1, 2), 10)
    # A 3-value list alone makes a problem 3-D, even with D = Z = 1.
    q = parse_problem("n=1,c=1,k=1,h=4,w=4,y=1,x=1,stride=1x1x1")
    assert q.spatial_dims == 3 and q.di == 1 and q.z == 1


def test_parse_problem_pad_lo_pad_hi_and_dw_dtype():
    p = parse_problem("n=1,c=4,k=4,h=8,w=8,y=3,x=3,pad_lo=1x0,pad_hi=0x2,dtype=bf16,dw_dtype=fp32")
    assert p.pad_lo == (0, 1, 0) and p.pad_hi == (0, 0, 2)
    assert p.dw_dtype == "fp32"
    q = parse_problem("n=1,c=4,k=4,h=8,w=8,y=3,x=3,pad_hi=1")
    assert q.pad_lo == (0, 0, 0) and q.pad_hi == (0, 1, 1)


def test_parse_problem_tolerates_spaces_and_empty_fields_but_not_uppercase_keys():
    p = parse_problem(" n=2 , c=4,k=4,,h=5,w=5,y=1,x=1, ")
    assert (p.n, p.c) == (2, 4)
    with pytest.raises(ProblemError, match="problem key 'N' must be lowercase: n"):
        parse_problem(" N=2 , C=4,k=4,,h=5,w=5,y=1,x=1, ")


@pytest.mark.parametrize(
    "text, match",
    [
        ("n=1,c=1,k=1,h=1,w=1,y=1,x=1,q=3", r"unknown problem key\(s\) q; known:"),
        ("n=1,c=1,k=1,h=1,w=1,y=1,x=1,foo=1,bar=2", r"unknown problem key\(s\) bar, foo"),
        ("n=1,c=1,k=1,h=1,w=1", "problem is missing y, x"),
        ("c=1,k=1,h=1,w=1,y=1,x=1", "problem is missing n"),
        ("n=1,c=1,k=1,h=1,w=1,y=1,x=1,n=2", "problem key 'n' is given twice"),
        ("n=1,c=1,k=1,h=1,w=1,y=1,x=1,N=2", "problem key 'N' must be lowercase: n"),
        ("n=1,c=1,k=1,h=1,w=1,y=1,x", r"problem field 'x' is not key=value"),
        ("n=1,c=1,k=1,h=1,w=1,y=1,x=", r"problem field 'x=' is not key=value"),
        ("n=one,c=1,k=1,h=1,w=1,y=1,x=1", r"n='one' is not an integer"),
        ("n=1,c=1.5,k=1,h=1,w=1,y=1,x=1", r"c='1.5' is not an integer"),
        ("n=1,c=1,k=1,h=1,w=1,y=1,x=1,d=x", r"d='x' is not an integer"),
        ("n=1,c=1,k=1,h=1,w=1,y=1,x=1,stride=2x", r"stride='2x': expected an integer or integers joined by 'x'"),
        ("n=1,c=1,k=1,h=1,w=1,y=1,x=1,padding=a", r"padding='a': expected an integer"),
        ("n=1,c=1,k=1,h=8,w=8,y=1,x=1,padding=1x2x3x4", r"padding='1x2x3x4' must have 1 or 2 values"),
        ("n=1,c=1,k=1,d=4,h=8,w=8,y=1,x=1,stride=1x2", r"stride='1x2' must have 1 or 3 values"),
        ("n=1,c=1,k=1,d=4,h=8,w=8,y=1,x=1,pad_lo=1x2", r"pad_lo='1x2' must have 1 or 3 values"),
        ("n=1,c=1,k=1,h=8,w=8,y=1,x=1,padding=1,pad_lo=1", "give either padding or pad_lo/pad_hi, not both"),
        ("n=1,c=1,k=1,h=8,w=8,y=1,x=1,padding=1,pad_hi=1", "give either padding or pad_lo/pad_hi, not both"),
        ("n=0,c=1,k=1,h=1,w=1,y=1,x=1", "batch must be a positive integer|n must be a positive integer"),
        ("n=1,c=1,k=1,h=1,w=1,y=1,x=1,stride=0", "stride must be positive in every dim"),
        ("n=1,c=1,k=1,h=1,w=1,y=1,x=1,padding=-1", "padding must be >= 0 in every dim"),
        ("n=1,c=1,k=1,h=2,w=2,y=3,x=3", "empty output in H"),
        ("n=1,c=1,k=1,h=1,w=1,y=1,x=1,dtype=fp64", "dtype 'fp64' is not supported"),
        ("n=1,c=1,k=1,h=1,w=1,y=1,x=1,dtype=fp16,dw_dtype=bf16", "dw_dtype 'bf16' is not supported"),
    ],
)
def test_parse_problem_refusals(text, match):
    with pytest.raises(ProblemError, match=match):
        parse_problem(text)


def test_problem_from_fields_unknown_key():
    with pytest.raises(ProblemError, match=r"unknown problem key\(s\) in_channels"):
        problem_from_fields({"n": "1", "in_channels": "1", "k": "1", "h": "1", "w": "1", "y": "1", "x": "1"})


# ---------------------------------------------------------------------------------------------
# describe() round trip
# ---------------------------------------------------------------------------------------------
_problems_2d = st.builds(
    lambda n, g, c, k, h, w, y, x, s, lo, hi, dil, dt, dw32: dict(
        n=n, g=g, c=c, k=k, hi=h + (y - 1) * dil[1], wi=w + (x - 1) * dil[2], y=y, x=x,
        stride=(1, *s), pad_lo=(0, *lo), pad_hi=(0, *hi), dilation=dil, dtype=dt,
        dw_dtype="fp32" if dw32 else "",
    ),  # fmt: skip
    st.integers(1, 8), st.integers(1, 4), st.integers(1, 8), st.integers(1, 8),
    st.integers(1, 9), st.integers(1, 9), st.integers(1, 4), st.integers(1, 4),
    st.tuples(st.integers(1, 3), st.integers(1, 3)),
    st.tuples(st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.just(1), st.integers(1, 3), st.integers(1, 3)),
    st.sampled_from(["fp16", "bf16", "fp32"]), st.booleans(),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(_problems_2d)
def test_describe_round_trips_2d(kw):
    p = ConvProblem(**kw)
    assert parse_problem(p.describe()) == p


@settings(max_examples=300, deadline=None)
@given(
    d=st.integers(1, 6), z=st.integers(1, 3),
    s=st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 2)),
    lo=st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 2)),
    sym=st.booleans(), dil=st.integers(1, 2), g=st.integers(1, 3),
)  # fmt: skip
def test_describe_round_trips_3d(d, z, s, lo, sym, dil, g):
    hi = lo if sym else tuple(reversed(lo))
    p = ConvProblem(
        n=2, g=g, c=3, k=5, di=d + (z - 1) * dil, hi=6, wi=7, z=z, y=2, x=3,
        stride=s, pad_lo=lo, pad_hi=hi, dilation=(dil, 1, 1), spatial_dims=3,
    )  # fmt: skip
    assert parse_problem(p.describe()) == p


def test_describe_round_trips_3d_with_unit_depth():
    # D = Z = 1 and uniform stride/padding/dilation: still a 3-D problem after the round trip.
    p = ConvProblem(n=1, c=4, k=4, di=1, hi=5, wi=5, z=1, y=3, x=3, pad_lo=(1, 1, 1), pad_hi=(1, 1, 1), spatial_dims=3)
    q = parse_problem(p.describe())
    assert q.spatial_dims == 3
    assert q == p


def test_describe_format():
    p = parse_problem("n=32,c=64,k=64,h=56,w=56,y=3,x=3,stride=1,padding=1")
    assert p.describe() == "n=32,c=64,k=64,h=56,w=56,y=3,x=3,stride=1,padding=1,dilation=1,dtype=bf16"
    q = parse_problem("n=1,c=8,k=8,g=4,h=8,w=8,y=1,x=7,padding=0x3,dtype=fp32,dw_dtype=fp32")
    assert "g=4" in q.describe() and "padding=0x3" in q.describe() and "dw_dtype" not in q.describe()


# ---------------------------------------------------------------------------------------------
# The corpus
# ---------------------------------------------------------------------------------------------
def _csv_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_corpus_copy_matches_shared():
    if not CORPUS_SHARED.exists():
        pytest.skip(f"no shared corpus at {CORPUS_SHARED}")
    assert CORPUS_COPY.read_bytes() == CORPUS_SHARED.read_bytes(), (
        f"tests/data/wgrad_shapes.csv is stale: copy {CORPUS_SHARED} over it"
    )


@pytest.mark.parametrize("path", [CORPUS_COPY, CORPUS_SHARED], ids=["copy", "shared"])
def test_read_corpus(path):
    if not path.exists():
        pytest.skip(f"{path} not present")
    rows = _csv_rows(path)
    entries = read_corpus(path)
    assert len(entries) == len(rows) > 0
    names = [e[0] for e in entries]
    assert len(set(names)) == len(names)
    for (name, regime, p), row in zip(entries, rows):
        assert name == row["name"] and regime == row["regime"]
        groups = int(row["groups"])
        assert p.g == groups
        assert p.c * groups == int(row["in_channels"]) and p.k * groups == int(row["out_channels"])
        assert p.n == int(row["n"]) and (p.hi, p.wi, p.y, p.x) == tuple(int(row[k]) for k in "hwyx")
        assert p.dtype == row["dtype"]
        three_d = int(row["d"]) != 1 or int(row["z"]) != 1
        assert p.spatial_dims == (3 if three_d else 2)
        assert (p.di, p.z) == (int(row["d"]), int(row["z"]))
        s, pad, dil = (int(row[k]) for k in ("stride", "padding", "dilation"))
        assert p.ho == brute_out(p.hi, p.y, s, pad, pad, dil)
        assert p.wo == brute_out(p.wi, p.x, s, pad, pad, dil)
        assert p.do == brute_out(p.di, p.z, s if three_d else 1, pad if three_d else 0, pad if three_d else 0, dil if three_d else 1)
        assert parse_problem(p.describe()) == p
        if regime == "depthwise":
            assert p.is_depthwise


def test_read_corpus_known_rows():
    by_name = {name: p for name, _, p in read_corpus(CORPUS_COPY)}
    conv1 = by_name["r50_conv1_7x7s2_n32"]
    assert (conv1.ho, conv1.wo, conv1.gemm_n, conv1.gemm_k) == (112, 112, 7 * 7 * 3, 32 * 112 * 112)
    c3d = by_name["c3d_3x3x3_64_n8"]
    assert c3d.spatial_dims == 3 and (c3d.do, c3d.ho, c3d.wo) == (16, 56, 56)
    dw = by_name["mbv2_dw3x3_144_n32"]
    assert (dw.g, dw.c, dw.k) == (144, 1, 1)


def test_read_corpus_refuses_bad_row(tmp_path):
    bad = tmp_path / "bad.csv"
    shutil.copy(CORPUS_COPY, bad)
    with open(bad, "a") as f:
        f.write("broken,1,6,4,4,1,8,8,1,3,3,1,1,1,bf16,x\n")  # in_channels 6 over 4 groups
    with pytest.raises(ProblemError, match="in_channels=6 is not divisible by groups=4"):
        read_corpus(bad)


def test_extent_limit_refused_with_advice():
    assert MAX_EXTENT == 2**28
    ok = ConvProblem(n=1, c=1, k=1, hi=1, wi=2**28 - 2, y=1, x=3, pad_lo=(0, 0, 1), pad_hi=(0, 0, 1))
    assert ok.wo == 2**28 - 2
    with pytest.raises(ProblemError, match=r"^W extent 268435457 \(input plus padding\) is past the 268435456 .*split the problem along W"):
        ConvProblem(n=1, c=1, k=1, hi=1, wi=2**28 - 1, y=1, x=3, pad_lo=(0, 0, 1), pad_hi=(0, 0, 1))


def test_kernels_masking_offset_exceeds_any_extent():
    # A masked coordinate is a real one (>= -MAX_EXTENT) plus wgrad.OUTSIDE, or two OUTSIDEs:
    # it must land past every extent and stay below 2**31.
    from skwgrad.aot.kernels import wgrad

    outside = wgrad.OUTSIDE.value
    assert outside - MAX_EXTENT >= MAX_EXTENT
    assert 2 * outside + MAX_EXTENT < 2**31


def test_fp32_precision_defaults_to_ieee_and_is_fp32_only():
    base = dict(n=1, c=8, k=8, hi=4, wi=4, y=3, x=3)
    assert ConvProblem(**base, dtype="fp32").precision == "ieee"
    assert ConvProblem(**base, dtype="fp32", precision="tf32").precision == "tf32"
    assert ConvProblem(**base, dtype="bf16").precision == ""
    with pytest.raises(ProblemError, match=r"^precision 'fp64' is not supported; fp32 takes one of ieee, tf32"):
        ConvProblem(**base, dtype="fp32", precision="fp64")
    with pytest.raises(ProblemError, match=r"^precision applies to fp32 inputs only; this problem is bf16"):
        ConvProblem(**base, dtype="bf16", precision="tf32")
    tf32 = parse_problem("n=1,c=8,k=8,h=4,w=4,y=3,x=3,dtype=fp32,precision=tf32")
    assert "precision=tf32" in tf32.describe() and parse_problem(tf32.describe()) == tf32
    ieee = parse_problem("n=1,c=8,k=8,h=4,w=4,y=3,x=3,dtype=fp32")
    assert "precision" not in ieee.describe() and parse_problem(ieee.describe()) == ieee
