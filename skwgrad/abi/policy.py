"""The selection policy's named constants, shared by the launcher's ``select`` and the offline
``skwgrad plan`` report (which resolves the same rule without a cache or device)."""

from __future__ import annotations

from skwgrad.abi.kernargs import SK_REDUCTIONS, SPLITK_EPILOGUES
from skwgrad.abi.streamk import MODES

STREAMK_CHOICES = ("auto", "off", *MODES)
REDUCTION_CHOICES = ("auto", *dict.fromkeys((*SK_REDUCTIONS, *SPLITK_EPILOGUES)))
SK_MIN_ITERS = 256  # "a long reduction": iterations per tile at or above this (the SPEC's rule; plan's report)
# The search space of selection: split-K degrees giving this many CTAs per CU over the tiles, and
# stream-K pools of this many CTAs per CU (waiting reductions: only as many as are co-resident).
SPLITK_CTAS_PER_CU = (1, 2, 3, 4, 6, 8)
SK_POOL_CTAS_PER_CU = (1, 2, 3, 4)
AUTO_MODES = ("dp_sk", "persistent")
AUTO_SK_REDUCTIONS = ("workspace", "linear", "tree", "atomic")
# Reductions of one side only; atomic and workspace are both a stream-K reduction and a split-K
# epilogue, so a request naming them may take either family.
SK_ONLY = ("linear", "tree")
SPLITK_ONLY = ("direct", "two_stage")
DETERMINISTIC_REDUCTIONS = frozenset({"linear", "tree", "direct", "two_stage"})
