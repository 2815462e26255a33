"""``skwgrad run-from-cache`` through the fake backend and cache: table, JSON, poisoning, exit
codes, and the compile-all command when nothing matches."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_launcher_fakes as F  # noqa: E402

from skwgrad.cli import main  # noqa: E402

PROBLEM = "n=2,c=16,k=16,h=12,w=12,y=3,x=3,padding=1,dtype=fp32"


@pytest.fixture
def env(monkeypatch):
    return F.fake_gpu_for_cli(monkeypatch)


def run(*args):
    return CliRunner().invoke(main, ["run-from-cache", *args], catch_exceptions=False)


def test_runs_the_selected_kernel_verifies_and_writes_json(env, tmp_path):
    be, cache = env
    out = tmp_path / "r.json"
    r = run("--problem", PROBLEM, "--verify", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert "Fake sm_90" in r.output and "yes" in r.output
    doc = json.loads(out.read_text())
    assert doc["arch"] == "sm_90" and doc["compute_units"] == 8 and doc["device"] == "Fake sm_90" and doc["date"]
    (row,) = doc["rows"]
    assert row["ok"] is True and row["rel_err"] < row["tol"] and row["problem"].startswith("n=2,c=16")
    assert row["kernel"] in r.output
    # dW and the whole workspace were poisoned (0xFF) before the launch.
    poison = [m for m in be.memsets if m[1] == 0xFF]
    assert any(m[2] == 16 * 16 * 9 * 4 for m in poison), "dW not poisoned"
    if row["workspace_bytes"]:
        assert any(m[2] == row["workspace_bytes"] for m in poison), "workspace not poisoned"


def test_all_candidates_and_mode_filters(env, tmp_path):
    out = tmp_path / "r.json"
    r = run("--problem", PROBLEM, "--all-candidates", "--out", str(out))
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())["rows"]
    kinds = {(x["family"], x["mode"], x["variant"]) for x in rows}
    for m in ("dp_sk", "persistent"):
        for red in ("linear", "tree", "atomic", "workspace"):
            assert ("wgrad_sk", m, red) in kinds
    for v in ("direct", "atomic", "two_stage"):
        assert ("wgrad", "splitk", v) in kinds
    assert all(x["ok"] for x in rows)
    r = run("--problem", PROBLEM, "--streamk", "persistent", "--streamk-reductions", "tree,atomic", "--out", str(out))
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())["rows"]
    assert {(x["mode"], x["variant"]) for x in rows} == {("persistent", "tree"), ("persistent", "atomic")}
    r = run("--problem", PROBLEM, "--streamk", "off", "--all-candidates", "--out", str(out))
    assert {x["family"] for x in json.loads(out.read_text())["rows"]} == {"wgrad"}
    r = run("--problem", PROBLEM, "--streamk", "dp_sk", "--streamk-ctas", "3", "--streamk-reductions", "linear", "--out", str(out))
    (row,) = json.loads(out.read_text())["rows"]
    assert row["pool"] == 3 and row["sk_ctas"] == 3


def test_bench_columns(env, tmp_path):
    out = tmp_path / "r.json"
    r = run("--problem", PROBLEM, "--bench", "--iters", "5", "--warmup", "1", "--baseline", "cudnn", "--out", str(out))
    assert r.exit_code == 0, r.output
    (row,) = json.loads(out.read_text())["rows"]
    assert row["us"] > 0 and row["tflops"] > 0
    assert "rel_err" not in row  # --bench alone does not verify
    import torch

    if not torch.cuda.is_available():
        assert "cudnn_note" in row and "cuDNN us" in r.output
    assert run("--problem", PROBLEM, "--baseline", "cudnn").exit_code != 0  # needs --bench


def test_no_matching_kernel_prints_the_compile_all_command_and_fails(env):
    r = run("--problem", "n=2,c=16,k=16,d=3,h=6,w=6,z=3,y=3,x=3,padding=1,dtype=fp32", "--verify")
    assert r.exit_code == 1
    assert "skwgrad compile-all --arch sm_90 --problem" in r.output and "dtype=fp32" in r.output
    assert "--cache /fake/cache" in r.output


def test_another_arch_is_refused(env):
    r = run("--problem", PROBLEM, "--arch", "gfx942")
    assert r.exit_code == 2 and "sm_90" in r.output


def test_a_wrong_kernel_fails_verification(env, monkeypatch):
    monkeypatch.setattr(F, "emulate", lambda *a, **k: None)  # kernels that write nothing: poisoned dW stays NaN
    r = run("--problem", PROBLEM, "--streamk", "off", "--streamk-reductions", "direct")
    assert r.exit_code == 1
    assert "NO" in r.output and "inf" in r.output


def test_corpus(env, tmp_path):
    csv = tmp_path / "c.csv"
    csv.write_text(
        "name,n,in_channels,out_channels,groups,d,h,w,z,y,x,stride,padding,dilation,dtype,regime\n"
        "tiny_dense,2,8,8,1,1,8,8,1,3,3,1,1,1,fp32,few\n"
        "tiny_grouped,2,8,8,2,1,8,8,1,3,3,2,1,1,fp32,grouped\n"
    )
    out = tmp_path / "r.json"
    r = run("--corpus", str(csv), "--out", str(out))
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())["rows"]
    assert [x["name"] for x in rows] == ["tiny_dense", "tiny_grouped"] and all(x["ok"] for x in rows)
    assert run().exit_code != 0  # neither --problem nor --corpus


def test_tune_remembers_the_fastest_and_auto_then_runs_it(env, tmp_path):
    be, cache = env
    out = tmp_path / "r.json"
    r = run("--problem", PROBLEM, "--tune", "--verify", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert "tuned" in r.output
    from skwgrad.abi.conv import parse_problem
    from skwgrad.launcher.select import problem_key

    best = cache.tuned(be.arch, be.compute_units, problem_key(parse_problem(PROBLEM)))
    assert best is not None and best["us"] > 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["ok"] and row["key"] == best["key"]  # auto ran the remembered kernel


def test_calibrate_fits_the_model_stores_it_and_selection_ranks_by_it(env, tmp_path):
    be, cache = env
    out = tmp_path / "cal.json"
    probs = ["n=2,c=16,k=16,h=12,w=12,y=3,x=3,padding=1,dtype=fp32", "n=4,c=32,k=16,h=16,w=16,y=3,x=3,padding=1,dtype=fp32",
             "n=1,c=16,k=32,h=20,w=20,y=1,x=1,dtype=fp32"]  # fmt: skip
    args = ["calibrate", "--warmup", "1", "--iters", "2", "--out", str(out)]
    for p in probs:
        args += ["--problem", p]
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["stored"] is True and doc["samples"] == sum(1 for x in doc["rows"] if "us" in x and x["family"] in ("wgrad", "wgrad_sk"))
    assert len(doc["problems"]) == 3 and all(p["tuned"]["us"] > 0 for p in doc["problems"])
    assert {x["problem"] for x in doc["rows"]} == {p["problem"] for p in doc["problems"]}
    assert all(x["spec"]["family"] == x["family"] for x in doc["rows"])
    model = cache.cost_model("sm_90", 8)
    assert model is not None and model.source == "cache" and model.samples == doc["samples"]
    assert list(model.constants) == doc["model"]["constants"]
    # the stored model is what selection now ranks by, for a problem that was never timed
    from skwgrad.abi.conv import parse_problem
    from skwgrad.launcher import select as S

    fresh = parse_problem("n=3,c=16,k=16,h=9,w=9,y=3,x=3,padding=1,dtype=fp32")
    ch = S.choose(fresh, cache, arch="sm_90", cus=8, use_tuned=False)
    assert ch.reason.startswith("model (cache)")
    # --dry-run stores nothing
    cache2_before = cache.cost_model("sm_90", 8)
    r = CliRunner().invoke(main, ["calibrate", "--problem", probs[0], "--dry-run", "--warmup", "0", "--iters", "1", "--json"],
                           catch_exceptions=False)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert cache.cost_model("sm_90", 8) == cache2_before
