"""``skwgrad cache ls|show|verify|rebuild-index|gc|export|import|pull|serve|failures``."""

from __future__ import annotations

import json
import sys
import time

import click

_cache_option = click.option(
    "--cache", "cache_dir", envvar="SKWGRAD_CACHE", type=click.Path(file_okay=False), default=None,
    help="cache directory [env SKWGRAD_CACHE; default $XDG_CACHE_HOME/skwgrad]",
)  # fmt: skip


def _open(cache_dir, create=False):
    """Readers never create a cache (a mistyped path is an error, not a new empty cache)."""
    from skwgrad.cache.store import Cache

    return Cache(cache_dir, create=create)


def _p(text) -> str:
    """Terminal-safe text: control characters from the index are escaped, never printed."""
    from skwgrad.cache.validate import printable

    return printable(text)


class _Group(click.Group):
    """Maps each typed error to its exit code (CheckFailed 1, usage 2, environment 3) and prints
    its message (escaped) with no traceback."""

    def invoke(self, ctx):
        from skwgrad.errors import SkwgradError

        try:
            return super().invoke(ctx)
        except SkwgradError as e:
            click.echo(f"error: {_p(e)}", err=True)
            sys.exit(e.exit_code)


def _size(n: int) -> str:
    return f"{n / 1024:.1f}K" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f}M"


def _table(rows) -> str:
    rows = [[_p(v) for v in r] for r in rows]
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w[i]) for i, v in enumerate(r)).rstrip() for r in rows)


@click.group("cache", cls=_Group)
def cache():
    """Inspect and maintain the kernel cache."""


@cache.command("ls")
@_cache_option
@click.option("--arch", default=None, help="only this target")
@click.option("--family", default=None, help="wgrad, wgrad_sk or stage2")
@click.option("--dtype", default=None, help="input dtype")
@click.option("--grep", "pattern", default=None, help="only labels containing this text")
@click.option("--all", "all_versions", is_flag=True, help="also entries of other compiler/source versions (never served)")
@click.option("--json", "as_json", is_flag=True)
def ls(cache_dir, arch, family, dtype, pattern, all_versions, as_json):
    """List cached kernels: label, arch, family, size."""
    c = _open(cache_dir)
    entries = [
        e for e in c.entries(arch=arch, all_versions=all_versions)
        if (family is None or e.family == family)
        and (dtype is None or (e.spec and e.spec.dtype == dtype))
        and (pattern is None or pattern in e.label)
    ]  # fmt: skip
    if as_json:
        click.echo(json.dumps({"version": 1, "cache": str(c.path), "entries": [
            {"key": e.key, "label": e.label, "arch": e.arch, "family": e.family, "bytes": e.nbytes,
             "current": e.current, "created": e.created, "layer": e.layer}
            for e in entries
        ], "damaged": c.damaged}, indent=1))  # fmt: skip
        return
    if not entries:
        click.echo(f"no entries in {c.path}" + (" matching the filters" if (arch or family or dtype or pattern) else "")
                   + f"; build some with `skwgrad compile-all --preset smoke --cache {c.path}`")  # fmt: skip
        return
    rows = [("label", "arch", "family", "size", "key", *(("version",) if all_versions else ()))]
    for e in entries:
        rows.append((e.label, e.arch, e.family, _size(e.nbytes), e.key[:12], *(("current" if e.current else "stale"),) * all_versions))
    click.echo(_table(rows))
    for m in c.damaged:
        click.echo(f"skipped a damaged entry: {_p(m)}", err=True)
    click.echo(f"{len(entries)} entries, {_size(sum(e.nbytes for e in entries))} in {c.path}")


@cache.command("show")
@click.argument("key_or_label")
@_cache_option
@click.option("--arch", default=None, help="pick the entry of this target when a label matches several")
def show(key_or_label, cache_dir, arch):
    """Metadata of one entry (by key prefix or label), and whether its object is intact."""
    from skwgrad.errors import CacheError

    c = _open(cache_dir)
    found = c.lookup(key_or_label, arch)
    if not found:
        raise CacheError(f"no cache entry has key or label {_p(repr(key_or_label))} in {c.path}; list them with `skwgrad cache ls`")
    if len(found) > 1:
        click.echo(f"{len(found)} entries match {key_or_label!r}; pass --arch or a longer key:", err=True)
        for e in found:
            click.echo(f"  {e.key[:16]}  {e.arch}  {_p(e.label)}  {'current' if e.current else 'stale'}", err=True)
        sys.exit(1)
    e = found[0]
    try:
        c.load_binary(e, allow_stale=True)
        status = "intact (sha256 verified)"
    except CacheError as err:
        status = f"DAMAGED: {_p(err)}"
    info = {
        "key": e.key, "label": e.label, "arch": e.arch, "family": e.family,
        "spec": e.spec.to_dict() if e.spec else None, "object": str(c.object_path(e.sha256)),
        "sha256": e.sha256, "bytes": e.nbytes, "object_status": status,
        "created": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.created)),
        "compiler": e.compiler, "source_hash": e.source_hash,
        "served": e.current, "metadata": e.metadata,
    }  # fmt: skip
    click.echo(json.dumps(info, indent=2))  # json.dumps escapes control characters


@cache.command("verify")
@_cache_option
@click.option("--json", "as_json", is_flag=True)
def verify(cache_dir, as_json):
    """Check the index, every entry's object (sha256, bound to its row) and key, and that no
    entry or object is unaccounted for; exit 1 when anything is wrong."""
    from skwgrad.errors import CheckFailed

    c = _open(cache_dir)
    problems = c.verify()
    n = len(c.entries(all_versions=True, layers=False))
    if as_json:
        click.echo(json.dumps({"version": 1, "cache": str(c.path), "entries": n, "problems": problems, "notes": c.notes}, indent=1))
    else:
        for note in c.notes:
            click.echo(f"note: {_p(note)}")
        for p in problems:
            click.echo(f"PROBLEM: {_p(p)}")
    if problems:
        raise CheckFailed(
            f"{len(problems)} problem(s) in {n} entries of {c.path}. Re-run `skwgrad compile-all` with the options "
            f"that built them to rebuild damaged entries (intact entries are kept); `skwgrad cache rebuild-index` restores lost ones"
        )
    if not as_json:
        click.echo(f"ok: {n} entries in {c.path}, every object verified")


@cache.command("rebuild-index")
@_cache_option
def rebuild_index(cache_dir):
    """Restore the index from the cache itself (the row records beside the objects). An index
    that cannot be opened is moved aside first (never deleted)."""
    from skwgrad.cache.store import IndexLost, reopen_after_moving_index_aside
    from skwgrad.errors import CacheError

    moved = []
    try:
        c = _open(cache_dir)
        why = c.identity_problem() if c.marker is not None else ""
        if why:
            c.close()
            raise IndexLost(why)
    except CacheError as e:
        from skwgrad.cache.store import DB_NAME, default_cache_dir
        from pathlib import Path

        path = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        if not (path / "skwgrad-cache.json").is_file() or not (path / DB_NAME).exists():
            raise
        click.echo(f"note: {_p(e)}", err=True)
        c, moved = reopen_after_moving_index_aside(path)
    for m in moved:
        click.echo(f"moved the old index aside to {_p(m)}")
    r = c.rebuild_index()
    for why in r["refused"]:
        click.echo(f"REFUSED: {_p(why)}")
    click.echo(f"restored {r['added']} entries ({r['records_written']} row records written); the index holds {r['entries']} entries")


@cache.command("gc")
@_cache_option
@click.option("--min-age", type=float, default=600.0, show_default=True,
              help="only remove unreferenced files older than this many seconds (a running build's newest object may not have its row yet)")  # fmt: skip
def gc(cache_dir, min_age):
    """Drop entries of other compiler/kernel-source versions and unreferenced objects."""
    c = _open(cache_dir)
    r = c.gc(min_age=min_age)
    click.echo(
        f"removed {r['stale_entries']} stale entries, {r['stale_failures']} stale failures, {r['stale_tuned']} stale tuned choices, "
        f"{r['orphan_files']} unreferenced files ({_size(r['bytes_freed'])})"
    )


@cache.command("export")
@click.argument("file", type=click.Path())
@_cache_option
@click.option("--arch", default=None, help="only this target")
@click.option("--all", "all_versions", is_flag=True, help="also entries of other compiler/source versions")
@click.option("--layout", is_flag=True, help="write FILE as a directory (manifest.json + objects/) any HTTP server can serve")
def export(file, cache_dir, arch, all_versions, layout):
    """Write the cache (or one arch) to one portable tar file (.tar.gz / .tar.xz compress), or
    with --layout to a static directory for `skwgrad cache pull URL/`."""
    c = _open(cache_dir)
    if layout:
        r = c.export_layout(file, arch=arch, all_versions=all_versions)
        click.echo(f"exported {r['entries']} entries ({r['objects']} objects, {r['tuned']} tuned choices) to the layout {_p(r['dir'])}")
        return
    r = c.export(file, arch=arch, all_versions=all_versions)
    click.echo(f"exported {r['entries']} entries ({r['objects']} objects, {r['tuned']} tuned choices) to {_p(r['file'])}")


_limit_options = [
    click.option("--max-object", type=int, default=None, help="largest object accepted, bytes [64 MiB]"),
    click.option("--max-total", type=int, default=None, help="most object bytes taken in, bytes [4 GiB]"),
]


def _limits(max_object, max_total) -> dict:
    out = {}
    if max_object is not None:
        out["max_object"] = max_object
    if max_total is not None:
        out["max_total"] = max_total
    return out


def _with_limits(f):
    for opt in reversed(_limit_options):
        f = opt(f)
    return f


@cache.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@_cache_option
@_with_limits
def import_cmd(file, cache_dir, max_object, max_total):
    """Add the entries of an export file; every row, tuned record and object is checked first."""
    c = _open(cache_dir, create=True)
    r = c.import_(file, **_limits(max_object, max_total))
    click.echo(f"imported {r['imported']} entries ({r['already_present']} already present, {r['objects']} objects verified, "
               f"{r['tuned_added']} of {r['tuned']} tuned records added) into {c.path}")  # fmt: skip


@cache.command("pull")
@click.argument("url")
@_cache_option
@click.option("--arch", default=None, help="only entries of this target")
@click.option("--grep", "pattern", default=None, help="only entries whose label contains this text")
@click.option("--key", "keys", multiple=True, help="only this entry (repeatable)")
@click.option("--corpus", type=click.Path(exists=True, dir_okay=False), default=None,
              help="only kernels that can run a problem of this corpus CSV (and the Stage-2 reduces)")  # fmt: skip
@_with_limits
def pull_cmd(url, cache_dir, arch, pattern, keys, corpus, max_object, max_total):
    """Fetch kernels from URL: an export file (http(s)://.../kernels.tar.gz, file://...) or a
    layout written by `cache export --layout` (URL of its directory). The checks of `import`
    apply, each object's sha256 is checked before it enters the cache, and a broken transfer
    resumes when the same command runs again."""
    problems = None
    if corpus:
        from skwgrad.abi.conv import read_corpus

        problems = [p for _, _, p in read_corpus(corpus)]
    c = _open(cache_dir, create=True)
    r = c.pull(url, arch=arch, grep=pattern, keys=keys or None, problems=problems, **_limits(max_object, max_total))
    click.echo(f"pulled {r['imported']} entries ({r['already_present']} already present, {r['fetched_objects']} objects fetched, "
               f"{r['tuned_added']} tuned records added) from {_p(url)} into {c.path}")  # fmt: skip


@cache.command("serve")
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
def serve(directory, host, port):
    """Serve a layout written by `cache export --layout` over HTTP (with Range support, for
    resumed pulls): a quick start; any static server or bucket serves the same files."""
    import http.server

    from skwgrad.cache.transfer import handler_for

    with http.server.ThreadingHTTPServer((host, port), handler_for(directory)) as httpd:
        click.echo(f"serving {_p(directory)} at http://{host}:{httpd.server_address[1]}/ (Ctrl-C stops)", err=True)
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass


@cache.command("failures")
@_cache_option
@click.option("--all", "all_versions", is_flag=True, help="also failures of other compiler/source versions")
@click.option("--full", is_flag=True, help="print whole messages")
def failures(cache_dir, all_versions, full):
    """Kernels that failed to build, with the compiler's message."""
    c = _open(cache_dir)
    fs = c.failures(all_versions=all_versions)
    if not fs:
        click.echo(f"no recorded failures in {c.path}")
        return
    for f in fs:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(f["time"]))
        msg = f["message"] if full else (f["message"].strip().splitlines() or [""])[0][:300]
        click.echo(f"{_p(f['label'])}  {_p(f['arch'])}  [{_p(f['kind'])}, {f['attempts']}x, {when}]\n    {_p(msg)}")
    click.echo(f"{len(fs)} failure(s)")
