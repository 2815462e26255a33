"""Which of the specs that admit a problem selection still considers: the channel-vector rule.

Selection (``skwgrad.launcher.select``) and the corpus-driven build (``skwgrad compile-all
--corpus``) must agree on it, so it lives here, below both, with no compiler and no cache: a
function of specs and a problem only.

Per family, keep the specs with the widest channel vectors: the key is (pointwise addressing when
the problem is pointwise, ``vec_c * vec_k``, ``vec_c``). Stream-K and split-K are built at
different widths, so each family is narrowed on its own. Stage-2 specs take no part (they are
chosen by dW dtype alone).

This module is not part of the cache identity (``skwgrad.abi.identity``): it decides which
kernels are used, never the bytes of one.
"""

from __future__ import annotations

from typing import Callable, Iterable, TypeVar

from skwgrad.abi.conv import ConvProblem
from skwgrad.abi.kernargs import HELPER_FAMILIES
from skwgrad.abi.spec import KernelSpec
from skwgrad.errors import AbiError, ProblemError

T = TypeVar("T")

# Families a problem's main kernel comes from, in the order selection tries them; a family that
# is not listed (a new one registered later) is narrowed too, after these.
MAIN_FAMILY_ORDER = ("wgrad_sk", "wgrad")


def admits(spec: KernelSpec, problem: ConvProblem) -> bool:
    """True when ``spec.check_problem(problem)`` accepts the problem."""
    try:
        spec.check_problem(problem)
    except (AbiError, ProblemError):
        return False
    return True


def width_key(spec: KernelSpec, problem: ConvProblem) -> tuple:
    """Larger is preferred: pointwise addressing for a pointwise problem, then the channel
    vectors' product, then ``vec_c``."""
    return (spec.pointwise and problem.is_pointwise, spec.vec_c * spec.vec_k, spec.vec_c)


def widest(things: Iterable[T], problem: ConvProblem, spec_of: Callable[[T], KernelSpec] = lambda s: s) -> list[T]:
    """Keep, per main-kernel family, the ones with the widest channel vectors for ``problem``
    (``width_key``). ``things`` are specs, or anything ``spec_of`` maps to its spec (cached
    kernels). Order within a family is kept; families come out in ``MAIN_FAMILY_ORDER``, then any
    other family in order of first appearance. Stage-2 and pad specs are dropped."""
    things = list(things)
    fams = [f for f in MAIN_FAMILY_ORDER]
    for t in things:
        f = spec_of(t).family
        if f not in fams and f not in HELPER_FAMILIES:
            fams.append(f)
    out: list[T] = []
    for fam in fams:
        group = [t for t in things if spec_of(t).family == fam]
        if group:
            best = max(width_key(spec_of(t), problem) for t in group)
            out += [t for t in group if width_key(spec_of(t), problem) == best]
    return out


def selectable(specs: Iterable[KernelSpec], problem: ConvProblem) -> list[KernelSpec]:
    """The main-kernel specs among ``specs`` that selection could choose for ``problem``: those
    that admit it, narrowed by ``widest``."""
    return widest((s for s in specs if s.family not in HELPER_FAMILIES and admits(s, problem)), problem)


__all__ = ["admits", "width_key", "widest", "selectable", "MAIN_FAMILY_ORDER"]
