"""Compile a sweep into the cache, in parallel: the engine of ``skwgrad compile-all``.

Workers (a local process pool, or a Dask distributed cluster with ``scheduler=ADDRESS``) run
``compile_job``: compile one spec for one arch and return its key, code-object bytes and metadata,
or a failure message. They never touch the cache. One coordinator (this process) writes every
result, so the cache sees a single writer per build; several builds at once are still safe (see
``skwgrad.cache.store``).

Resumable: keys already in the cache with an intact object are skipped before anything is
submitted, so re-running after a kill builds only what is missing; an entry whose object fails
its sha256 check is rebuilt. Kernels that failed to compile under this compiler and kernel
sources are recorded with the compiler's message and skipped next time (``retry_failed``
retries them). When a local worker dies mid-compile (an LLVM crash, the OOM killer) the pool is
replaced and the jobs that were in flight are rerun one at a time: the one that kills its worker
alone is recorded as a ``crash`` (retried by the next run), the others are built. A job a Dask
cluster loses is retried once.

Worker isolation: each worker process compiles with its own empty ``TRITON_CACHE_DIR`` (removed
when it exits) and with every ``TRITON_*``/``AMDGCN_*``/``MLIR_*``/``LLVM_*`` environment variable
removed, so neither a stale Triton cache nor a debugging knob (``TRITON_KERNEL_OVERRIDE``, fp
fusion, ...) left in someone's shell can change the bytes stored under a key; the key names only
the spec, the target, the Triton version and the kernel sources. (An executor that runs jobs
inside the coordinator's own process, a thread pool or a Dask cluster with ``processes=False``,
shares that process's environment instead; the command line never does that.)
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import pickle
import shutil
import socket
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field

from skwgrad.abi.arch import ARCHES
from skwgrad.abi.spec import KernelSpec
from skwgrad.aot.sweep import SweepItem
from skwgrad.cache.store import Cache, compute_key, current_identity
from skwgrad.errors import CacheError, SkwgradError

_SCRUB_PREFIXES = ("TRITON_", "AMDGCN_", "MLIR_", "LLVM_")
_MAX_MESSAGE = 8000
_worker_ready = False
RETRIED_KINDS = frozenset({"crash", "mismatch", "store"})  # failures of the build machinery, not of the kernel


class BuildError(SkwgradError):
    """A build that cannot start (no executor, unreachable scheduler)."""


# ---------------------------------------------------------------------------------------------
# Worker side
# ---------------------------------------------------------------------------------------------
def prepare_worker(base_dir: str | None = None) -> None:
    """Once per worker process: a private, empty Triton cache and no Triton/LLVM env knobs.

    ``base_dir``: where to make the Triton cache (the local pool passes its build directory, so
    the coordinator removes it even when the worker is killed)."""
    global _worker_ready
    if _worker_ready:
        return
    for name in list(os.environ):
        if name.startswith(_SCRUB_PREFIXES):
            del os.environ[name]
    tmp = tempfile.mkdtemp(prefix="skwgrad-triton-", dir=base_dir)
    os.environ["TRITON_CACHE_DIR"] = tmp
    # Triton 3.9 warns once per process that its fp-fusion default will change; the default
    # (and so the bytes) is part of the Triton version, which is in every key.
    warnings.filterwarnings("ignore", message=".*TRITON_DEFAULT_FP_FUSION.*")
    import atexit
    from multiprocessing import util

    atexit.register(shutil.rmtree, tmp, True)
    util.Finalize(None, shutil.rmtree, args=(tmp, True), exitpriority=10)
    _worker_ready = True


def _clip(message: str) -> str:
    message = message.strip()
    if len(message) <= _MAX_MESSAGE:
        return message
    half = _MAX_MESSAGE // 2
    return message[:half] + "\n[...]\n" + message[-half:]


def _here() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def compile_job(spec_dict: dict, arch: str, coordinator: str | None = None) -> dict:
    """Compile one spec (worker side). Never raises for a compile error: returns it.

    In a worker process (``coordinator`` is another process) the environment is isolated first
    (``prepare_worker``). Run inside the coordinator's own process (a thread executor, a Dask
    cluster with ``processes=False``) it leaves that process's environment alone."""
    if coordinator != _here():
        prepare_worker()
    from skwgrad.aot.compile import compile_spec

    compiler, source = current_identity()
    spec = KernelSpec.from_dict(spec_dict)
    key = compute_key(spec.to_dict(), arch, compiler, source)
    base = {"key": key, "arch": arch, "spec": spec.to_dict(), "compiler": compiler, "source": source,
            "worker": _here()}  # fmt: skip
    t0 = time.perf_counter()
    try:
        ck = compile_spec(spec, arch)
    except Exception as e:  # the compiler's message is the record
        msg = f"{type(e).__name__}: {e}"
        if not isinstance(e, SkwgradError):
            msg += "\n" + "".join(traceback.format_exception(e)[-3:])
        return {**base, "ok": False, "kind": "compile", "message": _clip(msg), "seconds": time.perf_counter() - t0}
    lds = ARCHES[arch].lds_bytes_per_cu
    shared = ck.metadata.get("shared") or 0
    if shared > lds:
        return {
            **base, "ok": False, "kind": "unlaunchable", "seconds": time.perf_counter() - t0,
            "message": f"needs {shared} bytes of LDS/shared memory per CTA; {arch} has {lds}: it could never launch",
        }  # fmt: skip
    return {**base, "ok": True, "binary": ck.binary, "metadata": ck.metadata, "seconds": time.perf_counter() - t0}


def local_job(spec_dict: dict, arch: str, coordinator: str, result_dir: str) -> dict:
    """``compile_job`` for the local process pool: the result goes through a file, and only a
    few hundred bytes through the pool's shared result pipe.

    A result of a few hundred bytes is written to the pipe in one ``write`` (atomic below
    PIPE_BUF), so a worker killed at any moment leaves either a whole message or none. A code
    object sent through the pipe (tens of KiB, header and body in separate writes) can be cut
    in half by a kill, and the pool's reader then blocks forever on the missing bytes instead of
    noticing the dead worker."""
    res = compile_job(spec_dict, arch, coordinator)
    fd, tmp = tempfile.mkstemp(prefix=res["key"][:16] + ".", suffix=".part", dir=result_dir)
    with os.fdopen(fd, "wb") as f:
        pickle.dump(res, f, protocol=pickle.HIGHEST_PROTOCOL)
    final = tmp[: -len(".part")] + ".pkl"
    os.replace(tmp, final)
    return {"key": res["key"], "file": final}


def _unpack(res: dict) -> dict:
    path = res.get("file")
    if path is None:
        return res
    with open(path, "rb") as f:
        full = pickle.load(f)
    os.unlink(path)
    return full


# ---------------------------------------------------------------------------------------------
# Coordinator side
# ---------------------------------------------------------------------------------------------
@dataclass
class BuildSummary:
    selected: int = 0
    built: list = field(default_factory=list)  # keys built by this run
    cached: int = 0  # already in the cache, object intact
    repaired: int = 0  # in the cache but the object was damaged: rebuilt
    skipped_failed: int = 0  # known compile failures under this compiler/sources
    failed: list = field(default_factory=list)  # dicts: key, label, arch, kind, message
    seconds: float = 0.0
    groups: dict = field(default_factory=dict)  # (arch, dtype, family) -> Counter(built/cached/failed/...)
    restarts: int = 0  # times the local worker pool broke (a worker died) and was replaced
    where: str = ""

    @property
    def rate(self) -> float:
        return len(self.built) / self.seconds if self.seconds > 0 else 0.0

    @property
    def errors(self) -> list:
        """Failures that are errors (compile errors, crashes), not tiles that cannot launch."""
        return [f for f in self.failed if f["kind"] != "unlaunchable"]

    def _count(self, item: SweepItem, what: str):
        g = (item.arch, item.spec.dtype, item.spec.family)
        self.groups.setdefault(g, Counter())[what] += 1

    def format(self) -> str:
        lines = [
            f"compile-all: {self.selected} kernels selected: {len(self.built)} built"
            + (f" ({self.repaired} of them replacing damaged objects)" if self.repaired else "")
            + f", {self.cached} already cached, {self.skipped_failed} skipped (known failures), "
            f"{len(self.failed)} failed; {self.seconds:.1f} s, {self.rate:.2f} kernels/s built ({self.where})"
        ]
        if self.groups:
            cols = ("built", "cached", "failed", "skipped")
            rows = [("arch", "dtype", "family", *cols)]
            order = list(ARCHES)
            for (a, d, f), c in sorted(self.groups.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1], kv[0][2])):
                rows.append((a, d, f, *(str(c[k]) for k in cols)))
            w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
            lines += ["  " + "  ".join(v.ljust(w[i]) if i < 3 else v.rjust(w[i]) for i, v in enumerate(r)) for r in rows]
        for f in self.failed:
            first = f["message"].strip().splitlines()[0] if f["message"].strip() else ""
            lines.append(f"  FAILED [{f['kind']}] {f['label']} on {f['arch']}: {first[:300]}")
        return "\n".join(lines)


class _LocalPool:
    def __init__(self, jobs: int):
        self.jobs = jobs
        self.where = f"local process pool, {jobs} job{'s' if jobs != 1 else ''}"
        self.result_dir = tempfile.mkdtemp(prefix="skwgrad-build-")
        self._new()

    def _new(self):
        self.ex = cf.ProcessPoolExecutor(
            self.jobs, mp_context=multiprocessing.get_context("spawn"), initializer=prepare_worker, initargs=(self.result_dir,)
        )

    def submit(self, *args):
        return self.ex.submit(local_job, *args, _here(), self.result_dir)

    @staticmethod
    def wait_any(pending):
        done, rest = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
        return done, rest

    def broken(self, exc) -> bool:
        return isinstance(exc, cf.BrokenExecutor)

    def restart(self):
        self.ex.shutdown(wait=False, cancel_futures=True)
        self._new()

    def close(self, cancel=False):
        self.ex.shutdown(wait=not cancel, cancel_futures=cancel)
        shutil.rmtree(self.result_dir, ignore_errors=True)


class _ExecutorPool:
    """Any concurrent.futures.Executor the caller owns (tests, embedding)."""

    def __init__(self, ex):
        self.ex = ex
        self.where = type(ex).__name__

    def submit(self, *args):
        return self.ex.submit(compile_job, *args, _here())

    @staticmethod
    def wait_any(pending):
        return cf.wait(pending, return_when=cf.FIRST_COMPLETED)

    def broken(self, exc) -> bool:
        return isinstance(exc, cf.BrokenExecutor)

    def restart(self):
        pass

    def close(self, cancel=False):
        pass


class _DaskPool:
    def __init__(self, address: str):
        try:
            from dask.distributed import Client
        except ImportError:
            raise BuildError("--scheduler needs dask.distributed: pip install 'skwgrad[dask]'") from None
        try:
            self.client = Client(address, timeout=30)
        except ValueError as e:
            raise BuildError(f"--scheduler {address!r}: {e}; expected an address like tcp://HOST:8786") from None
        except (OSError, TimeoutError) as e:
            raise BuildError(f"cannot reach the Dask scheduler at {address}: {e}; start one with `dask scheduler` (and `dask worker {address}` on the build machines)") from None
        n = sum(self.client.nthreads().values())
        self.jobs = max(n, 1)
        self.where = f"Dask scheduler {address}, {n} worker thread{'s' if n != 1 else ''}"

    def submit(self, *args):
        return self.client.submit(compile_job, *args, _here(), pure=False)

    @staticmethod
    def wait_any(pending):
        from dask.distributed import wait

        res = wait(list(pending), return_when="FIRST_COMPLETED")
        return set(res.done), set(res.not_done)

    def broken(self, exc) -> bool:
        return False

    def restart(self):
        pass

    def close(self, cancel=False):
        self.client.close()


def plan_build(items, cache: Cache, *, retry_failed: bool = False):
    """Split a sweep into (to build, summary so far): drop keys cached with an intact object
    and, unless ``retry_failed``, known compile failures."""
    summary = BuildSummary(selected=len(items))
    current = cache.current_keys()
    known_failed = {f["key"]: f for f in cache.failures()}
    todo, repair = [], set()
    for it in items:
        key = Cache.key_for(it.spec, it.arch)
        if key in current:
            if cache.intact(key):
                summary.cached += 1
                summary._count(it, "cached")
                continue
            repair.add(key)
        elif key in known_failed and known_failed[key]["kind"] not in RETRIED_KINDS and not retry_failed:
            summary.skipped_failed += 1
            summary._count(it, "skipped")
            continue
        todo.append((key, it))
    return todo, repair, summary


def build(
    items,
    cache: Cache,
    *,
    jobs: int | None = None,
    scheduler: str | None = None,
    executor: cf.Executor | None = None,
    retry_failed: bool = False,
    progress: bool | None = None,
) -> BuildSummary:
    """Compile ``items`` (``SweepItem``s) that the cache lacks and store them. Failures are
    recorded in the cache and do not stop the build."""
    t0 = time.perf_counter()
    items = list(items)
    todo, repair, summary = plan_build(items, cache, retry_failed=retry_failed)
    if not todo:
        summary.where = "nothing to build"
        summary.seconds = time.perf_counter() - t0
        return summary
    if executor is not None:
        pool = _ExecutorPool(executor)
        window = 64
    elif scheduler:
        pool = _DaskPool(scheduler)
        window = max(4, 2 * pool.jobs)
    else:
        jobs = jobs or os.cpu_count() or 1
        if jobs < 1:
            raise BuildError(f"--jobs must be >= 1, got {jobs}")
        pool = _LocalPool(min(jobs, len(todo)))
        window = max(4, 4 * pool.jobs)
    summary.where = pool.where
    from tqdm import tqdm

    bar = tqdm(total=len(todo), unit="kernel", desc="compile-all", disable=progress is False or (progress is None and not sys.stderr.isatty()), file=sys.stderr, dynamic_ncols=True)
    queue = list(reversed(todo))  # pop() from the end: keeps the sweep's order
    suspects: list = []  # in flight when the local pool broke: rerun one at a time
    by_key = dict(todo)
    crashes: Counter = Counter()
    pending: dict = {}

    def fill():
        if suspects:
            # Isolate: one suspect alone in the pool, so the one that kills its worker is known
            # and the innocent ones are not blamed.
            if not pending:
                key, it = suspects.pop()
                pending[pool.submit(it.spec.to_dict(), it.arch)] = key
            return
        while queue and len(pending) < window:
            key, it = queue.pop()
            pending[pool.submit(it.spec.to_dict(), it.arch)] = key

    def fail(key, kind, message):
        it = by_key[key]
        cache.record_failure(it.spec, it.arch, message, kind=kind)
        summary.failed.append({"key": key, "label": it.spec.label, "arch": it.arch, "kind": kind, "message": message})
        summary._count(it, "failed")
        bar.update(1)

    try:
        fill()
        while pending:
            alone = len(pending) == 1
            done, _ = pool.wait_any(set(pending))
            broke = False
            for fut in done:
                key = pending.pop(fut)
                it = by_key[key]
                try:
                    res = _unpack(fut.result())
                except Exception as e:  # infrastructure: the worker died or the cluster lost it
                    if pool.broken(e):
                        broke = True
                        if alone:
                            fail(key, "crash", f"the worker process died while compiling this kernel alone ({type(e).__name__})")
                        else:
                            suspects.append((key, it))
                        continue
                    crashes[key] += 1
                    if crashes[key] < 2:
                        queue.append((key, it))
                    else:
                        fail(key, "crash", f"the worker was lost while compiling (twice): {type(e).__name__}: {e}")
                    continue
                if res["key"] != key:
                    fail(key, "mismatch", (
                        f"worker {res.get('worker')} has {res.get('compiler')} / kernel sources {str(res.get('source'))[:12]}, "
                        f"this coordinator {current_identity()[0]} / {current_identity()[1][:12]}: install the same skwgrad and Triton on every worker"
                    ))  # fmt: skip
                    continue
                if not res["ok"]:
                    fail(key, res["kind"], res["message"])
                    continue
                from skwgrad.aot.compile import CompiledKernel

                try:
                    cache.put(CompiledKernel(it.spec, it.arch, res["binary"], res["metadata"]))
                except CacheError as e:
                    fail(key, "store", str(e))
                    continue
                summary.built.append(key)
                summary.repaired += key in repair
                summary._count(it, "built")
                bar.update(1)
            if broke:
                for fut, key in list(pending.items()):  # every job in flight died with the pool
                    pending.pop(fut)
                    suspects.append((key, by_key[key]))
                pool.restart()
                summary.restarts += 1
            fill()
    except BaseException:
        pool.close(cancel=True)
        bar.close()
        raise
    pool.close()
    bar.close()
    summary.seconds = time.perf_counter() - t0
    return summary
