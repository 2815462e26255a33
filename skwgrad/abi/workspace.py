"""Workspace layout per reduction: which buffers, in which arena, at which offsets.

A launch takes its buffers from two per-(device, stream) arenas:

* **zeroed**: zero at rest. It is zeroed once, when it is allocated, and every kernel that uses
  it leaves it zero: the linear/tree consumer resets each flag it polled, and Stage-2 resets the
  workspace replica it summed (split-K or stream-K). Nothing is zeroed per launch, so a launch is
  the same bytes every time and a CUDA/HIP graph can replay it.
* **scratch**: any contents; the kernel writes before it reads.

| variant                  | zeroed arena                 | scratch arena                  | per launch |
|--------------------------|------------------------------|--------------------------------|------------|
| wgrad / direct           |                              |                                |            |
| wgrad / atomic           |                              |                                | zero dW    |
| wgrad / two_stage        |                              | ks_count f32 replicas (stored  |            |
|                          |                              | whole by every split)          |            |
| wgrad / workspace        | one f32 replica (every split |                                |            |
|                          | adds; Stage-2 resets it)     |                                |            |
| wgrad_sk / linear, tree  | flags (consumers reset them) | partial tiles                  |            |
| wgrad_sk / atomic        |                              |                                | zero dW    |
| wgrad_sk / workspace     | one f32 replica (atomics;    |                                |            |
|                          | Stage-2 resets it)           |                                |            |

The packed-group (``grouped``) and depthwise (``dwconv``) families take the ``wgrad`` layouts for
the real problem's dW (``skwgrad.abi.launch``).

``flags_bytes`` is the only place the flag table is sized; its ``flags_per_cta`` comes from the
kernel spec (``KernelSpec.flags_per_cta``), never recomputed here.
"""

from __future__ import annotations

from dataclasses import dataclass

from skwgrad.abi.spec import dw_zeroed_before_launch
from skwgrad.errors import AbiError

ALIGN = 256
F32 = 4
FLAG_BYTES = 4
ARENAS = ("zeroed", "scratch")


def _roundup(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


def flags_bytes(sk_ctas: int, flags_per_cta: int) -> int:
    """Bytes of the flag table: one i32 per (SK CTA, flag), rounded up to 256."""
    if sk_ctas < 0 or flags_per_cta <= 0:
        raise AbiError(f"flags_bytes needs sk_ctas >= 0 and flags_per_cta > 0, got {sk_ctas}, {flags_per_cta}")
    return _roundup(FLAG_BYTES * sk_ctas * flags_per_cta)


@dataclass(frozen=True)
class Region:
    name: str  # flags | partials | replicas
    arena: str  # zeroed | scratch
    offset: int  # inside its arena
    nbytes: int


@dataclass(frozen=True)
class WorkspaceLayout:
    family: str
    variant: str
    regions: tuple[Region, ...]
    zero_dw: bool  # dW itself accumulates (atomic): zero it before each launch
    replicas: int  # f32 replicas of dW that Stage-2 sums (0: no Stage-2)
    stage2_reset: bool  # Stage-2 stores zeros back into the replicas (they live in the zeroed arena)

    def region(self, name: str) -> Region:
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(f"{self.family}/{self.variant} workspace has no {name!r} region")

    def arena_bytes(self, arena: str) -> int:
        """Bytes this launch needs of ``arena`` (0: it takes nothing from it)."""
        if arena not in ARENAS:
            raise KeyError(arena)
        return _roundup(max((r.offset + r.nbytes for r in self.regions if r.arena == arena), default=0))

    @property
    def needs_stage2(self) -> bool:
        return self.replicas > 0

    @property
    def uses_workspace(self) -> bool:
        return bool(self.regions)


def workspace_layout(
    family: str,
    variant: str,
    *,
    dw_numel: int,
    bm: int = 0,
    bn: int = 0,
    sk_ctas: int = 0,
    ks_count: int = 1,
    flags_per_cta: int | None = None,
) -> WorkspaceLayout:
    """The buffers one launch of (family, variant) needs, for a problem's dW size."""
    regions: list[Region] = []
    zero_dw = dw_zeroed_before_launch(variant)
    reset = False
    replicas = 0
    if family == "wgrad":
        if variant == "direct":
            if ks_count != 1:
                raise AbiError(f"the direct epilogue stores dW once: ks_count must be 1, got {ks_count}")
        elif variant == "atomic":
            pass  # dW itself accumulates: zero_dw
        elif variant == "two_stage":
            replicas = ks_count
            regions.append(Region("replicas", "scratch", 0, F32 * dw_numel * ks_count))
        elif variant == "workspace":
            # accumulated with atomics by every split, so it must start at zero: the zeroed arena,
            # left zero by Stage-2 (whatever ks_count, one replica)
            replicas = 1
            reset = True
            regions.append(Region("replicas", "zeroed", 0, F32 * dw_numel))
        else:
            raise AbiError(f"unknown split-K epilogue {variant!r}")
    elif family == "wgrad_sk":
        if variant in ("linear", "tree"):
            if flags_per_cta is None:
                raise AbiError("a linear/tree layout needs the kernel's flags_per_cta")
            if bm <= 0 or bn <= 0:
                raise AbiError("a linear/tree layout needs the tile BM x BN")
            regions.append(Region("flags", "zeroed", 0, flags_bytes(sk_ctas, flags_per_cta)))
            regions.append(Region("partials", "scratch", 0, _roundup(F32 * bm * bn * sk_ctas)))
        elif variant == "atomic":
            pass  # dW itself accumulates: zero_dw
        elif variant == "workspace":
            replicas = 1
            reset = True
            regions.append(Region("replicas", "zeroed", 0, F32 * dw_numel))
        else:
            raise AbiError(f"unknown stream-K reduction {variant!r}")
    else:
        raise AbiError(f"family {family!r} has no workspace layout")
    return WorkspaceLayout(family, variant, tuple(regions), zero_dw, replicas, reset)
