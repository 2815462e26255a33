"""The TMA depthwise family (``dwconv_tma``, sm_90): spec rules, kernarg layout, launch geometry,
plans on the fake device, selection, the compiled object and the cache checks, all on CPU.

The H200 numbers are in benchmarks/RESULTS.md (session 19, benchmarks/dw_tma_proto.py); these tests
keep the contract they rest on: 4-D tiled maps over the channels-last tensors, 64-byte aligned in
the absolute parameter space, steps covering every output row and column exactly once, and the
boxes the build records being the ones the spec names.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_launcher_fakes as F  # noqa: E402

from skwgrad.abi.conv import ConvProblem, parse_problem  # noqa: E402
from skwgrad.abi.kernargs import PARAM_BASE, declaration  # noqa: E402
from skwgrad.abi.launch import DWCONV_TMA_CTAS_PER_CU, dwconv_tma_geometry, dwconv_tma_ks_count  # noqa: E402
from skwgrad.abi.spec import DWCONV_TMA_X_ROWS, KernelSpec  # noqa: E402
from skwgrad.errors import AbiError, ProblemError  # noqa: E402
from skwgrad.reference import relative_error  # noqa: E402


def dw_spec(variant="atomic", dtype="bf16", k=3, bc=32, wt=16, warps=4, stages=3):
    dw = "fp32" if variant == "atomic" else dtype
    return KernelSpec("dwconv_tma", variant, dtype, dw, vec_c=8, vec_k=8, bm=bc, bn=k, bk=wt, num_warps=warps, num_stages=stages)


def test_kernargs_put_the_maps_64_byte_aligned_then_the_loop_scalars():
    slots, size = declaration("dwconv_tma", "workspace").layout(2)
    maps = [s for s in slots if s.arg.kind == "tmap"]
    assert [s.arg.name for s in maps] == ["dy_map", "x_map"] and maps[0].offset == 48
    assert all((PARAM_BASE + s.offset) % 64 == 0 for s in maps)
    assert declaration("dwconv_tma", "atomic").source_names == (
        "dy_desc", "x_desc", "dw", "ws_ptr", "G", "TAPS", "pad_h", "pad_w", "WS", "BHB", "total_steps", "ks_iters", "cblocks")  # fmt: skip
    with pytest.raises(AbiError, match="epilogue"):
        declaration("dwconv_tma", "two_stage")


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(dtype="fp32"), "16-bit"),
        (dict(k=7), "3 or 5"),
        (dict(bc=24), "power of two"),
        (dict(stages=6), "num_stages"),
        (dict(bc=16, wt=8, warps=8), "at least 4 elements"),
    ],
)
def test_spec_rules(kw, match):
    with pytest.raises(AbiError, match=match):
        dw_spec(**kw)
    with pytest.raises(AbiError, match="atomic adds into an fp32 dW"):
        KernelSpec("dwconv_tma", "atomic", "bf16", "bf16", vec_c=8, vec_k=8, bm=32, bn=3, bk=16)


def test_label_boxes_and_what_it_refuses():
    s = dw_spec()
    assert s.label == "dwconv_tma_bf16_dwfp32_2d_v8_c32x3w16_w4s3_atomic"
    assert s.dwconv_tma_boxes == (DWCONV_TMA_X_ROWS - 2, 2, 32)  # 6 output rows in dy boxes of 2; 18 x columns -> 32
    assert s.tensor_map_boxes == [(False, [1, 2, 16, 32]), (False, [1, 8, 32, 32])]
    assert dw_spec(k=5).dwconv_tma_boxes == (4, 4, 32)
    ok = parse_problem("n=2,c=64,k=64,g=64,h=9,w=9,y=3,x=3,padding=1,dw_dtype=fp32")
    s.check_problem(ok)
    for text, match in (
        ("n=2,c=64,k=64,g=64,h=9,w=9,y=3,x=3,padding=1,stride=2,dw_dtype=fp32", "stride"),
        ("n=2,c=64,k=64,g=64,h=9,w=9,y=5,x=5,padding=2,dw_dtype=fp32", "3x3"),
        ("n=2,c=64,k=64,g=32,h=9,w=9,y=3,x=3,padding=1,dw_dtype=fp32", "depthwise"),
        ("n=2,c=60,k=60,g=60,h=9,w=9,y=3,x=3,padding=1,dw_dtype=fp32", "multiple of 8"),
        ("n=2,c=64,k=64,g=64,h=9,w=9,y=3,x=3,padding=1", "fp32 dW"),
    ):
        with pytest.raises(AbiError, match=match):
            s.check_problem(parse_problem(text))


def test_geometry_steps_cover_every_output_row_and_column_once():
    p = parse_problem("n=3,c=80,k=80,g=80,h=15,w=37,y=3,x=3,padding=1,dw_dtype=fp32")
    geo = dwconv_tma_geometry(p, "atomic", bc=32, taps=3, wt=16, ks_count=5)
    sc = geo.scalars
    assert (sc["WS"], sc["BHB"], sc["cblocks"]) == (3, 3, 3)  # 37 columns in blocks of 16, 15 rows in 6s, 80 channels in 32s
    assert sc["total_steps"] == 3 * 3 * 3 and geo.ks_count * geo.ks_iters >= sc["total_steps"] > (geo.ks_count - 1) * geo.ks_iters
    assert geo.grid == 3 * geo.ks_count and geo.workspace.zero_dw and not geo.workspace.needs_stage2
    assert [(r.operand, r.mode, r.shape) for r in geo.tensor_maps] == [("dy", "tiled", (3, 15, 37, 80)), ("x", "tiled", (3, 15, 37, 80))]
    ws = dwconv_tma_geometry(dataclasses.replace(p, dw_dtype="bf16"), "workspace", bc=32, taps=3, wt=16, ks_count=2)
    assert ws.workspace.needs_stage2 and ws.workspace.stage2_reset and ws.workspace.replicas == 1
    with pytest.raises(ProblemError, match="ks_count"):
        dwconv_tma_geometry(p, "atomic", bc=32, taps=3, wt=16, ks_count=28)


def test_split_rule_is_two_ctas_per_sm_over_the_channel_blocks():
    p = parse_problem("n=32,c=384,k=384,g=384,h=15,w=15,y=3,x=3,padding=1,dw_dtype=fp32")
    assert DWCONV_TMA_CTAS_PER_CU == 2
    assert dwconv_tma_ks_count(p, bc=32, taps=3, wt=16, compute_units=132) == 22  # 12 blocks x 22 = 264 CTAs
    tiny = parse_problem("n=1,c=512,k=512,g=512,h=7,w=7,y=3,x=3,padding=1,dw_dtype=fp32")
    assert dwconv_tma_ks_count(tiny, bc=32, taps=3, wt=16, compute_units=132) == 2  # capped at its 2 steps


PROBLEMS = [
    ConvProblem(n=3, c=1, k=1, g=40, hi=9, wi=21, y=3, x=3, pad_lo=(0, 1, 1), pad_hi=(0, 1, 1)),  # a partial channel block
    ConvProblem(n=2, c=1, k=1, g=64, hi=13, wi=11, y=5, x=5, pad_lo=(0, 2, 2), pad_hi=(0, 2, 2)),
    ConvProblem(n=2, c=1, k=1, g=16, hi=10, wi=12, y=3, x=3),  # no padding: a smaller output
]


@pytest.mark.parametrize("variant,ks", [("atomic", 1), ("atomic", 4), ("workspace", 3)])
@pytest.mark.parametrize("pi", range(len(PROBLEMS)))
def test_plans_launch_what_the_reference_computes(variant, ks, pi):
    p0 = PROBLEMS[pi]
    s = dw_spec(variant, k=p0.x)
    p = dataclasses.replace(p0, dw_dtype=s.dw_dtype)
    plan, got, ref = F.plan_on_fake(s, p, ks)
    assert plan.threads == 128 and plan.grid == plan.geometry.tiling.num_tiles * plan.ks_count
    assert relative_error(got, ref) < (1e-2 if p.dw_dtype == "bf16" else 1e-5)
    assert plan.zeroed_bytes_nonzero() == 0


def test_selection_takes_the_family_from_256_channels_where_it_applies():
    from skwgrad.aot.sweep import sweep
    from skwgrad.launcher import select as S

    c = F.FakeCache()
    for it in sweep("default", ["sm_90"], ["bf16", "fp32"]):
        c.add(it.spec, it.arch)
    assert S.DWCONV_TMA_MIN_CHANNELS == 256 and S.DWCONV_TMA_FILTER_WIDTHS == (3,)
    big = parse_problem("n=32,c=384,k=384,g=384,h=15,w=15,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32")
    ch = S.choose(big, c, arch="sm_90", cus=132)
    assert ch.spec.family == "dwconv_tma" and ch.spec.variant == "atomic" and ch.ks_count == 22 and ch.stage2 is None
    ch16 = S.choose(dataclasses.replace(big, dw_dtype="bf16"), c, arch="sm_90", cus=132)
    assert ch16.spec.variant == "workspace" and ch16.stage2 is not None
    for text in (
        "n=32,c=128,k=128,g=128,h=15,w=15,y=5,x=5,padding=2,dtype=bf16",  # few channels: the window kernel
        "n=32,c=384,k=384,g=384,h=14,w=14,y=3,x=3,padding=1,dtype=bf16",  # 3x3 on strips of 7: the 32-channel window kernel
        "n=32,c=384,k=384,g=384,h=15,w=15,y=5,x=5,padding=2,dtype=bf16,dw_dtype=fp32",  # 5x5: the window kernel (D1/D2)
        "n=32,c=384,k=384,g=384,h=15,w=15,y=5,x=5,padding=2,stride=2,dtype=bf16",  # stride 2
        "n=32,c=384,k=384,g=384,h=15,w=15,y=7,x=7,padding=3,dtype=bf16",  # 7x7
        "n=32,c=384,k=384,g=384,h=15,w=15,y=5,x=5,padding=2,dtype=fp32,precision=tf32",  # fp32 input
    ):
        assert S.choose(parse_problem(text), c, arch="sm_90", cus=132).spec.family == "dwconv", text
    assert S.choose(big, c, arch="sm_90", cus=132, deterministic=True).spec.family != "dwconv_tma"
    assert S.choose(big, c, arch="sm_90", cus=132, reduction="two_stage").spec.family != "dwconv_tma"
    everything = S.all_choices(big, c, arch="sm_90", cus=132)
    assert everything[0].spec.family == "dwconv_tma" and everything[0].ks_count == 22  # auto's launch leads the search
    assert {x.ks_count for x in everything if x.spec.family == "dwconv_tma" and x.spec.bn == 3} == {11, 22, 44}
    # the 5x5 kernel is built by the broad preset only, and auto never takes it (DWCONV_TMA_FILTER_WIDTHS)
    widths = lambda preset: {it.spec.bn for it in sweep(preset, ["sm_90"], ["bf16"]) if it.spec.family == "dwconv_tma"}  # noqa: E731
    assert widths("default") == {3} and widths("broad") == {3, 5}
    for it in sweep("broad", ["sm_90"], ["bf16"]):
        c.add(it.spec, it.arch)
    five = parse_problem("n=32,c=384,k=384,g=384,h=15,w=15,y=5,x=5,padding=2,dtype=bf16,dw_dtype=fp32")
    assert S.choose(five, c, arch="sm_90", cus=132).spec.family == "dwconv"
    assert not [it for it in sweep("default", ["gfx942", "gfx950"], ["bf16", "fp16"]) if it.spec.family == "dwconv_tma"]


def test_selection_takes_the_channel_block_by_padding_and_tiles():
    """Where a window mode has two channel blocks: none that pads the channels 1.25x the other's or
    more, then the widest whose launch has 3+ tiles (channel blocks x tap-row groups), else the
    narrowest; each at its own split degree. 3x3 on strips of 7 (1 tap-row group): 32 from 72
    channels; a wide block goes before the TMA family, which goes before the narrowest block
    (strips of 5 have one block). 7x7 (7 groups): 32 unless it pads a quarter more than 16; the
    same for the 5x5 / 7x7 stride-2 kernel (one mode, 16 or 32 channels)."""
    from skwgrad.aot.sweep import sweep
    from skwgrad.launcher import select as S

    c = F.FakeCache()
    for it in sweep("default", ["sm_90"], ["bf16"]):
        c.add(it.spec, it.arch)
    assert (S.DWCONV_WIN_MAX_PADDING, S.DWCONV_WIN_MIN_TILES) == (1.25, 3)
    for y, g, h, mode, bm in ((3, 64, 28, "win7r3", 16), (3, 72, 28, "win7r3", 32), (3, 80, 28, "win7r3", 32), (3, 768, 13, "win7r3", 32),
                              (3, 384, 14, "win7r3", 32), (3, 200, 15, "win5r3", 16), (3, 48, 15, "win5r3", 16), (3, 384, 15, "", 32),
                              (7, 16, 56, "win7", 16), (7, 24, 56, "win7", 32), (7, 48, 56, "win7", 16), (7, 56, 56, "win7", 32),
                              (7, 72, 56, "win7", 32), (7, 384, 14, "win7", 32), (-5, 16, 112, "win7s2", 16),
                              (-5, 48, 112, "win7s2", 16), (-5, 64, 112, "win7s2", 32), (-7, 184, 56, "win7s2", 32)):  # fmt: skip
        stride, y = (2, -y) if y < 0 else (1, y)  # a negative width: stride 2
        p = parse_problem(f"n=32,c={g},k={g},g={g},h={h},w={h},y={y},x={y},padding={y // 2},stride={stride},dtype=bf16,dw_dtype=fp32")
        ch = S.choose(p, c, arch="sm_90", cus=132)
        family = "dwconv" if mode else "dwconv_tma"
        assert (ch.spec.family, ch.spec.mode, ch.spec.bm) == (family, mode, bm), (y, g, h, ch.spec.label)
        if mode:
            assert ch.ks_count == S._family_ks(p, ch.spec, 132, resident=S._occ(None, ch.kernel, "sm_90"), threads=128)


# -- the compiled object (Gluon on this machine) --------------------------------------------------
@pytest.fixture(scope="module")
def compiled():
    pytest.importorskip("triton.experimental.gluon")
    from skwgrad.aot.compile import compile_spec

    return {v: compile_spec(dw_spec(v, k=k), "sm_90", keep_asm=True) for v, k in (("atomic", 3), ("workspace", 5))}


@pytest.mark.parametrize("variant", ["atomic", "workspace"])
def test_compiled_kernel_is_the_measured_loop_and_passes_the_cache_checks(compiled, variant):
    import subprocess
    import tempfile

    import triton.backends.nvidia as nv

    from skwgrad.abi.codeobject import cubin_params
    from skwgrad.cache.validate import check_metadata

    ck = compiled[variant]
    md = ck.metadata
    assert [p["offset"] for p in cubin_params(ck.binary, md["name"])][: len(ck.spec.kernarg_decl.args)] == md["kernarg"]["offsets"]
    assert md["kernarg"]["offsets"][0] == 48 and md["threads"] == 128 and md["stack_bytes"] == 0
    assert [(m["is_im2col"], m["block_size"], m["swizzle"]) for m in md["tensor_maps"]] == [
        (im2col, box, 0) for im2col, box in ck.spec.tensor_map_boxes
    ]
    tool = Path(nv.__file__).parent / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "k.cubin"
        f.write_bytes(ck.binary)
        sass = subprocess.run([str(tool), "-sass", str(f)], capture_output=True, text=True, timeout=120, check=True).stdout
    k = ck.spec.bn
    bh = DWCONV_TMA_X_ROWS - (k - 1)
    assert len(re.findall(r"UTMALDG\.4D", sass)) >= 1 + bh // (bh & -bh)  # the dy boxes and the x box of a step
    assert len(re.findall(r"\bFFMA\b", sass)) >= bh * k * k * 4  # every (output row, tap) on 4 channels a thread
    assert not re.search(r"\b(LDL|STL)\b", sass)
    assert "REDG.E.ADD.F32" in sass
    check_metadata(dict(md), ck.spec, "sm_90", "entry", current=True)
    bad = dict(md, tensor_maps=[dict(m) for m in md["tensor_maps"]])
    bad["tensor_maps"][1]["block_size"] = [8, 32, 32]
    with pytest.raises(Exception, match="block_size"):
        check_metadata(bad, ck.spec, "sm_90", "entry", current=True)


def test_amd_targets_refuse_the_family():
    pytest.importorskip("triton")
    from skwgrad.aot.compile import compile_spec

    with pytest.raises(AbiError, match="sm_90 only"):
        compile_spec(dw_spec(), "gfx942")
