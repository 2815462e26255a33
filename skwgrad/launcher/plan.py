"""A launch plan: (problem, cached kernel, pool or ks_count) resolved once, launched many times.

Building a plan validates everything (the kernel admits the problem, the code object's kernarg
layout is the ABI's, the pool is co-resident for the waiting reductions), resolves the grid,
partition and workspace through ``skwgrad.abi.launch.launch_geometry`` (the only place they are
computed), loads the code object(s) and prepacks the kernarg block with
``skwgrad.abi.kernargs.Packer``. ``Plan.launch`` then only

1. takes its workspace from the stream's arenas (``skwgrad.launcher.workspace``), or, while the
   stream is being captured into a graph, from graph-private memory;
2. re-patches the pointers that changed since the last launch (dy, x, dw, ws_ptr, sk_flags,
   sk_partials);
3. zeroes dW for the atomic reductions (the only per-launch memset);
4. launches the main kernel and, when the layout has replicas, the Stage-2 reduce, on the
   caller's stream. On an arch with ``dependent_launch`` the main kernel after the memset and
   the Stage-2 reduce after the main kernel are dependent launches: each starts while the work
   before it finishes and waits for it where it needs it (before writing dW; before anything).

Nothing else happens per launch: flags and the workspace replica (split-K or stream-K) are zero
at rest (the kernels restore the zeros), so a launch is the same bytes every time and a graph
replays it unchanged. A plan may be launched from several threads: a lock (uncontended: a fraction of a
microsecond) covers the patch-and-launch of its one kernarg block; the runtime copies the block
at launch.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from skwgrad.abi.arch import get_arch
from skwgrad.abi.conv import DTYPE_BYTES, ConvProblem
from skwgrad.abi.kernargs import Packer
from skwgrad.abi.launch import STAGE2_BLOCK, LaunchGeometry, spec_geometry, takes_pool
from skwgrad.abi.streamk import WAITING_REDUCTIONS, resolve_pool
from skwgrad.abi.spec import KernelSpec
from skwgrad.errors import AbiError, CacheError, DamagedEntryError, ProblemError
from skwgrad.launcher.interop import stream_int
from skwgrad.launcher.workspace import CaptureWorkspace, arenas, capture_refused

MAIN_FAMILIES = ("wgrad", "wgrad_sk", "dwconv", "grouped", "wgrad_tma", "dwconv_tma", "dwconv_walk")  # what computes dW (stage2 only reduces)
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

        def load() -> bytes:
            try:
                return cache.load_binary(entry)
            except DamagedEntryError as e:
                e.key = entry.key  # selection skips this entry and chooses again
                raise

        return cls(entry.key, entry.spec, entry.arch, dict(entry.metadata), load)

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
    decl = spec.kernarg_decl
    ka = md["kernarg"]
    tail = int(ka.get("tail_pointers", 0))
    slots, size = decl.layout(tail)
    if list(ka.get("names", [])) != list(decl.names):
        raise AbiError(f"{what}: its kernargs {ka.get('names')} are not the ABI's {list(decl.names)}; rebuild the cache")
    if list(ka.get("offsets", [])) != [s.offset for s in slots[: len(decl.args)]] or int(ka.get("size", -1)) != size:
        raise AbiError(f"{what}: its kernarg offsets/size differ from the ABI layout; rebuild the cache")
    threads = md["threads"]
    waves = {w for w in (32, 64) if spec.threads_per_cta(w) == threads}
    if not isinstance(threads, int) or not waves:
        raise AbiError(
            f"{what}: metadata says {threads!r} threads; this kernel has {spec.threads_per_cta(32)} (wave 32) or "
            f"{spec.threads_per_cta(64)} (wave 64): the entry does not describe its code object; rebuild the cache"
        )
    want = spec.flags_per_cta(waves.pop())
    if int(md.get("flags_per_cta") or 0) != want:
        raise AbiError(
            f"{what}: metadata records flags_per_cta={md.get('flags_per_cta')!r}, the kernel publishes {want}; rebuild the cache"
        )


@dataclass(eq=False)
class HelperLaunch:
    """A loaded helper kernel (Stage-2 reduce, pad copy) of a plan: its function, block size,
    shared memory, packer and kernarg block; ``last`` holds the pointers last patched into it."""

    fn: object
    threads: int
    shared: int
    packer: Packer
    buf: object
    last: tuple | None = None


def load_helper(kernel: Kernel, backend, values: dict) -> HelperLaunch:
    """Check a helper kernel's metadata against the ABI and this device, load it, and prepack its
    kernargs with ``values`` (pointers as placeholders, patched per launch)."""
    check_metadata(kernel, backend.binary_kind)
    md = kernel.metadata
    threads, shared = int(md["threads"]), int(md["shared"])
    fn = backend.load(kernel.key, kernel.loader, md["name"], threads, shared)
    decl = kernel.spec.kernarg_decl
    tail = int(md["kernarg"].get("tail_pointers", 0))
    backend.check_params(fn, [(s.offset, s.arg.size) for s in decl.layout(tail)[0]])
    packer = Packer(decl, tail)
    return HelperLaunch(fn, threads, shared, packer, backend.kernarg_buffer(packer.pack(values)))


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
        if spec.family not in MAIN_FAMILIES:
            raise ProblemError(f"{kernel.label} is a {spec.family} kernel, not a wgrad kernel")
        if kernel.arch != backend.arch:
            raise ProblemError(
                f"{kernel.label} was built for {kernel.arch}; this device ({backend.device_name}) is "
                f"{backend.arch}: use a kernel compiled for {backend.arch}"
            )
        check_metadata(kernel, backend.binary_kind)
        spec.check_problem(problem)
        md = kernel.metadata
        pooled = takes_pool(spec)
        geo = spec_geometry(problem, spec, threads=int(md["threads"]), pool=pool if pooled else 0, ks_count=ks_count)
        self.problem = problem
        self.kernel_problem = problem  # what the kernel runs (a PaddedPlan's padded problem)
        self.kernel = kernel
        self.backend = backend
        self.geometry: LaunchGeometry = geo
        self.pool = pool if pooled else 0
        self.ks_count = geo.ks_count
        self.grid = geo.grid
        self.threads = int(md["threads"])
        self.shared = int(md["shared"])
        layout = geo.workspace

        # -- code objects ------------------------------------------------------------------
        self._fn = backend.load(kernel.key, kernel.loader, md["name"], self.threads, self.shared)
        decl = spec.kernarg_decl
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
            s2.check_problem(problem)
            self.stage2 = stage2
            h2 = load_helper(stage2, backend, {"ws_ptr": _DUMMY_PTR, "dw": _DUMMY_PTR, **geo.stage2_scalars})
            self._fn2, self._threads2, self._shared2 = h2.fn, h2.threads, h2.shared
            self._packer2, self._buf2 = h2.packer, h2.buf
            self._grid2 = geo.stage2_grid

        # -- kernarg templates -------------------------------------------------------------
        self._packer = Packer(decl, tail)
        names = set(decl.value_names())
        values = dict(geo.scalars)
        self._ptr_names = [n for n in ("dy", "x", "dw", "ws_ptr", "sk_flags", "sk_partials") if n in names]
        for n in self._ptr_names:
            values[n] = _DUMMY_PTR
        # wgrad_tma: dy and x reach the kernel as tensor maps, encoded once here (a shape the
        # driver refuses fails now, not at the first launch) and re-pointed when a pointer changes
        descs = md.get("tensor_maps") or []
        if len(descs) != len(geo.tensor_maps):
            raise CacheError(f"{kernel.label}: metadata describes {len(descs)} tensor maps, the launch needs {len(geo.tensor_maps)}; rebuild the cache")
        self._tmaps = []  # (kernarg name, operand, the backend's map)
        for req, desc in zip(geo.tensor_maps, descs):
            tm = backend.encode_tensor_map(req, desc, _DUMMY_PTR)
            values[f"{req.operand}_map"] = backend.tensor_map_at(tm, _DUMMY_PTR)
            self._tmaps.append((f"{req.operand}_map", req.operand, tm))
        self._buf = backend.kernarg_buffer(self._packer.pack(values))

        # -- workspace: (arena, offset) of each buffer kernarg -------------------------------
        self.layout = layout
        region_of = {"ws_ptr": "replicas", "sk_flags": "flags", "sk_partials": "partials"}
        self._ws_args = []  # (kernarg, index of the arena: 0 zeroed / 1 scratch, offset)
        for arg, region in region_of.items():
            if arg in names:
                r = layout.region(region)
                if not r.nbytes:  # an all-DP launch: the kernel never touches it, but the slot needs a buffer
                    self._ws_args.append((arg, 1, 0))
                    continue
                self._ws_args.append((arg, 0 if r.arena == "zeroed" else 1, r.offset))
        self._zeroed_bytes = layout.arena_bytes("zeroed")
        self._scratch_bytes = max(layout.arena_bytes("scratch"), _MIN_WS if self._ws_args else 0)
        self._needs_ws = bool(self._ws_args)
        self._replicas_arg = next(((a, off) for a, i, off in self._ws_args if a == "ws_ptr"), None)
        self._zero_dw = layout.zero_dw
        # the kernel starts while dW's memset runs and waits for it before writing dW (it was
        # compiled to: abi.spec.dw_zeroed_before_launch); elsewhere a plain launch after the memset
        self._dependent = layout.zero_dw and get_arch(self.kernel.arch).dependent_launch
        # Stage-2 starts while the main kernel finishes and waits for it first (aot.kernels.stage2)
        self._dependent2 = get_arch(self.kernel.arch).dependent_launch
        self._dw_nbytes = problem.dw_numel * DTYPE_BYTES[problem.dw_dtype]
        self._last = None  # (dy, x, dw, zeroed, scratch) of the last patch
        self._last2 = None
        self._lock = threading.Lock()
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
    def dw_nbytes(self) -> int:
        return self._dw_nbytes

    @property
    def workspace_bytes(self) -> int:
        """Bytes of the stream's arenas this plan uses (zeroed + scratch)."""
        return self._zeroed_bytes + self._scratch_bytes if self._needs_ws else 0

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
            "workspace_bytes": self.workspace_bytes,
            "stage2": self.stage2.label if self.stage2 else None,
        }
        if part is not None:
            d.update(pool=self.pool, sk_ctas=part.sk_ctas, dp_tiles=part.dp_tiles, sk_tiles=part.sk_tiles)
        else:
            d.update(ks_count=self.ks_count, ks_iters=geo.ks_iters, **({"pool": self.pool} if self.pool else {}))
        return d

    def __repr__(self):
        extra = f"pool={self.pool}" if self.spec.family == "wgrad_sk" else f"ks_count={self.ks_count}"
        return f"<Plan {self.label} {extra} grid={self.grid} for {self.problem.describe()}>"

    # -- launching -----------------------------------------------------------------------------
    def _workspace(self, stream: int):
        """(zeroed, scratch, keep-alive) base pointers for a launch on ``stream``.

        Warm arenas are used as they are, capturing or not (no driver call). Only when an arena
        must grow is the stream asked whether it is being captured: under torch.cuda.graph the
        launch then takes graph-private workspace from torch's allocator; under another capture
        it is refused (CaptureError), never an allocation inside the capture."""
        be = self.backend
        az, asc = be.arenas.get(stream) or arenas(be, stream)
        zb, sb = self._zeroed_bytes, self._scratch_bytes
        if az.nbytes >= zb and asc.nbytes >= sb:
            return az.ptr if zb else 0, asc.ptr, None
        if be.stream_is_capturing(stream):
            ws = CaptureWorkspace.from_torch(be, stream, zb, sb)
            if ws is None:
                raise capture_refused(stream, zb + sb)
            return ws.zeroed, ws.scratch, ws
        return (az.ensure(zb) if zb else 0), asc.ensure(sb), None

    def _patch(self, dy: int, x: int, dw: int, z: int, s: int) -> None:
        pk, data = self._packer, self._buf.data
        vals = {"dy": dy, "x": x, "dw": dw}
        for name, arena, off in self._ws_args:
            vals[name] = (z if arena == 0 else s) + off
        for name in self._ptr_names:
            pk.pack_into(data, name, vals[name])
        last = self._last
        for name, operand, tm in self._tmaps:
            if last is None or vals[operand] != last[0 if operand == "dy" else 1]:
                pk.pack_into(data, name, self.backend.tensor_map_at(tm, vals[operand]))
        self._last = (dy, x, dw, z, s)

    def launch(self, dy: int, x: int, dw: int, stream: int = 0) -> None:
        """Launch on device pointers (``int``) of packed dy, x and dW, on ``stream`` (an ``int``).
        Safe to call from several threads and while ``stream`` is being captured."""
        with self._lock:
            self.backend.activate()
            z = s = 0
            keep = None
            if self._needs_ws:
                z, s, keep = self._workspace(stream)
            self._enqueue(dy, x, dw, z, s, stream)
            self.launches += 1
            del keep  # graph-private workspace: its memory now belongs to the captured work

    def _enqueue(self, dy: int, x: int, dw: int, z: int, s: int, stream: int) -> None:
        """The launch's work on ``stream``, with the zeroed / scratch arena bases ``z`` / ``s``."""
        be = self.backend
        last = self._last
        if last is None or last[0] != dy or last[1] != x or last[2] != dw or last[3] != z or last[4] != s:
            self._patch(dy, x, dw, z, s)
        if self._zero_dw:
            be.memset(dw, 0, self._dw_nbytes, stream)
        if self._dependent:
            be.launch_dependent(self._fn, self.grid, self.threads, self.shared, self._buf, stream)
        else:
            be.launch(self._fn, self.grid, self.threads, self.shared, self._buf, stream)
        if self._fn2 is not None:
            arg, off = self._replicas_arg
            rep = (z if self.layout.region("replicas").arena == "zeroed" else s) + off
            l2 = self._last2
            if l2 is None or l2[0] != rep or l2[1] != dw:
                self._packer2.pack_into(self._buf2.data, "ws_ptr", rep)
                self._packer2.pack_into(self._buf2.data, "dw", dw)
                self._last2 = (rep, dw)
            if self._dependent2:
                be.launch_dependent(self._fn2, self._grid2, self._threads2, self._shared2, self._buf2, stream)
            else:
                be.launch(self._fn2, self._grid2, self._threads2, self._shared2, self._buf2, stream)

    def poison(self, *, dw: int | None = None, byte: int = 0xFF, stream: int = 0) -> None:
        """Fill dW (if given) and this plan's scratch workspace with ``byte`` (0xFF: NaN in every
        float dtype) on ``stream``. The zeroed arena is left alone: it is zero at rest by contract,
        and ``check_zeroed`` reads it back."""
        stream = stream_int(stream)
        be = self.backend
        be.activate()
        if dw is not None:
            be.memset(dw, byte, self.dw_nbytes, stream)
        if self._needs_ws:
            _, s, _ = self._workspace(stream)
            if self._scratch_bytes:
                be.memset(s, byte, self._scratch_bytes, stream)

    def zeroed_bytes_nonzero(self, stream: int = 0) -> int:
        """How many bytes of this plan's part of the zeroed arena are not zero (after the stream's
        work): 0 when the kernels kept the zero-at-rest contract."""
        import numpy as np

        if not (self._needs_ws and self._zeroed_bytes):
            return 0
        z, _, _ = self._workspace(stream)
        self.backend.stream_synchronize(stream)
        raw = np.empty(self._zeroed_bytes, dtype=np.uint8)
        self.backend.memcpy_dtoh(raw, z, self._zeroed_bytes)
        return int(np.count_nonzero(raw))

    def __call__(self, x, dy, out=None, *, stream=None, layout: str = "auto"):
        """Run on arrays (torch, CuPy, DLPack / CUDA-array-interface objects or numpy); see
        ``skwgrad.wgrad`` for the layout rules. Returns ``out`` (allocated when None)."""
        from skwgrad.launcher.api import run_plan

        return run_plan(self, x, dy, out=out, stream=stream, layout=layout)

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


class PaddedPlan(Plan):
    """A plan that runs the vector kernels on a problem whose channel counts they cannot load,
    through channel padding (``skwgrad.abi.padding``): each launch copies x and/or dy into
    channel-padded staging buffers (the ``pad`` kernel writes the zeros too; x and dy in one
    launch), runs the main kernel (and Stage-2) on the padded problem into a padded dW, and copies
    dW back out (a second pad launch). The staging
    buffers lie in the scratch arena after the main kernel's own scratch, so warm arenas, graph
    capture and graph-private workspace work as for any plan.

    ``problem`` is the caller's (what arrays are read and checked against);
    ``padding.padded`` is what the kernel runs (``kernel_problem``)."""

    def __init__(self, problem: ConvProblem, kernel: Kernel, backend, *, padding, pad_kernels: dict, **kw):
        if padding.problem != problem:
            raise ProblemError(f"the padding describes {padding.problem.describe()}, not {problem.describe()}")
        super().__init__(padding.padded, kernel, backend, **kw)
        self.kernel_problem = padding.padded
        self.problem = problem
        self.padding = padding
        self.pad_kernels = dict(pad_kernels)
        self._pads = []  # (PadLaunch, its loaded pad kernel, grid), in launch order: the inputs' (if any), dW's
        for pl in padding.launches:
            k = self.pad_kernels.get(pl.dtype)
            if k is None:
                raise CacheError(
                    f"channel padding of {problem.describe()} needs the {pl.dtype} pad kernel and none was given; "
                    f"build it with `skwgrad compile-all --arch {backend.arch} --dtype {problem.dtype}`"
                )
            if k.spec.family != "pad" or k.spec.dtype != pl.dtype:
                raise ProblemError(f"{k.label} is not the {pl.dtype} pad kernel")
            if k.arch != backend.arch:
                raise ProblemError(f"pad kernel {k.label} was built for {k.arch}, the device is {backend.arch}")
            dummy = pl.pointers({op: (_DUMMY_PTR, _DUMMY_PTR) for op in pl.operands})
            self._pads.append((pl, load_helper(k, backend, {**dummy, **pl.scalars()}), pl.grid))
        self._pad_inputs = self._pads[0][0].operands if len(self._pads) == 2 else ()
        kernel_scratch = self._scratch_bytes if self._needs_ws else 0
        self._stage_off = padding.staging_offset(kernel_scratch)
        self._scratch_bytes = padding.scratch_bytes(kernel_scratch)
        self._needs_ws = True
        self._user_dw_nbytes = problem.dw_numel * DTYPE_BYTES[problem.dw_dtype]

    @property
    def dw_nbytes(self) -> int:
        return self._user_dw_nbytes

    def _pad(self, i: int, pairs: tuple, stream: int) -> None:
        """Launch pad launch ``i`` on ``pairs``: (src, dst) per copy, in its copies' order."""
        pl, h, grid = self._pads[i]
        if h.last != pairs:
            for name, value in pl.pointers(dict(zip(pl.operands, pairs))).items():
                h.packer.pack_into(h.buf.data, name, value)
            h.last = pairs
        self.backend.launch(h.fn, grid, h.threads, h.shared, h.buf, stream)

    def _enqueue(self, dy: int, x: int, dw: int, z: int, s: int, stream: int) -> None:
        st = s + self._stage_off
        staged = {op: st + off for op, off in self.padding.offsets.items()}
        if self._pad_inputs:  # x and/or dy into staging: one launch
            user = {"x": x, "dy": dy}
            self._pad(0, tuple((user[op], staged[op]) for op in self._pad_inputs), stream)
        super()._enqueue(staged.get("dy", dy), staged.get("x", x), staged["dw"], z, s, stream)
        self._pad(len(self._pads) - 1, ((staged["dw"], dw),), stream)  # then dW out: its own launch

    def describe(self) -> dict:
        d = super().describe()
        d["problem"] = self.problem.describe()
        d["padded_problem"] = self.kernel_problem.describe()
        d["padding"] = self.padding.describe()
        d["pad_kernels"] = sorted({k.label for k in self.pad_kernels.values()})
        d["pad_launches"] = [{"operands": list(pl.operands), "grid": grid, "split": pl.split} for pl, _, grid in self._pads]
        return d

    def __repr__(self):
        return super().__repr__()[:-1] + f" padded {self.padding.describe()}>"


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
    elif spec.family == "wgrad_tma" and spec.mode:  # persistent, streamk
        if pool is None:  # one CTA per SM: the TMA kernels' shared memory fits no more than one or two
            pool = backend.compute_units if streamk_ctas == -1 else streamk_ctas
    else:
        pool = 0
    return Plan(problem, kernel, backend, pool=pool, ks_count=ks_count, stage2=stage2)
