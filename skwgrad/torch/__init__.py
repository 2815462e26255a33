"""PyTorch integration: a weight-gradient custom op, convolutions whose backward uses it, and a
one-line model drop-in with a per-shape fallback to PyTorch's own weight gradient.

    import skwgrad.torch
    skwgrad.torch.patch(model)          # every nn.Conv2d / nn.Conv3d (padding_mode='zeros')
    ...train as usual (eager, torch.compile(fullgraph=True), CUDA graphs, autocast)...
    print(skwgrad.torch.stats())        # which path each layer's weight gradient took, and why

Importing this package needs no GPU; with PyTorch installed it registers the ops
(``skwgrad::conv``, ``skwgrad::conv_weight_grad``). Without PyTorch the import still succeeds
and using any of its names raises ImportError saying what to install. The implementation is
``skwgrad.torch._ops``; inside this package ``import torch`` is the top-level PyTorch.
"""

_PUBLIC = (
    "conv2d",
    "conv3d",
    "conv_weight_grad",
    "patch",
    "unpatch",
    "enabled",
    "is_enabled",
    "configure",
    "stats",
    "reset_stats",
    "clear_decisions",
    "record_shapes",
    "PatchReport",
    "NATIVE_REASONS",
)

__all__ = list(_PUBLIC)


_missing = None
try:
    import torch as _torch  # noqa: F401  (the top-level PyTorch: imports are absolute)
except ImportError as e:
    _missing = e
else:
    # Registers skwgrad::conv and skwgrad::conv_weight_grad with torch.library.
    from skwgrad.torch._ops import *  # noqa: F401,F403
    from skwgrad.torch._ops import NATIVE_REASONS, PatchReport  # noqa: F401


def __getattr__(name):
    if name in _PUBLIC and _missing is not None:
        raise ImportError(
            f"skwgrad.torch.{name} needs PyTorch, which is not importable here ({_missing}): install a PyTorch build "
            "for your GPU (https://pytorch.org), e.g. `pip install torch`"
        ) from _missing
    raise AttributeError(f"module 'skwgrad.torch' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))
