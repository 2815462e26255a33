"""The keyed cache (SPEC section 7): keys, put/get/find, integrity, versions, failures, tuned
choices, verify/gc, export/import, concurrent writers, default location, bad input, and the
`skwgrad cache` commands.

These tests store synthetic code objects (distinct bytes per spec) so they need no compiler;
tests/test_build.py stores real ones.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import skwgrad.cache.store as store
from skwgrad.aot.compile import CompiledKernel, compiler_identity
from skwgrad.aot.kernels import source_hash
from skwgrad.abi.costmodel import MODEL_VERSION
from skwgrad.abi.spec import KernelSpec
from skwgrad.aot.sweep import sweep
from skwgrad.cache import Cache, CacheEntry, default_cache_dir
from skwgrad.cache.validate import IndexLost
from skwgrad.cli import main
from skwgrad.errors import CacheError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _codeobj import fake_compiled  # noqa: E402

SMOKE = [it.spec for it in sweep("smoke", arches=["gfx942"])]
SPEC = next(s for s in SMOKE if s.family == "wgrad_sk" and s.variant == "linear" and s.mode == "dp_sk")


def fake(spec: KernelSpec, arch: str = "gfx942", salt: bytes = b"", compiler: str | None = None) -> CompiledKernel:
    """A distinct, well-formed code object per spec (tests/_codeobj.py) with metadata that agrees
    with it: the cache binds every object to its row by the object's own metadata."""
    return fake_compiled(spec, arch, salt, compiler)


def flip_byte(path: Path, at: int = 17):
    data = bytearray(path.read_bytes())
    data[at] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.fixture
def cache(tmp_path):
    c = Cache(tmp_path / "cache")
    yield c
    c.close()


@pytest.fixture
def other_version(monkeypatch):
    """Run a block as if skwgrad had another compiler (or kernel sources)."""

    class Switch:
        def __init__(self):
            self.real = store._identity()

        def compiler(self, name):
            monkeypatch.setattr(store, "_identity", lambda: (name, self.real[1]))

        def source(self, h):
            monkeypatch.setattr(store, "_identity", lambda: (self.real[0], h))

        def restore(self):
            monkeypatch.setattr(store, "_identity", lambda: self.real)

    return Switch()


# -- keys ---------------------------------------------------------------------------------------
def test_key_is_sha256_of_canonical_json_of_family_spec_arch_compiler_source():
    payload = {"family": SPEC.family, "spec": SPEC.to_dict(), "arch": "gfx950", "compiler": compiler_identity(), "source": source_hash()}
    want = hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert Cache.key_for(SPEC, "gfx950") == want


def test_key_changes_with_every_input(other_version):
    base = Cache.key_for(SPEC, "gfx942")
    keys = {base, Cache.key_for(SPEC, "gfx950"), Cache.key_for(SPEC, "sm_90")}
    for field, value in (("bm", 64), ("num_stages", 3), ("mode", "persistent"), ("vec_c", 1), ("pointwise", True)):
        keys.add(Cache.key_for(KernelSpec(**{**SPEC.to_dict(), field: value}), "gfx942"))
    other_version.compiler("triton-0.0.0")
    keys.add(Cache.key_for(SPEC, "gfx942"))
    other_version.source("0" * 64)
    keys.add(Cache.key_for(SPEC, "gfx942"))
    assert len(keys) == 10
    with pytest.raises(Exception, match="gfx942, gfx950, sm_90"):
        Cache.key_for(SPEC, "gfx90a")


# -- put / get / find ---------------------------------------------------------------------------
def test_put_get_load_roundtrip_and_idempotent(cache):
    ck = fake(SPEC)
    key = cache.put(ck)
    assert key == Cache.key_for(SPEC, "gfx942") and cache.has(key) and cache.intact(key)
    e = cache.get(key)
    assert isinstance(e, CacheEntry)
    assert (e.key, e.spec, e.arch, e.label) == (key, SPEC, "gfx942", SPEC.label)
    assert e.sha256 == hashlib.sha256(ck.binary).hexdigest() and e.nbytes == len(ck.binary)
    assert e.metadata["threads"] == SPEC.num_warps * 64 and e.metadata["kernarg"]["offsets"][:2] == [0, 8]
    assert e.compiler == compiler_identity() and e.source_hash == source_hash() and e.current
    assert cache.load_binary(key) == ck.binary == cache.load_binary(e)
    # the object is a file named by its sha256 under objects/
    assert cache.object_path(e.sha256).read_bytes() == ck.binary
    assert cache.object_path(e.sha256).is_relative_to(cache.path / "objects")
    # put again: same key, same row (created unchanged), one row
    time.sleep(0.01)
    assert cache.put(ck) == key
    assert cache.get(key).created == e.created
    assert len(cache.entries()) == 1
    # per-entry metadata is in the index as well
    row = next(cache.db.query("select * from entries"))
    assert (row["threads"], row["shared"], row["vgpr"], row["sgpr"], row["sgpr_spills"]) == (SPEC.num_warps * 64, 4096, 64, 30, 2)
    assert row["compile_seconds"] == 0.25 and row["compiler"] == compiler_identity() and row["source_hash"] == source_hash()
    assert json.loads(row["spec_json"]) == SPEC.to_dict() and row["label"] == SPEC.label
    assert cache.db.journal_mode == "wal"


def test_get_missing_key_says_how_to_build(cache):
    with pytest.raises(CacheError, match="compile-all"):
        cache.get("ab" * 32)
    assert not cache.has("ab" * 32)


def test_find_filters_on_spec_fields(cache):
    for s in SMOKE:
        cache.put(fake(s, "gfx942"))
        cache.put(fake(s, "gfx950"))
    got = cache.find("gfx942", family="wgrad_sk", mode="dp_sk")
    assert {e.spec for e in got} == {s for s in SMOKE if s.family == "wgrad_sk" and s.mode == "dp_sk"}
    assert all(e.arch == "gfx942" for e in got)
    got = cache.find("gfx950", vec_c=1)  # a field that is not an index column
    assert {e.spec for e in got} == {s for s in SMOKE if s.vec_c == 1}
    assert cache.find("gfx950", family="wgrad", dw_dtype="fp32", variant="atomic")[0].spec.variant == "atomic"
    assert cache.find("sm_90") == []
    assert len(cache.entries()) == 2 * len(SMOKE) and len(cache.entries(arch="gfx950")) == len(SMOKE)
    with pytest.raises(CacheError, match="not KernelSpec field"):
        cache.find("gfx942", tile=128)


def test_entries_of_another_compiler_or_source_are_never_served(cache, other_version):
    other_version.compiler("triton-2.0.0")
    k_old_compiler = cache.put(fake(SPEC, salt=b"old-compiler", compiler="triton-2.0.0"))
    other_version.source("f" * 64)
    k_old_source = cache.put(fake(SPEC, salt=b"old-source"))
    other_version.restore()
    assert len({k_old_compiler, k_old_source, Cache.key_for(SPEC, "gfx942")}) == 3
    assert cache.find("gfx942") == [] and cache.find("gfx942", family=SPEC.family) == []
    assert cache.entries() == []
    assert {e.key for e in cache.entries(all_versions=True)} == {k_old_compiler, k_old_source}
    assert not cache.has(Cache.key_for(SPEC, "gfx942"))
    assert cache.other_versions("gfx942") == 2 and cache.other_versions("gfx950") == 0
    # and a launch that finds nothing says why, instead of only "build one"
    from skwgrad.abi.conv import parse_problem
    from skwgrad.launcher import select

    with pytest.raises(select.NoKernelError, match=r"it holds 2 gfx942 entries built by another Triton or from other skwgrad kernel sources"):
        select.choose(parse_problem("n=2,c=8,k=8,h=8,w=8,y=3,x=3"), cache, arch="gfx942", cus=304)
    for k in (k_old_compiler, k_old_source):
        with pytest.raises(CacheError, match="never served"):
            cache.load_binary(k)
        assert cache.load_binary(k, allow_stale=True)  # inspection only
    # the current build goes beside them and is the one served
    key = cache.put(fake(SPEC))
    assert [e.key for e in cache.find("gfx942")] == [key]
    # a kernel compiled by another Triton cannot be stored under this compiler's key
    with pytest.raises(CacheError, match="same Triton"):
        cache.put(fake(SMOKE[0], compiler="triton-9.9.9"))
    # gc drops the stale entries, keeps the current one intact
    r = cache.gc(min_age=0)
    assert r["stale_entries"] == 2 and r["orphan_files"] == 2
    assert [e.key for e in cache.entries(all_versions=True)] == [key] and cache.load_binary(key)
    assert cache.verify() == []


# -- integrity ----------------------------------------------------------------------------------
def test_flipped_byte_is_detected_reported_and_repaired_never_returned(cache):
    ck = fake(SPEC)
    key = cache.put(ck)
    e = cache.get(key)
    flip_byte(cache.object_path(e.sha256))
    with pytest.raises(CacheError) as err:
        cache.load_binary(key)
    msg = str(err.value)
    assert "corrupt" in msg and "skwgrad cache verify" in msg and "compile-all" in msg and SPEC.label in msg
    problems = cache.verify()
    assert len(problems) == 1 and SPEC.label in problems[0] and "corrupt" in problems[0]
    assert cache.has(key) and not cache.intact(key)
    # the CLI says so and exits non-zero
    r = CliRunner().invoke(main, ["cache", "verify", "--cache", str(cache.path)])
    assert r.exit_code == 1 and "PROBLEM" in r.output and SPEC.label in r.output
    # export refuses to carry it
    with pytest.raises(CacheError, match="corrupt"):
        cache.export(cache.path.parent / "x.tar")
    assert not (cache.path.parent / "x.tar").exists()
    # storing the kernel again repairs the object
    assert cache.put(ck) == key
    assert cache.load_binary(key) == ck.binary and cache.verify() == []


def test_truncated_and_missing_objects(cache):
    k1 = cache.put(fake(SMOKE[0]))
    k2 = cache.put(fake(SMOKE[1]))
    p1 = cache.object_path(cache.get(k1).sha256)
    p1.write_bytes(p1.read_bytes()[:-1])
    cache.object_path(cache.get(k2).sha256).unlink()
    problems = cache.verify()
    assert len(problems) == 2 and any("missing" in p for p in problems)
    for k in (k1, k2):
        with pytest.raises(CacheError, match="cache verify"):
            cache.load_binary(k)
    assert not cache.has(k2)


def test_row_whose_key_does_not_match_is_reported(cache):
    key = cache.put(fake(SPEC))
    with sqlite3.connect(cache.db_path) as conn:
        conn.execute("UPDATE entries SET spec_json = ? WHERE key = ?", [KernelSpec(**{**SPEC.to_dict(), "bm": 256}).canonical_json(), key])
    problems = cache.verify()
    assert len(problems) == 1 and "key does not match" in problems[0]


def test_orphans_from_an_interrupted_write_are_harmless_and_collected(cache):
    key = cache.put(fake(SPEC))
    # what a kill between the object write and the row commit leaves behind:
    orphan = cache._write_object(b"object whose row never got committed")
    tmp = cache.path / "objects" / "tmp" / "deadbeef.123.tmp"
    tmp.write_bytes(b"half a wri")
    assert cache.verify() == []
    assert set(cache.orphans()) == {cache.object_path(orphan), tmp}
    assert cache.gc()["orphan_files"] == 0  # younger than min_age: a running build may own them
    assert cache.gc(min_age=0)["orphan_files"] == 2
    assert cache.orphans() == [] and cache.load_binary(key)


# -- failures / tuned ---------------------------------------------------------------------------
def test_failures_are_recorded_with_message_and_cleared_by_success(cache, other_version):
    cache.record_failure(SPEC, "gfx950", "LLVM ERROR: cannot select: something")
    cache.record_failure(SPEC, "gfx950", "LLVM ERROR: again")
    (f,) = cache.failures()
    assert f["label"] == SPEC.label and f["arch"] == "gfx950" and f["message"] == "LLVM ERROR: again"
    assert f["attempts"] == 2 and f["key"] == Cache.key_for(SPEC, "gfx950") and f["time"] > 0
    r = CliRunner().invoke(main, ["cache", "failures", "--cache", str(cache.path)])
    assert r.exit_code == 0 and "LLVM ERROR: again" in r.output
    cache.put(fake(SPEC, "gfx950"))
    assert cache.failures() == []
    other_version.compiler("triton-1.0")
    cache.record_failure(SPEC, "gfx942", "old")
    other_version.restore()
    assert cache.failures() == [] and len(cache.failures(all_versions=True)) == 1


def test_tuned_choices(cache, other_version):
    assert cache.tuned("gfx942", 304, "p1") is None
    cache.remember_tuned("gfx942", 304, "p1", {"label": SPEC.label, "pool": 304})
    cache.remember_tuned("gfx942", 304, "p1", {"label": SPEC.label, "pool": 608})
    cache.remember_tuned("gfx942", 80, "p1", {"pool": 80})
    assert cache.tuned("gfx942", 304, "p1") == {"label": SPEC.label, "pool": 608}
    assert cache.tuned("gfx942", 80, "p1") == {"pool": 80} and cache.tuned("gfx950", 304, "p1") is None
    other_version.source("1" * 64)
    assert cache.tuned("gfx942", 304, "p1") is None  # a choice among kernels of other sources


# -- export / import ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cache.tar", "cache.tar.gz"])
def test_export_import_roundtrip(cache, tmp_path, name):
    keys = [cache.put(fake(s, a)) for s in SMOKE[:6] for a in ("gfx942", "sm_90")]
    cache.remember_tuned("gfx942", 304, "p", {"key": keys[0], "pool": 1})  # a record import accepts names an entry
    out = tmp_path / name
    r = cache.export(out)
    assert r["entries"] == 12 and out.is_file()
    dst = Cache(tmp_path / "gpu-machine")
    assert dst.import_(out)["imported"] == 12
    for k in keys:
        a, b = cache.get(k), dst.get(k)
        assert (a.spec, a.arch, a.sha256, a.metadata, a.created) == (b.spec, b.arch, b.sha256, b.metadata, b.created)
        assert dst.load_binary(k) == cache.load_binary(k)
    assert dst.tuned("gfx942", 304, "p") == {"key": keys[0], "pool": 1} and dst.verify() == []
    # importing again changes nothing; entries already present are kept as they are
    again = dst.import_(out)
    assert (again["imported"], again["already_present"], again["objects"], again["tuned"], again["tuned_added"]) == (0, 12, 12, 1, 0)
    # --arch exports one target
    assert cache.export(tmp_path / "one.tar", arch="sm_90")["entries"] == 6


def test_import_verifies_every_object_and_imports_nothing_from_a_damaged_file(cache, tmp_path):
    for s in SMOKE[:4]:
        cache.put(fake(s))
    good = tmp_path / "good.tar"
    cache.export(good)
    bad = tmp_path / "bad.tar"
    with tarfile.open(good) as src, tarfile.open(bad, "w") as dst:
        n = 0
        for m in src:
            data = src.extractfile(m).read()
            if m.name.startswith("objects/") and n == 2:
                data = data[:5] + bytes([data[5] ^ 1]) + data[6:]
            n += m.name.startswith("objects/")
            dst.addfile(m, io.BytesIO(data))
    dst_cache = Cache(tmp_path / "dst")
    with pytest.raises(CacheError, match="corrupt"):
        dst_cache.import_(bad)
    assert dst_cache.entries(all_versions=True) == [] and dst_cache.orphans() == []
    (tmp_path / "junk.tar").write_bytes(b"not a tar at all")
    with pytest.raises(CacheError, match="export"):
        dst_cache.import_(tmp_path / "junk.tar")
    r = CliRunner().invoke(main, ["cache", "import", str(bad), "--cache", str(dst_cache.path)])
    assert r.exit_code == CacheError.exit_code and r.output.startswith("error:")


# -- concurrent writers ---------------------------------------------------------------------------
WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from test_cache import fake
    from skwgrad.aot.sweep import sweep
    from skwgrad.cache import Cache
    specs = [it.spec for it in sweep("broad", arches=["gfx942"], dtypes=["bf16"], tiles="64x64x32")]
    lo, hi = int(sys.argv[1]), int(sys.argv[2])
    go = Path(sys.argv[3])
    c = Cache(sys.argv[4])
    while not go.exists():
        time.sleep(0.005)
    for s in specs[lo:hi]:
        c.put(fake(s))
    c.record_failure(specs[0], "gfx950", "from " + sys.argv[1])
    c.remember_tuned("gfx942", 304, "p" + sys.argv[1], {{"lo": lo}})
    """
)


OPENER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from skwgrad.cache import Cache
    go = Path(sys.argv[1])
    while not go.exists():
        time.sleep(0.0005)
    Cache(sys.argv[2])
    """
)


def test_many_processes_opening_one_new_cache_at_once_all_get_it(tmp_path):
    # SQLite answers "database is locked" at once, not after busy_timeout, when two connections
    # both switch a new index to WAL: every opener must wait its turn instead of failing
    # (before: about one round in six failed with 8 openers).
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1]))
    for round_ in range(3):
        go = tmp_path / f"go{round_}"
        path = tmp_path / f"cache{round_}"
        procs = [subprocess.Popen([sys.executable, "-c", OPENER, str(go), str(path)], stderr=subprocess.PIPE, text=True, env=env) for _ in range(12)]
        time.sleep(1.5)  # all imported and waiting
        go.touch()
        errs = [p.stderr.read() for p in procs if p.wait(timeout=120)]
        assert not errs, errs[0][-2000:]
        assert Cache(path, create=False).entries() == []  # one index, made once, readable


def test_opening_waits_out_an_index_locked_by_another_opener(tmp_path, monkeypatch):
    # the same race made deterministic: the WAL switch answers SQLITE_BUSY twice, then succeeds
    import sqlite3

    import sqlite_utils

    real, calls = sqlite_utils.Database.enable_wal, []

    def busy_twice(self):
        calls.append(1)
        if len(calls) <= 2:
            e = sqlite3.OperationalError("database is locked")
            e.sqlite_errorcode = sqlite3.SQLITE_BUSY
            raise e
        return real(self)

    monkeypatch.setattr(sqlite_utils.Database, "enable_wal", busy_twice)
    c = Cache(tmp_path / "c")
    assert len(calls) == 3 and c.db.journal_mode == "wal" and c.entries() == []
    # any other failure is not waited for: it names the index as before
    def broken(self):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(sqlite_utils.Database, "enable_wal", broken)
    with pytest.raises(IndexLost, match="disk I/O error"):
        Cache(tmp_path / "d")


def test_two_writers_at_once_lose_nothing(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(tests=str(Path(__file__).parent)))
    path = tmp_path / "shared-cache"
    go = tmp_path / "go"
    specs = [it.spec for it in sweep("broad", arches=["gfx942"], dtypes=["bf16"], tiles="64x64x32")]
    assert len(specs) >= 120
    # overlapping ranges: both write specs[40:80]
    procs = [subprocess.Popen([sys.executable, str(script), lo, hi, str(go), str(path)]) for lo, hi in (("0", "80"), ("40", "120"))]
    time.sleep(1.5)  # both imported and waiting
    go.touch()
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    c = Cache(path)
    assert {e.spec for e in c.entries()} == set(specs[:120])
    assert len(c.entries()) == 120
    assert c.verify() == [] and c.orphans() == []
    assert c.failures()[0]["attempts"] == 2
    assert c.tuned("gfx942", 304, "p0") == {"lo": 0} and c.tuned("gfx942", 304, "p40") == {"lo": 40}


# -- location and bad input ---------------------------------------------------------------------
def test_default_location(monkeypatch, tmp_path):
    monkeypatch.setenv("SKWGRAD_CACHE", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "env"
    monkeypatch.delenv("SKWGRAD_CACHE")
    assert default_cache_dir() == tmp_path / "xdg" / "skwgrad"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "skwgrad"
    c = Cache()
    assert c.path == tmp_path / "home" / ".cache" / "skwgrad" and (c.path / "index.sqlite").is_file()
    # the CLI honours SKWGRAD_CACHE too
    monkeypatch.setenv("SKWGRAD_CACHE", str(tmp_path / "env"))
    Cache(tmp_path / "env").put(fake(SPEC))
    r = CliRunner().invoke(main, ["cache", "ls"])
    assert r.exit_code == 0 and SPEC.label in r.output


def test_unusable_cache_paths_say_what_to_do(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(CacheError, match="--cache DIR"):
        Cache(f)
    d = tmp_path / "garbage"
    d.mkdir()
    (d / "index.sqlite").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(CacheError, match="move the cache directory aside"):
        Cache(d)
    assert (d / "index.sqlite").read_bytes() == b"this is not sqlite" * 100  # nothing deleted
    r = CliRunner().invoke(main, ["cache", "ls", "--cache", str(d)])
    assert r.exit_code == CacheError.exit_code and r.output.startswith("error:") and "Traceback" not in r.output


def test_read_only_cache_serves_but_refuses_writes(cache, monkeypatch):
    key = cache.put(fake(SPEC))
    real = os.access
    monkeypatch.setattr(store.os, "access", lambda p, m: False if m == os.W_OK else real(p, m))
    ro = Cache(cache.path)
    assert ro.readonly and ro.load_binary(key) == fake(SPEC).binary and ro.verify() == []
    for write in (lambda: ro.put(fake(SMOKE[0])), lambda: ro.remember_tuned("gfx942", 304, "p", {}), lambda: ro.gc()):
        with pytest.raises(CacheError, match="read-only"):
            write()
    empty = cache.path.parent / "empty"
    empty.mkdir()
    with pytest.raises(CacheError, match="read-only"):
        Cache(empty)


# -- commands -----------------------------------------------------------------------------------
def test_cache_commands(cache, tmp_path):
    keys = {s: cache.put(fake(s, a)) for s in SMOKE for a in ("gfx942",)}
    cache.put(fake(SPEC, "gfx950"))
    run = lambda *a: CliRunner().invoke(main, ["cache", *a, "--cache", str(cache.path)])  # noqa: E731
    r = run("ls")
    assert r.exit_code == 0
    for s in SMOKE:
        assert any(ln.startswith(s.label + " ") and " gfx942 " in ln and f" {s.family} " in ln for ln in r.output.splitlines())
    assert f"{len(SMOKE) + 1} entries" in r.output
    r = run("ls", "--arch", "gfx950", "--json")
    out = json.loads(r.output)
    assert out["version"] == 1 and [d["label"] for d in out["entries"]] == [SPEC.label]
    r = run("ls", "--family", "stage2")
    assert r.output.count("stage2_") == 2
    r = run("show", SPEC.label)  # in two arches
    assert r.exit_code == 1 and "--arch" in r.output
    r = run("show", SPEC.label, "--arch", "gfx942")
    info = json.loads(r.output)
    assert r.exit_code == 0 and info["key"] == keys[SPEC] and info["object_status"].startswith("intact") and info["served"]
    r = run("show", keys[SMOKE[0]][:10])
    assert json.loads(r.output)["label"] == SMOKE[0].label
    r = run("show", "no_such_kernel")
    assert r.exit_code == CacheError.exit_code and "cache ls" in r.output
    assert run("verify").exit_code == 0
    r = run("gc")
    assert r.exit_code == 0 and "removed 0 stale entries" in r.output
    out = tmp_path / "e.tar.gz"
    r = run("export", str(out))
    assert r.exit_code == 0 and out.is_file()
    r = CliRunner().invoke(main, ["cache", "import", str(out), "--cache", str(tmp_path / "other")])
    assert r.exit_code == 0 and f"imported {len(SMOKE) + 1} entries" in r.output
    r = CliRunner().invoke(main, ["cache", "ls", "--cache", str(tmp_path / "empty")])  # readers never create a cache
    assert r.exit_code == CacheError.exit_code and "compile-all" in r.output and not (tmp_path / "empty").exists()
    # a dry run says how much of the selection is already there (these synthetic entries carry
    # the real keys of the smoke specs)
    r = CliRunner().invoke(main, ["compile-all", "--preset", "smoke", "--arch", "gfx942", "--arch", "gfx950", "--dry-run", "--cache", str(cache.path)])
    n = len(sweep("smoke", arches=["gfx942", "gfx950"]))
    assert r.exit_code == 0 and f"{len(SMOKE) + 1} of {n}; a build would compile {n - len(SMOKE) - 1}" in r.output


# -- the cost model's constants ------------------------------------------------------------------
def _model(arch="gfx942", samples=10, scale=1.0):
    from skwgrad.abi.costmodel import TERMS, CostModel

    return CostModel(arch, tuple(scale * (i + 1) / 10 for i in range(len(TERMS))), source="fit", samples=samples)


def test_cost_models_are_kept_per_arch_cus_and_build(cache, other_version):
    assert cache.cost_model("gfx942", 304) is None
    cache.remember_model("gfx942", 304, _model())
    got = cache.cost_model("gfx942", 304)
    assert got.constants == _model().constants and got.source == "cache" and got.samples == 10
    assert cache.cost_model("gfx942", 80) is None and cache.cost_model("gfx950", 304) is None
    other_version.source("1" * 64)
    assert cache.cost_model("gfx942", 304) is None  # fitted to kernels of other sources
    other_version.restore()
    with cache._write() as conn:  # a record that does not parse is ignored, and said so
        conn.execute("UPDATE models SET model_json = '{\"version\": 99}'")
    with pytest.warns(UserWarning, match="calibrate"):
        assert cache.cost_model("gfx942", 304) is None


def test_export_import_carries_cost_models_and_keeps_the_better_fitted(cache, tmp_path):
    cache.put(fake(SMOKE[0], "gfx942"))
    cache.remember_model("gfx942", 304, _model(samples=50))
    out = tmp_path / "e.tar"
    assert cache.export(out)["models"] == 1
    dst = Cache(tmp_path / "gpu")
    r = dst.import_(out)
    assert (r["models"], r["models_added"]) == (1, 1)
    assert dst.cost_model("gfx942", 304).constants == _model(samples=50).constants
    # a model fitted on more timings is not replaced by one fitted on fewer; the reverse is
    dst.remember_model("gfx942", 304, _model(samples=80, scale=2.0))
    assert dst.import_(out)["models_added"] == 0 and dst.cost_model("gfx942", 304).samples == 80
    cache.remember_model("gfx942", 304, _model(samples=500, scale=3.0))
    cache.export(out)
    assert dst.import_(out)["models_added"] == 1 and dst.cost_model("gfx942", 304).constants == _model(scale=3.0).constants


def _rewrite_models(src, dst, **fields):
    """A copy of export ``src`` whose first model record has ``fields`` replaced."""
    with tarfile.open(src) as t:
        members = [(m, t.extractfile(m).read()) for m in t]
    manifest = json.loads(members[0][1])
    manifest["models"][0].update(fields)
    with tarfile.open(dst, "w") as t:
        for m, data in members:
            if m.name == "manifest.json":
                data = json.dumps(manifest).encode()
                m.size = len(data)
            t.addfile(m, io.BytesIO(data))


def test_import_skips_a_cost_model_of_another_model_version_and_keeps_the_kernels(cache, tmp_path):
    from skwgrad.abi.costmodel import MODEL_VERSION

    cache.put(fake(SMOKE[0], "gfx942"))
    cache.remember_model("gfx942", 304, _model())
    out, old = tmp_path / "e.tar", tmp_path / "old.tar"
    cache.export(out)
    _rewrite_models(out, old, model_json=json.dumps({"version": MODEL_VERSION - 1, "arch": "gfx942", "terms": ["main_iter"], "constants": [1.0]}))
    dst = Cache(tmp_path / "dst")
    r = dst.import_(old)
    assert (r["imported"], r["models"], r["models_added"], r["skipped"]) == (1, 0, 0, 1)
    assert len(dst.entries()) == 1 and dst.cost_model("gfx942", 304) is None  # the built-in constants then


@pytest.mark.parametrize("bad,match", [
    ({"model_json": "{}"}, "cost model"),
    ({"model_json": json.dumps({"version": MODEL_VERSION, "arch": "gfx942", "terms": ["x"], "constants": [1]})}, "cost model"),
    ({"model_json": '{"version": true, "arch": "gfx942"}'}, "cost model"),
    ({"arch": "gfx950"}, "not gfx950"),
    ({"cus": 0}, "cus"),
    ({"extra": 1}, "extra"),
])  # fmt: skip
def test_import_refuses_a_hostile_cost_model_record(cache, tmp_path, bad, match):
    cache.put(fake(SMOKE[0], "gfx942"))
    cache.remember_model("gfx942", 304, _model())
    out = tmp_path / "e.tar"
    cache.export(out)
    evil = tmp_path / "evil.tar"
    _rewrite_models(out, evil, **bad)
    dst = Cache(tmp_path / "dst")
    with pytest.raises(CacheError, match=match):
        dst.import_(evil)
    assert dst.entries(all_versions=True) == [] and dst.cost_model("gfx942", 304) is None
