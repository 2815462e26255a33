"""Errors a user can act on. Each message says what is wrong and what to do.

Callers branch on the class, never on the message. Every class carries the CLI exit code it
maps to (``exit_code``): 1 a check failed, 2 usage (a bad argument, problem or option),
3 environment (no GPU, no compiler, an unusable cache).
"""

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_ENVIRONMENT = 3


class SkwgradError(Exception):
    """Base class for every error skwgrad raises on purpose."""

    exit_code = EXIT_USAGE


class ProblemError(SkwgradError, ValueError):
    """A convolution problem or argument that skwgrad cannot or will not run."""


class LayoutError(ProblemError):
    """Arrays whose memory layout skwgrad will not guess (ambiguous, or neither reading fits)."""


class AbiError(SkwgradError, ValueError):
    """Kernel arguments that do not fit the kernel's declared ABI."""


class CacheError(SkwgradError):
    """A cache entry that is missing, corrupt or built for something else."""

    exit_code = EXIT_ENVIRONMENT


class DamagedEntryError(CacheError):
    """One cache entry (row or object) failed a check; the rest of the cache may be fine."""


class BackendError(SkwgradError, RuntimeError):
    """No usable GPU runtime, or a runtime call that failed."""

    exit_code = EXIT_ENVIRONMENT


class TensorMapError(BackendError):
    """The runtime refused to encode a TMA tensor map for a launch (a driver without TMA im2col,
    or limits the selection did not know): selection takes the next kernel."""


class CaptureError(BackendError):
    """A launch that cannot be recorded into a CUDA/HIP graph as asked; the message says how."""

    exit_code = EXIT_USAGE


class CheckFailed(SkwgradError):
    """A verification ran and found a wrong result or a damaged cache."""

    exit_code = EXIT_CHECK_FAILED
