"""Checks on everything that enters or leaves the cache from outside this process.

An export file, a pulled layout or an index row is data someone else wrote: every field is
checked by type and range before it is used, and each code object is bound to its row by reading
the object's own metadata (ELF machine, kernel symbol, and for AMD the ``NT_AMDGPU_METADATA``
note) and comparing it with what the row claims. Nothing here writes anything.

Every refusal is a ``DamagedEntryError`` (one entry) or ``ExportRefused`` (a whole export);
both are ``CacheError``s whose message says what to do.
"""

from __future__ import annotations

import io
import json
import math
import re
import unicodedata

from skwgrad.errors import CacheError, DamagedEntryError, SkwgradError

HEX64 = re.compile(r"[0-9a-f]{64}")
KERNEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.$]{0,255}")
MAX_TEXT = 4096  # longest label / compiler / problem key we accept
MAX_JSON = 1 << 20  # longest JSON field (metadata, spec, choice)
MAX_CUS = 1 << 16


class ExportRefused(CacheError):
    """An export file or pulled layout that is refused as a whole; nothing from it was stored."""


class IndexLost(CacheError):
    """The index does not match the objects and row records kept beside it (lost, replaced or
    foreign); ``skwgrad cache rebuild-index`` restores it from the cache itself."""



# -- terminal output ------------------------------------------------------------------------
def printable(text) -> str:
    """``text`` with control and other non-printing characters escaped (safe for a terminal)."""
    out = []
    for ch in str(text):
        if ch == " " or (ch.isprintable() and unicodedata.category(ch)[0] != "C"):
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii") if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
    return "".join(out)


def is_printable(text: str) -> bool:
    return isinstance(text, str) and printable(text) == text


# -- scalar checks --------------------------------------------------------------------------
def _bad(what: str, msg: str) -> DamagedEntryError:
    return DamagedEntryError(f"{printable(what)}: {msg}")


def _record(r, kind: str, columns, name) -> str:
    """The name of a row-like record (``name()``) once it is an object with known fields only."""
    if not isinstance(r, dict):
        raise DamagedEntryError(f"{kind} is a {type(r).__name__}, not an object")
    what = name()
    extra = sorted(set(r) - set(columns))
    if extra:
        raise _bad(what, f"unknown field(s) {printable(', '.join(map(str, extra)))[:200]}")
    return what


def want_sha(value, what: str) -> str:
    if not isinstance(value, str) or not HEX64.fullmatch(value):
        raise _bad(what, f"sha256 {printable(repr(value))[:80]} is not 64 lowercase hex digits")
    return value


def want_int(value, what: str, field: str, lo: int = 0, hi: int = 1 << 62, none_ok: bool = False):
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _bad(what, f"{field} is {printable(repr(value))[:80]}, not an integer in [{lo}, {hi}]")
    return value


def want_num(value, what: str, field: str, none_ok: bool = True):
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise _bad(what, f"{field} is {printable(repr(value))[:80]}, not a finite number >= 0")
    return float(value)


def want_text(value, what: str, field: str, max_len: int = MAX_TEXT) -> str:
    if not isinstance(value, str) or not value or len(value) > max_len or not is_printable(value):
        raise _bad(what, f"{field} {printable(repr(value))[:80]} is not a printable string of 1..{max_len} characters")
    return value


def want_json(value, what: str, field: str, kind=dict):
    if not isinstance(value, str) or len(value) > MAX_JSON:
        raise _bad(what, f"{field} is not a JSON string of at most {MAX_JSON} characters")
    try:
        out = json.loads(value)
    except (ValueError, RecursionError) as e:
        raise _bad(what, f"{field} is not valid JSON ({printable(e)})") from None
    if not isinstance(out, kind):
        raise _bad(what, f"{field} is JSON of type {type(out).__name__}, expected {kind.__name__}")
    return out


def want_arch(value, what: str):
    from skwgrad.abi.arch import ARCHES

    if not isinstance(value, str) or value not in ARCHES:
        raise _bad(what, f"arch {printable(repr(value))[:40]} is not a skwgrad target ({', '.join(ARCHES)})")
    return ARCHES[value]


# -- metadata of one code object -------------------------------------------------------------
_AMD_INT_FIELDS = (
    "kernarg_segment_size", "lds_bytes", "scratch_bytes", "wavefront_size", "vgpr_count",
    "agpr_count", "sgpr_count", "vgpr_spill_count", "sgpr_spill_count", "max_flat_workgroup_size",
)  # fmt: skip


def check_metadata(md: dict, spec, arch: str, what: str, *, current: bool) -> None:
    """The fields the launcher trusts (name, threads, shared, kernarg layout) agree with the spec
    and arch. ``current``: the row is of this skwgrad's kernel sources, so its kernarg layout must
    be this skwgrad's declaration (another version's is only type-checked: it is never served)."""
    a = want_arch(arch, what)
    name = md.get("name")
    if not isinstance(name, str) or not KERNEL_NAME.fullmatch(name):
        raise _bad(what, f"metadata name {printable(repr(name))[:80]} is not a kernel symbol name")
    if md.get("arch", arch) != arch:
        raise _bad(what, f"metadata says arch {printable(md.get('arch'))[:40]}, the row {arch}")
    if md.get("label", spec.label) != spec.label:
        raise _bad(what, f"metadata label {printable(md.get('label'))[:120]} is not the spec's {spec.label}")
    kind = "hsaco" if a.backend == "hip" else "cubin"
    if md.get("binary_kind", kind) != kind:
        raise _bad(what, f"metadata binary_kind {printable(md.get('binary_kind'))[:20]} is not {kind} for {arch}")
    threads = want_int(md.get("threads"), what, "metadata threads", 1, 1024)
    if threads != spec.threads_per_cta(a.wave_size):
        raise _bad(what, f"metadata threads {threads} is not the spec's {spec.threads_per_cta(a.wave_size)} ({spec.num_warps} warps of {a.wave_size})")
    if "num_warps" in md and md["num_warps"] != spec.num_warps:
        raise _bad(what, f"metadata num_warps {printable(md['num_warps'])[:20]} is not the spec's {spec.num_warps}")
    want_int(md.get("shared"), what, "metadata shared", 0, a.lds_bytes_per_cu)
    want_int(md.get("flags_per_cta", 0), what, "metadata flags_per_cta", 0, 1 << 16)
    want_num(md.get("compile_seconds"), what, "metadata compile_seconds")
    want_int(md.get("regs", 0), what, "metadata regs", 0, 1 << 12)
    want_int(md.get("stack_bytes", 0), what, "metadata stack_bytes", 0, 1 << 24)
    ka = md.get("kernarg")
    if not isinstance(ka, dict):
        raise _bad(what, "metadata has no kernarg layout")
    tail = want_int(ka.get("tail_pointers"), what, "metadata kernarg tail_pointers", 0, 64)
    names, offsets, size = ka.get("names"), ka.get("offsets"), ka.get("size")
    if current:
        decl = spec.kernarg_decl
        slots, want_size = decl.layout(tail)
        want_offsets = [s.offset for s in slots[: len(decl.args)]]
        if names != list(decl.names) or offsets != want_offsets or size != want_size:
            raise _bad(what, "metadata kernarg layout is not this skwgrad's declaration for the spec")
    else:
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise _bad(what, "metadata kernarg names are not a list of strings")
        if not (isinstance(offsets, list) and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
            raise _bad(what, "metadata kernarg offsets are not a list of integers")
        want_int(size, what, "metadata kernarg size", 0, 1 << 16)
    maps = md.get("tensor_maps")
    if spec.tensor_map_boxes or maps is not None:
        _check_tensor_maps(maps, spec, what)
    amd = md.get("amd")
    if a.backend == "hip":
        if not isinstance(amd, dict):
            raise _bad(what, "metadata of an AMD kernel has no 'amd' resource summary")
        for f in _AMD_INT_FIELDS:
            want_int(amd.get(f, 0), what, f"metadata amd.{f}", 0, 1 << 32)
        if amd.get("wavefront_size") != a.wave_size:
            raise _bad(what, f"metadata wavefront_size {printable(amd.get('wavefront_size'))[:20]} is not {arch}'s {a.wave_size}")
    elif amd is not None:
        raise _bad(what, "metadata of an NVIDIA kernel carries an AMD resource summary")


def _check_tensor_maps(maps, spec, what: str) -> None:
    """A TMA row's descriptor metadata (what the launcher encodes its tensor maps with): one record
    per descriptor of the spec's family, in order (``KernelSpec.tensor_map_boxes``: tiled or
    im2col, the box's rank), sane sizes, 16-bit elements."""
    want = spec.tensor_map_boxes
    if not want:
        raise _bad(what, f"metadata has tensor maps; a {spec.family} kernel takes none")
    if not (isinstance(maps, list) and len(maps) == len(want) and all(isinstance(m, dict) for m in maps)):
        raise _bad(what, f"metadata tensor_maps is not {len(want)} descriptor records")
    for m, (im2col, box_want) in zip(maps, want):
        if m.get("is_im2col") is not im2col:
            raise _bad(what, f"metadata tensor_maps are not {['im2col' if i else 'tiled' for i, _ in want]}")
        want_int(m.get("swizzle"), what, "metadata tensor map swizzle", 0, 3)
        want_int(m.get("elem_type"), what, "metadata tensor map elem_type", 0, 15)
        if want_int(m.get("elem_size"), what, "metadata tensor map elem_size", 1, 8) != 2:
            raise _bad(what, "metadata tensor map elements are not 16-bit")
        box = m.get("block_size")
        if not (isinstance(box, list) and len(box) == len(box_want)):
            raise _bad(what, f"metadata tensor map block_size is not a box of rank {len(box_want)}")
        for v in box:
            want_int(v, what, "metadata tensor map block_size", 1, 256)


# -- binding an object to its row ----------------------------------------------------------
def _elf_symbols(elf) -> set[str]:
    names = set()
    for sec in elf.iter_sections():
        if sec["sh_type"] in ("SHT_SYMTAB", "SHT_DYNSYM"):
            for sym in sec.iter_symbols():
                if sym.name:
                    names.add(sym.name)
    return names


def bind_object(data: bytes, arch: str, md: dict, what: str) -> None:
    """Refuse an object whose own metadata disagrees with its row's: another kernel's object
    (rows swapped), a lying row, or bytes that are not a code object for ``arch`` at all.

    AMD: ELF machine AMDGPU, the note's target is ``arch``, the kernel ``md['name']`` is in the
    note, and the note's resource summary (explicit kernarg offsets/sizes/kinds, kernarg segment,
    LDS, scratch, wavefront, VGPR/SGPR counts, spills, work-group size) equals ``md['amd']``; the
    work-group size admits ``md['threads']``. NVIDIA: ELF machine CUDA, the SM in the ELF flags
    is ``arch``'s, and the kernel symbol ``md['name']`` is defined.
    """
    from elftools.common.exceptions import ELFError

    a = want_arch(arch, what)
    if data[:4] != b"\x7fELF":
        raise _bad(what, f"the object is not an ELF code object for {arch}")
    try:
        from elftools.elf.elffile import ELFFile

        elf = ELFFile(io.BytesIO(data))
        machine = elf["e_machine"]
        symbols = _elf_symbols(elf)
        name = md.get("name")
        if a.backend == "hip":
            if machine != "EM_AMDGPU":
                raise _bad(what, f"the object is an ELF for {machine}, not AMDGPU")
            from skwgrad.abi.codeobject import amdgpu_metadata, amdgpu_summary

            target = str(amdgpu_metadata(data).get("amdhsa.target", ""))
            # "amdgcn-amd-amdhsa--gfx942", "amdgpu9.42-amd-amdhsa-unknown-gfx942:sramecc+:xnack-"
            if target.split(":", 1)[0].rsplit("-", 1)[-1] != arch:
                raise _bad(what, f"the object's target is {printable(target)[:60]}, the row's {arch}")
            got = amdgpu_summary(data, name)
            got.pop("target", None)
            want = {k: v for k, v in (md.get("amd") or {}).items() if k != "target"}
            if got != want:
                diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
                raise _bad(what, f"the object's own metadata differs from the row's in {', '.join(diff)[:200]} (rows swapped or edited?)")
            if int(md.get("threads", 0)) > got["max_flat_workgroup_size"]:
                raise _bad(what, f"the row's threads {md.get('threads')} exceed the object's work-group size {got['max_flat_workgroup_size']}")
        else:
            if machine != "EM_CUDA":
                raise _bad(what, f"the object is an ELF for {machine}, not CUDA")
            sm = int(arch.removeprefix("sm_"))
            flags = elf["e_flags"]
            if sm not in (flags & 0xFF, (flags >> 8) & 0xFF):
                raise _bad(what, f"the object's ELF flags {flags:#x} do not name {arch}")
            if name in symbols:  # the parameter table the driver will use is the row's layout
                from skwgrad.abi.codeobject import cubin_params

                got = [p["offset"] for p in cubin_params(data, name)]
                offsets = list((md.get("kernarg") or {}).get("offsets") or [])
                if got[: len(offsets)] != offsets:
                    raise _bad(what, "the object's parameter table (EIATTR_KPARAM_INFO) differs from the row's kernarg offsets")
        if name not in symbols:
            raise _bad(what, f"the object defines no kernel {printable(name)[:80]} (rows swapped or edited?)")
    except SkwgradError as e:
        if isinstance(e, DamagedEntryError):
            raise
        raise _bad(what, f"the object's metadata is unreadable ({e})") from None
    except (ELFError, ValueError, KeyError, TypeError, IndexError, AttributeError, UnicodeError, OverflowError) as e:
        raise _bad(what, f"the object is not a readable code object ({printable(e)[:120]})") from None
    except Exception as e:  # msgpack's own errors and whatever a hostile ELF provokes
        raise _bad(what, f"the object is not a readable code object ({type(e).__name__}: {printable(e)[:120]})") from None


# -- rows -------------------------------------------------------------------------------------
ENTRY_COLUMNS = (
    "key", "label", "arch", "family", "variant", "dtype", "dw_dtype", "mode", "spec_json", "compiler",
    "source_hash", "sha256", "nbytes", "metadata_json", "threads", "shared", "vgpr", "sgpr",
    "vgpr_spills", "sgpr_spills", "scratch", "compile_seconds", "created",
)  # fmt: skip


def check_row(r, identity: tuple[str, str], max_object: int) -> tuple[dict | None, str]:
    """Validate one entry row from outside. Returns ``(row, "")`` with the row recomputed from its
    validated parts, or ``(None, reason)`` for a row of another skwgrad version whose spec this
    one cannot read (harmless: skipped). Raises ``DamagedEntryError`` for a bad row."""
    from skwgrad.abi.spec import KernelSpec
    from skwgrad.cache.store import compute_key, row_for

    what = _record(r, "an entry", ENTRY_COLUMNS,
                   lambda: f"entry {printable(str(r.get('label')))[:120]} ({printable(str(r.get('key')))[:12]})")
    key = want_sha(r.get("key"), what)
    want_arch(r.get("arch"), what)
    compiler = want_text(r.get("compiler"), what, "compiler", 200)
    source = want_sha(r.get("source_hash"), what)
    spec_dict = want_json(r.get("spec_json"), what, "spec_json")
    try:
        good = compute_key(spec_dict, r["arch"], compiler, source) == key
    except (KeyError, TypeError, ValueError):
        good = False
    if not good:
        raise _bad(what, "the key does not match the entry's spec/arch/compiler/source")
    current = (compiler, source) == tuple(identity)
    try:
        spec = KernelSpec.from_dict(spec_dict)
    except (SkwgradError, TypeError, ValueError) as e:
        if current:
            raise _bad(what, f"the spec does not parse ({printable(e)[:200]})") from None
        return None, f"{what}: a spec of another skwgrad version this one cannot read"
    if spec.canonical_json() != r["spec_json"]:
        raise _bad(what, "spec_json is not in canonical form")
    label = want_text(r.get("label"), what, "label", 300)
    if label != spec.label:
        raise _bad(what, f"label is not the spec's label {spec.label}")
    sha = want_sha(r.get("sha256"), what)
    nbytes = want_int(r.get("nbytes"), what, "nbytes", 1, max_object)
    md = want_json(r.get("metadata_json"), what, "metadata_json")
    check_metadata(md, spec, r["arch"], what, current=current)
    if md.get("compiler", compiler) != compiler:
        raise _bad(what, "metadata compiler is not the row's compiler")
    created = want_num(r.get("created"), what, "created", none_ok=False)
    want_num(r.get("compile_seconds"), what, "compile_seconds")
    row = row_for(key, spec, r["arch"], compiler, source, sha, nbytes, md, created)
    for col in ENTRY_COLUMNS:
        if col in r and col not in ("created", "compile_seconds", "metadata_json") and r[col] != row[col]:
            raise _bad(what, f"column {col} is {printable(repr(r[col]))[:60]}, its spec/metadata say {printable(repr(row[col]))[:60]}")
    row["metadata_json"] = json.dumps(md, sort_keys=True)
    return row, ""


TUNED_COLUMNS = ("arch", "cus", "problem_key", "compiler", "source_hash", "choice_json", "time")


def check_choice(choice, what: str) -> dict:
    """A tuned choice as ``select`` reads it: ``key`` (and optional ``stage2_key``, ``pad_keys``) of entries,
    ``pool`` and ``ks_count`` integers; other fields are descriptive (scalars or short lists)."""
    if not isinstance(choice, dict):
        raise _bad(what, "choice is not an object")
    want_sha(choice.get("key"), what + " choice key")
    if choice.get("stage2_key") is not None:
        want_sha(choice["stage2_key"], what + " choice stage2_key")
    if choice.get("pad_keys") is not None:
        keys = choice["pad_keys"]
        if not isinstance(keys, list) or not 1 <= len(keys) <= 3:
            raise _bad(what, "choice pad_keys is not a list of one to three keys")
        for k in keys:
            want_sha(k, what + " choice pad_keys")
    want_int(choice.get("pool", 0), what, "choice pool", -1, 1 << 20)
    want_int(choice.get("ks_count", 1), what, "choice ks_count", 1, 1 << 20)
    for k, v in choice.items():
        if not isinstance(k, str) or not is_printable(k) or len(k) > 64:
            raise _bad(what, "choice has a non-printable field name")
        if isinstance(v, str) and not is_printable(v):
            raise _bad(what, f"choice field {k} is not printable")
        if isinstance(v, (dict,)) or (isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v)):
            raise _bad(what, f"choice field {k} is nested")
        if isinstance(v, float) and not math.isfinite(v):
            raise _bad(what, f"choice field {k} is not finite")
    return choice


MODEL_COLUMNS = ("arch", "cus", "compiler", "source_hash", "model_json", "time")


def model_version_of(text: str):
    """The ``version`` a stored model's JSON declares (None when it declares none)."""
    try:
        d = json.loads(text)
    except ValueError:
        return None
    v = d.get("version") if isinstance(d, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def check_model(m) -> dict | None:
    """A stored cost model record (``models`` table): the constants must parse as a cost model of
    this version, for the record's arch. A well-formed record of another model version returns
    None: its constants price other terms, so an import skips it (like an entry of another
    build) instead of refusing the whole file."""
    from skwgrad.abi.costmodel import MODEL_VERSION, CostModel

    what = _record(m, "a cost model record", MODEL_COLUMNS, lambda: f"cost model record for {printable(str(m.get('arch')))[:20]}")
    want_arch(m.get("arch"), what)
    want_int(m.get("cus"), what, "cus", 1, MAX_CUS)
    want_text(m.get("compiler"), what, "compiler", 200)
    want_sha(m.get("source_hash"), what)
    text = want_text(m.get("model_json"), what, "model_json", MAX_JSON)
    v = model_version_of(text)
    if v is not None and v != MODEL_VERSION:
        return None
    try:
        model = CostModel.from_json(text)
    except SkwgradError as e:
        raise _bad(what, str(e)) from None
    if model.arch != m["arch"]:
        raise _bad(what, f"its constants are for {printable(model.arch)[:20]}, not {m['arch']}")
    tm = want_num(m.get("time"), what, "time", none_ok=False)
    return {**{k: m[k] for k in MODEL_COLUMNS if k not in ("model_json", "time")}, "model_json": model.to_json(), "time": tm}


def check_tuned(t) -> dict:
    what = _record(t, "a tuned record", TUNED_COLUMNS,
                   lambda: f"tuned record {printable(str(t.get('problem_key')))[:120]} on {printable(str(t.get('arch')))[:20]}")
    want_arch(t.get("arch"), what)
    want_int(t.get("cus"), what, "cus", 1, MAX_CUS)
    want_text(t.get("problem_key"), what, "problem_key")
    want_text(t.get("compiler"), what, "compiler", 200)
    want_sha(t.get("source_hash"), what)
    choice = check_choice(want_json(t.get("choice_json"), what, "choice_json"), what)
    tm = want_num(t.get("time"), what, "time", none_ok=False)
    return {**{k: t[k] for k in TUNED_COLUMNS if k not in ("choice_json", "time")}, "choice_json": json.dumps(choice, sort_keys=True), "time": tm}
