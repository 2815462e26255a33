"""``skwgrad cache ls|show|verify|gc|export|import|failures``."""

from __future__ import annotations

import json
import sys
import time

import click

_cache_option = click.option(
    "--cache", "cache_dir", envvar="SKWGRAD_CACHE", type=click.Path(file_okay=False), default=None,
    help="cache directory [env SKWGRAD_CACHE; default $XDG_CACHE_HOME/skwgrad]",
)  # fmt: skip


def _open(cache_dir):
    from skwgrad.cache.store import Cache

    return Cache(cache_dir)


def _size(n: int) -> str:
    return f"{n / 1024:.1f}K" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f}M"


def _table(rows) -> str:
    w = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(v).ljust(w[i]) for i, v in enumerate(r)).rstrip() for r in rows)


@click.group("cache")
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
        click.echo(json.dumps([
            {"key": e.key, "label": e.label, "arch": e.arch, "family": e.family, "bytes": e.nbytes,
             "current": e.current, "created": e.created}
            for e in entries
        ], indent=1))  # fmt: skip
        return
    if not entries:
        click.echo(f"no entries in {c.path}" + (" matching the filters" if (arch or family or dtype or pattern) else "")
                   + f"; build some with `skwgrad compile-all --preset smoke --cache {c.path}`")  # fmt: skip
        return
    rows = [("label", "arch", "family", "size", "key", *(("version",) if all_versions else ()))]
    for e in entries:
        rows.append((e.label, e.arch, e.family, _size(e.nbytes), e.key[:12], *(("current" if e.current else "stale"),) * all_versions))
    click.echo(_table(rows))
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
        raise CacheError(f"no cache entry has key or label {key_or_label!r} in {c.path}; list them with `skwgrad cache ls`")
    if len(found) > 1:
        click.echo(f"{len(found)} entries match {key_or_label!r}; pass --arch or a longer key:", err=True)
        for e in found:
            click.echo(f"  {e.key[:16]}  {e.arch}  {e.label}  {'current' if e.current else 'stale'}", err=True)
        sys.exit(1)
    e = found[0]
    try:
        c.load_binary(e, allow_stale=True)
        status = "intact (sha256 verified)"
    except CacheError as err:
        status = f"DAMAGED: {err}"
    info = {
        "key": e.key, "label": e.label, "arch": e.arch, "family": e.family,
        "spec": e.spec.to_dict() if e.spec else None, "object": str(c.object_path(e.sha256)),
        "sha256": e.sha256, "bytes": e.nbytes, "object_status": status,
        "created": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.created)),
        "compiler": e.compiler, "source_hash": e.source_hash,
        "served": e.current, "metadata": e.metadata,
    }  # fmt: skip
    click.echo(json.dumps(info, indent=2))


@cache.command("verify")
@_cache_option
def verify(cache_dir):
    """Check every entry's object (sha256) and key; exit 1 when anything is wrong."""
    c = _open(cache_dir)
    problems = c.verify()
    n = len(c.entries(all_versions=True))
    orphans = c.orphans()
    if orphans:
        click.echo(f"note: {len(orphans)} object/temp file(s) no entry refers to (left by an interrupted write); `skwgrad cache gc` removes them")
    if problems:
        for p in problems:
            click.echo(f"PROBLEM: {p}")
        click.echo(
            f"{len(problems)} problem(s) in {n} entries of {c.path}. Re-run `skwgrad compile-all` with the options "
            f"that built them to rebuild damaged entries (intact entries are kept).",
            err=True,
        )
        sys.exit(1)
    click.echo(f"ok: {n} entries in {c.path}, every object verified")


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
@click.argument("file", type=click.Path(dir_okay=False))
@_cache_option
@click.option("--arch", default=None, help="only this target")
@click.option("--all", "all_versions", is_flag=True, help="also entries of other compiler/source versions")
def export(file, cache_dir, arch, all_versions):
    """Write the cache (or one arch) to one portable tar file (.tar.gz compresses)."""
    c = _open(cache_dir)
    r = c.export(file, arch=arch, all_versions=all_versions)
    click.echo(f"exported {r['entries']} entries ({r['objects']} objects, {r['tuned']} tuned choices) to {r['file']}")


@cache.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@_cache_option
def import_cmd(file, cache_dir):
    """Add the entries of an export file; every object is verified first."""
    c = _open(cache_dir)
    r = c.import_(file)
    click.echo(f"imported {r['imported']} entries ({r['already_present']} already present, {r['objects']} objects verified) into {c.path}")


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
        click.echo(f"{f['label']}  {f['arch']}  [{f['kind']}, {f['attempts']}x, {when}]\n    {msg}")
    click.echo(f"{len(fs)} failure(s)")
