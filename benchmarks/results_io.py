"""Read a result record, plain or xz-compressed.

The large JSON records under ``benchmarks/results`` are kept as ``NAME.json.xz``: a device run
copies the whole tree and may carry at most 64 MiB with the caches it needs, and these records
were 53 of the tree's 60 MB. RESULTS.md and the runs index name them ``NAME.json``; ``xz -dk``
restores one, and ``read_json`` takes either name.
"""

from __future__ import annotations

import json
import lzma
from pathlib import Path


def read_json(path):
    """The JSON document at ``path``, or at ``path + ".xz"`` when only the compressed one exists."""
    p = Path(path)
    if not p.exists() and p.with_name(p.name + ".xz").exists():
        p = p.with_name(p.name + ".xz")
    if p.suffix == ".xz":
        with lzma.open(p, "rt", encoding="utf-8") as f:
            return json.load(f)
    return json.loads(p.read_text())
