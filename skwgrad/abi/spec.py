"""The compile-time spec of one code object, its readable label, and what launch shapes it takes.

Everything else (the problem shape, groups, the pool, ks_count) is a kernarg, so one binary
serves any problem that ``KernelSpec.check_problem`` admits.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields

from skwgrad.abi.conv import DTYPE_BYTES, DTYPES, PRECISIONS, ConvProblem
from skwgrad.abi.kernargs import DWCONV_TMA_VARIANTS, DWCONV_WALK_VARIANTS, FAMILIES, HELPER_FAMILIES, SK_REDUCTIONS, SPLITK_EPILOGUES, TMA_VARIANTS, declaration
from skwgrad.abi.streamk import MODES
from skwgrad.errors import AbiError

# Replicas the Stage-2 reduce loads per step before it adds them (in replica order, so two-stage
# split-K stays deterministic): one load at a time made its latency the cost of every replica (H200,
# Nsight Compute: 11 replicas of an 18K-element dW took 7.5 us, 0.1 TB/s). Here, not in the kernel
# file, because the cost model prices the Stage-2 chain in these steps and must not import Triton;
# this file is part of every cache key.
STAGE2_UNROLL = 8
# The TMA im2col kernels (``wgrad_tma``) run one producer warp beside their num_warps MMA warps
# (Gluon's warp_specialize): it issues the TMA loads of the shared-memory ring.
TMA_PRODUCER_WARPS = 1
TMA_MODES = ("", "persistent", "streamk")  # how a wgrad_tma grid covers its work (skwgrad.abi.launch.tma_geometry)
# The TMA depthwise kernels (``dwconv_tma``) load 8 x rows a step: 6 output rows of a 3x3 filter, 4
# of a 5x5, each x row read once per step (the prototype's first version, a box per tap column,
# read x 4x from L2 and was L2-bound: benchmarks/RESULTS.md, session 19).
DWCONV_TMA_X_ROWS = 8
TMA_FAMILIES = ("wgrad_tma", "dwconv_tma")  # Gluon kernels that read dy and x through tensor maps (sm_90)
TMA_TWO_CTA_REGS = 128  # 256 threads x 128 registers: half an SM's register file
TMA_THREE_CTA_REGS = 80  # 256 threads x 80: a third (the MMA warps grow to 136 through setmaxnreg)


def dw_zeroed_before_launch(variant: str) -> bool:
    """Whether a launch of this epilogue adds into dW itself, so the launcher zeroes dW first (the
    ``atomic`` epilogues of every family; ``abi.workspace.WorkspaceLayout.zero_dw``). On an arch
    with ``dependent_launch`` the kernel starts while that memset runs and waits for it
    (``griddepcontrol.wait``) before its first write to dW: the kernels read this rule when they
    are compiled and the launcher when it launches them, so the two cannot disagree."""
    return variant == "atomic"


@dataclass(frozen=True, order=True)
class KernelSpec:
    family: str  # "wgrad" | "wgrad_sk" | "stage2" | "dwconv" | "grouped" | "pad" | "wgrad_tma" | "dwconv_tma" | "dwconv_walk"
    variant: str  # wgrad, grouped, dwconv: direct|atomic|two_stage|workspace; wgrad_sk: linear|tree|atomic|workspace; stage2: reduce; pad: rows; wgrad_tma: direct|atomic|workspace; dwconv_tma: atomic|workspace
    dtype: str  # input dtype (x, dy); for stage2 and pad the element dtype, equal to dw_dtype
    dw_dtype: str
    spatial_dims: int = 2
    pointwise: bool = False  # 1x1, stride 1, no padding: x is addressed as a plain matrix
    vec_c: int = 1  # the kernel assumes C % vec_c == 0 (vector width of x / dW rows)
    vec_k: int = 1  # the kernel assumes K % vec_k == 0 (vector width of dy rows)
    bm: int = 0
    bn: int = 0
    bk: int = 0
    num_warps: int = 4
    num_stages: int = 2
    mode: str = ""  # wgrad_sk only: dp_sk | persistent
    precision: str = ""  # fp32 input only: ieee | tf32
    block: int = 0  # stage2 / pad: elements per CTA; grouped: groups per tile; wgrad_tma: filter taps per tile
    # wgrad_tma only: the registers a thread is launched with (0: the compiler's choice, which for a
    # warp-specialized kernel fills the SM, so one CTA fits); TMA_TWO_CTA_REGS / TMA_THREE_CTA_REGS
    # let two / three CTAs share an SM (the MMA warps still grow to 232 / 136 through setmaxnreg,
    # taken from the producer warp's share). The sweep's rule: skwgrad.aot.sweep.tma_max_regs.
    max_regs: int = 0

    def __post_init__(self):
        self.validate()

    # -- rules ------------------------------------------------------------------------------
    def validate(self):
        bad = lambda msg: AbiError(f"invalid kernel spec ({self.label_unchecked()}): {msg}")  # noqa: E731
        declaration(self.family, self.variant)  # family/variant known
        if self.max_regs and (self.family != "wgrad_tma" or self.max_regs not in (TMA_TWO_CTA_REGS, TMA_THREE_CTA_REGS)):
            raise bad(f"max_regs is 0, or {TMA_TWO_CTA_REGS} or {TMA_THREE_CTA_REGS} on a wgrad_tma kernel (two or three CTAs an SM)")
        if self.dtype not in DTYPES or self.dw_dtype not in DTYPES:
            raise bad(f"dtypes must be among {', '.join(DTYPES)}")
        if self.family in HELPER_FAMILIES:
            if self.dtype != self.dw_dtype:
                raise bad(f"{self.family} has one dtype: the element dtype")
            if self.block <= 0 or self.block & (self.block - 1):
                raise bad(f"{self.family} block must be a power of two")
            if self.num_warps not in (1, 2, 4, 8, 16):
                raise bad("num_warps is 1, 2, 4, 8 or 16")
            # The label names only dtype, block and num_warps: anything else would change the key
            # but not the label.
            extra = [
                f.name for f in fields(self)
                if f.name not in ("family", "variant", "dtype", "dw_dtype", "block", "num_warps")
                and getattr(self, f.name) != f.default
            ]  # fmt: skip
            if extra:
                raise bad(f"{self.family} takes only a dtype, block and num_warps; {', '.join(extra)} must keep the default")
            return
        if self.family == "dwconv":
            return self._validate_dwconv(bad)
        if self.family == "wgrad_tma":
            return self._validate_tma(bad)
        if self.family == "dwconv_tma":
            return self._validate_dwconv_tma(bad)
        if self.family == "dwconv_walk":
            return self._validate_dwconv_walk(bad)
        if self.block and self.family != "grouped":
            raise bad("only stage2 kernels have a block size")
        if self.family == "grouped" and (self.block < 1 or self.block & (self.block - 1) or self.pointwise):
            raise bad("grouped: block (groups per tile) must be a power of two >= 1, and no pointwise addressing")
        if self.dw_dtype not in (self.dtype, "fp32"):
            raise bad("dW is the input dtype or fp32")
        if self.spatial_dims not in (2, 3):
            raise bad("spatial_dims is 2 or 3")
        if self.variant == "atomic" and self.dw_dtype != "fp32":
            raise bad("the atomic reduction accumulates into dW, which must be fp32")
        for name in ("bm", "bn", "bk"):
            v = getattr(self, name)
            if v < 16 or v & (v - 1):
                raise bad(f"{name} must be a power of two >= 16")
        widest = 16 // DTYPE_BYTES[self.dtype]
        for name in ("vec_c", "vec_k"):
            v = getattr(self, name)
            if v <= 0 or v & (v - 1) or v > widest:
                raise bad(f"{name} must be a power of two <= {widest} (16-byte loads)")
        if self.num_warps not in (1, 2, 4, 8, 16) or self.num_stages < 1:
            raise bad("num_warps is 1, 2, 4, 8 or 16 and num_stages >= 1")
        if self.family == "wgrad_sk":
            if self.mode not in MODES:
                raise bad(f"stream-K mode must be one of {', '.join(MODES)}")
            if self.variant not in SK_REDUCTIONS:
                raise bad(f"stream-K reduction must be one of {', '.join(SK_REDUCTIONS)}")
        else:
            if self.mode:
                raise bad("only wgrad_sk kernels have a stream-K mode")
            if self.variant not in SPLITK_EPILOGUES:
                raise bad(f"split-K epilogue must be one of {', '.join(SPLITK_EPILOGUES)}")
        if (self.dtype == "fp32") != bool(self.precision):
            raise bad("fp32 input needs a precision (ieee or tf32); other dtypes none")
        if self.precision and self.precision not in PRECISIONS:
            raise bad(f"precision must be one of {', '.join(PRECISIONS)}")

    # -- identity ---------------------------------------------------------------------------
    def label_unchecked(self) -> str:
        if self.family in HELPER_FAMILIES:
            return f"{self.family}_{self.dw_dtype}_b{self.block}_w{self.num_warps}"
        if self.family == "dwconv":
            return self._label_dwconv()
        if self.family == "dwconv_walk":
            dt = self.dtype + (f"_dw{self.dw_dtype}" if self.dw_dtype != self.dtype else "")
            return (f"dwconv_walk_{dt}_2d_v{self.vec_c}_f{self.bn}_c{self.bm}p{self.bk}b{self.block}"
                    f"_w{self.num_warps}s{self.num_stages}_{self.variant}")  # fmt: skip
        if self.family == "dwconv_tma":
            dt = self.dtype + (f"_dw{self.dw_dtype}" if self.dw_dtype != self.dtype else "")
            return f"dwconv_tma_{dt}_2d_v{self.vec_c}_c{self.bm}x{self.bn}w{self.bk}_w{self.num_warps}s{self.num_stages}_{self.variant}"
        if self.family == "wgrad_tma":
            dt = self.dtype + (f"_dw{self.dw_dtype}" if self.dw_dtype != self.dtype else "")
            return (f"wgrad_tma_{dt}_{self.spatial_dims}d_v{self.vec_c}v{self.vec_k}_{self.bm}x{self.bn}x{self.bk}_t{self.block}"
                    f"_w{self.num_warps}s{self.num_stages}{f'r{self.max_regs}' if self.max_regs else ''}"
                    f"{'_' + self.mode if self.mode else ''}_{self.variant}")  # fmt: skip
        dt = self.dtype + (self.precision if self.precision else "")
        if self.dw_dtype != self.dtype:
            dt += f"_dw{self.dw_dtype}"
        parts = [
            self.family,
            dt,
            f"{self.spatial_dims}d" + ("pw" if self.pointwise else ""),
            f"v{self.vec_c}v{self.vec_k}",
            f"{self.bm}x{self.bn}x{self.bk}",
            f"w{self.num_warps}s{self.num_stages}",
        ]
        if self.family == "grouped":
            parts.insert(4, f"g{self.block}")
        if self.family == "wgrad_sk":
            parts.append(self.mode.replace("_", ""))
        parts.append(self.variant)
        return "_".join(parts)

    @property
    def label(self) -> str:
        """e.g. ``wgrad_sk_bf16_2d_v8v8_128x128x64_w8s2_dpsk_linear``. Never names pool or ks_count."""
        return self.label_unchecked()

    def to_dict(self) -> dict:
        return asdict(self)

    def canonical_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict) -> "KernelSpec":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise AbiError(f"kernel spec has unknown field(s) {', '.join(sorted(unknown))}")
        return cls(**d)

    # -- launch shapes ----------------------------------------------------------------------
    def flags_per_cta(self, wave_size: int) -> int:
        """Flags one stream-K CTA of this kernel publishes: one per thread for linear/tree (the
        publish protocol of ``skwgrad.aot.kernels.wgrad``: each thread releases its own stores),
        0 for kernels that use no flags. The only place this number is derived."""
        if self.family == "wgrad_sk" and self.variant in ("linear", "tree"):
            return self.num_warps * wave_size
        return 0

    def threads_per_cta(self, wave_size: int) -> int:
        """Threads of one CTA: num_warps waves; the TMA kernels add their producer warp, and
        Triton rounds a warp-specialized CTA up to whole warpgroups (4 warps)."""
        if self.family == "wgrad_tma":
            return -(-(self.num_warps + TMA_PRODUCER_WARPS) // 4) * 4 * wave_size
        return self.num_warps * wave_size

    @property
    def kernarg_decl(self):
        return declaration(self.family, self.variant, self.spatial_dims)

    def check_problem(self, p: ConvProblem) -> None:
        """Refuse a launch shape that differs from what this kernel baked in."""
        if self.family == "stage2":
            if p.dw_dtype != self.dw_dtype:
                raise AbiError(f"{self.label} reduces into {self.dw_dtype}; the problem's dW is {p.dw_dtype}")
            return
        if self.family == "pad":
            raise AbiError(f"{self.label} copies channel-padded buffers (skwgrad.abi.padding); it runs no problem itself")
        if self.family == "dwconv":
            return self._check_problem_dwconv(p)
        if self.family == "wgrad_tma":
            return self._check_problem_tma(p)
        if self.family == "dwconv_tma":
            return self._check_problem_dwconv_tma(p)
        if self.family == "dwconv_walk":
            return self._check_problem_dwconv_walk(p)
        if (p.dtype, p.dw_dtype) != (self.dtype, self.dw_dtype):
            raise AbiError(
                f"{self.label} is built for {self.dtype} input / {self.dw_dtype} dW; "
                f"the problem has {p.dtype} / {p.dw_dtype}"
            )
        if p.precision != self.precision:
            raise AbiError(
                f"{self.label} computes with {self.precision} precision; the problem asks for {p.precision} "
                f"(set precision= on the problem to choose tf32)"
            )
        if p.spatial_dims != self.spatial_dims:
            raise AbiError(f"{self.label} is a {self.spatial_dims}-D kernel; the problem is {p.spatial_dims}-D")
        if self.pointwise and not p.is_pointwise:
            raise AbiError(
                f"{self.label} addresses x as a plain matrix (1x1, stride 1, no padding); "
                f"the problem has a {p.z}x{p.y}x{p.x} filter, stride {p.stride}, padding {p.pad_lo}/{p.pad_hi}"
            )
        if self.family == "grouped":
            return self._check_problem_grouped(p)
        if p.c % self.vec_c:
            raise AbiError(
                f"{self.label} loads x and stores dW {self.vec_c} channels at a time; "
                f"C per group = {p.c} is not a multiple of {self.vec_c}"
            )
        if p.k % self.vec_k:
            raise AbiError(
                f"{self.label} loads dy {self.vec_k} channels at a time; "
                f"K per group = {p.k} is not a multiple of {self.vec_k}"
            )

    # -- depthwise family (``dwconv``) ----------------------------------------------------------
    # Its fields: bm = BC (channels per CTA), bn = TAPS_P2 (filter taps the kernel holds, a power
    # of two >= Z*Y*X), bk = BR (output rows per step), vec_c = vec_k = the channel vector width
    # (G % vec == 0), mode "" or "taps" (the gather's layout, see depthwise.constexprs). Variants:
    # the split-K epilogues direct / atomic / two_stage, and workspace.
    def _validate_dwconv(self, bad):
        if self.block or self.pointwise:
            raise bad("dwconv kernels have no block size or pointwise addressing")
        win, rows, sw, dl = self.dwconv_window
        spelled = re.findall(r"[sd](\d+)", self.mode[3:]) if win else []
        if self.mode not in ("", "taps") and not (
            1 <= win <= 16 and 1 <= rows <= 8 and 1 <= sw <= 4 and 1 <= dl <= 4 and "1" not in spelled
        ):
            raise bad(
                "dwconv mode is '' (taps over the threads), 'taps' (every tap of a row in one thread) "
                "or 'win<BW>[r<TR>][s<SW>][d<DL>]' (strips of BW = 1..16 output columns, TR = 1..8 tap "
                "rows per CTA, stride SW = 2..4 and dilation DL = 2..4 along W, left out for 1; "
                "bn is then the exact filter width)"
            )
        if self.dw_dtype not in (self.dtype, "fp32"):
            raise bad("dW is the input dtype or fp32")
        if self.spatial_dims not in (2, 3):
            raise bad("spatial_dims is 2 or 3")
        if self.variant == "atomic" and self.dw_dtype != "fp32":
            raise bad("the atomic epilogue accumulates into dW, which must be fp32")
        if self.variant == "workspace" and self.dw_dtype == "fp32":
            raise bad("the workspace epilogue is for a dW in the input dtype (fp32 dW: use atomic)")
        widest = 16 // DTYPE_BYTES[self.dtype]
        v = self.vec_c
        if v <= 0 or v & (v - 1) or v > widest or self.vec_k != v:
            raise bad(f"vec_c = vec_k is the channel vector width, a power of two <= {widest} (16-byte loads)")
        for name, lo, hi in (("bm (channels per CTA)", v, 1024), ("bn (taps)", 1, 128), ("bk (rows per step)", 1, 64)):
            x = {"bm": self.bm, "bn": self.bn, "bk": self.bk}[name[:2]]
            if win and name[:2] == "bn":
                if not 1 <= x <= 16:
                    raise bad("win: bn is the filter width X, 1..16")
            elif x < lo or x > hi or x & (x - 1):
                raise bad(f"{name} must be a power of two in [{lo}, {hi}]")
        if self.bk * self.bn * self.bm > 64 * 1024:
            raise bad("bk x bn x bm (the x gather of one step) must be at most 65536 elements")
        if win and sw * (win - 1) + dl * (self.bn - 1) + 1 > 64:
            raise bad("win: the window of a strip (SW * (BW - 1) + DL * (X - 1) + 1 columns) must be at most 64 columns")
        if self.num_warps not in (1, 2, 4, 8, 16) or self.num_stages < 1:
            raise bad("num_warps is 1, 2, 4, 8 or 16 and num_stages >= 1")
        if (self.dtype == "fp32") != (self.precision == "ieee") or (self.dtype != "fp32" and self.precision):
            raise bad("fp32 input takes precision 'ieee' (dwconv accumulates fp32 FMAs); other dtypes none")

    @property
    def dwconv_window(self):
        """``DwWindow(bw, tr, sw, dl)`` of a dwconv ``win<BW>[r<TR>][s<SW>][d<DL>]`` kernel (output
        columns per thread strip, tap rows per CTA, stride and dilation along W), else
        ``NO_WINDOW`` (bw = 0)."""
        from skwgrad.abi.launch import NO_WINDOW, dwconv_window  # the one parser (launch imports no spec)

        return dwconv_window(self.mode) if self.family == "dwconv" else NO_WINDOW

    def _label_dwconv(self) -> str:
        dt = self.dtype + (f"_dw{self.dw_dtype}" if self.dw_dtype != self.dtype else "")
        return (
            f"dwconv_{dt}_{self.spatial_dims}d_v{self.vec_c}_c{self.bm}t{self.bn}r{self.bk}"
            f"_w{self.num_warps}s{self.num_stages}{'_tapsinner' if self.mode == 'taps' else ''}"
            f"{'_' + self.mode if self.dwconv_window[0] else ''}_{self.variant}"
        )

    def _check_problem_dwconv(self, p: ConvProblem) -> None:
        if (p.dtype, p.dw_dtype) != (self.dtype, self.dw_dtype):
            raise AbiError(
                f"{self.label} is built for {self.dtype} input / {self.dw_dtype} dW; "
                f"the problem has {p.dtype} / {p.dw_dtype}"
            )
        # fp32 is computed with fp32 FMAs: at least the precision an ieee or tf32 problem asks for.
        if p.spatial_dims != self.spatial_dims:
            raise AbiError(f"{self.label} is a {self.spatial_dims}-D kernel; the problem is {p.spatial_dims}-D")
        if (p.c, p.k) != (1, 1):
            raise AbiError(
                f"{self.label} is a depthwise kernel (1 input and 1 output channel per group); "
                f"the problem has C = {p.c}, K = {p.k} per group"
            )
        if p.g % self.vec_c:
            raise AbiError(
                f"{self.label} loads {self.vec_c} channels at a time; G = {p.g} channels is not a multiple of {self.vec_c}"
            )
        taps = p.z * p.y * p.x
        win = self.dwconv_window
        if win.bw:
            if p.x != self.bn or p.stride[2] != win.sw or p.dilation[2] != win.dl:
                raise AbiError(
                    f"{self.label} is a window kernel for filters {self.bn} wide at stride {win.sw} and dilation "
                    f"{win.dl} along W; the problem has X = {p.x}, stride_w = {p.stride[2]}, dilation_w = {p.dilation[2]}"
                )
        elif taps > self.bn:
            raise AbiError(f"{self.label} holds {self.bn} filter taps; the problem's {p.z}x{p.y}x{p.x} filter has {taps}")

    # -- packed-group family (``grouped``) -------------------------------------------------------
    # bm/bn/bk: the tile of the packed problem (G/GB groups of GB*C -> GB*K channels); block = GB;
    # vec_c / vec_k: vector widths of GB*C and GB*K. Variants: the split-K epilogues.
    def _check_problem_grouped(self, p: ConvProblem) -> None:
        gb = self.block
        if p.g % gb:
            raise AbiError(f"{self.label} packs {gb} groups per tile; G = {p.g} is not a multiple of {gb}")
        if (gb * p.c) % self.vec_c:
            raise AbiError(
                f"{self.label} loads x {self.vec_c} channels at a time; {gb} groups x C = {p.c} is not a multiple of {self.vec_c}"
            )
        if (gb * p.k) % self.vec_k:
            raise AbiError(
                f"{self.label} loads dy {self.vec_k} channels at a time; {gb} groups x K = {p.k} is not a multiple of {self.vec_k}"
            )

    # -- TMA im2col family (``wgrad_tma``, sm_90) ------------------------------------------------
    # A tile is bm output channels x block filter taps x (bn / block) input channels; bk output
    # positions per step, num_stages shared-memory slots. vec_c = vec_k = 16 bytes of elements:
    # TMA needs 16-byte multiples for every stride, so C and K are multiples of it.
    @property
    def tma_channels(self) -> int:
        """Input channels per tap of a ``wgrad_tma`` tile (its im2col box width)."""
        return self.bn // max(1, self.block)

    def _validate_tma(self, bad):
        if self.dtype not in ("bf16", "fp16"):
            raise bad("wgrad_tma takes 16-bit inputs (bf16, fp16)")
        if self.dw_dtype not in (self.dtype, "fp32"):
            raise bad("dW is the input dtype or fp32")
        if self.variant not in TMA_VARIANTS:
            raise bad(f"wgrad_tma epilogue must be one of {', '.join(TMA_VARIANTS)}")
        if self.variant == "atomic" and self.dw_dtype != "fp32":
            raise bad("the atomic epilogue accumulates into dW, which must be fp32")
        if self.spatial_dims not in (2, 3) or self.pointwise or self.precision:
            raise bad("wgrad_tma is 2-D or 3-D, with no pointwise addressing or precision")
        if self.mode not in TMA_MODES:
            raise bad("wgrad_tma mode is '' (one CTA per work unit), 'persistent' (a pool of CTAs walks the units) "
                      "or 'streamk' (a pool of CTAs walks equal ranges of all tiles' iterations)")
        if self.mode == "streamk" and self.variant == "direct":
            raise bad("stream-K TMA kernels share tiles between CTAs: their epilogue adds (atomic or workspace), never direct")
        widest = 16 // DTYPE_BYTES[self.dtype]
        if (self.vec_c, self.vec_k) != (widest, widest):
            raise bad(f"wgrad_tma loads 16-byte channel vectors: vec_c = vec_k = {widest}")
        if self.block not in (1, 2, 4):
            raise bad("wgrad_tma: block (filter taps per tile) is 1, 2 or 4")
        for name in ("bm", "bn", "bk"):
            v = getattr(self, name)
            if v < 64 or v > 256 or v & (v - 1):
                raise bad(f"{name} must be a power of two in [64, 256] (a wgmma warpgroup tile)")
        if self.tma_channels < 64:
            raise bad("wgrad_tma: bn / block (input channels per tap) must be at least 64")
        if self.num_warps not in (4, 8) or not 2 <= self.num_stages <= 8:
            raise bad("wgrad_tma: num_warps is 4 or 8 (MMA warpgroups), num_stages 2..8")

    def _check_problem_tma(self, p: ConvProblem) -> None:
        from skwgrad.abi.launch import tma_unsupported  # the one list of what TMA im2col cannot run

        if (p.dtype, p.dw_dtype) != (self.dtype, self.dw_dtype):
            raise AbiError(
                f"{self.label} is built for {self.dtype} input / {self.dw_dtype} dW; "
                f"the problem has {p.dtype} / {p.dw_dtype}"
            )
        if p.spatial_dims != self.spatial_dims:
            raise AbiError(f"{self.label} runs {self.spatial_dims}-D problems; the problem is {p.spatial_dims}-D")
        why = tma_unsupported(p)
        if why:
            raise AbiError(f"{self.label}: {why}")

    # -- row-walk depthwise family (``dwconv_walk``) ------------------------------------------------
    # bm = BC channels per CTA, bn = the square filter's size (KY = KX, compile-time: the window of
    # KY - 1 x rows lives in registers), bk = BP strips per CTA, block = BW output columns per strip,
    # vec_c = vec_k = the channels a thread loads at once. A CTA owns BC channels x BP strips (image,
    # column block) and walks down a range of output rows (its split). 2-D, stride and dilation 1.
    def _validate_dwconv_walk(self, bad):
        if self.variant not in DWCONV_WALK_VARIANTS:
            raise bad(f"dwconv_walk epilogue must be one of {', '.join(DWCONV_WALK_VARIANTS)}")
        if (self.variant == "atomic") != (self.dw_dtype == "fp32") or self.dw_dtype not in (self.dtype, "fp32"):
            raise bad("dwconv_walk: atomic adds into an fp32 dW; workspace serves a dW in the input dtype")
        if self.spatial_dims != 2 or self.pointwise or self.mode or self.max_regs:
            raise bad("dwconv_walk is 2-D, with no pointwise addressing, mode or register cap")
        if (self.dtype == "fp32") != (self.precision == "ieee") or (self.dtype != "fp32" and self.precision):
            raise bad("fp32 input takes precision 'ieee' (dwconv_walk accumulates fp32 FMAs); other dtypes none")
        widest = 16 // DTYPE_BYTES[self.dtype]
        v = self.vec_c
        if v <= 0 or v & (v - 1) or v > widest or self.vec_k != v:
            raise bad(f"vec_c = vec_k is the channel vector width, a power of two <= {widest} (16-byte loads)")
        if not 1 <= self.bn <= 7:
            raise bad("dwconv_walk: bn (the square filter's size) is 1..7")
        if not 1 <= self.block <= 8:
            raise bad("dwconv_walk: block (output columns per strip) is 1..8")
        for name, lo, hi in (("bm", v, 256), ("bk", 1, 256)):
            x = getattr(self, name)
            if x < lo or x > hi or x & (x - 1):
                raise bad(f"{name} must be a power of two in [{lo}, {hi}]")
        if self.num_warps not in (1, 2, 4, 8) or self.num_stages < 1:
            raise bad("num_warps is 1, 2, 4 or 8 and num_stages >= 1")

    def _check_problem_dwconv_walk(self, p: ConvProblem) -> None:
        self._check_square_depthwise(p, f"loads {self.vec_c} channels at a time")

    def _check_square_depthwise(self, p: ConvProblem, why_vec: str) -> None:
        """What the 2-D square-filter depthwise families (dwconv_walk, dwconv_tma) bake in: dtypes, a
        bn x bn filter at stride and dilation 1, and G a multiple of the channel vector (``why_vec``)."""
        if (p.dtype, p.dw_dtype) != (self.dtype, self.dw_dtype):
            raise AbiError(
                f"{self.label} is built for {self.dtype} input / {self.dw_dtype} dW; "
                f"the problem has {p.dtype} / {p.dw_dtype}"
            )
        if p.spatial_dims != 2 or (p.c, p.k) != (1, 1):
            raise AbiError(f"{self.label} is a 2-D depthwise kernel; the problem is {p.spatial_dims}-D with C = {p.c}, K = {p.k} per group")
        if (p.y, p.x) != (self.bn, self.bn) or p.stride[1:] != (1, 1) or p.dilation[1:] != (1, 1):
            raise AbiError(
                f"{self.label} is for {self.bn}x{self.bn} filters at stride and dilation 1; the problem has "
                f"{p.y}x{p.x}, stride {p.stride[1:]}, dilation {p.dilation[1:]}"
            )
        if p.g % self.vec_c:
            raise AbiError(f"{self.label} {why_vec}; G = {p.g} channels is not a multiple of {self.vec_c}")

    # -- TMA depthwise family (``dwconv_tma``, sm_90) -----------------------------------------------
    # bm = BC channels per CTA, bn = the filter's width and height (3 or 5, square), bk = WT output
    # columns per step; a step is DWCONV_TMA_X_ROWS - (bn - 1) output rows; num_stages ring slots.
    # vec_c = vec_k = 16 bytes of elements: TMA strides are 16-byte multiples, so G is a multiple.
    def _validate_dwconv_tma(self, bad):
        if self.dtype not in ("bf16", "fp16"):
            raise bad("dwconv_tma takes 16-bit inputs (bf16, fp16)")
        if self.variant not in DWCONV_TMA_VARIANTS:
            raise bad(f"dwconv_tma epilogue must be one of {', '.join(DWCONV_TMA_VARIANTS)}")
        if (self.variant == "atomic") != (self.dw_dtype == "fp32") or self.dw_dtype not in (self.dtype, "fp32"):
            raise bad("dwconv_tma: atomic adds into an fp32 dW; workspace serves a dW in the input dtype")
        if self.spatial_dims != 2 or self.pointwise or self.precision or self.mode or self.block:
            raise bad("dwconv_tma is 2-D, with no pointwise addressing, precision, mode or block")
        widest = 16 // DTYPE_BYTES[self.dtype]
        if (self.vec_c, self.vec_k) != (widest, widest):
            raise bad(f"dwconv_tma loads 16-byte channel vectors: vec_c = vec_k = {widest}")
        if self.bn not in (3, 5):
            raise bad("dwconv_tma: bn (the square filter's width) is 3 or 5")
        for name, lo, hi in (("bm", 16, 128), ("bk", 8, 128)):
            v = getattr(self, name)
            if v < lo or v > hi or v & (v - 1):
                raise bad(f"{name} must be a power of two in [{lo}, {hi}]")
        if self.num_warps not in (4, 8) or not 2 <= self.num_stages <= 4:
            raise bad("dwconv_tma: num_warps is 4 or 8, num_stages 2..4")
        if self.bm * self.bk < 32 * self.num_warps * 4:
            raise bad("dwconv_tma: bm x bk must give every thread at least 4 elements")

    @property
    def tensor_map_boxes(self) -> list[tuple[bool, list[int]]]:
        """(im2col?, box) of each tensor-map parameter, dy's then x's, as the compiler records them
        (Triton may split a box's innermost dimension into narrower loads); [] for other families.
        The one statement of the boxes the build and the cache check."""
        if self.family == "wgrad_tma":
            return [(False, [self.bk, self.bm]), (True, [self.bk, self.tma_channels])]
        if self.family == "dwconv_tma":
            _, dyb, xw = self.dwconv_tma_boxes
            return [(False, [1, dyb, self.bk, self.bm]), (False, [1, DWCONV_TMA_X_ROWS, xw, self.bm])]
        return []

    @property
    def dwconv_tma_boxes(self) -> tuple[int, int, int]:
        """(output rows a step, dy rows a box, x columns a box) of a ``dwconv_tma`` kernel: the x
        box is DWCONV_TMA_X_ROWS rows of the next power of two >= WT + X - 1 columns; the step's
        output rows come in dy boxes of the largest power of two dividing them."""
        bh = DWCONV_TMA_X_ROWS - (self.bn - 1)
        return bh, bh & -bh, 1 << (self.bk + self.bn - 2).bit_length()

    def _check_problem_dwconv_tma(self, p: ConvProblem) -> None:
        self._check_square_depthwise(p, "reads 16-byte channel vectors through TMA (strides are 16-byte multiples)")
