"""Errors a user can act on. Each message says what is wrong and what to do."""


class SkwgradError(Exception):
    """Base class for every error skwgrad raises on purpose."""


class ProblemError(SkwgradError, ValueError):
    """A convolution problem that skwgrad cannot or will not run."""


class AbiError(SkwgradError, ValueError):
    """Kernel arguments that do not fit the kernel's declared ABI."""


class CacheError(SkwgradError):
    """A cache entry that is missing, corrupt or built for something else."""


class BackendError(SkwgradError, RuntimeError):
    """No usable GPU runtime, or a runtime call that failed."""
