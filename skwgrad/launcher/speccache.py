"""A cache of specs with no code objects: what ``skwgrad plan`` selects from offline.

It answers ``find`` / ``get`` as the real cache does, from kernel specs (what ``compile-all``
would build for a problem), with the metadata selection reads (threads, no shared-memory or
register count: the offline occupancy estimate fills in). Nothing can be loaded from it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from skwgrad.abi.arch import get_arch
from skwgrad.abi.spec import KernelSpec
from skwgrad.errors import CacheError


@dataclass(frozen=True)
class SpecEntry:
    key: str
    spec: KernelSpec
    arch: str
    metadata: dict = field(repr=False)

    @property
    def label(self) -> str:
        return self.spec.label


class SpecCache:
    """Entries for ``(spec, arch)`` pairs; keys are a hash of the spec and arch (not real cache
    keys: no compiler or source identity is involved)."""

    path = None

    def __init__(self, items):
        self._entries: dict[str, SpecEntry] = {}
        for spec, arch in items:
            a = get_arch(arch)
            key = hashlib.sha256(f"{arch}\0{spec.canonical_json()}".encode()).hexdigest()
            md = {"name": spec.family, "label": spec.label, "threads": spec.num_warps * a.wave_size, "shared": 0}
            self._entries[key] = SpecEntry(key, spec, arch, md)

    def __len__(self) -> int:
        return len(self._entries)

    def find(self, arch: str, **fields) -> list[SpecEntry]:
        return sorted((e for e in self._entries.values() if e.arch == arch and all(getattr(e.spec, k) == v for k, v in fields.items())),
                      key=lambda e: e.label)  # fmt: skip

    def get(self, key: str) -> SpecEntry:
        try:
            return self._entries[key]
        except KeyError:
            raise CacheError(f"no entry {key[:12]} in the offline spec set") from None

    def load_binary(self, entry_or_key, **kw) -> bytes:
        raise CacheError("an offline plan has no code objects: build them with compile-all and run-from-cache")

    def tuned(self, arch, cus, problem_key):
        return None

    def cost_model(self, arch, cus):
        return None
