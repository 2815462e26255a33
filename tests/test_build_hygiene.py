"""compile-all build hygiene: the environment checked up front, failures tied to the environment,
claims between concurrent builders, stale temp folders, progress without a terminal, Ctrl-C.

The concurrency and progress tests inject a fake compile step (no Triton work); the kill and
Ctrl-C tests compile real smoke kernels at the smallest tile (they live in test_build.py).
"""

from __future__ import annotations

import concurrent.futures as cf
import io
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

import skwgrad.aot.build as build_mod
import skwgrad.aot.compile as compile_mod
from skwgrad.abi.identity import PINNED_TRITON
from skwgrad.abi.spec import KernelSpec
from skwgrad.aot.build import BuildEnvironmentError, Claims, build, reclaim_stale_temp
from skwgrad.aot.sweep import SweepItem, sweep

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _codeobj import fake_compiled  # noqa: E402
from skwgrad.cache import Cache
from skwgrad.cli import main

HERE = Path(__file__).parent
FAKE = HERE / "_fake_builder.py"
ROOT = HERE.parent


def fake_compiler(log: list, *, sleep=0.0, fail=()):
    def compile_spec(spec, arch, **kw):
        log.append((spec.label, arch))
        time.sleep(sleep)
        if spec.label in fail:
            raise RuntimeError(f"LLVM ERROR: cannot select {spec.label}")
        return fake_compiled(spec, arch)  # a well-formed object whose metadata agrees with the spec

    return compile_spec


def items(n=6):
    return sweep("default", arches=["gfx942"], dtypes=["bf16"], tiles="64x64x64")[:n]


def claim_files(cache_dir: Path) -> list:
    return [p.name for p in (Path(cache_dir) / "claims").iterdir() if not p.name.startswith(".")]


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


# -- the environment ------------------------------------------------------------------------------
def _fake_triton(tmp_path: Path, body: str) -> dict:
    d = tmp_path / "fake-site"
    (d / "triton").mkdir(parents=True)
    (d / "triton" / "__init__.py").write_text(body)
    return {**os.environ, "PYTHONPATH": f"{d}{os.pathsep}{ROOT}"}


@pytest.mark.parametrize("body, words", [
    ("__version__ = '3.0.0'\n", ["triton==" + PINNED_TRITON, "found triton 3.0.0"]),
    ("raise ImportError('no triton on this machine')\n", ["Triton is not importable", "no triton on this machine"]),
])  # fmt: skip
def test_a_wrong_or_missing_triton_is_an_environment_error_and_no_kernel_failure(tmp_path, body, words):
    env = _fake_triton(tmp_path, body)
    cache = tmp_path / "c"
    args = [sys.executable, "-m", "skwgrad.cli", "compile-all", "--preset", "smoke", "--arch", "gfx942", "--tiles", "32x32x32", "--cache", str(cache)]
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    for w in words:
        assert w in r.stderr
    assert "Traceback" not in r.stderr and not cache.exists()  # checked before anything is opened
    j = subprocess.run(args + ["--json"], capture_output=True, text=True, env=env, timeout=120)
    out = json.loads(j.stdout)
    assert j.returncode == 3 and out["version"] == 1 and out["error"]["type"] == "BuildEnvironmentError" and out["exit_code"] == 3
    # the dry run needs no compiler
    d = subprocess.run(args + ["--dry-run"], capture_output=True, text=True, env=env, timeout=120)
    assert d.returncode == 0 and "total: 17 kernels" in d.stdout


def test_check_environment_names_the_backend_tools():
    assert build_mod.environment_problem(["gfx942", "gfx950", "sm_90"]) is None
    fp = build_mod.check_environment(["sm_90"])
    assert re.fullmatch(r"[0-9a-f]{16}", fp) and fp == build_mod.environment_fingerprint()


def test_a_worker_with_a_broken_environment_stops_the_build_without_recording_failures(tmp_path, monkeypatch):
    log = []
    monkeypatch.setattr(compile_mod, "compile_spec", fake_compiler(log))
    monkeypatch.setattr(build_mod, "_worker_environment_problem", lambda arch: "found triton 3.0.0: pip install triton==3.9.0")
    c = Cache(tmp_path / "c")
    with cf.ThreadPoolExecutor(2) as ex, pytest.raises(BuildEnvironmentError, match="3.0.0") as e:
        build(items(), c, executor=ex, progress=False)
    assert e.value.exit_code == 3 and "nothing was recorded" in str(e.value)
    assert c.failures() == [] and log == [] and not claim_files(tmp_path / "c")


def test_failures_are_tied_to_the_environment_so_a_fixed_environment_rebuilds(tmp_path, monkeypatch):
    its = items(3)
    bad = its[1].spec.label
    log = []
    monkeypatch.setattr(compile_mod, "compile_spec", fake_compiler(log, fail={bad}))
    c = Cache(tmp_path / "c")
    with cf.ThreadPoolExecutor(2) as ex:
        s = build(its, c, executor=ex, progress=False)
    assert len(s.built) == 2 and [f["label"] for f in s.failed] == [bad]
    (f,) = c.failures()
    assert build_mod.failure_environment(f["message"]) == build_mod.environment_fingerprint()
    with cf.ThreadPoolExecutor(2) as ex:  # same environment: a known failure, skipped
        s = build(its, c, executor=ex, progress=False)
    assert s.skipped_failed == 1 and not s.built and len(log) == 3
    # the environment changes (a fixed LLVM, another ptxas): the failure is retried without --retry-failed
    monkeypatch.setattr(compile_mod, "compile_spec", fake_compiler(log))
    monkeypatch.setattr(build_mod, "environment_fingerprint", lambda: "f" * 16)
    with cf.ThreadPoolExecutor(2) as ex:
        s = build(its, c, executor=ex, progress=False)
    assert len(s.built) == 1 and s.skipped_failed == 0 and c.failures() == [] and len(log) == 4


# -- claims -----------------------------------------------------------------------------------------
def test_two_concurrent_builders_compile_each_kernel_once(tmp_path):
    cache, log, go = tmp_path / "c", tmp_path / "log", tmp_path / "go"
    n = 40
    Cache(cache).close()
    procs = [subprocess.Popen([sys.executable, str(FAKE), str(cache), str(log), str(n), "0.05", str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    time.sleep(1.0)  # both imported and waiting at the start line
    go.write_text("go")
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    summaries = [json.loads(o[0].strip().splitlines()[-1]) for o in outs]
    compiled = Counter(tuple(ln.split()[1:]) for ln in log.read_text().splitlines())
    want = {(it.spec.label, it.arch) for it in items(n)}
    assert set(compiled) == want and set(compiled.values()) == {1}, [k for k, v in compiled.items() if v > 1]
    assert sum(s["built"] for s in summaries) == n
    assert all(s["built"] > 0 for s in summaries), summaries  # they really ran at the same time
    assert all(s["built"] + s["cached"] == n and not s["failed"] for s in summaries)
    assert Cache(cache).verify() == [] and not claim_files(cache)


def test_claims_of_dead_builders_are_taken_over_and_live_ones_respected(tmp_path):
    c = Claims(tmp_path)
    other = Claims(tmp_path)  # another builder of this process: a live holder
    assert other.claim("k1") and not c.claim("k1") and c.holder_alive("k1")
    other.release("k1")
    assert c.claim("k1") and not c.holder_alive("nonexistent")
    (tmp_path / "claims" / "k2").write_text(json.dumps({"host": os.uname().nodename, "pid": dead_pid(), "start": "1", "token": "x"}))
    assert not c.holder_alive("k2") and c.claim("k2")
    assert json.loads((tmp_path / "claims" / "k2").read_text())["pid"] == os.getpid()
    c.release_all()
    assert not claim_files(tmp_path)


def test_a_key_another_builder_holds_is_waited_for_then_taken_as_built(tmp_path, monkeypatch):
    its = items(3)
    c = Cache(tmp_path / "c")
    holder = Claims(c.path)
    key = Cache.key_for(its[0].spec, its[0].arch)
    assert holder.claim(key)
    log = []
    fake = fake_compiler(log)
    monkeypatch.setattr(compile_mod, "compile_spec", fake)

    def the_other_builder_finishes():
        time.sleep(0.5)
        c2 = Cache(c.path)
        c2.put(fake(its[0].spec, its[0].arch))
        holder.release(key)

    import threading

    t = threading.Thread(target=the_other_builder_finishes)
    t.start()
    with cf.ThreadPoolExecutor(2) as ex:
        s = build(its, c, executor=ex, progress=False, claim_poll=0.05)
    t.join()
    assert len(s.built) == 2 and s.cached == 1 and s.by_others == 1
    # compiled once in all: by "the other builder" (the same fake), never by this one
    assert Counter(lab for lab, _ in log) == Counter(it.spec.label for it in its)


# -- temp folders -------------------------------------------------------------------------------------
def test_stale_temp_folders_of_dead_builders_are_reclaimed_and_nothing_else(tmp_path):
    host = os.uname().nodename
    dead = tmp_path / f"skwgrad-build-{dead_pid()}-abc123"
    dead.mkdir()
    (dead / "skwgrad-triton-x").mkdir()
    (dead / "owner.json").write_text(json.dumps({"host": host, "pid": int(dead.name.split("-")[2]), "start": ""}))
    mine = tmp_path / f"skwgrad-build-{os.getpid()}-def456"  # a live builder's
    mine.mkdir()
    (mine / "owner.json").write_text(json.dumps({"host": host, "pid": os.getpid(), "start": build_mod._start_time(os.getpid())}))
    other = tmp_path / "skwgrad-build-notours"
    other.mkdir()
    fresh = tmp_path / f"skwgrad-build-{dead_pid()}-fresh"
    fresh.mkdir()
    old = time.time() - 3600
    for p in (dead, mine, other):
        os.utime(p, (old, old))
    removed = reclaim_stale_temp(str(tmp_path), min_age=60)
    assert removed == [str(dead)]
    assert mine.exists() and other.exists() and fresh.exists()  # live owner, not our name, too young


# -- progress -----------------------------------------------------------------------------------------
def test_progress_is_a_line_per_interval_without_a_terminal(tmp_path, monkeypatch, capsys):
    log = []
    monkeypatch.setattr(compile_mod, "compile_spec", fake_compiler(log, sleep=0.15))
    its = items(8)
    with cf.ThreadPoolExecutor(1) as ex:
        s = build(its, Cache(tmp_path / "c"), executor=ex, progress=None, progress_interval=0.2)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("compile-all: ")]
    assert len(s.built) == 8 and len(lines) >= 3, err
    assert all(re.match(r"compile-all: \d+/8 done \(\d+%\), \d+ failed, \d+ s, [\d.]+ kernels/s, eta ", ln) for ln in lines)
    assert lines[-1].startswith("compile-all: 8/8 done (100%)") and "\r" not in err
    with cf.ThreadPoolExecutor(1) as ex:  # --no-progress: silent
        build(items(9), Cache(tmp_path / "c"), executor=ex, progress=False, progress_interval=0.01)
    assert capsys.readouterr().err == ""


def test_progress_uses_tqdm_on_a_terminal():
    class TTY(io.StringIO):
        def isatty(self):
            return True

    p = build_mod._Progress(3, None, 30.0, stream=TTY())
    assert p.kind == "bar"
    p.update()
    p.close()
    assert build_mod._Progress(3, None, 30.0, stream=io.StringIO()).kind == "lines"
    assert build_mod._Progress(3, False, 30.0, stream=TTY()).kind == "off"


def test_cli_progress_lines_and_json_summary(tmp_path, monkeypatch):
    log = []
    monkeypatch.setattr(compile_mod, "compile_spec", fake_compiler(log))

    def thread_build(its, cache, **kw):  # the CLI's build, on a thread pool (the fake compile is in-process)
        kw.pop("jobs"), kw.pop("scheduler")
        with cf.ThreadPoolExecutor(2) as ex:
            return real(its, cache, executor=ex, **kw)

    real = build_mod.build
    monkeypatch.setattr(build_mod, "build", thread_build)
    r = CliRunner().invoke(main, ["compile-all", "--preset", "smoke", "--arch", "sm_90", "--cache", str(tmp_path / "c"),
                                  "--json", "--progress-interval", "0.1"])  # fmt: skip
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    n = len(sweep("smoke", arches=["sm_90"]))
    assert out["version"] == 1 and out["summary"]["built"] == out["total"] == n and out["summary"]["interrupted"] is False
    assert f"compile-all: {n}/{n} done (100%)" in r.stderr


def test_ctrl_c_in_the_build_gives_a_summary_and_exit_130(tmp_path, monkeypatch):
    calls = []

    def interrupting(spec, arch, **kw):
        calls.append(spec.label)
        if len(calls) == 3:
            raise KeyboardInterrupt  # as if Ctrl-C landed in the coordinator
        return fake_compiler([])(spec, arch)

    monkeypatch.setattr(compile_mod, "compile_spec", interrupting)
    real = build_mod.build

    def serial_build(its, cache, **kw):
        kw.pop("jobs"), kw.pop("scheduler")

        class Inline(cf.Executor):  # runs each job in the caller: the interrupt reaches build()
            def submit(self, fn, *a):
                f = cf.Future()
                try:
                    f.set_result(fn(*a))
                except Exception as e:
                    f.set_exception(e)
                return f

        return real(its, cache, executor=Inline(), **kw)

    monkeypatch.setattr(build_mod, "build", serial_build)
    r = CliRunner().invoke(main, ["compile-all", "--preset", "smoke", "--arch", "sm_90", "--cache", str(tmp_path / "c"), "--no-progress"])
    assert r.exit_code == 130, r.output
    n = len(sweep("smoke", arches=["sm_90"]))
    assert f"compile-all INTERRUPTED: {n} kernels selected: 2 built" in r.stdout and "re-run" in r.stderr
    assert "Traceback" not in r.output and "Aborted" not in r.output
    assert not claim_files(tmp_path / "c")
