"""Read the kernarg layout and resource use back out of compiled code objects.

AMD: the ``NT_AMDGPU_METADATA`` note of the HSA code object (an ELF), a msgpack map with one
entry per kernel: ``.args`` (offset, size, value kind), ``.kernarg_segment_size``,
``.group_segment_fixed_size`` (LDS), ``.private_segment_fixed_size`` (scratch: spills),
``.wavefront_size``, ``.vgpr_count``, ``.sgpr_count``, ... NVIDIA: the ``.entry`` parameter list
of the PTX the cubin was assembled from (at load time, ``cuFuncGetParamInfo`` says the same).

The compile step checks both against ``skwgrad.abi.kernargs``; a mismatch is a build failure.
"""

from __future__ import annotations

import io
import re

import msgpack
from elftools.elf.elffile import ELFFile

from skwgrad.errors import AbiError

NT_AMDGPU_METADATA = 32


def amdgpu_metadata(hsaco: bytes) -> dict:
    """The decoded ``NT_AMDGPU_METADATA`` map of an AMD code object."""
    elf = ELFFile(io.BytesIO(hsaco))
    if elf["e_machine"] != "EM_AMDGPU":
        raise AbiError(f"not an AMDGPU code object (ELF machine {elf['e_machine']})")
    for seg in elf.iter_segments():
        if seg["p_type"] != "PT_NOTE":
            continue
        for note in seg.iter_notes():
            if note["n_name"] == "AMDGPU" and note["n_type"] in (NT_AMDGPU_METADATA, "NT_AMDGPU_METADATA"):
                desc = note["n_desc"]
                raw = desc if isinstance(desc, bytes) else desc.encode("latin-1")
                return msgpack.unpackb(raw, raw=False, strict_map_key=False)
    raise AbiError("AMDGPU code object has no NT_AMDGPU_METADATA note")


def amdgpu_kernel(hsaco: bytes, name: str) -> dict:
    meta = amdgpu_metadata(hsaco)
    for k in meta.get("amdhsa.kernels", []):
        if k.get(".name") == name:
            return k
    raise AbiError(f"kernel {name!r} not in the code object's metadata")


def amdgpu_summary(hsaco: bytes, name: str) -> dict:
    """The resource figures the cache records for an AMD kernel."""
    k = amdgpu_kernel(hsaco, name)
    return {
        "target": amdgpu_metadata(hsaco).get("amdhsa.target", ""),
        "kernarg_segment_size": k[".kernarg_segment_size"],
        # Explicit kernargs only: the HIP runtime fills the hidden_* ones (work-group sizes,
        # queue, dynamic LDS size, ...) after them, whatever way the explicit ones are passed.
        "args": [
            {"offset": a[".offset"], "size": a[".size"], "kind": a[".value_kind"]}
            for a in k[".args"]
            if not a[".value_kind"].startswith("hidden_")
        ],
        "hidden_args": [a[".value_kind"] for a in k[".args"] if a[".value_kind"].startswith("hidden_")],
        "lds_bytes": k[".group_segment_fixed_size"],
        "scratch_bytes": k[".private_segment_fixed_size"],
        "wavefront_size": k[".wavefront_size"],
        "vgpr_count": k[".vgpr_count"],
        "agpr_count": k.get(".agpr_count", 0),
        "sgpr_count": k[".sgpr_count"],
        "vgpr_spill_count": k.get(".vgpr_spill_count", 0),
        "sgpr_spill_count": k.get(".sgpr_spill_count", 0),
        "max_flat_workgroup_size": k[".max_flat_workgroup_size"],
    }


_PTX_PARAM = re.compile(r"\.param\s+\.(?P<type>[usbf]\d+)(?:\s+\.ptr(?:\s+\.\w+)*)?(?:\s+\.align\s+\d+)?\s+(?P<name>\w+)")


def ptx_params(ptx: str, name: str) -> list[dict]:
    """(size, offset) of each ``.entry`` parameter, laid out with natural alignment as CUDA does."""
    m = re.search(r"\.entry\s+" + re.escape(name) + r"\s*\((?P<params>.*?)\)", ptx, re.S)
    if not m:
        raise AbiError(f"PTX has no .entry {name}")
    out, offset = [], 0
    for p in _PTX_PARAM.finditer(m.group("params")):
        size = int(p.group("type")[1:]) // 8
        offset = -(-offset // size) * size
        out.append({"offset": offset, "size": size})
        offset += size
    return out


# EIATTR records of a cubin's ``.nv.info.<kernel>`` section: (format u8, attribute u8), then for
# format EIFMT_SVAL a u16 size and that many bytes, for EIFMT_HVAL a u16 value, for EIFMT_BVAL a u8
# (and a pad byte), for EIFMT_NVAL nothing more (u16 zero). KPARAM_INFO's value (12 bytes): u32
# index, u16 ordinal, u16 offset, u32 whose bits 18..31 are the size in bytes.
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4
EIATTR_KPARAM_INFO = 0x17


def cubin_params(cubin: bytes, name: str) -> list[dict]:
    """(offset, size) of each parameter of kernel ``name``, by ordinal, from the cubin's
    EIATTR_KPARAM_INFO records: the layout the driver uses (``cuFuncGetParamInfo`` reports the
    same). Unlike natural alignment from 0, it places a 64-byte aligned tensor map at 48."""
    import struct

    elf = ELFFile(io.BytesIO(cubin))
    sec = elf.get_section_by_name(f".nv.info.{name}")
    if sec is None:
        raise AbiError(f"cubin has no .nv.info.{name} section")
    data, pos, params = sec.data(), 0, {}
    while pos + 2 <= len(data):
        fmt, attr = data[pos], data[pos + 1]
        pos += 2
        if fmt == _EIFMT_SVAL:
            (size,) = struct.unpack_from("<H", data, pos)
            value = data[pos + 2 : pos + 2 + size]
            pos += 2 + size
            if attr == EIATTR_KPARAM_INFO:
                _, ordinal, offset, bits = struct.unpack_from("<IHHI", value)
                params[ordinal] = {"offset": offset, "size": (bits >> 18) & 0x3FFF}
        elif fmt in (_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL):
            pos += 2
        else:
            raise AbiError(f".nv.info.{name}: unknown EIATTR format {fmt} at byte {pos - 2}")
    if sorted(params) != list(range(len(params))):
        raise AbiError(f".nv.info.{name}: parameter ordinals {sorted(params)} are not 0..{len(params) - 1}")
    return [params[i] for i in range(len(params))]


def check_layout(expected: list[tuple[int, int]], actual: list[tuple[int, int]], what: str) -> None:
    """Compare (offset, size) lists; raise with the first difference."""
    if len(expected) != len(actual):
        raise AbiError(f"{what}: the object has {len(actual)} kernargs, the declaration {len(expected)}")
    for i, (e, a) in enumerate(zip(expected, actual)):
        if tuple(e) != tuple(a):
            raise AbiError(f"{what}: kernarg {i} is (offset, size) {tuple(a)} in the object, {tuple(e)} declared")
