"""Hostile and damaged exports (issue 15): every one refused with a clear error (exit code of
its class, no traceback) or imported harmlessly; nothing written before everything is checked,
nothing written outside the cache, members read bounded; objects bound to their rows by their
own metadata; damaged entries skipped by ``find`` and raised as ``DamagedEntryError``; terminal
output escaped."""

from __future__ import annotations

import io
import json
import lzma
import os
import subprocess
import sys
import tarfile
import textwrap
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _codeobj import build_elf, fake_compiled  # noqa: E402

from skwgrad.aot.sweep import sweep  # noqa: E402
from skwgrad.cache import Cache  # noqa: E402
from skwgrad.cache.validate import ExportRefused, printable  # noqa: E402
from skwgrad.cli import main  # noqa: E402
from skwgrad.errors import CacheError, DamagedEntryError  # noqa: E402

SMOKE = [it.spec for it in sweep("smoke", arches=["gfx942"])]


def _same_family_pair():
    """Two specs of one family and variant whose objects differ (the swap a binding must catch):
    the kernel name, kernarg layout and LDS are the same, only the work-group size and what it
    implies differ."""
    from skwgrad.abi.spec import KernelSpec

    a = next(s for s in SMOKE if s.family == "wgrad_sk" and s.variant == "linear")
    b = KernelSpec(**{**a.to_dict(), "num_warps": 8 if a.num_warps == 4 else 4})
    return a, b


@pytest.fixture
def src(tmp_path):
    c = Cache(tmp_path / "src")
    for s in SMOKE[:4]:
        c.put(fake_compiled(s))
    a, b = _same_family_pair()
    c.put(fake_compiled(a))
    c.put(fake_compiled(b))
    c.put(fake_compiled(SMOKE[0], "sm_90"))
    c.remember_tuned("gfx942", 304, "n=8,c=16", {"key": Cache.key_for(a, "gfx942"), "pool": 304, "ks_count": 1, "us": 12.5})
    yield c
    c.close()


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def _manifest_and_objects(c: Cache, tmp_path) -> tuple[dict, dict]:
    out = tmp_path / "good.tar"
    c.export(out)
    objects = {}
    with tarfile.open(out) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
        for m in tar:
            if m.name.startswith("objects/"):
                objects[m.name] = tar.extractfile(m).read()
    return manifest, objects


def _write_tar(path: Path, members: list[tuple[str, bytes]], mode: str = "w", first=None):
    with tarfile.open(path, mode) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _archive(tmp_path, manifest, objects, name="x.tar", extra=()):
    body = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
    return _write_tar(tmp_path / name, [("manifest.json", body), *objects.items(), *extra])


def _mutate(manifest, fn):
    m = json.loads(json.dumps(manifest))
    fn(m)
    return m


def _row(m, i=0):
    return m["entries"][i]


def _set_md(m, i, **kw):
    md = json.loads(m["entries"][i]["metadata_json"])
    md.update(kw)
    m["entries"][i]["metadata_json"] = json.dumps(md, sort_keys=True)


def _hostile(manifest, objects):
    """(name, manifest, objects) of archives that must be refused."""
    a, b = _same_family_pair()
    rows = manifest["entries"]
    ia = next(i for i, r in enumerate(rows) if r["label"] == a.label and r["arch"] == "gfx942")
    ib = next(i for i, r in enumerate(rows) if r["label"] == b.label and r["arch"] == "gfx942")

    def swap(m):
        ra, rb = m["entries"][ia], m["entries"][ib]
        for f in ("sha256", "nbytes"):
            ra[f], rb[f] = rb[f], ra[f]

    def swap_all(m):  # the objects and every column that describes them: only the object's own metadata tells
        ra, rb = m["entries"][ia], m["entries"][ib]
        mda, mdb = json.loads(ra["metadata_json"]), json.loads(rb["metadata_json"])
        mda["amd"], mdb["amd"] = mdb["amd"], mda["amd"]
        ra["metadata_json"], rb["metadata_json"] = json.dumps(mda), json.dumps(mdb)
        for f in ("sha256", "nbytes", "vgpr", "sgpr", "vgpr_spills", "sgpr_spills", "scratch"):
            ra[f], rb[f] = rb[f], ra[f]

    cases = [
        ("sha256 /dev/zero, null nbytes", lambda m: _row(m).update(sha256="/dev/zero", nbytes=None)),
        ("sha256 a path out of the cache", lambda m: _row(m).update(sha256="../../outside/secret.txt")),
        ("sha256 upper-case hex", lambda m: _row(m).update(sha256=_row(m)["sha256"].upper())),
        ("nbytes a string", lambda m: _row(m).update(nbytes=str(_row(m)["nbytes"]))),
        ("nbytes a bool", lambda m: _row(m).update(nbytes=True)),
        ("nbytes 8 GiB", lambda m: _row(m).update(nbytes=8 << 30)),
        ("nbytes wrong", lambda m: _row(m).update(nbytes=_row(m)["nbytes"] + 1)),
        ("metadata_json broken", lambda m: _row(m).update(metadata_json="{broken")),
        ("metadata_json a list", lambda m: _row(m).update(metadata_json="[]")),
        ("spec_json broken", lambda m: _row(m).update(spec_json="{broken")),
        ("metadata threads=1", lambda m: _set_md(m, 0, threads=1)),
        ("metadata shared huge", lambda m: _set_md(m, 0, shared=1 << 30)),
        ("metadata kernarg lies", lambda m: _set_md(m, 0, kernarg={"names": ["dy"], "offsets": [0], "size": 8, "tail_pointers": 0})),
        ("metadata kernel name with escapes", lambda m: _set_md(m, 0, name="k\x1b[2J")),
        ("label full of escapes", lambda m: _row(m).update(label="\x1b]0;pwned\x07\x1b[2J" + _row(m)["label"])),
        ("label not the spec's", lambda m: _row(m).update(label="wgrad_something_else")),
        ("arch unknown", lambda m: _row(m).update(arch="gfx90a")),
        ("key of another spec", lambda m: _row(m).update(key=_row(m, 1)["key"])),
        ("threads column lies", lambda m: _row(m).update(threads=1)),
        ("unknown row field", lambda m: _row(m).update(evil=1)),
        ("duplicate row", lambda m: m["entries"].append(dict(_row(m)))),
        ("row not an object", lambda m: m["entries"].append("x")),
        ("rows swapped", swap),
        ("rows swapped with their columns", swap_all),
        ("tuned choice_json broken", lambda m: m["tuned"].append({**m["tuned"][0], "choice_json": "{broken"})),
        ("tuned pool a string", lambda m: m["tuned"].append({**m["tuned"][0], "problem_key": "q", "choice_json": json.dumps({"key": _row(m)["key"], "pool": "many"})})),
        ("tuned cus zero", lambda m: m["tuned"].append({**m["tuned"][0], "problem_key": "q", "cus": 0})),
        ("tuned key not a sha", lambda m: m["tuned"].append({**m["tuned"][0], "problem_key": "q", "choice_json": json.dumps({"key": "../x"})})),
        ("tuned problem key with escapes", lambda m: m["tuned"].append({**m["tuned"][0], "problem_key": "p\x1b[2J"})),
        ("entries a string", lambda m: m.update(entries="x")),
        ("tuned an object", lambda m: m.update(tuned={})),
        ("version a string", lambda m: m.update(version="1")),
        ("version from the future", lambda m: m.update(version=99)),
        ("format wrong", lambda m: m.update(format="tarball")),
    ]
    out = [(name, _mutate(manifest, fn), objects) for name, fn in cases]
    first = next(iter(objects))
    bad = dict(objects)
    bad[first] = bad[first][:100] + bytes([bad[first][100] ^ 1]) + bad[first][101:]
    out.append(("a corrupt object", manifest, bad))
    missing = dict(objects)
    missing.pop(first)
    out.append(("a missing object", manifest, missing))
    # an object that is no code object at all, its row rewritten to match its bytes
    junk = b"\0" * 4096
    import hashlib

    jsha = hashlib.sha256(junk).hexdigest()
    m = _mutate(manifest, lambda m: _row(m).update(sha256=jsha, nbytes=len(junk)))
    out.append(("an object that is not ELF", m, {**objects, f"objects/{jsha}": junk}))
    # an ELF for the wrong machine under an AMD row
    row0 = manifest["entries"][0]
    elf = build_elf("sm_90", json.loads(row0["metadata_json"])["name"], b"payload")
    esha = hashlib.sha256(elf).hexdigest()
    m = _mutate(manifest, lambda m: _row(m).update(sha256=esha, nbytes=len(elf)))
    out.append(("a CUDA object under an AMD row", m, {**objects, f"objects/{esha}": elf}))
    return out


def test_every_hostile_archive_is_refused_with_nothing_written(src, tmp_path):
    manifest, objects = _manifest_and_objects(src, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    dst_path = tmp_path / "dst"
    dst = Cache(dst_path)
    cases = _hostile(manifest, objects)
    assert len(cases) >= 35
    before_outside = _tree(tmp_path)
    for name, m, objs in cases:
        f = _archive(tmp_path, m, objs, name="hostile.tar")
        r = CliRunner().invoke(main, ["cache", "import", str(f), "--cache", str(dst_path)])
        assert r.exit_code == CacheError.exit_code, (name, r.output)
        assert r.output.startswith("error:") and "Traceback" not in r.output, (name, r.output)
        assert "\x1b" not in r.output and "\x07" not in r.output, name
        with pytest.raises(CacheError):
            dst.import_(f)
        # nothing was written: no entry, object, row record or tuned record
        assert dst.entries(all_versions=True) == [], name
        assert [p for p in (dst_path / "objects").rglob("*") if p.is_file()] == [], name
        assert not any((dst_path / "rows").rglob("*.json")), name
        assert list(dst.db.query("select * from tuned")) == [], name
        f.unlink()
    after = _tree(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("dst/")} == {k: v for k, v in before_outside.items() if not k.startswith("dst/")}
    assert dst.verify() == []
    # and the real archive imports
    r = dst.import_(_archive(tmp_path, manifest, objects, name="ok.tar"))
    assert r["imported"] == len(manifest["entries"]) and dst.verify() == []


def test_bad_archives_and_compressions_give_one_clear_error(src, tmp_path):
    manifest, objects = _manifest_and_objects(src, tmp_path)
    good = _archive(tmp_path, manifest, objects, name="good.tar")
    raw = good.read_bytes()
    files = {
        "corrupt.tar.xz": lzma.compress(raw)[:200] + b"\0garbage" * 50,
        "corrupt.tar.gz": b"\x1f\x8b\x08\x00" + os.urandom(300),
        "truncated.tar": raw[: len(raw) // 2],
        "empty.tar": b"",
        "junk.tar": b"not a tar at all" * 40,
        "manifest-not-json.tar": _write_tar(tmp_path / "m1.tar", [("manifest.json", b"{nope")]).read_bytes(),
        "manifest-a-list.tar": _write_tar(tmp_path / "m2.tar", [("manifest.json", b"[]")]).read_bytes(),
        "manifest-not-first.tar": _write_tar(tmp_path / "m3.tar", [*objects.items(), ("manifest.json", json.dumps(manifest).encode())]).read_bytes(),
        "manifest-deep.tar": _write_tar(tmp_path / "m4.tar", [("manifest.json", b"[" * 100000)]).read_bytes(),
    }
    dst_path = tmp_path / "dst"
    Cache(dst_path).close()
    for name, data in files.items():
        f = tmp_path / name
        f.write_bytes(data)
        r = CliRunner().invoke(main, ["cache", "import", str(f), "--cache", str(dst_path)])
        assert r.exit_code == CacheError.exit_code and r.output.startswith("error:"), (name, r.output)
        assert "Traceback" not in r.output and "nothing was imported" in r.output, (name, r.output)
    assert Cache(dst_path).entries(all_versions=True) == []


def test_unreferenced_and_odd_members_are_skipped_and_nothing_lands_outside(src, tmp_path):
    manifest, objects = _manifest_and_objects(src, tmp_path)
    f = tmp_path / "odd.tar"
    with tarfile.open(f, "w") as tar:
        for name, data in [("manifest.json", json.dumps(manifest).encode()), *objects.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, data in [("../../escape.txt", b"x"), ("/abs.txt", b"y"), ("objects/" + "0" * 64, b"unreferenced"), ("objects/../../up", b"z")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for kind, target in ((tarfile.SYMTYPE, "/etc/passwd"), (tarfile.LNKTYPE, "/etc/passwd")):
            info = tarfile.TarInfo("objects/" + next(iter(objects)).split("/")[1][:63] + ("a" if kind == tarfile.SYMTYPE else "b"))
            info.type, info.linkname = kind, target
            tar.addfile(info)
    before = _tree(tmp_path)
    dst = Cache(tmp_path / "sub" / "dst")
    r = dst.import_(f)
    assert r["imported"] == len(manifest["entries"])
    assert not (tmp_path / "escape.txt").exists() and not Path("/abs.txt").exists()
    new = set(_tree(tmp_path)) - set(before)
    assert all(k.startswith("sub/dst/") for k in new), new
    assert not (dst.object_path("0" * 64)).exists()  # unreferenced: skipped
    assert dst.verify() == []


def test_members_are_read_bounded(src, tmp_path):
    """A member larger than the limit is refused from its header; an unreferenced huge member is
    skipped without ever being held in memory (peak RSS checked in a child process)."""
    manifest, objects = _manifest_and_objects(src, tmp_path)
    first = next(iter(objects))
    # a row claiming 2 MiB against a 1 MiB limit: refused before reading
    m = _mutate(manifest, lambda m: _row(m).update(nbytes=2 << 20))
    with pytest.raises(ExportRefused, match="nbytes"):
        Cache(tmp_path / "d0").import_(_archive(tmp_path, m, objects, "big.tar"), max_object=1 << 20)
    # a member whose header declares 8 GiB (the data is not there): refused or skipped, no MemoryError
    f = tmp_path / "declared.tar"
    with tarfile.open(f, "w") as tar:
        info = tarfile.TarInfo("manifest.json")
        body = json.dumps(manifest).encode()
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
        for name, data in objects.items():
            i2 = tarfile.TarInfo(name)
            i2.size = len(data)
            tar.addfile(i2, io.BytesIO(data))
    with open(f, "ab") as out:
        h = tarfile.TarInfo(first)
        h.size = 8 << 30
        out.write(h.tobuf(format=tarfile.GNU_FORMAT) + b"\0" * 4096)
    try:
        Cache(tmp_path / "d1").import_(f)
    except CacheError as e:
        assert "nothing was imported" in str(e)
    # 1 GiB of zeros in a small .tar.gz, named by no row and placed before the real objects (the
    # import has to get past it): skipped, and the importing process never grows by anything
    # like 1 GiB (its peak RSS, measured in a fresh child process)
    class Zeros(io.RawIOBase):
        def __init__(self, n):
            self.n = n

        def readable(self):
            return True

        def readinto(self, b):
            k = min(len(b), self.n)
            b[:k] = bytes(k)
            self.n -= k
            return k

    path = tmp_path / "zeros.tar.gz"
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        body = json.dumps(manifest).encode()
        i = tarfile.TarInfo("manifest.json")
        i.size = len(body)
        tar.addfile(i, io.BytesIO(body))
        i = tarfile.TarInfo("objects/" + "f" * 64)
        i.size = 1 << 30
        tar.addfile(i, io.BufferedReader(Zeros(1 << 30), 1 << 20))
        for name, data in objects.items():
            i = tarfile.TarInfo(name)
            i.size = len(data)
            tar.addfile(i, io.BytesIO(data))
    assert path.stat().st_size < 8 << 20
    script = tmp_path / "rss.py"
    script.write_text(textwrap.dedent(f"""
        import json, resource
        from skwgrad.cache import Cache
        c = Cache({str(tmp_path / 'd2')!r})
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        r = c.import_({str(path)!r})
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({{"imported": r["imported"], "base_kib": base, "peak_kib": peak}}))
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["imported"] == len(manifest["entries"])
    assert got["peak_kib"] - got["base_kib"] < 128 * 1024, got  # a 1 GiB member was never resident
    assert not (tmp_path / "d2" / "objects" / "ff").exists()


def test_swapped_rows_in_a_local_index_are_refused_at_load(src):
    a, b = _same_family_pair()
    ka, kb = Cache.key_for(a, "gfx942"), Cache.key_for(b, "gfx942")
    ea, eb = src.get(ka), src.get(kb)
    with src._write() as conn:
        conn.execute("UPDATE entries SET sha256 = ?, nbytes = ? WHERE key = ?", [eb.sha256, eb.nbytes, ka])
        conn.execute("UPDATE entries SET sha256 = ?, nbytes = ? WHERE key = ?", [ea.sha256, ea.nbytes, kb])
    fresh = Cache(src.path)
    for k in (ka, kb):
        with pytest.raises(DamagedEntryError, match="differs from the row"):
            fresh.load_binary(k)
    problems = fresh.verify()
    assert sum("differs from the row" in p for p in problems) == 2


def test_one_damaged_row_is_skipped_by_find_and_raised_by_get(src):
    key = Cache.key_for(SMOKE[0], "gfx942")
    before = {e.key for e in src.find("gfx942")}
    with src._write() as conn:
        conn.execute("UPDATE entries SET metadata_json = '{broken' WHERE key = ?", [key])
    c = Cache(src.path)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = {e.key for e in c.find("gfx942")}
        c.find("gfx942")  # reported once
    assert got == before - {key}
    assert len(c.damaged) == 1 and key[:12] in c.damaged[0]
    assert sum("damaged cache entry" in str(x.message) for x in w) == 1
    with pytest.raises(DamagedEntryError):
        c.get(key)
    assert issubclass(DamagedEntryError, CacheError)
    # a damaged object: DamagedEntryError too, and the other entries still load
    e = c.get(Cache.key_for(SMOKE[1], "gfx942"))
    p = c.object_path(e.sha256)
    p.write_bytes(p.read_bytes()[:-1])
    with pytest.raises(DamagedEntryError, match="corrupt"):
        c.load_binary(e)
    assert c.load_binary(Cache.key_for(SMOKE[2], "gfx942"))
    # a row naming a path instead of a digest, and one naming a device: refused, never read
    with c._write() as conn:
        conn.execute("UPDATE entries SET sha256 = '/dev/zero', nbytes = NULL WHERE key = ?", [Cache.key_for(SMOKE[3], "gfx942")])
    got = c.find("gfx942")
    assert Cache.key_for(SMOKE[3], "gfx942") not in {x.key for x in got} and len(c.damaged) == 2
    r = CliRunner().invoke(main, ["cache", "verify", "--cache", str(c.path)])
    assert r.exit_code == 1 and "Traceback" not in r.output


def test_terminal_output_is_escaped(src):
    key = Cache.key_for(SMOKE[0], "gfx942")
    with src._write() as conn:
        conn.execute("UPDATE entries SET label = ? WHERE key = ?", ["\x1b]0;pwned\x07\x1b[2Jevil\r\n", key])
    for args in (["ls"], ["ls", "--all"], ["verify"], ["show", key[:12]]):
        r = CliRunner().invoke(main, ["cache", *args, "--cache", str(src.path)])
        assert "\x1b" not in r.output and "\x07" not in r.output and "\r" not in r.output, (args, r.output)
    assert printable("a\x1bb\x00c\u202ed") == "a\\x1bb\\x00c\\u202ed"


def test_a_spec_without_family_is_a_clear_refusal(src, tmp_path):
    manifest, objects = _manifest_and_objects(src, tmp_path)
    m = _mutate(manifest, lambda m: _row(m).update(spec_json=json.dumps({"variant": "x"})))
    with pytest.raises(ExportRefused, match="key does not match"):
        Cache(tmp_path / "d").import_(_archive(tmp_path, m, objects))
