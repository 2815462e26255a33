"""The keyed kernel cache: an SQLite index (sqlite-utils, WAL) plus content-addressed code objects.

Layout of a cache directory::

    skwgrad-cache.json      marker: this directory is a skwgrad cache, with its id
    index.sqlite            entries / failures / tuned / models / meta tables (WAL journal)
    objects/ab/abcdef...    one file per distinct code object, named by its sha256
    objects/tmp/            partial writes; a leftover here is a write a kill interrupted
    rows/12/1234...json     one record per entry (its index row), written before the row is
                            committed: the index can be rebuilt from these (``rebuild_index``)

Key = sha256 of the canonical JSON of ``{family, spec, arch, compiler, source}``: the spec's
fields, the full target, the compiler identity (Triton version) and the hash of the kernel
sources and ABI version. An entry built by another compiler or from other kernel sources has
another key, so ``get(key_for(...))`` cannot reach it, and every lookup by spec fields
(``find``, ``entries``) filters on the running compiler and source hash as well.

Crash safety (a ``kill -9`` at any moment leaves a valid cache):

* an object (then its row record) is written to a temp file, flushed, fsync'ed, and
  ``os.replace``'d to its final name (then the directory is fsync'ed), so a final name only ever
  holds a complete file;
* the index row is committed only after its object and row record are in place, so a row never
  points at a missing object; a kill between the two leaves an entry the index does not list yet,
  which ``verify`` reports and ``rebuild_index`` adds;
* SQLite's WAL journal (synchronous=FULL) makes every commit atomic and durable.

An index that is lost (deleted, emptied, replaced by another cache's or another program's file,
or a ``-wal`` deleted while it held commits) cannot go unnoticed: ``verify`` compares the index
with the row records and objects and with the marker's id, and ``rebuild_index`` restores it.

Concurrency (two builders at once lose nothing): objects are content-addressed (two writers of
one object write the same bytes, and ``os.replace`` is atomic); rows are ``INSERT OR IGNORE``
inside ``BEGIN IMMEDIATE`` transactions with a long busy timeout, so writers queue instead of
failing. ``gc`` deletes objects only inside a write transaction, after checking again that no
row names them, and a writer checks, inside its own write transaction, that the object its new
row names is still there (rewriting it if not): the two are serialised by the write lock, so gc
can never delete an object a concurrent writer just reused. Reusing an object also touches it.

Read-only and shared caches: a directory the process cannot write (a read-only mount, another
user's cache) is opened read-only: SQLite ``mode=ro``, or ``immutable=1`` when even that needs
write access (a WAL index in a read-only directory). The path is percent-encoded into the URI.
``SKWGRAD_SYSTEM_CACHE`` names a read-only system layer below the user cache: lookups see both,
the user layer wins on conflicts, every write (tuning records included) goes to the user layer.

Integrity: the sha256 of an object is checked on every read (``load_binary``, ``export``,
``import_``, ``verify``), and the object is bound to its row by its own metadata (kernel name,
kernarg layout, resources: ``skwgrad.cache.validate.bind_object``). A mismatch raises
``DamagedEntryError`` and the bytes are never returned.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import sqlite3
import tempfile
import threading
import time
import urllib.parse
import uuid
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path

from skwgrad.abi.spec import KernelSpec
from skwgrad.cache.validate import ENTRY_COLUMNS, IndexLost, bind_object, printable
from skwgrad.errors import CacheError, DamagedEntryError, SkwgradError

SCHEMA_VERSION = 1
DB_NAME = "index.sqlite"
MARKER = "skwgrad-cache.json"
MARKER_FORMAT = "skwgrad-cache"
OBJECTS = "objects"
ROWS = "rows"
TMP = "tmp"
BUSY_TIMEOUT_S = 120.0
EXPORT_FORMAT = "skwgrad-cache-export"
EXPORT_VERSION = 1
GC_MIN_AGE_S = 600.0
IN_FLIGHT_S = 120.0  # an unindexed object younger than this may be a running build's: a note, not a problem
FILE_MODE = 0o644  # objects, row records and exports: readable by every user of a shared cache
SQLITE_MAGIC = b"SQLite format 3\x00"
SYSTEM_ENV = "SKWGRAD_SYSTEM_CACHE"
_SPEC_FIELDS = tuple(f.name for f in fields(KernelSpec))
# Spec fields that are also index columns (stable names), so find() can filter them in SQL.
_SQL_SPEC_COLUMNS = ("family", "variant", "dtype", "dw_dtype", "mode")
_ENTRY_COLUMNS = ENTRY_COLUMNS


def _home() -> Path:
    """The user's home: ``$HOME`` when it is an absolute path, else the password database's."""
    home = os.environ.get("HOME", "")
    if home and os.path.isabs(home):
        return Path(home)
    try:
        import pwd

        pw = pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError, OSError):
        pw = ""
    if pw and os.path.isabs(pw) and pw != "/":
        return Path(pw)
    raise CacheError(
        "no usable home directory ($HOME is empty or relative and the user has none): "
        "set SKWGRAD_CACHE or XDG_CACHE_HOME to an absolute directory, or pass --cache DIR"
    )


def default_cache_dir() -> Path:
    """``$SKWGRAD_CACHE``, else ``$XDG_CACHE_HOME/skwgrad``, else ``$HOME/.cache/skwgrad``.

    As the XDG base directory spec says, ``XDG_CACHE_HOME`` counts only when it is set to an
    absolute path (empty or relative: ignored), and an empty ``HOME`` never gives ``/.cache``."""
    env = os.environ.get("SKWGRAD_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "skwgrad"
    return _home() / ".cache" / "skwgrad"


def system_cache_dir() -> Path | None:
    env = os.environ.get(SYSTEM_ENV, "")
    return Path(env).expanduser() if env else None


def _when_unlocked(fn):
    """Run ``fn`` (a statement that changes the index's journal mode or schema), again while SQLite
    answers SQLITE_BUSY / SQLITE_LOCKED, for up to BUSY_TIMEOUT_S. SQLite gives that answer at once,
    without waiting out busy_timeout, when two connections holding shared locks both ask for the
    write lock: two processes opening a new cache at the same moment, both switching it to WAL."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.005
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as e:
            busy = getattr(e, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)  # (absent when raised by hand)
            if not busy or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(2 * delay, 0.25)


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


def sqlite_uri(path: Path, **params) -> str:
    """A ``file:`` URI for ``path`` with every special character (``?``, ``#``, ``%``, ...)
    percent-encoded, so SQLite opens exactly that file."""
    q = urllib.parse.quote(str(Path(path).absolute()), safe="/")
    return f"file:{q}" + ("?" + urllib.parse.urlencode(params) if params else "")


def row_for(key: str, spec: KernelSpec, arch: str, compiler: str, source: str, sha: str, nbytes: int, metadata: dict, created: float) -> dict:
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
    layer: str = field(default="user", compare=False)  # "user" or "system": which cache holds it

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
        return f"{printable(self.label)} ({self.key[:12]}) on {self.arch}"


def _is_sha(s) -> bool:
    return isinstance(s, str) and len(s) == 64 and all(c in "0123456789abcdef" for c in s)


class Cache:
    """A kernel cache directory. See the module docstring for layout and guarantees.

    ``create``: make the cache when ``path`` does not exist (builders). Readers pass
    ``create=False`` and get a ``CacheError`` for a path that is not a cache. ``readonly``: never
    write, even where the directory is writable. ``system``: the read-only layer below this one
    (default ``$SKWGRAD_SYSTEM_CACHE``; ``False`` for none)."""

    def __init__(self, path=None, *, create: bool = True, readonly: bool = False, system=None, immutable: bool = False):
        self.path = Path(path).expanduser() if path is not None else default_cache_dir()
        self._want_immutable = bool(immutable)
        readonly = readonly or self._want_immutable
        self._lock = threading.RLock()
        self.readonly = bool(readonly)
        self.damaged: list[str] = []  # entries find()/entries() skipped, one message each
        self._warned: set[str] = set()
        self._bound: set[tuple[str, str]] = set()  # (key, sha) pairs whose object passed bind_object
        self.recovered: str = ""  # what opening found and repaired (an empty index recreated, ...)
        if self.path.exists() and not self.path.is_dir():
            raise CacheError(f"cache path {self.path} is a file, not a directory; pass --cache DIR (or set SKWGRAD_CACHE) to a directory")
        if not create and self.path.is_dir() and not (self.path / DB_NAME).exists() and not (self.path / MARKER).exists():
            raise CacheError(
                f"{self.path} is not a skwgrad cache (no {DB_NAME}); pass --cache DIR (or set SKWGRAD_CACHE) to a cache, "
                f"or build one with `skwgrad compile-all --cache {self.path}`"
            )
        if not self.path.exists():
            if not create or self.readonly:
                raise CacheError(
                    f"there is no skwgrad cache at {self.path}; pass --cache DIR (or set SKWGRAD_CACHE) to an existing "
                    f"cache, or build one with `skwgrad compile-all --cache {self.path}` / `skwgrad cache import FILE --cache {self.path}`"
                )
        if not self.readonly:
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
        self.marker = self._read_marker()
        self._open()
        self.system: Cache | None = None
        sys_path = system_cache_dir() if system is None else (Path(system) if system else None)
        if sys_path is not None and _same(sys_path, self.path) is False:
            # Immutable: SQLite never writes (no -shm, no -wal, no locks) and takes the file as
            # it is. Publish a system cache by replacing it whole (see README), never in place.
            try:
                self.system = Cache(sys_path, create=False, immutable=True, system=False)
            except CacheError as e:
                raise CacheError(f"the system cache layer (${SYSTEM_ENV}={sys_path}): {e}; or unset {SYSTEM_ENV}") from None

    # -- opening -----------------------------------------------------------------------------
    def _read_marker(self) -> dict | None:
        p = self.path / MARKER
        try:
            m = json.loads(p.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise CacheError(f"{p} is unreadable ({e}); it marks a skwgrad cache: restore it or pass --cache DIR to another cache") from None
        if not isinstance(m, dict) or m.get("format") != MARKER_FORMAT or not isinstance(m.get("cache_id"), str):
            raise CacheError(f"{p} is not a skwgrad cache marker; pass --cache DIR to a skwgrad cache directory")
        return m

    def _write_marker(self, cache_id: str):
        data = json.dumps({"format": MARKER_FORMAT, "cache_id": cache_id, "created": time.time()}, sort_keys=True).encode()
        self._atomic_write(self.path / MARKER, data, self.path / OBJECTS / TMP)
        self.marker = {"format": MARKER_FORMAT, "cache_id": cache_id}

    def _damaged_index(self, why) -> CacheError:
        return IndexLost(
            f"cannot open the cache index {self.db_path}: {why}. If the file is damaged, move the cache "
            f"directory aside (nothing is deleted) and rebuild with `skwgrad compile-all --cache DIR`, or restore the "
            f"index from the cache itself with `skwgrad cache rebuild-index --cache {self.path}`; or pass --cache DIR to use another cache"
        )

    def _connect(self):
        if not self.readonly:
            return sqlite3.connect(str(self.db_path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        # Read-only: mode=ro works while the -shm can be used; a WAL index in a directory we
        # cannot write (a read-only mount, another user's cache) needs immutable=1.
        last = None
        tries = [{"mode": "ro", "immutable": "1"}] if self._want_immutable else [{"mode": "ro"}, {"mode": "ro", "immutable": "1"}]
        for params in tries:
            try:
                conn = sqlite3.connect(sqlite_uri(self.db_path, **params), uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
                conn.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
                self.immutable = "immutable" in params
                return conn
            except sqlite3.OperationalError as e:
                last = e
        raise sqlite3.OperationalError(str(last))

    def _open(self):
        import sqlite_utils

        self.immutable = False
        try:
            size = self.db_path.stat().st_size
        except FileNotFoundError:
            size = -1
        if size > 0:
            try:
                with open(self.db_path, "rb") as f:
                    head = f.read(16)
            except OSError as e:
                raise self._damaged_index(e.strerror or e) from None
            if head != SQLITE_MAGIC:
                raise self._damaged_index("it is not an SQLite database")
        try:
            conn = self._connect()
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            self.db = sqlite_utils.Database(conn)
            names = set(self.db.table_names())
            ours = {"meta", "entries"}
            if names and not ours <= names:
                raise CacheError(
                    f"{self.db_path} is an SQLite database of something else (tables {printable(', '.join(sorted(names)))[:200]}), "
                    f"not a skwgrad cache index; nothing was changed. Pass --cache DIR to a skwgrad cache directory"
                )
            if not self.readonly:
                _when_unlocked(lambda: self.db.journal_mode == "wal" or self.db.enable_wal())
                conn.execute("PRAGMA synchronous = FULL")
                _when_unlocked(self._create_schema)  # on an existing index: tables a newer schema added (none yet)
                if not names and self.marker is not None:
                    self.recovered = "the index was empty or missing and was recreated; `skwgrad cache rebuild-index` restores its entries"
            self._check_schema()
            if not self.readonly:
                self._ensure_marker()
        except sqlite3.DatabaseError as e:
            raise self._damaged_index(e) from None

    def _create_schema(self):
        with self._write():
            db = self.db
            if "meta" not in db.table_names():
                db["meta"].create({"name": str, "value": str}, pk="name")
                db.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('schema', ?)", [str(SCHEMA_VERSION)])
                db.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('format', ?)", [MARKER_FORMAT])
                cid = (self.marker or {}).get("cache_id") or uuid.uuid4().hex
                db.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('cache_id', ?)", [cid])
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
            if "models" not in db.table_names():
                db["models"].create(
                    {"arch": str, "cus": int, "compiler": str, "source_hash": str, "model_json": str, "time": float},
                    pk=("arch", "cus", "compiler", "source_hash"),
                )  # fmt: skip

    def _meta(self, name: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE name = ?", [name]).fetchone()
        return row[0] if row else None

    def _check_schema(self):
        names = self.db.table_names()
        if "meta" not in names or "entries" not in names:
            raise CacheError(f"{self.db_path} is not a skwgrad cache index; pass --cache DIR to a skwgrad cache directory")
        row = self._meta("schema")
        try:
            newer = row is None or int(row) > SCHEMA_VERSION
        except ValueError:
            newer = True
        if newer:
            raise CacheError(f"the cache at {self.path} was written by a newer skwgrad (schema {printable(row)}); upgrade skwgrad or use another --cache DIR")

    def _ensure_marker(self):
        """A cache written before markers and row records existed gets both (once)."""
        cid = self._meta("cache_id")
        if cid is None:
            cid = uuid.uuid4().hex
            with self._write() as conn:
                conn.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('cache_id', ?)", [cid])
                conn.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('format', ?)", [MARKER_FORMAT])
            cid = self._meta("cache_id")
        if self.marker is None:
            for r in self._rows("SELECT * FROM entries"):
                if _is_sha(r["key"]) and not self.row_path(r["key"]).is_file():
                    self._write_row_record(r)
            self._write_marker(cid)

    def identity_problem(self) -> str:
        """Why the index is not this cache's (another cache's or a recreated one), or ''."""
        if self.marker is None:
            return "" if self.readonly else f"{self.path / MARKER} is missing"
        cid = self._meta("cache_id")
        if cid != self.marker.get("cache_id"):
            return (f"the index {self.db_path} belongs to another cache (id {printable(cid)[:32]}, the marker says "
                    f"{printable(self.marker.get('cache_id'))[:32]}): it was replaced")  # fmt: skip
        return ""

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
            if not self.readonly:
                with contextlib.suppress(sqlite3.DatabaseError):
                    self.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self.db.conn.close()
        if self.system is not None:
            self.system.close()

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

    # -- files -------------------------------------------------------------------------------
    def object_path(self, sha: str) -> Path:
        if not _is_sha(sha):
            raise DamagedEntryError(f"{printable(repr(sha))[:80]} is not a sha256; run `skwgrad cache verify --cache {self.path}`")
        return self.path / OBJECTS / sha[:2] / sha

    def row_path(self, key: str) -> Path:
        return self.path / ROWS / key[:2] / f"{key}.json"

    def _atomic_write(self, final: Path, data: bytes, tmpdir: Path):
        final.parent.mkdir(parents=True, exist_ok=True)
        with _replacing(final, dir=tmpdir, prefix=f"{final.name[:16]}.", suffix=".tmp") as tmp:
            Path(tmp).write_bytes(data)
        _fsync_dir(final.parent)

    def _write_row_record(self, row: dict):
        data = json.dumps({k: row.get(k) for k in ENTRY_COLUMNS}, sort_keys=True, indent=1).encode()
        self._atomic_write(self.row_path(row["key"]), data, self.path / OBJECTS / TMP)

    def _read_bounded(self, sha: str, nbytes) -> bytes:
        """At most ``nbytes + 1`` bytes of a regular file (never a device, FIFO or a 1 GiB surprise)."""
        p = self.object_path(sha)
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        try:
            st = os.fstat(fd)
            import stat

            if not stat.S_ISREG(st.st_mode):
                raise OSError(0, "not a regular file")
            limit = int(nbytes) + 1 if isinstance(nbytes, int) and nbytes >= 0 else 1
            with os.fdopen(os.dup(fd), "rb") as f:
                return f.read(limit)
        finally:
            os.close(fd)

    def _object_ok(self, sha: str, nbytes: int | None = None) -> bool:
        if not _is_sha(sha):
            return False
        try:
            data = self._read_bounded(sha, nbytes if nbytes is not None else self.object_path(sha).stat().st_size)
        except OSError:
            return False
        return (nbytes is None or len(data) == nbytes) and _sha256(data) == sha

    def _write_object(self, data: bytes, sha: str | None = None) -> str:
        sha = sha or _sha256(data)
        final = self.object_path(sha)
        if self._object_ok(sha, len(data)):
            with contextlib.suppress(OSError):
                os.utime(final)  # reused: young again for gc's grace period
            return sha
        self._atomic_write(final, data, self.path / OBJECTS / TMP)
        return sha

    def _read_object(self, sha: str, nbytes: int, what: str) -> bytes:
        hint = f"run `skwgrad cache verify --cache {self.path}` to list damaged entries, then re-run `skwgrad compile-all` with the same options to rebuild them"
        if not _is_sha(sha) or isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
            raise DamagedEntryError(f"cache entry {what}: its row names no valid object (sha256 {printable(repr(sha))[:70]}, {printable(repr(nbytes))[:20]} bytes); {hint}")
        p = self.object_path(sha)
        try:
            data = self._read_bounded(sha, nbytes)
        except FileNotFoundError:
            raise DamagedEntryError(f"cache entry {what}: its code object {p} is missing; {hint}") from None
        except OSError as e:
            raise DamagedEntryError(f"cache entry {what}: cannot read its code object {p}: {e.strerror or e}; {hint}") from None
        got = _sha256(data)
        if got != sha or len(data) != nbytes:
            shown = f"{len(data)} bytes" if len(data) <= nbytes else f"more than {nbytes} bytes"
            raise DamagedEntryError(
                f"cache entry {what}: code object {p} is corrupt (sha256 {got[:16]}..., {shown}; "
                f"expected {sha[:16]}..., {nbytes} bytes) and was not used; {hint}"
            )
        return data

    # -- rows <-> entries --------------------------------------------------------------------
    def _entry(self, row: dict, layer: str = "user") -> CacheEntry:
        what = f"{printable(row.get('label'))} ({printable(row.get('key'))[:12]})"
        hint = f"run `skwgrad cache verify --cache {self.path}`, then `skwgrad cache gc` and rebuild it"
        try:
            spec = KernelSpec.from_dict(json.loads(row["spec_json"]))
        except (SkwgradError, TypeError, ValueError, RecursionError) as e:
            if (row["compiler"], row["source_hash"]) == _identity():
                raise DamagedEntryError(f"cache entry {what} has a spec this skwgrad cannot read ({printable(e)[:200]}); {hint}") from None
            spec = None
        try:
            md = json.loads(row["metadata_json"] or "{}")
        except (TypeError, ValueError, RecursionError) as e:
            raise DamagedEntryError(f"cache entry {what} has unreadable metadata ({printable(e)[:120]}); {hint}") from None
        if not isinstance(md, dict):
            raise DamagedEntryError(f"cache entry {what} has metadata that is not an object; {hint}")
        nbytes = row["nbytes"]
        if not _is_sha(row["sha256"]) or isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
            raise DamagedEntryError(f"cache entry {what} names no valid object (sha256 / nbytes); {hint}")
        return CacheEntry(
            key=row["key"], spec=spec, arch=row["arch"], label=row["label"],
            metadata=md, sha256=row["sha256"], nbytes=nbytes,
            created=row["created"] or 0.0, compiler=row["compiler"], source_hash=row["source_hash"], layer=layer,
        )  # fmt: skip

    def _entries_of(self, rows, layer: str = "user") -> list[CacheEntry]:
        """Entries of ``rows``, skipping (and reporting once) the damaged ones."""
        out = []
        for row in rows:
            try:
                out.append(self._entry(row, layer))
            except DamagedEntryError as e:
                self._note_damaged(str(e))
        return out

    def _note_damaged(self, msg: str):
        if msg not in self._warned:
            self._warned.add(msg)
            self.damaged.append(msg)
            warnings.warn(f"skipped a damaged cache entry: {msg}", stacklevel=3)

    _row_for = staticmethod(row_for)

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
            with contextlib.suppress(OSError, DamagedEntryError):
                os.utime(self.object_path(existing[0]["sha256"]))
            if self._rows("SELECT key FROM failures WHERE key = ?", [key]):
                with self._write() as conn:
                    conn.execute("DELETE FROM failures WHERE key = ?", [key])
            return key
        self._write_object(binary, sha)
        metadata.setdefault("build_time", time.time())
        row = self._row_for(key, spec, arch, compiler, source, sha, len(binary), metadata, time.time())
        with self._write() as conn:
            now = conn.execute("SELECT sha256, nbytes FROM entries WHERE key = ?", [key]).fetchone()
            if now is None or not self._object_ok(now[0], now[1]):
                # gc deletes objects only inside a write transaction: checked here, inside ours,
                # the object cannot vanish before the row that names it is committed.
                if not self._object_ok(sha, len(binary)):
                    self._atomic_write(self.object_path(sha), binary, self.path / OBJECTS / TMP)
                self._write_row_record(row)
                # The stored row's object is missing or damaged: this rebuild replaces it.
                self._insert_row(conn, row, replace=now is not None)
            conn.execute("DELETE FROM failures WHERE key = ?", [key])
        return key

    def has(self, key: str) -> bool:
        """An entry with this key exists and its object file is present (not hash-checked)."""
        rows = self._rows("SELECT sha256 FROM entries WHERE key = ?", [key])
        if rows and _is_sha(rows[0]["sha256"]) and self.object_path(rows[0]["sha256"]).is_file():
            return True
        return self.system is not None and self.system.has(key)

    def intact(self, key: str) -> bool:
        """An entry with this key exists and its object passes the sha256 check."""
        rows = self._rows("SELECT sha256, nbytes FROM entries WHERE key = ?", [key])
        return bool(rows) and self._object_ok(rows[0]["sha256"], rows[0]["nbytes"])

    def get(self, key: str) -> CacheEntry:
        rows = self._rows("SELECT * FROM entries WHERE key = ?", [key])
        if not rows:
            if self.system is not None:
                try:
                    return dataclasses.replace(self.system.get(key), layer="system")
                except DamagedEntryError:
                    raise
                except CacheError:
                    pass
            raise CacheError(f"no cache entry with key {printable(key)[:80]} in {self.path}; build it with `skwgrad compile-all --cache {self.path}`")
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
        found = self._entries_of(rows)
        if self.system is not None:
            keys = {e.key for e in found}
            found += [dataclasses.replace(e, layer="system") for e in self.system.lookup(key_or_label, arch) if e.key not in keys]
        return sorted(found, key=lambda e: (not e.current, e.arch, e.label))

    def load_binary(self, entry_or_key, *, allow_stale: bool = False) -> bytes:
        """The code object's bytes, sha256-checked and bound to the entry (the object's own
        metadata agrees with the row's). Entries of another compiler or kernel source are
        refused unless ``allow_stale`` (for inspection and export only)."""
        entry = entry_or_key if isinstance(entry_or_key, CacheEntry) else self.get(entry_or_key)
        if entry.layer == "system" and self.system is not None:
            return self.system.load_binary(entry, allow_stale=allow_stale)
        if not allow_stale and (entry.compiler, entry.source_hash) != _identity():
            compiler, source = _identity()
            raise CacheError(
                f"cache entry {entry.short} was built by {entry.compiler} from kernel sources {entry.source_hash[:12]}; "
                f"this skwgrad is {compiler} with sources {source[:12]}: it is never served. Rebuild with `skwgrad compile-all`"
            )
        data = self._read_object(entry.sha256, entry.nbytes, entry.short)
        self._bind(data, entry.key, entry.sha256, entry.arch, entry.metadata, entry.short)
        return data

    def _bind(self, data: bytes, key: str, sha: str, arch: str, md: dict, what: str):
        """``bind_object`` once per (key, object) and process. Objects that say they are real
        code objects (``binary_kind``) or look like one (ELF) are bound; a row without
        ``binary_kind`` holding other bytes is a synthetic test object."""
        if (key, sha) in self._bound:
            return
        if "binary_kind" in md or data[:4] == b"\x7fELF":
            bind_object(data, arch, md, f"cache entry {what}")
        self._bound.add((key, sha))

    def find(self, arch: str, **spec_fields) -> list[CacheEntry]:
        """Entries for ``arch`` built by this compiler from these kernel sources whose spec
        fields equal ``spec_fields`` (e.g. ``family='wgrad_sk', dtype='bf16', mode='dp_sk'``).
        A damaged row is skipped and reported once (a warning, and ``self.damaged``)."""
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
        out = [e for e in self._entries_of(self._rows(sql + " ORDER BY label", params)) if all(getattr(e.spec, k) == v for k, v in spec_fields.items())]
        if self.system is not None:
            out = _merge(out, self.system.find(arch, **spec_fields))
            self._absorb(self.system)
        return out

    def _absorb(self, other: "Cache"):
        for m in other.damaged:
            if m not in self._warned:
                self._warned.add(m)
                self.damaged.append(m)

    def other_versions(self, arch: str) -> int:
        """Entries for ``arch`` built by another compiler or from other kernel sources: kept,
        never served (what a "no cached kernel" message should mention after an upgrade)."""
        compiler, source = _identity()
        rows = self._rows(
            "SELECT COUNT(*) AS n FROM entries WHERE arch = ? AND NOT (compiler = ? AND source_hash = ?)",
            [arch, compiler, source],
        )
        n = int(rows[0]["n"]) if rows else 0
        return n + (self.system.other_versions(arch) if self.system is not None else 0)

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

    def entries(self, arch: str | None = None, all_versions: bool = False, *, layers: bool = True) -> list[CacheEntry]:
        out = self._entries_of(self._entry_rows(arch, all_versions))
        if layers and self.system is not None:
            out = _merge(out, self.system.entries(arch, all_versions))
            self._absorb(self.system)
        return out

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
        """Record a tuned choice in this (the user) layer, never in the system layer."""
        compiler, source = _identity()
        text = json.dumps(choice, sort_keys=True)
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO tuned (arch, cus, problem_key, compiler, source_hash, choice_json, time) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [arch, int(cus), problem_key, compiler, source, text, time.time()],
            )

    def tuned(self, arch: str, cus: int, problem_key: str) -> dict | None:
        """The tuned choice for a problem (the user layer's, else the system layer's); a record
        that does not parse is reported once and ignored (selection falls back to its rules)."""
        rows = self._rows(
            "SELECT choice_json FROM tuned WHERE arch = ? AND cus = ? AND problem_key = ? AND compiler = ? AND source_hash = ?",
            [arch, int(cus), problem_key, *_identity()],
        )
        if rows:
            try:
                got = json.loads(rows[0]["choice_json"])
                if isinstance(got, dict):
                    return got
            except (TypeError, ValueError, RecursionError):
                pass
            self._note_damaged(f"tuned record for {printable(problem_key)[:120]} on {arch} does not parse; `skwgrad cache gc` keeps it, re-run tuning to replace it")
        if self.system is not None:
            return self.system.tuned(arch, cus, problem_key)
        return None

    # -- the cost model's constants ------------------------------------------------------------
    def remember_model(self, arch: str, cus: int, model) -> None:
        """Store the fitted cost model (``skwgrad.abi.costmodel.CostModel``) of (arch, CUs) in this
        (the user) layer; selection then ranks by it instead of the built-in constants."""
        compiler, source = _identity()
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO models (arch, cus, compiler, source_hash, model_json, time) VALUES (?, ?, ?, ?, ?, ?)",
                [arch, int(cus), compiler, source, model.to_json(), time.time()],
            )

    def cost_model(self, arch: str, cus: int):
        """The stored cost model of (arch, CUs) (the user layer's, else the system layer's), or
        None. A record that does not parse is reported once and ignored."""
        from skwgrad.abi.costmodel import CostModel

        if "models" in self.db.table_names():
            rows = self._rows(
                "SELECT model_json FROM models WHERE arch = ? AND cus = ? AND compiler = ? AND source_hash = ?",
                [arch, int(cus), *_identity()],
            )
            if rows:
                try:
                    return CostModel.from_json(rows[0]["model_json"], source="cache")
                except SkwgradError:
                    self._note_damaged(f"the stored cost model for {arch} ({cus} CUs) does not parse; run `skwgrad calibrate` to replace it")
        if self.system is not None:
            return self.system.cost_model(arch, cus)
        return None

    # -- maintenance -------------------------------------------------------------------------
    def row_records(self) -> dict[str, Path]:
        """Row record files by key."""
        out = {}
        root = self.path / ROWS
        if not root.is_dir():
            return out
        for sub in sorted(root.iterdir()):
            if sub.is_dir():
                for p in sorted(sub.iterdir()):
                    if p.name.endswith(".json") and _is_sha(p.name[:-5]):
                        out[p.name[:-5]] = p
        return out

    def verify(self, *, deep: bool = True) -> list[str]:
        """Problems found: a damaged or replaced index, rows whose object is missing, corrupt or
        not theirs (bound by the object's own metadata), rows whose key or fields do not match
        their contents, entries recorded in the cache that the index lost, and objects no row
        names. [] when clean. An unindexed object younger than ``IN_FLIGHT_S`` may be a running
        build's and is only a note (see ``notes``)."""
        from skwgrad.cache.validate import check_row

        problems = []
        self.notes: list[str] = []
        try:
            with self._lock:
                check = [r[0] for r in self.db.execute("PRAGMA quick_check").fetchall()]
        except sqlite3.DatabaseError as e:
            check = [str(e)]
        if check != ["ok"]:
            problems.append(f"index {self.db_path}: sqlite quick_check says {printable('; '.join(check))[:400]}")
        ident = self.identity_problem()
        if ident:
            problems.append(ident + f"; run `skwgrad cache rebuild-index --cache {self.path}`")
        if self.recovered:
            problems.append(self.recovered)
        wal = self.path / (DB_NAME + "-wal")
        if self.immutable and wal.is_file() and wal.stat().st_size > 0:
            problems.append(
                f"{wal} holds {wal.stat().st_size} bytes of commits a read-only reader cannot apply (the writer was killed "
                f"or is still running): rows may be missing here. Open the cache once where it is writable "
                f"(e.g. `skwgrad cache verify --cache {self.path}` as its owner) to checkpoint it"
            )
        rows = self._rows("SELECT * FROM entries ORDER BY arch, label")
        referenced = set()
        for row in rows:
            what = f"{printable(row['label'])} ({printable(row['key'])[:12]}) on {printable(row['arch'])}"
            referenced.add(row["sha256"])
            try:
                clean, _ = check_row({k: row[k] for k in ENTRY_COLUMNS}, _identity(), 1 << 40)
            except DamagedEntryError as e:
                problems.append(f"{what}: {str(e).split(': ', 1)[-1]}")
                continue
            try:
                data = self._read_object(row["sha256"], row["nbytes"], what)
                if deep:
                    try:
                        md = json.loads(row["metadata_json"])
                    except (TypeError, ValueError, RecursionError):
                        raise DamagedEntryError(f"{what}: unreadable metadata") from None
                    self._bound.discard((row["key"], row["sha256"]))
                    self._bind(data, row["key"], row["sha256"], row["arch"], md, what)
            except CacheError as e:
                problems.append(str(e).split("; run `skwgrad cache verify")[0])
        keys = {r["key"] for r in rows}
        records = self.row_records()
        lost = sorted(set(records) - keys)
        if lost:
            problems.append(
                f"{len(lost)} entr{'y' if len(lost) == 1 else 'ies'} recorded in {self.path / ROWS} {'is' if len(lost) == 1 else 'are'} "
                f"missing from the index (lost or not yet committed); `skwgrad cache rebuild-index --cache {self.path}` restores them"
            )
        unrecorded = sorted(keys - set(records))
        if unrecorded and not self.readonly:
            problems.append(f"{len(unrecorded)} entr{'y has' if len(unrecorded) == 1 else 'ies have'} no row record (the index could not be rebuilt); `skwgrad cache rebuild-index --cache {self.path}` writes them")
        recorded_objects = set()
        for k in lost:
            with contextlib.suppress(OSError, ValueError):
                recorded_objects.add(json.loads(records[k].read_text()).get("sha256"))
        young, old = 0, []
        now = time.time()
        for p in self._object_files():
            if p.name in referenced or p.name in recorded_objects:
                continue
            try:
                age = now - p.stat().st_mtime
            except FileNotFoundError:
                continue
            if age < IN_FLIGHT_S:
                young += 1
            else:
                old.append(p)
        if old:
            problems.append(
                f"{len(old)} object(s) in {self.path / OBJECTS} are named by no entry (an index that lost rows, or writes a "
                f"kill interrupted): run `skwgrad cache rebuild-index --cache {self.path}` to recover what is recorded, then `skwgrad cache gc`"
            )
        if young:
            self.notes.append(f"{young} object(s) younger than {IN_FLIGHT_S:.0f} s not indexed yet (a build in progress?)")
        return problems

    def _object_files(self) -> list[Path]:
        root = self.path / OBJECTS
        out = []
        if not root.is_dir():
            return out
        for sub in sorted(root.iterdir()):
            if sub.is_dir() and sub.name != TMP:
                out += sorted(sub.iterdir())
        return out

    def orphans(self, min_age: float = 0.0) -> list[Path]:
        """Object files no row refers to (and no row record names), and leftover temp files,
        older than ``min_age`` seconds."""
        referenced = {r["sha256"] for r in self._rows("SELECT DISTINCT sha256 FROM entries")}
        keys = {r["key"] for r in self._rows("SELECT key FROM entries")}
        for k, p in self.row_records().items():
            if k not in keys:
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    referenced.add(json.loads(p.read_text()).get("sha256"))
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
        object files nothing refers to (and temp files) older than ``min_age`` seconds.

        Refused while the index lacks entries the cache records (a lost index: gc would delete
        their objects): ``rebuild_index`` first. Objects are deleted inside a write transaction,
        after checking again that no row names them (see the module docstring)."""
        if self.readonly:
            self._write()  # raises: read-only
        ident = self.identity_problem()
        keys = {r["key"] for r in self._rows("SELECT key FROM entries")}
        lost = [k for k in self.row_records() if k not in keys]
        if ident or lost:
            raise IndexLost(
                f"the index of {self.path} is missing {len(lost)} recorded entr{'y' if len(lost) == 1 else 'ies'}"
                + (f" ({ident})" if ident else "") + f"; gc would delete their objects, so it did nothing. "
                f"Run `skwgrad cache rebuild-index --cache {self.path}` first"
            )  # fmt: skip
        compiler, source = _identity()
        with self._write() as conn:
            stale_keys = [r[0] for r in conn.execute("SELECT key FROM entries WHERE compiler != ? OR source_hash != ?", [compiler, source])]
            stale = conn.execute("DELETE FROM entries WHERE compiler != ? OR source_hash != ?", [compiler, source]).rowcount
            stale_f = conn.execute("DELETE FROM failures WHERE compiler != ? OR source_hash != ?", [compiler, source]).rowcount
            stale_t = conn.execute("DELETE FROM tuned WHERE compiler != ? OR source_hash != ?", [compiler, source]).rowcount
            stale_m = conn.execute("DELETE FROM models WHERE compiler != ? OR source_hash != ?", [compiler, source]).rowcount
        for k in stale_keys:
            if _is_sha(k):
                with contextlib.suppress(OSError):
                    self.row_path(k).unlink()
        removed, freed = 0, 0
        candidates = self.orphans(min_age)
        if candidates:
            with self._write() as conn:
                live = {r[0] for r in conn.execute("SELECT DISTINCT sha256 FROM entries")}
                now = time.time()
                for p in candidates:
                    try:
                        st = p.stat()
                        if p.parent.name != TMP and p.name in live or now - st.st_mtime < min_age:
                            continue  # named again, or touched (reused), since the scan
                        p.unlink()
                        removed += 1
                        freed += st.st_size
                    except FileNotFoundError:
                        pass
        return {
            "stale_entries": stale,
            "stale_failures": stale_f,
            "stale_tuned": stale_t,
            "stale_models": stale_m,
            "orphan_files": removed,
            "bytes_freed": freed,
        }

    def rebuild_index(self) -> dict:
        """Add to the index every entry the cache records in ``rows/`` whose record validates and
        whose object is intact and bound to it; write the record of every indexed entry that has
        none. Entries already indexed are kept. Returns counts and the refused records."""
        from skwgrad.cache.validate import check_row

        keys = {r["key"] for r in self._rows("SELECT key FROM entries")}
        added, refused = [], []
        for key, p in self.row_records().items():
            if key in keys:
                continue
            try:
                raw = json.loads(p.read_text())
                row, why = check_row(raw, _identity(), 1 << 40)
                if row is None:  # another version's spec: keep the record as it is
                    row = {k: raw.get(k) for k in ENTRY_COLUMNS}
                if row["key"] != key:
                    raise DamagedEntryError(f"{p}: holds the record of another key")
                data = self._read_object(row["sha256"], row["nbytes"], row["label"])
                self._bind(data, key, row["sha256"], row["arch"], json.loads(row["metadata_json"]), row["label"])
            except (OSError, ValueError, CacheError) as e:
                refused.append(f"{p.name}: {printable(e)[:300]}")
                continue
            added.append(row)
        if added:
            with self._write() as conn:
                for row in added:
                    self._insert_row(conn, row)
        written = 0
        for r in self._rows("SELECT * FROM entries"):
            if _is_sha(r["key"]) and not self.row_path(r["key"]).is_file():
                self._write_row_record(r)
                written += 1
        if self.marker is None or self.identity_problem():
            self._write_marker(self._meta("cache_id"))
        self.recovered = ""
        return {"added": len(added), "records_written": written, "refused": refused, "entries": len(self._rows("SELECT key FROM entries"))}

    # -- export / import / pull (skwgrad.cache.transfer) --------------------------------------
    def export(self, file, *, arch: str | None = None, all_versions: bool = False) -> dict:
        from skwgrad.cache.transfer import export

        return export(self, file, arch=arch, all_versions=all_versions)

    def export_layout(self, directory, *, arch: str | None = None, all_versions: bool = False) -> dict:
        from skwgrad.cache.transfer import export_layout

        return export_layout(self, directory, arch=arch, all_versions=all_versions)

    def import_(self, file, **limits) -> dict:
        from skwgrad.cache.transfer import import_file

        return import_file(self, file, **limits)

    def pull(self, url: str, **kw) -> dict:
        from skwgrad.cache.transfer import pull

        return pull(self, url, **kw)


def _merge(user: list[CacheEntry], system: list[CacheEntry]) -> list[CacheEntry]:
    """The user layer's entries, then the system layer's whose key the user layer lacks."""
    keys = {e.key for e in user}
    out = user + [dataclasses.replace(e, layer="system") for e in system if e.key not in keys]
    return sorted(out, key=lambda e: (e.arch, e.label))


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def reopen_after_moving_index_aside(path) -> tuple[Cache, list[str]]:
    """For ``rebuild-index`` on an index that cannot be opened (not SQLite, foreign, damaged):
    move ``index.sqlite`` (and its -wal/-shm) aside, never deleting them, and open a new one."""
    path = Path(path).expanduser()
    moved = []
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for suffix in ("", "-wal", "-shm"):
        p = path / (DB_NAME + suffix)
        if p.exists():
            dst = path / f"{DB_NAME}{suffix}.aside-{stamp}"
            os.replace(p, dst)
            moved.append(str(dst))
    return Cache(path, create=False, system=False), moved


@contextlib.contextmanager
def _replacing(final: Path, *, dir: Path, prefix: str, suffix: str, mode: int = FILE_MODE):
    """Yield a temp file path beside ``final``; once the body has filled it, fsync it, give it
    ``mode`` and ``os.replace`` it onto ``final`` (atomic). On any failure the temp file is
    removed and ``final`` is untouched: a kill at any moment leaves either the old file or the new one."""
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=dir)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
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
