"""``LaunchOptions``: every choice a caller can make about a launch, validated once.

One frozen, hashable object threads through the API (``wgrad``, ``plan``), selection, the plan
cache and the CLI; nothing re-declares or re-checks these options elsewhere. It is built and
checked before any device work, so a bad argument on a machine without a GPU is reported as the
bad argument, not as a missing GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from skwgrad.abi.conv import DTYPES, PRECISIONS
from skwgrad.abi.kernargs import SK_REDUCTIONS, SPLITK_EPILOGUES
from skwgrad.abi.policy import DETERMINISTIC_REDUCTIONS, REDUCTION_CHOICES, STREAMK_CHOICES
from skwgrad.abi.streamk import MODES
from skwgrad.errors import ProblemError

LAYOUT_CHOICES = ("auto", "nchw", "nhwc")
I32_MAX = 2**31 - 1


def _int(name: str, v, lo: int, hi: int = I32_MAX, *, allow=()) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProblemError(f"{name} must be an integer, got {v!r} ({type(v).__name__})")
    if v in allow:
        return v
    if not lo <= v <= hi:
        extra = f" or {', '.join(map(str, allow))}" if allow else ""
        raise ProblemError(f"{name} must be in [{lo}, {hi}]{extra}, got {v}")
    return v


@dataclass(frozen=True)
class LaunchOptions:
    """streamk: ``auto`` | ``off`` (split-K) | ``dp_sk`` | ``persistent``.
    reduction: ``auto`` or, for stream-K, linear/tree/atomic/workspace; for split-K
    direct/atomic/two_stage/workspace (atomic and workspace name both: either family may run them).
    streamk_ctas: the stream-K pool (-1: one CTA per CU for linear/tree, four for atomic/workspace).
    tile: ``(BM, BN, BK)`` to force a tile. ks_count: force the split-K degree.
    dw_dtype: the dW dtype (None: the input dtype). precision: fp32 inputs only, ``ieee`` (the
    default) or ``tf32``. deterministic: only reductions whose result is bit-identical launch to
    launch (linear, tree, direct, two_stage). layout: ``auto``, ``nchw`` or ``nhwc`` (see
    ``skwgrad.launcher.layout``)."""

    streamk: str = "auto"
    reduction: str = "auto"
    streamk_ctas: int = -1
    tile: tuple[int, int, int] | None = None
    ks_count: int | None = None
    dw_dtype: str | None = None
    precision: str | None = None
    deterministic: bool = False
    layout: str = "auto"

    def __post_init__(self):
        def choice(name, v, options):
            if not isinstance(v, str) or v not in options:
                raise ProblemError(f"{name}={v!r}: use one of {', '.join(options)}")

        choice("streamk", self.streamk, STREAMK_CHOICES)
        choice("reduction", self.reduction, REDUCTION_CHOICES)
        choice("layout", self.layout, LAYOUT_CHOICES)
        _int("streamk_ctas", self.streamk_ctas, 1, allow=(-1,))
        if self.tile is not None:
            try:
                tile = tuple(self.tile)
            except TypeError:
                raise ProblemError(f"tile must be (BM, BN, BK), got {self.tile!r}") from None
            if len(tile) != 3:
                raise ProblemError(f"tile must be (BM, BN, BK), got {self.tile!r}")
            for n, v in zip(("BM", "BN", "BK"), tile):
                _int(f"tile {n}", v, 16, 1024)
                if v & (v - 1):
                    raise ProblemError(f"tile {n}={v} must be a power of two")
            object.__setattr__(self, "tile", tile)
        if self.ks_count is not None:
            _int("ks_count", self.ks_count, 1)
        if self.dw_dtype is not None:
            choice("dw_dtype", self.dw_dtype, DTYPES)
        if self.precision is not None:
            choice("precision", self.precision, PRECISIONS)
        if not isinstance(self.deterministic, bool):
            raise ProblemError(f"deterministic must be True or False, got {self.deterministic!r}")
        sk, red = self.streamk, self.reduction
        if sk in MODES and red not in ("auto", *SK_REDUCTIONS):
            raise ProblemError(f"reduction={red!r} is a split-K epilogue; stream-K ({sk}) takes {', '.join(SK_REDUCTIONS)}")
        if sk == "off" and red not in ("auto", *SPLITK_EPILOGUES):
            raise ProblemError(f"reduction={red!r} is a stream-K reduction; split-K takes {', '.join(SPLITK_EPILOGUES)}")
        if self.ks_count is not None and sk in MODES:
            raise ProblemError("ks_count is the split-K degree; stream-K kernels take streamk_ctas instead")
        if self.deterministic and red != "auto" and red not in DETERMINISTIC_REDUCTIONS:
            raise ProblemError(
                f"reduction={red!r} is not deterministic (atomics); with deterministic=True use one of "
                f"{', '.join(sorted(DETERMINISTIC_REDUCTIONS))}"
            )
        if red == "atomic" and self.dw_dtype not in (None, "fp32"):
            raise ProblemError(
                f"the atomic reduction accumulates into dW, which must be fp32; dw_dtype={self.dw_dtype!r}: pass dw_dtype='fp32'"
            )

    def allows(self, variant: str) -> bool:
        """Whether a kernel with this reduction / epilogue may run under these options."""
        return not self.deterministic or variant in DETERMINISTIC_REDUCTIONS
