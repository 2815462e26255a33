"""Draw dense convolution layers that are in no file of the project, as a corpus CSV.

    python benchmarks/random_shapes.py --seed 20261201 --n 40 --out benchmarks/shapes/random_S.csv
    python benchmarks/random_shapes.py --kind depthwise --seed 20261201 --n 16 --out benchmarks/shapes/random_dw_S.csv

Layers are drawn the way CNN layers look (not uniformly): channel counts mostly multiples of 16
with a few odd ones, resolution falling as channels grow, 1x1 / 3x3 and a few 5x5 / 7x7 filters,
stride 2 now and then, batch 1-64, and the dtypes a user trains in (bf16 and fp16 under autocast
with fp32 weights, bf16 weights, fp32 with TF32). Held-out evidence for selection: a fit that never
saw these shapes is judged on them. The seed is written in the file name so a set can be redrawn.
``--kind 3d``: 3-D layers of video and volumetric networks (``draw_3d``).
``--kind depthwise``: depthwise and grouped layers (``--kind grouped``: grouped only) the way mobile / modern CNNs have them
(MobileNet / EfficientNet / ConvNeXt / ResNeXt / RegNet stages): 3x3 to 7x7 depthwise at stride 1
or 2, a few dilated, and grouped 3x3 with 4-64 channels per group.
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
from pathlib import Path

HEADER = ["name", "n", "in_channels", "out_channels", "groups", "d", "h", "w", "z", "y", "x",
          "stride", "padding", "dilation", "dtype", "dw_dtype", "precision", "regime"]  # fmt: skip
# (dtype, dW dtype, precision, weight)
DTYPES = [("bf16", "fp32", "", 4), ("bf16", "bf16", "", 2), ("fp16", "fp32", "", 2), ("fp32", "fp32", "tf32", 1)]


def draw(rng: random.Random) -> dict:
    level = rng.randrange(5)  # the stage of the network: channels up, resolution down
    base = (32, 64, 128, 256, 512)[level]
    c = int(base * rng.choice((0.5, 0.75, 1, 1, 1.5, 2, 3)))
    k = int(base * rng.choice((0.5, 1, 1, 2, 4)))
    if rng.random() < 0.12:  # the odd channel counts of pruned or searched networks
        c, k = c + rng.choice((-6, -4, 2, 4, 6, 10)), k + rng.choice((-6, 2, 4, 12))
    h = (112, 56, 28, 14, 7)[level]
    h = max(4, int(h * rng.choice((0.5, 1, 1, 1, 2))))
    f = rng.choices((1, 3, 5, 7), weights=(4, 5, 1, 1))[0]
    stride = 2 if rng.random() < 0.2 else 1
    n = rng.choice((1, 4, 8, 16, 32, 32, 64))
    dtype, dw, prec, _ = rng.choices(DTYPES, weights=[d[3] for d in DTYPES])[0]
    return dict(n=n, in_channels=max(c, 1), out_channels=max(k, 1), groups=1, d=1, h=h, w=h, z=1, y=f, x=f,
                stride=stride, padding=f // 2, dilation=1, dtype=dtype, dw_dtype=dw, precision=prec)  # fmt: skip


def draw_depthwise(rng: random.Random, share_depthwise: float = 0.7, widths: tuple = (4, 8, 16, 32, 64)) -> dict:
    level = rng.randrange(4)
    h = (112, 56, 28, 14)[level]
    h = max(5, h + rng.choice((0, 0, 0, 1, -1)))  # an odd size now and then
    dtype, dw, prec, _ = rng.choices(DTYPES, weights=[d[3] for d in DTYPES])[0]
    n = rng.choice((8, 16, 32, 32, 64))
    if rng.random() < share_depthwise:  # depthwise
        c = int((16, 32, 64, 128)[level] * rng.choice((1, 1.5, 3, 4, 6)))
        c += rng.choice((0, 0, 0, 8, -8))
        f = rng.choices((3, 5, 7), weights=(5, 3, 2))[0]
        stride = 2 if rng.random() < 0.3 else 1
        dil = 2 if stride == 1 and f == 3 and rng.random() < 0.15 else 1
        g, k = c, c
    else:  # grouped: 4-64 channels per group (``widths``)
        cg = rng.choice(widths)
        c = int((64, 128, 256, 512)[level] * rng.choice((1, 1.5, 2)))
        c = max(2 * cg, c // cg * cg)  # at least two groups
        g, k, f, stride, dil = c // cg, c, 3, (2 if rng.random() < 0.2 else 1), 1
    return dict(n=n, in_channels=c, out_channels=k, groups=g, d=1, h=h, w=h, z=1, y=f, x=f, stride=stride,
                padding=dil * (f // 2), dilation=dil, dtype=dtype, dw_dtype=dw, precision=prec)  # fmt: skip


def draw_3d(rng: random.Random) -> dict:
    """A 3-D layer the way video and volumetric networks have them (C3D / I3D / R(2+1)D / SlowFast /
    X3D, 3-D U-Nets): 3x3x3 mostly, spatial 1x3x3, temporal 3x1x1 and 1x1x1 ones, 4-32 frames (or
    a cube of a volume), spatial stride 2 now and then (all three dims on volumes)."""
    level = rng.randrange(4)
    base = (32, 64, 128, 256)[level]
    c = int(base * rng.choice((0.5, 1, 1, 1.5, 2)))
    k = int(base * rng.choice((0.5, 1, 1, 2)))
    if rng.random() < 0.1:
        c, k = c + rng.choice((-8, 8, 16)), k + rng.choice((-8, 8))
    volume = rng.random() < 0.3
    h = (64, 32, 16, 8)[level] if volume else (112, 56, 28, 14)[level]
    d = h if volume else rng.choice((4, 8, 8, 16, 32))
    z, f = rng.choices(((3, 3), (1, 3), (3, 1), (1, 1)), weights=(6, 2, 2, 1))[0]
    s = 2 if rng.random() < 0.2 else 1
    stride = f"{s if volume and z > 1 else 1}x{s}x{s}"
    n = rng.choice((1, 2, 4, 8, 16)) if volume else rng.choice((4, 8, 8, 16, 32))
    dtype, dw, prec, _ = rng.choices(DTYPES, weights=[d_[3] for d_ in DTYPES])[0]
    return dict(n=n, in_channels=max(c, 1), out_channels=max(k, 1), groups=1, d=d, h=h, w=h, z=z, y=f, x=f, stride=stride,
                padding=f"{z // 2}x{f // 2}x{f // 2}", dilation=1, dtype=dtype, dw_dtype=dw, precision=prec)  # fmt: skip


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--out", required=True)
    ap.add_argument("--kind", choices=("dense", "depthwise", "grouped", "3d"), default="dense")
    ap.add_argument("--max-gflop", type=float, default=200.0, help="redraw layers above this (keeps a run short)")
    ap.add_argument("--min-gflop", type=float, default=0.0, help="redraw layers below this (a set of large layers)")
    ap.add_argument("--min-plane", type=int, default=0, help="redraw layers whose output plane (Ho x Wo) has fewer pixels")
    ap.add_argument("--max-plane", type=int, default=0, help="redraw layers whose output plane has more pixels (0: no limit)")
    ap.add_argument("--max-channels", type=int, default=0, help="redraw layers with more input or output channels (0: no limit)")
    ap.add_argument("--min-channels", type=int, default=0, help="redraw layers with fewer input channels")
    ap.add_argument("--filter", type=int, default=0, help="redraw layers whose filter is not this wide (0: any)")
    ap.add_argument("--stride", type=int, default=0, help="redraw layers of another stride (0: any)")
    ap.add_argument("--group-widths", default="4,8,16,32,64", help="grouped layers: channels per group drawn from this comma list")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from skwgrad.abi.conv import read_corpus

    rng = random.Random(args.seed)
    rows, seen = [], set()
    while len(rows) < args.n:
        if args.kind == "3d":
            r = draw_3d(rng)
        else:
            widths = tuple(int(v) for v in args.group_widths.split(","))
            r = draw(rng) if args.kind == "dense" else draw_depthwise(rng, 0.7 if args.kind == "depthwise" else 0.0, widths)
        sd, sh, _ = (int(v) for v in str(r["stride"]).split("x")) if "x" in str(r["stride"]) else (1, r["stride"], r["stride"])
        flop = 2 * r["n"] * r["in_channels"] * r["out_channels"] // r["groups"] * r["z"] * r["y"] * r["x"] * (r["h"] // sh) ** 2 * (r["d"] // sd)
        key = tuple(r.values())
        plane = (r["h"] // sh) ** 2
        if (not args.min_gflop <= flop / 1e9 <= args.max_gflop or plane < args.min_plane or key in seen
                or (args.max_plane and plane > args.max_plane)
                or (args.max_channels and max(r["in_channels"], r["out_channels"]) > args.max_channels)
                or r["in_channels"] < args.min_channels or (args.filter and r["x"] != args.filter)
                or (args.stride and sh != args.stride)):  # fmt: skip
            continue
        seen.add(key)
        kind = "" if r["groups"] == 1 else ("dw_" if r["groups"] == r["in_channels"] else f"g{r['groups']}_")
        dil = f"d{r['dilation']}" if r["dilation"] > 1 else ""
        filt = f"{r['z']}x{r['y']}x{r['x']}" if args.kind == "3d" else f"{r['y']}x{r['x']}"
        size = f"{r['d']}x{r['h']}" if args.kind == "3d" else f"{r['h']}"
        name = (f"rand{kind}{len(rows):02d}_{filt}s{str(r['stride']).split('x')[-1]}{dil}_{r['in_channels']}to{r['out_channels']}_{size}"
                f"_n{r['n']}_{r['dtype']}{'_dwfp32' if r['dw_dtype'] == 'fp32' and r['dtype'] != 'fp32' else ''}")
        rows.append({"name": name, **r, "regime": {"dense": "random", "3d": "random_3d"}.get(args.kind, "random_depthwise")})
    out = Path(args.out)
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=HEADER)
        w.writeheader()
        w.writerows(rows)
    print(f"{len(read_corpus(out))} shapes -> {out}")  # parsed back: the file is a valid corpus


if __name__ == "__main__":
    main()
