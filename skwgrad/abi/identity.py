"""What a code object's cache key says about how it was built, computable with no compiler.

The GPU machine has no compiler (or another version of it), yet must refuse objects built by a
different compiler or from different kernel sources. So the identity is a property of this
package: the Triton release skwgrad pins for building, and a hash of the kernel source files and
the ABI declaration, read as files (importing the kernels would import Triton).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path


PINNED_TRITON = "3.9.0"  # keep equal to the triton pin in pyproject.toml
COMPILER = f"triton-{PINNED_TRITON}"

_PKG = Path(__file__).resolve().parents[1]
# Everything that decides the bytes of a code object for a given spec and target.
_SOURCES = sorted((_PKG / "aot" / "kernels").glob("*.py")) + [
    _PKG / "abi" / "arch.py",  # per-arch codegen choices (tf32_mma_sync)
    _PKG / "abi" / "kernargs.py",
    _PKG / "abi" / "spec.py",
    _PKG / "aot" / "compile.py",
]


def compiler_identity() -> str:
    return COMPILER


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """sha256 over the kernel sources, the kernarg declaration, the spec and the compile step:
    part of every cache key."""
    h = hashlib.sha256()
    for path in _SOURCES:
        h.update(path.relative_to(_PKG).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()
