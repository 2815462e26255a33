"""The launcher over the real cache and really compiled code objects (sm_90 cubins and gfx942
hsaco, compiled here): selection through ``skwgrad.cache.Cache``, metadata checks, and the kernarg
block a plan hands the runtime, decoded against the layout read back from the code object."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_launcher_fakes as F  # noqa: E402

from skwgrad.abi.conv import parse_problem  # noqa: E402
from skwgrad.abi.launch import STAGE2_BLOCK, launch_geometry  # noqa: E402
from skwgrad.abi.spec import KernelSpec  # noqa: E402
from skwgrad.errors import ProblemError  # noqa: E402
from skwgrad.launcher import select as S  # noqa: E402
from skwgrad.launcher.plan import Kernel, Plan  # noqa: E402

SPECS = [
    KernelSpec("wgrad", "direct", "bf16", "bf16", vec_c=8, vec_k=8, bm=32, bn=32, bk=32, num_warps=4, num_stages=2),
    KernelSpec("wgrad_sk", "linear", "bf16", "bf16", vec_c=8, vec_k=8, bm=32, bn=32, bk=32, num_warps=4, num_stages=2, mode="dp_sk"),
    KernelSpec("wgrad_sk", "workspace", "bf16", "bf16", vec_c=8, vec_k=8, bm=32, bn=32, bk=32, num_warps=4, num_stages=2, mode="persistent"),
    KernelSpec("stage2", "reduce", "bf16", "bf16", block=STAGE2_BLOCK, num_warps=4),
]


class ObjectBackend(F.FakeBackend):
    """Takes real code objects (checks they are ELF), records launches, runs nothing."""

    def __init__(self, arch, **kw):
        super().__init__(arch=arch, emulate=False, **kw)
        self._pending = None  # the spec of the next main kernel loaded (only decoding needs it)

    def _load_module(self, binary):
        assert binary[:4] == b"\x7fELF", "not a code object"
        self.modules_loaded += 1
        return {}

    def _get_function(self, module, name):
        return {"spec": SPECS[-1] if name == "stage2_reduce" else self._pending, "name": name}


@pytest.fixture(scope="module")
def real_cache(tmp_path_factory):
    pytest.importorskip("triton")
    from skwgrad.aot.compile import compile_spec
    from skwgrad.cache import Cache

    cache = Cache(tmp_path_factory.mktemp("cache"))
    for arch in ("sm_90", "gfx942"):
        for s in SPECS:
            cache.put(compile_spec(s, arch))
    return cache


@pytest.mark.parametrize("arch,cus", [("sm_90", 132), ("gfx942", 304)])
def test_plans_over_real_code_objects(real_cache, arch, cus):
    p = parse_problem("n=8,c=16,k=40,h=32,w=32,y=3,x=3,padding=1")
    be = ObjectBackend(arch, cus=cus)
    for streamk, reduction, pool in (("off", "direct", 0), ("dp_sk", "linear", 7), ("persistent", "workspace", 9)):
        ch = S.choose(p, real_cache, arch=arch, cus=cus, streamk=streamk, reduction=reduction,
                      streamk_ctas=pool or -1)  # fmt: skip
        assert ch.kernel.arch == arch and ch.spec.variant == reduction
        be._pending = ch.spec
        plan = ch.plan(p, be)
        n0 = len(be.launches)
        plan.launch(0x10000, 0x20000, 0x30000)
        main = be.launches[n0]
        md = ch.kernel.metadata
        assert main["threads"] == md["threads"] == 4 * (64 if arch == "gfx942" else 32)
        assert main["shared"] == md["shared"] and len(main["bytes"]) == md["kernarg"]["size"]
        if arch == "gfx942":
            assert md["kernarg"]["size"] == md["amd"]["kernarg_segment_size"]  # the object's own figure
        geo = launch_geometry(p, ch.spec.family, reduction, bm=32, bn=32, bk=32, mode=ch.spec.mode,
                              pool=ch.pool, flags_per_cta=md["flags_per_cta"] or None)  # fmt: skip
        for name, value in geo.scalars.items():
            assert main["args"][name] == value, name
        assert (main["args"]["dy"], main["args"]["x"], main["args"]["dw"]) == (0x10000, 0x20000, 0x30000)
        if reduction == "linear":
            assert md["flags_per_cta"] == md["threads"]  # the kernel's publish protocol: one flag per thread
            assert plan.layout.region("flags").nbytes == -(-4 * geo.partition.sk_ctas * md["threads"] // 256) * 256
        if reduction == "workspace":
            assert be.launches[-1]["fn"].name == "stage2_reduce"


def test_cross_arch_kernels_are_refused(real_cache):
    p = parse_problem("n=8,c=16,k=40,h=32,w=32,y=3,x=3,padding=1")
    e = real_cache.find("gfx942", family="wgrad", variant="direct")[0]
    with pytest.raises(ProblemError, match="built for gfx942"):
        Plan(p, Kernel.from_entry(e, real_cache), ObjectBackend("sm_90"))


def test_missing_kernel_against_the_real_cache(real_cache):
    p = parse_problem("n=2,c=6,k=6,h=8,w=8,y=3,x=3")  # C = 6: no vec 8 kernel admits it
    with pytest.raises(S.NoKernelError) as ei:
        S.choose(p, real_cache, arch="sm_90", cus=132)
    assert f"--cache {real_cache.path}" in str(ei.value)
