"""Channel padding (skwgrad.abi.padding): the padded problem, the copies, the staging layout; the
padded plan through the fake backend (float64 reference, poisoned dW and workspace); selection
pricing it and remembering it; the sweep building its kernels. No GPU needed."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_launcher_fakes as F  # noqa: E402

from skwgrad.abi.conv import DTYPE_BYTES, ConvProblem, parse_problem  # noqa: E402
from skwgrad.abi.costmodel import padding_us  # noqa: E402
from skwgrad.abi.padding import ALIGN, channel_padding, pad_spec, vector_width  # noqa: E402
from skwgrad.errors import AbiError, CacheError, ProblemError  # noqa: E402
from skwgrad.launcher import select as S  # noqa: E402
from skwgrad.launcher.hostdata import from_bits  # noqa: E402
from skwgrad.launcher.options import LaunchOptions  # noqa: E402
from skwgrad.launcher.plan import Kernel, PaddedPlan  # noqa: E402
from skwgrad.launcher.workspace import arenas  # noqa: E402

UNALIGNED = parse_problem("n=2,c=6,k=10,h=9,w=8,y=3,x=3,padding=1,dtype=fp32")  # fp32: W = 4 -> C 8, K 12
ONLY_C = parse_problem("n=4,c=6,k=8,h=16,w=16,y=3,x=3,stride=2,padding=1,dtype=fp32")
ONLY_K = parse_problem("n=3,c=8,k=10,h=7,w=7,y=1,x=1,dtype=fp32")
GROUPED = ConvProblem(n=2, c=18, k=22, g=2, hi=6, wi=6, y=3, x=3, pad_lo=(0, 1, 1), pad_hi=(0, 1, 1), dtype="fp32")


def test_aligned_and_packed_problems_are_not_padded():
    assert channel_padding(parse_problem("n=2,c=8,k=16,h=8,w=8,y=3,x=3,dtype=fp32")) is None
    assert channel_padding(parse_problem("n=2,c=16,k=24,h=8,w=8,y=3,x=3")) is None  # bf16: W = 8
    # depthwise and few channels per group: their own families, padding would multiply the work
    assert channel_padding(ConvProblem(n=2, c=1, k=1, g=30, hi=8, wi=8, y=3, x=3)) is None
    assert channel_padding(ConvProblem(n=2, c=6, k=6, g=8, hi=8, wi=8, y=3, x=3)) is None


@pytest.mark.parametrize("p", [UNALIGNED, ONLY_C, ONLY_K, GROUPED], ids=["both", "only_c", "only_k", "grouped"])
def test_padded_problem_copies_and_staging(p):
    pad = channel_padding(p)
    w = vector_width(p.dtype)
    q = pad.padded
    assert q.c % w == 0 and q.k % w == 0 and 0 <= q.c - p.c < w and 0 <= q.k - p.k < w
    assert dataclasses.replace(q, c=p.c, k=p.k) == p  # nothing else changes
    ops = [c.operand for c in pad.before]
    assert ops == [o for o, pads in (("x", q.c != p.c), ("dy", q.k != p.k)) if pads]
    eb = DTYPE_BYTES[p.dtype]
    sizes = {"x": q.x_numel * eb, "dy": q.dy_numel * eb, "dw": q.dw_numel * DTYPE_BYTES[p.dw_dtype]}
    spans = sorted((pad.offsets[o], pad.offsets[o] + sizes[o]) for o in (*ops, "dw"))
    for (a0, a1), (b0, _) in zip(spans, spans[1:]):
        assert a1 <= b0  # no overlap
    assert all(o % ALIGN == 0 for o in pad.offsets.values()) and spans[-1][1] <= pad.staging_bytes
    for c in pad.before:  # every destination element of the padded operand is written
        assert c.numel * eb == sizes[c.operand] and c.width == (p.c if c.operand == "x" else p.k)
    a = pad.after
    assert a.rows * a.dst_pitch == p.dw_numel and a.width == a.dst_pitch == p.c and a.src_pitch == q.c
    assert a.group_rows * p.g == a.rows and a.src_group_rows == q.k * p.z * p.y * p.x
    assert padding_us(pad, "sm_90") > 0


@pytest.mark.parametrize("p", [UNALIGNED, ONLY_C, ONLY_K, GROUPED], ids=["both", "only_c", "only_k", "grouped"])
def test_two_pad_launches_their_grids_and_their_price(p):
    from skwgrad.abi.costmodel import PAD_GATHER_ELEMENTS_PER_US, PAD_LAUNCH_US, PAD_SCATTER_ELEMENTS_PER_US
    from skwgrad.abi.kernargs import PAD_COPY_SCALARS, declaration
    from skwgrad.abi.padding import PAD_BLOCK, PAD_SCATTER_COLS

    pad = channel_padding(p)
    assert [pl.operands for pl in pad.launches] == [tuple(c.operand for c in pad.before), ("dw",)]
    w = vector_width(p.dtype)
    for pl in pad.launches:
        sc = pl.scalars()
        names = set(declaration("pad", "rows").value_names())
        assert set(sc) | set(pl.pointers({o: (16, 32) for o in pl.operands})) == names
        assert pl.split == pl.copies[0].grid and pl.grid == sum(c.grid for c in pl.copies)
        if len(pl.copies) == 1:
            assert sc["rows1"] == 0 and pl.grid == pl.split
        for i, c in enumerate(pl.copies):
            assert {n: sc[f"{n}{i}"] for n in PAD_COPY_SCALARS} == c.scalars()
            if c.scatter:  # tiles of PAD_BLOCK / PAD_SCATTER_COLS destination rows by PAD_SCATTER_COLS columns
                tile_rows = PAD_BLOCK // PAD_SCATTER_COLS
                assert c.grid == -(-c.rows // tile_rows) * -(-c.dst_pitch // PAD_SCATTER_COLS)
            else:  # PAD_BLOCK destination elements, whole 16-byte vectors
                assert c.dst_pitch % w == 0 and c.grid == -(-c.rows * c.dst_pitch // PAD_BLOCK)
    assert [c.scatter for c in pad.before] == [False] * len(pad.before)
    assert pad.after.scatter == (p.c % w != 0 or p.k % w != 0)
    rate = {False: PAD_GATHER_ELEMENTS_PER_US["sm_90"], True: PAD_SCATTER_ELEMENTS_PER_US["sm_90"]}
    moved = sum(c.elements_moved / rate[c.scatter] for c in pad.copies)
    assert padding_us(pad, "sm_90") == pytest.approx(moved + 2 * PAD_LAUNCH_US)


def test_copies_take_the_path_their_alignment_allows_and_bad_shapes_are_refused():
    from skwgrad.abi.padding import PadCopy, PadLaunch

    # a scatter (unaligned destination rows, or rows of groups dropped) walks destination rows:
    # neither side needs 16-byte rows; a gather (aligned destination, no groups) its vectors
    assert PadCopy("x", "bf16", 10, 3, 3, 5, 10, 10).scatter and not PadCopy("x", "bf16", 10, 3, 3, 8, 10, 10).scatter
    assert PadCopy("dw", "bf16", 10, 3, 3, 8, 5, 6).scatter
    for bad in ((10, 9, 8, 8, 10, 10), (10, 3, 3, 8, 4, 3), (10, 3, 3, 8, 4, 6)):  # width past a pitch; groups
        with pytest.raises(ProblemError, match="inconsistent"):
            PadCopy("x", "bf16", *bad)
    assert PadCopy("dw", "bf16", 10, 3, 8, 3, 5, 6).scatter and PadCopy("dw", "bf16", 10, 8, 8, 8, 5, 6).scatter
    x = PadCopy("x", "bf16", 10, 3, 3, 8, 10, 10)
    with pytest.raises(ProblemError, match="one dtype"):
        PadLaunch((x, PadCopy("dw", "fp32", 10, 3, 4, 3, 10, 10)))
    with pytest.raises(ProblemError, match="one dtype"):
        PadLaunch((x, x, x))


def test_padding_refuses_buffers_past_32_bit_offsets():
    huge = parse_problem("n=850,c=250,k=64,h=100,w=100,y=1,x=1")  # x fits, padded x (256 ch) would not
    assert huge.x_numel < 2**31 - 1
    with pytest.raises(ProblemError, match="split the batch"):
        channel_padding(huge)


def test_pad_spec_runs_no_problem():
    s = pad_spec("bf16")
    assert s.label == "pad_bf16_b2048_w4" and s.kernarg_decl.names[:4] == ("src0", "dst0", "src1", "dst1")
    with pytest.raises(AbiError, match="runs no problem"):
        s.check_problem(UNALIGNED)
    with pytest.raises(AbiError, match="one dtype"):
        dataclasses.replace(s, dw_dtype="fp32")


# -- the padded plan ------------------------------------------------------------------------------
def _padded_plan(p, variant="two_stage", ks=2, be=None, family="wgrad", mode=""):
    c = F.FakeCache()
    w = vector_width(p.dtype)
    k = Kernel.from_entry(c.add(F.spec(family, variant, p.dtype, p.dw_dtype if family else None, vc=w, vk=w, mode=mode)), c)
    st2 = Kernel.from_entry(c.add(F.stage2(p.dw_dtype)), c)
    pads = {d: Kernel.from_entry(c.add(pad_spec(d)), c) for d in {p.dtype, p.dw_dtype}}
    be = be or F.FakeBackend(cus=4)
    kw = dict(pool=4) if family == "wgrad_sk" else dict(ks_count=ks)
    return PaddedPlan(p, k, be, padding=channel_padding(p), pad_kernels=pads, stage2=st2, **kw), be


@pytest.mark.parametrize("p", [UNALIGNED, ONLY_C, ONLY_K, GROUPED], ids=["both", "only_c", "only_k", "grouped"])
@pytest.mark.parametrize("variant", ["direct", "two_stage", "atomic"])
def test_padded_plan_matches_the_float64_reference(p, variant):
    plan, be = _padded_plan(p, variant, ks=1 if variant == "direct" else 3)
    assert plan.problem == p and plan.kernel_problem == channel_padding(p).padded
    assert plan.dw_nbytes == p.dw_numel * DTYPE_BYTES[p.dw_dtype]
    for seed in (1, 2):  # fresh inputs, dW and the scratch (staging included) poisoned before each run
        xp, dyp, dwp, ref = F.random_device_inputs(be, p, seed=seed)
        plan.poison(dw=dwp)
        n0 = len(be.launches)
        plan.launch(dyp, xp, dwp)
        out = from_bits(be.read_array(dwp, p.dw_numel, p.dw_dtype), p.dw_dtype).reshape(p.dw_shape)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
        fams = [r["spec"].family for r in be.launches[n0:]]
        assert fams[0] == "pad" and fams[1] == "wgrad" and fams[-1] == "pad"  # x and/or dy in one launch
        assert fams.count("pad") == 2 == len(channel_padding(p).launches)


def test_padded_stream_k_plan_and_zeroed_arena_stay_clean():
    plan, be = _padded_plan(UNALIGNED, "workspace", family="wgrad_sk", mode="dp_sk")
    xp, dyp, dwp, ref = F.random_device_inputs(be, UNALIGNED, seed=3)
    plan.poison(dw=dwp)
    plan.launch(dyp, xp, dwp)
    out = from_bits(be.read_array(dwp, UNALIGNED.dw_numel, "fp32"), "fp32").reshape(UNALIGNED.dw_shape)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert plan.zeroed_bytes_nonzero() == 0


def test_padded_plan_stages_in_scratch_after_the_kernels_own_scratch():
    plan, be = _padded_plan(UNALIGNED, "two_stage", ks=3)
    xp, dyp, dwp, _ = F.random_device_inputs(be, UNALIGNED)
    plan.launch(dyp, xp, dwp)
    _, scratch = arenas(be, 0)
    launches = be.launches[-4:]  # pad x and dy, main, Stage-2, pad dW
    main = launches[1]["args"]
    pad_in, pad_dw = launches[0]["args"], launches[3]["args"]
    assert (pad_in["src0"], pad_in["src1"]) == (xp, dyp)
    assert main["x"] == pad_in["dst0"] and main["dy"] == pad_in["dst1"]
    assert main["dw"] == pad_dw["src0"] and pad_dw["dst0"] == dwp and pad_dw["rows1"] == 0
    replicas_end = main["ws_ptr"] + main["ws_bytes"]
    staged = [main["x"], main["dy"], main["dw"]]
    assert all(replicas_end <= s < scratch.ptr + scratch.nbytes for s in staged)
    assert plan.workspace_bytes >= channel_padding(UNALIGNED).staging_bytes
    assert [(d["operands"], d["grid"]) for d in plan.describe()["pad_launches"]] == [(["x", "dy"], launches[0]["grid"]), (["dw"], launches[3]["grid"])]
    # a second launch on the same pointers patches nothing and runs the same bytes
    before = [bytes(r["bytes"]) for r in launches]
    plan.launch(dyp, xp, dwp)
    assert [bytes(r["bytes"]) for r in be.launches[-4:]] == before


def test_padded_plan_refuses_missing_or_foreign_pad_kernels():
    c = F.FakeCache()
    k = Kernel.from_entry(c.add(F.spec("wgrad", "direct", "fp32", vc=4, vk=4)), c)
    be = F.FakeBackend(cus=4)
    pad = channel_padding(UNALIGNED)
    with pytest.raises(CacheError, match="pad kernel"):
        PaddedPlan(UNALIGNED, k, be, padding=pad, pad_kernels={})
    wrong = Kernel.from_entry(c.add(pad_spec("fp32"), "gfx942"), c)
    with pytest.raises(ProblemError, match="built for gfx942"):
        PaddedPlan(UNALIGNED, k, be, padding=pad, pad_kernels={"fp32": wrong})
    with pytest.raises(ProblemError, match="describes"):
        PaddedPlan(ONLY_C, k, be, padding=pad, pad_kernels={"fp32": Kernel.from_entry(c.add(pad_spec("fp32")), c)})


# -- selection --------------------------------------------------------------------------------------
def _cache(pads=True):
    return F.full_cache(dtype="fp32", dims=(2,), vecs=((1, 1), (4, 4)), pads=pads)


def test_the_search_prices_padded_candidates_as_kernel_plus_copies():
    c = _cache()
    r = S.rank_choices(UNALIGNED, c, arch="sm_90", cus=8, options=LaunchOptions(), occupancy=lambda k: 2)
    padded = [x for x in r.choices if x.padding is not None]
    plain = [x for x in r.choices if x.padding is None]
    assert padded and plain
    assert all((x.spec.vec_c, x.spec.vec_k) == (4, 4) for x in padded) and all(x.spec.vec_c == 1 for x in plain)
    pad = channel_padding(UNALIGNED)
    extra = padding_us(pad, "sm_90")
    q = S.rank_choices(pad.padded, c, arch="sm_90", cus=8, options=LaunchOptions(), occupancy=lambda k: 2)
    by = {(x.kernel.key, x.pool, x.ks_count): x.predicted_us for x in q.choices}
    for x in padded:
        assert x.predicted_us == pytest.approx(by[(x.kernel.key, x.pool, x.ks_count)] + extra)
    assert [x.predicted_us for x in r.choices] == sorted(x.predicted_us for x in r.choices)
    d = padded[0].to_dict()
    assert d["padded"] == pad.describe() and len(d["pad_keys"]) == 1


def test_without_pad_kernels_the_search_says_so_and_runs_unpadded():
    c = _cache(pads=False)
    r = S.rank_choices(UNALIGNED, c, arch="sm_90", cus=8, options=LaunchOptions(), occupancy=lambda k: 2)
    assert r.choices and all(x.padding is None for x in r.choices)
    assert any(x.label == "channel padding" and "pad kernel" in x.why for x in r.rejected)


def test_a_padded_choice_plans_runs_and_is_remembered_when_tuned():
    c = _cache()
    be = F.FakeBackend(cus=8, max_active=2)
    r = S.rank_choices(UNALIGNED, c, arch="sm_90", cus=8, options=LaunchOptions(), occupancy=lambda k: 2)
    ch = next(x for x in r.choices if x.padding is not None)
    plan = ch.plan(UNALIGNED, be)
    assert isinstance(plan, PaddedPlan)
    xp, dyp, dwp, ref = F.random_device_inputs(be, UNALIGNED, seed=5)
    plan.poison(dw=dwp)
    plan.launch(dyp, xp, dwp)
    out = from_bits(be.read_array(dwp, UNALIGNED.dw_numel, "fp32"), "fp32").reshape(UNALIGNED.dw_shape)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    c.remember_tuned("sm_90", 8, S.problem_key(UNALIGNED), {**ch.to_dict(), "us": 1.0})
    got = S.choose(UNALIGNED, c, arch="sm_90", cus=8)
    assert got.reason == "tuned" and got.padding == ch.padding and got.kernel.key == ch.kernel.key
    assert [k.key for k in got.pad_kernels] == [k.key for k in ch.pad_kernels]
    # a record whose pad kernel is not a pad kernel is ignored (the model chooses instead)
    bad = {**ch.to_dict(), "pad_keys": [ch.kernel.key], "us": 1.0}
    c.remember_tuned("sm_90", 8, S.problem_key(UNALIGNED), bad)
    assert S.choose(UNALIGNED, c, arch="sm_90", cus=8).reason != "tuned"


def test_tuned_record_pad_keys_are_validated():
    from skwgrad.cache.validate import check_choice
    from skwgrad.errors import CacheError as CE

    good = {"key": "a" * 64, "pool": 0, "ks_count": 1, "pad_keys": ["b" * 64]}
    assert check_choice(good, "t") is good
    for bad in ({**good, "pad_keys": "b" * 64}, {**good, "pad_keys": []}, {**good, "pad_keys": ["../x"]}):
        with pytest.raises(CE):
            check_choice(bad, "t")


# -- the sweep --------------------------------------------------------------------------------------
def test_every_preset_builds_the_pad_kernels_it_needs():
    from skwgrad.aot.sweep import sweep, sweep_for_problems

    for preset in ("smoke", "default"):
        specs = {it.spec for it in sweep(preset, arches=["sm_90"])}
        dtypes = {s.dtype for s in specs if s.family in ("wgrad", "wgrad_sk")} | {s.dw_dtype for s in specs if s.family in ("wgrad", "wgrad_sk")}
        assert {s.dtype for s in specs if s.family == "pad"} == dtypes
    p = parse_problem("n=4,c=250,k=130,h=14,w=14,y=3,x=3,padding=1")
    got = sweep_for_problems([p], arches=["sm_90"])
    specs = [it.spec for it in got.items]
    assert pad_spec("bf16") in specs
    assert any(s.family == "wgrad" and s.vec_c == s.vec_k == 8 for s in specs)  # the padded problem's kernels
    assert any(s.family == "wgrad" and s.vec_c == s.vec_k == 2 for s in specs) or any(s.vec_c == 1 for s in specs)
    aligned = sweep_for_problems([parse_problem("n=4,c=256,k=128,h=14,w=14,y=3,x=3,padding=1")], arches=["sm_90"])
    assert not any(it.spec.family == "pad" for it in aligned.items)


# -- the pad kernel itself, through the Triton interpreter ----------------------------------------
# Each case is a problem's pad launches as the plan makes them (x and dy together, dW alone), or,
# with "mix", one launch of two copies in a chosen order (a scatter in either slot). Destinations
# (and a guard either side) are poisoned with NaN bits first; every element is checked, bit for bit.
INTERP = r"""
import json, sys
import numpy as np, torch
from skwgrad.abi.conv import parse_problem, ConvProblem
from skwgrad.abi.padding import PAD_BLOCK, PAD_SCATTER_COLS, PadLaunch, channel_padding, vector_width
from skwgrad.aot.kernels import pad
TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
BITS = {"bf16": torch.int16, "fp16": torch.int16, "fp32": torch.int32}
GUARD = 64
out = []
for case in json.loads(sys.stdin.read()):
    p = parse_problem(case["problem"])
    padding = channel_padding(p)
    launches = padding.launches
    if case.get("mix"):
        by = {c.operand: c for c in padding.copies}
        launches = (PadLaunch(tuple(by[o] for o in case["mix"])),)
    rng = np.random.default_rng(len(case["problem"]))
    res = {"launches": [list(pl.operands) for pl in launches], "grids": [pl.grid for pl in launches]}
    for pl in launches:
        bufs, checks = {}, []
        for c in pl.copies:
            src = torch.tensor(rng.standard_normal(c.src_rows * c.src_pitch), dtype=TORCH[c.dtype])
            dst = torch.empty(c.numel + 2 * GUARD, dtype=TORCH[c.dtype])
            dst.view(BITS[c.dtype]).fill_(0x7FBADBAD if c.dtype == "fp32" else 0x7FF1)  # NaN
            bufs[c.operand] = (src, dst[GUARD : GUARD + c.numel])
            checks.append((c, src, dst))
        ptrs = pl.pointers(bufs)
        pad.pad_rows[(pl.grid,)](**ptrs, **pl.scalars(), BLOCK=PAD_BLOCK, VEC=vector_width(pl.dtype), COLS=PAD_SCATTER_COLS)
        for c, src, dst in checks:
            bits = dst.view(BITS[c.dtype]).numpy()
            r = np.arange(c.rows)
            srow = (r // c.group_rows) * c.src_group_rows + r % c.group_rows
            want = np.zeros((c.rows, c.dst_pitch), dtype=bits.dtype)
            want[:, : c.width] = src.view(BITS[c.dtype]).numpy()[srow[:, None] * c.src_pitch + np.arange(c.width)[None, :]]
            got = bits[GUARD : GUARD + c.numel].reshape(c.rows, c.dst_pitch)
            poison = bits[0] 
            res[c.operand] = {"equal": bool(np.array_equal(got, want)), "bad": int((got != want).sum()),
                              "guards": bool((bits[:GUARD] == poison).all() and (bits[GUARD + c.numel :] == poison).all()),
                              "scatter": c.scatter, "rows": c.rows, "dst_pitch": c.dst_pitch, "programs": c.grid}
    out.append(res)
print(json.dumps(out))
"""

PAD_CASES = {
    # the stem: 3 -> 8 channels, one 16-byte vector per row, 300 rows (not a multiple of a CTA's 256)
    "narrow_bf16": {"problem": "n=3,c=3,k=16,h=10,w=10,y=3,x=3,padding=1,dtype=bf16"},
    # 250 -> 256 and 1036 -> 1040 (130 vectors a row), x and dy in one launch; dW scattered back
    "wide_bf16": {"problem": "n=1,c=250,k=1036,h=3,w=3,y=1,x=1,dtype=bf16"},
    "grouped_bf16": {"problem": "n=2,c=36,k=44,g=2,h=6,w=6,y=3,x=3,padding=1,dtype=bf16"},
    "fp16": {"problem": "n=2,c=13,k=7,h=5,w=7,y=3,x=3,padding=1,dtype=fp16"},
    "bf16_dw_fp32": {"problem": "n=2,c=20,k=12,h=6,w=6,y=3,x=3,padding=1,dtype=bf16,dw_dtype=fp32"},
    "both_fp32": {"problem": UNALIGNED.describe()},
    "only_c_fp32": {"problem": ONLY_C.describe()},
    "only_k_fp32": {"problem": ONLY_K.describe()},  # dW's rows aligned, K's padding rows dropped
    "grouped_fp32": {"problem": GROUPED.describe()},
    # one launch, two copies in either order: a scatter in slot 0 and in slot 1
    "mix_scatter_first": {"problem": "n=2,c=36,k=44,g=2,h=6,w=6,y=3,x=3,padding=1,dtype=bf16", "mix": ["dw", "dy"]},
    "mix_scatter_second": {"problem": "n=2,c=250,k=16,h=3,w=5,y=3,x=3,padding=1,dtype=fp16", "mix": ["x", "dw"]},
}


def test_pad_kernel_through_the_interpreter():
    import json
    import os
    import subprocess

    cases = list(PAD_CASES.values())
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(Path(__file__).parents[1]))
    proc = subprocess.run([sys.executable, "-c", INTERP], input=json.dumps(cases), capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = dict(zip(PAD_CASES, json.loads(proc.stdout.strip().splitlines()[-1])))
    seen = set()
    for cid, r in res.items():
        p = parse_problem(PAD_CASES[cid]["problem"])
        pad = channel_padding(p)
        ops = PAD_CASES[cid].get("mix") or [c.operand for c in pad.copies]
        assert set(r) - {"launches", "grids"} == set(ops), cid
        for op in ops:
            v = r[op]
            assert v["equal"] and v["guards"], (cid, op, v)
            seen.add((p.dtype if op != "dw" else p.dw_dtype, v["scatter"]))
        if "mix" not in PAD_CASES[cid]:
            assert r["launches"] == [list(pl.operands) for pl in pad.launches], cid
    # every dtype gathered; scatter of the half dtypes and fp32
    assert {d for d, sc in seen if not sc} == {"bf16", "fp16", "fp32"}
    assert {d for d, sc in seen if sc} == {"bf16", "fp16", "fp32"}
    assert res["wide_bf16"]["launches"] == [["x", "dy"], ["dw"]] and res["narrow_bf16"]["launches"] == [["x"], ["dw"]]
    assert res["narrow_bf16"]["x"]["rows"] % (2048 // 8) and res["narrow_bf16"]["x"]["programs"] == 2


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_pad_kernel_sm90_gathers_whole_vectors_and_divides_per_vector_or_row(dtype):
    """The sm_90 object: 16-byte stores of the gather, element-wide coalesced loads and stores of
    the scatter (its destination rows are unaligned), no shared memory (no layout conversion
    through it), no local memory, and row divisions per gather vector and per scatter row (two
    rows of a thread's 16 elements), not per element."""
    import re
    import warnings

    from skwgrad.abi.padding import PAD_BLOCK, PAD_SCATTER_COLS, PAD_WARPS
    from skwgrad.aot.compile import compile_spec

    warnings.filterwarnings("ignore")
    md = compile_spec(pad_spec(dtype), "sm_90", keep_asm=True).metadata
    ptx = md["_asm"]["ptx"]
    assert re.search(r"st\.global(\.\w+)*\.v4\.b32", ptx)
    assert md["shared"] == 0 and md["stack_bytes"] == 0 and ".shared" not in ptx
    threads = PAD_WARPS * 32
    gather_vectors = PAD_BLOCK // vector_width(dtype) // threads  # per thread per copy
    scatter_elements = PAD_BLOCK // threads
    scatter_rows = (PAD_BLOCK // PAD_SCATTER_COLS) // PAD_WARPS  # a warp per row of the tile
    divs = len(re.findall(r"\bdiv\.[us]32\b", ptx))
    # (LLVM may merge the two copy slots' bodies; either way far fewer than one per element)
    assert gather_vectors + scatter_rows <= divs <= 2 * (gather_vectors + 2 * scatter_rows + 2) < 2 * scatter_elements