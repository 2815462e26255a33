"""``compile-all --corpus / --problem``: the corpus-driven sweep is exactly what selection can choose.

The reference is the launcher itself: a fake cache holding the *whole* preset, asked through
``skwgrad.launcher.select`` (``candidates`` then ``widest``) which kernels it would consider for
each problem. Nothing here compiles.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
import test_launcher_fakes as F  # noqa: E402

from skwgrad.abi.padding import padding_if_possible  # noqa: E402
from skwgrad.abi.conv import ConvProblem, read_corpus  # noqa: E402
from skwgrad.abi.narrow import selectable, widest  # noqa: E402
from skwgrad.aot.sweep import counts, stage2_spec, sweep, sweep_for_problems  # noqa: E402
from skwgrad.cli import main  # noqa: E402
from skwgrad.launcher import select  # noqa: E402

CORPUS = Path(__file__).parent / "data" / "wgrad_shapes.csv"


def random_problem(rng: random.Random) -> ConvProblem:
    dtype = rng.choice(("bf16", "fp16", "fp32"))
    sd = rng.choice((2, 2, 3))
    g = rng.choice((1, 1, 1, 2, 32))
    depthwise = g == 32 and rng.random() < 0.7
    c = 1 if depthwise else rng.choice((1, 2, 3, 4, 6, 8, 12, 16, 60, 64, 100, 256))
    k = 1 if depthwise else rng.choice((1, 2, 4, 8, 24, 60, 64, 100, 128))
    pointwise = rng.random() < 0.3
    f = 1 if pointwise else rng.choice((1, 3, 5, 7))
    stride = 1 if pointwise else rng.choice((1, 2))
    pad = 0 if pointwise else rng.choice((0, f // 2))
    kw = {}
    if sd == 3:
        kw = {"di": rng.choice((4, 8)), "z": 1 if pointwise else rng.choice((1, 3))}
    dw = rng.choice(("", "fp32"))
    prec = rng.choice(("ieee", "tf32")) if dtype == "fp32" else ""
    return ConvProblem(
        n=rng.choice((1, 8, 32)), c=c, k=k, hi=rng.choice((7, 14, 56)), wi=rng.choice((7, 14, 56)), y=f, x=f, g=g,
        stride=(1, stride, stride) if sd == 2 else (stride,) * 3, pad_lo=(0, pad, pad) if sd == 2 else (pad,) * 3,
        pad_hi=(0, pad, pad) if sd == 2 else (pad,) * 3, dtype=dtype, dw_dtype=dw, spatial_dims=sd, precision=prec, **kw,
    )  # fmt: skip


def launcher_view(preset: str, arch: str, problems, **filters) -> set:
    """What the launcher would consider for each problem with the whole preset cached: the main
    kernels ``select.widest(select.candidates(...))`` keeps, for the problem and for its
    channel-padded problem with the pad kernels (when cached), and the Stage-2 of every dW dtype a
    two_stage/workspace one among them writes."""
    cache = F.FakeCache()
    for it in sweep(preset, arches=[arch], **filters):
        cache.add(it.spec, arch)
    out = set()
    for p in problems:
        kept = select.widest(select.candidates(cache, arch, p), p)
        out |= {k.spec for k in kept}
        padding = padding_if_possible(p)  # and the channel-padded route, as rank_choices takes it
        if padding is not None and select.pad_kernels(cache, arch, padding) is not None:
            padded = select.widest(select.candidates(cache, arch, padding.padded), padding.padded)
            if padded:
                out |= {k.spec for k in padded} | {k.spec for k in select.pad_kernels(cache, arch, padding)}
    out |= {stage2_spec(s.dw_dtype) for s in out if s.variant in ("two_stage", "workspace")}
    return out


@pytest.mark.parametrize("arch, seed", [("sm_90", 1), ("gfx942", 2), ("gfx950", 3)])
def test_corpus_sweep_is_what_the_launcher_can_choose_on_random_problems(arch, seed):
    rng = random.Random(seed)
    problems = [random_problem(rng) for _ in range(40)]
    dtypes = ["bf16", "fp16", "fp32"]
    ps = sweep_for_problems(problems, "default", arches=[arch], dtypes=dtypes)
    got = {it.spec for it in ps.items}
    want = launcher_view("default", arch, problems, dtypes=dtypes)
    assert got == want, (len(got - want), len(want - got))
    # and one problem at a time: nothing more, nothing less, per problem
    for p in problems[:8]:
        one = {it.spec for it in sweep_for_problems([p], "default", arches=[arch], dtypes=dtypes).items}
        assert one == launcher_view("default", arch, [p], dtypes=dtypes)
        # the launcher's own auto choice is among them
        cache = F.FakeCache()
        for s in one:
            cache.add(s, arch)
        try:
            c = select.choose(p, cache, arch=arch, cus=132)
        except select.NoKernelError:
            assert arch == "gfx950" and p.precision == "tf32"  # gfx950 has no TF32: nothing admits it
            continue
        assert c.spec in one and (c.stage2 is None or c.stage2.spec in one)


def test_corpus_sweep_respects_filters_and_smoke():
    rng = random.Random(7)
    problems = [random_problem(rng) for _ in range(30)]
    for preset, filters in (("default", {"streamk": "off"}), ("default", {"streamk": "dp_sk", "reductions": "tree,workspace"}),
                            ("smoke", {}), ("default", {"tiles": "64x64x32,128x128x64w8s2"})):  # fmt: skip
        got = {it.spec for it in sweep_for_problems(problems, preset, arches=["sm_90"], dtypes=["bf16", "fp16", "fp32"], **filters).items}
        assert got == launcher_view(preset, "sm_90", problems, dtypes=["bf16", "fp16", "fp32"], **filters), (preset, filters)


def test_corpus_rows_each_get_a_kernel_and_the_sweep_is_small():
    rows = [(n, p) for n, _, p in read_corpus(CORPUS)]
    ps = sweep_for_problems(rows, "default", arches=["gfx942", "gfx950"])
    assert not ps.unserved
    assert all(ps.per_problem[(i, a)] > 0 for i in range(len(rows)) for a in ("gfx942", "gfx950"))
    full_default = sweep("default", arches=["gfx942", "gfx950"])
    assert set(ps.items) <= set(full_default) and len(ps.items) < len(full_default) / 3
    broad = sweep_for_problems(rows, "broad", arches=["gfx942", "gfx950"])
    assert not broad.unserved and len(broad.items) < len(sweep("broad", arches=["gfx942", "gfx950"])) / 10
    # every row: the launcher's choice from a cache of exactly the corpus sweep
    for arch in ("gfx942", "gfx950"):
        cache = F.FakeCache()
        for it in ps.items:
            if it.arch == arch:
                cache.add(it.spec, arch)
        for _, p in rows:
            assert select.choose(p, cache, arch=arch, cus=304).spec.family in ("wgrad", "wgrad_sk", "dwconv", "grouped")


def test_narrow_rule_by_hand():
    """The rule written out: per family the widest (vec_c * vec_k, vec_c), pointwise first."""
    p = ConvProblem(n=4, c=64, k=60, hi=8, wi=8, y=1, x=1)  # pointwise, K % 8 != 0
    specs = [s.spec for s in sweep("default", arches=["sm_90"], dtypes=["bf16"], tiles="64x128x64") if s.spec.family != "stage2"]
    kept = selectable(specs, p)
    fams = {s.family for s in kept}
    assert fams == {"wgrad"}  # stream-K is built at (W, W) only in default: K = 60 admits none
    split = [s for s in kept if s.family == "wgrad"]
    assert {(s.vec_c, s.vec_k, s.pointwise) for s in split} == {(4, 4, True)}  # (8, 4) is not built; (4, 4) beats (8, 1)
    broad = [s.spec for s in sweep("broad", arches=["sm_90"], dtypes=["bf16"], tiles="64x128x64") if s.spec.family != "stage2"]
    sk = [s for s in selectable(broad, p) if s.family == "wgrad_sk"]
    assert sk and len({(s.vec_c, s.vec_k) for s in sk}) == 1 and all(p.k % s.vec_k == 0 for s in sk)  # the widest broad has
    assert widest([], p) == []


def test_cli_corpus_dry_run_and_json(tmp_path):
    r = CliRunner().invoke(main, ["compile-all", "--corpus", str(CORPUS), "--arch", "gfx942", "--arch", "gfx950", "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    rows = [(n, p) for n, _, p in read_corpus(CORPUS)]
    items = sweep_for_problems(rows, "default", arches=["gfx942", "gfx950"]).items
    assert out["version"] == 1 and out["total"] == len(items) and out["dry_run"] and out["unserved"] == []
    assert sum(c["kernels"] for c in out["counts"]) == len(items)
    assert {(c["arch"], c["dtype"], c["family"]): c["kernels"] for c in out["counts"]} == dict(counts(items))
    r = CliRunner().invoke(main, ["compile-all", "--corpus", str(CORPUS), "--arch", "gfx942", "--dry-run"])
    n942 = sum(it.arch == "gfx942" for it in items)
    assert r.exit_code == 0 and f"total: {n942} kernels" in r.output and "for 24 problems" in r.output


def test_cli_problem_option_and_bad_input():
    text = "n=32,c=64,k=64,h=56,w=56,y=3,x=3,stride=1,padding=1"
    r = CliRunner().invoke(main, ["compile-all", "--problem", text, "--problem", text + ",dtype=fp16", "--arch", "sm_90", "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert {c["dtype"] for c in out["counts"]} == {"bf16", "fp16"} and out["selection"]["problems"] == 2
    r = CliRunner().invoke(main, ["compile-all", "--problem", "n=1,c=2", "--dry-run", "--json"])
    assert r.exit_code == 2
    err = json.loads(r.stdout)["error"]
    assert err["type"] == "ProblemError" and "missing" in err["message"]
    bad = CliRunner().invoke(main, ["compile-all", "--problem", "n=1,c=4,k=4,h=4,w=4,y=1,x=1,dtype=fp32,precision=tf32", "--arch", "gfx950", "--dry-run"])
    assert bad.exit_code == 1 and "no kernel of the selection admits 1" in bad.output


def test_compare_presets_view_restricts_tuning_to_the_presets_kernels():
    """benchmarks/compare_presets.py (the H200 check of the pruned default) tunes through a view
    of the cache that holds one preset's kernels only."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("compare_presets", Path(__file__).parents[1] / "benchmarks" / "compare_presets.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    c = F.full_cache(dims=(2,), vecs=((8, 8),))
    p = ConvProblem(n=8, c=64, k=64, hi=56, wi=56, y=3, x=3, pad_lo=(0, 1, 1), pad_hi=(0, 1, 1))
    keep = {e.key for e in c.find("sm_90") if e.spec.family != "wgrad_sk" or e.spec.mode == "dp_sk"}
    rows = select.tune(p, F.FakeBackend(cus=8, max_active=2), mod._View(c, keep), remember=False, warmup=1, iters=2)
    assert rows and {r["key"] for r in rows} <= keep and all(r["mode"] != "persistent" for r in rows)
    assert c.tuned("sm_90", 8, select.problem_key(p)) is None


def test_a_corpus_it_has_never_seen_gets_a_kernel_for_every_row():
    """Shapes that none of the presets' choices were made from (ViT patch embedding, EfficientNet
    depthwise 5x5 s2, a 1x31 conformer conv, 3-D 1x1x1, K=3 outputs, autocast's fp32 dW, ...)."""
    rows = [(n, p) for n, _, p in read_corpus(CORPUS.parent / "wgrad_shapes_unseen.csv")]
    assert len(rows) == 14
    for arch in ("gfx942", "gfx950", "sm_90"):
        ps = sweep_for_problems(rows, "default", arches=[arch])
        # gfx950 has no TF32 matrix instructions: only the tf32 row goes without (nothing could build it)
        assert ps.unserved == ([("fp32_tf32_3x3_64", "gfx950")] if arch == "gfx950" else []), ps.unserved
        cache = F.FakeCache()
        for it in ps.items:
            cache.add(it.spec, arch)
        for name, p in rows:
            if (name, arch) in ps.unserved:
                continue
            c = select.choose(p, cache, arch=arch, cus=132)
            assert c.spec.family in ("wgrad", "wgrad_sk", "dwconv", "grouped", "wgrad_tma") and (c.stage2 is None or c.stage2.spec.dw_dtype == p.dw_dtype)
