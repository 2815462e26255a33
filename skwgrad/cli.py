"""The ``skwgrad`` command line.

``plan`` lives here; ``compile-all``, ``cache`` and ``run-from-cache`` live beside the code they
drive and are imported only when called, so the offline commands never load a GPU runtime.
"""

from __future__ import annotations

import importlib
import json
import sys

import click

from skwgrad.errors import SkwgradError

_LAZY = {
    "compile-all": "skwgrad.aot.commands:compile_all",
    "cache": "skwgrad.cache.commands:cache",
    "run-from-cache": "skwgrad.launcher.commands:run_from_cache",
}


class _Group(click.Group):
    def list_commands(self, ctx):
        return sorted([*super().list_commands(ctx), *_LAZY])

    def get_command(self, ctx, name):
        if name in _LAZY:
            module, attr = _LAZY[name].split(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SkwgradError as e:  # a refusal the user can act on: no traceback
            click.echo(f"error: {e}", err=True)
            sys.exit(2)


@click.group(cls=_Group)
@click.version_option(package_name="skwgrad")
def main():
    """Stream-K / split-K convolution wgrad: compile ahead of time, run from a cache."""


def parse_tile(text: str) -> tuple[int, int, int]:
    try:
        bm, bn, bk = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected BMxBNxBK, e.g. 128x128x64") from None
    return bm, bn, bk


@main.command()
@click.option("--problem", "problem_text", required=True, help='e.g. "n=32,c=64,k=64,h=56,w=56,y=3,x=3,stride=1,padding=1"')
@click.option("--arch", default="gfx942", show_default=True, help="gfx942, gfx950 or sm_90 (offline CU count)")
@click.option("--tile", default="128x128x64", show_default=True, help="BMxBNxBK")
@click.option("--streamk", type=click.Choice(["dp_sk", "persistent", "off"]), default="dp_sk", show_default=True)
@click.option("--reduction", default="", help="stream-K: linear|tree|atomic|workspace (default linear); split-K: direct|atomic|two_stage (default two_stage)")
@click.option("--streamk-ctas", type=int, default=-1, show_default=True, help="stream-K pool; -1 = the reduction's default for the arch")
@click.option("--ks-count", type=int, default=1, show_default=True, help="split-K degree (--streamk off)")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of tables")
def plan(problem_text, arch, tile, streamk, reduction, streamk_ctas, ks_count, as_json):
    """Show the GEMM view, partition, grid, workspace and kernarg block of one launch (no GPU)."""
    from skwgrad.abi.plan_report import plan_report

    report = plan_report(
        problem_text, arch=arch, tile=parse_tile(tile), streamk=streamk, reduction=reduction,
        streamk_ctas=streamk_ctas, ks_count=ks_count,
    )  # fmt: skip
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    from skwgrad.abi.plan_report import format_report

    click.echo(format_report(report))


if __name__ == "__main__":
    main()
