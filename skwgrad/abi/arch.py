"""Targets skwgrad builds for, and what the offline tools need to know about them.

Used only where no device is present (plan, compile-all, tests). At run time the CU/SM count
comes from the device itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from skwgrad.errors import ProblemError


@dataclass(frozen=True)
class Arch:
    name: str  # full target as the compiler spells it: "gfx942", "gfx950", "sm_90"
    backend: str  # "hip" or "cuda"
    compute_units: int  # CUs (AMD) or SMs (NVIDIA) of the reference part
    wave_size: int
    lds_bytes_per_cu: int
    part: str  # the reference part the numbers are for

    @property
    def triton_target(self):
        from triton.backends.compiler import GPUTarget

        if self.backend == "hip":
            return GPUTarget("hip", self.name, self.wave_size)
        return GPUTarget("cuda", int(self.name.removeprefix("sm_")), self.wave_size)


ARCHES: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch("gfx942", "hip", 304, 64, 64 * 1024, "MI300X"),
        Arch("gfx950", "hip", 256, 64, 160 * 1024, "MI355X"),
        Arch("sm_90", "cuda", 132, 32, 228 * 1024, "H200 SXM"),
    )
}


def get_arch(name: str) -> Arch:
    try:
        return ARCHES[name]
    except KeyError:
        raise ProblemError(
            f"arch {name!r} is not a skwgrad target; use one of {', '.join(ARCHES)}"
        ) from None
