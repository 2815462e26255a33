"""``skwgrad cache pull`` from a local static server on 127.0.0.1 (issue 15): a whole cache, a
subset, an export file, file:// URLs, a transfer broken mid-way and resumed, a tampered object
(refused, nothing stored), a hostile listing (nothing written outside the cache)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _codeobj import fake_compiled  # noqa: E402

from skwgrad.aot.sweep import sweep  # noqa: E402
from skwgrad.cache import Cache  # noqa: E402
from skwgrad.cache.transfer import handler_for  # noqa: E402
from skwgrad.cli import main  # noqa: E402
from skwgrad.errors import CacheError  # noqa: E402

SMOKE = [it.spec for it in sweep("smoke", arches=["gfx942"]) if it.spec.family in ("wgrad", "wgrad_sk")]  # the dense kernels: a corpus row of C, K multiples of 8 picks some, not all


class Server:
    """A static server of ``root`` on 127.0.0.1 (an ephemeral port) in a daemon thread. It logs
    each request; ``break_next`` makes the next GET of a path send half its body and hang up."""

    def __init__(self, root: Path):
        base = handler_for(root)
        self.log, self.break_paths = [], set()
        server = self

        class H(base):
            def do_GET(self):
                server.log.append((self.path, self.headers.get("Range")))
                if self.path in server.break_paths:
                    server.break_paths.discard(self.path)
                    data = (root / self.path.lstrip("/")).read_bytes()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                return super().do_GET()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.timeout = 5
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def served(tmp_path):
    src = Cache(tmp_path / "build")
    keys = [src.put(fake_compiled(s, a)) for s in SMOKE[:5] for a in ("gfx942", "sm_90")]
    src.remember_tuned("gfx942", 304, "n=8", {"key": keys[0], "pool": 304})
    root = tmp_path / "www"
    src.export_layout(root / "cache")
    src.export(root / "kernels.tar.gz")
    srv = Server(root)
    yield src, keys, srv, root
    srv.close()
    src.close()


def _objects(c: Cache) -> set[str]:
    return {p.name for p in c._object_files()}


def test_pull_a_whole_layout_and_an_export_file(served, tmp_path):
    src, keys, srv, root = served
    r = CliRunner().invoke(main, ["cache", "pull", srv.url + "cache/", "--cache", str(tmp_path / "node")])
    assert r.exit_code == 0, r.output
    with Cache(tmp_path / "node") as c:
        assert {e.key for e in c.entries()} == set(keys) and c.verify() == []
        assert c.tuned("gfx942", 304, "n=8")["pool"] == 304
        for k in keys:
            assert c.load_binary(k) == src.load_binary(k)
        # pulling again fetches nothing
        n = len(srv.log)
        again = c.pull(srv.url + "cache/")
        assert again["fetched_objects"] == 0 and again["already_present"] == len(keys)
        assert [p for p, _ in srv.log[n:]] == ["/cache/manifest.json"]
    with Cache(tmp_path / "node2") as c:
        r = c.pull(srv.url + "kernels.tar.gz")
        assert r["imported"] == len(keys) and c.verify() == []
    with Cache(tmp_path / "node3") as c:  # file:// too, both forms
        assert c.pull((root / "cache").as_uri() + "/")["imported"] == len(keys)
        assert c.pull((root / "kernels.tar.gz").as_uri())["already_present"] == len(keys)
        assert not list((c.path / "objects" / "tmp").iterdir())


def test_pull_a_subset_fetches_only_its_objects(served, tmp_path):
    src, keys, srv, root = served
    with Cache(tmp_path / "node") as c:
        r = c.pull(srv.url + "cache/", arch="sm_90")
        assert r["imported"] == 5 and {e.arch for e in c.entries()} == {"sm_90"}
        fetched = [p for p, _ in srv.log if p.startswith("/cache/objects/")]
        assert len(fetched) == 5
        assert {p.rsplit("/", 1)[1] for p in fetched} == {src.get(k).sha256 for k in keys if src.get(k).arch == "sm_90"}
        one = next(k for k in keys if src.get(k).arch == "gfx942")
        assert c.pull(srv.url + "cache/", keys=[one])["imported"] == 1
        label = SMOKE[2].label
        assert c.pull(srv.url + "cache/", grep=label, arch="gfx942")["imported"] == 1
        assert c.verify() == []


def test_pull_a_corpus_subset(served, tmp_path):
    """--corpus: only kernels that can run one of the corpus problems (here: 2-D bf16 with C and
    K multiples of 8), and the Stage-2 reduces of its dW dtype."""
    from skwgrad.abi.conv import read_corpus

    src, keys, srv, root = served
    csv = tmp_path / "corpus.csv"
    csv.write_text("name,n,in_channels,out_channels,groups,d,h,w,z,y,x,stride,padding,dilation,dtype,regime\n"
                   "a,8,16,40,1,1,32,32,1,3,3,1,1,1,bf16,x\n")  # fmt: skip
    (p,) = [p for _, _, p in read_corpus(csv)]
    want = set()
    for k in keys:
        e = src.get(k)
        try:
            e.spec.check_problem(p)
            want.add(k)
        except Exception:
            pass
    assert 0 < len(want) < len(keys)
    node = tmp_path / "node"
    r = CliRunner().invoke(main, ["cache", "pull", srv.url + "cache/", "--corpus", str(csv), "--cache", str(node)])
    assert r.exit_code == 0, r.output
    with Cache(node) as c:
        assert {e.key for e in c.entries()} == want and c.verify() == []
    fetched = {p.rsplit("/", 1)[1] for p, _ in srv.log if p.startswith("/cache/objects/")}
    assert fetched == {src.get(k).sha256 for k in want}


def test_a_broken_transfer_resumes(served, tmp_path):
    src, keys, srv, root = served
    e = src.get(keys[3])
    path = f"/cache/objects/{e.sha256}"
    srv.break_paths.add(path)
    node = tmp_path / "node"
    r = CliRunner().invoke(main, ["cache", "pull", srv.url + "cache/", "--cache", str(node)])
    assert r.exit_code == CacheError.exit_code and "resume" in r.output and "Traceback" not in r.output, r.output
    with Cache(node) as c:
        assert c.entries() == [] and _objects(c) == set()  # nothing entered the cache
        part = c.path / "objects" / "tmp" / f"{e.sha256}.part"
        assert 0 < part.stat().st_size < e.nbytes  # what arrived is kept
        r = c.pull(srv.url + "cache/")
        assert r["imported"] == len(keys) and c.verify() == []
        assert (path, f"bytes={e.nbytes // 2}-") in srv.log  # resumed with a range request
        assert c.load_binary(keys[3]) == src.load_binary(keys[3])
    # an export file broken mid-way resumes the same way
    srv.break_paths.add("/kernels.tar.gz")
    with Cache(tmp_path / "node2") as c:
        with pytest.raises(CacheError, match="resume"):
            c.pull(srv.url + "kernels.tar.gz")
        assert c.entries() == []
        assert c.pull(srv.url + "kernels.tar.gz")["imported"] == len(keys)
        assert any(p == "/kernels.tar.gz" and rng for p, rng in srv.log)


def test_a_tampered_object_is_refused_and_nothing_is_stored(served, tmp_path):
    src, keys, srv, root = served
    e = src.get(keys[1])
    obj = root / "cache" / "objects" / e.sha256
    data = bytearray(obj.read_bytes())
    data[200] ^= 0xFF
    obj.write_bytes(bytes(data))
    node = tmp_path / "node"
    r = CliRunner().invoke(main, ["cache", "pull", srv.url + "cache/", "--cache", str(node)])
    assert r.exit_code == CacheError.exit_code and "tampered" in r.output, r.output
    with Cache(node) as c:
        assert c.entries() == [] and _objects(c) == set()
        assert not (c.path / "objects" / "tmp" / f"{e.sha256}.part").exists()
        assert c.verify() == []
    # a longer object than the manifest says: refused as it streams (never more than nbytes read)
    obj.write_bytes(bytes(data) * 50)
    with Cache(node) as c:
        with pytest.raises(CacheError):
            c.pull(srv.url + "cache/")
        assert c.entries() == []


def test_a_hostile_listing_writes_nothing_outside_the_cache(served, tmp_path):
    src, keys, srv, root = served
    m = json.loads((root / "cache" / "manifest.json").read_text())
    outside = tmp_path / "outside"
    outside.mkdir()
    cases = []
    for name, fn in (
        ("sha path", lambda r: r.update(sha256="../../../outside/pwn")),
        ("sha absolute", lambda r: r.update(sha256="/etc/passwd")),
        ("nbytes huge", lambda r: r.update(nbytes=1 << 40)),
        ("label escapes", lambda r: r.update(label="\x1b[2J")),
    ):
        mm = json.loads(json.dumps(m))
        fn(mm["entries"][0])
        cases.append((name, mm))
    cases.append(("not a manifest", {"entries": "x"}))
    cases.append(("objects map hostile", {**m, "objects": {"../../x": 5}}))
    before = {p for p in tmp_path.rglob("*")}
    for name, mm in cases:
        d = root / f"h-{len(list(root.iterdir()))}"
        shutil.copytree(root / "cache", d)
        (d / "manifest.json").write_text(json.dumps(mm))
        node = tmp_path / "node"
        r = CliRunner().invoke(main, ["cache", "pull", srv.url + d.name + "/", "--cache", str(node)])
        if name == "objects map hostile":  # the objects map is advisory: rows decide, and they are fine
            assert r.exit_code == 0, r.output
            shutil.rmtree(node)
            continue
        assert r.exit_code == CacheError.exit_code and "Traceback" not in r.output and "\x1b" not in r.output, (name, r.output)
        with Cache(node) as c:
            assert c.entries() == [] and _objects(c) == set(), name
    new = {p for p in tmp_path.rglob("*")} - before
    assert all(p.is_relative_to(root) or p.is_relative_to(tmp_path / "node") for p in new), new
    assert list(outside.iterdir()) == []
    # a URL that is not http(s)/file, and a 404
    with Cache(tmp_path / "n2") as c:
        with pytest.raises(CacheError, match="http"):
            c.pull("ftp://127.0.0.1/x/")
        with pytest.raises(CacheError, match="HTTP 404"):
            c.pull(srv.url + "nothing-here/")


def test_serve_handler_supports_ranges(served):
    import requests

    src, keys, srv, root = served
    e = src.get(keys[0])
    r = requests.get(srv.url + f"cache/objects/{e.sha256}", headers={"Range": "bytes=10-"}, timeout=10)
    assert r.status_code == 206 and r.content == src.load_binary(keys[0])[10:]
    assert requests.get(srv.url + "cache/", timeout=10).status_code == 404  # no listings
    assert hashlib.sha256(requests.get(srv.url + f"cache/objects/{e.sha256}", timeout=10).content).hexdigest() == e.sha256
