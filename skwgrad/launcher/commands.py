"""``skwgrad run-from-cache``: run cached kernels on the GPU, verify them and time them; ``skwgrad calibrate``: fit
the cost model to timings of this GPU. Neither compiles."""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import click

from skwgrad import clikit
from skwgrad.errors import EXIT_CHECK_FAILED, SkwgradError
from skwgrad.launcher.baseline import cudnn_time, stream_hold

log = logging.getLogger("skwgrad.run")
STREAMK_CHOICES = ("auto", "off", "dp_sk", "persistent", "all")
REDUCTION_CHOICES = ("linear", "tree", "atomic", "workspace", "direct", "two_stage")
PRECISION_CHOICES = ("ieee", "tf32")

COLUMNS = (
    ("name", "name", "<"), ("kernel", "kernel", "<"), ("mode/reduction", "mode_reduction", "<"),
    ("pool/ks", "pool_ks", ">"), ("rel err", "rel_err_s", ">"), ("ok", "ok_s", "<"), ("us", "us_s", ">"),
    ("TFLOP/s", "tflops_s", ">"), ("cuDNN us", "cudnn_us_s", ">"), ("ratio", "ratio_s", ">"),
)  # fmt: skip


def _problems(problem_texts, corpus, precision=None):
    """(name, regime, problem) rows; ``precision`` (ieee/tf32) is set on every fp32 problem."""
    from dataclasses import replace

    from skwgrad.abi.conv import parse_problem, read_corpus

    out = []
    for i, text in enumerate(problem_texts):
        out.append((f"problem{i}" if len(problem_texts) > 1 else "problem", "", parse_problem(text)))
    if corpus:
        out += read_corpus(corpus)
    if precision:
        out = [(n, r, replace(p, precision=precision) if p.dtype == "fp32" else p) for n, r, p in out]
    return out


def _git_commit() -> str:
    try:
        r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent)
        return r.stdout.strip() if r.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def _run_header(backend, cache) -> dict:
    """The fields every GPU run's JSON document starts with: when, on what, from which cache."""
    from skwgrad import __version__

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": backend.device_name, "arch": backend.arch, "compute_units": backend.compute_units,
        "backend": backend.name, "skwgrad": __version__, "commit": _git_commit(), "cache": str(getattr(cache, "path", "")),
    }  # fmt: skip


def _check_out(out_path) -> None:
    """``--out FILE``: refused before any device work when its folder cannot be written."""
    if out_path:
        parent = Path(out_path).expanduser().resolve().parent
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            raise click.BadParameter(f"{out_path}: {parent} is not a writable directory", param_hint="--out")


def _fmt(row: dict) -> dict:
    r = dict(row)
    r["mode_reduction"] = f"{row.get('mode', '')}/{row.get('reduction', '')}" if row.get("kernel") else ""
    if row.get("family") == "wgrad_sk":
        r["pool_ks"] = f"pool {row.get('pool')}"
    elif row.get("kernel"):
        r["pool_ks"] = f"ks {row.get('ks_count')}"
    else:
        r["pool_ks"] = ""
    err = row.get("rel_err")
    r["rel_err_s"] = "" if err is None else ("inf" if math.isinf(err) else f"{err:.2e}")
    ok = row.get("ok")
    r["ok_s"] = "" if ok is None else ("yes" if ok else "NO")
    r["us_s"] = f"{row['us']:.1f}" if row.get("us") is not None else ""
    r["tflops_s"] = f"{row['tflops']:.1f}" if row.get("tflops") is not None else ""
    r["cudnn_us_s"] = f"{row['cudnn_us']:.1f}" if row.get("cudnn_us") is not None else (row.get("cudnn_note") or "")
    r["ratio_s"] = f"{row['ratio']:.2f}" if row.get("ratio") is not None else ""
    return r


def format_table(rows) -> str:
    from skwgrad.clikit import escape, table

    f = [_fmt(r) for r in rows]
    body = []
    for r in f:
        body.append([r.get(key, "") for _, key, _ in COLUMNS])
    out = table(body, [t for t, _, _ in COLUMNS], align=["right" if a == ">" else "left" for _, _, a in COLUMNS])
    errors = [f"{r['name']}: {escape(r['error'])}" for r in f if r.get("error")]
    return out + ("\n" + "\n".join(f"    error: {e}" for e in errors) if errors else "")


def run_problems(
    problems, *, backend, cache, streamk="auto", reductions=(), streamk_ctas=-1, tile=None, all_candidates=False,
    verify=True, bench=False, baseline=None, seed=0, warmup=10, iters=50, echo=print, tune=False,
) -> tuple[list[dict], bool]:
    """Run each problem's selected (or every matching) cached kernel. Returns (rows, all ok)."""
    from skwgrad.launcher.hostdata import DeviceInputs
    from skwgrad.launcher.options import LaunchOptions
    from skwgrad.launcher.select import NoKernelError, all_choices, backend_occupancy, choose
    from skwgrad.launcher.select import tune as tune_problem
    from skwgrad.reference import relative_error, tolerance, wgrad_reference

    occ = backend_occupancy(backend)
    hold = stream_hold() if bench and backend.binary_kind == "cubin" else None
    rows, all_ok = [], True
    for name, regime, p in problems:
        base = {"name": name, "regime": regime, "problem": p.describe(), "gflop": p.flops / 1e9}
        try:
            if tune:  # time every cached candidate; the fastest is remembered and auto picks it below
                timed = tune_problem(p, backend, cache, warmup=3, iters=10, seed=seed, hold=stream_hold() if backend.binary_kind == "cubin" else None)
                fastest = next((r for r in timed if "us" in r), None)
                echo(f"{name}: tuned {len(timed)} candidates" + (f", fastest {fastest['us']:.1f} us" if fastest else ""))
            if all_candidates or streamk == "all":
                choices = all_choices(
                    p, cache, arch=backend.arch, cus=backend.compute_units, streamk="all" if streamk == "auto" else streamk,
                    reductions=reductions or None, streamk_ctas=streamk_ctas, tile=tile, occupancy=occ,
                )  # fmt: skip
                if not choices:  # raises NoKernelError naming the compile-all command
                    o = LaunchOptions(streamk=streamk if streamk != "all" else "auto",
                                      reduction=reductions[0] if len(reductions) == 1 else "auto", streamk_ctas=streamk_ctas, tile=tile)  # fmt: skip
                    choices = [choose(p, cache, arch=backend.arch, cus=backend.compute_units, options=o, occupancy=occ)]
            else:
                reds = reductions or ("auto",)
                choices = [
                    choose(p, cache, arch=backend.arch, cus=backend.compute_units, occupancy=occ,
                           options=LaunchOptions(streamk=streamk, reduction=r, streamk_ctas=streamk_ctas, tile=tile))  # fmt: skip
                    for r in reds
                ]
        except NoKernelError as e:
            echo(f"{name}: {e}")
            rows.append({**base, "error": str(e)})
            all_ok = False
            continue
        except SkwgradError as e:
            echo(f"{name}: {e}")
            rows.append({**base, "error": str(e)})
            all_ok = False
            continue
        for c in choices:
            log.debug("%s: %s, pool %s, ks_count %s (%s)", name, c.kernel.label, c.pool, c.ks_count, c.reason or "chosen")
        cudnn_us, cudnn_note = None, ""
        if baseline == "cudnn" and bench:
            try:
                cudnn_us, cudnn_note = cudnn_time(p, backend, warmup=warmup, iters=iters, seed=seed)
            except Exception as e:  # noqa: BLE001  (a baseline failure must not hide our results)
                cudnn_us, cudnn_note = None, f"failed: {type(e).__name__}"
        inputs = DeviceInputs.random(p, backend, seed=seed)
        try:
            ref = wgrad_reference(p, inputs.x64, inputs.dy64) if verify else None
            for c in choices:
                row = {**base, **c.to_dict(), "kernel": c.kernel.label, "reduction": c.spec.variant, "mode": c.mode}
                try:
                    plan = c.plan(p, backend)
                    row.update(grid=plan.grid, workspace_bytes=plan.workspace_bytes)
                    if plan.geometry.partition is not None:
                        row["sk_ctas"] = plan.geometry.partition.sk_ctas
                    # Poison dW and the whole workspace (NaN in every float dtype) before the run.
                    inputs.poison_dw(0xFF)
                    plan.poison(byte=0xFF)  # the zeroed arena stays zero by contract; checked below
                    plan.launch(inputs.dy, inputs.x, inputs.dw, 0)
                    backend.stream_synchronize(0)
                    if verify:
                        row["zeroed_left_nonzero"] = plan.zeroed_bytes_nonzero()
                        out = inputs.read_dw()
                        err = relative_error(out, ref)
                        tol = tolerance(p.dtype, p.dw_dtype, c.spec.precision)
                        row.update(rel_err=err, tol=tol, ok=bool(err <= tol and row["zeroed_left_nonzero"] == 0))
                        all_ok &= row["ok"]
                    if bench:
                        t = plan.time(inputs.dy, inputs.x, inputs.dw, warmup=warmup, iters=iters, hold=hold)
                        row.update(us=t["median_us"], min_us=t["min_us"], host_us=t["host_us"])
                        row["tflops"] = p.flops / (t["median_us"] * 1e-6) / 1e12
                        if cudnn_us is not None:
                            row["cudnn_us"] = cudnn_us
                            row["ratio"] = cudnn_us / t["median_us"]
                    if cudnn_note:
                        row["cudnn_note"] = cudnn_note
                except SkwgradError as e:
                    row["error"] = str(e)
                    all_ok = False
                rows.append(row)
        finally:
            inputs.free()
    return rows, all_ok


@click.command("run-from-cache")
@click.option("--problem", "problem_texts", multiple=True, help='e.g. "n=32,c=64,k=64,h=56,w=56,y=3,x=3,padding=1" (repeatable)')
@click.option("--corpus", type=click.Path(exists=True, dir_okay=False), help="a corpus CSV (tests/data/wgrad_shapes.csv)")
@click.option("--arch", "arches", multiple=True, type=clikit.CommaChoice(("auto", *clikit.arch_names())),
              help="the arch(es) this device must be (default auto: whatever it is); another device is refused")  # fmt: skip
@click.option("--streamk", type=click.Choice(STREAMK_CHOICES), default="auto", show_default=True,
              help="auto: the selection rule; off: split-K; dp_sk/persistent: that stream-K mode; all: every cached candidate")
@click.option("--reduction", "reductions", multiple=True, type=clikit.CommaChoice(REDUCTION_CHOICES),
              help="comma list: linear,tree,atomic,workspace (stream-K) / direct,atomic,two_stage,workspace (split-K); default: the rule's")  # fmt: skip
@click.option("--streamk-ctas", type=clikit.IntRange32(), default=-1, show_default=True, help="stream-K pool; -1 = the reduction's default")
@click.option("--tile", type=clikit.Tile(), default=None, help="BMxBNxBK: only kernels of this tile")
@click.option("--precision", type=click.Choice(PRECISION_CHOICES), default=None,
              help="fp32 problems: full fp32 (ieee, the default) or tf32; the cuDNN baseline follows it")
@click.option("--all-candidates", is_flag=True, help="run every cached kernel that admits the problem")
@click.option("--verify", is_flag=True, help="compare with the float64 reference (default when neither --verify nor --bench)")
@click.option("--bench", is_flag=True, help="time each kernel: median of --iters event-timed launches after warm-up")
@click.option("--baseline", type=click.Choice(["cudnn"]), default=None, help="also time PyTorch's weight gradient (needs --bench)")
@clikit.json_option
@click.option("--out", "out_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help='also write the JSON document (with "version": 1) to this file')  # fmt: skip
@clikit.cache_option
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--warmup", type=click.IntRange(min=0, max=100_000), default=10, show_default=True)
@click.option("--iters", type=click.IntRange(min=1, max=100_000), default=50, show_default=True)
@click.option("--tune", is_flag=True, help="first time every cached candidate per problem and remember the fastest in the cache (keyed by arch, CU count, problem, dtype); auto then runs it")
@clikit.alias("--streamk-reductions", "reductions", multiple=True, type=clikit.CommaChoice(REDUCTION_CHOICES))
def run_from_cache(problem_texts, corpus, arches, streamk, reductions, streamk_ctas, tile, precision, all_candidates,
                   verify, bench, baseline, as_json, out_path, cache_dir, seed, warmup, iters, tune):  # fmt: skip
    """Run cached kernels on fresh random inputs; verify against float64 and time them. Never compiles:
    with no matching kernel it prints the compile-all command that would build one.

    Exit codes: 0 every row ok, 1 a row failed (wrong result, no cached kernel), 2 usage,
    3 environment (no GPU, an unusable cache)."""
    from skwgrad.errors import ProblemError
    from skwgrad.launcher.api import open_cache
    from skwgrad.launcher.backends import get_backend

    # Every argument is checked before any device work: a CPU box reports the argument, not "no GPU".
    if not problem_texts and not corpus:
        raise click.UsageError("give --problem (repeatable) or --corpus FILE")
    if baseline and not bench:
        raise click.UsageError("--baseline cudnn times the baseline: add --bench")
    if not verify and not bench:
        verify = True
    reductions = clikit.flatten(reductions)
    arches = clikit.flatten(arches)
    if "auto" in arches and len(arches) > 1:
        raise click.BadParameter("auto cannot be combined with named arches", param_hint="--arch")
    problems = _problems(problem_texts, corpus, precision)
    _check_out(out_path)
    backend = get_backend()
    if arches and "auto" not in arches and backend.arch not in arches:
        raise ProblemError(
            f"--arch {','.join(arches)}: this device ({backend.device_name}) is {backend.arch}; "
            f"run-from-cache runs {backend.arch} kernels only"
        )  # fmt: skip
    cache = open_cache(cache_dir)
    header = f"device {backend.device_name} ({backend.arch}, {backend.compute_units} CUs), cache {getattr(cache, 'path', cache)}"
    click.echo(clikit.escape(header), err=as_json)
    rows, ok = run_problems(
        problems, backend=backend, cache=cache, streamk=streamk, reductions=reductions, streamk_ctas=streamk_ctas,
        tile=tile, all_candidates=all_candidates, verify=verify, bench=bench, baseline=baseline, seed=seed,
        warmup=warmup, iters=iters, echo=lambda m: click.echo(clikit.escape(m), err=True), tune=tune,
    )  # fmt: skip
    doc = {
        **_run_header(backend, cache), "seed": seed, "iters": iters, "warmup": warmup,
        "verify": verify, "bench": bench, "baseline": baseline, "ok": bool(ok), "rows": rows,
    }  # fmt: skip
    if out_path:
        clikit.write_json(out_path, doc)
    if as_json:
        clikit.emit_json(doc)
    else:
        click.echo(format_table(rows))
        if out_path:
            click.echo(f"wrote {clikit.escape(out_path)}")
    if not ok:
        bad = sum(1 for r in rows if r.get("error") or r.get("ok") is False)
        click.echo(f"{bad} of {len(rows)} row(s) failed", err=True)
        sys.exit(EXIT_CHECK_FAILED)


@click.command("calibrate")
@click.option("--problem", "problem_texts", multiple=True, help="a problem to time (repeatable)")
@click.option("--corpus", "corpora", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="corpus CSV(s) of problems to time (repeatable)")  # fmt: skip
@clikit.cache_option
@click.option("--warmup", type=click.IntRange(min=0, max=1000), default=3, show_default=True)
@click.option("--iters", type=click.IntRange(min=1, max=10_000), default=20, show_default=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--dry-run", is_flag=True, help="time and fit, but store neither the tuned choices nor the model")
@click.option("--model-only", is_flag=True, help="store the fitted model but not the tuned choices of the timed problems")
@clikit.json_option
@click.option("--out", "out_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="write the JSON document (every timed candidate, the fit, per-problem picks) to this file")
def calibrate_command(problem_texts, corpora, cache_dir, warmup, iters, seed, dry_run, model_only, as_json, out_path):
    """Time the whole search space of each problem on this GPU, remember each fastest choice, fit
    the cost model's constants to the timings and store them with the cache: selection then ranks
    every problem (also ones never timed) by the fitted model. `cache export` carries both.

    Exit codes: 0 done, 1 nothing could be timed, 2 usage, 3 environment (no GPU, unusable cache)."""
    from skwgrad.launcher.api import open_cache
    from skwgrad.launcher.backends import get_backend
    from skwgrad.launcher.select import calibrate

    if not problem_texts and not corpora:
        raise click.UsageError("give --problem (repeatable) or --corpus FILE")
    problems = _problems(problem_texts, None)
    for c in corpora:
        problems += _problems((), c)
    _check_out(out_path)
    backend = get_backend()
    cache = open_cache(cache_dir)
    names = {}
    for name, _, p in problems:
        names.setdefault(p.describe(), name)
    uniq = {p.describe(): p for _, _, p in problems}
    timed_rows = []

    def progress(p, rows):
        ok = [r for r in rows if "us" in r]
        click.echo(clikit.escape(f"{names[p.describe()]}: {len(rows)} candidates" + (f", fastest {ok[0]['us']:.1f} us" if ok else "")), err=True)
        for r in rows:
            timed_rows.append({"name": names[p.describe()], "problem": p.describe(), **r,
                               "spec": cache.get(r["key"]).spec.to_dict()})  # fmt: skip

    try:
        # device time: each candidate's launches queued behind a held stream, as --tune and the baseline
        hold = stream_hold() if backend.binary_kind == "cubin" else None
        got = calibrate(list(uniq.values()), backend, cache, warmup=warmup, iters=iters, seed=seed, remember=not dry_run,
                        remember_tuned=not model_only, on_problem=progress, hold=hold)  # fmt: skip
    except SkwgradError as e:
        click.echo(clikit.escape(str(e)), err=True)
        sys.exit(EXIT_CHECK_FAILED)
    model = got["model"]
    doc = {
        **_run_header(backend, cache), "stored": not dry_run, "tuned_stored": not (dry_run or model_only), "model": json.loads(model.to_json()), "samples": got["samples"],
        "problems": [{"name": names.get(r["problem"], ""), **r} for r in got["problems"]], "rows": timed_rows,
    }  # fmt: skip
    if out_path:
        clikit.write_json(out_path, doc)
    if as_json:
        clikit.emit_json(doc)
    else:
        within = [r for r in got["problems"] if r.get("model_over_tuned") is not None]
        good = sum(1 for r in within if r["model_over_tuned"] <= 1.05)
        click.echo(f"fitted {len(model.constants)} constants to {got['samples']} timings (geomean |error| {model.fit_error:.1%}); "
                   f"the model's pick is within 5% of the fastest on {good} of {len(within)} problems"
                   + ("" if dry_run else "; stored with the cache"))  # fmt: skip
