"""The kernarg ABI (SPEC section 4): one ordered declaration per (family, variant), natural
alignment, a prefix that never moves, and a packer that refuses what does not fit."""

from __future__ import annotations

import inspect
import struct

import pytest

from skwgrad.abi import kernargs as ka
from skwgrad.abi.conv import ConvProblem
from skwgrad.abi.kernargs import Packer, declaration, problem_scalars
from skwgrad.errors import AbiError

WGRAD = [("wgrad", v) for v in ("direct", "atomic", "two_stage", "workspace")]
WGRAD_SK = [("wgrad_sk", v) for v in ("linear", "tree", "atomic", "workspace")]
GROUPED = [("grouped", v) for v in ("direct", "atomic", "two_stage", "workspace")]
ALL_WGRAD = WGRAD + WGRAD_SK  # the 8 declarations that share the prefix

PROBLEM_NAMES = [
    "N", "G", "C", "K", "Di", "Hi", "Wi", "Z", "Y", "X", "Do", "Ho", "Wo",
    "stride_d", "stride_h", "stride_w", "pad_d", "pad_h", "pad_w", "dil_d", "dil_h", "dil_w",
]  # fmt: skip
PREFIX = ["dy", "x", "dw", *PROBLEM_NAMES, "ws_ptr", "ws_bytes", "ks_iters", "ks_count"]
SK_NAMES = ["sk_iters_per_tile", "sk_dp_tiles", "sk_ctas", "sk_iters_per_cta", "sk_extra_iters", "sk_pool", "sk_tree_rounds"]


def natural_layout(kinds: list[str]) -> tuple[list[int], int]:
    """Offsets with natural alignment (8-byte pointers, 4-byte i32), total rounded to 8."""
    offsets, off = [], 0
    for k in kinds:
        size = 8 if k == "ptr" else 4
        while off % size:
            off += 1
        offsets.append(off)
        off += size
    while off % 8:
        off += 1
    return offsets, off


def slots_of(decl, tail=0):
    slots, size = decl.layout(tail)
    return {s.arg.name: s.offset for s in slots}, slots, size


# ---------------------------------------------------------------------------------------------
# Declarations
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family, variant", ALL_WGRAD)
def test_prefix_names_in_order(family, variant):
    names = list(declaration(family, variant).names)
    assert names[: len(PREFIX)] == PREFIX


def test_prefix_offsets_identical_in_every_variant():
    layouts = {fv: slots_of(declaration(*fv))[0] for fv in ALL_WGRAD}
    assert len(layouts) == 8
    reference = {n: layouts[("wgrad", "direct")][n] for n in PREFIX}
    for fv, offs in layouts.items():
        assert {n: offs[n] for n in PREFIX} == reference, fv
    # and they are the natural layout of the prefix itself
    expected, _ = natural_layout(["ptr"] * 3 + ["i32"] * len(PROBLEM_NAMES) + ["ptr", "i32", "i32", "i32"])
    assert [reference[n] for n in PREFIX] == expected
    assert reference["dy"] == 0 and reference["ks_count"] == 128


@pytest.mark.parametrize("family, variant", WGRAD_SK)
def test_streamk_args_come_after_ks_count(family, variant):
    decl = declaration(family, variant)
    offs = slots_of(decl)[0]
    tail = list(decl.names[len(PREFIX) :])
    flags = variant in ("linear", "tree")
    expected = (["sk_flags", "sk_partials"] if flags else []) + SK_NAMES  # no epoch: flags are zero at rest
    assert tail == expected
    assert all(offs[n] > offs["ks_count"] for n in tail)


@pytest.mark.parametrize("family, variant", WGRAD + GROUPED)
def test_splitk_has_nothing_after_ks_count(family, variant):
    assert list(declaration(family, variant).names) == PREFIX
    # the packed-group kernels take the split-K declaration itself, slot for slot
    assert declaration(family, variant).layout() == declaration("wgrad", variant).layout()


@pytest.mark.parametrize("family, variant", [*ALL_WGRAD, ("stage2", "reduce")])
@pytest.mark.parametrize("tail", [0, 1, 2])
def test_natural_alignment(family, variant, tail):
    decl = declaration(family, variant)
    offs, slots, size = slots_of(decl, tail)
    kinds = [a.kind for a in decl.args] + ["ptr"] * tail
    expected, expected_size = natural_layout(kinds)
    assert [s.offset for s in slots] == expected
    assert size == expected_size
    for s in slots:
        assert s.offset % s.arg.size == 0
        assert s.arg.size == (8 if s.arg.kind == "ptr" else 4)
    # no two slots overlap
    spans = sorted((s.offset, s.offset + s.arg.size) for s in slots)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def test_linear_layout_pads_before_flags():
    offs = slots_of(declaration("wgrad_sk", "linear"))[0]
    # ks_count ends at 132; the flag pointer realigns to 136.
    assert offs["sk_flags"] == 136 and offs["sk_partials"] == 144 and offs["sk_iters_per_tile"] == 152
    assert "sk_epoch" not in offs
    atomic = slots_of(declaration("wgrad_sk", "atomic"))[0]
    assert atomic["sk_iters_per_tile"] == 132


@pytest.mark.parametrize("family, variant", ALL_WGRAD + GROUPED)
def test_workspace_slot_reserved_unless_used(family, variant):
    decl = declaration(family, variant)
    by_name = {a.name: a for a in decl.args}
    uses_ws = variant in ("two_stage", "workspace")  # the f32 replica(s) of dW: split-K and stream-K alike
    assert by_name["ws_ptr"].reserved is (not uses_ws)
    assert by_name["ws_bytes"].reserved is (not uses_ws)
    assert decl.args[ka.WS_INDEX].name == "ws_ptr"
    assert ("ws_ptr" in decl.value_names()) is uses_ws
    assert sum(a.reserved for a in decl.args) == (0 if uses_ws else 2)


def test_stage2_declaration():
    decl = declaration("stage2", "reduce")
    assert decl.names == ("ws_ptr", "dw", "numel", "replicas", "reset")
    assert natural_layout(["ptr", "ptr", "i32", "i32", "i32"])[0] == [s.offset for s in decl.layout()[0]]


@pytest.mark.parametrize(
    "family, variant, match",
    [
        ("wgrad", "linear", "wgrad epilogue 'linear' is not one of direct, atomic, two_stage, workspace"),
        ("grouped", "tree", "grouped epilogue 'tree' is not one of direct, atomic, two_stage, workspace"),
        ("wgrad_sk", "two_stage", "stream-K reduction 'two_stage' is not one of linear, tree, atomic, workspace"),
        ("wgrad_sk", "", "stream-K reduction '' is not one of"),
        ("stage2", "sum", "stage2 variant 'sum' is not 'reduce'"),
        ("fwd", "direct", "kernel family 'fwd' is not one of wgrad, wgrad_sk, stage2"),
    ],
)
def test_declaration_refuses_unknown(family, variant, match):
    with pytest.raises(AbiError, match=match):
        declaration(family, variant)


# ---------------------------------------------------------------------------------------------
# Triton signature
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family, variant", [*ALL_WGRAD, ("stage2", "reduce")])
@pytest.mark.parametrize("dtype, dw_dtype", [("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "fp32"), ("bf16", "fp32"), ("fp16", "fp32")])
def test_triton_signature(family, variant, dtype, dw_dtype):
    decl = declaration(family, variant)
    sig = decl.triton_signature(dtype, dw_dtype)
    assert list(sig) == list(decl.names)  # same order as the packer
    for name, ty in sig.items():
        if name in ("dy", "x"):
            assert ty == f"*{dtype}"
        elif name == "dw":
            assert ty == f"*{dw_dtype}"
        elif name in ("ws_ptr", "sk_partials"):
            assert ty == "*fp32"
        elif name == "sk_flags":
            assert ty == "*i32"
        else:
            assert ty == "i32", name
    attrs = decl.triton_attrs()
    ptr_idx = {i for i, t in enumerate(sig.values()) if t.startswith("*")}
    assert set(attrs) == {(i,) for i in ptr_idx}
    assert all(v == [["tt.divisibility", 16]] for v in attrs.values())


# ---------------------------------------------------------------------------------------------
# Packer
# ---------------------------------------------------------------------------------------------
PROBLEM = ConvProblem(
    n=3, g=2, c=5, k=7, di=4, hi=9, wi=11, z=2, y=3, x=1, stride=(1, 2, 1),
    pad_lo=(1, 1, 0), pad_hi=(0, 2, 0), dilation=(2, 1, 1), spatial_dims=3,
)  # fmt: skip


def values_for(decl, base_ptr=0x7F00_0000_0000):
    vals, i = {}, 0
    for a in decl.args:
        if a.reserved:
            continue
        if a.kind == "ptr":
            vals[a.name] = base_ptr + 0x1000 * i
        i += 1
    scalars = problem_scalars(PROBLEM)
    for j, a in enumerate(decl.args):
        if not a.reserved and a.kind == "i32":
            vals[a.name] = scalars.get(a.name, 1000 + j)
    return vals


def test_problem_scalars():
    s = problem_scalars(PROBLEM)
    assert set(s) == set(PROBLEM_NAMES)
    assert (s["N"], s["G"], s["C"], s["K"]) == (3, 2, 5, 7)
    assert (s["Di"], s["Hi"], s["Wi"], s["Z"], s["Y"], s["X"]) == (4, 9, 11, 2, 3, 1)
    assert (s["Do"], s["Ho"], s["Wo"]) == (PROBLEM.do, PROBLEM.ho, PROBLEM.wo) == (3, 5, 11)
    assert (s["stride_d"], s["stride_h"], s["stride_w"]) == (1, 2, 1)
    assert (s["pad_d"], s["pad_h"], s["pad_w"]) == (1, 1, 0)  # the low (left) pads
    assert (s["dil_d"], s["dil_h"], s["dil_w"]) == (2, 1, 1)


@pytest.mark.parametrize("family, variant", [*ALL_WGRAD, ("stage2", "reduce")])
@pytest.mark.parametrize("tail", [0, 2])
def test_pack_round_trips(family, variant, tail):
    decl = declaration(family, variant)
    vals = values_for(decl)
    blob = decl.pack(vals, tail_pointers=tail)
    offs, slots, size = slots_of(decl, tail)
    assert isinstance(blob, bytes) and len(blob) == size
    # unpack slot by slot at the declared offsets
    for s in slots:
        raw = struct.unpack_from("<Q" if s.arg.kind == "ptr" else "<i", blob, s.offset)[0]
        if s.arg.reserved:
            assert raw == 0, s.arg.name  # reserved slots and the compiler's tail pointers: null
        else:
            assert raw == vals[s.arg.name], s.arg.name
    # padding bytes are zero: the blob is exactly the slots
    covered = bytearray(size)
    for s in slots:
        covered[s.offset : s.offset + s.arg.size] = b"\1" * s.arg.size
    assert all(blob[i] == 0 for i in range(size) if not covered[i])


def test_tail_pointers_appended_as_zeros():
    decl = declaration("wgrad_sk", "atomic")
    base = decl.pack(values_for(decl))
    with_tail = decl.pack(values_for(decl), tail_pointers=2)
    assert len(base) == 160 and with_tail[: len(base)] == base
    _, slots, size = slots_of(decl, 2)
    t0, t1 = slots[-2], slots[-1]
    assert t0.arg.name == "_tail0" and t1.arg.name == "_tail1"
    assert t0.offset % 8 == 0 and t1.offset == t0.offset + 8 and size == t1.offset + 8
    assert with_tail[t0.offset :] == bytes(16)


def test_negative_i32_and_extremes_round_trip():
    decl = declaration("wgrad", "direct")
    vals = values_for(decl)
    vals["ks_iters"], vals["ks_count"] = 2**31 - 1, -(2**31)
    blob = decl.pack(vals)
    offs = slots_of(decl)[0]
    assert struct.unpack_from("<i", blob, offs["ks_iters"])[0] == 2**31 - 1
    assert struct.unpack_from("<i", blob, offs["ks_count"])[0] == -(2**31)


def test_pack_into_patches_one_slot():
    decl = declaration("wgrad_sk", "linear")
    packer = Packer(decl)
    vals = values_for(decl)
    buf = packer.pack(vals)
    packer.pack_into(buf, "sk_pool", 77)
    packer.pack_into(buf, "dw", 0x1234_5670)
    vals.update(sk_pool=77, dw=0x1234_5670)
    assert bytes(buf) == decl.pack(vals)
    with pytest.raises(AbiError, match="not 16-byte aligned"):
        packer.pack_into(buf, "dw", 0x1234_5678)


@pytest.mark.parametrize("family, variant", ALL_WGRAD)
def test_pack_refuses_missing(family, variant):
    decl = declaration(family, variant)
    for name in decl.value_names():
        vals = values_for(decl)
        del vals[name]
        with pytest.raises(AbiError, match=rf"{family}/{variant}: missing kernarg\(s\) {name}$"):
            decl.pack(vals)


@pytest.mark.parametrize("family, variant", [fv for fv in ALL_WGRAD if fv[1] not in ("two_stage", "workspace")])
@pytest.mark.parametrize("name", ["ws_ptr", "ws_bytes"])
def test_pack_refuses_workspace_for_variant_without_one(family, variant, name):
    decl = declaration(family, variant)
    vals = values_for(decl)
    vals[name] = 0x7000_0000 if name == "ws_ptr" else 4096
    with pytest.raises(AbiError, match=rf"{name} unused by this variant \(it takes no workspace\)"):
        decl.pack(vals)


def test_pack_refuses_unknown_names():
    decl = declaration("wgrad_sk", "atomic")
    vals = values_for(decl)
    vals["sk_flags"] = 0x1000  # only linear/tree hand partials over through flags
    with pytest.raises(AbiError, match=r"unknown kernarg\(s\) sk_flags"):
        decl.pack(vals)
    vals = values_for(decl)
    vals["bogus"] = 1
    with pytest.raises(AbiError, match=r"wgrad_sk/atomic: unknown kernarg\(s\) bogus"):
        decl.pack(vals)
    vals = values_for(decl)
    vals["_tail0"] = 0  # the compiler's trailing pointers are the packer's, never the caller's
    with pytest.raises(AbiError, match=r"_tail0"):
        Packer(decl, tail_pointers=1).pack(vals)


def test_pack_refusal_of_tail_pointer_does_not_blame_workspace():
    decl = declaration("wgrad_sk", "atomic")
    vals = values_for(decl)
    vals["_tail0"] = 0
    with pytest.raises(AbiError) as e:
        Packer(decl, tail_pointers=1).pack(vals)
    assert "workspace" not in str(e.value) and "trailing" in str(e.value)


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1, 2**40])
def test_pack_refuses_out_of_range_i32(value):
    decl = declaration("wgrad_sk", "tree")
    for name in ("N", "ks_count", "sk_iters_per_cta", "sk_tree_rounds"):
        vals = values_for(decl)
        vals[name] = value
        with pytest.raises(AbiError, match=rf"kernarg {name}={value} does not fit in i32"):
            decl.pack(vals)


@pytest.mark.parametrize("value", [1.0, "3", True, None])
def test_pack_refuses_non_int(value):
    decl = declaration("wgrad", "direct")
    vals = values_for(decl)
    vals["K"] = value
    with pytest.raises(AbiError, match="kernarg K must be an int"):
        decl.pack(vals)


@pytest.mark.parametrize(
    "family, variant, name",
    [
        ("wgrad", "direct", "dy"), ("wgrad", "atomic", "x"), ("wgrad", "two_stage", "dw"),
        ("wgrad", "two_stage", "ws_ptr"), ("wgrad_sk", "linear", "sk_flags"),
        ("wgrad_sk", "tree", "sk_partials"), ("wgrad_sk", "workspace", "ws_ptr"), ("stage2", "reduce", "ws_ptr"),
    ],
)  # fmt: skip
def test_pack_refuses_null_required_buffer(family, variant, name):
    decl = declaration(family, variant)
    vals = values_for(decl)
    vals[name] = 0
    with pytest.raises(AbiError, match=rf"buffer {name} is missing \(null pointer\)"):
        decl.pack(vals)


@pytest.mark.parametrize("addr", [0x7000_0008, 0x7000_0001, 0x7000_0004, 0x7000_000C])
@pytest.mark.parametrize("name", ["dy", "x", "dw", "sk_flags", "sk_partials"])
def test_pack_refuses_unaligned_pointers(addr, name):
    decl = declaration("wgrad_sk", "linear")
    vals = values_for(decl)
    vals[name] = addr
    with pytest.raises(AbiError, match=rf"{name} at {addr:#x} is not 16-byte aligned"):
        decl.pack(vals)
    vals[name] = addr & ~0xF  # the aligned address is fine
    decl.pack(vals)


@pytest.mark.parametrize("addr", [-16, 2**64, 2**64 + 16])
def test_pack_refuses_non_64bit_pointers(addr):
    decl = declaration("wgrad", "direct")
    vals = values_for(decl)
    vals["dy"] = addr
    with pytest.raises(AbiError, match="is not a 64-bit address"):
        decl.pack(vals)


def test_highest_aligned_pointer_packs():
    decl = declaration("wgrad", "direct")
    vals = values_for(decl)
    vals["dy"] = 2**64 - 16
    blob = decl.pack(vals)
    assert struct.unpack_from("<Q", blob, 0)[0] == 2**64 - 16


def test_kernel_parameter_lists_match_declarations():
    """The Triton kernels' runtime parameters are the declaration, in order (the kernels module
    asserts this at import; check it from the outside too)."""
    wgrad = pytest.importorskip("skwgrad.aot.kernels.wgrad")
    grouped = pytest.importorskip("skwgrad.aot.kernels.grouped")
    for fn, decls in (
        (wgrad.wgrad_splitk, WGRAD),
        (grouped.grouped_wgrad, GROUPED),
        (wgrad.wgrad_streamk, [("wgrad_sk", "atomic"), ("wgrad_sk", "workspace")]),
        (wgrad.wgrad_streamk_fixup, [("wgrad_sk", "linear"), ("wgrad_sk", "tree")]),
    ):
        params = list(inspect.signature(fn.fn).parameters)
        for fv in decls:
            names = list(declaration(*fv).names)
            assert params[: len(names)] == names, fv
            assert all(p.isupper() for p in params[len(names) :]), fv  # then only constexprs
