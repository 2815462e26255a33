"""What the pinned Triton's AMD backend does with the main-loop variants (issue 12), without a GPU:
compile each variant of run.py for gfx942 and gfx950 and read the AMDGCN it emits.

    python benchmarks/mainloop/amd.py [--row r50_l1_3x3_64_n32] [--variants a,b] [--arch gfx942,gfx950] [--out amd.json]

Per variant and arch: whether it compiles (else the compiler's first error line), and in the
kernel's assembly the matrix instructions (``v_mfma*``), the global-memory loads by kind
(``buffer_load*``: buffer resources, what tensor descriptors lower to where they lower;
``global_load*``: flat pointer gathers), LDS traffic (``ds_read*`` / ``ds_write*``), the VGPR and
SGPR counts, the shared memory (LDS) the kernel asks for and the scratch (private segment) bytes. Nothing runs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import run as R  # noqa: E402
from sass import compile_variant  # noqa: E402

_META = {
    "vgpr": re.compile(r"\.vgpr_count:\s+(\d+)"),
    "sgpr": re.compile(r"\.sgpr_count:\s+(\d+)"),
    "scratch": re.compile(r"\.private_segment_fixed_size:\s+(\d+)"),
}
_COUNT = {
    "mfma": re.compile(r"^\s*v_mfma", re.M),
    "buffer_load": re.compile(r"^\s*buffer_load", re.M),
    "global_load": re.compile(r"^\s*global_load", re.M),
    "ds_read": re.compile(r"^\s*ds_read", re.M),
    "ds_write": re.compile(r"^\s*ds_write", re.M),
    "buffer_store": re.compile(r"^\s*buffer_store", re.M),
    "global_store": re.compile(r"^\s*global_(store|atomic)", re.M),
}


def inspect(asm: str) -> dict:
    out = {k: len(r.findall(asm)) for k, r in _COUNT.items()}
    for k, r in _META.items():
        m = r.search(asm)
        out[k] = int(m.group(1)) if m else None
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--row", default="r50_l1_3x3_64_n32")
    ap.add_argument("--variants", default="")
    ap.add_argument("--arch", default="gfx942,gfx950")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    import triton

    p = R.read_rows(R.ROOT / "tests" / "data" / "wgrad_shapes.csv", [a.row])[0]
    want = set(filter(None, a.variants.split(",")))
    results = []
    for v in R.VARIANTS + R.SASS_ONLY:
        if want and v.name not in want:
            continue
        for arch in a.arch.split(","):
            row = {"variant": v.name, "arch": arch}
            try:
                k = compile_variant(v, p, target=("hip", arch, 64))
                row.update(ok=True, **inspect(k.asm["amdgcn"]), shared=int(k.metadata.shared))
            except Exception as e:  # noqa: BLE001  (a compiler failure is the finding, recorded per variant)
                msg = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
                row.update(ok=False, error=f"{type(e).__name__}: {' | '.join(msg[-3:])[:400]}")
            results.append(row)
            if row["ok"]:
                print(f"{v.name:36s} {arch}  mfma {row['mfma']:3d}  buffer_load {row['buffer_load']:3d}  global_load {row['global_load']:3d}"
                      f"  ds_read {row['ds_read']:3d}  vgpr {row['vgpr']}  shared {row['shared']}  scratch {row['scratch']}", flush=True)  # fmt: skip
            else:
                print(f"{v.name:36s} {arch}  FAILED  {row['error']}", flush=True)
    doc = {"row": a.row, "triton": triton.__version__, "results": results}
    if a.out:
        Path(a.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
