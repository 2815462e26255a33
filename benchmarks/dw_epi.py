"""Epilogue SASS counts of depthwise window kernels (sm_90): the instructions after the main loop.

    python benchmarks/dw_epi.py --spec bf16:bf16:7:win7:16x64x4[:vVEC][:VARIANT] [--dump DIR]
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks", ROOT / "benchmarks" / "mainloop"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import dataclasses  # noqa: E402

import dw_sass  # noqa: E402

PATS = {
    "shfl": r"\bSHFL\b", "fadd": r"\bFADD\b", "bar": r"\bBAR\b", "sts": r"\bSTS\b|\bSTSM\b", "lds": r"\bLDS\b|\bLDSM\b",
    "red": r"\bRED\b|\bATOM\b|\bATOMG\b|\bREDG\b", "stg": r"\bSTG\b", "sel": r"\bSEL\b|\bFSEL\b",
    "mov": r"\bMOV\b", "bra": r"\bBRA\b",
}


ARCH = "sm_90"


def analyse(s, dump=""):
    from sass import main_loop, sass_lines

    from skwgrad.aot.compile import compile_spec

    parts = s.split(":")
    variant = None
    if parts[-1] in ("direct", "atomic", "workspace", "two_stage"):
        variant = parts.pop()
    spec = dw_sass.parse(":".join(parts))
    if variant:
        spec = dataclasses.replace(spec, variant=variant)
    ck = compile_spec(spec, ARCH)
    insns, labels, text, regs = sass_lines(bytes(ck.binary))
    loop = main_loop(insns, labels, holds=lambda body: sum("FFMA" in t for t in body) >= 8, largest=True)
    body = [t for _, t in insns[loop[0] : loop[1] + 1]]
    epi = [t for _, t in insns[loop[1] + 1 :] if not t.startswith("NOP")]
    res = {"spec": s, "regs": regs, "stack": ck.metadata.get("stack_bytes"), "loop": len(body),
           "pre": loop[0], "epi": len(epi), "shared": ck.metadata.get("shared")}
    for k, pat in PATS.items():
        res[k] = sum(1 for t in epi if re.search(pat, t))
    if dump:
        Path(dump).mkdir(parents=True, exist_ok=True)
        name = s.replace(":", "_")
        Path(dump, name + ".sass").write_text(text)
        Path(dump, name + ".loop").write_text("\n".join(body))
        Path(dump, name + ".epi").write_text("\n".join(epi))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", action="append", required=True)
    ap.add_argument("--dump", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    dw_sass.run_specs(a.spec, lambda s: analyse(s, a.dump), a.out)


if __name__ == "__main__":
    main()
