"""One CLI surface: --json documents checked against schemas, exit codes 0/1/2/3, validated
choices and comma lists, the problem parser's bad-input matrix, plan refusing what the
launcher would, plan's auto rule equal to the launcher's, logging, and the output helpers."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_launcher_fakes as F  # noqa: E402

from skwgrad import clikit  # noqa: E402
from skwgrad.abi import plan_report as PR  # noqa: E402
from skwgrad.abi.arch import get_arch  # noqa: E402
from skwgrad.launcher import offline as OFF  # noqa: E402
from skwgrad.abi.conv import parse_problem  # noqa: E402
from skwgrad.abi.launch import launch_geometry  # noqa: E402
from skwgrad.cli import main  # noqa: E402
from skwgrad.errors import BackendError, ProblemError  # noqa: E402
from skwgrad.launcher import backends as B  # noqa: E402
from skwgrad.launcher import select  # noqa: E402

P = "n=32,c=64,k=64,h=56,w=56,y=3,x=3,padding=1"
SMALL = "n=2,c=16,k=16,h=12,w=12,y=3,x=3,padding=1,dtype=fp32"


def invoke(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env)


# ---------------------------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------------------------
INT, STR, BOOL, NUM, NULL = {"type": "integer"}, {"type": "string"}, {"type": "boolean"}, {"type": "number"}, {"type": "null"}


def obj(props: dict, required=None, extra=True) -> dict:
    return {"type": "object", "properties": props, "required": list(required if required is not None else props),
            "additionalProperties": extra}  # fmt: skip


def top(props: dict, required=None) -> dict:
    s = obj({"version": {"const": 1}, **props}, ["version", *(required if required is not None else props)])
    return s


PLAN_SCHEMA = top({
    "problem": STR,
    "arch": obj({"name": {"enum": ["gfx942", "gfx950", "sm_90"]}, "compute_units": INT, "part": STR}),
    "kernel": obj({"family": {"enum": ["wgrad", "wgrad_sk", "grouped", "dwconv"]}, "variant": STR, "mode": STR,
                   "tile": {"type": "string", "pattern": r"^\d+x\d+x\d+$"}, "label": STR, "num_warps": INT, "flags_per_cta": INT}),
    "selection": obj({"streamk": STR, "reduction": STR, "reason": STR, "predicted_us": {"anyOf": [NUM, NULL]},
                      "alternatives": {"type": "array", "minItems": 1, "items": obj({"label": STR, "family": STR, "pool": INT, "ks_count": INT,
                                                                                     "predicted_us": {"anyOf": [NUM, NULL]}})},
                      "rejected": {"type": "array", "items": STR}}),
    "gemm": obj({"groups": INT, "M": INT, "N": INT, "K": INT, "output": STR, "gflop": NUM}),
    "tiling": obj({"bm": INT, "bn": INT, "bk": INT, "num_tiles": INT, "iters_per_tile": INT}, ["num_tiles", "iters_per_tile"]),
    "partition": {"anyOf": [NULL, obj({"pool": INT, "sk_ctas": INT, "dp_tiles": INT}, ["pool", "sk_ctas", "dp_tiles"])]},
    "grid": INT, "ks_count": INT, "ks_iters": INT,
    "workspace": obj({"zeroed_bytes": INT, "scratch_bytes": INT,
                      "regions": {"type": "array", "items": obj({"name": STR, "arena": {"enum": ["zeroed", "scratch"]}, "offset": INT, "nbytes": INT},
                                                                ["name", "arena", "offset", "nbytes"])},
                      "zero_dw": BOOL, "stage2_replicas": INT, "stage2_reset": BOOL, "stage2_grid": INT},
                     ["zeroed_bytes", "scratch_bytes", "regions", "zero_dw", "stage2_replicas", "stage2_reset", "stage2_grid"]),
    "kernargs": obj({"bytes": INT, "args": {"type": "array", "minItems": 1, "items": obj(
        {"name": STR, "offset": INT, "size": {"enum": [4, 8]}, "value": {"anyOf": [{"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}, STR]}})}}),
})  # fmt: skip

RUN_ROW = obj({"name": STR, "problem": STR, "gflop": NUM, "kernel": STR, "family": STR, "mode": STR, "reduction": STR,
               "ok": BOOL, "rel_err": {"anyOf": [NUM, NULL]}, "tol": NUM, "error": STR, "us": NUM},
              ["name", "problem"])  # fmt: skip
RUN_SCHEMA = top({
    "date": STR, "device": STR, "arch": STR, "compute_units": INT, "backend": STR, "skwgrad": STR, "commit": STR,
    "cache": STR, "seed": INT, "iters": INT, "warmup": INT, "verify": BOOL, "bench": BOOL,
    "baseline": {"anyOf": [STR, NULL]}, "ok": BOOL, "rows": {"type": "array", "items": RUN_ROW},
})  # fmt: skip

_RUNTIME = obj({"backend": {"enum": ["cuda", "hip"]}, "bindings": obj({"package": STR, "installed": BOOL, "version": {"anyOf": [STR, NULL]}}),
                "driver_library": {"anyOf": [STR, NULL]}, "driver_version": {"anyOf": [STR, NULL]}, "notes": {"type": "array", "items": STR}, "device": {"anyOf": [NULL, obj({"name": STR, "arch": STR, "compute_units": INT}, ["name", "arch", "compute_units"])]},
                "error": {"anyOf": [STR, NULL]}})  # fmt: skip
_COUNTS = obj({"total": INT, "current": INT, "stale": INT, "stale_compiler": INT, "stale_source": INT})
DOCTOR_SCHEMA = top({
    "skwgrad": STR, "python": STR, "platform": STR,
    "environment": {"type": "object", "additionalProperties": {"anyOf": [STR, NULL]}, "required": ["SKWGRAD_CACHE", "SKWGRAD_BACKEND", "SKWGRAD_LOG"]},
    "forced_backend": {"anyOf": [STR, NULL]},
    "runtimes": {"type": "array", "items": _RUNTIME, "minItems": 2},
    "gpu": {"anyOf": [NULL, {"type": "object"}]},
    "identity": obj({"compiler": STR, "source_hash": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}),
    "caches": {"type": "array", "minItems": 1, "items": obj({"role": {"enum": ["user", "system"]}, "path": STR, "source": STR, "exists": BOOL,
                                                                "writable": BOOL, "entries": {"anyOf": [NULL, _COUNTS]}, "error": {"anyOf": [STR, NULL]}})},
    "compiler": obj({"triton": {"anyOf": [STR, NULL]}, "module_present": BOOL, "pinned": STR, "can_build": BOOL, "note": STR}),
    "summary": {"type": "array", "items": STR},
})  # fmt: skip


def validate(text: str, schema: dict) -> dict:
    doc = json.loads(text)  # the whole stdout is one JSON document
    jsonschema.validate(doc, schema)
    assert next(iter(doc)) == "version", "version is the first key"
    return doc


def test_schemas_reject_what_they_should():
    """The schemas can fail: a document without the version key, or with a wrong type."""
    good = json.loads(invoke("plan", "--problem", P, "--json").stdout)
    jsonschema.validate(good, PLAN_SCHEMA)
    for broken in ({k: v for k, v in good.items() if k != "version"}, {**good, "grid": "many"}, {**good, "version": 2}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, PLAN_SCHEMA)


@pytest.mark.parametrize("args", [
    [], ["--reduction", "linear"], ["--streamk", "persistent", "--reduction", "tree"], ["--streamk", "off"],
    ["--streamk", "off", "--ks-count", "7", "--reduction", "atomic", "--arch", "sm_90"],
    ["--arch", "gfx950", "--tile", "64x64x32"],
])  # fmt: skip
def test_plan_json_schema(args):
    problem = P + (",dw_dtype=fp32" if "atomic" in args else "")
    r = invoke("plan", "--problem", problem, *args, "--json")
    assert r.exit_code == 0, r.output
    validate(r.stdout, PLAN_SCHEMA)


def test_doctor_json_schema(tmp_path, monkeypatch):
    monkeypatch.setenv("SKWGRAD_SYSTEM_CACHE", str(tmp_path / "sys"))
    r = invoke("doctor", "--cache", str(tmp_path / "c"), "--json")
    assert r.exit_code == 0, r.output
    doc = validate(r.stdout, DOCTOR_SCHEMA)
    user, system = doc["caches"]
    assert user["path"] == str(tmp_path / "c") and user["source"] == "--cache" and not user["exists"] and user["writable"]
    assert system["role"] == "system" and system["source"] == "SKWGRAD_SYSTEM_CACHE"
    assert not (tmp_path / "c").exists(), "doctor never creates a cache"


def test_doctor_names_where_the_cache_path_came_from(tmp_path, monkeypatch):
    monkeypatch.setenv("SKWGRAD_CACHE", str(tmp_path / "env"))
    doc = validate(invoke("doctor", "--json").stdout, DOCTOR_SCHEMA)
    assert (doc["caches"][0]["path"], doc["caches"][0]["source"]) == (str(tmp_path / "env"), "SKWGRAD_CACHE")
    doc = validate(invoke("doctor", "--json", "--cache", str(tmp_path / "opt")).stdout, DOCTOR_SCHEMA)
    assert (doc["caches"][0]["path"], doc["caches"][0]["source"]) == (str(tmp_path / "opt"), "--cache")


def test_doctor_counts_current_and_stale_entries(tmp_path, monkeypatch):
    from test_cache import SMOKE, fake

    from skwgrad.cache import store

    real = store._identity()
    specs = [s for s in SMOKE if s.family == "wgrad"][:3]
    c = store.Cache(tmp_path / "c")
    # One entry of this build, one of another compiler, one of other kernel sources.
    for spec, identity in zip(specs, [real, ("triton-0.0.1", real[1]), (real[0], "0" * 64)]):
        monkeypatch.setattr(store, "_identity", lambda identity=identity: identity)
        c.put(fake(spec, compiler=identity[0]))
    monkeypatch.setattr(store, "_identity", lambda: real)
    c.close()
    r = invoke("doctor", "--cache", str(tmp_path / "c"), "--json")
    doc = validate(r.stdout, DOCTOR_SCHEMA)
    counts = doc["caches"][0]["entries"]
    assert counts == {"total": 3, "current": 1, "stale": 2, "stale_compiler": 1, "stale_source": 1}
    assert doc["caches"][0]["current_per_arch"] == {"gfx942": 1}
    text = invoke("doctor", "--cache", str(tmp_path / "c"))
    assert text.exit_code == 0 and "1 current / 2 stale" in text.stdout and "other compiler: 1" in text.stdout


@pytest.fixture
def fake_gpu(monkeypatch):
    return F.fake_gpu_for_cli(monkeypatch)


def test_run_from_cache_json_on_stdout_and_out_file(fake_gpu, tmp_path):
    out = tmp_path / "r.json"
    r = invoke("run-from-cache", "--problem", SMALL, "--json", "--out", str(out))
    assert r.exit_code == 0, r.output
    doc = validate(r.stdout, RUN_SCHEMA)  # stdout holds only the document: the device line went to stderr
    assert doc["ok"] is True and doc["rows"][0]["ok"] is True
    assert "Fake sm_90" in r.stderr
    assert json.loads(out.read_text()) == doc
    r = invoke("run-from-cache", "--problem", SMALL, "--all-candidates", "--json")
    assert r.exit_code == 0
    assert len(validate(r.stdout, RUN_SCHEMA)["rows"]) > 5


# ---------------------------------------------------------------------------------------------
# Exit codes
# ---------------------------------------------------------------------------------------------
def test_exit_2_usage(fake_gpu):
    for args in (
        ["plan", "--problem", P, "--arch", "gfx9420"],
        ["plan", "--problem", P, "--streamk", "bogus"],
        ["plan", "--problem", "N=32,c=64,k=64,h=56,w=56,y=3,x=3"],
        ["run-from-cache", "--problem", SMALL, "--arch", "gfx9420"],
        ["run-from-cache", "--problem", SMALL, "--reduction", "lineaer"],
        ["run-from-cache", "--problem", SMALL, "--precision", "fp64"],
        ["run-from-cache", "--problem", SMALL, "--arch", "gfx942"],  # the device is sm_90
        ["run-from-cache", "--problem", SMALL, "--arch", "auto,sm_90"],
        ["run-from-cache"],
        ["--log-level", "loud", "plan", "--problem", P],
        ["no-such-command"],
    ):
        r = invoke(*args)
        assert r.exit_code == 2, (args, r.output)
        assert "Traceback" not in r.output


def test_exit_2_typo_names_the_choices():
    r = invoke("plan", "--problem", P, "--arch", "gfx9420")
    assert "'gfx9420' is not one of" in r.output and "gfx942" in r.output


def test_exit_1_failed_check(fake_gpu, monkeypatch):
    monkeypatch.setattr(F, "emulate", lambda *a, **k: None)  # kernels that write nothing
    r = invoke("run-from-cache", "--problem", SMALL, "--streamk", "off", "--reduction", "direct", "--json")
    assert r.exit_code == 1, r.output
    doc = validate(r.stdout, RUN_SCHEMA)
    assert doc["ok"] is False and doc["rows"][0]["ok"] is False and doc["rows"][0]["rel_err"] is None  # inf -> null
    assert "row(s) failed" in r.stderr


def test_exit_3_no_gpu(monkeypatch):
    def no_gpu(device=None, kind=None):
        raise BackendError("no GPU runtime with a usable device found; skwgrad launches kernels through CUDA or ROCm")

    monkeypatch.setattr(B, "get_backend", no_gpu)
    r = invoke("run-from-cache", "--problem", SMALL)
    assert r.exit_code == 3, r.output
    assert r.stderr.startswith("error: no GPU") and "Traceback" not in r.output


def test_arguments_are_checked_before_the_device(monkeypatch, tmp_path):
    """A CPU box reports the bad argument (2), not "no GPU" (3)."""
    monkeypatch.setattr(B, "get_backend", lambda device=None, kind=None: pytest.fail("device probed before the arguments were checked"))
    for args in (
        ["--problem", "n=1"], ["--problem", SMALL, "--tile", "0x1x1"], ["--problem", SMALL, "--baseline", "cudnn"],
        ["--problem", SMALL, "--streamk-ctas", "3000000000"], ["--problem", SMALL, "--out", str(tmp_path / "no" / "dir" / "r.json")],
    ):  # fmt: skip
        r = invoke("run-from-cache", *args)
        assert r.exit_code == 2, (args, r.output)


def test_exit_3_no_gpu_on_this_machine():
    """The real backends: on a machine with no GPU, run-from-cache exits 3 saying so."""
    try:
        B.reset_backends()
        B.get_backend()
        pytest.skip("a GPU is present")
    except BackendError:
        pass
    r = invoke("run-from-cache", "--problem", SMALL)
    assert r.exit_code == 3 and "no GPU" in r.stderr, r.output


def test_skwgrad_errors_map_to_their_exit_code(monkeypatch):
    """The group's invoke is the one place: each class's exit_code, message on stderr."""
    from skwgrad import errors

    for cls in (errors.ProblemError, errors.AbiError, errors.CacheError, errors.BackendError, errors.CheckFailed, errors.CaptureError):
        def boom(*a, cls=cls, **k):
            raise cls(f"{cls.__name__} happened\x1b[31m")

        monkeypatch.setattr(OFF, "launch_report", boom)
        r = invoke("plan", "--problem", P)
        assert r.exit_code == cls.exit_code, cls
        assert r.stderr == f"error: {cls.__name__} happened\\x1b[31m\n"  # control characters escaped


# ---------------------------------------------------------------------------------------------
# Choices, comma lists, aliases
# ---------------------------------------------------------------------------------------------
def test_arch_comma_list(fake_gpu):
    assert invoke("run-from-cache", "--problem", SMALL, "--arch", "gfx942,sm_90").exit_code == 0
    assert invoke("run-from-cache", "--problem", SMALL, "--arch", "gfx942", "--arch", "sm_90").exit_code == 0
    r = invoke("run-from-cache", "--problem", SMALL, "--arch", "gfx942,gfx950")
    assert r.exit_code == 2 and "is sm_90" in r.output


def test_reduction_comma_list_and_old_spelling(fake_gpu):
    new = invoke("run-from-cache", "--problem", SMALL, "--streamk", "persistent", "--reduction", "tree,atomic", "--json")
    old = invoke("run-from-cache", "--problem", SMALL, "--streamk", "persistent", "--streamk-reductions", "tree", "--streamk-reductions", "atomic", "--json")
    assert new.exit_code == old.exit_code == 0, (new.output, old.output)
    pick = lambda r: sorted((x["mode"], x["variant"]) for x in json.loads(r.stdout)["rows"])  # noqa: E731
    assert pick(new) == pick(old) == [("persistent", "atomic"), ("persistent", "tree")]


def test_old_spellings_are_hidden_and_conflicts_refused():
    for cmd in ("plan", "run-from-cache"):
        h = invoke(cmd, "--help").stdout
        assert "--reduction" in h and "--streamk-reductions" not in h
    r = invoke("plan", "--problem", P, "--streamk-reductions", "tree", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["kernel"]["variant"] == "tree"
    r = invoke("plan", "--problem", P, "--streamk-reductions", "tree", "--reduction", "linear")
    assert r.exit_code == 2 and "old name of --reduction" in r.output


def test_comma_choice_unit():
    t = clikit.CommaChoice(("a", "bb", "ccc"))
    assert t.convert("a, ccc,a", None, None) == ("a", "ccc")
    for bad in ("a,,bb", "d", "A"):
        with pytest.raises(Exception):
            t.convert(bad, None, None)
    assert clikit.flatten([("a",), ("bb", "a")]) == ("a", "bb")


# ---------------------------------------------------------------------------------------------
# The problem parser and plan refusals
# ---------------------------------------------------------------------------------------------
BASE = "c=64,k=64,h=56,w=56,y=3,x=3"


@pytest.mark.parametrize("text, needle", [
    ("n=\u0663\u0662," + BASE, "ARABIC-INDIC DIGIT THREE (U+0663) at position 2"),
    ("n=32,\u00a0" + BASE, "NO-BREAK SPACE (U+00A0)"),
    ("n=\uff13\uff12," + BASE, "FULLWIDTH DIGIT THREE"),
    ("n=32," + BASE + ",dtype=bf16\u200b", "ZERO WIDTH SPACE"),
    ("n=32\x1b[2J," + BASE, "a control character (U+001B)"),
    ("N=32," + BASE, "problem key 'N' must be lowercase: n"),
    ("n=32," + BASE + ",Stride=2", "problem key 'Stride' must be lowercase: stride"),
    ("n=32," + BASE + ",DTYPE=bf16", "problem key 'DTYPE' must be lowercase: dtype"),
    ("n=+32," + BASE, "n='+32' is not an integer"),
    ("n=3_2," + BASE, "n='3_2' is not an integer"),
    ("n=-1," + BASE, "n='-1' is not an integer"),
    ("n=32," + BASE + ",stride=2**40", "stride='2**40': expected an integer"),
    ("n=32," + BASE + ",padding=-1", "padding must be >= 0"),
    ("n=32," + BASE + ",q=1", "unknown problem key(s) q"),
    ("n=32," + BASE + ",stri de=1", "problem key 'stri de' is not a name"),
    ("n=32," + BASE + ",dtype=BF16", "dtype 'BF16' is not supported"),
    ("", "the problem is empty"),
    (" , ,", "the problem is empty"),
])  # fmt: skip
def test_problem_parser_bad_input(text, needle):
    with pytest.raises(ProblemError) as e:
        parse_problem(text)
    assert needle in str(e.value)
    r = invoke("plan", "--problem", text)
    assert r.exit_code == 2 and "Traceback" not in r.output and needle in r.stderr, r.output


def test_problem_parser_accepts_plain_ascii_with_spaces():
    p = parse_problem(" n=32 ,\tc=64,k=64,h=56,w=56,y=3,x=3,padding=1x1, ")
    assert (p.n, p.c, p.pad_lo) == (32, 64, (0, 1, 1))


@pytest.mark.parametrize("args, needle", [
    (["--problem", "n=1,c=8,k=8,h=8,w=8,y=1,x=1,stride=1099511627776"], "kernarg stride_h=1099511627776 does not fit in i32"),
    (["--problem", "n=1,c=8,k=8,h=8,w=8,y=1,x=1,dilation=4294967296"], "does not fit"),
    (["--problem", P, "--streamk-ctas", "3000000000"], "3000000000 is not in the range"),
    (["--problem", P, "--ks-count", "3000000000", "--streamk", "off"], "3000000000 is not in the range"),
    (["--problem", P, "--tile", "1048576x1048576x64"], "tile BM must be in [1, 4096]"),
])  # fmt: skip
def test_plan_refuses_what_the_launcher_would(args, needle):
    r = invoke("plan", *args)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert needle in r.output


def test_plan_report_api_refuses_out_of_range_values():
    for kw, needle in (({"streamk_ctas": 3_000_000_000}, "streamk_ctas=3000000000 does not fit"),
                       ({"ks_count": 2**40, "streamk": "off"}, "ks_count=1099511627776 does not fit"),
                       ({"streamk": "bogus"}, "streamk='bogus'"), ({"reduction": "fast"}, "reduction='fast'")):  # fmt: skip
        with pytest.raises(ProblemError, match=needle.replace("(", r"\(").replace("[", r"\[")):
            OFF.plan(P, arch="gfx942", tile=(128, 128, 64), cache=_every_kernel("gfx942", (128, 128, 64)), **kw)


# ---------------------------------------------------------------------------------------------
# plan is the launcher's selection
# ---------------------------------------------------------------------------------------------
def test_plan_constants_are_the_launchers():
    for name in ("SK_ONLY", "SPLITK_ONLY", "STREAMK_CHOICES", "REDUCTION_CHOICES"):
        assert getattr(PR, name) is getattr(select, name), name  # one definition (skwgrad.abi.policy)


def _every_kernel(arch, tile):
    """A fake cache holding every family/variant/mode of ``tile`` for bf16 and fp32 dW."""
    cache = F.FakeCache(None)
    for dw in ("bf16", "fp32"):
        for v in ("direct", "two_stage", "atomic"):
            if v != "atomic" or dw == "fp32":
                cache.add(F.spec("wgrad", v, "bf16", dw, vc=8, vk=8, tile=tile), arch)
        for m in ("dp_sk", "persistent"):
            for red in ("linear", "tree", "atomic", "workspace"):
                if red != "atomic" or dw == "fp32":
                    cache.add(F.spec("wgrad_sk", red, "bf16", dw, vc=8, vk=8, tile=tile, mode=m), arch)
        cache.add(F.stage2(dw), arch)
    return cache


@pytest.mark.parametrize("problem", [
    P,  # few tiles, long reduction: stream-K
    "n=2,c=64,k=64,h=8,w=8,y=3,x=3,padding=1",  # short reduction: split-K
    "n=8,c=256,k=256,h=28,w=28,y=3,x=3,padding=1",  # many tiles
    "n=64,c=32,k=32,h=64,w=64,y=1,x=1",  # pointwise, long
    "n=32,c=64,k=64,h=56,w=56,y=3,x=3,padding=1,dw_dtype=fp32",
])  # fmt: skip
@pytest.mark.parametrize("opts", [{}, {"streamk": "off"}, {"streamk": "persistent"}, {"reduction": "tree"}, {"reduction": "atomic"},
                                  {"streamk": "dp_sk", "streamk_ctas": 100}, {"streamk": "off", "ks_count": 3}])  # fmt: skip
@pytest.mark.parametrize("arch, cus", [("gfx942", 304), ("sm_90", 132)])
def test_plan_auto_matches_select_choose(problem, opts, arch, cus):
    """plan reports the launch the launcher's selection makes from the same cache (kernel, pool,
    split degree), with the workspace that launch allocates."""
    p = parse_problem(problem)
    tile = (128, 128, 64)
    cache = _every_kernel(arch, tile)
    if opts.get("reduction") == "atomic" and p.dw_dtype != "fp32":  # atomic needs fp32 dW: both refuse
        with pytest.raises(ProblemError, match="must be fp32"):
            select.choose(p, cache, arch=arch, cus=cus, tile=tile, reduction="atomic")
        with pytest.raises(ProblemError, match="must be fp32"):
            OFF.plan(p, arch=arch, tile=tile, cache=cache, **opts)
        return
    try:
        c = select.choose(p, cache, arch=arch, cus=cus, tile=tile, use_tuned=False, streamk=opts.get("streamk", "auto"),
                          reduction=opts.get("reduction", "auto"), streamk_ctas=opts.get("streamk_ctas", -1), ks_count=opts.get("ks_count"))  # fmt: skip
    except ProblemError as e:  # a request no kernel can launch (ks_count past the iterations): plan refuses it too
        with pytest.raises(ProblemError, match="ks_count must be in"):
            OFF.plan(p, arch=arch, tile=tile, cache=cache, **opts)
        assert "ks_count must be in" in str(e)
        return
    r = OFF.plan(p, arch=arch, tile=tile, cache=cache, **opts)
    got = (r["kernel"]["family"], r["kernel"]["variant"], r["kernel"]["mode"] or "splitk", r["kernel"]["label"])
    assert got == (c.spec.family, c.spec.variant, c.mode, c.spec.label), (r["selection"], c.reason)
    assert r["selection"]["reason"] == c.reason and r["selection"]["predicted_us"] == c.predicted_us
    geo = launch_geometry(p, c.spec.family, c.spec.variant, bm=128, bn=128, bk=64, mode=c.spec.mode, pool=c.pool, ks_count=c.ks_count,
                          flags_per_cta=c.spec.flags_per_cta(get_arch(arch).wave_size) or None)  # fmt: skip
    assert r["workspace"]["zeroed_bytes"] == geo.workspace.arena_bytes("zeroed") and r["grid"] == geo.grid
    if c.spec.family == "wgrad_sk":
        assert r["partition"]["pool"] == c.pool
    else:
        assert r["ks_count"] == c.ks_count


def test_plan_default_is_auto_like_run_from_cache():
    from skwgrad.launcher.commands import run_from_cache

    for cmd in (main.commands["plan"], run_from_cache):
        (opt,) = [o for o in cmd.params if o.name == "streamk"]
        assert opt.default == "auto"


# ---------------------------------------------------------------------------------------------
# Logging and output helpers
# ---------------------------------------------------------------------------------------------
def test_log_level_debug_names_the_chosen_kernel(fake_gpu):
    r = invoke("--log-level", "debug", "run-from-cache", "--problem", SMALL)
    assert r.exit_code == 0, r.output
    assert "skwgrad DEBUG skwgrad.run: problem: wgrad" in r.stderr
    quiet = invoke("run-from-cache", "--problem", SMALL)
    assert "DEBUG" not in quiet.stderr


def test_skwgrad_log_env(fake_gpu):
    r = invoke("run-from-cache", "--problem", SMALL, env={"SKWGRAD_LOG": "debug"})
    assert r.exit_code == 0 and "DEBUG" in r.stderr
    r = invoke("plan", "--problem", P, env={"SKWGRAD_LOG": "chatty"})
    assert r.exit_code == 2 and "SKWGRAD_LOG='chatty'" in r.stderr
    logging.getLogger("skwgrad").setLevel(logging.WARNING)


def test_escape_and_table():
    assert clikit.escape("a\x1b[31mb\x07\n\x9b") == "a\\x1b[31mb\\x07\\n\\x9b"
    assert clikit.escape("naïve ✓") == "naïve ✓"  # printable Unicode is kept
    t = clikit.table([["x\x1b", 1], ["yy", 22]], ["name", "n"], align=["left", "right"])
    lines = t.splitlines()
    assert lines[0].split() == ["name", "n"] and "\x1b" not in t and "x\\x1b" in t
    assert lines[-1].endswith("22") and lines[-2].endswith(" 1")


def test_json_document_shape(tmp_path):
    assert list(clikit.json_document({"a": 1}, b=2)) == ["version", "a", "b"]
    with pytest.raises(ValueError):
        clikit.json_document({"version": 3})
    clikit.write_json(tmp_path / "d.json", {"x": float("nan")})
    assert json.loads((tmp_path / "d.json").read_text()) == {"version": 1, "x": None}
    with pytest.raises(clikit.OutputError) as e:
        clikit.write_json(tmp_path / "missing" / "d.json", {})
    assert e.value.exit_code == 3 and "choose another --out path" in str(e.value)


@pytest.mark.parametrize("module", ["triton", "triton.compiler", "tqdm"])
def test_a_missing_build_module_exits_3_with_the_install_command(monkeypatch, module):
    def boom(*a, **k):
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)

    monkeypatch.setattr(OFF, "plan", boom)
    r = invoke("plan", "--problem", P)
    assert r.exit_code == 3 and "pip install 'skwgrad[build]'" in r.stderr and "Traceback" not in r.output


def test_another_missing_module_is_not_hidden(monkeypatch):
    def boom(*a, **k):
        raise ModuleNotFoundError("No module named 'numpy'", name="numpy")

    monkeypatch.setattr(OFF, "plan", boom)
    r = invoke("plan", "--problem", P)
    assert r.exit_code == 1 and isinstance(r.exception, ModuleNotFoundError)  # a real bug stays a traceback


@pytest.mark.parametrize("content, needle", [
    (b"name,n,in_channels,out_channels,h,w,y,x\na,2,8,8,9,9,3,3\nb,2,8,8,9,9,3,3,7\n", "line 3 (b): more fields than the header names"),
    (b"name,n,in_channels,out_channels,h,w,y,x\na,2,8,8,9,9,3,\xd9\xa3\n", "line 2 (a): x='\u0663' is not an integer"),
    (b"\xff\xfe\x00\x01", "cannot read the corpus"),
])  # fmt: skip
def test_bad_corpus_is_a_clear_error(tmp_path, content, needle, monkeypatch):
    monkeypatch.setattr(B, "get_backend", lambda device=None, kind=None: pytest.fail("device probed before the corpus was read"))
    f = tmp_path / "c.csv"
    f.write_bytes(content)
    r = invoke("run-from-cache", "--corpus", str(f))
    assert r.exit_code == 2 and needle in r.stderr and "Traceback" not in r.output, r.output


ERROR_SCHEMA = top({"error": obj({"type": STR, "exit_code": {"enum": [1, 2, 3]}, "message": STR})})


@pytest.mark.parametrize("args, code, kind", [
    (["plan", "--problem", "N=2", "--json"], 2, "ProblemError"),
    (["plan", "--json", "--problem", P, "--streamk", "off", "--ks-count", "99999"], 2, "ProblemError"),
    (["run-from-cache", "--json"], 2, "UsageError"),
    (["run-from-cache", "--json", "--problem", SMALL], 3, "BackendError"),
])  # fmt: skip
def test_json_errors_are_documents_too(args, code, kind, monkeypatch):
    def no_gpu(device=None, kind=None):
        raise BackendError("no GPU runtime with a usable device found")

    monkeypatch.setattr(B, "get_backend", no_gpu)
    r = invoke(*args)
    assert r.exit_code == code, r.output
    doc = validate(r.stdout, ERROR_SCHEMA)
    assert doc["error"]["type"] == kind and doc["error"]["exit_code"] == code
    assert r.stderr.strip(), "the message is on stderr as well"


def test_doctor_reports_the_device(fake_gpu, tmp_path):
    from skwgrad import doctor

    r = invoke("doctor", "--json", "--cache", str(tmp_path / "c"))
    doc = validate(r.stdout, DOCTOR_SCHEMA)
    installed = [rt for rt in doc["runtimes"] if rt["bindings"]["installed"]]
    if not installed:
        pytest.skip("no GPU bindings installed")
    assert doc["gpu"]["arch"] == "sm_90" and doc["gpu"]["compute_units"] == 8
    assert doc["summary"][0].startswith("GPU: Fake sm_90 (sm_90, 8 CUs)")
    info = {"backend": "cuda", "bindings": {"version": "13.5.0"}, "driver_version": "12.4", "notes": []}
    doctor._version_notes(info)
    assert "install skwgrad[cuda12]" in info["notes"][0]


def test_comma_list_of_tiles():
    t = clikit.CommaList(clikit.Tile())
    assert t.convert("64x64x32, 128X128x64,64x64x32", None, None) == ((64, 64, 32), (128, 128, 64))
    for bad in ("64x64", "64x64x32,,", "0x1x1", "６4x64x32"):
        with pytest.raises(Exception):
            t.convert(bad, None, None)
