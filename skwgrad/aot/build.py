"""Compile a sweep into the cache, in parallel: the engine of ``skwgrad compile-all``.

Workers (a local process pool, or a Dask distributed cluster with ``scheduler=ADDRESS``) run
``compile_job``: compile one spec for one arch and return its key, code-object bytes and metadata,
or a failure message. They never touch the cache. One coordinator (this process) writes every
result, so the cache sees a single writer per build; several builds at once are still safe (see
``skwgrad.cache.store``) and do not duplicate work (claims, below).

Resumable: keys already in the cache with an intact object are skipped before anything is
submitted, so re-running after a kill builds only what is missing; an entry whose object fails
its sha256 check is rebuilt. Kernels that failed to compile are recorded with the compiler's
message and the *build environment's fingerprint* (``environment_fingerprint``: Python, platform,
Triton install, its ptxas) and skipped next time only under the same fingerprint
(``retry_failed`` retries them anyway), so a re-run after an environment fix rebuilds them. When a
local worker dies mid-compile (an LLVM crash, the OOM killer) the pool is replaced and the jobs
that were in flight are rerun one at a time: the one that kills its worker alone is recorded as a
``crash`` (retried by the next run), the others are built. A job a Dask cluster loses is retried
once.

The compiler environment is checked once, up front (``check_environment``: Triton importable and
the pinned version, its backend for every requested arch, ptxas for sm_90). A broken environment
is a ``BuildEnvironmentError`` (exit 3) and never a per-kernel failure; a worker that finds its
own environment broken (a Dask worker with another Triton) stops the build the same way.

Hygiene:

* Workers die with their coordinator whatever kills it: each local worker asks the kernel for
  SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)`` on Linux) and runs a watchdog thread
  that kills it when its parent pid changes. Workers ignore SIGINT: Ctrl-C is the coordinator's.
* The local pool's temp folder (``skwgrad-build-<pid>-*`` in ``$TMPDIR``: results in transit,
  each worker's Triton cache, the workers' ``TMPDIR``) holds an owner file; on start, folders of
  this user whose owner process is dead and which are older than ``STALE_TMP_S`` are removed.
* Concurrent builders claim keys (``claims/<key>`` in the cache, created with ``O_CREAT|O_EXCL``,
  holding host, pid and process start time) before compiling them; a key claimed by a live
  builder is left to it and waited for at the end, a claim of a dead process is reclaimed.
* Ctrl-C stops the workers and returns the summary so far with ``interrupted`` set.

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
import functools
import hashlib
import json
import multiprocessing
import os
import pickle
import platform
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from skwgrad.abi.arch import ARCHES
from skwgrad.abi.identity import PINNED_TRITON
from skwgrad.abi.spec import KernelSpec
from skwgrad.aot.sweep import SweepItem
from skwgrad.cache.store import Cache, compute_key, current_identity
from skwgrad.errors import EXIT_ENVIRONMENT, CacheError, SkwgradError

_SCRUB_PREFIXES = ("TRITON_", "AMDGCN_", "MLIR_", "LLVM_")
_MAX_MESSAGE = 8000
_worker_ready = False
RETRIED_KINDS = frozenset({"crash", "mismatch", "store"})  # failures of the build machinery, not of the kernel
TMP_PREFIX = "skwgrad-build-"
STALE_TMP_S = 60.0  # a dead builder's temp folder younger than this is left alone
CLAIMS = "claims"
FOREIGN_CLAIM_TTL_S = 6 * 3600.0  # a claim from another host (liveness unknowable) expires after this
WATCHDOG_S = 0.5
PROGRESS_INTERVAL_S = 30.0
_ENV_TAG = re.compile(r"\n?\[build environment ([0-9a-f]{16})\]\s*$")


class BuildError(SkwgradError):
    """A build that cannot start (no executor, unreachable scheduler)."""


class BuildEnvironmentError(BuildError):
    """The compiler environment cannot build (no Triton, another Triton, no backend or ptxas)."""

    exit_code = EXIT_ENVIRONMENT


# ---------------------------------------------------------------------------------------------
# The compiler environment
# ---------------------------------------------------------------------------------------------
def _file_id(path) -> list:
    try:
        st = os.stat(path)
        return [str(path), st.st_size, int(st.st_mtime)]
    except OSError:
        return [str(path), None, None]


def environment_problem(arches=()) -> str | None:
    """Why this process cannot build for ``arches`` (a sentence saying what to do), or None."""
    try:
        import triton
    except Exception as e:  # ImportError, or a broken install raising anything on import
        return f"Triton is not importable ({type(e).__name__}: {e}); skwgrad builds with it: pip install triton=={PINNED_TRITON}"
    version = getattr(triton, "__version__", "?")
    if version != PINNED_TRITON:
        return (
            f"skwgrad builds with triton=={PINNED_TRITON} (pinned; it is part of every cache key), found triton {version} "
            f"at {os.path.dirname(triton.__file__)}: pip install triton=={PINNED_TRITON}"
        )
    backends = {a: ARCHES[a].backend for a in arches if a in ARCHES}
    try:
        from triton.backends import backends as have
    except Exception as e:
        return f"Triton's backends do not load ({type(e).__name__}: {e}): reinstall triton=={PINNED_TRITON}"
    for arch, be in backends.items():
        name = "amd" if be == "hip" else "nvidia"
        if name not in have:
            return f"this Triton has no {name} backend, needed for {arch}: reinstall triton=={PINNED_TRITON}"
        if name == "nvidia":
            try:
                from triton.backends.nvidia.compiler import get_ptxas

                path = get_ptxas(int(arch.removeprefix("sm_"))).path
            except Exception as e:
                return f"no ptxas for {arch} ({type(e).__name__}: {e}): reinstall triton=={PINNED_TRITON} (it ships ptxas)"
            if not path or not os.access(path, os.X_OK):
                return f"ptxas for {arch} is missing or not executable ({path}): reinstall triton=={PINNED_TRITON}"
    return None


def check_environment(arches=()) -> str:
    """Raise ``BuildEnvironmentError`` unless this process can build for ``arches``; return the
    environment's fingerprint."""
    problem = environment_problem(arches)
    if problem:
        raise BuildEnvironmentError(problem)
    return environment_fingerprint()


@functools.lru_cache(maxsize=1)
def environment_fingerprint() -> str:
    """16 hex digits naming what, besides the cache key, could make a compile fail: Python, the
    platform, the Triton install (its version, place and native library) and its ptxas."""
    parts: dict = {"python": sys.version, "platform": platform.platform(), "machine": platform.machine()}
    try:
        import triton

        root = Path(triton.__file__).parent
        parts["triton"] = [triton.__version__, str(root)] + [_file_id(p) for p in sorted(root.glob("_C/libtriton*"))]
        parts["ptxas"] = _file_id(root / "backends" / "nvidia" / "bin" / "ptxas")
    except Exception as e:
        parts["triton"] = f"unimportable: {type(e).__name__}"
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def tag_environment(message: str, fingerprint: str) -> str:
    return f"{message.rstrip()}\n[build environment {fingerprint}]"


def failure_environment(message: str) -> str | None:
    """The fingerprint a recorded failure was made under (None: recorded without one)."""
    m = _ENV_TAG.search(message or "")
    return m.group(1) if m else None


# ---------------------------------------------------------------------------------------------
# Processes: liveness, parent death, temp folders
# ---------------------------------------------------------------------------------------------
def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), '' where unknown: with the pid
    it names one process, so a reused pid is not mistaken for the original."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _alive(pid: int, start: str = "") -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if start:
        now = _start_time(pid)
        if now and now != start:
            return False  # the pid was reused
    try:  # a zombie (dead, not yet reaped) is dead
        with open(f"/proc/{pid}/stat", "rb") as f:
            if f.read().decode(errors="replace").rsplit(")", 1)[1].split()[0] == "Z":
                return False
    except (OSError, IndexError):
        pass
    return True


def _owner_record() -> dict:
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start": _start_time(pid)}


def _owner_alive(rec: dict) -> bool | None:
    """True/False for a process of this host; None when it is another host's."""
    if rec.get("host") != socket.gethostname():
        return None
    return _alive(int(rec.get("pid", 0)), str(rec.get("start", "")))


def _die_with_parent(parent: int) -> None:
    """In a worker: SIGKILL when the coordinator dies, by the kernel (Linux) and by a watchdog."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)

    def watch():
        while True:
            time.sleep(WATCHDOG_S)
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="skwgrad-parent-watchdog", daemon=True).start()


def reclaim_stale_temp(base: str | None = None, min_age: float = STALE_TMP_S) -> list[str]:
    """Remove the temp folders of local pools whose coordinator is dead: this user's
    ``skwgrad-build-<pid>-*`` folders older than ``min_age`` whose owner file (or, lacking one,
    the pid in the name) names a dead process of this host. Returns the removed paths."""
    base = base or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(base)
    except OSError:
        return removed
    now = time.time()
    for name in names:
        m = re.fullmatch(re.escape(TMP_PREFIX) + r"(\d+)-\w+", name)
        if not m:
            continue
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.getuid() or now - st.st_mtime < min_age:
            continue
        try:
            with open(os.path.join(path, "owner.json")) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            rec = {"host": socket.gethostname(), "pid": int(m.group(1)), "start": ""}
        if _owner_alive(rec) is False:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


# ---------------------------------------------------------------------------------------------
# Claims: one builder per key
# ---------------------------------------------------------------------------------------------
class Claims:
    """``claims/<key>`` files in the cache directory: whoever creates one (``O_CREAT|O_EXCL``)
    compiles that key. A claim names host, pid, process start time and a per-build token;
    a claim whose process is dead (or, from another host, older than ``FOREIGN_CLAIM_TTL_S``) is
    taken over."""

    def __init__(self, cache_path):
        self.dir = Path(cache_path) / CLAIMS
        self.dir.mkdir(parents=True, exist_ok=True)
        self.rec = {**_owner_record(), "token": os.urandom(8).hex()}
        self.held: set[str] = set()
        self._text = json.dumps(self.rec).encode()

    def _path(self, key: str) -> Path:
        return self.dir / key

    def _read(self, key: str) -> dict | None:
        try:
            return json.loads(self._path(key).read_bytes() or b"{}")
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}  # being written, or torn by a kill: judged by age

    def _create(self, key: str) -> bool:
        try:
            fd = os.open(self._path(key), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, self._text)
        finally:
            os.close(fd)
        self.held.add(key)
        return True

    def _stale(self, key: str, rec: dict | None) -> bool:
        if rec is None:
            return False  # gone: just try again
        if rec.get("token") == self.rec["token"]:
            return False
        alive = _owner_alive(rec) if rec else None
        if alive is None:
            try:
                age = time.time() - self._path(key).stat().st_mtime
            except FileNotFoundError:
                return False
            return age > (FOREIGN_CLAIM_TTL_S if rec else 10.0)
        return not alive

    def claim(self, key: str) -> bool:
        """True: this build owns the key now. False: a live builder holds it."""
        if key in self.held:
            return True
        for _ in range(3):
            if self._create(key):
                return True
            rec = self._read(key)
            if not self._stale(key, rec):
                if rec is None:
                    continue
                return False
            # Take over a dead builder's claim: under a lock, re-read and remove it if still stale.
            import fcntl

            with open(self.dir / ".lock", "a") as lk:
                fcntl.flock(lk, fcntl.LOCK_EX)
                try:
                    if self._stale(key, self._read(key)):
                        try:
                            self._path(key).unlink()
                        except FileNotFoundError:
                            pass
                    if self._create(key):
                        return True
                finally:
                    fcntl.flock(lk, fcntl.LOCK_UN)
        return False

    def holder_alive(self, key: str) -> bool:
        rec = self._read(key)
        return rec is not None and not self._stale(key, rec)

    def release(self, key: str) -> None:
        if key in self.held:
            self.held.discard(key)
            try:
                if self._read(key) == self.rec:
                    self._path(key).unlink()
            except FileNotFoundError:
                pass

    def release_all(self) -> None:
        for key in list(self.held):
            self.release(key)


# ---------------------------------------------------------------------------------------------
# Worker side
# ---------------------------------------------------------------------------------------------
def prepare_worker(base_dir: str | None = None, parent: int | None = None) -> None:
    """Once per worker process: a private, empty Triton cache and no Triton/LLVM env knobs.

    ``base_dir``: where to make the Triton cache and the worker's ``TMPDIR`` (the local pool
    passes its build directory, so it is removed even when the worker is killed). ``parent``: the
    coordinator's pid (local pool): the worker then dies with it and ignores SIGINT."""
    global _worker_ready
    if _worker_ready:
        return
    if parent is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _die_with_parent(parent)
    for name in list(os.environ):
        if name.startswith(_SCRUB_PREFIXES):
            del os.environ[name]
    tmp = tempfile.mkdtemp(prefix="skwgrad-triton-", dir=base_dir)
    os.environ["TRITON_CACHE_DIR"] = tmp
    if base_dir is not None:
        # The compiler's own temp files (ptxas input/output, hsaco links) land in the build
        # folder too, so a killed build leaves nothing outside it.
        os.environ["TMPDIR"] = tempfile.mkdtemp(prefix="skwgrad-tmp-", dir=base_dir)
        tempfile.tempdir = None
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


@functools.lru_cache(maxsize=None)
def _worker_environment_problem(arch: str) -> str | None:
    return environment_problem((arch,))


def compile_job(spec_dict: dict, arch: str, coordinator: str | None = None) -> dict:
    """Compile one spec (worker side). Never raises for a compile error: returns it.

    In a worker process (``coordinator`` is another process) the environment is isolated first
    (``prepare_worker``). Run inside the coordinator's own process (a thread executor, a Dask
    cluster with ``processes=False``) it leaves that process's environment alone."""
    if coordinator != _here():
        prepare_worker()
    compiler, source = current_identity()
    spec = KernelSpec.from_dict(spec_dict)
    key = compute_key(spec.to_dict(), arch, compiler, source)
    base = {"key": key, "arch": arch, "spec": spec.to_dict(), "compiler": compiler, "source": source,
            "worker": _here(), "env": environment_fingerprint()}  # fmt: skip
    problem = _worker_environment_problem(arch)
    if problem:  # the worker's environment, not the kernel: the coordinator stops the build
        return {**base, "ok": False, "kind": "environment", "message": f"worker {_here()}: {problem}", "seconds": 0.0}
    from skwgrad.aot.compile import compile_spec

    t0, c0 = time.perf_counter(), os.times()
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
    c1 = os.times()  # this process and its finished children (ptxas): the CPU the compile cost
    cpu = (c1.user - c0.user) + (c1.system - c0.system) + (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    metadata = {**ck.metadata, "compile_cpu_seconds": round(cpu, 3)}
    return {**base, "ok": True, "binary": ck.binary, "metadata": metadata, "seconds": time.perf_counter() - t0}


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
    cached: int = 0  # already in the cache, object intact (by other builders during this run too)
    by_others: int = 0  # of ``cached``: claimed and stored by another builder while this one ran
    repaired: int = 0  # in the cache but the object was damaged: rebuilt
    skipped_failed: int = 0  # known compile failures under this compiler, sources and environment
    failed: list = field(default_factory=list)  # dicts: key, label, arch, kind, message
    seconds: float = 0.0
    groups: dict = field(default_factory=dict)  # (arch, dtype, family) -> Counter(built/cached/failed/...)
    restarts: int = 0  # times the local worker pool broke (a worker died) and was replaced
    where: str = ""
    interrupted: bool = False  # Ctrl-C stopped the build; re-running resumes it
    environment: str = ""  # the build environment's fingerprint
    reclaimed_temp: int = 0  # stale temp folders of dead builders removed at start

    @property
    def rate(self) -> float:
        return len(self.built) / self.seconds if self.seconds > 0 else 0.0

    @property
    def errors(self) -> list:
        """Failures that are errors (compile errors, crashes), not tiles that cannot launch."""
        return [f for f in self.failed if f["kind"] != "unlaunchable"]

    @property
    def remaining(self) -> int:
        return self.selected - len(self.built) - self.cached - self.skipped_failed - len(self.failed)

    def _count(self, item: SweepItem, what: str):
        g = (item.arch, item.spec.dtype, item.spec.family)
        self.groups.setdefault(g, Counter())[what] += 1

    def to_dict(self) -> dict:
        return {
            "selected": self.selected, "built": len(self.built), "cached": self.cached, "by_other_builders": self.by_others,
            "repaired": self.repaired, "skipped_known_failures": self.skipped_failed, "failed": len(self.failed),
            "errors": len(self.errors), "remaining": self.remaining, "interrupted": self.interrupted,
            "seconds": round(self.seconds, 3), "kernels_per_second": round(self.rate, 3), "where": self.where,
            "restarts": self.restarts, "environment": self.environment, "reclaimed_temp": self.reclaimed_temp,
            "groups": [{"arch": a, "dtype": d, "family": f, **dict(c)} for (a, d, f), c in sorted(self.groups.items())],
            "failures": [{k: f[k] for k in ("label", "arch", "kind", "message")} for f in self.failed],
        }  # fmt: skip

    def format(self) -> str:
        lines = [
            ("compile-all INTERRUPTED: " if self.interrupted else "compile-all: ")
            + f"{self.selected} kernels selected: {len(self.built)} built"
            + (f" ({self.repaired} of them replacing damaged objects)" if self.repaired else "")
            + f", {self.cached} already cached"
            + (f" ({self.by_others} by another builder meanwhile)" if self.by_others else "")
            + f", {self.skipped_failed} skipped (known failures), "
            f"{len(self.failed)} failed"
            + (f", {self.remaining} not built (re-run to resume)" if self.interrupted else "")
            + f"; {self.seconds:.1f} s, {self.rate:.2f} kernels/s built ({self.where})"
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
        self.result_dir = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-")
        with open(os.path.join(self.result_dir, "owner.json"), "w") as f:
            json.dump(_owner_record(), f)
        self._new()

    def _new(self):
        self.ex = cf.ProcessPoolExecutor(
            self.jobs, mp_context=multiprocessing.get_context("spawn"), initializer=prepare_worker,
            initargs=(self.result_dir, os.getpid()),
        )  # fmt: skip

    def submit(self, *args):
        return self.ex.submit(local_job, *args, _here(), self.result_dir)

    @staticmethod
    def wait_any(pending, timeout=None):
        return cf.wait(pending, timeout=timeout, return_when=cf.FIRST_COMPLETED)

    def broken(self, exc) -> bool:
        return isinstance(exc, cf.BrokenExecutor)

    def _kill_workers(self):
        for proc in list((getattr(self.ex, "_processes", None) or {}).values()):
            try:
                proc.kill()
            except (OSError, AttributeError):
                pass

    def restart(self):
        self.ex.shutdown(wait=False, cancel_futures=True)
        self._new()

    def close(self, cancel=False):
        if cancel:  # interrupted or failed: stop compiling now, not after the jobs in flight
            self._kill_workers()
        self.ex.shutdown(wait=True, cancel_futures=cancel)
        shutil.rmtree(self.result_dir, ignore_errors=True)


class _ExecutorPool:
    """Any concurrent.futures.Executor the caller owns (tests, embedding)."""

    def __init__(self, ex):
        self.ex = ex
        self.where = type(ex).__name__

    def submit(self, *args):
        return self.ex.submit(compile_job, *args, _here())

    @staticmethod
    def wait_any(pending, timeout=None):
        return cf.wait(pending, timeout=timeout, return_when=cf.FIRST_COMPLETED)

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
            raise BuildEnvironmentError("--scheduler needs dask.distributed: pip install 'skwgrad[dask]'") from None
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
    def wait_any(pending, timeout=None):
        from dask.distributed import wait

        try:
            res = wait(list(pending), timeout=timeout, return_when="FIRST_COMPLETED")
        except TimeoutError:
            return set(), set(pending)
        return set(res.done), set(res.not_done)

    def broken(self, exc) -> bool:
        return False

    def restart(self):
        pass

    def close(self, cancel=False):
        self.client.close()  # the cluster forgets this client's queued jobs


class _Progress:
    """tqdm on a terminal; otherwise one line every ``interval`` seconds (and at the end)."""

    def __init__(self, total: int, mode, interval: float, stream=None):
        self.stream = stream or sys.stderr
        self.total, self.n, self.failed = total, 0, 0
        self.interval = interval
        self.t0 = self.last = time.monotonic()
        tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.kind = "off" if mode is False else ("bar" if (mode is True or tty) else "lines")
        self.bar = None
        if self.kind == "bar":
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="kernel", desc="compile-all", file=self.stream, dynamic_ncols=True)

    def update(self, failed: bool = False):
        self.n += 1
        self.failed += failed
        if self.bar is not None:
            self.bar.update(1)
        self.tick()

    def line(self) -> str:
        el = time.monotonic() - self.t0
        rate = self.n / el if el > 0 else 0.0
        eta = (self.total - self.n) / rate if rate > 0 else float("nan")
        eta_s = f"{eta / 60:.1f} min" if eta == eta else "?"
        return (f"compile-all: {self.n}/{self.total} done ({100 * self.n / max(self.total, 1):.0f}%), {self.failed} failed, "
                f"{el:.0f} s, {rate:.2f} kernels/s, eta {eta_s}")  # fmt: skip

    def tick(self, force: bool = False):
        if self.kind != "lines":
            return
        now = time.monotonic()
        if force or now - self.last >= self.interval:
            self.last = now
            print(self.line(), file=self.stream, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.kind == "lines" and self.n:
            self.tick(force=True)


def plan_build(items, cache: Cache, *, retry_failed: bool = False, environment: str | None = None):
    """Split a sweep into (to build, summary so far): drop keys cached with an intact object
    and, unless ``retry_failed``, known compile failures recorded under ``environment`` (the
    build environment's fingerprint; a failure recorded under another one, or none, is retried)."""
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
        elif key in known_failed and _skip_failure(known_failed[key], retry_failed, environment):
            summary.skipped_failed += 1
            summary._count(it, "skipped")
            continue
        todo.append((key, it))
    return todo, repair, summary


def _skip_failure(f: dict, retry_failed: bool, environment: str | None) -> bool:
    if retry_failed or f["kind"] in RETRIED_KINDS:
        return False
    return environment is None or failure_environment(f["message"]) == environment


def _failure_of(cache: Cache, key: str) -> dict | None:
    rows = cache._rows("SELECT key, kind, message FROM failures WHERE key = ?", [key])
    return rows[0] if rows else None


class _EnvironmentStop(Exception):
    pass


def build(
    items,
    cache: Cache,
    *,
    jobs: int | None = None,
    scheduler: str | None = None,
    executor: cf.Executor | None = None,
    retry_failed: bool = False,
    progress: bool | None = None,
    progress_interval: float = PROGRESS_INTERVAL_S,
    claim_poll: float = 0.5,
) -> BuildSummary:
    """Compile ``items`` (``SweepItem``s) that the cache lacks and store them. Failures are
    recorded in the cache and do not stop the build. Raises ``BuildEnvironmentError`` (before
    compiling anything) when this process cannot build, or when a worker finds its environment
    broken. Ctrl-C returns the summary so far with ``interrupted`` set.

    ``progress``: True a tqdm bar, False nothing, None (default) a bar on a terminal and a line
    every ``progress_interval`` seconds otherwise."""
    t0 = time.perf_counter()
    items = list(items)
    env = check_environment(sorted({it.arch for it in items}))
    todo, repair, summary = plan_build(items, cache, retry_failed=retry_failed, environment=env)
    summary.environment = env
    if not todo:
        summary.where = "nothing to build"
        summary.seconds = time.perf_counter() - t0
        return summary
    claims = Claims(cache.path)
    if executor is not None:
        pool = _ExecutorPool(executor)
        # Keys are claimed when submitted: a short window leaves the rest to concurrent builders.
        window = max(4, 2 * int(getattr(executor, "_max_workers", 32)))
    elif scheduler:
        pool = _DaskPool(scheduler)
        window = max(4, 2 * pool.jobs)
    else:
        jobs = jobs or default_jobs()
        if jobs < 1:
            raise BuildError(f"--jobs must be >= 1, got {jobs}")
        summary.reclaimed_temp = len(reclaim_stale_temp())
        pool = _LocalPool(min(jobs, len(todo)))
        window = max(4, 4 * pool.jobs)
    summary.where = pool.where
    bar = _Progress(len(todo), progress, progress_interval)
    queue = list(reversed(todo))  # pop() from the end: keeps the sweep's order
    deferred: list = []  # claimed by another live builder: waited for at the end
    suspects: list = []  # in flight when the local pool broke: rerun one at a time
    by_key = dict(todo)
    crashes: Counter = Counter()
    pending: dict = {}

    def settle_if_done_elsewhere(key, it) -> bool:
        """After claiming, or when the other builder let go: is the key done already?"""
        if key not in repair and cache.has(key):
            claims.release(key)
            summary.cached += 1
            summary.by_others += 1
            summary._count(it, "cached")
            bar.update()
            return True
        return False

    def take(key, it) -> bool:
        """Claim a key for this build; False when it is settled or someone else has it."""
        if not claims.claim(key):
            deferred.append((key, it))
            return False
        if settle_if_done_elsewhere(key, it):
            return False
        f = _failure_of(cache, key)  # another builder failed it and let go since our plan
        if f is not None and _skip_failure(f, retry_failed, env):
            claims.release(key)
            summary.skipped_failed += 1
            summary._count(it, "skipped")
            bar.update()
            return False
        return True

    def fill():
        with _held_sigint():  # a claim is created and recorded as held whole, or not at all
            _fill()

    def _fill():
        if suspects:
            # Isolate: one suspect alone in the pool, so the one that kills its worker is known
            # and the innocent ones are not blamed.
            if not pending:
                key, it = suspects.pop()
                pending[pool.submit(it.spec.to_dict(), it.arch)] = key
            return
        while queue and len(pending) < window:
            key, it = queue.pop()
            if take(key, it):
                pending[pool.submit(it.spec.to_dict(), it.arch)] = key

    def recheck_deferred():
        """Keys another builder held: done there, failed there, or free again for us."""
        for key, it in list(deferred):
            if not claims.holder_alive(key):
                deferred.remove((key, it))
                queue.append((key, it))  # fill() claims it, then finds it built or failed, or builds it

    def fail(key, kind, message, env_of=None):
        it = by_key[key]
        cache.record_failure(it.spec, it.arch, tag_environment(message, env_of or env), kind=kind)
        claims.release(key)
        summary.failed.append({"key": key, "label": it.spec.label, "arch": it.arch, "kind": kind, "message": message})
        summary._count(it, "failed")
        bar.update(failed=True)

    def store(key, res):
        it = by_key[key]
        if res.get("kind") == "environment":
            raise _EnvironmentStop(res["message"])
        if res["key"] != key:
            fail(key, "mismatch", (
                f"worker {res.get('worker')} has {res.get('compiler')} / kernel sources {str(res.get('source'))[:12]}, "
                f"this coordinator {current_identity()[0]} / {current_identity()[1][:12]}: install the same skwgrad and Triton on every worker"
            ))  # fmt: skip
            return
        if not res["ok"]:
            fail(key, res["kind"], res["message"], res.get("env"))
            return
        from skwgrad.aot.compile import CompiledKernel

        try:
            cache.put(CompiledKernel(it.spec, it.arch, res["binary"], res["metadata"]))
        except CacheError as e:
            fail(key, "store", str(e))
            return
        claims.release(key)
        summary.built.append(key)
        summary.repaired += key in repair
        summary._count(it, "built")
        bar.update()

    def salvage():
        """After Ctrl-C: store the jobs that finished but were not collected yet."""
        for fut, key in list(pending.items()):
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                pending.pop(fut)
                try:
                    res = _unpack(fut.result())
                    if res.get("kind") != "environment":
                        store(key, res)
                except (OSError, EOFError, pickle.UnpicklingError, CacheError):
                    pass

    wait_s = min(progress_interval, 5.0) if bar.kind == "lines" else None
    interrupted = env_stop = None
    try:
        fill()
        while pending or queue or deferred or suspects:
            if not pending:
                if deferred and not queue and not suspects:
                    time.sleep(claim_poll)
                    recheck_deferred()
                    bar.tick()
                fill()
                continue
            alone = len(pending) == 1
            done, _ = pool.wait_any(set(pending), timeout=wait_s)
            bar.tick()
            broke = False
            for fut in done:
                key = pending.pop(fut)
                try:
                    res = _unpack(fut.result())
                except Exception as e:  # infrastructure: the worker died or the cluster lost it
                    if pool.broken(e):
                        broke = True
                        if alone:
                            fail(key, "crash", f"the worker process died while compiling this kernel alone ({type(e).__name__})")
                        else:
                            suspects.append((key, by_key[key]))
                        continue
                    crashes[key] += 1
                    if crashes[key] < 2:
                        queue.append((key, by_key[key]))
                    else:
                        fail(key, "crash", f"the worker was lost while compiling (twice): {type(e).__name__}: {e}")
                    continue
                with _held_sigint():  # a kernel is recorded whole (row, index, summary) or not at all
                    store(key, res)
            if broke:
                for fut, key in list(pending.items()):  # every job in flight died with the pool
                    pending.pop(fut)
                    suspects.append((key, by_key[key]))
                pool.restart()
                summary.restarts += 1
            fill()
    except KeyboardInterrupt:
        interrupted = True
    except _EnvironmentStop as e:
        env_stop = str(e)
    except BaseException:
        pool.close(cancel=True)
        claims.release_all()
        bar.close()
        raise
    if interrupted or env_stop:
        # A second Ctrl-C while the workers are being stopped must not leave claims behind.
        with _deferred_sigint():
            if interrupted:
                salvage()
            pool.close(cancel=True)
            claims.release_all()
            bar.close()
    else:
        pool.close()
        claims.release_all()
        bar.close()
    summary.seconds = time.perf_counter() - t0
    if env_stop:
        raise BuildEnvironmentError(f"{env_stop} (nothing was recorded as a kernel failure; fix the environment and re-run)")
    summary.interrupted = bool(interrupted)
    return summary


class _held_sigint:
    """Hold a Ctrl-C (in the main thread) while the build records something in two steps, then
    deliver it: an interrupt between writing an entry's row and committing it to the index left the
    entry out of the index and the summary (``cache verify`` reported it missing until
    ``rebuild-index``); one between creating a claim file and recording it as held left the claim
    behind for ``release_all``."""

    def __enter__(self):
        self.old, self.got = None, False
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGINT, self._note)
        return self

    def _note(self, signum, frame):
        self.got = True

    def __exit__(self, *exc):
        if self.old is None:
            return False
        signal.signal(signal.SIGINT, self.old)
        if self.got and exc[0] is None:
            if callable(self.old):
                self.old(signal.SIGINT, None)  # Python's default handler: KeyboardInterrupt, here
            elif self.old == signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGINT)
        return False


class _deferred_sigint:
    """Hold SIGINT (in the main thread) while cleaning up; re-deliver nothing: we are stopping."""

    def __enter__(self):
        self.old = None
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
        return False


def default_jobs() -> int:
    """Local worker processes: one per CPU this process may run on (``os.sched_getaffinity``),
    at most one per ``WORKER_RSS_MIB`` of available memory."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        with open("/proc/meminfo") as f:
            mem = {ln.split(":")[0]: int(ln.split()[1]) for ln in f if ln.split()}
        avail_mib = mem.get("MemAvailable", 0) // 1024
        if avail_mib:
            cpus = min(cpus, max(1, avail_mib // WORKER_RSS_MIB))
    except (OSError, ValueError, IndexError):
        pass
    return max(1, cpus)


WORKER_RSS_MIB = 600  # peak RSS of one compile worker, rounded up (see benchmarks/COMPILE.md)
