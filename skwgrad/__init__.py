"""skwgrad: ahead-of-time stream-K / split-K convolution backward-weight (wgrad) kernels.

compile-all builds code objects into a keyed cache on a CPU-only machine; run-from-cache and
the Python API (`wgrad`, `plan`, `tune`) launch them on the GPU machine with no compiler present.
"""

__version__ = "0.1.0"  # keep equal to pyproject.toml's version (tests/test_packaging.py checks)

# The launcher pulls in GPU runtimes lazily: importing skwgrad must work on a build machine.
_LAZY_API = ("wgrad", "plan", "tune", "set_tuning")
__all__ = ["__version__", *_LAZY_API]


def __getattr__(name):
    if name in _LAZY_API:
        from skwgrad.launcher import api

        return getattr(api, name)
    raise AttributeError(f"module 'skwgrad' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY_API])
