"""Moving caches between machines: ``export`` (one tar file, or a static directory layout any
HTTP server or bucket can serve), ``import`` and ``pull`` (http(s) through ``requests``, file://).

Everything that comes in is data someone else wrote. Before anything is written:

* the manifest is read first and bounded (``max_manifest``); every entry row and tuned record is
  validated field by field (``skwgrad.cache.validate``); duplicate keys are refused;
* each object an entry names is read bounded (``max_object``; the sum bounded by ``max_total``),
  never whole archives or declared sizes, and must hash to its name and be bound to every row
  naming it by its own metadata; members nothing names are skipped unread;
* only then are objects written (atomically, under their sha256 inside the cache), then row
  records, then the index rows, in one transaction. Nothing is ever written outside the cache:
  paths come from validated sha256 digests only, never from names in the archive or listing.

A refused archive raises ``ExportRefused`` with the reason; nothing from it was stored.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tarfile
import time
import urllib.parse
from pathlib import Path

from skwgrad.cache import store as S
from skwgrad.cache.validate import ExportRefused, check_model, check_row, check_tuned, printable
from skwgrad.errors import CacheError, DamagedEntryError, SkwgradError

MAX_OBJECT = 64 << 20  # largest code object accepted (real ones are a few hundred KiB)
MAX_TOTAL = 4 << 30  # most object bytes one import or pull takes in
MAX_MANIFEST = 64 << 20
MAX_ENTRIES = 1 << 20
CHUNK = 1 << 20
HTTP_TIMEOUT_S = 30.0


# -- export --------------------------------------------------------------------------------
def _manifest(cache, arch, all_versions):
    rows = cache._entry_rows(arch, all_versions)
    sql = "SELECT * FROM tuned" + ("" if all_versions else " WHERE compiler = ? AND source_hash = ?")
    tuned = cache._rows(sql, [] if all_versions else list(S._identity()))
    models = cache._rows(sql.replace("tuned", "models"), [] if all_versions else list(S._identity()))
    if arch is not None:
        tuned = [t for t in tuned if t["arch"] == arch]
        models = [m for m in models if m["arch"] == arch]
    compiler, source = S._identity()
    return {
        "format": S.EXPORT_FORMAT, "version": S.EXPORT_VERSION, "created": time.time(),
        "compiler": compiler, "source_hash": source, "entries": rows, "tuned": tuned, "models": models,
        "objects": {r["sha256"]: r["nbytes"] for r in rows},
    }  # fmt: skip


def export(cache, file, *, arch=None, all_versions=False) -> dict:
    """One portable tar (gzip'ed for .gz/.tgz, xz for .xz) holding ``manifest.json`` first (entry
    rows, tuned choices, object sizes) and ``objects/<sha256>``. Every object is verified first."""
    file = Path(file)
    manifest = _manifest(cache, arch, all_versions)
    rows = manifest["entries"]
    mode = "w:gz" if file.name.endswith((".gz", ".tgz")) else "w:xz" if file.name.endswith(".xz") else "w"
    file.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    with S._replacing(file, dir=file.parent, prefix=file.name + ".", suffix=".part") as tmp:
        with tarfile.open(tmp, mode) as tar:
            _add_bytes(tar, "manifest.json", json.dumps(manifest, sort_keys=True, indent=1).encode())
            for r in rows:
                if r["sha256"] in done:
                    continue
                data = cache._read_object(r["sha256"], r["nbytes"], f"{printable(r['label'])} ({r['key'][:12]}) on {r['arch']}")
                _add_bytes(tar, f"objects/{r['sha256']}", data)
                done.add(r["sha256"])
    return {"entries": len(rows), "objects": len(done), "tuned": len(manifest["tuned"]), "models": len(manifest["models"]), "file": str(file)}


def export_layout(cache, directory, *, arch=None, all_versions=False) -> dict:
    """A static layout: ``DIR/manifest.json`` and ``DIR/objects/<sha256>``, servable as is by any
    HTTP server or bucket (``skwgrad cache pull URL/``). Objects are written before the manifest,
    which is replaced atomically, so a reader never sees a manifest whose objects are not there."""
    d = Path(directory)
    (d / "objects").mkdir(parents=True, exist_ok=True)
    manifest = _manifest(cache, arch, all_versions)
    for sha, n in manifest["objects"].items():
        dst = d / "objects" / sha
        if dst.is_file() and dst.stat().st_size == n and _file_sha(dst) == sha:
            continue
        data = cache._read_object(sha, n, sha[:12])
        with S._replacing(dst, dir=d / "objects", prefix=f".{sha[:16]}.", suffix=".part") as tmp:
            Path(tmp).write_bytes(data)
    with S._replacing(d / "manifest.json", dir=d, prefix=".manifest.", suffix=".part") as tmp:
        Path(tmp).write_bytes(json.dumps(manifest, sort_keys=True, indent=1).encode())
    return {"entries": len(manifest["entries"]), "objects": len(manifest["objects"]), "tuned": len(manifest["tuned"]),
            "models": len(manifest["models"]), "dir": str(d)}  # fmt: skip


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def _file_sha(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


# -- the manifest ----------------------------------------------------------------------------
class Plan:
    """A validated manifest: rows to add, tuned records, the objects they need (sha -> size)."""

    def __init__(self, rows, tuned, needed, skipped, models=()):
        self.rows, self.tuned, self.needed, self.skipped, self.models = rows, tuned, needed, skipped, list(models)


def check_manifest(manifest, source: str, *, max_object=MAX_OBJECT, max_total=MAX_TOTAL, select=None) -> Plan:
    def refuse(msg):
        return ExportRefused(f"{printable(source)}: {msg}; nothing was imported. Export it again with `skwgrad cache export`, or ask whoever made it")

    if not isinstance(manifest, dict) or manifest.get("format") != S.EXPORT_FORMAT:
        raise refuse(f"not a skwgrad cache export (no manifest.json of format {S.EXPORT_FORMAT})")
    version = manifest.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise refuse(f"manifest version {printable(repr(version))[:40]} is not a positive integer")
    if version > S.EXPORT_VERSION:
        raise ExportRefused(f"{printable(source)} was exported by a newer skwgrad (format version {version}); upgrade skwgrad to import it")
    entries, tuned, models = manifest.get("entries"), manifest.get("tuned", []), manifest.get("models", [])
    if not all(isinstance(v, list) and len(v) <= MAX_ENTRIES for v in (entries, tuned, models)):
        raise refuse("manifest 'entries', 'tuned' and 'models' must be lists (of at most a million items)")
    rows, skipped, needed, seen = [], [], {}, set()
    try:
        for raw in entries:
            row, why = check_row(raw, S._identity(), max_object)
            if row is None:
                skipped.append(why)
                continue
            if row["key"] in seen:
                raise DamagedEntryError(f"entry {row['label']} ({row['key'][:12]}) appears twice")
            seen.add(row["key"])
            if select is not None and not select(row):
                continue
            if needed.setdefault(row["sha256"], row["nbytes"]) != row["nbytes"]:
                raise DamagedEntryError(f"object {row['sha256'][:16]}... is given two sizes")
            rows.append(row)
        checked_tuned = [check_tuned(t) for t in tuned]
        checked_models = []
        for m in models:
            model = check_model(m)
            if model is None:
                skipped.append(f"cost model for {m['arch']} of another model version")
            else:
                checked_models.append(model)
    except DamagedEntryError as e:
        raise refuse(str(e)) from None
    total = sum(needed.values())
    if total > max_total:
        raise refuse(f"its objects total {total} bytes, over the limit of {max_total} (pass a larger limit if this is expected)")
    return Plan(rows, checked_tuned, needed, skipped, checked_models)


def _read_limited(f, limit: int) -> bytes:
    """Read at most ``limit`` bytes from ``f``, in chunks; more is an error."""
    buf = io.BytesIO()
    while True:
        chunk = f.read(min(CHUNK, limit + 1 - buf.tell()))
        if not chunk:
            return buf.getvalue()
        buf.write(chunk)
        if buf.tell() > limit:
            raise ValueError(f"more than {limit} bytes")


def _bind_all(cache, data: bytes, sha: str, rows_by_sha, source: str):
    for row in rows_by_sha.get(sha, ()):
        try:
            cache._bind(data, row["key"], sha, row["arch"], json.loads(row["metadata_json"]), f"{row['label']} ({row['key'][:12]})")
        except DamagedEntryError as e:
            raise ExportRefused(f"{printable(source)}: {e}; nothing was imported") from None


# -- import ----------------------------------------------------------------------------------
def import_file(cache, file, *, max_object=MAX_OBJECT, max_total=MAX_TOTAL, max_manifest=MAX_MANIFEST, select=None) -> dict:
    """Add the entries of an ``export`` file (see the module docstring for the checks). Entries
    already here with an intact object are kept as they are (a damaged local one is replaced)."""
    file = Path(file)
    if cache.readonly:
        cache._write()  # raises: read-only
    try:
        plan, members = _scan(cache, file, max_object, max_total, max_manifest, select)
        return _commit_from_tar(cache, file, plan, members)
    except SkwgradError:
        raise
    except Exception as e:  # tar, gzip, bz2, lzma, zlib, json, OS errors: one clear message, no traceback
        raise ExportRefused(
            f"cannot read the export file {printable(file)}: {type(e).__name__}: {printable(e)[:300]}; nothing was imported. "
            f"Export it again with `skwgrad cache export FILE`"
        ) from None


def _open_tar(file: Path):
    return tarfile.open(file, "r:*")


def _scan(cache, file, max_object, max_total, max_manifest, select):
    """Pass 1: validate the manifest, then read (bounded), hash and bind every object it names."""
    plan = None
    members = {}
    good = set()
    with _open_tar(file) as tar:
        for i, m in enumerate(tar):
            if i == 0:
                if m.name != "manifest.json" or not m.isfile():
                    raise ExportRefused(f"{printable(file)}: the first member is {printable(m.name)[:80]!r}, not manifest.json; not a skwgrad export, nothing was imported")
                if m.size > max_manifest:
                    raise ExportRefused(f"{printable(file)}: manifest.json is {m.size} bytes, over the limit of {max_manifest}; nothing was imported")
                text = _read_limited(tar.extractfile(m), max_manifest)
                try:
                    manifest = json.loads(text)
                except (ValueError, RecursionError) as e:
                    raise ExportRefused(f"{printable(file)}: manifest.json is not JSON ({printable(e)[:120]}); nothing was imported") from None
                plan = check_manifest(manifest, str(file), max_object=max_object, max_total=max_total, select=select)
                rows_by_sha = {}
                for r in plan.rows:
                    rows_by_sha.setdefault(r["sha256"], []).append(r)
                continue
            if not m.name.startswith("objects/"):
                continue
            sha = m.name[len("objects/"):]
            if sha not in plan.needed or not m.isfile():
                continue  # nothing names it (or a link/device): skipped unread
            want = plan.needed[sha]
            if m.size != want or (hasattr(m, "sparse") and m.sparse):
                raise ExportRefused(f"{printable(file)}: object {sha[:16]}... is {m.size} bytes in the archive, its entries say {want}; nothing was imported")
            data = _read_limited(tar.extractfile(m), want)
            got = hashlib.sha256(data).hexdigest()
            if got != sha or len(data) != want:
                raise ExportRefused(f"{printable(file)}: object {sha[:16]}... is corrupt (sha256 {got[:16]}..., {len(data)} bytes); nothing was imported. Export it again")
            _bind_all(cache, data, sha, rows_by_sha, str(file))
            good.add(sha)
            members[sha] = m.name
            if len(good) == len(plan.needed):
                break  # the rest can only be members nothing names
    if plan is None:
        raise ExportRefused(f"{printable(file)} is empty: not a skwgrad cache export; nothing was imported")
    for r in plan.rows:
        if r["sha256"] not in good and not cache._object_ok(r["sha256"], r["nbytes"]):
            raise ExportRefused(f"{printable(file)}: entry {printable(r['label'])} ({r['key'][:12]}) has no intact object ({r['sha256'][:16]}...); nothing was imported")
    return plan, members


def _commit_from_tar(cache, file, plan, members) -> dict:
    """Pass 2: write the objects (hash-checked again), then the rows, in one write transaction."""
    with cache._write() as conn:
        wanted = _wanted_objects(cache, conn, plan)
        with _open_tar(file) as tar:
            for m in tar:
                sha = m.name[len("objects/"):] if m.name.startswith("objects/") else None
                if sha not in members or sha not in wanted or not m.isfile() or m.size != plan.needed[sha]:
                    continue
                data = _read_limited(tar.extractfile(m), plan.needed[sha])
                if hashlib.sha256(data).hexdigest() != sha:
                    raise ExportRefused(f"{printable(file)}: object {sha[:16]}... changed while importing; its entries were not imported")
                cache._write_object(data, sha)
                wanted.discard(sha)
                if not wanted:
                    break
        return _commit_rows(cache, conn, plan, str(file))


def _kept(cache, conn, row) -> bool:
    existing = conn.execute("SELECT sha256, nbytes FROM entries WHERE key = ?", [row["key"]]).fetchone()
    return existing is not None and cache._object_ok(existing[0], existing[1])


def _wanted_objects(cache, conn, plan) -> set[str]:
    """Objects of the rows that will be added (an entry kept as it is needs none: writing its
    copy would leave an object no row names)."""
    return {r["sha256"] for r in plan.rows if not _kept(cache, conn, r)}


def _commit_rows(cache, conn, plan, source) -> dict:
    imported = kept = 0
    for row in plan.rows:
        existing = conn.execute("SELECT sha256, nbytes FROM entries WHERE key = ?", [row["key"]]).fetchone()
        if existing is not None and cache._object_ok(existing[0], existing[1]):
            kept += 1
            continue
        if not cache._object_ok(row["sha256"], row["nbytes"]):
            raise ExportRefused(f"{printable(source)}: the object of {row['label']} vanished while importing (a concurrent gc?); run the import again")
        cache._write_row_record(row)
        cache._insert_row(conn, row, replace=existing is not None)
        imported += 1
    merged = 0
    for t in plan.tuned:
        merged += conn.execute(
            "INSERT OR IGNORE INTO tuned (arch, cus, problem_key, compiler, source_hash, choice_json, time) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [t["arch"], t["cus"], t["problem_key"], t["compiler"], t["source_hash"], t["choice_json"], t["time"]],
        ).rowcount
    models_added = 0
    for m in plan.models:
        # one model per (arch, CUs, build): the one fitted on more timings wins; a tie keeps ours
        have = conn.execute(
            "SELECT model_json FROM models WHERE arch = ? AND cus = ? AND compiler = ? AND source_hash = ?",
            [m["arch"], m["cus"], m["compiler"], m["source_hash"]],
        ).fetchone()
        if have is not None and _model_samples(have[0]) >= _model_samples(m["model_json"]):
            continue
        conn.execute(
            "INSERT OR REPLACE INTO models (arch, cus, compiler, source_hash, model_json, time) VALUES (?, ?, ?, ?, ?, ?)",
            [m["arch"], m["cus"], m["compiler"], m["source_hash"], m["model_json"], m["time"]],
        )
        models_added += 1
    return {"imported": imported, "already_present": kept, "objects": len(plan.needed), "tuned": len(plan.tuned),
            "tuned_added": merged, "models": len(plan.models), "models_added": models_added, "skipped": len(plan.skipped)}  # fmt: skip


def _model_samples(text: str) -> int:
    from skwgrad.abi.costmodel import CostModel

    try:
        return CostModel.from_json(text).samples
    except SkwgradError:
        return -1  # a record we cannot read loses to any that we can


# -- pull ------------------------------------------------------------------------------------
class _Source:
    """Bounded, resumable reads of one URL (http/https through requests, or file://)."""

    def __init__(self, base: str):
        u = urllib.parse.urlsplit(base)
        if u.scheme not in ("http", "https", "file"):
            raise CacheError(f"cannot pull from {printable(base)[:200]}: use an http://, https:// or file:// URL")
        self.scheme = u.scheme
        if u.scheme != "file":
            import requests

            self.session = requests.Session()

    def fetch(self, url: str, dest: Path, limit: int) -> None:
        """Append ``url``'s bytes to ``dest`` (resuming from its size) until the whole resource is
        there; more than ``limit`` bytes in all is an error."""
        have = dest.stat().st_size if dest.exists() else 0
        if have > limit:
            dest.unlink()
            have = 0
        if self.scheme == "file":
            path = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path))
            with open(path, "rb") as src, open(dest, "ab") as out:
                src.seek(have)
                self._copy(src.read, out, limit - have, url)
            return
        import requests

        headers = {"Accept-Encoding": "identity", **({"Range": f"bytes={have}-"} if have else {})}
        try:
            with self.session.get(url, headers=headers, stream=True, timeout=HTTP_TIMEOUT_S, allow_redirects=True) as r:
                if r.status_code == 416 and have:
                    return  # already complete
                if r.status_code == 200 and have:
                    dest.unlink()  # the server ignores ranges: start again
                    have = 0
                elif r.status_code not in (200, 206):
                    raise CacheError(f"GET {printable(url)[:200]}: HTTP {r.status_code}; check the URL (it should be an export file or a directory holding manifest.json)")
                n = r.headers.get("Content-Length")
                if n is not None and n.isdigit() and int(n) > limit - have:
                    raise ExportRefused(f"{printable(url)[:200]} is {int(n) + have} bytes, over the limit of {limit}; nothing was stored")
                with open(dest, "ab") as out:
                    # read1: whatever has arrived, so the bytes before a broken connection are
                    # kept (on disk) for the next pull to resume from
                    self._copy(lambda n: r.raw.read1(n), out, limit - have, url)
        except (requests.RequestException, ConnectionError, TimeoutError, __import__("urllib3").exceptions.HTTPError) as e:
            raise CacheError(
                f"transfer of {printable(url)[:200]} broke ({type(e).__name__}: {printable(e)[:200]}); what arrived is kept: "
                f"run the same `skwgrad cache pull` again to resume"
            ) from None

    @staticmethod
    def _copy(read, out, limit, url):
        n = 0
        while True:
            chunk = read(CHUNK)
            if not chunk:
                return
            n += len(chunk)
            if n > limit:
                raise ExportRefused(f"{printable(url)[:200]} sends more than the {limit} bytes expected; nothing from it was stored")
            out.write(chunk)


def _is_archive(url: str) -> bool:
    return urllib.parse.urlsplit(url).path.endswith((".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.bz2"))


def admits_any(spec_json: str, problems) -> bool:
    """The kernel can run at least one of ``problems`` (dtype, precision, dims, pointwise
    addressing, channel alignment: ``KernelSpec.check_problem``); a Stage-2 reduce is kept for
    the problems' dW dtypes."""
    from skwgrad.abi.spec import KernelSpec

    spec = KernelSpec.from_dict(json.loads(spec_json))
    for p in problems:
        try:
            spec.check_problem(p)
            return True
        except SkwgradError:
            continue
    return False


def pull(cache, url: str, *, arch=None, keys=None, grep=None, problems=None, max_object=MAX_OBJECT, max_total=MAX_TOTAL, max_manifest=MAX_MANIFEST) -> dict:
    """Fetch a cache from ``url``: an export file (``.../kernels.tar.gz``) or a static layout
    directory (``.../cache/`` holding ``manifest.json`` and ``objects/<sha256>``). ``arch``,
    ``keys``, ``grep`` (label substring) and ``problems`` (a corpus: only kernels that can run
    one of them, plus the Stage-2 reduces) take a subset; layouts fetch only the objects the
    subset needs. Same checks as ``import``; each object's sha256 and binding are checked
    before it enters the cache; a broken transfer resumes on the next call."""
    if cache.readonly:
        cache._write()  # raises: read-only
    keys = set(keys) if keys else None

    def select(row):
        return (
            (arch is None or row["arch"] == arch) and (keys is None or row["key"] in keys) and (grep is None or grep in row["label"])
            and (problems is None or admits_any(row["spec_json"], problems))
        )  # fmt: skip

    src = _Source(url)
    downloads = cache.path / S.OBJECTS / S.TMP
    tag = hashlib.sha256(url.encode()).hexdigest()[:16]
    try:
        if _is_archive(url):
            part = downloads / f"pull-{tag}.part"
            src.fetch(url, part, max_total + max_manifest)
            try:
                r = import_file(cache, part, max_object=max_object, max_total=max_total, max_manifest=max_manifest, select=select)
            finally:
                with contextlib.suppress(OSError):
                    part.unlink()
            return {**r, "fetched_objects": r["objects"], "url": url}
        base = url if url.endswith("/") else url.rsplit("/", 1)[0] + "/" if url.endswith("manifest.json") else url + "/"
        mpart = downloads / f"pull-{tag}.manifest.part"
        with contextlib.suppress(OSError):
            mpart.unlink()  # a manifest is small: always fetched whole, fresh
        src.fetch(base + "manifest.json", mpart, max_manifest)
        try:
            manifest = json.loads(mpart.read_bytes())
        except (ValueError, RecursionError) as e:
            raise ExportRefused(f"{printable(base)}manifest.json is not JSON ({printable(e)[:120]}); nothing was stored") from None
        finally:
            with contextlib.suppress(OSError):
                mpart.unlink()
        plan = check_manifest(manifest, base + "manifest.json", max_object=max_object, max_total=max_total, select=select)
        rows_by_sha = {}
        for r in plan.rows:
            rows_by_sha.setdefault(r["sha256"], []).append(r)
        with cache._write() as conn:
            wanted = _wanted_objects(cache, conn, plan)
        fetched, ready = 0, {}
        for sha, n in sorted(plan.needed.items()):
            if sha not in wanted or cache._object_ok(sha, n):
                continue
            # Staged under objects/tmp by validated digest (never a path from the listing): a
            # broken transfer resumes from its .part; a checked object waits as .ready until the
            # rows that name it are committed, so no object enters the cache without its row.
            part, done = downloads / f"{sha}.part", downloads / f"{sha}.ready"
            if done.is_file() and done.stat().st_size == n and _file_sha(done) == sha:
                data = done.read_bytes()
            else:
                src.fetch(base + "objects/" + sha, part, n)
                data = part.read_bytes()
                got = hashlib.sha256(data).hexdigest()
                if got != sha or len(data) != n:
                    part.unlink()
                    raise ExportRefused(
                        f"{printable(base)}objects/{sha[:16]}... is corrupt or was tampered with (sha256 {got[:16]}..., {len(data)} bytes; "
                        f"expected {n}); nothing was stored from it. Fix the server (or the URL) and pull again"
                    )
                os.replace(part, done)
                fetched += 1
            _bind_all(cache, data, sha, rows_by_sha, base)
            ready[sha] = done
        with cache._write() as conn:
            for sha, done in ready.items():
                final = cache.object_path(sha)
                final.parent.mkdir(parents=True, exist_ok=True)
                os.chmod(done, S.FILE_MODE)
                os.replace(done, final)
                S._fsync_dir(final.parent)
            r = _commit_rows(cache, conn, plan, base)
        return {**r, "fetched_objects": fetched, "url": url}
    except SkwgradError:
        raise
    except Exception as e:
        raise ExportRefused(f"cannot pull {printable(url)[:200]}: {type(e).__name__}: {printable(e)[:300]}; nothing more was stored") from None


# -- serve -----------------------------------------------------------------------------------
def handler_for(directory):
    """``http.server`` handler serving ``directory`` with single-range ``Range`` support (so a
    broken ``pull`` resumes) and no directory listings."""
    import http.server

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(directory), **kw)

        def list_directory(self, path):
            self.send_error(404, "no listings")
            return None

        def log_message(self, *a):
            pass

        def send_head(self):
            rng = self.headers.get("Range")
            path = self.translate_path(self.path)
            if not rng or not os.path.isfile(path):
                return super().send_head()
            try:
                start = int(rng.strip().removeprefix("bytes=").split("-", 1)[0])
            except ValueError:
                return super().send_head()
            f = open(path, "rb")
            size = os.fstat(f.fileno()).st_size
            if start >= size:
                f.close()
                self.send_error(416)
                return None
            f.seek(start)
            self.send_response(206)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
            self.send_header("Content-Length", str(size - start))
            self.end_headers()
            return f

    return Handler
