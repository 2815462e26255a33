"""``skwgrad compile-all``: enumerate a sweep, skip what is cached, compile the rest in parallel.

Exit codes: 0 built (or nothing to build), 1 some kernel failed to compile, 2 usage (a bad
option, preset, problem or corpus), 3 environment (no or another Triton, no backend, an unusable
cache), 130 interrupted (Ctrl-C; the summary so far is printed and a re-run resumes).
With ``--json`` stdout carries one JSON object (``"version": 1``) whatever the outcome.
"""

from __future__ import annotations

import json
import sys

import click

from skwgrad.abi.arch import ARCHES
from skwgrad.abi.conv import DTYPES
from skwgrad.aot.sweep import PRESETS, STREAMK_CHOICES
from skwgrad.errors import EXIT_CHECK_FAILED, EXIT_OK, SkwgradError

EXIT_INTERRUPTED = 130
JSON_VERSION = 1


class _Done(Exception):
    def __init__(self, code: int, report: dict, text: str = "", err: str = ""):
        self.code, self.report, self.text, self.err = code, report, text, err


@click.command("compile-all")
@click.option("--preset", type=click.Choice(PRESETS), default="default", show_default=True,
              help="smoke: a few kernels covering every family/mode/reduction; default: a deployment, pruned by measured use; broad: the wider default before pruning; full: everything")  # fmt: skip
@click.option("--corpus", "corpora", multiple=True, type=click.Path(dir_okay=False, exists=True),
              help="corpus CSV (tests/data/wgrad_shapes.csv format): build only what selection could choose for its rows; repeatable")  # fmt: skip
@click.option("--problem", "problem_texts", multiple=True,
              help='a problem as `skwgrad plan --problem` takes it ("n=32,c=64,k=64,h=56,w=56,y=3,x=3,padding=1"); repeatable, with or without --corpus')  # fmt: skip
@click.option("--arch", "arches", multiple=True, type=click.Choice(list(ARCHES)), help="target(s); repeat for several (default: all)")
@click.option("--dtype", "dtypes", multiple=True, type=click.Choice(DTYPES),
              help="input dtype(s); repeat for several (default: smoke bf16; with --corpus/--problem the problems' dtypes; else all)")  # fmt: skip
@click.option("--streamk", type=click.Choice(STREAMK_CHOICES), default="all", show_default=True,
              help="stream-K modes to build besides split-K (off: split-K and Stage-2 only)")  # fmt: skip
@click.option("--streamk-reductions", "reductions", default="", help="comma list of linear,tree,atomic,workspace (default: all)")
@click.option("--tiles", default="", help="comma list of BMxBNxBK[wW][sS] replacing the preset's tiles, e.g. 64x64x32,128x128x64w8s2")
@click.option("--jobs", "-j", type=int, default=None, help="local worker processes (default: CPUs, capped by available memory)")
@click.option("--scheduler", default=None, help="Dask distributed scheduler address (tcp://host:8786) instead of the local pool")
@click.option("--cache", "cache_dir", envvar="SKWGRAD_CACHE", type=click.Path(file_okay=False), default=None,
              help="cache directory [env SKWGRAD_CACHE; default $XDG_CACHE_HOME/skwgrad]")  # fmt: skip
@click.option("--retry-failed", is_flag=True, help="also retry kernels that failed to compile before in this environment")
@click.option("--dry-run", is_flag=True, help="print what would be built, per arch/dtype/family, and compile nothing")
@click.option("--progress/--no-progress", default=None,
              help="progress on stderr: a tqdm bar on a terminal, else a line every --progress-interval seconds (default); --no-progress: none")  # fmt: skip
@click.option("--progress-interval", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
              help="seconds between progress lines when stderr is not a terminal")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (version 1) on stdout instead of tables")
def compile_all(preset, corpora, problem_texts, arches, dtypes, streamk, reductions, tiles, jobs, scheduler, cache_dir,
                retry_failed, dry_run, progress, progress_interval, as_json):  # fmt: skip
    """Compile the kernels of a preset into the cache (resumable; failures are recorded).

    With --corpus/--problem: only the kernels selection could choose for those problems."""
    report = {"version": JSON_VERSION, "command": "compile-all"}
    try:
        _run(report, preset, corpora, problem_texts, arches, dtypes, streamk, reductions, tiles, jobs, scheduler,
             cache_dir, retry_failed, dry_run, progress, progress_interval, as_json)  # fmt: skip
        code, text, err = EXIT_OK, None, ""
    except _Done as d:
        code, text, err = d.code, d.text, d.err
    except SkwgradError as e:
        code, text, err = e.exit_code, None, f"error: {e}"
        report["error"] = {"type": type(e).__name__, "message": str(e)}
    except KeyboardInterrupt:
        code, text, err = EXIT_INTERRUPTED, None, "compile-all: interrupted before building; nothing was compiled"
        report["interrupted"] = True
    report["exit_code"] = code
    if as_json:
        click.echo(json.dumps(report, indent=1, sort_keys=False))
    elif text:
        click.echo(text)
    if err:
        click.echo(err, err=True)
    sys.exit(code)


def _problems(corpora, problem_texts):
    from skwgrad.abi.conv import parse_problem, read_corpus
    from skwgrad.errors import ProblemError

    out = []
    for path in corpora:
        try:
            rows = read_corpus(path)
        except ProblemError as e:
            raise ProblemError(f"--corpus {path}: {e}") from None
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise ProblemError(f"--corpus {path}: cannot read it as a corpus CSV ({e})") from None
        if not rows:
            raise ProblemError(f"--corpus {path} has no rows")
        out += [(name or f"{path}:{i + 2}", p) for i, (name, _, p) in enumerate(rows)]
    for text in problem_texts:
        try:
            out.append((text, parse_problem(text)))
        except ProblemError as e:
            raise ProblemError(f"--problem {text!r}: {e}") from None
    return out


def _run(report, preset, corpora, problem_texts, arches, dtypes, streamk, reductions, tiles, jobs, scheduler, cache_dir,
         retry_failed, dry_run, progress, progress_interval, as_json):  # fmt: skip
    from skwgrad.aot.sweep import counts, format_counts, sweep, sweep_for_problems

    warn = []
    if streamk == "off" and reductions:
        warn.append("warning: --streamk-reductions has no effect with --streamk off")
    if jobs is not None and jobs < 1:
        raise click.BadParameter(f"must be >= 1, got {jobs}", param_hint="--jobs")
    for w in warn:
        click.echo(w, err=True)
    problems = _problems(corpora, problem_texts) if (corpora or problem_texts) else None
    sel = {"preset": preset, "arches": list(arches) or None, "dtypes": list(dtypes) or None, "streamk": streamk,
           "reductions": reductions or None, "tiles": tiles or None}  # fmt: skip
    if problems is not None:
        ps = sweep_for_problems(problems, preset, arches=arches, dtypes=dtypes, streamk=streamk,
                                reductions=reductions or None, tiles=tiles or None)  # fmt: skip
        items = ps.items
        sel.update(corpus=list(corpora) or None, problems=len(problems))
        report["unserved"] = [{"problem": n, "arch": a} for n, a in ps.unserved]
    else:
        items = sweep(preset, arches=arches, dtypes=dtypes, streamk=streamk, reductions=reductions or None, tiles=tiles or None)
    report["selection"] = sel
    report["counts"] = [{"arch": a, "dtype": d, "family": f, "kernels": n} for (a, d, f), n in sorted(counts(items).items())]
    report["total"] = len(items)
    report["dry_run"] = bool(dry_run)
    title = f"preset {preset}" + (f", arch {','.join(arches)}" if arches else "") + (f", dtype {','.join(dtypes)}" if dtypes else "")
    title += f", stream-K {streamk}" + (f" ({reductions})" if reductions else "") + (f", tiles {tiles}" if tiles else "")
    if problems is not None:
        title += f", for {len(problems)} problem{'s' if len(problems) != 1 else ''}" + (f" of {', '.join(corpora)}" if corpora else "")
    unserved_note = ""
    if problems is not None and ps.unserved:
        shown = "; ".join(f"{n} on {a}" for n, a in ps.unserved[:5]) + (" ..." if len(ps.unserved) > 5 else "")
        unserved_note = f"warning: no kernel of the selection admits {len(ps.unserved)} problem/arch pair(s): {shown}"
    if not items:
        raise _Done(EXIT_CHECK_FAILED, report, err=(unserved_note + "\n" if unserved_note else "") +
                    "nothing selected: the filters leave no kernel (e.g. --streamk persistent with --streamk-reductions tree is pruned outside smoke)")  # fmt: skip
    if unserved_note and not as_json:
        click.echo(unserved_note, err=True)
    if dry_run:
        text = format_counts(items, title + " (dry run)")
        have = _dry_run_cached(items, cache_dir)
        if have is not None:
            path, n = have
            report["already_cached"] = n
            text += f"\nalready in {path}: {n} of {len(items)}; a build would compile {len(items) - n}"
        raise _Done(EXIT_OK, report, text=text)
    from skwgrad.aot import build as build_mod
    from skwgrad.cache.store import Cache

    build_mod.check_environment(sorted({it.arch for it in items}))  # exit 3 before opening anything
    cache = Cache(cache_dir)
    report["cache"] = str(cache.path)
    click.echo(f"{title}: {len(items)} kernels; cache {cache.path}", err=True)
    summary = build_mod.build(items, cache, jobs=jobs, scheduler=scheduler, retry_failed=retry_failed,
                              progress=progress, progress_interval=progress_interval)  # fmt: skip
    report["summary"] = summary.to_dict()
    if summary.interrupted:
        raise _Done(EXIT_INTERRUPTED, report, text=summary.format(),
                    err=f"interrupted: {summary.remaining} kernel(s) not built; re-run the same command to resume")  # fmt: skip
    if summary.errors:
        raise _Done(EXIT_CHECK_FAILED, report, text=summary.format(), err=(
            f"{len(summary.errors)} kernel(s) failed; their messages are in `skwgrad cache failures --cache {cache.path}`"
        ))  # fmt: skip
    raise _Done(EXIT_OK, report, text=summary.format())


def _dry_run_cached(items, cache_dir):
    """(cache path, how many of the selection it holds) when there is a cache (never creates one)."""
    from pathlib import Path

    from skwgrad.cache.store import DB_NAME, Cache, default_cache_dir

    path = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    if not (path / DB_NAME).is_file():
        return None
    cache = Cache(path)
    have = cache.current_keys()
    return path, sum(Cache.key_for(it.spec, it.arch) in have for it in items)
