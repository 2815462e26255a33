"""skwgrad: ahead-of-time stream-K / split-K convolution backward-weight (wgrad) kernels.

compile-all builds code objects into a keyed cache on a CPU-only machine; run-from-cache and
the Python API (`wgrad`, `plan`) launch them on the GPU machine with no compiler present.
"""

__version__ = "0.1.0"


def __getattr__(name):
    # The launcher pulls in GPU runtimes lazily: importing skwgrad must work on a build machine.
    if name in ("wgrad", "plan"):
        from skwgrad.launcher import api

        return getattr(api, name)
    raise AttributeError(f"module 'skwgrad' has no attribute {name!r}")
