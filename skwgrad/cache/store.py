"""The keyed kernel cache: an SQLite index (sqlite-utils, WAL) plus content-addressed code objects.

Layout of a cache directory::

    index.sqlite            entries / failures / tuned / meta tables (WAL journal)
    objects/ab/abcdef...    one file per distinct code object, named by its sha256
    objects/tmp/            partial writes; a leftover here is a write a kill interrupted

Key = sha256 of the canonical JSON of ``{family, spec, arch, compiler, source}``: the spec's
fields, the full target, the compiler identity (Triton version) and the hash of the kernel
sources and ABI version. An entry built by another compiler or from other kernel sources has
another key, so ``get(key_for(...))`` cannot reach it, and every lookup by spec fields
(``find``, ``entries``) filters on the running compiler and source hash as well.

Crash safety (a ``kill -9`` at any moment leaves a valid cache):

* an object is written to ``objects/tmp``, flushed, fsync'ed, and ``os.replace``'d to its final
  name (then the directory is fsync'ed), so a final name only ever holds a complete file;
* the index row is committed only after its object is in place, so a row never points at a
  missing object; a kill between the two leaves an orphan object, which ``verify`` tolerates and
  ``gc`` removes;
* SQLite's WAL journal (synchronous=FULL) makes every commit atomic and durable.

Concurrency (two builders at once lose nothing): objects are content-addressed (two writers of
one object write the same bytes, and ``os.replace`` is atomic); rows are ``INSERT OR IGNORE``
inside ``BEGIN IMMEDIATE`` transactions with a long busy timeout, so writers queue instead of
failing; ``gc`` spares orphan objects younger than ``min_age`` (a builder's object whose row is
still waiting for the write lock).

Integrity: the sha256 of an object is checked on every read (``load_binary``, ``export``,
``import_``, ``verify``). A mismatch raises ``CacheError`` and the bytes are never returned.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import sqlite3
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from skwgrad.abi.spec import KernelSpec
from skwgrad.errors import CacheError, SkwgradError

SCHEMA_VERSION = 1
DB_NAME = "index.sqlite"
OBJECTS = "objects"
TMP = "tmp"
BUSY_TIMEOUT_S = 120.0
EXPORT_FORMAT = "skwgrad-cache-export"
EXPORT_VERSION = 1
GC_MIN_AGE_S = 600.0
_SPEC_FIELDS = tuple(f.name for f in fields(KernelSpec))
# Spec fields that are also index columns (stable names), so find() can filter them in SQL.
_SQL_SPEC_COLUMNS = ("family", "variant", "dtype", "dw_dtype", "mode")


def default_cache_dir() -> Path:
    """``$SKWGRAD_CACHE``, else ``$XDG_CACHE_HOME/skwgrad``, else ``~/.cache/skwgrad``."""
    env = os.environ.get("SKWGRAD_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "skwgrad"


@functools.lru_cache(maxsize=1)
def _identity() -> tuple[str, str]:
    """(compiler identity, kernel source hash) of this process: part of every key."""
    # Triton-free: the GPU machine reading the cache has no (or another) compiler.
    from skwgrad.abi.identity import compiler_identity, source_hash

    return compiler_identity(), source_hash()


def current_identity() -> tuple[str, str]:
    return _identity()


def compute_key(spec_dict: dict, arch: str, compiler: str, source: str) -> str:
    payload = {"family": spec_dict["family"], "spec": spec_dict, "arch": arch, "compiler": compiler, "source": source}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    key: str
    spec: KernelSpec | None  # None only for a row of another skwgrad version whose spec no longer parses
    arch: str
    label: str
    metadata: dict = field(hash=False, compare=False, repr=False)
    sha256: str = ""
    nbytes: int = 0
    created: float = 0.0
    compiler: str = ""
    source_hash: str = ""

    @property
    def family(self) -> str:
        if self.spec:
            return self.spec.family
        return "wgrad_sk" if self.label.startswith("wgrad_sk_") else self.label.split("_", 1)[0]

    @property
    def current(self) -> bool:
        return (self.compiler, self.source_hash) == current_identity()

    @property
    def short(self) -> str:
        return f"{self.label} ({self.key[:12]}) on {self.arch}"


class Cache:
    """A kernel cache directory. See the module docstring for layout and guarantees."""

    def __init__(self, path=None):
        self.path = Path(path).expanduser() if path is not None else default_cache_dir()
        self._lock = threading.RLock()
        self.readonly = False
        if self.path.exists() and not self.path.is_dir():
            raise CacheError(f"cache path {self.path} is a file, not a directory; pass --cache DIR (or set SKWGRAD_CACHE) to a directory")
        try:
            (self.path / OBJECTS / TMP).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            if not (self.path / DB_NAME).is_file():
                raise CacheError(f"cannot create the cache at {self.path}: {e.strerror or e}; pass --cache DIR (or set SKWGRAD_CACHE) to a writable directory") from None
            self.readonly = True
        if not self.readonly and not os.access(self.path, os.W_OK):
            self.readonly = True
        self.db_path = self.path / DB_NAME
        if self.readonly and not self.db_path.is_file():
            raise CacheError(
                f"the cache at {self.path} is read-only here and holds no index yet; build into a directory "
                f"you can write (--cache DIR), or `skwgrad cache import FILE` there"
            )
        self._open()

    # -- opening -----------------------------------------------------------------------------
    def _open(self):
        import sqlite_utils

        try:
            if self.readonly:
                conn = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            else:
                conn = sqlite3.connect(str(self.db_path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            self.db = sqlite_utils.Database(conn)
            if not self.readonly:
                if self.db.journal_mode != "wal":
                    self.db.enable_wal()
                conn.execute("PRAGMA synchronous = FULL")
                self._create_schema()
            self._check_schema()
        except sqlite3.DatabaseError as e:
            raise CacheError(
                f"cannot open the cache index {self.db_path}: {e}. If the file is damaged, move the cache "
                f"directory aside (nothing is deleted) and rebuild with `skwgrad compile-all --cache DIR`, "
                f"or pass --cache DIR to use another cache"
            ) from None

    def _create_schema(self):
        with self._write():
            db = self.db
            if "meta" not in db.table_names():
                db["meta"].create({"name": str, "value": str}, pk="name")
                db.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('schema', ?)", [str(SCHEMA_VERSION)])
            if "entries" not in db.table_names():
                db["entries"].create(
                    {
                        "key": str, "label": str, "arch": str,
                        "family": str, "variant": str, "dtype": str, "dw_dtype": str, "mode": str,
                        "spec_json": str, "compiler": str, "source_hash": str,
                        "sha256": str, "nbytes": int, "metadata_json": str,
                        "threads": int, "shared": int, "vgpr": int, "sgpr": int,
                        "vgpr_spills": int, "sgpr_spills": int, "scratch": int,
                        "compile_seconds": float, "created": float,
                    },
                    pk="key",
                )  # fmt: skip
                db["entries"].create_index(["arch", "compiler", "source_hash", "family"])
                db["entries"].create_index(["label"])
                db["entries"].create_index(["sha256"])
            if "failures" not in db.table_names():
                db["failures"].create(
                    {
                        "key": str, "label": str, "arch": str, "family": str, "spec_json": str,
                        "compiler": str, "source_hash": str, "kind": str, "message": str,
                        "time": float, "attempts": int,
                    },
                    pk="key",
                )  # fmt: skip
            if "tuned" not in db.table_names():
                db["tuned"].create(
                    {
                        "arch": str, "cus": int, "problem_key": str, "compiler": str,
                        "source_hash": str, "choice_json": str, "time": float,
                    },
                    pk=("arch", "cus", "problem_key", "compiler", "source_hash"),
                )  # fmt: skip

    def _check_schema(self):
        names = self.db.table_names()
        if "meta" not in names or "entries" not in names:
            raise CacheError(f"{self.db_path} is not a skwgrad cache index; pass --cache DIR to a skwgrad cache directory")
        row = self.db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
        if row is None or int(row[0]) > SCHEMA_VERSION:
            raise CacheError(f"the cache at {self.path} was written by a newer skwgrad (schema {row and row[0]}); upgrade skwgrad or use another --cache DIR")

    class _Tx:
        def __init__(self, cache):
            self.cache = cache

        def __enter__(self):
            self.cache._lock.acquire()
            try:
                self.cache.db.conn.execute("BEGIN IMMEDIATE")
            except BaseException:
                self.cache._lock.release()
                raise
            return self.cache.db.conn

        def __exit__(self, et, ev, tb):
            conn = self.cache.db.conn
            try:
                if et is None:
                    conn.execute("COMMIT")
                elif conn.in_transaction:
                    conn.execute("ROLLBACK")
            finally:
                self.cache._lock.release()
            return False

    def _write(self):
        if self.readonly:
            raise CacheError(f"the cache at {self.path} is read-only here; write to a cache directory you own (--cache DIR)")
        return Cache._Tx(self)

    def _rows(self, sql: str, params=()) -> list[dict]:
        with self._lock:
            try:
                return list(self.db.query(sql, params))
            except sqlite3.DatabaseError as e:
                raise CacheError(f"cannot read the cache index {self.db_path}: {e}; run `skwgrad cache verify --cache {self.path}`") from None

    def close(self):
        with self._lock:
            self.db.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"Cache({str(self.path)!r})"

    # -- keys --------------------------------------------------------------------------------
    @staticmethod
    def key_for(spec: KernelSpec, arch: str) -> str:
        from skwgrad.abi.arch import get_arch

        get_arch(arch)
        compiler, source = _identity()
        return compute_key(spec.to_dict(), arch, compiler, source)

    # -- objects -----------------------------------------------------------------------------
    def object_path(self, sha: str) -> Path:
        return self.path / OBJECTS / sha[:2] / sha

    def _object_ok(self, sha: str, nbytes: int | None = None) -> bool:
        p = self.object_path(sha)
        try:
            data = p.read_bytes()
        except OSError:
            return False
        return (nbytes is None or len(data) == nbytes) and _sha256(data) == sha

    def _write_object(self, data: bytes, sha: str | None = None) -> str:
        sha = sha or _sha256(data)
        final = self.object_path(sha)
        if self._object_ok(sha, len(data)):
            return sha
        final.parent.mkdir(parents=True, exist_ok=True)
        with _replacing(final, dir=self.path / OBJECTS / TMP, prefix=f"{sha[:16]}.", suffix=".tmp") as tmp:
            Path(tmp).write_bytes(data)
        _fsync_dir(final.parent)
        return sha

    def _read_object(self, sha: str, nbytes: int, what: str) -> bytes:
        p = self.object_path(sha)
        hint = f"run `skwgrad cache verify --cache {self.path}` to list damaged entries, then re-run `skwgrad compile-all` with the same options to rebuild them"
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            raise CacheError(f"cache entry {what}: its code object {p} is missing; {hint}") from None
        except OSError as e:
            raise CacheError(f"cache entry {what}: cannot read its code object {p}: {e.strerror or e}; {hint}") from None
        got = _sha256(data)
        if got != sha or len(data) != nbytes:
            raise CacheError(
                f"cache entry {what}: code object {p} is corrupt (sha256 {got[:16]}..., {len(data)} bytes; "
                f"expected {sha[:16]}..., {nbytes} bytes) and was not used; {hint}"
            )
        return data

    # -- rows <-> entries --------------------------------------------------------------------
    def _entry(self, row: dict) -> CacheEntry:
        try:
            spec = KernelSpec.from_dict(json.loads(row["spec_json"]))
        except (SkwgradError, TypeError, ValueError) as e:
            if (row["compiler"], row["source_hash"]) == _identity():
                raise CacheError(
                    f"cache entry {row['label']} ({row['key'][:12]}) has a spec this skwgrad cannot read ({e}); "
                    f"run `skwgrad cache gc --cache {self.path}` and rebuild"
                ) from None
            spec = None
        return CacheEntry(
            key=row["key"], spec=spec, arch=row["arch"], label=row["label"],
            metadata=json.loads(row["metadata_json"] or "{}"), sha256=row["sha256"], nbytes=row["nbytes"],
            created=row["created"], compiler=row["compiler"], source_hash=row["source_hash"],
        )  # fmt: skip

    @staticmethod
    def _row_for(key: str, spec: KernelSpec, arch: str, compiler: str, source: str, sha: str, nbytes: int, metadata: dict, created: float) -> dict:
        amd = metadata.get("amd") or {}
        return {
            "key": key, "label": spec.label, "arch": arch,
            "family": spec.family, "variant": spec.variant, "dtype": spec.dtype, "dw_dtype": spec.dw_dtype, "mode": spec.mode,
            "spec_json": spec.canonical_json(), "compiler": compiler, "source_hash": source,
            "sha256": sha, "nbytes": nbytes, "metadata_json": json.dumps(metadata, sort_keys=True),
            "threads": metadata.get("threads"), "shared": metadata.get("shared"),
            "vgpr": amd.get("vgpr_count"), "sgpr": amd.get("sgpr_count"),
            "vgpr_spills": amd.get("vgpr_spill_count"), "sgpr_spills": amd.get("sgpr_spill_count"),
            "scratch": amd.get("scratch_bytes"),
            "compile_seconds": metadata.get("compile_seconds"), "created": created,
        }  # fmt: skip

    def _insert_row(self, conn, row: dict, replace: bool = False):
        cols = list(row)
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        cur = conn.execute(
            f"{verb} INTO entries ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
            [row[c] for c in cols],
        )
        return cur.rowcount

    # -- public API --------------------------------------------------------------------------
    def put(self, compiled) -> str:
        """Store a ``CompiledKernel``; returns its key. Idempotent: an entry already stored (with
        an intact object) is kept as it is. A damaged object of an existing entry is replaced."""
        spec, arch, binary, metadata = compiled.spec, compiled.arch, bytes(compiled.binary), dict(compiled.metadata)
        compiler, source = _identity()
        built_by = metadata.get("compiler")
        if built_by is not None and built_by != compiler:
            raise CacheError(
                f"{spec.label} on {arch} was compiled by {built_by}, this skwgrad uses {compiler}: refusing to "
                f"store it under this compiler's key; run the build with the same Triton everywhere"
            )
        metadata.pop("_asm", None)
        key = self.key_for(spec, arch)
        sha = _sha256(binary)
        existing = self._rows("SELECT sha256, nbytes FROM entries WHERE key = ?", [key])
        if existing and self._object_ok(existing[0]["sha256"], existing[0]["nbytes"]):
            if self._rows("SELECT key FROM failures WHERE key = ?", [key]):
                with self._write() as conn:
                    conn.execute("DELETE FROM failures WHERE key = ?", [key])
            return key
        self._write_object(binary, sha)
        metadata.setdefault("build_time", time.time())
        row = self._row_for(key, spec, arch, compiler, source, sha, len(binary), metadata, time.time())
        with self._write() as conn:
            now = conn.execute("SELECT sha256, nbytes FROM entries WHERE key = ?", [key]).fetchone()
            if now is None:
                self._insert_row(conn, row)
            elif not self._object_ok(now[0], now[1]):
                # The stored row's object is missing or damaged: this rebuild replaces it.
                self._insert_row(conn, row, replace=True)
            conn.execute("DELETE FROM failures WHERE key = ?", [key])
        return key

    def has(self, key: str) -> bool:
        """An entry with this key exists and its object file is present (not hash-checked)."""
        rows = self._rows("SELECT sha256 FROM entries WHERE key = ?", [key])
        return bool(rows) and self.object_path(rows[0]["sha256"]).is_file()

    def intact(self, key: str) -> bool:
        """An entry with this key exists and its object passes the sha256 check."""
        rows = self._rows("SELECT sha256, nbytes FROM entries WHERE key = ?", [key])
        return bool(rows) and self._object_ok(rows[0]["sha256"], rows[0]["nbytes"])

    def get(self, key: str) -> CacheEntry:
        rows = self._rows("SELECT * FROM entries WHERE key = ?", [key])
        if not rows:
            raise CacheError(f"no cache entry with key {key} in {self.path}; build it with `skwgrad compile-all --cache {self.path}`")
        return self._entry(rows[0])

    def lookup(self, key_or_label: str, arch: str | None = None) -> list[CacheEntry]:
        """Entries whose key starts with ``key_or_label`` (at least 6 hex digits) or whose label is it."""
        q = key_or_label.strip()
        rows = []
        if len(q) >= 6 and all(ch in "0123456789abcdef" for ch in q.lower()):
            rows = self._rows("SELECT * FROM entries WHERE key LIKE ?", [q.lower() + "%"])
        if not rows:
            rows = self._rows("SELECT * FROM entries WHERE label = ?", [q])
        if arch:
            rows = [r for r in rows if r["arch"] == arch]
        return sorted((self._entry(r) for r in rows), key=lambda e: (not e.current, e.arch, e.label))

    def load_binary(self, entry_or_key, *, allow_stale: bool = False) -> bytes:
        """The code object's bytes, sha256-checked. Entries of another compiler or kernel
        source are refused unless ``allow_stale`` (for inspection and export only)."""
        entry = entry_or_key if isinstance(entry_or_key, CacheEntry) else self.get(entry_or_key)
        if not allow_stale and (entry.compiler, entry.source_hash) != _identity():
            compiler, source = _identity()
            raise CacheError(
                f"cache entry {entry.short} was built by {entry.compiler} from kernel sources {entry.source_hash[:12]}; "
                f"this skwgrad is {compiler} with sources {source[:12]}: it is never served. Rebuild with `skwgrad compile-all`"
            )
        return self._read_object(entry.sha256, entry.nbytes, entry.short)

    def find(self, arch: str, **spec_fields) -> list[CacheEntry]:
        """Entries for ``arch`` built by this compiler from these kernel sources whose spec
        fields equal ``spec_fields`` (e.g. ``family='wgrad_sk', dtype='bf16', mode='dp_sk'``)."""
        unknown = sorted(set(spec_fields) - set(_SPEC_FIELDS))
        if unknown:
            raise CacheError(f"find(): {', '.join(unknown)} not KernelSpec field(s); use {', '.join(_SPEC_FIELDS)}")
        compiler, source = _identity()
        sql = "SELECT * FROM entries WHERE arch = ? AND compiler = ? AND source_hash = ?"
        params = [arch, compiler, source]
        for name in _SQL_SPEC_COLUMNS:
            if name in spec_fields:
                sql += f" AND {name} = ?"
                params.append(spec_fields[name])
        out = []
        for row in self._rows(sql + " ORDER BY label", params):
            e = self._entry(row)
            if all(getattr(e.spec, k) == v for k, v in spec_fields.items()):
                out.append(e)
        return out

    def other_versions(self, arch: str) -> int:
        """Entries for ``arch`` built by another compiler or from other kernel sources: kept,
        never served (what a "no cached kernel" message should mention after an upgrade)."""
        compiler, source = _identity()
        rows = self._rows(
            "SELECT COUNT(*) AS n FROM entries WHERE arch = ? AND NOT (compiler = ? AND source_hash = ?)",
            [arch, compiler, source],
        )
        return int(rows[0]["n"]) if rows else 0

    def _entry_rows(self, arch: str | None, all_versions: bool) -> list[dict]:
        """Index rows of one arch (or all), of this compiler and kernel sources unless ``all_versions``."""
        sql, params = "SELECT * FROM entries WHERE 1", []
        if arch:
            sql += " AND arch = ?"
            params.append(arch)
        if not all_versions:
            sql += " AND compiler = ? AND source_hash = ?"
            params += list(_identity())
        return self._rows(sql + " ORDER BY arch, label", params)

    def entries(self, arch: str | None = None, all_versions: bool = False) -> list[CacheEntry]:
        return [self._entry(r) for r in self._entry_rows(arch, all_versions)]

    def current_keys(self, arch: str | None = None) -> set[str]:
        sql, params = "SELECT key FROM entries WHERE compiler = ? AND source_hash = ?", list(_identity())
        if arch:
            sql += " AND arch = ?"
            params.append(arch)
        return {r["key"] for r in self._rows(sql, params)}

    # -- failures ----------------------------------------------------------------------------
    def record_failure(self, spec: KernelSpec, arch: str, message: str, kind: str = "compile") -> str:
        key = self.key_for(spec, arch)
        compiler, source = _identity()
        with self._write() as conn:
            conn.execute(
                "INSERT INTO failures (key, label, arch, family, spec_json, compiler, source_hash, kind, message, time, attempts) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1) ON CONFLICT(key) DO UPDATE SET "
                "kind = excluded.kind, message = excluded.message, time = excluded.time, attempts = attempts + 1",
                [key, spec.label, arch, spec.family, spec.canonical_json(), compiler, source, kind, str(message), time.time()],
            )
        return key

    def failures(self, all_versions: bool = False) -> list[dict]:
        sql, params = "SELECT * FROM failures", []
        if not all_versions:
            sql += " WHERE compiler = ? AND source_hash = ?"
            params = list(_identity())
        return self._rows(sql + " ORDER BY arch, label", params)

    # -- tuned choices -----------------------------------------------------------------------
    def remember_tuned(self, arch: str, cus: int, problem_key: str, choice: dict) -> None:
        compiler, source = _identity()
        text = json.dumps(choice, sort_keys=True)
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO tuned (arch, cus, problem_key, compiler, source_hash, choice_json, time) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [arch, int(cus), problem_key, compiler, source, text, time.time()],
            )

    def tuned(self, arch: str, cus: int, problem_key: str) -> dict | None:
        rows = self._rows(
            "SELECT choice_json FROM tuned WHERE arch = ? AND cus = ? AND problem_key = ? AND compiler = ? AND source_hash = ?",
            [arch, int(cus), problem_key, *_identity()],
        )
        return json.loads(rows[0]["choice_json"]) if rows else None

    # -- maintenance -------------------------------------------------------------------------
    def verify(self) -> list[str]:
        """Problems found: a damaged index, rows whose object is missing or corrupt, rows whose key
        does not match their contents. [] when clean. Orphan objects and temp files (what a kill
        between writing an object and committing its row leaves) are not problems: see ``orphans``."""
        problems = []
        try:
            with self._lock:
                check = [r[0] for r in self.db.execute("PRAGMA quick_check").fetchall()]
        except sqlite3.DatabaseError as e:
            check = [str(e)]
        if check != ["ok"]:
            problems.append(f"index {self.db_path}: sqlite quick_check says {'; '.join(check)}")
        for row in self._rows("SELECT * FROM entries ORDER BY arch, label"):
            what = f"{row['label']} ({row['key'][:12]}) on {row['arch']}"
            try:
                spec_dict = json.loads(row["spec_json"])
                if compute_key(spec_dict, row["arch"], row["compiler"], row["source_hash"]) != row["key"]:
                    problems.append(f"{what}: the key does not match the entry's spec/arch/compiler/source")
            except (ValueError, KeyError, TypeError) as e:
                problems.append(f"{what}: unreadable spec ({e})")
            try:
                self._read_object(row["sha256"], row["nbytes"], what)
            except CacheError as e:
                problems.append(str(e).split("; run `skwgrad cache verify")[0])
        return problems

    def orphans(self, min_age: float = 0.0) -> list[Path]:
        """Object files no row refers to, and leftover temp files, older than ``min_age`` seconds."""
        referenced = {r["sha256"] for r in self._rows("SELECT DISTINCT sha256 FROM entries")}
        now = time.time()
        out = []
        root = self.path / OBJECTS
        if not root.is_dir():
            return out
        for sub in sorted(root.iterdir()):
            if not sub.is_dir():
                continue
            for p in sorted(sub.iterdir()):
                if sub.name != TMP and p.name in referenced:
                    continue
                try:
                    if now - p.stat().st_mtime >= min_age:
                        out.append(p)
                except FileNotFoundError:
                    pass
        return out

    def gc(self, min_age: float = GC_MIN_AGE_S) -> dict:
        """Drop entries, failures and tuned choices of other compiler/source versions, then
        object files nothing refers to (and temp files) older than ``min_age`` seconds."""
        compiler, source = _identity()
        with self._write() as conn:
            stale = conn.execute("DELETE FROM entries WHERE compiler != ? OR source_hash != ?", [compiler, source]).rowcount
            stale_f = conn.execute("DELETE FROM failures WHERE compiler != ? OR source_hash != ?", [compiler, source]).rowcount
            stale_t = conn.execute("DELETE FROM tuned WHERE compiler != ? OR source_hash != ?", [compiler, source]).rowcount
        removed, freed = 0, 0
        for p in self.orphans(min_age):
            try:
                size = p.stat().st_size
                p.unlink()
                removed += 1
                freed += size
            except FileNotFoundError:
                pass
        return {
            "stale_entries": stale,
            "stale_failures": stale_f,
            "stale_tuned": stale_t,
            "orphan_files": removed,
            "bytes_freed": freed,
        }

    # -- export / import ---------------------------------------------------------------------
    def export(self, file, *, arch: str | None = None, all_versions: bool = False) -> dict:
        """Write one portable tar (gzip'ed when the name ends in .gz/.tgz) holding ``manifest.json``
        (entry rows and tuned choices) and ``objects/<sha256>``. Every object is verified first."""
        file = Path(file)
        rows = self._entry_rows(arch, all_versions)
        tuned = self._rows("SELECT * FROM tuned" + ("" if all_versions else " WHERE compiler = ? AND source_hash = ?"), [] if all_versions else list(_identity()))
        compiler, source = _identity()
        manifest = {
            "format": EXPORT_FORMAT, "version": EXPORT_VERSION, "created": time.time(),
            "compiler": compiler, "source_hash": source, "entries": rows, "tuned": tuned,
        }  # fmt: skip
        mode = "w:gz" if file.name.endswith((".gz", ".tgz")) else "w"
        file.parent.mkdir(parents=True, exist_ok=True)
        done = set()
        with _replacing(file, dir=file.parent, prefix=file.name + ".", suffix=".part") as tmp:
            with tarfile.open(tmp, mode) as tar:
                _add_bytes(tar, "manifest.json", json.dumps(manifest, sort_keys=True, indent=1).encode())
                for r in rows:
                    if r["sha256"] in done:
                        continue
                    data = self._read_object(r["sha256"], r["nbytes"], f"{r['label']} ({r['key'][:12]}) on {r['arch']}")
                    _add_bytes(tar, f"objects/{r['sha256']}", data)
                    done.add(r["sha256"])
        return {"entries": len(rows), "objects": len(done), "tuned": len(tuned), "file": str(file)}

    def import_(self, file) -> dict:
        """Add the entries of an ``export`` file. Every object's sha256 and every entry's key are
        checked before anything is written; nothing is imported from a damaged file. Entries
        already here are kept as they are (a damaged local object is replaced by the good one)."""
        file = Path(file)
        try:
            manifest, sizes = self._scan_export(file)
        except (tarfile.TarError, OSError, EOFError, ValueError) as e:
            raise CacheError(f"cannot read the export file {file}: {e}; export it again with `skwgrad cache export FILE`") from None
        entries = manifest["entries"]
        imported = kept = 0
        try:
            with tarfile.open(file, "r:*") as tar:
                for member in tar:
                    if member.isfile() and member.name.startswith("objects/"):
                        sha = member.name.split("/", 1)[1]
                        data = tar.extractfile(member).read()
                        if _sha256(data) != sha:  # the file changed since the scan
                            raise CacheError(f"export file {file}: object {sha[:16]}... changed while importing; nothing more imported")
                        self._write_object(data, sha)
        except (tarfile.TarError, OSError, EOFError) as e:
            raise CacheError(f"cannot read the export file {file}: {e}") from None
        with self._write() as conn:
            for r in entries:
                existing = conn.execute("SELECT sha256, nbytes FROM entries WHERE key = ?", [r["key"]]).fetchone()
                if existing is not None and self._object_ok(existing[0], existing[1]):
                    kept += 1
                    continue
                row = {k: r.get(k) for k in _ENTRY_COLUMNS}
                self._insert_row(conn, row, replace=existing is not None)
                imported += 1
            for t in manifest.get("tuned", []):
                conn.execute(
                    "INSERT OR IGNORE INTO tuned (arch, cus, problem_key, compiler, source_hash, choice_json, time) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [t["arch"], t["cus"], t["problem_key"], t["compiler"], t["source_hash"], t["choice_json"], t["time"]],
                )
        return {"imported": imported, "already_present": kept, "objects": len(sizes), "tuned": len(manifest.get("tuned", []))}

    def _scan_export(self, file: Path):
        manifest = None
        sizes = {}
        with tarfile.open(file, "r:*") as tar:
            for member in tar:
                if member.name == "manifest.json" and member.isfile():
                    manifest = json.loads(tar.extractfile(member).read())
                elif member.isfile() and member.name.startswith("objects/"):
                    sha = member.name.split("/", 1)[1]
                    data = tar.extractfile(member).read()
                    got = _sha256(data)
                    if got != sha:
                        raise CacheError(f"export file {file}: object {sha[:16]}... is corrupt (sha256 {got[:16]}...); nothing was imported. Export it again")
                    sizes[sha] = len(data)
        if not isinstance(manifest, dict) or manifest.get("format") != EXPORT_FORMAT:
            raise CacheError(f"{file} is not a skwgrad cache export (no manifest.json of format {EXPORT_FORMAT}); nothing was imported")
        if manifest.get("version", 0) > EXPORT_VERSION:
            raise CacheError(f"{file} was exported by a newer skwgrad (format version {manifest['version']}); upgrade skwgrad to import it")
        for r in manifest["entries"]:
            what = f"{r.get('label')} ({str(r.get('key'))[:12]}) on {r.get('arch')}"
            try:
                good = compute_key(json.loads(r["spec_json"]), r["arch"], r["compiler"], r["source_hash"]) == r["key"]
            except (KeyError, TypeError, ValueError):
                good = False
            if not good:
                raise CacheError(f"export file {file}: entry {what} has a key that does not match its spec; nothing was imported")
            if sizes.get(r["sha256"]) != r["nbytes"]:
                raise CacheError(f"export file {file}: entry {what} has no intact object ({r['sha256'][:16]}...); nothing was imported")
        return manifest, sizes


_ENTRY_COLUMNS = (
    "key", "label", "arch", "family", "variant", "dtype", "dw_dtype", "mode", "spec_json", "compiler",
    "source_hash", "sha256", "nbytes", "metadata_json", "threads", "shared", "vgpr", "sgpr",
    "vgpr_spills", "sgpr_spills", "scratch", "compile_seconds", "created",
)  # fmt: skip


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


@contextlib.contextmanager
def _replacing(final: Path, *, dir: Path, prefix: str, suffix: str):
    """Yield a temp file path beside ``final``; once the body has filled it, fsync it and
    ``os.replace`` it onto ``final`` (atomic). On any failure the temp file is removed and
    ``final`` is untouched: a kill at any moment leaves either the old file or the new one."""
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=dir)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _fsync_dir(path: Path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
