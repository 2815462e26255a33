"""First evidence for the levers without a GPU: compile each variant of run.py for sm_90 with the
build machine's Triton and count the SASS of its main loop.

    python benchmarks/mainloop/sass.py [--row r50_l1_3x3_64_n32] [--variants a,b] [--out sass.json] [--dump DIR]

The main loop is the innermost backward branch whose body holds the wgmmas (HGMMA). Reported per
variant: instructions in that loop body, HGMMA and TMA (UTMALDG) instructions in it, barrier waits,
the MACs one trip does (BM x BN x BK x TAPS) and the warp-instructions issued per 64x64x16 bf16
MMA step (64 tensor-core cycles of an SM, i.e. 256 issue slots of its 4 schedulers),
registers, shared memory and whether the kernel needs global scratch (on-device descriptors do:
skwgrad's AOT launcher passes none today).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import run as R  # noqa: E402


def _tools():
    import triton

    b = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    return b / "cuobjdump", b / "nvdisasm"


def compile_variant(v: R.Variant, p: R.Problem, target=("cuda", 90, 32)):
    """``target``: (backend, arch, warp size), sm_90 unless told (amd.py: ("hip", "gfx942", 64))."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = R.kernel(v.kernel_kind)
    if v.kind == "base":
        consts = dict(BM=v.bm, BN=v.bn, BK=v.bk, IS_3D=False, POINTWISE=(p.y == 1 and p.x == 1 and p.pad == 0),
                      VEC_C=8, VEC_K=8, INPUT_PRECISION="ieee", VARIANT="atomic", X_CACHE=".ca" if target[0] == "cuda" else "")  # fmt: skip
        ptrs = {"dy": "*bf16", "x": "*bf16", "dw": "*fp32", "ws_ptr": "*fp32"}
    else:
        pn, ph, pw = R.geometry(v, p)[2]["patch"]
        consts = dict(BM=v.bm, BN=v.bn, PN=pn, PH=ph, PW=pw, TAPS=v.taps, ADDR=v.addr, WS=v.ws, MODE=v.mode)
        ptrs = {"dy": "*bf16", "x": "*bf16", "dw32": "*fp32"}
        if v.desc == "host":
            bk = pn * ph * pw
            dyb = [pn, ph, pw, v.bm] if v.mode == "4d" else [bk, v.bm]
            xb = [bk, v.bn] if v.mode == "gemm2d" else [pn, ph, pw, v.bn]
            ptrs = {"dy_desc": f"tensordesc<bf16{dyb}>", "x_desc": f"tensordesc<bf16{xb}>", "dw32": "*fp32"}
    sig = {}
    for a in fn.arg_names:
        sig[a] = "constexpr" if a in consts else ptrs.get(a, "i32")
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if ptrs.get(a, "").startswith("*")}
    src = ASTSource(fn, sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget(*target),
                          options={"num_warps": v.warps, "num_stages": v.stages, "enable_fp_fusion": True})  # fmt: skip


_INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?);")
_LABEL = re.compile(r"^\.(L_x_\d+):")


def sass_lines(cubin: bytes):
    cuobjdump, nvdisasm = _tools()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d, "k.cubin")
        path.write_bytes(cubin)
        out = subprocess.run([str(nvdisasm), "-c", str(path)], capture_output=True, text=True, check=True).stdout
        res = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(path)], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+)", res)
    regs = int(m.group(1)) if m else None
    insns, labels = [], {}
    for line in out.splitlines():
        m = _LABEL.match(line.strip())
        if m:
            labels[m.group(1)] = len(insns)
            continue
        m = _INSN.match(line)
        if m:
            insns.append((int(m.group(1), 16), m.group(2).strip()))
    return insns, labels, out, regs


def main_loop(insns, labels, holds=lambda body: any("HGMMA" in t for t in body), largest=False):
    """(start, end) indices of the smallest (``largest``: the largest) backward-branch loop whose
    body ``holds`` (default: an HGMMA)."""
    best = None
    for i, (_, text) in enumerate(insns):
        m = re.search(r"\bBRA\b.*?`?\(?\.?(L_x_\d+)\)?", text)
        if not m or m.group(1) not in labels:
            continue
        j = labels[m.group(1)]
        if j > i:
            continue
        if holds([t for _, t in insns[j : i + 1]]):
            if best is None or ((i - j) > (best[1] - best[0]) if largest else (i - j) < (best[1] - best[0])):
                best = (j, i)
    return best


def analyse(v, p, ck):
    insns, labels, text, regs = sass_lines(ck.asm["cubin"])
    md = ck.metadata
    res = {"variant": v.name, "row": p.name, "total_insns": len(insns), "regs": regs,
           "shared": md.shared, "global_scratch": getattr(md, "global_scratch_size", 0)}  # fmt: skip
    if v.kind == "tma":
        res["patch"] = list(R.geometry(v, p)[2]["patch"])
    loop = main_loop(insns, labels)
    if loop is None:
        res["loop"] = None
        return res, text
    body = [t for _, t in insns[loop[0] : loop[1] + 1]]

    def count(pat):
        return sum(1 for t in body if re.search(pat, t))

    macs = v.bm * v.bn * v.bk * v.taps
    res.update(
        loop_insns=len(body), hgmma=count(r"HGMMA"), tma_loads=count(r"UTMALDG"), ldgsts=count(r"LDGSTS"),
        ldg=count(r"\bLDG\b"), bar_waits=count(r"SYNCS\.PHASECHK|SYNCS\.ARRIVE|BAR\.SYNC|WARPSYNC|DEPBAR"),
        uniform=count(r"^\s*(@!?U?P\d+\s+)?U[A-Z]"), macs_per_trip=macs,
        insns_per_64x64x16=round(len(body) / (macs / (64 * 64 * 16)), 2),
        # every warp runs the loop body: warp-instructions the SM issues per 64x64x16 bf16 MMA step,
        # against the 256 issue slots (4 schedulers x 64 cycles) that step keeps the tensor cores busy
        issue_per_mma_step=round(len(body) * v.warps / (macs / (64 * 64 * 16)), 1),
    )  # fmt: skip
    res["issue_fraction"] = round(res["issue_per_mma_step"] / 256, 3)
    return res, text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--row", default="r50_l1_3x3_64_n32")
    ap.add_argument("--variants", default="")
    ap.add_argument("--out", default="")
    ap.add_argument("--dump", default="", help="directory for each variant's SASS and TTGIR")
    a = ap.parse_args()
    p = R.read_rows(R.ROOT / "tests" / "data" / "wgrad_shapes.csv", [a.row])[0]
    rows = []
    for v in R.VARIANTS + R.SASS_ONLY:
        if a.variants and v.name not in a.variants.split(","):
            continue
        if v.applies(p):
            continue
        try:
            ck = R_compile = compile_variant(v, p)  # noqa: F841
        except Exception as e:
            rows.append({"variant": v.name, "row": p.name, "error": f"{type(e).__name__}: {str(e)[:300]}"})
            print(f"{v.name:<28} compile FAILED {str(e)[:200]}", flush=True)
            continue
        res, text = analyse(v, p, ck)
        rows.append(res)
        if a.dump:
            Path(a.dump).mkdir(parents=True, exist_ok=True)
            Path(a.dump, f"{v.name}.sass").write_text(text)
            Path(a.dump, f"{v.name}.ttgir").write_text(ck.asm["ttgir"])
        if res.get("loop_insns"):
            print(f"{v.name:<28} loop {res['loop_insns']:4d} insns: {res['hgmma']:2d} HGMMA {res['tma_loads']:2d} UTMALDG "
                  f"{res['ldgsts']:3d} LDGSTS {res['uniform']:3d} uniform | {res['issue_per_mma_step']:6.1f} warp-insns per 64x64x16 "
                  f"({100 * res['issue_fraction']:3.0f}% of issue) | "
                  f"regs {res['regs']} smem {res['shared']} scratch {res['global_scratch']}", flush=True)  # fmt: skip
        else:
            print(f"{v.name:<28} no HGMMA loop found (total {res['total_insns']} insns)", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
