"""Pick the GPU runtime: CUDA if an NVIDIA device is found, else ROCm; ``SKWGRAD_BACKEND=cuda|hip``
forces one. One backend object per (runtime, device), created on first use and shared."""

from __future__ import annotations

import os
import threading

from skwgrad.errors import BackendError
from skwgrad.launcher.backends.base import Backend, KernargBuffer, LoadedFunction

__all__ = ["Backend", "KernargBuffer", "LoadedFunction", "get_backend", "BACKENDS", "reset_backends"]

BACKENDS = ("cuda", "hip")
ALIASES = {"rocm": "hip", "nvidia": "cuda", "amd": "hip"}
_instances: dict[tuple[str, int | None], Backend] = {}
_lock = threading.Lock()


def _create(kind: str, device: int | None) -> Backend:
    if kind == "cuda":
        from skwgrad.launcher.backends.cuda import CudaBackend

        return CudaBackend(device)
    if kind == "hip":
        from skwgrad.launcher.backends.hip import HipBackend

        return HipBackend(device)
    raise BackendError(f"unknown backend {kind!r}; SKWGRAD_BACKEND must be one of {', '.join(BACKENDS)}")


def get_backend(device: int | None = None, kind: str | None = None) -> Backend:
    """The backend for ``device`` (None: the runtime's current device when first asked; the
    object is kept, so pass the ordinal explicitly when switching devices).

    ``kind`` (or ``$SKWGRAD_BACKEND``) forces ``cuda`` or ``hip``; otherwise CUDA is tried, then
    HIP, and a ``BackendError`` lists why each failed when neither finds a device."""
    kind = kind or os.environ.get("SKWGRAD_BACKEND", "").strip().lower() or None
    kind = ALIASES.get(kind, kind)
    if kind is not None and kind not in BACKENDS:
        raise BackendError(f"unknown backend {kind!r} (SKWGRAD_BACKEND); use one of {', '.join(BACKENDS)} (or rocm)")
    kinds = (kind,) if kind else BACKENDS
    with _lock:
        for k in kinds:
            be = _instances.get((k, device))
            if be is not None:
                return be
        reasons = []
        for k in kinds:
            try:
                be = _create(k, device)
            except BackendError as e:
                reasons.append(f"{k}: {e}")
                continue
            _instances[(k, device)] = be
            _instances[(k, be.device)] = be
            return be
    forced = f" (SKWGRAD_BACKEND={kind})" if kind else ""
    raise BackendError(
        f"no GPU runtime with a usable device found{forced}; skwgrad launches kernels through "
        f"CUDA (cuda-bindings) or ROCm (hip-python):\n  " + "\n  ".join(reasons)
    )


def reset_backends() -> None:
    """Forget every backend object (tests; a forked child process)."""
    with _lock:
        _instances.clear()
