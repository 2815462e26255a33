"""Shared pieces of every ``skwgrad`` command: JSON output, tables, option types, logging.

Every command follows the same conventions, so a script can drive any of them:

- ``--json``: one JSON object on stdout whose first key is ``"version": 1`` (``emit_json``);
  human-readable text goes to stdout without it, notes and progress to stderr.
- ``--out FILE`` where a command writes a file.
- Exit codes (``skwgrad.errors``): 0 ok, 1 a check failed, 2 usage, 3 environment. The group's
  ``invoke`` maps a ``SkwgradError`` to its ``exit_code``; commands raise, they never exit
  with a literal code except ``fail_check`` (1).
- Enumerated options take ``click.Choice`` or ``CommaChoice`` (a comma list, repeatable), so a
  typo such as ``--arch gfx9420`` is a usage error (2) naming the valid values.
- Text that came from outside (cache labels, paths, compiler messages) goes through ``escape``
  before it reaches a terminal.

Nothing here imports a GPU runtime or the compiler.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from typing import Any, Iterable, Sequence

import click

from skwgrad.errors import EXIT_ENVIRONMENT, ProblemError, SkwgradError

JSON_VERSION = 1
LOG_ENV = "SKWGRAD_LOG"
LOG_LEVELS = ("debug", "info", "warning", "error")
log = logging.getLogger("skwgrad")

# C0 controls except none (tab and newline included: a label or path never needs them), DEL, C1.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------
def escape(text: Any) -> str:
    """``text`` with every control character spelled as ``\\xNN`` (or ``\\n``, ``\\t``): a cache
    label or compiler message can then never move the cursor or recolour a terminal."""
    s = str(text)

    def one(m: re.Match) -> str:
        c = m.group()
        return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(c, f"\\x{ord(c):02x}")

    return _CONTROL.sub(one, s)


def json_document(doc: dict | None = None, **fields) -> dict:
    """``{"version": 1, **doc, **fields}``: the one shape of every ``--json`` answer."""
    out: dict = {"version": JSON_VERSION}
    for d in (doc or {}, fields):
        for k, v in d.items():
            if k == "version":
                raise ValueError("'version' is the JSON schema version; do not set it")
            out[k] = v
    return out


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=2, default=str, allow_nan=False, ensure_ascii=False)


def emit_json(doc: dict | None = None, **fields) -> None:
    """Print one JSON object with ``"version": 1`` on stdout (non-finite floats become null)."""
    click.echo(dumps(_finite(json_document(doc, **fields))))


def write_json(path, doc: dict | None = None, **fields) -> None:
    """The same document into a file (``--out FILE``); a clear error if it cannot be written."""
    from pathlib import Path

    text = dumps(_finite(json_document(doc, **fields))) + "\n"
    try:
        Path(path).write_text(text)
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}; choose another --out path") from None


class OutputError(SkwgradError):
    """An output file (``--out``) that cannot be written: the environment's problem (exit 3)."""

    exit_code = EXIT_ENVIRONMENT


def _finite(v):
    """JSON has no inf/nan: write them as null (a relative error of inf reads as "no result")."""
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def table(rows: Iterable[Sequence[Any]], headers: Sequence[str], *, align: Sequence[str] | None = None) -> str:
    """A plain-text table (tabulate's ``simple`` format); every cell is ``escape``d.

    ``align``: per column ``"left"``/``"right"`` (default: every column left)."""
    from tabulate import tabulate

    body = [["" if v is None else escape(v) for v in r] for r in rows]
    colalign = tuple(align) if align is not None else ("left",) * len(headers)
    return tabulate(body, headers=[escape(h) for h in headers], tablefmt="simple", disable_numparse=True, colalign=colalign)


def fail_check(message: str) -> None:
    """A check ran and found something wrong: print ``message`` on stderr and exit 1."""
    click.echo(message, err=True)
    sys.exit(1)


# ---------------------------------------------------------------------------------------------
# Option types
# ---------------------------------------------------------------------------------------------
class CommaChoice(click.ParamType):
    """A comma-separated list of choices (``--arch gfx942,gfx950``); with ``multiple=True`` the
    option may also be repeated. The value is a tuple, duplicates dropped, order kept. An unknown
    item is a usage error naming the valid ones."""

    name = "list"

    def __init__(self, choices: Sequence[str], *, case_sensitive: bool = True):
        self.choices = tuple(choices)
        self.case_sensitive = case_sensitive

    def get_metavar(self, param, ctx=None):  # click 8.1 and 8.2 signatures
        return "[" + ",".join(self.choices) + "]"

    def convert(self, value, param, ctx):
        return _comma_items(self, value, param, ctx, self._one)

    def _one(self, v, param, ctx):
        key = v if self.case_sensitive else v.lower()
        if key not in self.choices:
            near = _near(key, self.choices)
            self.fail(
                f"{v!r} is not one of {', '.join(self.choices)}" + (f" (did you mean {near!r}?)" if near else ""),
                param, ctx,
            )  # fmt: skip
        return key


def _comma_items(ptype, value, param, ctx, convert_one) -> tuple:
    """A comma list's items, each through ``convert_one``, de-duplicated in order (a tuple
    passes through: click converts defaults again)."""
    if isinstance(value, tuple):
        return value
    items = [v.strip() for v in str(value).split(",")]
    if not all(items):
        ptype.fail(f"{value!r}: empty item in the comma list", param, ctx)
    out = []
    for v in items:
        got = convert_one(v, param, ctx)
        if got not in out:
            out.append(got)
    return tuple(out)


def _near(value: str, choices: Sequence[str]) -> str | None:
    import difflib

    got = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
    return got[0] if got else None


def flatten(values) -> tuple:
    """The items of a ``multiple=True`` ``CommaChoice`` option (a tuple of tuples), in order."""
    out: list = []
    for v in values or ():
        for item in v if isinstance(v, tuple) else (v,):
            if item not in out:
                out.append(item)
    return tuple(out)


class CommaList(click.ParamType):
    """A comma list whose items each go through ``item`` (a ``click.ParamType``), e.g.
    ``CommaList(Tile())`` for ``--tile 64x64x32,128x128x64``; with ``multiple=True`` the option
    may also be repeated (read it with ``flatten``)."""

    def __init__(self, item: click.ParamType):
        self.item = item
        self.name = f"{item.name}[,...]"

    def convert(self, value, param, ctx):
        return _comma_items(self, value, param, ctx, self.item.convert)


class Tile(click.ParamType):
    """``BMxBNxBK`` (positive integers, ASCII digits) -> ``(bm, bn, bk)``."""

    name = "BMxBNxBK"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        text = str(value).strip().lower()
        parts = text.split("x")
        if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
            self.fail(f"{value!r}: expected BMxBNxBK, e.g. 128x128x64", param, ctx)
        bm, bn, bk = (int(p) for p in parts)
        for name, v in (("BM", bm), ("BN", bn), ("BK", bk)):
            if not 0 < v <= 4096:
                self.fail(f"{value!r}: tile {name} must be in [1, 4096], got {v}", param, ctx)
        return bm, bn, bk


class IntRange32(click.IntRange):
    """An integer that must also fit a kernel's signed 32-bit argument."""

    def __init__(self, min=None, max=2**31 - 1, **kw):
        super().__init__(min=min, max=max, **kw)


def arch_names() -> tuple[str, ...]:
    from skwgrad.abi.arch import ARCHES

    return tuple(ARCHES)


def cache_option(f=None, *, help_extra: str = ""):
    """``--cache DIR`` (env ``SKWGRAD_CACHE``), the same on every command that opens a cache."""
    opt = click.option(
        "--cache", "cache_dir", envvar="SKWGRAD_CACHE", type=click.Path(file_okay=False), default=None,
        help="cache directory [env SKWGRAD_CACHE; default $XDG_CACHE_HOME/skwgrad]" + help_extra,
    )  # fmt: skip
    return opt(f) if f is not None else opt


JSON_META = "skwgrad.json"


def _note_json(ctx, param, value):
    """Remember on the root context that this command answers in JSON, so the group's error
    handler answers in JSON too (``error_document``)."""
    if value:
        ctx.find_root().meta[JSON_META] = True
    return value


json_option = click.option(
    "--json", "as_json", is_flag=True, callback=_note_json,
    help='machine-readable output on stdout: one JSON object with "version": 1 (an error too)',
)  # fmt: skip


def error_document(e: Exception, exit_code: int) -> dict:
    """The ``--json`` answer of a command that failed, for ``emit_json``: it prints
    ``{"version": 1, "error": {"type", "exit_code", "message"}}``."""
    return {"error": {"type": type(e).__name__, "exit_code": exit_code, "message": str(e)}}


# ---------------------------------------------------------------------------------------------
# Logging
# ---------------------------------------------------------------------------------------------
class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at emit time (click's CliRunner swaps it)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def setup_logging(level: str | None = None) -> int:
    """Configure the ``skwgrad`` logger on stderr: ``level`` (``--log-level``) or
    ``$SKWGRAD_LOG`` or ``warning``. Returns the numeric level. A bad ``$SKWGRAD_LOG`` is a
    usage error naming the valid levels."""
    name = (level or os.environ.get(LOG_ENV, "") or "warning").strip().lower()
    if name not in LOG_LEVELS:
        src = "--log-level" if level else LOG_ENV
        raise ProblemError(f"{src}={name!r}: use one of {', '.join(LOG_LEVELS)}")
    num = getattr(logging, name.upper())
    log.setLevel(num)
    if not any(getattr(h, "_skwgrad", False) for h in log.handlers):
        h = _StderrHandler()
        h.setFormatter(logging.Formatter("skwgrad %(levelname)s %(name)s: %(message)s"))
        h._skwgrad = True  # type: ignore[attr-defined]
        log.addHandler(h)
        log.propagate = False
    return num


def arch_option(*, multiple: bool = True, default=None, help: str | None = None):
    """``--arch``: one or more skwgrad targets, comma list and/or repeated (``multiple``), each
    checked against ``skwgrad.abi.arch.ARCHES``. Read the value with ``flatten``."""
    return click.option(
        "--arch", "arches" if multiple else "arch", multiple=multiple, type=CommaChoice(arch_names()), default=default,
        help=help or f"target(s): {', '.join(arch_names())}; a comma list or repeated",
    )  # fmt: skip


def alias(old: str, dest: str, **option_kw):
    """A hidden old spelling of an option (``alias("--tiles", "tile")``): given alone it sets
    ``dest``; given with the new spelling, the values must agree (lists are joined). Put it
    below ``@click.command`` with the other options."""
    import functools

    hidden = "_alias_" + dest

    def deco(f):
        @functools.wraps(f)
        def wrapper(*args, **kw):
            v = kw.pop(hidden)
            if v is None or v == ():
                return f(*args, **kw)
            ctx = click.get_current_context()
            cur = kw.get(dest)
            given = ctx.get_parameter_source(dest) not in (None, click.core.ParameterSource.DEFAULT)
            if option_kw.get("multiple"):
                kw[dest] = tuple(cur or ()) + tuple(v)
            elif given and cur != v:
                raise click.UsageError(f"{old} is the old name of --{dest.replace('_', '-')}; give one of them")
            else:
                kw[dest] = v
            return f(*args, **kw)

        return click.option(old, hidden, hidden=True, default=None, **option_kw)(wrapper)

    return deco
