"""The install without the compiler: package metadata, and the runtime paths with Triton blocked.

A fresh-venv ``pip install .`` is too slow for CI; instead the metadata (pyproject and the
installed distribution's requirements) must keep triton out of the plain install, and every
runtime command must run in a process where ``import triton`` raises.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
COMPILER_PACKAGES = {"triton", "pytorch-triton-rocm", "pytorch-triton", "torch"}


def _names(reqs) -> set[str]:
    return {Requirement(r).name.lower() for r in reqs}


def test_plain_install_has_no_compiler():
    assert not _names(PROJECT["dependencies"]) & COMPILER_PACKAGES, PROJECT["dependencies"]


def test_installed_distribution_requires_no_compiler_without_extras():
    reqs = importlib.metadata.requires("skwgrad") or []
    plain = [r for r in reqs if Requirement(r).marker is None]
    assert plain, reqs
    assert not _names(plain) & COMPILER_PACKAGES, plain
    build = [r for r in reqs if Requirement(r).marker is not None and Requirement(r).marker.evaluate({"extra": "build"})]
    assert "triton" in _names(build), "the build extra brings the compiler"


def test_build_extra_pins_the_compiler_of_the_cache_identity():
    from skwgrad.abi.identity import PINNED_TRITON

    (triton,) = [Requirement(r) for r in PROJECT["optional-dependencies"]["build"] if Requirement(r).name == "triton"]
    assert str(triton.specifier) == f"=={PINNED_TRITON}"


def test_test_extra_installs_everything_ci_needs():
    extras = PROJECT["optional-dependencies"]
    test = _names(extras["test"])
    assert _names(extras["build"]) <= test, "CI (pip install -e '.[test]') compiles kernels: test must include build"
    assert {"pytest", "hypothesis", "torch", "jsonschema"} <= test


@pytest.mark.parametrize("extra, package, inside, outside", [
    ("cuda12", "cuda-bindings", ["12.6.0", "12.9.10"], ["12.5.0", "13.0.0"]),
    ("cuda13", "cuda-bindings", ["13.0.0", "13.5.0"], ["12.9.10", "14.0.0"]),
    ("cuda", "cuda-bindings", ["12.9.10"], ["13.0.0"]),
    ("rocm62", "hip-python", ["6.2.0.499.16"], ["6.1.0", "6.3.0.500.16"]),
    ("rocm63", "hip-python", ["6.3.3.540.31"], ["6.2.0.499.16", "6.4.0.549.36"]),
    ("rocm64", "hip-python", ["6.4.4.555.40"], ["6.3.3.540.31", "7.0.0.555.40"]),
    ("rocm70", "hip-python", ["7.0.2.555.40"], ["6.4.4.555.40", "7.1.0.555.40"]),
    ("rocm71", "hip-python", ["7.1.1.562.43"], ["7.0.2.555.40", "7.2.0.562.43"]),
    ("rocm72", "hip-python", ["7.2.2.562.43"], ["7.1.1.562.43", "10.0.0.0.1.2"]),
    ("rocm", "hip-python", ["7.2.2.562.43"], ["6.4.4.555.40", "10.0.0.0.1.2"]),
])  # fmt: skip
def test_backend_extras_are_pinned_to_one_release_line(extra, package, inside, outside):
    (req,) = [Requirement(r) for r in PROJECT["optional-dependencies"][extra]]
    assert req.name == package
    for v in inside:
        assert req.specifier.contains(v), (extra, req.specifier, v)
    for v in outside:
        assert not req.specifier.contains(v), (extra, req.specifier, v)


def test_metadata_license_readme_and_entry_points():
    assert (ROOT / "LICENSE").is_file() and "MIT License" in (ROOT / "LICENSE").read_text()
    assert PROJECT["readme"] == "README.md"
    assert PROJECT["authors"] and PROJECT["classifiers"]
    assert PROJECT["scripts"]["skwgrad"] == "skwgrad.cli:main"
    md = importlib.metadata.metadata("skwgrad")
    assert md["License"] == "MIT" or "MIT" in (md.get("License-Expression") or "")


def test_python_dash_m_skwgrad_runs():
    r = subprocess.run([sys.executable, "-m", "skwgrad", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "Usage: skwgrad" in r.stdout and "run-from-cache" in r.stdout and "doctor" in r.stdout


# -- the runtime with Triton blocked ------------------------------------------------------------
_BLOCKER = textwrap.dedent(
    """
    import importlib.abc, json, sys

    class NoTriton(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "triton" or name.startswith("triton."):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)

    sys.meta_path.insert(0, NoTriton())
    for m in [m for m in sys.modules if m == "triton" or m.startswith("triton.")]:
        del sys.modules[m]
    """
)

_RUNTIME_MODULES = [
    "skwgrad", "skwgrad.cli", "skwgrad.clikit", "skwgrad.doctor", "skwgrad.abi.plan_report", "skwgrad.abi.conv",
    "skwgrad.abi.arch", "skwgrad.abi.identity", "skwgrad.abi.spec", "skwgrad.abi.codeobject", "skwgrad.cache.store",
    "skwgrad.cache.commands", "skwgrad.launcher.api", "skwgrad.launcher.commands", "skwgrad.launcher.select",
    "skwgrad.launcher.plan", "skwgrad.launcher.interop", "skwgrad.launcher.layout", "skwgrad.launcher.calls", "skwgrad.launcher.backends", "skwgrad.reference",
]  # fmt: skip


def _blocked(body: str, tmp_path, **env) -> subprocess.CompletedProcess:
    script = tmp_path / "blocked.py"
    script.write_text(_BLOCKER + textwrap.dedent(body))
    e = {**os.environ, "SKWGRAD_CACHE": str(tmp_path / "cache"), **env}
    e.pop("SKWGRAD_LOG", None)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=e, cwd=tmp_path)


def test_runtime_modules_import_without_triton(tmp_path):
    r = _blocked(
        f"""
        import importlib
        for m in {_RUNTIME_MODULES!r}:
            importlib.import_module(m)
        import skwgrad
        skwgrad.wgrad, skwgrad.plan  # the lazy API
        assert "triton" not in sys.modules
        try:
            import triton
        except ModuleNotFoundError:
            print("blocked ok")
        """,
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert "blocked ok" in r.stdout


def test_runtime_commands_run_without_triton(tmp_path):
    """plan, cache ls, doctor and run-from-cache through the real CLI, in a process where
    ``import triton`` raises. run-from-cache on this GPU-less machine exits 3 with "no GPU"."""
    r = _blocked(
        """
        from click.testing import CliRunner
        from skwgrad.cli import main

        out = {}
        P = "n=32,c=64,k=64,h=56,w=56,y=3,x=3,padding=1"
        # readers never create a cache: a missing one is an environment error (exit 3)
        res = CliRunner().invoke(main, ["cache", "ls"])
        out["cache_ls_missing"] = {"code": res.exit_code, "stdout": res.stdout, "stderr": res.stderr, "exc": None}
        import os
        from skwgrad.cache import Cache
        Cache(os.environ["SKWGRAD_CACHE"]).close()  # a writer creates it
        for name, args in [
            ("plan", ["plan", "--problem", P, "--json"]),
            ("cache_ls", ["cache", "ls"]),
            ("doctor", ["doctor", "--json"]),
            ("run", ["run-from-cache", "--problem", P]),
            ("help", ["--help"]),
            ("compile_help", ["compile-all", "--help"]),
        ]:
            res = CliRunner().invoke(main, args)
            out[name] = {"code": res.exit_code, "stdout": res.stdout, "stderr": res.stderr,
                         "exc": repr(res.exception) if res.exception and not isinstance(res.exception, SystemExit) else None}
        out["triton_loaded"] = "triton" in sys.modules
        print("RESULT" + json.dumps(out))
        """,
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.split("RESULT", 1)[1])
    assert not out.pop("triton_loaded")
    for name, res in out.items():
        assert res["exc"] is None, (name, res)
    assert out["plan"]["code"] == 0 and json.loads(out["plan"]["stdout"])["version"] == 1
    assert out["cache_ls_missing"]["code"] == 3 and "no skwgrad cache" in out["cache_ls_missing"]["stderr"]
    assert out["cache_ls"]["code"] == 0, out["cache_ls"]
    assert out["doctor"]["code"] == 0
    doc = json.loads(out["doctor"]["stdout"])
    assert doc["compiler"]["module_present"] in (True, False)  # found by metadata, never imported
    assert out["help"]["code"] == 0 and "compile-all" in out["help"]["stdout"]
    have_gpu = any(rt["device"] for rt in doc["runtimes"])
    if not have_gpu:
        assert out["run"]["code"] == 3, out["run"]
        assert "no GPU" in out["run"]["stderr"] and "Traceback" not in out["run"]["stderr"]


def test_compile_all_without_the_compiler_says_how_to_install_it(tmp_path):
    """When the build modules cannot import Triton, compile-all is listed but exits 3 with the
    install command (the real message, not an ImportError traceback)."""
    r = _blocked(
        """
        import skwgrad.cli as cli
        from click.testing import CliRunner

        real = cli.importlib.import_module

        def fake(name, *a):
            if name.startswith("skwgrad.aot"):
                import triton  # raises: blocked
            return real(name, *a)

        cli.importlib.import_module = fake
        res = CliRunner().invoke(cli.main, ["compile-all", "--preset", "smoke"])
        print("RESULT" + json.dumps({"code": res.exit_code, "stderr": res.stderr, "stdout": res.stdout}))
        res = CliRunner().invoke(cli.main, ["--help"])
        print("HELP" + json.dumps({"code": res.exit_code, "stdout": res.stdout}))
        """,
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.split("RESULT", 1)[1].split("HELP", 1)[0])
    assert res["code"] == 3, res
    assert "pip install 'skwgrad[build]'" in res["stderr"] and "Traceback" not in res["stderr"]
    help_ = json.loads(r.stdout.split("HELP", 1)[1])
    assert help_["code"] == 0 and "compile-all" in help_["stdout"]


# -- README ----------------------------------------------------------------------------------
README = (ROOT / "README.md").read_text()


def test_readme_paths_exist():
    paths = set(re.findall(r"(?<![\w/.~-])((?:tests|benchmarks|skwgrad|corpus)/[\w./-]+\w)", README))
    assert paths, "README names no repository paths?"
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"README names paths that do not exist: {missing}"


def test_every_environment_variable_is_documented():
    used = set()
    for path in (ROOT / "skwgrad").rglob("*.py"):
        used |= set(re.findall(r"\bSKWGRAD_[A-Z][A-Z_]*[A-Z]\b", path.read_text()))
    used |= {"SKWGRAD_CACHE", "SKWGRAD_BACKEND", "SKWGRAD_LOG"}
    undocumented = sorted(v for v in used if f"`{v}`" not in README)
    assert not undocumented, f"README's environment table misses {undocumented}"


def test_readme_documents_exit_codes_and_extras():
    for needle in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "skwgrad[build]", "skwgrad[cuda12]", "skwgrad[rocm64]", "skwgrad doctor"):
        assert needle in README, needle


def test_version_is_one_number():
    import skwgrad

    assert skwgrad.__version__ == PROJECT["version"] == importlib.metadata.version("skwgrad")
    assert {"wgrad", "plan", "tune"} <= set(dir(skwgrad))
