"""A convolution wgrad problem and its implicit-GEMM view.

Layouts are CK's, all packed: x is ``N [Di] Hi Wi G C``, dy is ``N [Do] Ho Wo G K`` and dW is
``G K [Z] Y X C``. Per group the GEMM is

    dW[g] (M x Ng) = dy[g]^T (M x Kg) @ im2col(x)[g] (Kg x Ng)
    M = K,  Ng = Z*Y*X*C,  Kg = N*Do*Ho*Wo

Groups fold into GEMM-M (``m_tiles = G * ceil(K / BM)``), tiles are numbered row-major, and one
MAC iteration is one BK slice of Kg.

Index arithmetic: the kernels address every tensor with 32-bit element offsets (cheaper address
math, and Triton's pointer analysis keeps vector loads). A problem whose x, dy or dW holds
2**31 elements or more is refused here, before anything is compiled or launched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from skwgrad.errors import ProblemError

DTYPES = ("fp16", "bf16", "fp32")
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
# fp32 inputs only: how the MMAs read them. ieee (full fp32) unless tf32 is asked for, as in
# PyTorch, so a cache holding only tf32 kernels can never lower a problem's precision silently.
PRECISIONS = ("ieee", "tf32")
INT32_MAX = 2**31 - 1
# Largest element count the kernels' int32 offsets can address (offsets stay below 2**31).
MAX_ELEMENTS = INT32_MAX
# Padded extent per spatial dim. The kernels mark masked rows and columns by moving their
# coordinate 2**29 outside the image (``wgrad.OUTSIDE``), which must exceed any extent.
MAX_EXTENT = 2**28

_Triple = tuple[int, int, int]


def _triple(value, name: str, spatial_dims: int, default_d: int) -> _Triple:
    """Normalise an int or a per-dim sequence (D first in 3-D) to a (d, h, w) triple."""
    if isinstance(value, int):
        vals = (value,) * spatial_dims
    else:
        vals = tuple(value)
    if len(vals) != spatial_dims or not all(isinstance(v, int) for v in vals):
        raise ProblemError(
            f"{name} must be one integer or {spatial_dims} integers (one per spatial dim"
            f"{', D first' if spatial_dims == 3 else ''}), got {value!r}"
        )
    return vals if spatial_dims == 3 else (default_d, *vals)


@dataclass(frozen=True)
class Tiling:
    """How one BM x BN x BK tile shape covers a problem's GEMM."""

    bm: int
    bn: int
    bk: int
    m_tiles_per_group: int
    m_tiles: int
    n_tiles: int
    num_tiles: int
    iters_per_tile: int

    @property
    def total_iters(self) -> int:
        return self.num_tiles * self.iters_per_tile


@dataclass(frozen=True)
class ConvProblem:
    """One wgrad problem. ``c`` and ``k`` are channels *per group*.

    Build it with ``ConvProblem(...)`` (per-group channels), ``ConvProblem.from_torch(...)``
    (PyTorch totals), ``parse_problem("n=..,c=..")`` or ``from_row(csv_row)``.
    """

    n: int
    c: int
    k: int
    hi: int
    wi: int
    y: int
    x: int
    g: int = 1
    di: int = 1
    z: int = 1
    stride: _Triple = (1, 1, 1)
    pad_lo: _Triple = (0, 0, 0)
    pad_hi: _Triple = (0, 0, 0)
    dilation: _Triple = (1, 1, 1)
    dtype: str = "bf16"
    dw_dtype: str = ""  # "" means: same as dtype
    spatial_dims: int = 2
    precision: str = ""  # fp32 only: "ieee" (the default) or "tf32"
    _out: _Triple = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.dw_dtype == "":
            object.__setattr__(self, "dw_dtype", self.dtype)
        if self.precision == "" and self.dtype == "fp32":
            object.__setattr__(self, "precision", "ieee")
        self._validate()

    # -- validation -------------------------------------------------------------------------
    def _validate(self):
        if self.spatial_dims not in (2, 3):
            raise ProblemError(f"spatial_dims must be 2 or 3, got {self.spatial_dims!r}")
        for name in ("n", "g", "c", "k", "di", "hi", "wi", "z", "y", "x"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ProblemError(f"{name} must be a positive integer, got {v!r}")
        for name in ("stride", "pad_lo", "pad_hi", "dilation"):
            v = getattr(self, name)
            if (
                not isinstance(v, tuple)
                or len(v) != 3
                or not all(isinstance(e, int) and not isinstance(e, bool) for e in v)
            ):
                raise ProblemError(f"{name} must be a (d, h, w) triple of integers, got {v!r}")
        for name in ("stride", "dilation"):
            if min(getattr(self, name)) <= 0:
                raise ProblemError(f"{name} must be positive in every dim, got {getattr(self, name)}")
        for name in ("pad_lo", "pad_hi"):
            if min(getattr(self, name)) < 0:
                raise ProblemError(f"{name} must be >= 0 in every dim, got {getattr(self, name)}")
        if self.spatial_dims == 2:
            flat = (self.di, self.z, self.stride[0], self.pad_lo[0], self.pad_hi[0], self.dilation[0])
            if flat != (1, 1, 1, 0, 0, 1):
                raise ProblemError(
                    "a 2-D problem must have di=z=1, stride/dilation 1 and no padding in D; "
                    "use spatial_dims=3 for a 3-D convolution"
                )
        if self.dtype not in DTYPES:
            raise ProblemError(f"dtype {self.dtype!r} is not supported; use one of {', '.join(DTYPES)}")
        if self.dtype == "fp32" and self.precision not in PRECISIONS:
            raise ProblemError(f"precision {self.precision!r} is not supported; fp32 takes one of {', '.join(PRECISIONS)}")
        if self.dtype != "fp32" and self.precision:
            raise ProblemError(f"precision applies to fp32 inputs only; this problem is {self.dtype}")
        if self.dw_dtype not in (self.dtype, "fp32"):
            raise ProblemError(
                f"dw_dtype {self.dw_dtype!r} is not supported with dtype {self.dtype!r}; "
                f"dW is either the input dtype or fp32"
            )
        out = []
        for dim, size, filt in zip("dhw", (self.di, self.hi, self.wi), (self.z, self.y, self.x)):
            i = "dhw".index(dim)
            span = self.dilation[i] * (filt - 1) + 1
            padded = size + self.pad_lo[i] + self.pad_hi[i]
            if padded < span:
                raise ProblemError(
                    f"empty output in {dim.upper()}: input {size} + padding "
                    f"{self.pad_lo[i]}+{self.pad_hi[i]} is smaller than the dilated filter span "
                    f"{span}; the output size must be >= 1"
                )
            if padded > MAX_EXTENT:
                raise ProblemError(
                    f"{dim.upper()} extent {padded} (input plus padding) is past the {MAX_EXTENT} "
                    f"that skwgrad kernels address; split the problem along {dim.upper()}"
                )
            out.append((padded - span) // self.stride[i] + 1)
        object.__setattr__(self, "_out", tuple(out))
        for name, count in (("x", self.x_numel), ("dy", self.dy_numel), ("dW", self.dw_numel)):
            if count > MAX_ELEMENTS:
                raise ProblemError(
                    f"{name} has {count} elements; skwgrad kernels use 32-bit element offsets "
                    f"and take tensors of at most {MAX_ELEMENTS} elements: split the batch"
                )

    # -- sizes ------------------------------------------------------------------------------
    @property
    def do(self) -> int:
        return self._out[0]

    @property
    def ho(self) -> int:
        return self._out[1]

    @property
    def wo(self) -> int:
        return self._out[2]

    @property
    def x_shape(self) -> tuple[int, ...]:
        sp = (self.di, self.hi, self.wi) if self.spatial_dims == 3 else (self.hi, self.wi)
        return (self.n, *sp, self.g, self.c)

    @property
    def dy_shape(self) -> tuple[int, ...]:
        sp = (self.do, self.ho, self.wo) if self.spatial_dims == 3 else (self.ho, self.wo)
        return (self.n, *sp, self.g, self.k)

    @property
    def dw_shape(self) -> tuple[int, ...]:
        sp = (self.z, self.y, self.x) if self.spatial_dims == 3 else (self.y, self.x)
        return (self.g, self.k, *sp, self.c)

    @property
    def x_numel(self) -> int:
        return self.n * self.di * self.hi * self.wi * self.g * self.c

    @property
    def dy_numel(self) -> int:
        return self.n * self.do * self.ho * self.wo * self.g * self.k

    @property
    def dw_numel(self) -> int:
        return self.g * self.k * self.z * self.y * self.x * self.c

    # -- GEMM view --------------------------------------------------------------------------
    @property
    def gemm_m(self) -> int:
        return self.k

    @property
    def gemm_n(self) -> int:
        return self.z * self.y * self.x * self.c

    @property
    def gemm_k(self) -> int:
        return self.n * self.do * self.ho * self.wo

    @property
    def flops(self) -> int:
        return 2 * self.g * self.gemm_m * self.gemm_n * self.gemm_k

    @property
    def is_pointwise(self) -> bool:
        """1x1(x1) filter, stride 1, no padding: im2col(x) is x itself."""
        return (
            (self.z, self.y, self.x) == (1, 1, 1)
            and self.stride == (1, 1, 1)
            and self.pad_lo == (0, 0, 0)
            and self.pad_hi == (0, 0, 0)
        )

    @property
    def is_depthwise(self) -> bool:
        return self.g > 1 and self.c == 1 and self.k == 1

    def tiling(self, bm: int, bn: int, bk: int) -> Tiling:
        for name, v in (("BM", bm), ("BN", bn), ("BK", bk)):
            if v <= 0:
                raise ProblemError(f"tile {name} must be positive, got {v}")
        mpg = math.ceil(self.gemm_m / bm)
        m_tiles = self.g * mpg
        n_tiles = math.ceil(self.gemm_n / bn)
        return Tiling(
            bm=bm,
            bn=bn,
            bk=bk,
            m_tiles_per_group=mpg,
            m_tiles=m_tiles,
            n_tiles=n_tiles,
            num_tiles=m_tiles * n_tiles,
            iters_per_tile=math.ceil(self.gemm_k / bk),
        )

    def vector_width(self, channels: int) -> int:
        """Widest element vector (16 bytes at most) that divides ``channels``."""
        w = 16 // DTYPE_BYTES[self.dtype]
        while channels % w:
            w //= 2
        return w

    # -- constructors -----------------------------------------------------------------------
    @classmethod
    def from_torch(
        cls,
        *,
        batch: int,
        in_channels: int,
        out_channels: int,
        input_size,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        dtype: str = "bf16",
        dw_dtype: str = "",
        precision: str = "",
    ) -> "ConvProblem":
        """PyTorch-style totals. ``padding`` is symmetric per dim, or a (lo, hi) pair per dim."""
        sizes = (input_size,) if isinstance(input_size, int) else tuple(input_size)
        if len(sizes) not in (2, 3):
            raise ProblemError(f"input_size must have 2 (H, W) or 3 (D, H, W) dims, got {input_size!r}")
        sd = len(sizes)
        for name, v in (("groups", groups), ("in_channels", in_channels), ("out_channels", out_channels)):
            if not isinstance(v, int) or v <= 0:
                raise ProblemError(f"{name} must be a positive integer, got {v!r}")
        for name, v in (("in_channels", in_channels), ("out_channels", out_channels)):
            if v % groups:
                raise ProblemError(f"{name}={v} is not divisible by groups={groups}")
        ksz = _triple(kernel_size, "kernel_size", sd, 1)
        if isinstance(padding, (list, tuple)) and padding and isinstance(padding[0], (list, tuple)):
            pairs = [tuple(p) for p in padding]
            if len(pairs) != sd or any(len(p) != 2 for p in pairs):
                raise ProblemError(f"padding pairs must be one (lo, hi) per spatial dim, got {padding!r}")
            lo = tuple(p[0] for p in pairs)
            hi = tuple(p[1] for p in pairs)
            pad_lo = lo if sd == 3 else (0, *lo)
            pad_hi = hi if sd == 3 else (0, *hi)
        else:
            pad_lo = pad_hi = _triple(padding, "padding", sd, 0)
        sp = sizes if sd == 3 else (1, *sizes)
        return cls(
            n=batch,
            g=groups,
            c=in_channels // groups,
            k=out_channels // groups,
            di=sp[0],
            hi=sp[1],
            wi=sp[2],
            z=ksz[0],
            y=ksz[1],
            x=ksz[2],
            stride=_triple(stride, "stride", sd, 1),
            pad_lo=pad_lo,
            pad_hi=pad_hi,
            dilation=_triple(dilation, "dilation", sd, 1),
            dtype=dtype,
            dw_dtype=dw_dtype,
            spatial_dims=sd,
            precision=precision,
        )

    def describe(self) -> str:
        """The problem in the ``--problem`` syntax (PyTorch totals)."""
        sd = self.spatial_dims

        def dims(t, per_dim=False):
            t = t if sd == 3 else t[1:]
            return str(t[0]) if len(set(t)) == 1 and not per_dim else "x".join(map(str, t))

        # d=1,z=1 alone reads back as 2-D: spell the stride per dim so a 3-D problem stays 3-D.
        flat_3d = sd == 3 and self.di == 1 and self.z == 1

        parts = [f"n={self.n}", f"c={self.c * self.g}", f"k={self.k * self.g}"]
        if self.g != 1:
            parts.append(f"g={self.g}")
        if sd == 3:
            parts.append(f"d={self.di}")
        parts += [f"h={self.hi}", f"w={self.wi}"]
        if sd == 3:
            parts.append(f"z={self.z}")
        parts += [f"y={self.y}", f"x={self.x}", f"stride={dims(self.stride, flat_3d)}"]
        if self.pad_lo == self.pad_hi:
            parts.append(f"padding={dims(self.pad_lo)}")
        else:
            parts += [f"pad_lo={dims(self.pad_lo)}", f"pad_hi={dims(self.pad_hi)}"]
        parts += [f"dilation={dims(self.dilation)}", f"dtype={self.dtype}"]
        if self.dw_dtype != self.dtype:
            parts.append(f"dw_dtype={self.dw_dtype}")
        if self.precision not in ("", "ieee"):
            parts.append(f"precision={self.precision}")
        return ",".join(parts)


_PROBLEM_KEYS = (
    "n", "c", "k", "g", "d", "h", "w", "z", "y", "x",
    "stride", "padding", "pad_lo", "pad_hi", "dilation", "dtype", "dw_dtype", "precision",
)  # fmt: skip


def _ascii_int(text: str) -> int | None:
    """``text`` as a non-negative integer written in ASCII digits only, else None. (``int()``
    also takes Unicode digits, signs, underscores and surrounding whitespace: a problem string
    means exactly what it shows.)"""
    return int(text) if text and text.isascii() and text.isdigit() else None


def _dims(text: str, key: str) -> tuple[int, ...]:
    parts = [_ascii_int(p) for p in text.split("x")]
    if any(v is None for v in parts):
        if any(p.startswith("-") and _ascii_int(p[1:]) is not None for p in text.split("x")):
            raise ProblemError(f"{key}={text!r}: {key} must be >= 0 in every dim")
        raise ProblemError(f"{key}={text!r}: expected an integer or integers joined by 'x' (ASCII digits, e.g. 1 or 2x1)")
    return tuple(parts)


def problem_from_fields(fields: dict[str, str]) -> ConvProblem:
    """Build a problem from ``--problem`` / corpus fields (``c``/``k`` are PyTorch totals)."""
    unknown = sorted(set(fields) - set(_PROBLEM_KEYS))
    if unknown:
        raise ProblemError(f"unknown problem key(s) {', '.join(unknown)}; known: {', '.join(_PROBLEM_KEYS)}")
    missing = [k for k in ("n", "c", "k", "h", "w", "y", "x") if k not in fields]
    if missing:
        raise ProblemError(f"problem is missing {', '.join(missing)}")

    def integer(key, default=None):
        if key not in fields:
            return default
        v = _ascii_int(fields[key])
        if v is None:
            raise ProblemError(f"{key}={fields[key]!r} is not an integer (ASCII digits 0-9, no sign)")
        return v

    d, z = integer("d", 1), integer("z", 1)
    sd = 3 if (d != 1 or z != 1 or any(len(_dims(fields[k], k)) == 3 for k in ("stride", "padding", "pad_lo", "pad_hi", "dilation") if k in fields)) else 2

    def spatial(key, default):
        if key not in fields:
            return default
        v = _dims(fields[key], key)
        if len(v) == 1:
            return v[0]
        if len(v) != sd:
            raise ProblemError(f"{key}={fields[key]!r} must have 1 or {sd} values (one per spatial dim)")
        return v

    if "padding" in fields and ("pad_lo" in fields or "pad_hi" in fields):
        raise ProblemError("give either padding or pad_lo/pad_hi, not both")
    if "pad_lo" in fields or "pad_hi" in fields:
        lo = _triple(spatial("pad_lo", 0), "pad_lo", sd, 0)
        hi = _triple(spatial("pad_hi", 0), "pad_hi", sd, 0)
        padding = [(a, b) for a, b in zip(lo, hi)][3 - sd :]
    else:
        padding = spatial("padding", 0)
    size = (d, integer("h"), integer("w")) if sd == 3 else (integer("h"), integer("w"))
    ksz = (z, integer("y"), integer("x")) if sd == 3 else (integer("y"), integer("x"))
    return ConvProblem.from_torch(
        batch=integer("n"),
        in_channels=integer("c"),
        out_channels=integer("k"),
        groups=integer("g", 1),
        input_size=size,
        kernel_size=ksz,
        stride=spatial("stride", 1),
        padding=padding,
        dilation=spatial("dilation", 1),
        dtype=fields.get("dtype", "bf16"),
        dw_dtype=fields.get("dw_dtype", ""),
        precision=fields.get("precision", ""),
    )


_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz_")
_BLANK = " \t"  # the only whitespace allowed around fields (NBSP and other Unicode spaces are not)


def parse_problem(text: str) -> ConvProblem:
    """Parse ``"n=32,c=64,k=64,h=56,w=56,y=3,x=3,stride=1,padding=1"``.

    Plain ASCII only: keys are the known lowercase names, numbers ASCII digits; spaces and tabs
    may surround a field. Anything else (a non-breaking space, an Arabic-Indic digit, ``N=32``)
    is refused with a message naming it, never read as something it only looks like."""
    if not isinstance(text, str):
        raise ProblemError(f"a problem is a string such as 'n=32,c=64,k=64,h=56,w=56,y=3,x=3', got {type(text).__name__}")
    for i, ch in enumerate(text):
        if not ch.isascii() or (not ch.isprintable() and ch not in _BLANK):
            name = __import__("unicodedata").name(ch, "a control character")
            raise ProblemError(
                f"problem text has {name} (U+{ord(ch):04X}) at position {i}: write problems in plain ASCII "
                f"(keys {', '.join(_PROBLEM_KEYS[:10])}, ...; digits 0-9)"
            )
    fields: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip(_BLANK)
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip(_BLANK), value.strip(_BLANK)
        if not sep or not value:
            raise ProblemError(f"problem field {part!r} is not key=value")
        if key not in _PROBLEM_KEYS:
            if key.lower() in _PROBLEM_KEYS:
                raise ProblemError(f"problem key {key!r} must be lowercase: {key.lower()}")
            if not key or not set(key) <= _KEY_CHARS:
                raise ProblemError(f"problem key {key!r} is not a name; known keys: {', '.join(_PROBLEM_KEYS)}")
        if key in fields:
            raise ProblemError(f"problem key {key!r} is given twice")
        fields[key] = value
    if not fields:
        raise ProblemError("the problem is empty; give e.g. 'n=32,c=64,k=64,h=56,w=56,y=3,x=3'")
    return problem_from_fields(fields)


_CSV_RENAMES = {"in_channels": "c", "out_channels": "k", "groups": "g"}
_CSV_IGNORED = {"name", "regime"}


def from_row(row: dict[str, str]) -> ConvProblem:
    """A corpus CSV row (``in_channels``/``out_channels``/``groups`` spelled out)."""
    fields = {}
    for key, value in row.items():
        if key in _CSV_IGNORED or value is None or value == "":
            continue
        fields[_CSV_RENAMES.get(key, key)] = value
    return problem_from_fields(fields)


def read_corpus(path) -> list[tuple[str, str, ConvProblem]]:
    """(name, regime, problem) for each row of a corpus CSV. A bad row is refused naming its
    line and name; an unreadable file names the file."""
    import csv

    out = []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            for r in reader:
                name = r.get("name") or ""
                where = f"{path} line {reader.line_num}" + (f" ({name})" if name else "")
                if None in r:
                    raise ProblemError(f"{where}: more fields than the header names")
                try:
                    out.append((name, r.get("regime") or "", from_row(r)))
                except ProblemError as e:
                    raise ProblemError(f"{where}: {e}") from None
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ProblemError(
            f"cannot read the corpus {path}: {getattr(e, 'strerror', None) or e}; give a UTF-8 CSV with a header row "
            f"(name,n,in_channels,out_channels,...; see tests/data/wgrad_shapes.csv)"
        ) from None
    return out
