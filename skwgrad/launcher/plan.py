"""A launch plan: (problem, cached kernel, pool or ks_count) resolved once, launched many times.

Building a plan validates everything (the kernel admits the problem, the code object's kernarg
layout is the ABI's, the pool is co-resident for the waiting reductions), resolves the grid,
partition and workspace through ``skwgrad.abi.launch.launch_geometry`` (the only place they are
computed), loads the code object(s) and prepacks the kernarg block with
``skwgrad.abi.kernargs.Packer``. ``Plan.launch`` then only

1. takes the stream's workspace from a per-(device, stream) pool that grows and is reused;
2. re-patches the pointers that changed since the last launch (dy, x, dw, ws_ptr, sk_flags,
   sk_partials) and, for linear/tree, the launch's ``sk_epoch``;
3. memsets what the workspace layout says (``zero_ranges``, and dW when ``zero_dw``);
4. launches the main kernel and, when ``needs_stage2``, the Stage-2 reduce, on the caller's stream.

Epoch flags (linear/tree): a pool zeroes a flag region once (when it is first used as flags, or
after something else overwrote it) and then hands out epochs 1, 2, 3, ... one per launch; the
kernels wait for ``flag == epoch``, so a flag left by an earlier launch never matches. Before the
epoch would reach 2**31 the flags are zeroed again and the count restarts at 1. The pool tracks
``flags_clean``, the prefix of its buffer known to hold only zeros or earlier epochs: partials,
replicas or a poison overwrite shrink it, and a launch re-zeroes exactly the part of its flag
table outside it. Pools are per stream, so work on one pool is always stream-ordered.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Callable

from skwgrad.abi.conv import DTYPE_BYTES, ConvProblem
from skwgrad.abi.kernargs import Packer, declaration
from skwgrad.abi.launch import STAGE2_BLOCK, LaunchGeometry, launch_geometry
from skwgrad.abi.streamk import WAITING_REDUCTIONS, resolve_pool
from skwgrad.abi.spec import KernelSpec
from skwgrad.errors import AbiError, CacheError, ProblemError

EPOCH_LIMIT = 2**31 - 1  # epochs are i32 kernargs: wrap (re-zero the flags) before this
POOL_GRANULE = 1 << 20  # workspace buffers grow in whole MiB
_DUMMY_PTR = 0x100  # placeholder in the template; every pointer is patched before the first launch
_MIN_WS = 256  # a kernel whose flag/partial pointers are unused (all-DP) still gets a valid buffer


# ---------------------------------------------------------------------------------------------
# Kernels: a cache entry (or a freshly compiled kernel) plus a way to read its bytes
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Kernel:
    """One code object: its cache key, spec, target, metadata, and a loader for its bytes."""

    key: str
    spec: KernelSpec
    arch: str
    metadata: dict = field(repr=False)
    loader: Callable[[], bytes] = field(repr=False)

    @property
    def label(self) -> str:
        return self.metadata.get("label") or self.spec.label

    @property
    def mode(self) -> str:
        """The stream-K launch mode, or "splitk" for the split-K family."""
        return self.spec.mode or "splitk"

    @classmethod
    def from_entry(cls, entry, cache) -> "Kernel":
        """A cache entry; the bytes are read (sha256-checked) only when first loaded on a device."""
        if entry.spec is None:
            raise CacheError(f"cache entry {entry.key[:12]} has no spec this skwgrad can read; rebuild the cache")
        return cls(entry.key, entry.spec, entry.arch, dict(entry.metadata), lambda: cache.load_binary(entry))

    @classmethod
    def from_compiled(cls, compiled, key: str | None = None) -> "Kernel":
        """A ``CompiledKernel`` from ``skwgrad.aot.compile.compile_spec`` (no cache involved)."""
        binary = bytes(compiled.binary)
        key = key or "sha256:" + hashlib.sha256(binary).hexdigest()
        return cls(key, compiled.spec, compiled.arch, dict(compiled.metadata), lambda: binary)


def check_metadata(kernel: Kernel, binary_kind: str | None = None) -> None:
    """Refuse a code object whose recorded kernarg layout is not the ABI's (a cache written by
    another skwgrad version), or that was built for another kind of device."""
    md, spec = kernel.metadata, kernel.spec
    what = f"{kernel.label} ({kernel.key[:12]})"
    for name in ("name", "threads", "shared", "kernarg"):
        if name not in md:
            raise CacheError(f"{what}: metadata has no {name!r}; rebuild the cache with this skwgrad")
    if binary_kind and md.get("binary_kind") and md["binary_kind"] != binary_kind:
        raise ProblemError(
            f"{what} is a {md['binary_kind']} code object for {kernel.arch}; this device loads {binary_kind}"
        )
    decl = declaration(spec.family, spec.variant)
    ka = md["kernarg"]
    tail = int(ka.get("tail_pointers", 0))
    slots, size = decl.layout(tail)
    if list(ka.get("names", [])) != list(decl.names):
        raise AbiError(f"{what}: its kernargs {ka.get('names')} are not the ABI's {list(decl.names)}; rebuild the cache")
    if list(ka.get("offsets", [])) != [s.offset for s in slots[: len(decl.args)]] or int(ka.get("size", -1)) != size:
        raise AbiError(f"{what}: its kernarg offsets/size differ from the ABI layout; rebuild the cache")
    if spec.family == "wgrad_sk" and spec.variant in WAITING_REDUCTIONS and int(md.get("flags_per_cta", 0)) <= 0:
        raise AbiError(f"{what}: a {spec.variant} kernel must record flags_per_cta > 0 in its metadata")


# ---------------------------------------------------------------------------------------------
# Workspace pools
# ---------------------------------------------------------------------------------------------
class WorkspacePool:
    """One device buffer per (device, stream), grown on demand and reused by every plan."""

    __slots__ = ("backend", "stream", "ptr", "nbytes", "epoch", "flags_clean", "allocations", "released")

    def __init__(self, backend, stream: int):
        self.backend = backend
        self.stream = stream
        self.ptr = 0
        self.nbytes = 0
        self.epoch = 0  # last epoch handed out
        self.flags_clean = 0  # prefix known to hold only 0 or epochs <= self.epoch
        self.allocations = 0
        self.released = False  # dropped by release_pools: plans holding it look the stream up again

    @classmethod
    def of(cls, backend, stream: int) -> "WorkspacePool":
        pool = backend.pools.get(stream)
        if pool is None:
            with backend.pools_lock:
                pool = backend.pools.get(stream)
                if pool is None:
                    pool = backend.pools[stream] = cls(backend, stream)
        return pool

    def acquire(self, nbytes: int) -> int:
        if nbytes <= self.nbytes:
            return self.ptr
        be = self.backend
        if self.ptr:
            be.stream_synchronize(self.stream)  # earlier launches on this stream may still use it
            be.free(self.ptr)
            self.ptr = 0
            self.nbytes = 0
        size = -(-nbytes // POOL_GRANULE) * POOL_GRANULE
        self.ptr = be.alloc(size)
        self.nbytes = size
        self.allocations += 1
        self.flags_clean = 0
        self.epoch = 0
        return self.ptr

    def next_epoch(self, flag_bytes: int) -> int:
        """Make ``[0, flag_bytes)`` a valid flag table for a new launch and return its epoch."""
        if self.epoch + 1 >= EPOCH_LIMIT:
            self.flags_clean = 0
            self.epoch = 0
        if flag_bytes > self.flags_clean:
            self.backend.memset(self.ptr + self.flags_clean, 0, flag_bytes - self.flags_clean, self.stream)
        self.epoch += 1
        # The launch writes partials from flag_bytes on: beyond it nothing is a clean flag.
        self.flags_clean = flag_bytes
        return self.epoch

    def poison(self, byte: int, begin: int = 0, end: int | None = None) -> None:
        end = self.nbytes if end is None else min(end, self.nbytes)
        if self.ptr and end > begin:
            self.backend.memset(self.ptr + begin, byte, end - begin, self.stream)
            if begin < self.flags_clean:
                self.flags_clean = begin

    def release(self) -> None:
        if self.ptr:
            self.backend.stream_synchronize(self.stream)
            self.backend.free(self.ptr)
        self.ptr = 0
        self.nbytes = 0
        self.flags_clean = 0
        self.epoch = 0


def release_pools(backend) -> None:
    """Free every workspace buffer of ``backend`` (they are otherwise kept for reuse)."""
    with backend.pools_lock:
        for pool in backend.pools.values():
            pool.release()
            pool.released = True
        backend.pools.clear()


# ---------------------------------------------------------------------------------------------
# Plans
# ---------------------------------------------------------------------------------------------
def _stream_int(stream) -> int:
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise ProblemError(f"stream {stream!r}: pass an int handle, a torch/CuPy stream or None") from None


class Plan:
    """A resolved launch. Build it with ``build_plan`` (or ``skwgrad.plan``); call ``launch``
    with device pointers, or call the plan with arrays (``plan(x, dy, out=None)``).

    A plan keeps one kernarg block that each launch re-patches: launch one plan from one host
    thread at a time (build one plan per thread otherwise)."""

    def __init__(
        self,
        problem: ConvProblem,
        kernel: Kernel,
        backend,
        *,
        pool: int = 0,
        ks_count: int = 1,
        stage2: Kernel | None = None,
        check_coresidency: bool = True,
    ):
        spec = kernel.spec
        if spec.family not in ("wgrad", "wgrad_sk"):
            raise ProblemError(f"{kernel.label} is a {spec.family} kernel, not a wgrad kernel")
        if kernel.arch != backend.arch:
            raise ProblemError(
                f"{kernel.label} was built for {kernel.arch}; this device ({backend.device_name}) is "
                f"{backend.arch}: use a kernel compiled for {backend.arch}"
            )
        check_metadata(kernel, backend.binary_kind)
        spec.check_problem(problem)
        md = kernel.metadata
        flags_per_cta = int(md.get("flags_per_cta") or 0) or None
        geo = launch_geometry(
            problem, spec.family, spec.variant, bm=spec.bm, bn=spec.bn, bk=spec.bk, mode=spec.mode,
            pool=pool if spec.family == "wgrad_sk" else 0, ks_count=ks_count, flags_per_cta=flags_per_cta,
        )  # fmt: skip
        self.problem = problem
        self.kernel = kernel
        self.backend = backend
        self.geometry: LaunchGeometry = geo
        self.pool = pool if spec.family == "wgrad_sk" else 0
        self.ks_count = geo.ks_count
        self.grid = geo.grid
        self.threads = int(md["threads"])
        self.shared = int(md["shared"])
        layout = geo.workspace

        # -- code objects ------------------------------------------------------------------
        self._fn = backend.load(kernel.key, kernel.loader, md["name"], self.threads, self.shared)
        decl = declaration(spec.family, spec.variant)
        tail = int(md["kernarg"].get("tail_pointers", 0))
        backend.check_params(self._fn, [(s.offset, s.arg.size) for s in decl.layout(tail)[0]])
        part = geo.partition
        if (
            check_coresidency
            and spec.family == "wgrad_sk"
            and spec.variant in WAITING_REDUCTIONS
            and part is not None
            and part.sk_ctas > 0
        ):
            per_cu = backend.max_active_per_cu(self._fn)
            limit = per_cu * backend.compute_units
            if part.sk_ctas > limit:
                raise ProblemError(
                    f"{kernel.label}: a {spec.variant} pool of {part.sk_ctas} stream-K CTAs cannot be co-resident on "
                    f"{backend.device_name} ({per_cu} CTA(s) of this kernel per CU x {backend.compute_units} CUs = "
                    f"{limit}); its CTAs wait on each other and could deadlock. Use streamk_ctas <= {limit} "
                    f"(-1 picks one CTA per CU) or the atomic/workspace reduction"
                )
        self.stage2 = None
        self._fn2 = None
        if layout.needs_stage2:
            if stage2 is None:
                raise CacheError(
                    f"{kernel.label} needs the Stage-2 reduce for {problem.dw_dtype} dW and none was given; "
                    f"build it with `skwgrad compile-all --arch {backend.arch} --dtype {problem.dtype}` "
                    f"(every preset adds the Stage-2 reduce of the kernels it builds)"
                )
            s2 = stage2.spec
            if s2.family != "stage2":
                raise ProblemError(f"{stage2.label} is not a Stage-2 kernel")
            if stage2.arch != backend.arch:
                raise ProblemError(f"Stage-2 kernel {stage2.label} was built for {stage2.arch}, the device is {backend.arch}")
            if s2.block != STAGE2_BLOCK:
                raise ProblemError(f"Stage-2 kernel {stage2.label} has block {s2.block}; the launch geometry uses {STAGE2_BLOCK}")
            check_metadata(stage2, backend.binary_kind)
            s2.check_problem(problem)
            self.stage2 = stage2
            md2 = stage2.metadata
            self._threads2 = int(md2["threads"])
            self._shared2 = int(md2["shared"])
            self._fn2 = backend.load(stage2.key, stage2.loader, md2["name"], self._threads2, self._shared2)
            t2 = int(md2["kernarg"].get("tail_pointers", 0))
            backend.check_params(self._fn2, [(s.offset, s.arg.size) for s in declaration("stage2", "reduce").layout(t2)[0]])
            self._grid2 = geo.stage2_grid

        # -- kernarg templates -------------------------------------------------------------
        self._packer = Packer(decl, tail)
        names = set(decl.value_names())
        values = dict(geo.scalars)
        self._ptr_names = [n for n in ("dy", "x", "dw", "ws_ptr", "sk_flags", "sk_partials") if n in names]
        for n in self._ptr_names:
            values[n] = _DUMMY_PTR
        self._epoch_flags = "sk_epoch" in names
        if self._epoch_flags:
            values["sk_epoch"] = 1
        self._buf = backend.kernarg_buffer(self._packer.pack(values))
        if self._fn2 is not None:
            decl2 = declaration("stage2", "reduce")
            self._packer2 = Packer(decl2, int(stage2.metadata["kernarg"].get("tail_pointers", 0)))
            self._buf2 = backend.kernarg_buffer(
                self._packer2.pack({"ws_ptr": _DUMMY_PTR, "dw": _DUMMY_PTR, **geo.stage2_scalars})
            )

        # -- workspace ---------------------------------------------------------------------
        self.layout = layout
        uses_ws = any(n in names for n in ("ws_ptr", "sk_flags", "sk_partials"))
        self._ws_bytes = max(layout.total_bytes, _MIN_WS) if uses_ws else 0
        self._flag_bytes = layout.region("flags").nbytes if layout.epoch_flags else 0
        if layout.epoch_flags and layout.region("flags").offset != 0:
            raise AbiError(f"{kernel.label}: the workspace pool keeps flag tables at offset 0; the layout puts them elsewhere")
        self._data_begin = self._flag_bytes  # first workspace byte that is not a flag
        self._ws_offsets = {}
        if "ws_ptr" in names:
            self._ws_offsets["ws_ptr"] = layout.region("replicas").offset
        if "sk_flags" in names:
            self._ws_offsets["sk_flags"] = layout.region("flags").offset
            self._ws_offsets["sk_partials"] = layout.region("partials").offset
        self._zero_ranges = tuple(layout.zero_ranges)
        self._zero_dw = layout.zero_dw
        self._dw_nbytes = problem.dw_numel * DTYPE_BYTES[problem.dw_dtype]
        self._last = None  # (dy, x, dw, ws) of the last patch
        self._last2 = None
        self._pool_obj = None
        self.launches = 0

    # -- descriptions --------------------------------------------------------------------------
    @property
    def spec(self) -> KernelSpec:
        return self.kernel.spec

    @property
    def label(self) -> str:
        return self.kernel.label

    @property
    def mode(self) -> str:
        return self.kernel.mode

    @property
    def reduction(self) -> str:
        return self.spec.variant

    @property
    def workspace_bytes(self) -> int:
        return self._ws_bytes

    def kernargs(self) -> bytes:
        """The main kernel's current kernarg block (for inspection and tests)."""
        return bytes(self._buf.data)

    def stage2_kernargs(self) -> bytes | None:
        return bytes(self._buf2.data) if self._fn2 is not None else None

    def describe(self) -> dict:
        geo, part = self.geometry, self.geometry.partition
        d = {
            "problem": self.problem.describe(),
            "kernel": self.label,
            "key": self.kernel.key,
            "arch": self.kernel.arch,
            "family": self.spec.family,
            "mode": self.mode,
            "reduction": self.reduction,
            "tile": f"{self.spec.bm}x{self.spec.bn}x{self.spec.bk}",
            "grid": self.grid,
            "threads": self.threads,
            "shared": self.shared,
            "num_tiles": geo.tiling.num_tiles,
            "iters_per_tile": geo.tiling.iters_per_tile,
            "workspace_bytes": self._ws_bytes,
            "stage2": self.stage2.label if self.stage2 else None,
        }
        if part is not None:
            d.update(pool=self.pool, sk_ctas=part.sk_ctas, dp_tiles=part.dp_tiles, sk_tiles=part.sk_tiles)
        else:
            d.update(ks_count=self.ks_count, ks_iters=geo.ks_iters)
        return d

    def __repr__(self):
        extra = f"pool={self.pool}" if self.spec.family == "wgrad_sk" else f"ks_count={self.ks_count}"
        return f"<Plan {self.label} {extra} grid={self.grid} for {self.problem.describe()}>"

    # -- launching -----------------------------------------------------------------------------
    def _pool(self, stream: int) -> WorkspacePool:
        p = self._pool_obj
        if p is None or p.stream != stream or p.released:
            p = self._pool_obj = WorkspacePool.of(self.backend, stream)
        return p

    def _patch(self, dy: int, x: int, dw: int, ws: int) -> None:
        pk, data = self._packer, self._buf.data
        vals = {"dy": dy, "x": x, "dw": dw}
        for name, off in self._ws_offsets.items():
            vals[name] = ws + off
        for name in self._ptr_names:
            pk.pack_into(data, name, vals[name])
        self._last = (dy, x, dw, ws)

    def launch(self, dy: int, x: int, dw: int, stream: int = 0) -> None:
        """Launch on device pointers (``int``) of packed dy, x and dW, on ``stream`` (an ``int``)."""
        be = self.backend
        be.activate()
        ws = 0
        pool = None
        if self._ws_bytes:
            pool = self._pool_obj
            if pool is None or pool.stream != stream or pool.released:
                pool = self._pool(stream)
            ws = pool.ptr if pool.nbytes >= self._ws_bytes else pool.acquire(self._ws_bytes)
        last = self._last
        if last is None or last[0] != dy or last[1] != x or last[2] != dw or last[3] != ws:
            self._patch(dy, x, dw, ws)
        if self._epoch_flags:
            self._packer.pack_into(self._buf.data, "sk_epoch", pool.next_epoch(self._flag_bytes))
        elif pool is not None:
            pool.flags_clean = 0  # replicas/partials written from offset 0
        for off, n in self._zero_ranges:
            be.memset(ws + off, 0, n, stream)
        if self._zero_dw:
            be.memset(dw, 0, self._dw_nbytes, stream)
        be.launch(self._fn, self.grid, self.threads, self.shared, self._buf, stream)
        if self._fn2 is not None:
            l2 = self._last2
            if l2 is None or l2[0] != ws or l2[1] != dw:
                self._packer2.pack_into(self._buf2.data, "ws_ptr", ws + self._ws_offsets["ws_ptr"])
                self._packer2.pack_into(self._buf2.data, "dw", dw)
                self._last2 = (ws, dw)
            be.launch(self._fn2, self._grid2, self._threads2, self._shared2, self._buf2, stream)
        self.launches += 1

    def poison(self, *, dw: int | None = None, byte: int = 0xFF, stream: int = 0, flags: bool = False) -> None:
        """Fill dW (if given) and this plan's workspace with ``byte`` (0xFF: NaN in every float
        dtype) on ``stream``. The flag table is left alone unless ``flags``; the epoch protocol
        must not depend on what partials or replicas hold."""
        stream = _stream_int(stream)
        be = self.backend
        be.activate()
        if dw is not None:
            be.memset(dw, byte, self._dw_nbytes, stream)
        if self._ws_bytes:
            pool = self._pool(stream)
            pool.acquire(self._ws_bytes)
            pool.poison(byte, 0 if flags else self._data_begin, self._ws_bytes)

    def __call__(self, x, dy, out=None, *, stream=None, layout: str = "auto"):
        """Run on arrays (torch, CuPy, DLPack / CUDA-array-interface objects or numpy); see
        ``skwgrad.wgrad`` for the layout rules. Returns ``out`` (allocated when None)."""
        from skwgrad.launcher import arrays

        return arrays.run_plan(self, x, dy, out=out, stream=stream, layout=layout)

    # -- timing --------------------------------------------------------------------------------
    def time(self, dy: int, x: int, dw: int, *, stream: int = 0, warmup: int = 5, iters: int = 50, hold=None) -> dict:
        """Device time of one launch (median and min over ``iters`` event-timed launches after
        ``warmup``) and the host time per launch of the same calls.

        ``hold(stream)``, when given, enqueues a long wait on the stream first, so every
        (event, launch, event) triple is queued before the device reaches it and the events
        bracket device work only, not the host's launch overhead."""
        be = self.backend
        for _ in range(warmup):
            self.launch(dy, x, dw, stream)
        be.stream_synchronize(stream)
        events = [(be.event_create(), be.event_create()) for _ in range(iters)]
        host = 0.0
        if hold is not None:
            hold(stream)
        try:
            for a, b in events:
                be.event_record(a, stream)
                t0 = time.perf_counter()
                self.launch(dy, x, dw, stream)
                host += time.perf_counter() - t0
                be.event_record(b, stream)
            be.event_synchronize(events[-1][1])
            times = sorted(be.event_elapsed_ms(a, b) * 1e3 for a, b in events)
        finally:
            for a, b in events:
                be.event_destroy(a)
                be.event_destroy(b)
        return {"median_us": times[len(times) // 2], "min_us": times[0], "host_us": host / iters * 1e6, "iters": iters}


def build_plan(
    problem: ConvProblem,
    kernel: Kernel,
    backend,
    *,
    streamk_ctas: int = -1,
    pool: int | None = None,
    ks_count: int = 1,
    stage2: Kernel | None = None,
) -> Plan:
    """A plan with the stream-K pool resolved from ``streamk_ctas`` (-1: the reduction's default
    for this device's CU count) unless ``pool`` is given."""
    spec = kernel.spec
    if spec.family == "wgrad_sk":
        if pool is None:
            pool = resolve_pool(streamk_ctas, backend.compute_units, spec.variant)
        ks_count = 1
    else:
        pool = 0
    return Plan(problem, kernel, backend, pool=pool, ks_count=ks_count, stage2=stage2)
