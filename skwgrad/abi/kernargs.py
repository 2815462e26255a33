"""The kernarg ABI: one ordered declaration per (family, variant), the single source of truth.

The Triton signature each kernel is compiled with and the host packer are both derived from
``declaration(family, variant)``; ``skwgrad.aot.kernels`` asserts at import time that every
kernel's parameter list is exactly that declaration followed by its compile-time constants.

Layout (SPEC section 4)::

    prefix (every wgrad kernel): dy, x, dw, N, G, C, K, Di, Hi, Wi, Z, Y, X, Do, Ho, Wo,
        stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
        ws_ptr, ws_bytes, ks_iters, ks_count
    stream-K appends, after ks_count:
        [sk_flags, sk_partials] (linear/tree), sk_iters_per_tile, sk_dp_tiles, sk_ctas,
        sk_iters_per_cta, sk_extra_iters, sk_pool, sk_tree_rounds
    then the compiler's trailing pointers (Triton's global and profile scratch), passed null.

``ws_ptr``/``ws_bytes`` keep their slot in every wgrad variant, so the prefix up to ``ks_count``
has one layout everywhere; a variant with no workspace has them *reserved*: the packer writes
null/0 and refuses a caller-supplied workspace. They are live for the variants that reduce through
f32 replicas of dW (``WORKSPACE_VARIANTS``): split-K ``two_stage`` (ks_count replicas) and
``workspace`` (one replica, atomics), and stream-K ``workspace``. Pads are the low (left) pads: the high pads
only decide the output size, which travels as Do/Ho/Wo.

Pointers are 8 bytes, scalars little-endian i32, each at its natural alignment. Every pointer is
compiled as 16-byte aligned (``tt.divisibility=16``), so the packer refuses one that is not.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache

from skwgrad.errors import AbiError

ABI_VERSION = 1
I32_MAX = 2**31 - 1
POINTER_ALIGN = 16  # what the kernels are compiled to assume of every pointer

TRITON_DTYPES = {"fp16": "fp16", "bf16": "bf16", "fp32": "fp32"}

PROBLEM_SCALARS = (
    "N", "G", "C", "K", "Di", "Hi", "Wi", "Z", "Y", "X", "Do", "Ho", "Wo",
    "stride_d", "stride_h", "stride_w", "pad_d", "pad_h", "pad_w", "dil_d", "dil_h", "dil_w",
)  # fmt: skip
SK_SCALARS = (
    "sk_iters_per_tile", "sk_dp_tiles", "sk_ctas", "sk_iters_per_cta",
    "sk_extra_iters", "sk_pool", "sk_tree_rounds",
)  # fmt: skip

# The pad kernel (``skwgrad.abi.padding``) runs up to PAD_COPIES copies per launch, copy 0 on the
# programs below ``split``, copy 1 on the rest: src0, dst0, src1, dst1, then each copy's scalars
# (suffixed 0, 1), then split.
PAD_COPIES = 2
PAD_COPY_SCALARS = ("rows", "width", "src_pitch", "dst_pitch", "group_rows", "src_group_rows", "scatter")

FAMILIES = ("wgrad", "wgrad_sk", "stage2", "dwconv", "grouped", "pad", "wgrad_tma", "dwconv_tma", "dwconv_walk")
HELPER_FAMILIES = ("stage2", "pad")  # kernels that serve a main kernel's launch, never run a problem alone
# Split-K epilogues: direct (ks_count = 1), atomic (fp32 dW), two_stage (a whole f32 replica per
# split, summed in order: deterministic), workspace (atomics into one f32 replica that Stage-2
# reduces and zeroes again: no per-split replica and a one-replica Stage-2 at any ks_count).
SPLITK_EPILOGUES = ("direct", "atomic", "two_stage", "workspace")
SK_REDUCTIONS = ("linear", "tree", "atomic", "workspace")
WORKSPACE_VARIANTS = ("two_stage", "workspace")  # the variants whose ws_ptr / ws_bytes are live
FLAG_REDUCTIONS = ("linear", "tree")  # reductions that hand partials over through flags


# Where the kernel parameters start in the absolute parameter space of sm_90 (constant bank 0,
# c[0x0][0x210]). Natural alignment is counted from there: it moves nothing 16-byte aligned or
# less (0x210 is a multiple of 16), but a tensor map, 64-byte aligned, lands at offset 48 of the
# kernarg block, not 0 (the cubin's EIATTR_KPARAM_INFO and cuFuncGetParamInfo agree; H200 run R1).
PARAM_BASE = 0x210
TMAP_BYTES = 128  # a CUtensorMap
_SIZE = {"ptr": 8, "i32": 4, "i64": 8, "tmap": TMAP_BYTES}
_ALIGN = {"ptr": 8, "i32": 4, "i64": 8, "tmap": 64}


@dataclass(frozen=True)
class Arg:
    name: str
    kind: str  # "ptr", "i32", "i64" or "tmap" (a 128-byte CUtensorMap the host encodes)
    elem: str = ""  # pointee of a ptr: "in" (input dtype), "dw" (dW dtype), "f32", "i32"
    reserved: bool = False  # slot kept for a stable layout; always null/0 in this variant
    # The kernel parameter this slot belongs to when one parameter takes several slots: a Gluon
    # tensor descriptor is passed as its tensor map, then its shape (i32) and strides (i64).
    part_of: str = ""

    @property
    def size(self) -> int:
        return _SIZE[self.kind]

    @property
    def align(self) -> int:
        return _ALIGN[self.kind]


@dataclass(frozen=True)
class Slot:
    arg: Arg
    offset: int


@dataclass(frozen=True)
class KernargDecl:
    family: str
    variant: str
    args: tuple[Arg, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args)

    @property
    def source_names(self) -> tuple[str, ...]:
        """The kernel's runtime parameters, in order (a tensor descriptor's slots are one)."""
        return tuple(dict.fromkeys(a.part_of or a.name for a in self.args))

    def layout(self, tail_pointers: int = 0) -> tuple[tuple[Slot, ...], int]:
        """(slots, total bytes) with natural alignment; ``tail_pointers`` null pointers follow."""
        return _layout(self, tail_pointers)

    def triton_signature(self, dtype: str, dw_dtype: str, descriptors: dict[str, str] | None = None) -> dict[str, str]:
        """The runtime part of the Triton signature (constexprs are appended by the caller), one
        entry per kernel parameter; a tensor descriptor's type (its block and shared layout are
        the kernel's) comes from ``descriptors``."""
        elem = {"in": TRITON_DTYPES[dtype], "dw": TRITON_DTYPES[dw_dtype], "f32": "fp32", "i32": "i32"}
        sig = {}
        for a in self.args:
            if a.part_of:
                if a.part_of not in (descriptors or {}):
                    raise AbiError(f"{self.family}/{self.variant}: the type of tensor descriptor {a.part_of} is the kernel's; pass it")
                sig[a.part_of] = descriptors[a.part_of]
            else:
                sig[a.name] = f"*{elem[a.elem]}" if a.kind == "ptr" else a.kind
        return sig

    def triton_attrs(self) -> dict[tuple[int], list]:
        """Every pointer is 16-byte aligned: lets Triton emit 16-byte vector loads (indices are
        kernel parameter positions)."""
        ptrs = {a.name for a in self.args if a.kind == "ptr"}
        return {(i,): [["tt.divisibility", POINTER_ALIGN]] for i, n in enumerate(self.source_names) if n in ptrs}

    def value_names(self) -> tuple[str, ...]:
        """The names a caller must supply to ``pack`` (reserved slots are the packer's)."""
        return tuple(a.name for a in self.args if not a.reserved)

    def pack(self, values: dict[str, int], tail_pointers: int = 0) -> bytes:
        return bytes(Packer(self, tail_pointers).pack(values))


@cache
def _layout(decl: KernargDecl, tail_pointers: int) -> tuple[tuple[Slot, ...], int]:
    slots, offset = [], 0
    args = list(decl.args) + [Arg(f"_tail{i}", "ptr", "i32", reserved=True) for i in range(tail_pointers)]
    for a in args:
        offset = -(-(PARAM_BASE + offset) // a.align) * a.align - PARAM_BASE
        slots.append(Slot(a, offset))
        offset += a.size
    return tuple(slots), -(-offset // 8) * 8


# Position of ws_ptr in every wgrad declaration (the prefix never moves).
WS_INDEX = 3 + len(PROBLEM_SCALARS)


def _prefix(workspace: bool) -> list[Arg]:
    return [
        Arg("dy", "ptr", "in"),
        Arg("x", "ptr", "in"),
        Arg("dw", "ptr", "dw"),
        *(Arg(n, "i32") for n in PROBLEM_SCALARS),
        Arg("ws_ptr", "ptr", "f32", reserved=not workspace),
        Arg("ws_bytes", "i32", reserved=not workspace),
        Arg("ks_iters", "i32"),
        Arg("ks_count", "i32"),
    ]


@cache
def declaration(family: str, variant: str, spatial_dims: int = 2) -> KernargDecl:
    """The ordered kernarg declaration of one kernel family and variant (``wgrad_tma`` also by its
    spatial dims: x's tensor map has rank 2 + spatial_dims; the other families pass every dims
    through the same scalars).

    ``wgrad``: variant is the split-K epilogue (direct, atomic, two_stage, workspace).
    ``wgrad_sk``: variant is the stream-K reduction (linear, tree, atomic, workspace).
    ``stage2``: variant is ``reduce``.
    ``pad``: variant is ``rows`` (the channel-padding copies, two per launch: ``skwgrad.abi.padding``).
    """
    if family == "wgrad":
        if variant not in SPLITK_EPILOGUES:
            raise AbiError(f"wgrad epilogue {variant!r} is not one of {', '.join(SPLITK_EPILOGUES)}")
        args = _prefix(workspace=variant in WORKSPACE_VARIANTS)
    elif family == "wgrad_sk":
        if variant not in SK_REDUCTIONS:
            raise AbiError(f"stream-K reduction {variant!r} is not one of {', '.join(SK_REDUCTIONS)}")
        flags = variant in FLAG_REDUCTIONS
        args = _prefix(workspace=variant == "workspace")
        if flags:
            args += [Arg("sk_flags", "ptr", "i32"), Arg("sk_partials", "ptr", "f32")]
        args += [Arg(n, "i32") for n in SK_SCALARS]
    elif family == "stage2":
        if variant != "reduce":
            raise AbiError(f"stage2 variant {variant!r} is not 'reduce'")
        args = [
            Arg("ws_ptr", "ptr", "f32"), Arg("dw", "ptr", "dw"), Arg("numel", "i32"), Arg("replicas", "i32"),
            Arg("reset", "i32"),
        ]  # fmt: skip
    elif family in ("dwconv", "grouped"):
        args = _dwconv_args(variant, family)
    elif family == "wgrad_tma":
        args = _tma_args(variant, spatial_dims)
    elif family == "dwconv_tma":
        args = _dwconv_tma_args(variant)
    elif family == "dwconv_walk":
        if variant not in DWCONV_WALK_VARIANTS:
            raise AbiError(f"dwconv_walk epilogue {variant!r} is not one of {', '.join(DWCONV_WALK_VARIANTS)}")
        args = _prefix(workspace=variant == "workspace")
    elif family == "pad":
        if variant != "rows":
            raise AbiError(f"pad variant {variant!r} is not 'rows'")
        args = [*(Arg(f"{n}{i}", "ptr", "in") for i in range(PAD_COPIES) for n in ("src", "dst")),
                *(Arg(f"{n}{i}", "i32") for i in range(PAD_COPIES) for n in PAD_COPY_SCALARS), Arg("split", "i32")]  # fmt: skip
    else:
        raise AbiError(f"kernel family {family!r} is not one of {', '.join(FAMILIES)}")
    names = [a.name for a in args]
    assert len(names) == len(set(names)), names
    return KernargDecl(family, variant, tuple(args))


def problem_scalars(problem) -> dict[str, int]:
    """The problem part of the prefix, from a ``ConvProblem``."""
    p = problem
    return {
        "N": p.n, "G": p.g, "C": p.c, "K": p.k,
        "Di": p.di, "Hi": p.hi, "Wi": p.wi, "Z": p.z, "Y": p.y, "X": p.x,
        "Do": p.do, "Ho": p.ho, "Wo": p.wo,
        "stride_d": p.stride[0], "stride_h": p.stride[1], "stride_w": p.stride[2],
        "pad_d": p.pad_lo[0], "pad_h": p.pad_lo[1], "pad_w": p.pad_lo[2],
        "dil_d": p.dilation[0], "dil_h": p.dilation[1], "dil_w": p.dilation[2],
    }  # fmt: skip


_I32 = struct.Struct("<i")
_PTR = struct.Struct("<Q")
_I64 = struct.Struct("<q")


class Packer:
    """Packs one declaration. Checks every value once; ``pack_into`` re-patches chosen slots of a
    prepacked template for repeated launches (a plan changes only pointers)."""

    def __init__(self, decl: KernargDecl, tail_pointers: int = 0):
        self.decl = decl
        self.slots, self.size = decl.layout(tail_pointers)
        self.offsets = {s.arg.name: s.offset for s in self.slots}
        self._by_name = {s.arg.name: s for s in self.slots}

    def pack(self, values: dict[str, int]) -> bytearray:
        names = set(self.decl.value_names())
        missing = sorted(names - set(values))
        if missing:
            raise AbiError(f"{self._what()}: missing kernarg(s) {', '.join(missing)}")
        unused = sorted(set(values) - names)
        if unused:
            tail = [n for n in unused if n.startswith("_tail")]
            if tail:
                raise AbiError(f"{self._what()}: {', '.join(tail)} are the compiler's trailing pointers, always null; do not pass them")
            reserved = [n for n in unused if n in self._by_name]
            if reserved:
                raise AbiError(
                    f"{self._what()}: {', '.join(reserved)} unused by this variant (it takes no workspace); "
                    f"do not pass one"
                )
            raise AbiError(f"{self._what()}: unknown kernarg(s) {', '.join(unused)}")
        buf = bytearray(self.size)
        for slot in self.slots:
            if slot.arg.reserved:
                continue  # null / 0
            self._put(buf, slot, values[slot.arg.name])
        return buf

    def pack_into(self, buf: bytearray, name: str, value: int) -> None:
        self._put(buf, self._by_name[name], value)

    def _put(self, buf: bytearray, slot: Slot, value) -> None:
        a = slot.arg
        if a.kind == "tmap":
            if not isinstance(value, (bytes, bytearray)) or len(value) != TMAP_BYTES:
                raise AbiError(f"{self._what()}: kernarg {a.name} is a {TMAP_BYTES}-byte tensor map, got {type(value).__name__}")
            buf[slot.offset : slot.offset + TMAP_BYTES] = value
            return
        if not isinstance(value, int) or isinstance(value, bool):
            raise AbiError(f"{self._what()}: kernarg {a.name} must be an int, got {type(value).__name__}")
        if a.kind == "ptr":
            if value == 0:
                raise AbiError(f"{self._what()}: buffer {a.name} is missing (null pointer)")
            if not 0 < value < 2**64:
                raise AbiError(f"{self._what()}: pointer {a.name}={value:#x} is not a 64-bit address")
            if value % POINTER_ALIGN:
                raise AbiError(
                    f"{self._what()}: {a.name} at {value:#x} is not {POINTER_ALIGN}-byte aligned; "
                    f"the kernels assume aligned buffers (pass a contiguous, freshly allocated tensor)"
                )
            _PTR.pack_into(buf, slot.offset, value)
        elif a.kind == "i64":
            if not -(2**63) <= value < 2**63:
                raise AbiError(f"{self._what()}: kernarg {a.name}={value} does not fit in i64")
            _I64.pack_into(buf, slot.offset, value)
        else:
            if not -(2**31) <= value < 2**31:
                raise AbiError(f"{self._what()}: kernarg {a.name}={value} does not fit in i32")
            _I32.pack_into(buf, slot.offset, value)

    def _what(self) -> str:
        return f"{self.decl.family}/{self.decl.variant}"


# -- depthwise and packed-group families (``dwconv``: skwgrad/aot/kernels/depthwise.py,
# ``grouped``: skwgrad/aot/kernels/grouped.py) ------------------------------------------------
# Split-K with the wgrad epilogues, so the wgrad prefix as it is: the real problem's scalars,
# ws_ptr/ws_bytes live for two_stage and workspace, ks_iters (dwconv: steps of BR rows; grouped:
# BK slices) and ks_count. Nothing is appended. ``workspace``: atomics into one f32 replica (zero
# at rest), then the Stage-2 reduce over that one replica: a split-K degree in the hundreds costs
# no long Stage-2 loop.
DWCONV_VARIANTS = SPLITK_EPILOGUES
GROUPED_VARIANTS = SPLITK_EPILOGUES
# The row-walk depthwise kernels (``dwconv_walk``: skwgrad/aot/kernels/depthwise.py) take dwconv's
# kernargs; every CTA adds a partial sum into each dW element of its channels (column groups x row
# splits), so only the adding epilogues: atomic into an fp32 dW, workspace (one f32 replica + Stage-2).
DWCONV_WALK_VARIANTS = ("atomic", "workspace")


def _dwconv_args(variant: str, family: str = "dwconv") -> list[Arg]:
    allowed = DWCONV_VARIANTS if family == "dwconv" else GROUPED_VARIANTS
    if variant not in allowed:
        raise AbiError(f"{family} epilogue {variant!r} is not one of {', '.join(allowed)}")
    return _prefix(workspace=variant in WORKSPACE_VARIANTS)


# -- TMA im2col family (``wgrad_tma``: skwgrad/aot/kernels/tma.py, sm_90 only) ---------------------
# The Gluon kernel reads dy and x through two tensor descriptors the host encodes per launch
# (``skwgrad.abi.launch.TensorMapRequest``): dy as the 2-D [R, K] matrix (R = N*[Do*]Ho*Wo), x as
# the 4-D [N, H, W, C] (2-D problems) or 5-D [N, D, H, W, C] (3-D) tensor in im2col mode. Each descriptor parameter is passed as its tensor map,
# its shape (i32 each) and its strides in elements (i64 each), as Triton passes them. Then dW,
# the workspace replica (live for ``workspace``), the scalars the loop needs, and Triton's two
# trailing null pointers. Split-K over BK-row blocks: ks_iters blocks per split, total_iters in all.
# C and K are per group; CP and KP per packed group (GB groups per tile; dense: GB = 1, CP = C);
# m_tiles counts the output-channel blocks of all packed groups, c_tiles the input-channel blocks of one.
TMA_VARIANTS = ("direct", "atomic", "workspace")
# The depth scalars (DoHoWo: output positions per image, YX: taps per filter plane, stride_d,
# pad_d, dil_d) are in every declaration, so 2-D and 3-D kernels share one source and signature;
# a 2-D launch passes its trivial values (DoHoWo = HoWo, YX = TAPS, 1, 0, 1). They come last, so a
# 2-D kernel's other kernargs keep the offsets they had before 3-D existed.
TMA_SCALARS = (
    "HoWo", "Wo", "C", "K", "CP", "KP", "X", "TAPS", "stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w",
    "m_tiles", "c_tiles", "ks_iters", "total_iters", "DoHoWo", "YX", "stride_d", "pad_d", "dil_d",
)  # fmt: skip


def tma_descriptors(spatial_dims: int) -> tuple:
    """(kernel parameter, slot prefix, rank) of a wgrad_tma kernel's two tensor descriptors."""
    if spatial_dims not in (2, 3):
        raise AbiError(f"wgrad_tma runs 2-D and 3-D problems, not {spatial_dims}-D")
    return (("dy_desc", "dy", 2), ("x_desc", "x", 2 + spatial_dims))


def _tma_args(variant: str, spatial_dims: int) -> list[Arg]:
    if variant not in TMA_VARIANTS:
        raise AbiError(f"wgrad_tma epilogue {variant!r} is not one of {', '.join(TMA_VARIANTS)}")
    return _descriptor_args(tma_descriptors(spatial_dims), variant, TMA_SCALARS)


def _descriptor_args(descriptors, variant: str, scalars) -> list[Arg]:
    """The kernargs of a Gluon TMA kernel: per descriptor parameter its tensor map, shape (i32
    each) and strides in elements (i64 each), as Triton passes them; then dW, the workspace
    replica (live for ``workspace``) and the scalars."""
    args = []
    for param, prefix, rank in descriptors:
        args.append(Arg(f"{prefix}_map", "tmap", part_of=param))
        args += [Arg(f"{prefix}_shape{i}", "i32", part_of=param) for i in range(rank)]
        args += [Arg(f"{prefix}_stride{i}", "i64", part_of=param) for i in range(rank)]
    args += [Arg("dw", "ptr", "dw"), Arg("ws_ptr", "ptr", "f32", reserved=variant != "workspace")]
    return args + [Arg(n, "i32") for n in scalars]


# -- TMA depthwise family (``dwconv_tma``: skwgrad/aot/kernels/dwconv_tma.py, sm_90 only) ----------
# dy and x reach the kernel as two 4-D tiled tensor maps over the [N, Ho, Wo, G] and [N, Hi, Wi, G]
# tensors (each its map, shape and strides, as for wgrad_tma); then dW, the workspace replica (live
# for ``workspace``) and the scalars of the loop: a step is one box of output rows x WT columns of
# one image, WS column blocks a row, BHB row blocks an image, total_steps in all, ks_iters a split,
# cblocks channel blocks (split-major grid).
DWCONV_TMA_VARIANTS = ("atomic", "workspace")
DWCONV_TMA_SCALARS = ("G", "TAPS", "pad_h", "pad_w", "WS", "BHB", "total_steps", "ks_iters", "cblocks")
DWCONV_TMA_DESCRIPTORS = (("dy_desc", "dy", 4), ("x_desc", "x", 4))


def _dwconv_tma_args(variant: str) -> list[Arg]:
    if variant not in DWCONV_TMA_VARIANTS:
        raise AbiError(f"dwconv_tma epilogue {variant!r} is not one of {', '.join(DWCONV_TMA_VARIANTS)}")
    return _descriptor_args(DWCONV_TMA_DESCRIPTORS, variant, DWCONV_TMA_SCALARS)
