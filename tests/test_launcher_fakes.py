"""Fakes for the launcher's CPU tests: a backend that implements the protocol on host memory and
*emulates* the kernels from their packed kernarg bytes, and an in-memory cache with the real
cache's read API. Other test files import them with ``_fakes()``; the tests at the bottom check
the fakes themselves (so a broken fake cannot make the other tests pass vacuously).

The emulator decodes every launch with the ABI declaration (not with anything the plan kept),
so a wrong offset, a missing pointer patch or a wrong workspace offset shows up as wrong numbers
or a ``FakeFault``. For linear/tree launches it enforces the epoch-flag contract: no flag of an
SK CTA may already hold the launch's epoch (a stale flag would let an owner read a partial that
is not written yet), and after the launch every SK CTA's flags hold the epoch and its partial
slot is overwritten.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import struct
from dataclasses import dataclass, field

import numpy as np
import pytest

from skwgrad.abi.conv import DTYPE_BYTES, ConvProblem
from skwgrad.abi.padding import pad_spec
from skwgrad.abi.launch import STAGE2_BLOCK
from skwgrad.abi.spec import KernelSpec
from skwgrad.errors import CacheError
from skwgrad.launcher.hostdata import from_bits, to_bits
from skwgrad.launcher.backends.base import Backend, KernargBuffer
from skwgrad.reference import wgrad_reference

_STORE = {"fp16": np.float16, "fp32": np.float32, "bf16": np.uint16}


class FakeFault(AssertionError):
    """An emulated kernel touched memory it must not, or broke a protocol rule."""


# ---------------------------------------------------------------------------------------------
# The fake cache
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FakeEntry:
    key: str
    spec: KernelSpec
    arch: str
    label: str
    metadata: dict = field(hash=False, compare=False)
    sha256: str = ""
    nbytes: int = 0
    created: float = 0.0


KERNEL_NAMES = {"wgrad": "wgrad_splitk", "wgrad_sk": "wgrad_streamk", "stage2": "stage2_reduce", "dwconv": "dwconv_wgrad", "grouped": "grouped_wgrad", "pad": "pad_rows",
                "wgrad_tma": "wgrad_tma", "dwconv_tma": "dwconv_tma", "dwconv_walk": "dwconv_walk_wgrad"}  # fmt: skip


def fake_tensor_maps(spec: KernelSpec) -> list[dict]:
    """The descriptor metadata the compiler records for a TMA kernel: wgrad_tma's boxes split at
    64 columns (128-byte swizzle), dwconv_tma's whole and unswizzled."""
    if spec.family == "dwconv_tma":
        return [{"swizzle": 0, "elem_size": 2, "elem_type": 10, "block_size": list(box), "fp4_padded": False, "is_im2col": im2col}
                for im2col, box in spec.tensor_map_boxes]  # fmt: skip
    box = lambda rows, cols, im2col: {"swizzle": 3, "elem_size": 2, "elem_type": 10, "block_size": [rows, min(cols, 64)],  # noqa: E731
                                      "fp4_padded": False, "is_im2col": im2col}  # fmt: skip
    return [box(spec.bk, spec.bm, False), box(spec.bk, spec.tma_channels, True)]


def fake_metadata(spec: KernelSpec, arch: str, *, shared: int = 16384, tail: int = 2, wave: int | None = None) -> dict:
    """Metadata shaped like ``CompiledKernel.metadata`` (layout from the ABI declaration)."""
    wave = wave or (64 if arch.startswith("gfx") else 32)
    decl = spec.kernarg_decl
    slots, size = decl.layout(tail)
    threads = spec.threads_per_cta(wave)
    name = KERNEL_NAMES[spec.family]
    if spec.family == "wgrad_sk" and spec.variant in ("linear", "tree"):
        name = "wgrad_streamk_fixup"
    return {
        "name": name,
        "arch": arch,
        "label": spec.label,
        "binary_kind": "hsaco" if arch.startswith("gfx") else "cubin",
        "num_warps": spec.num_warps,
        "threads": threads,
        "shared": 0 if spec.family == "stage2" else shared,
        "kernarg": {"names": list(decl.names), "offsets": [s.offset for s in slots[: len(decl.args)]], "size": size, "tail_pointers": tail},
        "flags_per_cta": threads if (spec.family == "wgrad_sk" and spec.variant in ("linear", "tree")) else 0,
        "compiler": "triton-fake",
        **({"tensor_maps": fake_tensor_maps(spec)} if spec.tensor_map_boxes else {}),
    }


class FakeCache:
    """In-memory cache with the real ``Cache``'s read API (find, get, load_binary, tuned, remember_tuned,
    cost_model, remember_model)."""

    def __init__(self, path=None):
        self.path = path
        self._entries: dict[str, FakeEntry] = {}
        self._models: dict = {}
        self._blobs: dict[str, bytes] = {}
        self._tuned: dict = {}
        self.loads = 0

    def add(self, spec: KernelSpec, arch: str = "sm_90", *, metadata: dict | None = None, **md_kw) -> FakeEntry:
        md = metadata or fake_metadata(spec, arch, **md_kw)
        key = hashlib.sha256(f"{spec.canonical_json()}|{arch}".encode()).hexdigest()
        blob = json.dumps({"spec": spec.to_dict(), "arch": arch, "flags_per_cta": md.get("flags_per_cta", 0)}).encode()
        e = FakeEntry(key, spec, arch, spec.label, md, hashlib.sha256(blob).hexdigest(), len(blob))
        self._entries[key] = e
        self._blobs[key] = blob
        return e

    def find(self, arch: str, **spec_fields) -> list[FakeEntry]:
        for k in spec_fields:
            if not hasattr(KernelSpec, k) and k not in KernelSpec.__dataclass_fields__:
                raise CacheError(f"unknown spec field {k}")
        return sorted(
            (e for e in self._entries.values() if e.arch == arch and all(getattr(e.spec, k) == v for k, v in spec_fields.items())),
            key=lambda e: e.label,
        )

    def get(self, key: str) -> FakeEntry:
        try:
            return self._entries[key]
        except KeyError:
            raise CacheError(f"no cache entry {key}") from None

    def load_binary(self, entry_or_key) -> bytes:
        key = entry_or_key if isinstance(entry_or_key, str) else entry_or_key.key
        self.loads += 1
        return self._blobs[key]

    def remember_tuned(self, arch, cus, problem_key, choice):
        self._tuned[(arch, int(cus), problem_key)] = json.loads(json.dumps(choice))

    def tuned(self, arch, cus, problem_key):
        return self._tuned.get((arch, int(cus), problem_key))

    def remember_model(self, arch, cus, model):
        from skwgrad.abi.costmodel import CostModel

        self._models[(arch, int(cus))] = CostModel.from_json(model.to_json(), source="cache")

    def cost_model(self, arch, cus):
        return self._models.get((arch, int(cus)))


# ---------------------------------------------------------------------------------------------
# The fake backend
# ---------------------------------------------------------------------------------------------
class FakeBackend(Backend):
    """Host memory posing as a device; launches are recorded and emulated."""

    name = "fake"
    binary_kind = "cubin"

    def __init__(self, arch="sm_90", cus=8, max_active=2, device=0, emulate=True, max_shared=228 * 1024):
        super().__init__(device)
        self.arch = arch
        self.compute_units = cus
        self.device_name = f"Fake {arch}"
        self.max_shared = max_shared
        self.max_active = max_active
        self.emulate = emulate
        self.binary_kind = "hsaco" if arch.startswith("gfx") else "cubin"
        self._mem: dict[int, bytearray] = {}
        self._bases: list[int] = []
        self._next = 0x7F00_0000_0000
        self.calls: list[tuple] = []  # ("launch"|"memset"|"alloc"|"free"|..., details)
        self.launches: list[dict] = []
        self.memsets: list[tuple[int, int, int, int]] = []  # (ptr, byte, nbytes, stream)
        self.allocs = 0
        self.frees = 0
        self.modules_loaded = 0
        self.activations = 0
        self.syncs = 0
        self.capturing: set[int] = set()  # streams being recorded into a graph
        self.waits: list[tuple[int, int]] = []  # (stream, other) event waits

    # -- memory ------------------------------------------------------------------------------
    def _resolve(self, ptr: int, nbytes: int) -> tuple[bytearray, int]:
        i = bisect.bisect_right(self._bases, ptr) - 1
        if i < 0:
            raise FakeFault(f"address {ptr:#x} is not device memory")
        base = self._bases[i]
        buf = self._mem[base]
        off = ptr - base
        if off + nbytes > len(buf):
            raise FakeFault(f"access [{ptr:#x}, +{nbytes}) runs past the allocation at {base:#x} ({len(buf)} bytes)")
        return buf, off

    def read(self, ptr: int, nbytes: int) -> bytes:
        buf, off = self._resolve(ptr, nbytes)
        return bytes(buf[off : off + nbytes])

    def write(self, ptr: int, data: bytes) -> None:
        buf, off = self._resolve(ptr, len(data))
        buf[off : off + len(data)] = data

    def read_array(self, ptr, count, dtype_name) -> np.ndarray:
        st = np.dtype(_STORE[dtype_name])
        return np.frombuffer(self.read(ptr, count * st.itemsize), dtype=st).copy()

    def alloc(self, nbytes: int) -> int:
        self._not_while_capturing("alloc")
        nbytes = max(int(nbytes), 1)
        ptr = self._next
        self._next += -(-nbytes // 4096) * 4096 + 4096  # guard page between allocations
        self._mem[ptr] = bytearray(b"\xab" * nbytes)  # garbage, like real device memory
        bisect.insort(self._bases, ptr)
        self.allocs += 1
        self.calls.append(("alloc", nbytes, ptr))
        return ptr

    def free(self, ptr: int) -> None:
        self._not_while_capturing("free")
        if ptr not in self._mem:
            raise FakeFault(f"free of {ptr:#x}, which is not an allocation")
        del self._mem[ptr]
        self._bases.remove(ptr)
        self.frees += 1
        self.calls.append(("free", ptr))

    def live_bytes(self) -> int:
        return sum(len(b) for b in self._mem.values())

    # tensor maps: 128 bytes "TMAP", the request's index here, the address (the emulator reads them back)
    def encode_tensor_map(self, request, desc, ptr):
        self.tmap_requests = getattr(self, "tmap_requests", [])
        self.tmap_requests.append((request, dict(desc)))
        self.calls.append(("encode_tensor_map", request.operand))
        return len(self.tmap_requests) - 1

    def tensor_map_at(self, tmap, ptr):
        if ptr % 16:
            raise AssertionError("unaligned tensor-map address")
        self.calls.append(("tensor_map_at", ptr))
        return struct.pack("<4sIQ", b"TMAP", tmap, ptr).ljust(128, b"\0")

    def memset(self, ptr, byte, nbytes, stream=0):
        buf, off = self._resolve(ptr, nbytes)
        buf[off : off + nbytes] = bytes([byte]) * nbytes
        self.memsets.append((ptr, byte, nbytes, stream))
        self.calls.append(("memset", ptr, byte, nbytes, stream))

    def memcpy_htod(self, dst, src, nbytes):
        if isinstance(src, np.ndarray):
            data = np.ascontiguousarray(src).reshape(-1).view(np.uint8)[:nbytes].tobytes()
        else:
            data = bytes(memoryview(src).cast("B"))[:nbytes]
        if len(data) != nbytes:
            raise FakeFault(f"host buffer of {len(data)} bytes for a {nbytes}-byte copy")
        self.write(dst, data)
        self.calls.append(("htod", dst, nbytes))

    def memcpy_dtoh(self, dst, src, nbytes):
        data = self.read(src, nbytes)
        assert isinstance(dst, np.ndarray) and dst.flags.c_contiguous
        dst.reshape(-1).view(np.uint8)[:nbytes] = np.frombuffer(data, dtype=np.uint8)
        self.calls.append(("dtoh", src, nbytes))

    # -- protocol ----------------------------------------------------------------------------
    def activate(self):
        self.activations += 1

    def _load_module(self, binary: bytes):
        self.modules_loaded += 1
        self.calls.append(("load", len(binary)))
        return json.loads(binary)

    def _get_function(self, module, name):
        return {"spec": KernelSpec.from_dict(module["spec"]), "arch": module["arch"], "name": name,
                "flags_per_cta": module.get("flags_per_cta", 0)}

    def _prepare_function(self, handle, shared):
        handle["prepared_shared"] = shared

    def _occupancy(self, handle, threads, shared):
        return self.max_active

    def launch(self, fn, grid, threads, shared, kernargs, stream=0):
        if not isinstance(kernargs, KernargBuffer):
            kernargs = self._as_kernargs(kernargs)
        data = bytes(kernargs.data)
        # The extra array must point at the buffer: decode it like the driver would.
        import ctypes

        cfg = (ctypes.c_void_p * 5).from_address(kernargs.extra)
        assert cfg[0] == self.launch_params[0] and cfg[2] == self.launch_params[1] and (cfg[4] or 0) == self.launch_params[2]
        assert ctypes.string_at(cfg[1], kernargs.size) == data
        assert ctypes.c_size_t.from_address(cfg[3]).value == len(data)
        spec = fn.handle["spec"]
        rec = {"fn": fn, "spec": spec, "grid": grid, "threads": threads, "shared": shared, "bytes": data, "stream": stream}
        rec["args"] = decode(spec, data, fn)
        self.launches.append(rec)
        self.calls.append(("launch", spec.label, grid, stream))
        if self.emulate:
            emulate(self, spec, rec["args"], fn, grid)

    def stream_create(self):
        return 0x5000 + len(self.calls)

    def stream_destroy(self, stream):
        pass

    def stream_synchronize(self, stream):
        self._not_while_capturing("stream synchronize")
        self.syncs += 1

    def synchronize(self):
        self._not_while_capturing("device synchronize")
        self.syncs += 1

    def event_create(self):
        return {"t": None}

    def event_record(self, event, stream=0):
        event["t"] = len(self.launches)

    def event_synchronize(self, event):
        pass

    def event_elapsed_ms(self, start, end):
        return 0.001 * (end["t"] - start["t"]) * (1 + (hash(self.launches[-1]["spec"].label) % 7) / 10)

    def event_destroy(self, event):
        pass

    def pointer_device(self, ptr):
        try:
            self._resolve(ptr, 1)
        except FakeFault:
            return None
        return self.device

    def stream_is_capturing(self, stream):
        return stream in self.capturing

    def stream_wait_stream(self, stream, other):
        self.waits.append((stream, other))

    def _not_while_capturing(self, what):
        if self.capturing:
            raise FakeFault(f"{what} while a stream is being captured: the capture would be invalidated")


def decode(spec: KernelSpec, data: bytes, fn=None) -> dict:
    """The kernarg values in ``data`` by the ABI declaration (reserved slots included)."""
    decl = spec.kernarg_decl
    for t in range(0, 8):
        slots, size = decl.layout(t)
        if size == len(data):
            break
    else:
        raise FakeFault(f"kernarg block of {len(data)} bytes fits no layout of {spec.family}/{spec.variant}")
    out = {}
    for s in slots:
        if s.arg.kind == "ptr":
            out[s.arg.name] = struct.unpack_from("<Q", data, s.offset)[0]
        elif s.arg.kind == "i64":
            out[s.arg.name] = struct.unpack_from("<q", data, s.offset)[0]
        elif s.arg.kind == "tmap":
            magic, index, ptr = struct.unpack_from("<4sIQ", data, s.offset)
            if magic != b"TMAP":
                raise FakeFault(f"{s.arg.name} is not a tensor map this backend encoded")
            out[s.arg.name] = (index, ptr)
        else:
            out[s.arg.name] = struct.unpack_from("<i", data, s.offset)[0]
    return out


def _problem_from_args(a: dict, spec: KernelSpec, dtype: str, dw_dtype: str) -> ConvProblem:
    dims_in = (a["Di"], a["Hi"], a["Wi"])
    dims_out = (a["Do"], a["Ho"], a["Wo"])
    filt = (a["Z"], a["Y"], a["X"])
    stride = (a["stride_d"], a["stride_h"], a["stride_w"])
    pad = (a["pad_d"], a["pad_h"], a["pad_w"])
    dil = (a["dil_d"], a["dil_h"], a["dil_w"])
    pad_hi = tuple(max(0, (o - 1) * s + d * (f - 1) + 1 - i - p) for i, o, f, s, p, d in zip(dims_in, dims_out, filt, stride, pad, dil))
    p = ConvProblem(
        n=a["N"], c=a["C"], k=a["K"], g=a["G"], di=dims_in[0], hi=dims_in[1], wi=dims_in[2], z=filt[0], y=filt[1], x=filt[2],
        stride=stride, pad_lo=pad, pad_hi=pad_hi, dilation=dil, dtype=dtype, dw_dtype=dw_dtype, spatial_dims=spec.spatial_dims,
    )  # fmt: skip
    if (p.do, p.ho, p.wo) != dims_out:
        raise FakeFault(f"kernargs Do/Ho/Wo {dims_out} do not follow from the other scalars ({(p.do, p.ho, p.wo)})")
    return p


def _reference(be, p: ConvProblem, a: dict, rows: tuple[int, int] | None = None) -> np.ndarray:
    x = from_bits(be.read_array(a["x"], p.x_numel, p.dtype), p.dtype)
    dy = from_bits(be.read_array(a["dy"], p.dy_numel, p.dtype), p.dtype).reshape(-1, p.g * p.k)
    if rows is not None:
        keep = np.zeros(dy.shape[0], dtype=bool)
        keep[rows[0] : rows[1]] = True
        dy = np.where(keep[:, None], dy, 0.0)
    return wgrad_reference(p, x, dy).reshape(-1)


def _store(be, ptr, values, dtype):
    be.write(ptr, np.ascontiguousarray(to_bits(values, dtype)).tobytes())


def _emulate_pad(be: FakeBackend, spec: KernelSpec, a: dict, grid) -> None:
    """The pad kernel's two copies (skwgrad.aot.kernels.pad), after checking the grid covers each
    copy exactly as the kernel splits it."""
    from skwgrad.abi.padding import PAD_BLOCK, PAD_SCATTER_COLS, vector_width

    st = np.dtype(_STORE[spec.dtype])
    w = vector_width(spec.dtype)
    programs = []
    for i in range(2):
        rows, width, sp, dp = (a[f"{n}{i}"] for n in ("rows", "width", "src_pitch", "dst_pitch"))
        gr, sgr, scatter = a[f"group_rows{i}"], a[f"src_group_rows{i}"], a[f"scatter{i}"]
        if rows == 0:
            programs.append(0)
            continue
        if not 0 < width <= dp or width > sp or rows % gr or scatter not in (0, 1):
            raise FakeFault(f"pad copy {i}: width {width}, pitches ({sp}, {dp}), rows {rows}/{gr}, scatter {scatter}")
        if not scatter and dp % w:
            raise FakeFault(f"pad copy {i}: a gather's destination pitch is not a multiple of {w}")
        if not scatter and gr != sgr:
            raise FakeFault(f"pad copy {i}: a gather maps row r to r; it cannot drop rows of groups ({gr} of {sgr})")
        if scatter:  # tiles of destination rows by PAD_SCATTER_COLS columns
            programs.append(-(-rows // (PAD_BLOCK // PAD_SCATTER_COLS)) * -(-dp // PAD_SCATTER_COLS))
        else:  # PAD_BLOCK destination elements
            programs.append(-(-rows * dp // PAD_BLOCK))
        r = np.arange(rows)
        srow = (r // gr) * sgr + r % gr
        n_src = int(srow.max()) * sp + width
        src = np.frombuffer(be.read(a[f"src{i}"], n_src * st.itemsize), dtype=st)
        out = np.zeros((rows, dp), dtype=st)
        out[:, :width] = src[srow[:, None] * sp + np.arange(width)[None, :]]
        be.write(a[f"dst{i}"], out.tobytes())
    if grid is not None and (a["split"] != programs[0] or _grid_size(grid) != sum(programs)):
        raise FakeFault(f"pad grid {grid} split {a['split']}: the copies need {programs}")


def _grid_size(grid) -> int:
    return int(np.prod(grid)) if isinstance(grid, (tuple, list)) else int(grid)


def _map_pointers(be: FakeBackend, a: dict, geo) -> dict:
    """{operand: address} of a TMA launch's two tensor maps, each checked to have been encoded for
    the request the launch's geometry makes."""
    ptrs = {}
    for name, operand in (("dy_map", "dy"), ("x_map", "x")):
        index, ptr = a[name]
        req, desc = be.tmap_requests[index]
        want = next(r for r in geo.tensor_maps if r.operand == operand)
        if req != want:
            raise FakeFault(f"{name} was encoded for {req}, the launch needs {want}")
        ptrs[operand] = ptr
    return ptrs


def _tma_epilogue(be: FakeBackend, spec: KernelSpec, a: dict, ref, numel: int) -> None:
    """A TMA kernel's epilogue on the float64 result: direct stores dW, atomic adds into the fp32 dW,
    workspace adds into the replica (which must be zero at launch)."""
    if spec.variant == "direct":
        _store(be, a["dw"], ref, spec.dw_dtype)
    elif spec.variant == "atomic":
        _store(be, a["dw"], be.read_array(a["dw"], numel, "fp32").astype(np.float64) + ref, "fp32")
    else:
        cur = be.read_array(a["ws_ptr"], numel, "fp32").astype(np.float64)
        if np.any(cur != 0):
            raise FakeFault("the workspace replica is not zero at launch: atomics would fold in stale sums")
        _store(be, a["ws_ptr"], ref, "fp32")


def _emulate_tma(be: FakeBackend, spec: KernelSpec, a: dict, grid) -> None:
    """A wgrad_tma launch: the problem from its scalars, x and dy from its two tensor maps (whose
    requests must describe that problem), then the split-K epilogue (workspace: into the replica)."""
    from skwgrad.abi.launch import tma_geometry

    sd = spec.spatial_dims
    shape = [a[f"x_shape{i}"] for i in range(2 + sd)]  # [N, [D,] H, W, C]
    n, channels = shape[0], shape[-1]
    d, h, w = ([1] + shape[1:-1]) if sd == 2 else shape[1:-1]
    c, k, xw, taps = a["C"], a["K"], a["X"], a["TAPS"]
    if channels % c or a["dy_shape1"] != channels // c * k:
        raise FakeFault(f"x has {channels} channels, dy {a['dy_shape1']}: not G groups of C = {c} and K = {k}")
    if a["YX"] % xw or taps % a["YX"]:
        raise FakeFault(f"YX {a['YX']} / X {xw} / TAPS {taps} are not a Z x Y x X filter")
    y, z = a["YX"] // xw, taps // a["YX"]
    stride = (a["stride_d"], a["stride_h"], a["stride_w"])
    pad = (a["pad_d"], a["pad_h"], a["pad_w"])
    dil = (a["dil_d"], a["dil_h"], a["dil_w"])
    if a["HoWo"] % a["Wo"] or a["DoHoWo"] % a["HoWo"]:
        raise FakeFault(f"DoHoWo {a['DoHoWo']} / HoWo {a['HoWo']} / Wo {a['Wo']} are not a Do x Ho x Wo output")
    outs = (a["DoHoWo"] // a["HoWo"], a["HoWo"] // a["Wo"], a["Wo"])
    pad_hi = tuple(max(0, (o - 1) * st + dl * (f - 1) + 1 - i - pl) for o, st, dl, f, i, pl in zip(outs, stride, dil, (z, y, xw), (d, h, w), pad))
    if sd == 2 and (z, d, stride[0], pad[0], dil[0], outs[0]) != (1, 1, 1, 0, 1, 1):
        raise FakeFault("a 2-D launch passed depth scalars other than the trivial ones")
    p = ConvProblem(n=n, c=c, k=k, g=channels // c, di=d, hi=h, wi=w, z=z, y=y, x=xw, stride=stride, pad_lo=pad, pad_hi=pad_hi,
                    dilation=dil, dtype=spec.dtype, dw_dtype=spec.dw_dtype, spatial_dims=sd)  # fmt: skip
    if (p.do, p.ho, p.wo) != outs:
        raise FakeFault(f"kernargs DoHoWo/HoWo/Wo do not follow from the other scalars ({p.do}x{p.ho}x{p.wo})")
    geo = tma_geometry(p, spec.variant, bm=spec.bm, bn=spec.bn, bk=spec.bk, taps_per_tile=spec.block, ks_count=a["ks_count"] if "ks_count" in a else 1)
    if (a["CP"], a["KP"]) != (geo.scalars["CP"], geo.scalars["KP"]):
        raise FakeFault(f"packed channels CP/KP {a['CP']}/{a['KP']}, the launch packs {geo.scalars['CP']}/{geo.scalars['KP']}")
    ptrs = _map_pointers(be, a, geo)
    ks = -(-a["total_iters"] // a["ks_iters"])  # the splits the kernel derives (units = tiles x splits)
    units = geo.tiling.num_tiles * ks
    if a["total_iters"] != geo.tiling.iters_per_tile:
        raise FakeFault(f"total_iters {a['total_iters']} is not the problem's {geo.tiling.iters_per_tile} row blocks")
    if spec.mode == "streamk":  # equal ranges of all tiles' iterations, ks_iters each
        iters = geo.tiling.num_tiles * a["total_iters"]
        if not (grid - 1) * a["ks_iters"] < iters <= grid * a["ks_iters"]:
            raise FakeFault(f"{grid} stream-K ranges of {a['ks_iters']} do not cover {iters} iterations exactly")
        ks = 1
    elif (grid != units) if spec.mode != "persistent" else not 1 <= grid <= units:
        raise FakeFault(f"grid {grid} for {units} work units ({spec.mode or 'one CTA each'})")
    if spec.variant == "direct" and ks != 1:
        raise FakeFault("direct epilogue launched with more than one split")
    _tma_epilogue(be, spec, a, _reference(be, p, {**a, **ptrs}), p.dw_numel)


def _emulate_dwconv_tma(be: FakeBackend, spec: KernelSpec, a: dict, grid) -> None:
    """A dwconv_tma launch: the problem from its two tensor maps' shapes and the scalars (whose
    requests and loop scalars must be the geometry's for it), then the epilogue (atomic into the
    fp32 dW, workspace into the zeroed replica)."""
    from skwgrad.abi.launch import dwconv_tma_geometry

    n, h, w, g = (a[f"x_shape{i}"] for i in range(4))
    dn, ho, wo, dg = (a[f"dy_shape{i}"] for i in range(4))
    k = spec.bn
    if (dn, dg) != (n, g) or a["G"] != g or a["TAPS"] != k * k:
        raise FakeFault(f"dy {dn}x{dg} / G {a['G']} / TAPS {a['TAPS']} do not match x's {n} images of {g} channels and a {k}x{k} filter")
    ph, pw = a["pad_h"], a["pad_w"]
    p = ConvProblem(n=n, c=1, k=1, g=g, hi=h, wi=w, y=k, x=k, pad_lo=(0, ph, pw), pad_hi=(0, ho + k - 1 - h - ph, wo + k - 1 - w - pw),
                    dtype=spec.dtype, dw_dtype=spec.dw_dtype)  # fmt: skip
    if (p.ho, p.wo) != (ho, wo):
        raise FakeFault(f"dy is {ho}x{wo}; x {h}x{w} with padding {ph},{pw} gives {p.ho}x{p.wo}")
    ks = -(-a["total_steps"] // a["ks_iters"])
    geo = dwconv_tma_geometry(p, spec.variant, bc=spec.bm, taps=k, wt=spec.bk, ks_count=ks)
    for name in ("WS", "BHB", "total_steps", "ks_iters", "cblocks"):
        if a[name] != geo.scalars[name]:
            raise FakeFault(f"{name} = {a[name]}, the launch needs {geo.scalars[name]}")
    if grid != geo.grid:
        raise FakeFault(f"grid {grid} for {geo.grid} CTAs (channel blocks x splits)")
    ptrs = _map_pointers(be, a, geo)
    _tma_epilogue(be, spec, a, _reference(be, p, {**a, **ptrs}), p.dw_numel)


def emulate(be: FakeBackend, spec: KernelSpec, a: dict, fn, grid=None) -> None:
    """What the real kernel would leave in memory (float64 math, rounded on store)."""
    if spec.family == "pad":  # per copy: dst[r, c] = src[row(r) * src_pitch + c] for c < width, else 0
        _emulate_pad(be, spec, a, grid)
        return
    if spec.family == "stage2":
        n, r = a["numel"], a["replicas"]
        ws = be.read_array(a["ws_ptr"], n * r, "fp32").astype(np.float64).reshape(r, n)
        _store(be, a["dw"], ws.sum(axis=0), spec.dw_dtype)
        if a["reset"]:
            be.write(a["ws_ptr"], bytes(4 * n * r))
        return
    if spec.family == "wgrad_tma":
        _emulate_tma(be, spec, a, grid)
        return
    if spec.family == "dwconv_tma":
        _emulate_dwconv_tma(be, spec, a, grid)
        return
    p = _problem_from_args(a, spec, spec.dtype, spec.dw_dtype)
    if a["ks_count"] <= 0 or a["ks_iters"] <= 0:
        raise FakeFault("ks_count and ks_iters must be positive")
    numel = p.dw_numel
    if spec.family in ("wgrad", "dwconv", "grouped", "dwconv_walk") and spec.variant == "workspace":  # every split adds into one replica
        if a["ws_bytes"] < 4 * numel:
            raise FakeFault(f"ws_bytes {a['ws_bytes']} < {4 * numel}")
        cur = be.read_array(a["ws_ptr"], numel, "fp32").astype(np.float64)
        if np.any(cur != 0):
            raise FakeFault("the workspace replica is not zero at launch: atomics would fold in stale sums")
        _store(be, a["ws_ptr"], _reference(be, p, a), "fp32")
        return
    if spec.family in ("wgrad", "dwconv", "grouped", "dwconv_walk"):  # split-K shaped: splits of ks_iters steps of BK rows
        steps = -(-p.gemm_k // spec.bk)
        if spec.family == "dwconv_walk":  # splits of ks_iters output rows
            steps = p.ho
        if spec.family == "dwconv" and spec.mode.startswith("win"):  # steps of BK strips of BW output columns
            from skwgrad.abi.launch import dwconv_tiling

            steps = dwconv_tiling(p, spec.bm, spec.bn, spec.bk, spec.mode).iters_per_tile
        if a["ks_iters"] * a["ks_count"] < steps:
            raise FakeFault(f"ks_iters x ks_count = {a['ks_iters']} x {a['ks_count']} does not cover {steps} steps of {spec.bk} rows")
        if spec.variant == "direct":
            if a["ks_count"] != 1:
                raise FakeFault("direct epilogue launched with ks_count != 1")
            _store(be, a["dw"], _reference(be, p, a), spec.dw_dtype)
        elif spec.variant == "atomic":
            cur = be.read_array(a["dw"], numel, "fp32").astype(np.float64)
            _store(be, a["dw"], cur + _reference(be, p, a), "fp32")
        else:  # two_stage: split s stores its partial into replica s
            if a["ws_bytes"] < 4 * numel * a["ks_count"]:
                raise FakeFault(f"ws_bytes {a['ws_bytes']} < {4 * numel * a['ks_count']}")
            for s in range(a["ks_count"]):
                r0 = s * a["ks_iters"] * spec.bk
                part = _reference(be, p, a, rows=(r0, r0 + a["ks_iters"] * spec.bk))
                _store(be, a["ws_ptr"] + 4 * numel * s, part, "fp32")
        return
    # stream-K
    full = _reference(be, p, a)
    if spec.variant == "atomic":
        cur = be.read_array(a["dw"], numel, "fp32").astype(np.float64)
        _store(be, a["dw"], cur + full, "fp32")
    elif spec.variant == "workspace":
        part = a["sk_dp_tiles"] < p.tiling(spec.bm, spec.bn, spec.bk).num_tiles  # some tile is shared: atomics
        cur = be.read_array(a["ws_ptr"], numel, "fp32").astype(np.float64)
        if part and np.any(cur != 0):
            raise FakeFault("the stream-K workspace replica is not zero at launch: atomics would fold in stale sums")
        _store(be, a["ws_ptr"], full, "fp32")
    else:  # linear / tree: flags are zero at rest; the consumers reset what they polled
        sk_ctas = a["sk_ctas"]
        fpc = int(fn.handle.get("flags_per_cta") or 0) or None
        if sk_ctas:
            nflags = sk_ctas * (fpc or 1)
            flags = np.frombuffer(be.read(a["sk_flags"], 4 * nflags), dtype=np.int32)
            if np.any(flags != 0):
                raise FakeFault("a flag is not zero at launch: an owner could read a stale partial")
            lo, hi = a["sk_partials"], a["sk_partials"] + 4 * sk_ctas * spec.bm * spec.bn
            if lo < a["sk_flags"] + 4 * nflags and a["sk_flags"] < hi:
                raise FakeFault("partials overlap the flag table")
            be.write(a["sk_partials"], np.full(sk_ctas * spec.bm * spec.bn, np.nan, dtype=np.float32).tobytes())
        _store(be, a["dw"], full, spec.dw_dtype)


def fake_backend_for_tests(**kw) -> FakeBackend:
    return FakeBackend(**kw)


# ---------------------------------------------------------------------------------------------
# Kernel sets
# ---------------------------------------------------------------------------------------------
def spec(family, variant, dtype="bf16", dw=None, *, dims=2, pw=False, vc=1, vk=1, tile=(32, 32, 32), warps=4, stages=2, mode="",
         precision=None):  # fmt: skip
    if dw is None:
        dw = "fp32" if variant == "atomic" else dtype
    if precision is None:
        precision = "ieee" if dtype == "fp32" else ""
    return KernelSpec(
        family, variant, dtype, dw, spatial_dims=dims, pointwise=pw, vec_c=vc, vec_k=vk, bm=tile[0], bn=tile[1], bk=tile[2],
        num_warps=warps, num_stages=stages, mode=mode, precision=precision,
    )  # fmt: skip


def stage2(dw="bf16"):
    return KernelSpec("stage2", "reduce", dw, dw, block=STAGE2_BLOCK, num_warps=4)


def full_cache(arch="sm_90", dtype="bf16", *, dims=(2, 3), vecs=((1, 1), (8, 8)), tiles=((32, 32, 32),), path=None,
               pads=True) -> FakeCache:  # fmt: skip
    """Every family/variant/mode at the given widths, tiles and dims, plus Stage-2 for both dW dtypes."""
    c = FakeCache(path)
    for d in dims:
        for vc, vk in vecs:
            for t in tiles:
                for v in ("direct", "two_stage", "atomic", "workspace"):
                    c.add(spec("wgrad", v, dtype, dims=d, vc=vc, vk=vk, tile=t), arch)
                for m in ("dp_sk", "persistent"):
                    for r in ("linear", "tree", "atomic", "workspace"):
                        c.add(spec("wgrad_sk", r, dtype, dims=d, vc=vc, vk=vk, tile=t, mode=m), arch)
                c.add(spec("wgrad_sk", "workspace", dtype, "fp32", dims=d, vc=vc, vk=vk, tile=t, mode="dp_sk"), arch)
                c.add(spec("wgrad", "two_stage", dtype, "fp32", dims=d, vc=vc, vk=vk, tile=t), arch)
                c.add(spec("wgrad", "direct", dtype, "fp32", dims=d, vc=vc, vk=vk, tile=t), arch)
    c.add(stage2(dtype), arch)
    c.add(stage2("fp32"), arch)
    if pads:  # the channel-padding copies (skwgrad.abi.padding) of both element dtypes
        for d in sorted({dtype, "fp32"}):
            c.add(pad_spec(d), arch)
    return c


def fake_gpu_for_cli(monkeypatch):
    """A fake device and an fp32 fake cache behind every backend and cache lookup of the API
    and the CLI (run-from-cache tests)."""
    from skwgrad.launcher import api
    from skwgrad.launcher import backends as B

    be = FakeBackend(cus=8, max_active=2)
    cache = full_cache(dtype="fp32", dims=(2,), vecs=((1, 1), (4, 4)), path="/fake/cache")
    monkeypatch.setattr(B, "get_backend", lambda device=None, kind=None: be)
    monkeypatch.setattr(api, "open_cache", lambda c=None: cache)
    api.clear_plans()
    return be, cache


def random_device_inputs(be: FakeBackend, p: ConvProblem, seed=0):
    rng = np.random.default_rng(seed)
    x = to_bits(rng.standard_normal(p.x_shape), p.dtype)
    dy = to_bits(rng.standard_normal(p.dy_shape), p.dtype)
    xp, dyp = be.alloc(x.nbytes), be.alloc(dy.nbytes)
    be.memcpy_htod(xp, x, x.nbytes)
    be.memcpy_htod(dyp, dy, dy.nbytes)
    dwp = be.alloc(p.dw_numel * DTYPE_BYTES[p.dw_dtype])
    ref = wgrad_reference(p, from_bits(x, p.dtype), from_bits(dy, p.dtype))
    return xp, dyp, dwp, ref


def plan_on_fake(spec: KernelSpec, p: ConvProblem, ks_count: int, arch: str = "sm_90"):
    """(plan, dW read back, float64 reference): a plan of ``spec`` (and a Stage-2) from a fresh fake
    cache on a fresh fake device, launched once on random inputs with dW poisoned first."""
    from skwgrad.launcher.plan import Kernel, Plan

    c, be = FakeCache(), FakeBackend()
    k = Kernel.from_entry(c.add(spec, arch), c)
    st2 = Kernel.from_entry(c.add(stage2(spec.dw_dtype), arch), c)
    plan = Plan(p, k, be, ks_count=ks_count, stage2=st2)
    xp, dyp, dwp, ref = random_device_inputs(be, p)
    plan.poison(dw=dwp)
    plan.launch(dyp, xp, dwp)
    got = from_bits(be.read_array(dwp, p.dw_numel, p.dw_dtype), p.dw_dtype).reshape(p.dw_shape)
    return plan, got, ref


# ---------------------------------------------------------------------------------------------
# Tests of the fakes
# ---------------------------------------------------------------------------------------------
def test_fake_backend_implements_the_whole_protocol():
    be = FakeBackend()  # an abstract method left out would make this raise TypeError
    assert isinstance(be, Backend)
    assert not getattr(FakeBackend, "__abstractmethods__", None)


def test_fake_memory_faults_on_out_of_bounds_and_foreign_addresses():
    be = FakeBackend()
    p = be.alloc(100)
    be.memset(p, 0, 100)
    with pytest.raises(FakeFault):
        be.memset(p, 0, 101)
    with pytest.raises(FakeFault):
        be.read(0x1000, 4)
    be.free(p)
    with pytest.raises(FakeFault):
        be.read(p, 1)


def test_fake_emulator_matches_reference_for_direct_kernel():
    from skwgrad.launcher.plan import Kernel, Plan

    c = FakeCache()
    e = c.add(spec("wgrad", "direct", "fp32", vc=1, vk=1))
    be = FakeBackend()
    p = ConvProblem(n=2, c=3, k=5, hi=6, wi=5, y=3, x=2, dtype="fp32", pad_lo=(0, 1, 0), pad_hi=(0, 1, 0))
    plan = Plan(p, Kernel.from_entry(e, c), be)
    xp, dyp, dwp, ref = random_device_inputs(be, p)
    plan.launch(dyp, xp, dwp)
    out = from_bits(be.read_array(dwp, p.dw_numel, "fp32"), "fp32").reshape(p.dw_shape)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_fake_emulator_detects_flags_not_zero_at_rest():
    from skwgrad.launcher.plan import Kernel, Plan
    from skwgrad.launcher.workspace import arenas

    c = FakeCache()
    e = c.add(spec("wgrad_sk", "linear", "fp32", mode="dp_sk"))
    be = FakeBackend(cus=4)
    p = ConvProblem(n=4, c=8, k=8, hi=16, wi=16, y=3, x=3, pad_lo=(0, 1, 1), pad_hi=(0, 1, 1), dtype="fp32")
    plan = Plan(p, Kernel.from_entry(e, c), be, pool=2)
    assert plan.geometry.partition.sk_ctas == 2
    xp, dyp, dwp, _ = random_device_inputs(be, p)
    plan.launch(dyp, xp, dwp)
    zeroed, _ = arenas(be, 0)
    be.memset(zeroed.ptr, 0x01, 16)  # something broke the zero-at-rest contract
    with pytest.raises(FakeFault, match="not zero at launch"):
        plan.launch(dyp, xp, dwp)
