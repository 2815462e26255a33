"""Workspace arenas: the device memory stream-K and two-stage launches borrow.

One arena per (device, stream, kind), ``kind`` as in ``skwgrad.abi.workspace``: ``zeroed`` is
zero at rest (zeroed once when allocated; the kernels restore the zeros), ``scratch`` holds
anything. Launches on one stream are ordered, so every plan on that stream can share its arenas.

An arena only grows. Growing allocates (and, for ``zeroed``, memsets on the stream) a larger
buffer and *retires* the old one instead of freeing it: a launch still in flight, or a CUDA/HIP
graph captured earlier, may still point into it. Retired buffers are freed by
``release_arenas``, which the caller invokes only when no such graph is alive.

While a stream is being captured nothing may be allocated on it. Under ``torch.cuda.graph``
``CaptureWorkspace`` takes the launch's buffers from torch's caching allocator (graph-private
memory, the zeroing memset recorded into the graph), so replays share nothing with eager work.
Other captures use the stream's arenas when they already hold enough (a warm-up call on the
stream before capturing); the graph then shares them with later work on that stream, which is
safe as long as its replays are ordered with that work (the usual one-stream case). Otherwise
the launch is refused with ``CaptureError``.
"""

from __future__ import annotations

import threading

from skwgrad.errors import CaptureError

GRANULE = 1 << 20  # arenas grow in whole MiB, at least doubling
KINDS = ("zeroed", "scratch")


def _roundup(n: int, a: int) -> int:
    return -(-n // a) * a


class Arena:
    __slots__ = ("backend", "stream", "kind", "ptr", "nbytes", "retired", "lock")

    def __init__(self, backend, stream: int, kind: str):
        self.backend = backend
        self.stream = stream
        self.kind = kind
        self.ptr = 0
        self.nbytes = 0
        self.retired: list[int] = []
        self.lock = threading.Lock()

    def ensure(self, nbytes: int) -> int:
        """The arena's base pointer, grown to at least ``nbytes`` first (never while capturing)."""
        if nbytes <= self.nbytes:
            return self.ptr
        with self.lock:
            if nbytes <= self.nbytes:
                return self.ptr
            be = self.backend
            if be.stream_is_capturing(self.stream):
                raise CaptureError(
                    f"the {self.kind} workspace arena of stream {self.stream:#x} needs {nbytes} bytes and cannot grow while "
                    f"the stream is being captured; run the same call once on this stream before capturing (torch callers "
                    f"capturing with torch.cuda.graph get graph-private workspace automatically)"
                )
            size = _roundup(max(nbytes, 2 * self.nbytes), GRANULE)
            ptr = be.alloc(size)
            if self.kind == "zeroed":
                be.memset(ptr, 0, size, self.stream)  # ordered before every later use on this stream
            if self.ptr:
                self.retired.append(self.ptr)
            self.ptr, self.nbytes = ptr, size
            return ptr

    def release(self) -> None:
        be = self.backend
        if self.ptr or self.retired:
            be.stream_synchronize(self.stream)
        for p in [*self.retired, self.ptr]:
            if p:
                be.free(p)
        self.ptr, self.nbytes, self.retired = 0, 0, []


def arenas(backend, stream: int) -> tuple[Arena, Arena]:
    """(zeroed, scratch) arenas of ``stream`` on ``backend``'s device."""
    pair = backend.arenas.get(stream)
    if pair is None:
        with backend.arenas_lock:
            pair = backend.arenas.get(stream)
            if pair is None:
                pair = backend.arenas[stream] = (Arena(backend, stream, "zeroed"), Arena(backend, stream, "scratch"))
    return pair


def release_arenas(backend) -> None:
    """Free every arena of ``backend`` (after their streams finish). Graphs captured with arena
    memory must not be replayed afterwards."""
    with backend.arenas_lock:
        for pair in backend.arenas.values():
            for a in pair:
                a.release()
        backend.arenas.clear()


def _torch_capturing(backend, stream: int):
    """torch, when torch is capturing ``stream`` on this backend's device (else None)."""
    import sys

    torch = sys.modules.get("torch")  # never import torch here: only a torch caller captures with it
    if torch is None or backend.name not in ("cuda", "hip"):
        return None
    try:
        if backend.name != ("hip" if getattr(torch.version, "hip", None) else "cuda"):
            return None
        if not torch.cuda.is_current_stream_capturing():
            return None
        if int(torch.cuda.current_stream(backend.device).cuda_stream) != stream:
            return None
    except Exception:  # noqa: BLE001  (a torch without CUDA)
        return None
    return torch


def capture_refused(stream: int, nbytes: int) -> CaptureError:
    return CaptureError(
        f"stream {stream:#x} is being captured and this launch needs {nbytes} bytes of workspace that no arena of this "
        f"stream holds yet; run the same call once on this stream before capturing, or capture with torch.cuda.graph "
        f"(skwgrad then takes graph-private workspace from torch's allocator)"
    )


class CaptureWorkspace:
    """Buffers for one launch recorded into a graph: allocated through torch's caching allocator
    on the capturing stream (so they belong to the graph's private pool), zeroed by a memset
    recorded into the graph. Holds the tensors until the launch is enqueued."""

    __slots__ = ("zeroed", "scratch", "_keep")

    @classmethod
    def from_torch(cls, backend, stream: int, zeroed_bytes: int, scratch_bytes: int):
        """None unless torch is capturing ``stream``."""
        torch = _torch_capturing(backend, stream)
        return None if torch is None else cls(torch, backend, stream, zeroed_bytes, scratch_bytes)

    def __init__(self, torch, backend, stream: int, zeroed_bytes: int, scratch_bytes: int):
        keep = []
        ptrs = []
        for n in (zeroed_bytes, scratch_bytes):
            if n:
                t = torch.empty(n, dtype=torch.uint8, device=f"cuda:{backend.device}")
                keep.append(t)
                ptrs.append(t.data_ptr())
            else:
                ptrs.append(0)
        if zeroed_bytes:
            backend.memset(ptrs[0], 0, zeroed_bytes, stream)
        self.zeroed, self.scratch = ptrs
        self._keep = keep
