"""Workspace layout per reduction: which buffers, their offsets and sizes, and what is zeroed.

| variant                  | buffers                          | zeroed per launch                 |
|--------------------------|----------------------------------|-----------------------------------|
| wgrad / direct           | none                             | nothing                           |
| wgrad / atomic           | none (dW is fp32)                | dW                                |
| wgrad / two_stage        | ks_count f32 replicas of dW      | nothing: every split stores its   |
|                          |                                  | whole replica, Stage-2 sums them  |
|                          |                                  | in split order (deterministic)    |
| wgrad_sk / linear, tree  | [flags | partials]               | nothing: flags hold the launch's  |
|                          |                                  | epoch (zeroed once, at allocation)|
| wgrad_sk / atomic        | none (dW is fp32)                | dW                                |
| wgrad_sk / workspace     | one f32 replica of dW            | the replica                       |

``flags_bytes`` is the only place the flag table is sized; its ``flags_per_cta`` comes from the
kernel's publish protocol (recorded in the code object's metadata), never recomputed here.
"""

from __future__ import annotations

from dataclasses import dataclass

from skwgrad.errors import AbiError

ALIGN = 256
F32 = 4
FLAG_BYTES = 4


def _roundup(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


def flags_bytes(sk_ctas: int, flags_per_cta: int) -> int:
    """Bytes of the flag table: one i32 per (SK CTA, flag), rounded up to 256."""
    if sk_ctas < 0 or flags_per_cta <= 0:
        raise AbiError(f"flags_bytes needs sk_ctas >= 0 and flags_per_cta > 0, got {sk_ctas}, {flags_per_cta}")
    return _roundup(FLAG_BYTES * sk_ctas * flags_per_cta)


@dataclass(frozen=True)
class Region:
    name: str
    offset: int
    nbytes: int
    zero_per_launch: bool


@dataclass(frozen=True)
class WorkspaceLayout:
    family: str
    variant: str
    regions: tuple[Region, ...]
    total_bytes: int
    zero_dw: bool  # dW itself accumulates (atomic): zero it before each launch
    epoch_flags: bool  # flags compare against the launch's epoch; zero them once at allocation
    replicas: int  # f32 replicas of dW that Stage-2 sums (0: no Stage-2)

    def region(self, name: str) -> Region:
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(f"{self.family}/{self.variant} workspace has no {name!r} region")

    @property
    def zero_ranges(self) -> tuple[tuple[int, int], ...]:
        """(offset, nbytes) inside the workspace to memset to 0 before each launch."""
        return tuple((r.offset, r.nbytes) for r in self.regions if r.zero_per_launch and r.nbytes)

    @property
    def needs_stage2(self) -> bool:
        return self.replicas > 0


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
    zero_dw = epoch = False
    replicas = 0
    if family == "wgrad":
        if variant == "direct":
            if ks_count != 1:
                raise AbiError(f"the direct epilogue stores dW once: ks_count must be 1, got {ks_count}")
        elif variant == "atomic":
            zero_dw = True
        elif variant == "two_stage":
            replicas = ks_count
            regions.append(Region("replicas", 0, F32 * dw_numel * ks_count, zero_per_launch=False))
        else:
            raise AbiError(f"unknown split-K epilogue {variant!r}")
    elif family == "wgrad_sk":
        if variant in ("linear", "tree"):
            if flags_per_cta is None:
                raise AbiError("a linear/tree layout needs the kernel's flags_per_cta")
            if bm <= 0 or bn <= 0:
                raise AbiError("a linear/tree layout needs the tile BM x BN")
            fb = flags_bytes(sk_ctas, flags_per_cta)
            regions.append(Region("flags", 0, fb, zero_per_launch=False))
            regions.append(Region("partials", fb, _roundup(F32 * bm * bn * sk_ctas), zero_per_launch=False))
            epoch = True
        elif variant == "atomic":
            zero_dw = True
        elif variant == "workspace":
            replicas = 1
            regions.append(Region("replicas", 0, F32 * dw_numel, zero_per_launch=True))
        else:
            raise AbiError(f"unknown stream-K reduction {variant!r}")
    else:
        raise AbiError(f"family {family!r} has no workspace layout")
    total = _roundup(sum(r.nbytes for r in regions)) if regions else 0
    return WorkspaceLayout(family, variant, tuple(regions), total, zero_dw, epoch, replicas)
