"""How arrays are read as a convolution: the layout rule, never a guess.

skwgrad's memory layouts are CK's: x is ``N [D] H W C``, dy is ``N [Do] Ho Wo K``, dW is
``K [Z] Y X C/groups`` (groups outermost in the channel dims), all packed. Two shape readings exist:

* ``nchw``: PyTorch's shape ``(N, C, [D,] H, W)``;
* ``nhwc``: the memory's own shape ``(N, [D,] H, W, C)``.

**Torch tensors are always read by PyTorch's convention** (``nchw``), whatever their memory
format, exactly as ``torch.nn.functional.conv2d`` reads them. Channels-last memory
(``torch.channels_last`` / ``channels_last_3d``) is used as is; any other memory (the default
contiguous NCHW, a sliced or strided view) is converted with
``.contiguous(memory_format=torch.channels_last)``: a copy, counted in ``LaunchStats.converted``.
``layout="nhwc"`` reads a torch tensor shaped ``(N, [D,] H, W, C)`` instead, when asked.

**Arrays with no shape convention** (numpy, CuPy, DLPack, ``__cuda_array_interface__``) are read
by whichever reading fits the convolution (batch, channels and the spatial sizes that the filter,
stride, padding and dilation give). When both readings fit, the array is ambiguous and is refused
before any device work unless ``layout=`` names the reading. The chosen reading's memory must be
packed: host arrays are copied into place anyway; a CuPy array is converted
(``cupy.ascontiguousarray``); other device arrays are refused with the conversion to make.
"""

from __future__ import annotations

from dataclasses import dataclass

from skwgrad.abi.conv import ConvProblem
from skwgrad.errors import LayoutError, ProblemError
from skwgrad.launcher.interop import ArrayView

LAYOUTS = ("auto", "nchw", "nhwc")


def packed(shape, strides, order) -> bool:
    """Strides of a packed array whose memory runs through ``order`` (outermost first), ignoring
    dims of extent 1."""
    acc = 1
    for d in reversed(order):
        if shape[d] != 1 and strides[d] != acc:
            return False
        acc *= shape[d]
    return True


def memory_order(reading: str, nd: int) -> tuple[int, ...]:
    """Dims of an array in this reading, outermost memory first (skwgrad's packed layout)."""
    return (0, *range(2, nd), 1) if reading == "nchw" else tuple(range(nd))


def split(v: ArrayView, reading: str) -> tuple[int, int, tuple]:
    """(N, channels, spatial) of ``v`` read as ``reading``."""
    if reading == "nchw":
        return v.shape[0], v.shape[1], tuple(v.shape[2:])
    return v.shape[0], v.shape[-1], tuple(v.shape[1:-1])


def is_packed(v: ArrayView, reading: str) -> bool:
    return packed(v.shape, v.strides, memory_order(reading, v.ndim))


def _tuple(v, sd, what):
    if isinstance(v, bool):
        raise ProblemError(f"{what} must be an integer or {sd} integers, got {v!r}")
    if isinstance(v, int):
        return (v,) * sd
    try:
        v = tuple(v)
    except TypeError:
        raise ProblemError(f"{what} must be an integer or {sd} integers, got {v!r}") from None
    if len(v) != sd:
        raise ProblemError(f"{what} must be one integer or {sd} integers, got {v!r}")
    return v


def spatial_dims_of(x: ArrayView, filter_size) -> int:
    if isinstance(filter_size, int) and not isinstance(filter_size, bool):
        sd = x.ndim - 2
        if sd not in (2, 3):
            raise ProblemError(f"x has {x.ndim} dims; a 2-D convolution takes 4, a 3-D one 5")
        return sd
    try:
        sd = len(tuple(filter_size))
    except TypeError:
        raise ProblemError(f"filter_size must be an integer or 2 (Y, X) / 3 (Z, Y, X) integers, got {filter_size!r}") from None
    if sd not in (2, 3):
        raise ProblemError(f"filter_size {filter_size!r} must have 2 (Y, X) or 3 (Z, Y, X) values")
    return sd


@dataclass(frozen=True)
class Reading:
    """The problem two arrays describe, the reading used, and whether each one's memory is
    already skwgrad's packed layout (else the caller converts it or refuses)."""

    problem: ConvProblem
    layout: str
    x_packed: bool
    dy_packed: bool


def _problem(x, dy, reading, sd, fsize, stride, padding, dilation, groups, dtype, dw_dtype, precision):
    n, cin, sp_in = split(x, reading)
    n2, kout, sp_out = split(dy, reading)
    p = ConvProblem.from_torch(
        batch=n, in_channels=cin, out_channels=kout, input_size=sp_in, kernel_size=fsize, stride=stride,
        padding=padding, dilation=dilation, groups=groups, dtype=dtype, dw_dtype=dw_dtype or "",
        precision=(precision or "") if dtype == "fp32" else "",
    )  # fmt: skip
    if n2 != n:
        raise ProblemError(f"x has batch {n}, dy has {n2}")
    want = (p.do, p.ho, p.wo)[3 - sd :]
    if tuple(sp_out) != want:
        raise ProblemError(
            f"dy's spatial size is {tuple(sp_out)}, but x's {tuple(sp_in)} with filter {fsize}, stride {stride}, "
            f"padding {padding}, dilation {dilation} gives {want}"
        )
    return p


def read(
    x: ArrayView, dy: ArrayView, *, filter_size, stride=1, padding=0, dilation=1, groups=1, dw_dtype=None,
    precision=None, layout="auto",
) -> Reading:  # fmt: skip
    """Read x and dy as one convolution by the rule above; ``LayoutError`` when the arrays do not
    say which reading they are, ``ProblemError`` when no reading describes a convolution."""
    if layout not in LAYOUTS:
        raise ProblemError(f"layout={layout!r}: use one of {', '.join(LAYOUTS)}")
    if x.dtype != dy.dtype:
        raise ProblemError(f"x is {x.dtype} and dy is {dy.dtype}; they must have the same dtype")
    sd = spatial_dims_of(x, filter_size)
    nd = sd + 2
    for v, name in ((x, "x"), (dy, "dy")):
        if v.ndim != nd:
            d = "D, " if sd == 3 else ""
            raise ProblemError(f"{name} has {v.ndim} dims {v.shape}; a {sd}-D convolution takes {nd}: (N, C, {d}H, W)")
    fsize = _tuple(filter_size, sd, "filter_size")
    torchy = x.kind in ("torch", "torch-cpu") or dy.kind in ("torch", "torch-cpu")
    if layout != "auto":
        readings = (layout,)
    elif torchy:
        readings = ("nchw",)  # PyTorch's convention, whatever the memory format
    else:
        readings = ("nchw", "nhwc")
    good, errors = {}, []
    for r in readings:
        try:
            good[r] = _problem(x, dy, r, sd, fsize, stride, padding, dilation, groups, x.dtype, dw_dtype, precision)
        except ProblemError as e:
            errors.append(f"read as {r} ({'(N, C, ...)' if r == 'nchw' else '(N, ..., C)'}): {e}")
    if not good:
        raise ProblemError("x and dy do not describe one convolution: " + "; ".join(errors))
    if len(good) > 1:
        raise LayoutError(
            f"x {tuple(x.shape)} and dy {tuple(dy.shape)} fit the convolution both as (N, C, ...) and as (N, ..., C) "
            f"arrays ({good['nchw'].describe()} vs {good['nhwc'].describe()}); skwgrad does not guess: "
            f"pass layout='nchw' (PyTorch's shape) or layout='nhwc' (channels last in the shape)"
        )
    (r, p), = good.items()
    return Reading(p, r, is_packed(x, r), is_packed(dy, r))


def dw_shapes(p: ConvProblem) -> tuple[tuple, tuple]:
    """(PyTorch weight shape (K, C/g, [Z,] Y, X), its channels-last memory shape (K, [Z,] Y, X, C/g))."""
    f = (p.z, p.y, p.x) if p.spatial_dims == 3 else (p.y, p.x)
    return (p.g * p.k, p.c, *f), (p.g * p.k, *f, p.c)


def out_packed(v: ArrayView, p: ConvProblem) -> bool:
    """Check ``out`` (dtype, shape, writable); True when its memory is skwgrad's dW layout, False
    when it is PyTorch-shaped in another memory format (the result is then copied in)."""
    torch_shape, mem_shape = dw_shapes(p)
    nd = len(torch_shape)
    if v.dtype != p.dw_dtype:
        raise ProblemError(f"out has dtype {v.dtype}; the dW dtype is {p.dw_dtype}")
    if v.readonly:
        raise ProblemError("out is read-only; pass a writable array")
    if tuple(v.shape) == torch_shape and packed(v.shape, v.strides, memory_order("nchw", nd)):
        return True
    if tuple(v.shape) == mem_shape and packed(v.shape, v.strides, tuple(range(nd))):
        return True
    if tuple(v.shape) == torch_shape and v.kind in ("torch", "torch-cpu", "numpy"):
        return False
    raise ProblemError(
        f"out (shape {tuple(v.shape)}, strides {tuple(v.strides)}) must be {torch_shape} (channels-last memory, or any "
        f"memory for torch/numpy: copied in) or a contiguous {mem_shape} array"
    )
