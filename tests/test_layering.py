"""Imports point down: abi (the Triton-free contract) <- cache <- launcher; aot (Triton) builds on
abi and cache but nothing below it imports aot or Triton. Read from the source, so a lazy import
inside a function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "skwgrad"

# package -> what it must never import (module prefixes)
FORBIDDEN = {
    "abi": ("skwgrad.aot", "skwgrad.cache", "skwgrad.launcher", "triton"),
    "cache": ("skwgrad.aot", "skwgrad.launcher", "triton"),
    "launcher": ("skwgrad.aot", "triton"),
}


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_down(package):
    bad = []
    files = sorted((PKG / package).rglob("*.py"))
    assert files, package
    for f in files:
        for line, name in imports_of(f):
            if any(name == p or name.startswith(p + ".") for p in FORBIDDEN[package]):
                bad.append(f"{f.relative_to(PKG.parent)}:{line} imports {name}")
    assert not bad, "\n".join(bad)


def test_the_check_can_fail(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from skwgrad.aot import sweep\n    import triton.language as tl\n")
    names = [n for _, n in imports_of(f)]
    assert "skwgrad.aot" in names and "triton.language" in names
