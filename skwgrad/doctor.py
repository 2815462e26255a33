"""``skwgrad doctor``: what this machine can do with skwgrad, found without changing anything.

It reports the GPU runtimes (bindings package and version, driver library, the device's arch and
CU count when one is usable), each cache layer (path, where the path came from, whether it exists
and is writable, current vs stale entries and why they are stale) and the compiler a build would
use. It never creates a cache, never compiles and never imports Triton (the version comes from
the installed distribution's metadata).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import sys
from pathlib import Path

ENV_VARS = ("SKWGRAD_CACHE", "SKWGRAD_SYSTEM_CACHE", "SKWGRAD_BACKEND", "SKWGRAD_LOG", "SKWGRAD_TUNE", "XDG_CACHE_HOME")
_BINDINGS = {"cuda": ("cuda.bindings", "cuda-bindings", "cuda"), "hip": ("hip", "hip-python", "amdhip64")}
_EXTRAS = {"cuda": "pip install 'skwgrad[cuda12]' (or [cuda13], matching `nvidia-smi`'s CUDA Version)",
           "hip": "pip install 'skwgrad[rocm64]' (the extra of your ROCm release, /opt/rocm/.info/version)"}  # fmt: skip


def _dist_version(*names: str) -> str | None:
    for n in names:
        try:
            return importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _module_present(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _driver_library(stem: str) -> str | None:
    import ctypes.util

    try:
        return ctypes.util.find_library(stem)
    except Exception:  # noqa: BLE001  (a probe: never fail the report)
        return None


def _runtime(kind: str) -> dict:
    module, dist, lib = _BINDINGS[kind]
    present = _module_present(module)
    info: dict = {
        "backend": kind,
        "bindings": {"package": dist, "installed": present, "version": _dist_version(dist) if present else None},
        "driver_library": _driver_library(lib),
        "driver_version": None,
        "device": None,
        "error": None,
        "notes": [],
    }
    if not present:
        info["error"] = f"{dist} is not installed: {_EXTRAS[kind]}"
        return info
    try:
        from skwgrad.launcher.backends import get_backend

        be = get_backend(kind=kind)
        info["device"] = {
            "name": be.device_name, "arch": be.arch, "compute_units": be.compute_units,
            "ordinal": getattr(be, "device", None), "binary_kind": getattr(be, "binary_kind", None),
        }  # fmt: skip
        info["driver_version"] = _driver_version(kind)
        _version_notes(info)
    except Exception as e:  # noqa: BLE001  (BackendError or a broken binding: report it)
        text = str(e)
        # get_backend lists one reason per runtime ("\n  cuda: ..."): keep this runtime's.
        mine = [ln.strip()[len(kind) + 2 :] for ln in text.splitlines() if ln.strip().startswith(f"{kind}: ")]
        info["error"] = " ".join((mine[0] if mine else text).split()) or type(e).__name__
    return info


def _driver_version(kind: str) -> str | None:
    """The driver's CUDA version ("12.4") or the HIP driver/runtime version, best effort."""
    try:
        if kind == "cuda":
            from skwgrad.launcher.backends.cuda import import_driver

            err, v = import_driver().cuDriverGetVersion()
            return f"{int(v) // 1000}.{int(v) % 1000 // 10}" if int(err) == 0 else None
        from hip import hip

        err, v = hip.hipDriverGetVersion()
        return str(int(v)) if int(err) == 0 else None
    except Exception:  # noqa: BLE001  (a probe: never fail the report)
        return None


def _version_notes(info: dict) -> None:
    """cuda-bindings of a newer CUDA major than the driver's loads, then fails on calls."""
    b, drv = info["bindings"]["version"], info["driver_version"]
    if info["backend"] == "cuda" and b and drv:
        try:
            if int(b.split(".")[0]) > int(drv.split(".")[0]):
                info["notes"].append(
                    f"cuda-bindings {b} is newer than the driver's CUDA {drv}: "
                    f"install skwgrad[cuda{drv.split('.')[0]}] (or update the driver)"
                )  # fmt: skip
        except ValueError:
            pass


def _cache_layers(cache_dir) -> list[tuple[str, Path, str]]:
    """(role, path, where the path came from) of every cache layer, the user cache first."""
    from skwgrad.cache.store import default_cache_dir

    if cache_dir:
        layers = [("user", Path(cache_dir).expanduser(), "--cache")]
    elif os.environ.get("SKWGRAD_CACHE"):
        layers = [("user", default_cache_dir(), "SKWGRAD_CACHE")]
    else:
        layers = [("user", default_cache_dir(), "default ($XDG_CACHE_HOME/skwgrad)")]
    for p in filter(None, os.environ.get("SKWGRAD_SYSTEM_CACHE", "").split(os.pathsep)):
        layers.append(("system", Path(p).expanduser(), "SKWGRAD_SYSTEM_CACHE"))
    return layers


def _writable(path: Path) -> bool:
    """Could this process create or write the cache at ``path`` (the nearest existing ancestor)?"""
    p = path
    while not p.exists():
        if p.parent == p:
            return False
        p = p.parent
    return p.is_dir() and os.access(p, os.W_OK | os.X_OK)


def _cache(role: str, path: Path, source: str) -> dict:
    from skwgrad.cache.store import DB_NAME, Cache, current_identity

    info: dict = {"role": role, "path": str(path), "source": source, "exists": False, "writable": _writable(path),
                  "entries": None, "error": None}  # fmt: skip
    if path.exists() and not path.is_dir():
        info["error"] = f"{path} is a file, not a directory"
        info["writable"] = False
        return info
    if not (path / DB_NAME).is_file():
        if path.is_dir() and any(path.iterdir()):
            info["exists"] = True
            info["error"] = f"no cache index ({DB_NAME}) in {path}"
        return info
    info["exists"] = True
    compiler, source_hash = current_identity()
    try:
        with Cache(path) as c:
            entries = c.entries(all_versions=True)
    except Exception as e:  # noqa: BLE001  (CacheError, an unreadable index: report it)
        info["error"] = " ".join(str(e).split()) or type(e).__name__
        return info
    counts = {"total": len(entries), "current": 0, "stale": 0, "stale_compiler": 0, "stale_source": 0}
    per_arch: dict[str, int] = {}
    for e in entries:
        if e.compiler == compiler and e.source_hash == source_hash:
            counts["current"] += 1
            per_arch[e.arch] = per_arch.get(e.arch, 0) + 1
            continue
        counts["stale"] += 1
        counts["stale_compiler"] += e.compiler != compiler
        counts["stale_source"] += e.source_hash != source_hash
    info["entries"] = counts
    info["current_per_arch"] = dict(sorted(per_arch.items()))
    return info


def _compiler() -> dict:
    from skwgrad.abi.identity import PINNED_TRITON

    present = _module_present("triton")
    version = _dist_version("triton", "pytorch-triton-rocm", "pytorch-triton") if present else None
    builds = present and version is not None and version.split("+")[0] == PINNED_TRITON
    if not present:
        note = f"no Triton: compile-all needs `pip install 'skwgrad[build]'` (triton=={PINNED_TRITON}); running from a cache does not"
    elif builds:
        note = f"triton {version} is the pinned compiler: compile-all can build here"
    else:
        note = (f"triton {version} is installed, but builds need triton=={PINNED_TRITON} (the compiler identity in "
                f"every cache key); running from a cache does not need Triton at all")  # fmt: skip
    return {"triton": version, "module_present": present, "pinned": PINNED_TRITON, "can_build": builds, "note": note}


def diagnose(cache_dir=None) -> dict:
    """Everything ``skwgrad doctor`` reports, as one JSON-ready dict (no ``version`` key)."""
    from skwgrad import __version__
    from skwgrad.abi.identity import compiler_identity, source_hash

    runtimes = [_runtime(k) for k in ("cuda", "hip")]
    forced = os.environ.get("SKWGRAD_BACKEND", "").strip().lower()
    gpu = next((dict(r["device"], backend=r["backend"]) for r in runtimes if r["device"]), None)
    caches = [_cache(*layer) for layer in _cache_layers(cache_dir)]
    compiler = _compiler()
    summary = []
    if gpu:
        summary.append(f"GPU: {gpu['name']} ({gpu['arch']}, {gpu['compute_units']} CUs) through {gpu['backend']}")
    else:
        here = "plan, cache, doctor" + (" and compile-all" if compiler["can_build"] else "")
        summary.append(f"no usable GPU: {here} work here; run-from-cache and wgrad() need a GPU (they exit 3)")
    for c in caches:
        if c["error"]:
            summary.append(f"{c['role']} cache {c['path']}: {c['error']}")
        elif not c["exists"]:
            summary.append(f"{c['role']} cache {c['path']}: absent" + (" (will be created on first build or import)" if c["writable"] else " and not creatable here"))
        else:
            n = c["entries"]
            summary.append(f"{c['role']} cache {c['path']}: {n['current']} current, {n['stale']} stale entries" + ("" if c["writable"] else " (read-only)"))
    for r in runtimes:
        summary += r["notes"]
    summary.append(compiler["note"])
    return {
        "skwgrad": __version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "environment": {k: os.environ.get(k) for k in ENV_VARS},
        "forced_backend": forced or None,
        "runtimes": runtimes,
        "gpu": gpu,
        "identity": {"compiler": compiler_identity(), "source_hash": source_hash()},
        "caches": caches,
        "compiler": compiler,
        "summary": summary,
    }


def format_diagnosis(d: dict) -> str:
    from skwgrad.clikit import escape, table

    out = [f"skwgrad {d['skwgrad']} on Python {d['python']} ({d['platform']})", ""]
    rows = []
    for r in d["runtimes"]:
        b = r["bindings"]
        dev = r["device"]
        rows.append((
            r["backend"], f"{b['package']} {b['version']}" if b["installed"] else f"{b['package']}: not installed",
            r["driver_library"] or "not found",
            (f"{dev['name']} ({dev['arch']}, {dev['compute_units']} CUs)" + (f", driver {r['driver_version']}" if r["driver_version"] else ""))
            if dev else (r["error"] or "no device"),
        ))  # fmt: skip
    out += [table(rows, ["runtime", "bindings", "driver library", "device"]), ""]
    rows = []
    for c in d["caches"]:
        n = c["entries"]
        state = c["error"] or ("absent" if not c["exists"] else f"{n['current']} current / {n['stale']} stale")
        if n and n["stale"]:
            state += f" (other compiler: {n['stale_compiler']}, other kernel sources: {n['stale_source']})"
        rows.append((c["role"], c["path"], c["source"], "yes" if c["writable"] else "no", state))
    out += [table(rows, ["cache", "path", "from", "writable", "entries"]), ""]
    out.append(f"identity  {d['identity']['compiler']}, kernel sources {d['identity']['source_hash'][:16]}")
    out.append(f"compiler  {d['compiler']['note']}")
    env = {k: v for k, v in d["environment"].items() if v is not None}
    out.append("env       " + (", ".join(f"{k}={escape(v)}" for k, v in env.items()) or "no SKWGRAD_* variables set"))
    out += ["", *(f"- {escape(s)}" for s in d["summary"])]
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    from skwgrad.cli import main

    sys.exit(main(["doctor", *sys.argv[1:]]))
