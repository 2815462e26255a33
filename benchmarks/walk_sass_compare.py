"""The row-walk kernel as the product builds it against its measured prototype, in SASS, on the CPU.

    .venv/bin/python benchmarks/walk_sass_compare.py

The prototype (``dw_vert_proto.dw_vert``, configuration c16p32w2v4up, timed as a JIT kernel on the
H200 in run G1) and the product kernel (``dwconv_walk_wgrad``, the sm_90 bf16 default, fp32 dW) are
compiled here by the pinned Triton with the same pointer alignment, and their instructions counted
by opcode (nvdisasm): the same FFMA and LDG counts say the product's loop is the measured one; the
rest shows what the product's epilogue (``_epi_group``) and addressing change. Not a timing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

OPS = ("FFMA", "LDG", "PRMT", "IMAD", "IADD3", "LEA", "SHF", "LOP3", "ISETP", "MOV", "BAR", "STS", "LDS")


def sass_counts(cubin: bytes) -> tuple[int, dict]:
    import triton

    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True, check=True).stdout
    ops = [re.sub(r"^\s*/\*[0-9a-f]+\*/\s*(@!?U?P\w+\s+)?", "", ln).split()[0] for ln in out.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", ln)]
    c = Counter(o.split(".")[0] for o in ops)
    return len(ops), {k: c[k] for k in OPS}


def main():
    import triton
    from triton.compiler import ASTSource

    import dw_vert_proto as proto
    from skwgrad.abi.arch import get_arch
    from skwgrad.aot.compile import compile_spec, triton_target
    from skwgrad.aot.sweep import dwconv_walk_specs

    names = ("x", "dy", "dw", "N", "G", "Hi", "Wi", "Ho", "Wo", "pad_h", "pad_w", "rows_per_split")
    sig = {n: ("*bf16" if n in ("x", "dy") else "*fp32" if n == "dw" else "i32") for n in names}
    consts = dict(BC=16, BP=32, BW=2, KY=3, KX=3, VEC=4, UNROLL=3, PREFETCH=True)  # c16p32w2v4up
    sig.update({k: "constexpr" for k in consts})
    aligned = {(i,): [["tt.divisibility", 16]] for i in range(3)}  # the three pointers, as the product's declaration
    ck = triton.compile(ASTSource(fn=proto.dw_vert, signature=sig, constexprs=consts, attrs=aligned),
                        target=triton_target(get_arch("sm_90")), options=dict(num_warps=4))  # fmt: skip
    spec = next(s for s in dwconv_walk_specs("default", "sm_90", "bf16") if s.variant == "atomic")
    k = compile_spec(spec, "sm_90")
    for name, cubin in (("prototype c16p32w2v4up", ck.asm["cubin"]), (spec.label, k.binary)):
        n, c = sass_counts(cubin)
        print(f"{name:56s} {n:5d} instructions  " + " ".join(f"{op} {c[op]}" for op in OPS))
    print(f"product registers {k.metadata['regs']}, stack {k.metadata['stack_bytes']} bytes")


if __name__ == "__main__":
    main()
