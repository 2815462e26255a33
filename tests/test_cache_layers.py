"""An index that cannot be lost in silence, the gc race, read-only / shared / layered caches
(issue 15): every index or WAL damage is reported by ``verify`` (exit 1) and recovered by
``rebuild-index``; a foreign SQLite file is refused untouched; gc never deletes an object a
writer just reused; read-only mounts, odd paths, other users, XDG edge cases; a system layer
under a user layer."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _codeobj import fake_compiled  # noqa: E402

import skwgrad.cache.store as store  # noqa: E402
from skwgrad.aot.sweep import sweep  # noqa: E402
from skwgrad.cache import Cache, default_cache_dir  # noqa: E402
from skwgrad.cli import main  # noqa: E402
from skwgrad.errors import CacheError  # noqa: E402

SMOKE = [it.spec for it in sweep("smoke", arches=["gfx942"])]
N = 6


def _build(path: Path, n: int = N) -> set[str]:
    with Cache(path) as c:
        keys = {c.put(fake_compiled(s)) for s in SMOKE[:n]}
    return keys


def _cli(*args):
    return CliRunner().invoke(main, ["cache", *args])


def _verify_fails(path: Path, *words):
    r = _cli("verify", "--cache", str(path))
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    for w in words:
        assert w in r.output, r.output
    return r


def _rebuild_restores(path: Path, keys: set[str]):
    r = _cli("rebuild-index", "--cache", str(path))
    assert r.exit_code == 0, r.output
    with Cache(path, create=False) as c:
        assert {e.key for e in c.entries()} == keys
        assert c.verify() == []
        for k in keys:
            c.load_binary(k)
    assert _cli("verify", "--cache", str(path)).exit_code == 0


# -- the index cannot be lost in silence ---------------------------------------------------------
@pytest.mark.parametrize("damage", ["zero-length", "deleted"])
def test_an_emptied_or_deleted_index_is_reported_and_rebuilt(tmp_path, damage):
    path = tmp_path / "c"
    keys = _build(path)
    db = path / "index.sqlite"
    if damage == "zero-length":
        db.write_bytes(b"")
    else:
        db.unlink()
    _verify_fails(path, "rebuild-index", "missing from the index")
    with pytest.raises(CacheError, match="rebuild-index"):
        Cache(path).gc(min_age=0)  # would delete every object: refused
    assert len(list((path / "objects").rglob("*"))) > N
    _rebuild_restores(path, keys)


def test_a_foreign_sqlite_file_is_refused_untouched_and_moved_aside_by_rebuild(tmp_path):
    path = tmp_path / "c"
    keys = _build(path)
    db = path / "index.sqlite"
    db.unlink()
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    with pytest.raises(CacheError, match="something else"):
        Cache(path)
    r = _cli("ls", "--cache", str(path))
    assert r.exit_code == CacheError.exit_code and "something else" in r.output
    assert db.read_bytes() == before  # no skwgrad tables added
    conn = sqlite3.connect(db)
    assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["photos"]
    conn.close()
    _rebuild_restores(path, keys)
    aside = list(path.glob("index.sqlite.aside-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == before  # moved aside, never deleted
    # a file that is not SQLite at all: refused the same way
    other = tmp_path / "d"
    keys2 = _build(other)
    (other / "index.sqlite").write_bytes(b"PNG\x89" * 1000)
    r = _cli("verify", "--cache", str(other))
    assert r.exit_code == CacheError.exit_code and "rebuild-index" in r.output
    _rebuild_restores(other, keys2)


def test_another_caches_index_is_reported(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    keys = _build(a)
    _build(b, 2)
    for suffix in ("", "-wal", "-shm"):
        (a / f"index.sqlite{suffix}").unlink(missing_ok=True)
    shutil.copy(b / "index.sqlite", a / "index.sqlite")
    _verify_fails(a, "belongs to another cache")
    with pytest.raises(CacheError, match="rebuild-index"):
        Cache(a).gc(min_age=0)
    r = _cli("rebuild-index", "--cache", str(a))
    assert r.exit_code == 0, r.output
    with Cache(a) as c:
        assert keys <= {e.key for e in c.entries()}


KILLED_WRITER = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {tests!r})
    from _codeobj import fake_compiled
    from skwgrad.aot.sweep import sweep
    from skwgrad.cache import Cache
    c = Cache(sys.argv[1])
    c.db.conn.execute("PRAGMA wal_autocheckpoint = 0")
    specs = [it.spec for it in sweep("smoke", arches=["gfx942"])]
    keys = [c.put(fake_compiled(s)) for s in specs[:{n}]]
    print(" ".join(keys), flush=True)
    os._exit(0)  # like kill -9: no checkpoint, the committed rows are only in the -wal
    """
)


@pytest.mark.parametrize("damage", ["wal deleted", "wal truncated"])
def test_a_lost_wal_after_a_kill_is_reported_and_rebuilt(tmp_path, damage):
    path = tmp_path / "c"
    script = tmp_path / "w.py"
    script.write_text(KILLED_WRITER.format(tests=str(Path(__file__).parent), n=N))
    out = subprocess.run([sys.executable, str(script), str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    keys = set(out.stdout.split())
    wal = path / "index.sqlite-wal"
    assert wal.stat().st_size > 0
    (path / "index.sqlite-shm").unlink(missing_ok=True)
    if damage == "wal deleted":
        wal.unlink()
    else:
        with open(wal, "r+b") as f:
            f.truncate(wal.stat().st_size // 3)
    with Cache(path) as c:
        assert {e.key for e in c.entries()} != keys  # rows were lost ...
    _verify_fails(path, "rebuild-index")  # ... and verify says so
    _rebuild_restores(path, keys)


def test_unindexed_objects_fail_verify(tmp_path):
    path = tmp_path / "c"
    _build(path)
    with Cache(path) as c:
        junk = c.object_path("ab" * 32)
        junk.parent.mkdir(parents=True, exist_ok=True)
        junk.write_bytes(b"left over")
        assert c.verify() == [] and c.notes  # young: a build in progress, a note only
        old = time.time() - 3600
        os.utime(junk, (old, old))
        assert any("named by no entry" in p for p in c.verify())
    _verify_fails(path, "named by no entry")
    assert _cli("gc", "--cache", str(path), "--min-age", "60").exit_code == 0
    assert not junk.exists() and _cli("verify", "--cache", str(path)).exit_code == 0


def test_an_old_cache_without_row_records_gets_them(tmp_path):
    path = tmp_path / "c"
    keys = _build(path)
    shutil.rmtree(path / "rows")
    (path / "skwgrad-cache.json").unlink()
    with Cache(path) as c:  # opening it writable backfills the records and the marker
        assert set(c.row_records()) == keys and c.verify() == []


# -- the gc race -------------------------------------------------------------------------------
def test_gc_cannot_delete_an_object_a_writer_just_reused(tmp_path, monkeypatch):
    """Deterministic interleaving: the writer finds the object it needs already there (an orphan
    left by an earlier, deleted entry, old enough for gc), then gc runs before the writer's row is
    committed. Without the write-lock check the row would name a deleted object."""
    path = tmp_path / "c"
    spec = SMOKE[0]
    ck = fake_compiled(spec)
    with Cache(path) as c:
        key = c.put(ck)
        sha = c.get(key).sha256
        with c._write() as conn:
            conn.execute("DELETE FROM entries WHERE key = ?", [key])
        c.row_path(key).unlink()
    old = time.time() - 3600
    os.utime(Cache(path).object_path(sha), (old, old))
    writer, collector = Cache(path), Cache(path)
    real = Cache._write_object
    ran = {}

    def write_then_gc(self, data, sha=None):
        out = real(self, data, sha)
        if self is writer and not ran:
            ran["gc"] = collector.gc(min_age=0)  # min_age=0: only the lock protects the object now
        return out

    monkeypatch.setattr(Cache, "_write_object", write_then_gc)
    assert writer.put(ck) == key
    assert ran["gc"]["orphan_files"] == 1  # gc did delete the orphan it saw ...
    assert writer.load_binary(key) == ck.binary  # ... and the writer put it back inside its transaction
    assert writer.verify() == []
    # and with the usual grace period, reuse alone protects it: the object was touched
    monkeypatch.setattr(Cache, "_write_object", real)
    os.utime(writer.object_path(sha), (old, old))
    writer.put(ck)
    assert time.time() - writer.object_path(sha).stat().st_mtime < 60
    assert collector.gc()["orphan_files"] == 0 and writer.load_binary(key) == ck.binary


# -- read-only, odd paths, other users ------------------------------------------------------------
def test_path_with_uri_characters_opens_exactly_that_path(tmp_path):
    path = tmp_path / "we?ird#na%me&mode=rw"
    keys = _build(path)
    before = {p for p in tmp_path.rglob("*")}
    with Cache(path, readonly=True) as ro:
        assert {e.key for e in ro.entries()} == keys and ro.verify() == []
        assert ro.load_binary(next(iter(keys)))
    r = _cli("ls", "--cache", str(path))
    assert r.exit_code == 0 and f"{N} entries" in r.output
    assert {p for p in tmp_path.rglob("*")} - before <= {p for p in path.rglob("*")}  # nothing created elsewhere
    assert store.sqlite_uri(path).count("?") == 0 and "%3F" in store.sqlite_uri(path) and "%23" in store.sqlite_uri(path)


def test_readers_never_create_a_cache(tmp_path):
    p = tmp_path / "nope"
    with pytest.raises(CacheError, match="no skwgrad cache"):
        Cache(p, create=False)
    for args in (["ls"], ["verify"], ["show", "abcdef"], ["gc"], ["export", str(tmp_path / "x.tar")], ["failures"]):
        r = _cli(*args, "--cache", str(p))
        assert r.exit_code == CacheError.exit_code and "Traceback" not in r.output, (args, r.output)
        assert not p.exists(), args


def test_objects_records_and_exports_are_world_readable(tmp_path):
    old = os.umask(0o077)
    try:
        path = tmp_path / "c"
        keys = _build(path, 2)
        with Cache(path) as c:
            files = [c.object_path(c.get(k).sha256) for k in keys] + [c.row_path(k) for k in keys] + [path / "skwgrad-cache.json"]
            c.export(tmp_path / "e.tar.gz")
            c.export_layout(tmp_path / "layout")
        files += [tmp_path / "e.tar.gz", tmp_path / "layout" / "manifest.json", *(tmp_path / "layout" / "objects").iterdir()]
        for f in files:
            assert stat.S_IMODE(f.stat().st_mode) == 0o644, f
    finally:
        os.umask(old)


def test_xdg_and_home_edge_cases(monkeypatch, tmp_path):
    monkeypatch.delenv("SKWGRAD_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # not absolute: ignored, as the spec says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "skwgrad"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "skwgrad"
    for home in ("", "relative"):
        monkeypatch.setenv("HOME", home)
        d = default_cache_dir()  # the password database's home, never /.cache or a relative path
        assert d != Path("/.cache/skwgrad") and d.is_absolute()
    import pwd

    monkeypatch.setattr(pwd, "getpwuid", lambda uid: (_ for _ in ()).throw(KeyError(uid)))
    monkeypatch.setenv("HOME", "")
    with pytest.raises(CacheError, match="XDG_CACHE_HOME"):
        default_cache_dir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "skwgrad"


RO_READER = textwrap.dedent(
    """
    import json, sys
    from click.testing import CliRunner
    from skwgrad.cache import Cache
    from skwgrad.cli import main
    path = sys.argv[1]
    c = Cache(path, create=False)
    out = {{"readonly": c.readonly, "immutable": c.immutable, "n": len(c.entries()), "problems": c.verify()}}
    out["loaded"] = sum(len(c.load_binary(e)) > 0 for e in c.entries())
    try:
        c.remember_tuned("gfx942", 304, "p", {{"key": "0" * 64}})
        out["wrote"] = True
    except Exception as e:
        out["write_refused"] = type(e).__name__
    ls = CliRunner().invoke(main, ["cache", "ls", "--cache", path])
    ver = CliRunner().invoke(main, ["cache", "verify", "--cache", path])
    out["ls"], out["verify"] = ls.exit_code, ver.exit_code
    out["ls_out"] = ls.output[-200:]
    print(json.dumps(out))
    """
)


def _ro_command(src: Path, mnt: Path, script: Path) -> list[str] | None:
    """A command that runs ``script`` with ``mnt`` a read-only view of ``src``: a read-only bind
    mount in a private mount namespace (root), or a directory tree without write permission
    (another user)."""
    py = sys.executable
    if os.geteuid() == 0:
        if shutil.which("unshare") is None:
            return None
        probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
        if probe.returncode != 0:
            return None
        sh = f"mount --bind '{src}' '{mnt}' && mount -o remount,bind,ro '{mnt}' && exec '{py}' '{script}' '{mnt}'"
        return ["unshare", "-m", "sh", "-c", sh]
    for p in [src, *src.rglob("*")]:
        if p.is_dir():
            p.chmod(0o555)
    return [py, str(script), str(src)]


def test_a_read_only_mount_is_listed_verified_and_served(tmp_path):
    src = tmp_path / "src"
    keys = _build(src)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = tmp_path / "ro.py"
    script.write_text(RO_READER.format())
    cmd = _ro_command(src, mnt, script)
    if cmd is None:
        pytest.skip("no way to make a read-only view here (not root, or no unshare)")
    before = sorted(str(p) for p in src.rglob("*"))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    for p in [src, *src.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["readonly"] and got["n"] == len(keys) and got["problems"] == [] and got["loaded"] == len(keys), got
    assert got.get("write_refused") == "CacheError" and got["ls"] == 0 and got["verify"] == 0, got
    assert sorted(str(p) for p in src.rglob("*")) == before  # nothing written


# -- layers ------------------------------------------------------------------------------------
def test_system_layer_under_a_user_layer(tmp_path, monkeypatch):
    sysp, userp = tmp_path / "system", tmp_path / "user"
    with Cache(sysp) as s:
        a, b = (s.put(fake_compiled(x)) for x in SMOKE[:2])
        s.remember_tuned("gfx942", 304, "p-sys", {"key": a, "pool": 1})
        s.remember_tuned("gfx942", 304, "p-both", {"key": a, "pool": 2})
    sys_files = {p: p.stat().st_mtime_ns for p in sysp.rglob("*")}
    with Cache(userp, system=False) as u:
        u_b = u.put(fake_compiled(SMOKE[1], salt=b"user build"))  # the same key, other bytes
        c = u.put(fake_compiled(SMOKE[2]))
    monkeypatch.setenv("SKWGRAD_SYSTEM_CACHE", str(sysp))
    u = Cache(userp)
    assert u.system is not None and u.system.readonly
    assert u_b == b
    got = {e.key: e for e in u.find("gfx942")}
    assert set(got) == {a, b, c}
    assert got[a].layer == "system" and got[b].layer == "user" and got[c].layer == "user"
    assert u.get(b).sha256 == Cache(userp, system=False).get(b).sha256  # the user layer wins
    assert u.load_binary(a) == fake_compiled(SMOKE[0]).binary  # served from the system layer
    assert u.load_binary(b) == fake_compiled(SMOKE[1], salt=b"user build").binary
    assert u.tuned("gfx942", 304, "p-sys")["pool"] == 1
    u.remember_tuned("gfx942", 304, "p-both", {"key": c, "pool": 3})
    u.remember_tuned("gfx942", 304, "p-user", {"key": c, "pool": 4})
    assert u.tuned("gfx942", 304, "p-both")["pool"] == 3 and u.tuned("gfx942", 304, "p-user")["pool"] == 4
    with Cache(sysp, system=False, immutable=True) as s:
        assert s.tuned("gfx942", 304, "p-user") is None and s.tuned("gfx942", 304, "p-both")["pool"] == 2
    assert {p: p.stat().st_mtime_ns for p in sysp.rglob("*")} == sys_files  # the system layer was never written
    r = _cli("ls", "--cache", str(userp))
    assert r.exit_code == 0 and "3 entries" in r.output
    # the system layer can be a directory nobody may write: opened immutable
    u.close()
