"""Every kernel family compiles for gfx942 and gfx950 on this GPU-less machine, and the AMD code
objects are what the ABI and the flag protocol say: kernarg layout from the NT_AMDGPU_METADATA
note, MFMA in the ISA, L2 writeback before every flag publish and invalidate after every flag
acquire, no scratch (spills), fp32 atomics in exactly the split-K epilogues that accumulate."""

import os
import re
import warnings
from concurrent.futures import ProcessPoolExecutor

import pytest

from skwgrad.abi import codeobject
from skwgrad.abi.launch import STAGE2_BLOCK
from skwgrad.abi.padding import pad_spec
from skwgrad.abi.spec import KernelSpec
from skwgrad.errors import AbiError

ARCHES = ("gfx942", "gfx950")
BASE = dict(dtype="bf16", dw_dtype="bf16", vec_c=8, vec_k=8, bm=64, bn=64, bk=32, num_warps=4, num_stages=2)


def specs():
    out = [KernelSpec("wgrad", "direct", **BASE), KernelSpec("wgrad", "two_stage", **BASE),
           KernelSpec("wgrad", "atomic", **{**BASE, "dw_dtype": "fp32"}), KernelSpec("wgrad", "workspace", **BASE)]  # fmt: skip
    for mode in ("dp_sk", "persistent"):
        for red in ("linear", "tree", "workspace"):
            out.append(KernelSpec("wgrad_sk", red, mode=mode, **BASE))
        out.append(KernelSpec("wgrad_sk", "atomic", mode=mode, **{**BASE, "dw_dtype": "fp32"}))
    out.append(KernelSpec("wgrad_sk", "tree", mode="dp_sk", **{**BASE, "spatial_dims": 3, "vec_c": 1, "vec_k": 1}))
    out.append(KernelSpec("wgrad", "direct", **{**BASE, "pointwise": True}))
    out.append(KernelSpec("wgrad_sk", "linear", mode="dp_sk", **{**BASE, "bm": 128, "bn": 128, "bk": 64, "num_warps": 8}))
    out.append(KernelSpec("stage2", "reduce", "bf16", "bf16", block=STAGE2_BLOCK))
    out += [pad_spec(d) for d in ("bf16", "fp16", "fp32")]  # the channel-padding copies
    return out


def _build(job):
    spec, arch = job
    warnings.filterwarnings("ignore")
    from skwgrad.aot.compile import compile_spec

    ck = compile_spec(spec, arch, keep_asm=True)
    return spec, arch, ck.binary, ck.metadata


@pytest.fixture(scope="module")
def built():
    jobs = [(s, a) for a in ARCHES for s in specs()]
    with ProcessPoolExecutor(2) as ex:
        return {(s, a): (b, m) for s, a, b, m in ex.map(_build, jobs)}


ALL = [(s, a) for a in ARCHES for s in specs()]
IDS = [f"{a}-{s.label}" for s, a in ALL]


@pytest.mark.parametrize("spec,arch", ALL, ids=IDS)
def test_kernarg_layout_matches_the_declaration(built, spec, arch):
    binary, md = built[(spec, arch)]
    k = codeobject.amdgpu_kernel(binary, md["name"])
    slots, size = spec.kernarg_decl.layout(md["kernarg"]["tail_pointers"])
    explicit = [a for a in k[".args"] if not a[".value_kind"].startswith("hidden_")]
    assert [(a[".offset"], a[".size"]) for a in explicit] == [(s.offset, s.arg.size) for s in slots]
    # hidden_* arguments (filled by the HIP runtime) may only follow the explicit block
    assert all(a[".offset"] >= size for a in k[".args"] if a[".value_kind"].startswith("hidden_"))
    assert k[".kernarg_segment_size"] >= size
    assert md["kernarg"]["tail_pointers"] == 2  # Triton's global and profile scratch pointers
    assert re.search(rf"-{arch}(:|$)", codeobject.amdgpu_metadata(binary)["amdhsa.target"])
    assert k[".wavefront_size"] == 64


@pytest.mark.parametrize("spec,arch", ALL, ids=IDS)
def test_no_scratch_and_mfma(built, spec, arch):
    binary, md = built[(spec, arch)]
    amd = md["amd"]
    # No scratch memory: no VGPR spills and no private segment. (SGPR spills land in VGPR lanes
    # through v_writelane, not in scratch; the stream-K kernels have some, recorded in the cache.)
    assert amd["scratch_bytes"] == 0 and amd["vgpr_spill_count"] == 0, amd
    isa = md["_asm"]["amdgcn"]
    if spec.family not in ("stage2", "pad"):
        assert re.search(r"^\s*v_mfma_f32_\w+", isa, re.M), "no MFMA instruction in a wgrad kernel"
    if spec.family == "wgrad":
        # the split-K epilogues that accumulate (into dW, or into the workspace replica) add with
        # fp32 atomics; direct and two_stage store
        atomics = re.search(r"^\s*(global|buffer)_atomic_add_f32\b", isa, re.M)
        assert bool(atomics) == (spec.variant in ("atomic", "workspace")), spec.label


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_pad_kernel_moves_whole_vectors_on_its_aligned_side(built, arch, dtype):
    """The gather stores 16-byte vectors (global_store_dwordx4) into the aligned staging rows; its
    loads and the scatter's loads and stores are element-wise (the caller's unaligned rows), so an
    element-wide access of the data width must be there too."""
    isa = _instructions(built[(pad_spec(dtype), arch)][1]["_asm"]["amdgcn"])
    assert any(re.match(r"^(global|buffer)_store_dwordx4", s) for s in isa), "no 16-byte store"
    narrow = r"^(global|buffer)_store_(short|dword)\s" if dtype != "fp32" else r"^(global|buffer)_store_dword\s"
    assert any(re.match(narrow, s) for s in isa), "no element-wide store (the scatter)"


def _instructions(isa: str) -> list[str]:
    out = []
    for line in isa.splitlines():
        s = line.strip()
        if not s or s.startswith((".", ";")) or s.endswith(":"):
            continue
        out.append(s)
    return out


VMEM_STORE = re.compile(r"^(buffer|global|flat)_(store|atomic)")
VMEM_LOAD = re.compile(r"^(buffer|global|flat)_load")
FLAG_STORE = re.compile(r"^global_store_dword\s.*\bsc1\b")
FLAG_LOAD = re.compile(r"^global_load_dword\s.*\bsc1\b")


def check_flag_protocol(isa: str) -> tuple[int, int]:
    """(publishes, acquires) after asserting the order around each."""
    ins = _instructions(isa)
    publishes = acquires = 0
    for i, s in enumerate(ins):
        if FLAG_STORE.match(s):
            publishes += 1
            # back to the writeback: a vmcnt(0) wait, and no other store in between
            j = i - 1
            saw_wait = False
            while j >= 0 and not ins[j].startswith("buffer_wbl2"):
                assert not VMEM_STORE.match(ins[j]), f"store between writeback and flag publish: {ins[j]}"
                saw_wait |= ins[j].startswith("s_waitcnt") and "vmcnt(0)" in ins[j]
                j -= 1
            assert j >= 0 and "sc1" in ins[j], "flag publish without an agent-scope L2 writeback before it"
            assert saw_wait, "flag publish not preceded by s_waitcnt vmcnt(0) after the writeback"
        if s.startswith("buffer_inv"):
            acquires += 1
            assert "sc1" in s, f"acquire invalidate is not agent scope: {s}"
            j = i - 1
            while j >= 0 and not FLAG_LOAD.match(ins[j]):
                assert not VMEM_LOAD.match(ins[j]), f"load between the flag poll and the invalidate: {ins[j]}"
                j -= 1
            assert j >= 0, "invalidate without a flag poll before it"
            assert any(x.startswith("s_waitcnt") and "vmcnt(0)" in x for x in ins[j + 1 : i]), "poll result not awaited"
    return publishes, acquires


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("variant", ["linear", "tree"])
def test_flag_release_and_acquire_in_isa(built, arch, variant):
    for spec, a in built:
        if a != arch or spec.family != "wgrad_sk" or spec.variant != variant:
            continue
        publishes, acquires = check_flag_protocol(built[(spec, a)][1]["_asm"]["amdgcn"])
        assert publishes >= 1 and acquires >= 1, (spec.label, publishes, acquires)


@pytest.mark.parametrize("arch", ARCHES)
def test_reductions_without_flags_have_no_flag_traffic(built, arch):
    for spec, a in built:
        if a == arch and (spec.family != "wgrad_sk" or spec.variant in ("atomic", "workspace")):
            publishes, acquires = check_flag_protocol(built[(spec, a)][1]["_asm"]["amdgcn"])
            assert (publishes, acquires) == (0, 0), spec.label


def test_checker_catches_a_missing_writeback():
    bad = "buffer_store_dwordx4 v[0:3], v1, s[0:3], 0 offen\ns_waitcnt vmcnt(0)\nglobal_store_dword v[2:3], v4, off sc1\n"
    with pytest.raises(AssertionError):
        check_flag_protocol(bad)
    good = "buffer_store_dwordx4 v[0:3], v1, s[0:3], 0 offen\nbuffer_wbl2 sc1\ns_waitcnt vmcnt(0)\nglobal_store_dword v[2:3], v4, off sc1\n"
    assert check_flag_protocol(good) == (1, 0)
    with pytest.raises(AssertionError):
        check_flag_protocol("global_load_dword v1, v[2:3], off sc1\nbuffer_inv sc1\n")  # no wait on the poll


def test_gfx950_tf32_is_refused_clearly():
    from skwgrad.aot.compile import compile_spec

    spec = KernelSpec("wgrad", "direct", "fp32", "fp32", vec_c=4, vec_k=4, bm=32, bn=32, bk=32, precision="tf32")
    with pytest.raises(AbiError, match="gfx950 has no TF32"):
        compile_spec(spec, "gfx950")


def test_gfx942_tf32_uses_xf32_mfma_without_scratch():
    # tf32 operands are transposed through registers (see ``_mac``); on CDNA3 that must still end
    # in xf32 MFMAs, with no spills.
    from skwgrad.aot.compile import compile_spec

    spec = KernelSpec("wgrad", "two_stage", "fp32", "fp32", vec_c=4, vec_k=4, bm=64, bn=64, bk=32, precision="tf32")
    ck = compile_spec(spec, "gfx942", keep_asm=True)
    asm = ck.metadata["_asm"]["amdgcn"]
    assert re.search(r"v_mfma_f32_\w+_xf32", asm)
    assert not re.search(r"v_mfma_f32_\d+x\d+x\d+_?f32", asm)  # no full-precision fp32 MFMA fallback
    assert re.search(r"\.private_segment_fixed_size:\s*0\b", asm)


def test_flags_per_cta_is_recorded(built):
    for (spec, arch), (_, md) in built.items():
        want = md["threads"] if spec.family == "wgrad_sk" and spec.variant in ("linear", "tree") else 0
        assert md["flags_per_cta"] == want, spec.label


def test_sm90_tf32_builds_on_mma_sync_with_the_switch_pinned(monkeypatch):
    # abi.arch: tf32 on sm_90 runs mma.sync (wgmma's tf32 operands must be K-major, wgrad's are not;
    # H200 run Q1: 1.67x faster). Triton reads that switch from the environment, so compile_spec pins
    # it per compile: a builder's own DISABLE_MMA_V3 must neither leak into a 16-bit kernel nor survive.
    from skwgrad.aot.compile import compile_spec

    monkeypatch.setenv("DISABLE_MMA_V3", "1")
    tf32 = KernelSpec("wgrad", "two_stage", "fp32", "fp32", vec_c=4, vec_k=4, bm=64, bn=64, bk=32, precision="tf32")
    bf16 = KernelSpec("wgrad", "two_stage", **{**BASE, "num_stages": 3})
    ptx = {s.dtype: compile_spec(s, "sm_90", keep_asm=True).metadata["_asm"]["ptx"] for s in (tf32, bf16)}
    assert re.search(r"mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32\.f32", ptx["fp32"])
    assert "wgmma" not in ptx["fp32"]
    assert re.search(r"wgmma\.mma_async\.\S*bf16", ptx["bf16"])
    assert os.environ["DISABLE_MMA_V3"] == "1"  # the builder's environment is restored


# -- programmatic dependent launch (sm_90) ---------------------------------------------------------
def _sm90_specs_one_per_variant():
    """One sm_90 bf16 kernel per (family, variant) of the smoke preset, plus a depthwise window
    kernel and a TMA depthwise one (the default preset's), each with its atomic twin."""
    from skwgrad.aot import sweep

    seen = {}
    for it in sweep.sweep(preset="smoke", arches=("sm_90",), dtypes=("bf16",)):
        seen.setdefault((it.spec.family, it.spec.variant), it.spec)
    win = KernelSpec("dwconv", "atomic", "bf16", "fp32", vec_c=8, vec_k=8, bm=32, bn=3, bk=32, num_warps=4, num_stages=1, mode="win7r3")
    seen[("dwconv", "atomic win7r3")] = win
    for s in sweep.dwconv_tma_specs("default", "sm_90", "bf16"):
        seen.setdefault(("dwconv_tma", s.variant), s)
    return list(seen.values())


GDC = _sm90_specs_one_per_variant()


@pytest.fixture(scope="module")
def built_sm90():
    with ProcessPoolExecutor(2) as ex:
        return {s: m for s, _, _, m in ex.map(_build, [(s, "sm_90") for s in GDC])}


@pytest.mark.parametrize("spec", GDC, ids=[s.label for s in GDC])
def test_sm90_kernels_wait_for_the_dw_memset_exactly_when_it_runs_before_them(built_sm90, spec):
    """The launcher starts an atomic kernel while dW's memset runs (abi.arch dependent_launch); the
    kernel must wait for it (griddepcontrol.wait) before writing dW, and only those kernels wait
    (the rule both read is abi.spec.dw_zeroed_before_launch), besides Stage-2, which starts while
    the main kernel finishes."""
    from skwgrad.abi.arch import ARCHES as TARGETS
    from skwgrad.abi.spec import dw_zeroed_before_launch

    ptx = built_sm90[spec]["_asm"]["ptx"]
    assert TARGETS["sm_90"].dependent_launch
    # Stage-2 is launched dependently after every main kernel and waits for it before anything
    waits = dw_zeroed_before_launch(spec.variant) or spec.family == "stage2"
    assert ("griddepcontrol.wait" in ptx) == waits, spec.label
    assert "griddepcontrol.launch_dependents" not in ptx  # nothing launched after it starts early


def test_every_tma_arch_has_dependent_launch():
    """The Gluon kernels wait on their atomic epilogue unconditionally (they build for TMA arches
    only), so every such arch must launch them dependently, and no AMD arch does."""
    from skwgrad.abi.arch import ARCHES as TARGETS

    for a in TARGETS.values():
        if a.tma_im2col:
            assert a.dependent_launch, a.name
        if a.backend == "hip":
            assert not a.dependent_launch, a.name
