"""``skwgrad compile-all``: enumerate a sweep, skip what is cached, compile the rest in parallel."""

from __future__ import annotations

import sys

import click

from skwgrad.abi.arch import ARCHES
from skwgrad.abi.conv import DTYPES
from skwgrad.aot.sweep import PRESETS, STREAMK_CHOICES


@click.command("compile-all")
@click.option("--preset", type=click.Choice(PRESETS), default="default", show_default=True,
              help="smoke: a few kernels covering every family/mode/reduction; default: a deployment; full: everything")  # fmt: skip
@click.option("--arch", "arches", multiple=True, type=click.Choice(list(ARCHES)), help="target(s); repeat for several (default: all)")
@click.option("--dtype", "dtypes", multiple=True, type=click.Choice(DTYPES), help="input dtype(s); repeat for several (default: smoke bf16, else all)")
@click.option("--streamk", type=click.Choice(STREAMK_CHOICES), default="all", show_default=True,
              help="stream-K modes to build besides split-K (off: split-K and Stage-2 only)")  # fmt: skip
@click.option("--streamk-reductions", "reductions", default="", help="comma list of linear,tree,atomic,workspace (default: all)")
@click.option("--tiles", default="", help="comma list of BMxBNxBK[wW][sS] replacing the preset's tiles, e.g. 64x64x32,128x128x64w8s2")
@click.option("--jobs", "-j", type=int, default=None, help="local worker processes (default: CPU count)")
@click.option("--scheduler", default=None, help="Dask distributed scheduler address (tcp://host:8786) instead of the local pool")
@click.option("--cache", "cache_dir", envvar="SKWGRAD_CACHE", type=click.Path(file_okay=False), default=None,
              help="cache directory [env SKWGRAD_CACHE; default $XDG_CACHE_HOME/skwgrad]")  # fmt: skip
@click.option("--retry-failed", is_flag=True, help="also retry kernels that failed to compile before")
@click.option("--dry-run", is_flag=True, help="print what would be built, per arch/dtype/family, and compile nothing")
@click.option("--progress/--no-progress", default=None, help="tqdm progress bar (default: when stderr is a terminal)")
def compile_all(preset, arches, dtypes, streamk, reductions, tiles, jobs, scheduler, cache_dir, retry_failed, dry_run, progress):
    """Compile the kernels of a preset into the cache (resumable; failures are recorded)."""
    from skwgrad.aot.sweep import format_counts, sweep

    if streamk == "off" and reductions:
        click.echo("warning: --streamk-reductions has no effect with --streamk off", err=True)
    if jobs is not None and jobs < 1:
        raise click.BadParameter(f"must be >= 1, got {jobs}", param_hint="--jobs")
    items = sweep(preset, arches=arches, dtypes=dtypes, streamk=streamk, reductions=reductions or None, tiles=tiles or None)
    if not items:
        click.echo("nothing selected: the filters leave no kernel (e.g. --streamk persistent with --streamk-reductions tree is pruned outside smoke)", err=True)
        sys.exit(1)
    title = f"preset {preset}" + (f", arch {','.join(arches)}" if arches else "") + (f", dtype {','.join(dtypes)}" if dtypes else "")
    title += f", stream-K {streamk}" + (f" ({reductions})" if reductions else "") + (f", tiles {tiles}" if tiles else "")
    if dry_run:
        click.echo(format_counts(items, title + " (dry run)"))
        _dry_run_cached(items, cache_dir)
        return
    from skwgrad.aot.build import build
    from skwgrad.cache.store import Cache

    cache = Cache(cache_dir)
    click.echo(f"{title}: {len(items)} kernels; cache {cache.path}", err=True)
    summary = build(items, cache, jobs=jobs, scheduler=scheduler, retry_failed=retry_failed, progress=progress)
    click.echo(summary.format())
    if summary.errors:
        click.echo(
            f"{len(summary.errors)} kernel(s) failed; their messages are in `skwgrad cache failures --cache {cache.path}`",
            err=True,
        )
        sys.exit(1)


def _dry_run_cached(items, cache_dir):
    """How many of the selection the cache already holds, when there is one (never creates it)."""
    from skwgrad.cache.store import DB_NAME, Cache, default_cache_dir
    from pathlib import Path

    path = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    if not (path / DB_NAME).is_file():
        return
    cache = Cache(path)
    have = cache.current_keys()
    n = sum(Cache.key_for(it.spec, it.arch) in have for it in items)
    click.echo(f"already in {path}: {n} of {len(items)}; a build would compile {len(items) - n}")
