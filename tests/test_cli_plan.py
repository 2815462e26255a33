"""`skwgrad plan`: the offline launch report, through click's CliRunner."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from skwgrad.cli import main

PROBLEM = "n=32,c=64,k=64,h=56,w=56,y=3,x=3,stride=1,padding=1"


def run(*args):
    return CliRunner().invoke(main, ["plan", *args])


def plan_json(*args):
    r = run(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_plan_spec_example_streams_k():
    r = plan_json("--problem", PROBLEM, "--arch", "gfx942", "--reduction", "linear", "--tile", "128x128x64")
    part = r["partition"]
    # M = 64, Ng = 9 * 64 = 576, Kg = 32 * 56 * 56: 1 x 5 tiles of 128x128, 1568 iterations each.
    assert r["tiling"]["num_tiles"] == math.ceil(64 / 128) * math.ceil(576 / 128) == 5
    assert r["tiling"]["iters_per_tile"] == math.ceil(32 * 56 * 56 / 64) == 1568
    assert part["sk_ctas"] > 0
    # linear waits: the searched pools are whole CTAs per gfx942 CU, at most the co-resident ones
    assert part["pool"] % 304 == 0 and part["pool"] <= r["selection"]["occupancy"] * 304
    # The 128x128x64 sweep kernel has 8 warps: 8 x 64 lanes publish one flag each (the seed review's
    # finding: flags sized per CTA while the kernel uses one per thread).
    k = r["kernel"]
    assert (k["family"], k["variant"], k["tile"], k["num_warps"], k["flags_per_cta"]) == ("wgrad_sk", "linear", "128x128x64", 8, 512)
    assert r["grid"] == part["dp_tiles"] + part["sk_ctas"]
    assert r["ks_count"] == 1
    assert r["arch"]["name"] == "gfx942" and r["arch"]["compute_units"] == 304
    assert r["gemm"] == {"groups": 1, "M": 64, "N": 576, "K": 100352, "output": "56x56", "gflop": 7.399}
    assert r["problem"] == PROBLEM + ",dilation=1,dtype=bf16"
    ws = r["workspace"]
    assert [x["name"] for x in ws["regions"]] == ["flags", "partials"]
    assert [x["arena"] for x in ws["regions"]] == ["zeroed", "scratch"]
    assert not ws["zero_dw"] and ws["stage2_replicas"] == 0
    assert ws["regions"][0]["nbytes"] == part["sk_ctas"] * 512 * 4  # the flags the kernel really publishes
    assert ws["zeroed_bytes"] == ws["regions"][0]["nbytes"] and ws["scratch_bytes"] == ws["regions"][1]["nbytes"]
    assert ws["regions"][1]["nbytes"] >= 4 * 128 * 128 * part["sk_ctas"]


def test_plan_kernarg_table():
    r = plan_json("--problem", PROBLEM, "--arch", "gfx942", "--reduction", "linear", "--tile", "128x128x64")
    args = {a["name"]: a for a in r["kernargs"]["args"]}
    assert args["dy"]["offset"] == 0 and args["dy"]["value"] == "<dy>"
    assert args["ws_ptr"]["value"] == "0 (reserved)" and args["ws_bytes"]["value"] == "0 (reserved)"
    assert "sk_epoch" not in args  # flags are zero at rest: no per-launch value
    assert args["Ho"]["value"] == 56 and args["pad_h"]["value"] == 1 and args["ks_count"]["value"] == 1
    assert args["sk_ctas"]["value"] == r["partition"]["sk_ctas"]
    assert args["sk_flags"]["offset"] > args["ks_count"]["offset"]
    last = r["kernargs"]["args"][-1]
    assert r["kernargs"]["bytes"] >= last["offset"] + last["size"]


def test_plan_text_output():
    r = run("--problem", PROBLEM, "--arch", "gfx942", "--reduction", "linear")
    assert r.exit_code == 0, r.output
    assert "partition pool=" in r.stdout and "sk_ctas=" in r.stdout and "predicted" in r.stdout and "next" in r.stdout
    assert "kernargs" in r.stdout and "sk_tree_rounds" in r.stdout and "flags@zeroed" in r.stdout


def test_plan_streamk_off():
    r = plan_json("--problem", PROBLEM, "--arch", "gfx942", "--streamk", "off", "--ks-count", "7", "--tile", "128x128x64",
                  "--reduction", "two_stage")  # the two-stage geometry is what this test reads
    assert r["partition"] is None
    assert r["kernel"]["family"] == "wgrad" and r["kernel"]["variant"] == "two_stage" and r["kernel"]["mode"] == ""
    ks_iters = math.ceil(1568 / 7)
    assert r["ks_iters"] == ks_iters and r["ks_count"] == math.ceil(1568 / ks_iters)
    assert r["grid"] == 5 * r["ks_count"]
    assert r["workspace"]["stage2_replicas"] == r["ks_count"]
    names = [a["name"] for a in r["kernargs"]["args"]]
    assert names[-1] == "ks_count" and not any(n.startswith("sk_") for n in names)
    text = run("--problem", PROBLEM, "--streamk", "off", "--ks-count", "1")
    assert text.exit_code == 0 and "split-K   ks_count=1" in text.stdout


@pytest.mark.parametrize("reduction", ["linear", "tree", "workspace"])
@pytest.mark.parametrize("arch, cus", [("gfx942", 304), ("gfx950", 256), ("sm_90", 132)])
def test_plan_pool_is_searched_per_arch(reduction, arch, cus):
    r = plan_json("--problem", PROBLEM, "--arch", arch, "--reduction", reduction, "--streamk", "persistent")
    pool = r["partition"]["pool"]
    most = r["selection"]["occupancy"] if reduction != "workspace" else 4  # waiting reductions: co-resident only
    assert pool % cus == 0 and cus <= pool <= most * cus
    assert r["grid"] <= pool
    alts = r["selection"]["alternatives"]
    assert alts[0]["pool"] == pool and [a["predicted_us"] for a in alts] == sorted(a["predicted_us"] for a in alts)


def test_plan_explicit_pool_and_atomic_dw():
    r = plan_json("--problem", PROBLEM + ",dw_dtype=fp32", "--reduction", "atomic", "--streamk-ctas", "12")
    assert r["partition"]["pool"] == 12 and r["workspace"]["zero_dw"]


def test_plan_3d_problem():
    r = plan_json("--problem", "n=2,c=8,k=16,d=8,h=9,w=10,z=3,y=3,x=3,padding=1", "--tile", "16x64x32")
    assert r["gemm"]["output"] == "8x9x10"
    assert r["gemm"]["N"] == 27 * 8 and r["gemm"]["K"] == 2 * 8 * 9 * 10


def _refused(r, *needles):
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert isinstance(r.exception, SystemExit)  # a clean exit, not an escaped exception
    for n in needles:
        assert n in r.output, r.output


@pytest.mark.parametrize(
    "problem, needle",
    [
        ("n=32,c=64,k=64,h=56,w=56,y=3", "problem is missing x"),
        ("n=32,c=64,k=64,h=56,w=56,y=3,x=3,q=1", "unknown problem key(s) q"),
        ("n=32,c=63,k=64,g=2,h=56,w=56,y=3,x=3", "not divisible by groups=2"),
        ("n=32,c=64,k=64,h=2,w=2,y=3,x=3", "empty output in H"),
        ("n=32,c=64,k=64,h=56,w=56,y=3,x=3,dtype=int8", "dtype 'int8' is not supported"),
        ("garbage", "is not key=value"),
    ],
)
def test_plan_bad_problem_exits_2(problem, needle):
    r = run("--problem", problem)
    _refused(r, "error:", needle)
    assert r.stdout == ""
    assert r.stderr.startswith("error: ")


def test_plan_unknown_arch():
    r = run("--problem", PROBLEM, "--arch", "gfx900")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "'gfx900' is not one of" in r.output and "gfx942" in r.output and "sm_90" in r.output


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--streamk-ctas", "0"], "streamk_ctas must be in [1, 2147483647] or -1"),
        (["--streamk-ctas", "-5"], "streamk_ctas must be in [1, 2147483647] or -1"),
        (["--streamk", "dp_sk", "--reduction", "two_stage"], "stream-K reduction 'two_stage' is not one of"),
        (["--streamk", "off", "--reduction", "tree"], "wgrad epilogue 'tree' is not one of"),
        (["--streamk", "off", "--ks-count", "5000", "--tile", "128x128x64"], "ks_count must be in [1, 1568]"),
        (["--streamk", "off", "--reduction", "direct", "--ks-count", "2"], "the direct split-K epilogue stores dW once"),
    ],
)
def test_plan_refusals(args, needle):
    _refused(run("--problem", PROBLEM, *args), "error:", needle)


@pytest.mark.parametrize(
    "args",
    [
        ["--problem", PROBLEM, "--tile", "128x128"],
        ["--problem", PROBLEM, "--tile", "axbxc"],
        ["--problem", PROBLEM, "--tile", "0x128x64"],
        ["--problem", PROBLEM, "--streamk", "both"],
        ["--problem", PROBLEM, "--streamk-ctas", "many"],
        [],  # --problem is required
    ],
)
def test_plan_usage_errors(args):
    r = run(*args)
    assert r.exit_code == 2
    assert "Traceback" not in r.output
    assert "Error" in r.output  # click's usage error
