"""Minimal, well-formed code objects for cache tests: an ELF64 with the machine of the target
(AMDGPU or CUDA), a symbol table naming the kernel and, for AMD, an ``NT_AMDGPU_METADATA`` note
(msgpack) with the kernel's resources, so ``skwgrad.abi.codeobject`` and the cache's binding
checks read them exactly as they read a real compiler's. The payload makes each object distinct.

``fake_compiled(spec, arch)`` returns a ``CompiledKernel`` whose metadata agrees with the spec,
the arch and the object, as ``skwgrad.aot.compile`` would record it.
"""

from __future__ import annotations

import hashlib
import struct

import msgpack

from skwgrad.abi.arch import get_arch

EM_AMDGPU, EM_CUDA = 224, 190
_MACH = {"gfx942": 0x04C, "gfx950": 0x04F}


def _note(name: bytes, ntype: int, desc: bytes) -> bytes:
    pad = lambda b: b + b"\0" * (-len(b) % 4)  # noqa: E731
    return struct.pack("<III", len(name) + 1, len(desc), ntype) + pad(name + b"\0") + pad(desc)


def nv_info(params: list[tuple[int, int]]) -> bytes:
    """A ``.nv.info.<kernel>`` section body: one EIATTR_KPARAM_INFO record per (offset, size)."""
    out = b""
    for i, (off, size) in enumerate(params):
        out += struct.pack("<BBH", 4, 0x17, 12) + struct.pack("<IHHI", 0, i, off, (size << 18) | 0x1F000)
    return out


def build_elf(arch: str, kernel: str, payload: bytes = b"", amd_kernel: dict | None = None, params=None) -> bytes:
    a = get_arch(arch)
    amd = a.backend == "hip"
    strtab = b"\0" + kernel.encode() + b"\0"
    info = b"" if amd or params is None else nv_info(params)
    shnames = [b"", b".note", b".text", b".strtab", b".symtab", b".shstrtab"] + ([b".nv.info." + kernel.encode()] if info else [])
    shstrtab = b"\0".join(shnames) + b"\0"
    name_off = [0]
    for n in shnames[1:]:
        name_off.append(shstrtab.index(b"\0" + n + b"\0") + 1)
    note = b""
    if amd:
        meta = {"amdhsa.version": [1, 2], "amdhsa.target": f"amdgcn-amd-amdhsa--{arch}", "amdhsa.kernels": [amd_kernel]}
        note = _note(b"AMDGPU", 32, msgpack.packb(meta))
    text = payload or b"\0" * 16
    sym = struct.pack("<IBBHQQ", 0, 0, 0, 0, 0, 0) + struct.pack("<IBBHQQ", 1, 0x12, 0, 2, 0, len(text))
    # layout: header (64) | phdr (56) | note | text | strtab | symtab | shstrtab | section headers
    off = 64 + 56
    blobs, offs = [note, text, strtab, sym, shstrtab] + ([info] if info else []), []
    for b in blobs:
        off += -off % 8
        offs.append(off)
        off += len(b)
    off += -off % 8
    shoff = off
    flags = _MACH[arch] if amd else (int(arch.removeprefix("sm_")) | (int(arch.removeprefix("sm_")) << 16))
    ident = b"\x7fELF" + bytes([2, 1, 1, 64 if amd else 51, 3 if amd else 7]) + b"\0" * 7
    hdr = ident + struct.pack("<HHIQQQIHHHHHH", 3 if amd else 2, EM_AMDGPU if amd else EM_CUDA, 1, 0, 64, shoff, flags, 64, 56, 1, 64, len(shnames), 5)
    phdr = struct.pack("<IIQQQQQQ", 4, 4, offs[0], 0, 0, len(note), len(note), 4)
    out = bytearray(hdr + phdr)
    for o, b in zip(offs, blobs):
        out += b"\0" * (o - len(out)) + b
    out += b"\0" * (shoff - len(out))
    sh = [struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)]
    types = [7, 1, 3, 2, 3, 0x70000000][: len(blobs)]
    for i, (o, b) in enumerate(zip(offs, blobs)):
        link = 3 if types[i] == 2 else 0
        info = 1 if types[i] == 2 else 0
        ent = 24 if types[i] == 2 else 0
        sh.append(struct.pack("<IIQQQQIIQQ", name_off[i + 1], types[i], 0, 0, o, len(b), link, info, 8 if types[i] == 2 else 1, ent))
    out += b"".join(sh)
    return bytes(out)


def fake_compiled(spec, arch: str = "gfx942", salt: bytes = b"", compiler: str | None = None, name: str | None = None):
    """A ``CompiledKernel`` with a well-formed object and metadata that agree with ``spec``."""
    from skwgrad.abi.identity import compiler_identity
    from skwgrad.aot.compile import CompiledKernel
    from skwgrad.abi import codeobject

    a = get_arch(arch)
    name = name or f"{spec.family}_{spec.variant}_kernel"
    decl = spec.kernarg_decl
    tail = 2 if a.backend == "hip" else 1
    slots, size = decl.layout(tail)
    threads = spec.threads_per_cta(a.wave_size)
    shared = 4096
    payload = hashlib.sha256(f"{spec.canonical_json()}|{arch}".encode() + salt).digest() * 32
    amd = None
    amd_kernel = None
    if a.backend == "hip":
        amd_kernel = {
            ".name": name, ".symbol": name + ".kd",
            ".args": [{".offset": s.offset, ".size": s.arg.size, ".value_kind": "global_buffer" if s.arg.kind == "ptr" else "by_value"} for s in slots]
            + [{".offset": size, ".size": 8, ".value_kind": "hidden_block_count_x"}],
            ".kernarg_segment_size": size + 8, ".group_segment_fixed_size": shared, ".private_segment_fixed_size": 0,
            ".wavefront_size": a.wave_size, ".vgpr_count": 64, ".sgpr_count": 30, ".vgpr_spill_count": 0,
            ".sgpr_spill_count": 2, ".max_flat_workgroup_size": threads,
        }  # fmt: skip
    binary = build_elf(arch, name, payload, amd_kernel, params=[(s.offset, s.arg.size) for s in slots])
    if a.backend == "hip":
        amd = codeobject.amdgpu_summary(binary, name)
    md = {
        "name": name, "arch": arch, "label": spec.label, "binary_kind": "hsaco" if a.backend == "hip" else "cubin",
        "num_warps": spec.num_warps, "threads": threads, "shared": shared,
        "kernarg": {"names": list(decl.names), "offsets": [s.offset for s in slots[: len(decl.args)]], "size": size, "tail_pointers": tail},
        "flags_per_cta": 0, "compiler": compiler or compiler_identity(), "compile_seconds": 0.25, "amd": amd,
    }  # fmt: skip
    if spec.family == "wgrad_tma":
        from test_launcher_fakes import fake_tensor_maps

        md["tensor_maps"] = fake_tensor_maps(spec)
    return CompiledKernel(spec, arch, binary, md)
