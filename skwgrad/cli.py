"""The ``skwgrad`` command line.

``plan`` and ``doctor`` live here; ``compile-all``, ``cache`` and ``run-from-cache`` live beside
the code they drive and are imported only when called, so the offline commands never load a GPU
runtime and nothing but ``compile-all`` needs the compiler.

Exit codes, decided here in one place (``_Group.invoke``) from the error classes of
``skwgrad.errors``: 0 ok, 1 a check failed, 2 usage (click's own usage errors too), 3 environment
(no GPU, no compiler, an unusable cache).
"""

from __future__ import annotations

import importlib
import sys

import click

from skwgrad import clikit
from skwgrad.errors import EXIT_ENVIRONMENT, SkwgradError

_LAZY = {
    "compile-all": "skwgrad.aot.commands:compile_all",
    "cache": "skwgrad.cache.commands:cache",
    "run-from-cache": "skwgrad.launcher.commands:run_from_cache",
    "calibrate": "skwgrad.launcher.commands:calibrate_command",
}


# Modules of the build extra (`pip install 'skwgrad[build]'`): the runtime install lacks them.
BUILD_MODULES = ("triton", "tqdm")


def _compiler_missing(e: ImportError) -> bool:
    return (getattr(e, "name", "") or "").split(".")[0] in BUILD_MODULES


class _Group(click.Group):
    def list_commands(self, ctx):
        return sorted([*super().list_commands(ctx), *_LAZY])

    def get_command(self, ctx, name):
        if name in _LAZY:
            module, attr = _LAZY[name].split(":")
            try:
                return getattr(importlib.import_module(module), attr)
            except ImportError as e:
                if not _compiler_missing(e):
                    raise
                return _needs_compiler(name)
        return super().get_command(ctx, name)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SkwgradError as e:  # a refusal the user can act on: no traceback
            click.echo(f"error: {_escape_lines(str(e))}", err=True)
            if ctx.meta.get(clikit.JSON_META):
                clikit.emit_json(clikit.error_document(e, e.exit_code))
            sys.exit(e.exit_code)
        except click.UsageError as e:  # click prints it and exits 2; a --json caller also gets a document
            if ctx.meta.get(clikit.JSON_META):
                clikit.emit_json(clikit.error_document(e, e.exit_code))
            raise
        except ImportError as e:
            if not _compiler_missing(e):
                raise
            click.echo(f"error: this {NEEDS_COMPILER}", err=True)
            sys.exit(EXIT_ENVIRONMENT)


NEEDS_COMPILER = (
    "needs the build extra (the Triton compiler), which is not installed here; install it with "
    "`pip install 'skwgrad[build]'` (a GPU machine that runs from a cache does not need it)"
)


def _needs_compiler(name: str) -> click.Command:
    """A stand-in for a command whose module needs Triton: listed in --help, exits 3 when run."""

    @click.command(name, context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
                   help=f"(not available: {NEEDS_COMPILER})", add_help_option=False)  # fmt: skip
    @click.pass_context
    def stub(ctx):
        click.echo(f"error: `skwgrad {name}` {NEEDS_COMPILER}", err=True)
        ctx.exit(EXIT_ENVIRONMENT)

    return stub


def _escape_lines(text: str) -> str:
    return "\n".join(clikit.escape(line) for line in text.split("\n"))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="skwgrad")
@click.option("--log-level", type=click.Choice(clikit.LOG_LEVELS, case_sensitive=False), default=None,
              help=f"log on stderr at this level [env {clikit.LOG_ENV}; default warning]; debug names the chosen kernel")  # fmt: skip
def main(log_level):
    """Stream-K / split-K convolution wgrad: compile ahead of time, run from a cache.

    Exit codes: 0 ok, 1 a check failed, 2 usage, 3 environment (no GPU, no compiler, an
    unusable cache)."""
    clikit.setup_logging(log_level.lower() if log_level else None)


def parse_tile(text: str) -> tuple[int, int, int]:
    """``BMxBNxBK`` -> (bm, bn, bk); a usage error otherwise (kept for callers outside click)."""
    return clikit.Tile().convert(text, None, None)


STREAMK_CHOICES = ("auto", "dp_sk", "persistent", "off")
REDUCTION_CHOICES = ("auto", "linear", "tree", "atomic", "workspace", "direct", "two_stage")


@main.command()
@click.option("--problem", "problem_text", required=True, help='e.g. "n=32,c=64,k=64,h=56,w=56,y=3,x=3,stride=1,padding=1"')
@click.option("--arch", type=click.Choice(clikit.arch_names()), default="gfx942", show_default=True,
              help="the target whose reference part's CU count plans the launch")  # fmt: skip
@click.option("--tile", type=clikit.Tile(), default=None, help="BMxBNxBK: only kernels of this tile (any tile the full preset has)")
@click.option("--streamk", type=click.Choice(STREAMK_CHOICES), default="auto", show_default=True,
              help="auto: the launcher's selection; dp_sk/persistent: that stream-K mode; off: split-K")  # fmt: skip
@click.option("--reduction", "reduction", type=click.Choice(REDUCTION_CHOICES), default="auto", show_default=True,
              help="stream-K: linear|tree|atomic|workspace; split-K: direct|atomic|two_stage|workspace; auto: the selection's")  # fmt: skip
@click.option("--streamk-ctas", type=clikit.IntRange32(), default=-1, show_default=True, help="stream-K pool; -1 = the selection's")
@click.option("--ks-count", type=clikit.IntRange32(min=1), default=None, help="split-K degree (default: the selection's)")
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False), default=None,
              help="select from this cache's entries (default: what `compile-all --problem` would build for the arch)")
@clikit.json_option
@clikit.alias("--streamk-reductions", "reduction", type=click.Choice(REDUCTION_CHOICES))
def plan(problem_text, arch, tile, streamk, reduction, streamk_ctas, ks_count, cache_dir, as_json):
    """Show what the launcher would run for a problem on an arch (no GPU): the kernel the selection
    picks with its predicted time and the next candidates, the GEMM view, partition, grid,
    workspace and kernarg block."""
    from skwgrad.abi.conv import parse_problem
    from skwgrad.abi.plan_report import check_options, format_report
    from skwgrad.launcher.offline import plan as offline_plan

    problem = parse_problem(problem_text)
    check_options(streamk, reduction or "auto", streamk_ctas, ks_count)
    if cache_dir is not None:
        from skwgrad.launcher.api import open_cache

        cache = open_cache(cache_dir)
    else:
        cache = _offline_specs(problem, arch, tile, streamk, reduction)
    report = offline_plan(problem, arch=arch, cache=cache, tile=tile, streamk=streamk, reduction=reduction,
                          streamk_ctas=streamk_ctas, ks_count=ks_count)  # fmt: skip
    if as_json:
        clikit.emit_json(report)
        return
    click.echo(format_report(report))


def _offline_specs(problem, arch, tile, streamk, reduction):
    """What compile-all would build for the problem (the default preset's corpus sweep); with a
    tile or a forced mode/reduction, every kernel of that tile (or of the arch's default tiles)."""
    from skwgrad.launcher.offline import every_kernel
    from skwgrad.launcher.speccache import SpecCache

    if tile is not None or streamk != "auto" or (reduction or "auto") != "auto":
        return SpecCache((s, arch) for s in every_kernel(problem, arch, [tile] if tile else None))
    from skwgrad.aot.sweep import sweep_for_problems

    return SpecCache((it.spec, it.arch) for it in sweep_for_problems([problem], "default", arches=[arch]).items)


@main.command()
@clikit.cache_option
@clikit.json_option
@click.pass_context
def doctor(ctx, cache_dir, as_json):
    """What this machine can do: GPU runtime and device, cache layers, stale entries, compiler.

    Exits 0 whatever it finds (it reports; it does not check)."""
    from skwgrad.doctor import diagnose, format_diagnosis

    from_env = ctx.get_parameter_source("cache_dir") == click.core.ParameterSource.ENVIRONMENT
    d = diagnose(None if from_env else cache_dir)
    if as_json:
        clikit.emit_json(d)
        return
    click.echo(format_diagnosis(d))


if __name__ == "__main__":
    main()
