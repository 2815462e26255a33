"""Depthwise window kernels on the build machine: registers, spills and the SASS of the main loop
per configuration (sm_90), before any GPU time is spent on them.

    python benchmarks/dw_sass.py --spec bf16:bf16:7:win7:32x32x4:v8 --spec bf16:bf16:7:win7r7:64x4x4:v2 [--out F.json]

A spec is ``dtype:dw_dtype:X:mode:BCxBPxWARPS[:vVEC]`` (a 2-D dwconv window kernel, workspace
epilogue for a dW in the input dtype, atomic for fp32). Reported: registers, stack bytes, the
instructions of the innermost backward-branch loop that holds FFMAs, their FFMA / LDG / conversion
(PRMT, SHF, IMAD.U32, F2F, HADD2.F32) counts, and instructions per multiply-add product per thread:
one trip is BP strips x BW columns x X taps x TR tap rows x BC channels over the CTA's threads.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks" / "mainloop"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def parse(s: str):
    from skwgrad.abi.spec import KernelSpec

    from skwgrad.abi.spec import DTYPE_BYTES

    dt, dw, x, mode, cfg, *rest = s.split(":")
    vec = rest[0] if rest else f"v{16 // DTYPE_BYTES[dt]}"  # default: 16-byte channel vectors
    bc, bp, warps = (int(v) for v in cfg.split("x"))
    variant = "workspace" if dw == dt != "fp32" else "atomic"
    return KernelSpec(
        "dwconv", variant, dt, dw, spatial_dims=2, vec_c=int(vec[1:]), vec_k=int(vec[1:]),
        bm=bc, bn=int(x), bk=bp, num_warps=warps, num_stages=1, precision="ieee" if dt == "fp32" else "", mode=mode,
    )  # fmt: skip


def analyse(spec):
    from sass import main_loop, sass_lines

    from skwgrad.aot.compile import compile_spec

    ck = compile_spec(spec, "sm_90")
    insns, labels, _text, regs = sass_lines(bytes(ck.binary))
    win = spec.dwconv_window
    threads = spec.num_warps * 32
    products = spec.bk * win.bw * spec.bn * win.tr * spec.bm / threads
    res = {"label": spec.label, "regs": regs, "stack": ck.metadata.get("stack_bytes"), "products_per_thread": products}
    # the strip loop: the largest loop of 8+ FFMAs (its unrolled body holds no inner loop)
    loop = main_loop(insns, labels, holds=lambda body: sum("FFMA" in t for t in body) >= 8, largest=True)
    if loop is None:
        res["loop"] = None
        return res
    body = [t for _, t in insns[loop[0] : loop[1] + 1]]

    def count(pat):
        return sum(1 for t in body if re.search(pat, t))

    res.update(
        loop_insns=len(body), ffma=count(r"\bFFMA\b"), ldg=count(r"\bLDG\b"), stl=count(r"\bSTL\b|\bLDL\b"),
        convert=count(r"\bPRMT\b|\bSHF\b|IMAD\.U32|\bF2F|HADD2\.F32|\bLOP3\b"),
        per_product=round(len(body) / products, 3),
    )  # fmt: skip
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", action="append", required=True)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    run_specs(a.spec, lambda s: analyse(parse(s)), a.out)


def run_specs(specs, analyse_one, out=""):
    """``analyse_one`` of each spec string, a JSON line each (and a list in ``out``); a configuration
    that does not compile is a result too (its error)."""
    rows = []
    for s in specs:
        try:
            r = analyse_one(s)
        except Exception as e:  # noqa: BLE001
            r = {"error": f"{type(e).__name__}: {str(e)[:400]}"}
        r["spec"] = s
        rows.append(r)
        print(json.dumps(r), flush=True)
    if out:
        Path(out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
