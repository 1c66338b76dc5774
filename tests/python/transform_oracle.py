"""Stoker's transform ops against torchvision on PIL images, op by op.

For every op, with fixed parameters (p=1 or p=0, degenerate ranges such as
brightness=[1.3, 1.3]), `stoker augment` and a reference transform the same
lossless PNG, and the two outputs must agree within the op's bound (the
BOUNDS table below).

The reference (--oracle):
  pil          torchvision's PIL path reproduced with PIL and numpy, line for
               line from torchvision 0.29 (transforms/_functional_pil.py,
               transforms/v2/functional/*, transforms/v2/_auto_augment.py).
               Needs only pillow and numpy: this is what CI runs.
  torchvision  torchvision itself: each op is torchvision.transforms.v2.<Class>
               built from the spec's own arguments and applied to the PIL image.
  self-check   no Stoker: both references on every case; they must agree
               bit for bit (GaussianBlur within 1, see BOUNDS). Needs torch.

Ops that draw something a degenerate range cannot fix (RandomCrop's offset,
RandomAffine's translation, RandomErasing's box, ColorJitter's order, the
policies' choices, RandomApply/RandomChoice/RandomOrder) are checked against
every outcome torchvision could produce: Stoker's output must be within the
bound of one of them ("best of N" in the report).

The policies (AutoAugment, RandAugment, TrivialAugmentWide, TimmRandAugment)
and RandomErasing are also checked for determinism (the same seed and
position give the same pixels) and for how often they change the image over
many positions.

usage: transform_oracle.py [--oracle pil|torchvision|self-check] [--only REGEX]
                           [STOKER_BIN] WORK_DIR
Prints one line per case, the worst max/mean per op, and ends with
`transform oracle: N cases, all within bounds` (exit 0), or lists the cases
outside their bounds (exit 1).

  CI (tests/integration/transforms.rs):
    target/pyenv/bin/python tests/python/transform_oracle.py target/release/stoker /tmp/oracle
  Against torchvision (the GPU machine, or any with torch and torchvision):
    python3 tests/python/transform_oracle.py --oracle torchvision .carry/stoker /tmp/oracle
  The PIL reference against torchvision, without Stoker:
    python3 tests/python/transform_oracle.py --oracle self-check /tmp/oracle

The test images are procedural PNGs (odd, tiny and larger sizes), plus a
240x180 crop of the first photo in $STOKER_PHOTOS or ../shared/photos when
there is one.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
from PIL import Image, ImageEnhance, ImageOps

# ---------------------------------------------------------------------------
# Bounds. A case passes when its max abs diff <= max and its mean abs diff
# (over every value of every pixel) <= mean. Keys are the op under test, with
# the interpolation for ops that resample.
# ---------------------------------------------------------------------------


# The mean is a fraction of the values: on an output of a few pixels one
# rounding difference is a large mean, so the mean bound applies only to
# outputs of at least this many pixels (the max bound always does).
MEAN_MIN_PIXELS = 1024


@dataclass(frozen=True)
class Bound:
    max: int
    mean: float

    def ok(self, mx: int, mean: float, pixels: int) -> bool:
        return mx <= self.max and (mean <= self.mean or pixels < MEAN_MIN_PIXELS)

    def __str__(self) -> str:
        return "exact" if self.max == 0 else f"max<={self.max} mean<={self.mean:g}"


EXACT = Bound(0, 0.0)

# Resampling (Stoker's Resize and RandomResizedCrop). Bilinear, the
# default, runs fast_image_resize: Pillow's filter and support, its own
# fixed-point precision and the vertical pass first, so a few values round
# the other way (measured: max 1, mean under 0.2). The other filters port
# Pillow's ImagingResample step for step (22-bit coefficients, horizontal
# pass first, rows rounded to 8 bits): exact against Pillow up to 12.
# Pillow 13 runs the vertical pass first for some reductions (a strong
# vertical reduction with little horizontal one, e.g. 257x193 -> 200x64),
# which moves values by up to 1 (box, hamming) and up to 9 (bicubic,
# lanczos: negative lobes amplify the intermediate's rounding) at a mean
# under 0.3; measured against Pillow 13.0.0.
RESAMPLE = Bound(1, 0.2)
RESAMPLE_LOBED = Bound(10, 0.3)

BOUNDS: dict[str, Bound] = {
    # Pure pixel moves and table lookups: PIL's results are integers computed
    # without rounding choices, so there is nothing to differ by.
    "RandomHorizontalFlip": EXACT,
    "RandomVerticalFlip": EXACT,
    "RandomInvert": EXACT,
    "RandomPosterize": EXACT,
    "RandomSolarize": EXACT,
    "Grayscale": EXACT,
    "RandomGrayscale": EXACT,
    "RandomEqualize": EXACT,
    "RandomAutocontrast": EXACT,
    "Pad": EXACT,
    "CenterCrop": EXACT,
    "RandomCrop": EXACT,
    "RandomErasing": EXACT,
    "Compose": EXACT,
    "RandomApply": EXACT,
    "RandomChoice": EXACT,
    "RandomOrder": EXACT,
    # Nearest warps: PIL's affine transform walks the output in 16.16 fixed
    # point (Geometry.c, affine_fixed; a pure scale through ImagingScaleAffine),
    # which Stoker reproduces; the matrix is torchvision's, in f64 on both sides.
    "RandomRotation/nearest": EXACT,
    "RandomAffine/nearest": EXACT,
    # Interpolating warps: PIL's bilinear/bicubic transform filters, in
    # doubles, truncated to 8 bits; Stoker ports them operation for operation.
    "RandomRotation/bilinear": EXACT,
    "RandomRotation/bicubic": EXACT,
    "RandomAffine/bilinear": EXACT,
    "RandomAffine/bicubic": EXACT,
    # Nearest resize is PIL's ImagingScaleAffine (above); the others resample.
    "Resize/nearest": EXACT,
    "Resize/bilinear": RESAMPLE,
    # Resizes to a drawn size (one-value ranges here) and a right/bottom pad.
    "ScaleJitter": RESAMPLE,
    "RandomShortestSize": RESAMPLE,
    "FixedSizeCrop": EXACT,
    "Resize/hamming": RESAMPLE,
    "Resize/box": RESAMPLE,
    "Resize/bicubic": RESAMPLE_LOBED,
    "Resize/lanczos": RESAMPLE_LOBED,
    "RandomResizedCrop/nearest": EXACT,
    "RandomResizedCrop/bilinear": RESAMPLE,
    "RandomResizedCrop/bicubic": RESAMPLE_LOBED,
    # ImageEnhance blends (float32, truncated), PIL's L conversion (fixed
    # point), its HSV round trip (float32 with C's double promotions) and
    # numpy's uint8 hue wrap: all integer-exact when ported.
    "ColorJitter": EXACT,
    "RandomPhotometricDistort": EXACT,
    "RandomChannelPermutation": EXACT,
    "RandomAdjustSharpness": EXACT,
    # torchvision blurs a float32 tensor (conv2d, then round half to even);
    # the summation order of a float32 convolution is the library's own, so
    # a value within ~1e-5 of .5 can round either way: 1 at most, rarely
    # (measured: 1 value in ~100k on photos; torch's own CPU and GPU
    # convolutions differ the same way).
    "GaussianBlur": Bound(1, 0.001),
    # The policies apply the sub-ops above (warps, enhance, lookups) with
    # torchvision's magnitudes (torch.linspace in float32), so each output is
    # exactly one of the outcomes torchvision can draw.
    "AutoAugment": EXACT,
    "RandAugment": EXACT,
    "TrivialAugmentWide": EXACT,
}
# Determinism / rate checks: how often a random op must change the image
# over RATE_POSITIONS positions, [lo, hi] (wide: binomial noise over 32 draws,
# and the identity outcomes each policy can draw, noted per entry).
RATE_POSITIONS = 32
RATES: dict[str, tuple[float, float]] = {
    # P(unchanged) = (1/14)^2 for Identity twice, plus small magnitudes.
    "RandAugment": (0.8, 1.0),
    # 1/14 Identity, and bin 0 of the 31 is the identity for most ops.
    "TrivialAugmentWide": (0.7, 1.0),
    # Each sub-policy's two ops are applied with their probabilities
    # (0.0-1.0); about 1 in 8 samples applies neither, some draws are
    # no-ops (Color at bin 0).
    "AutoAugment": (0.5, 1.0),
    # timm's ops each apply with p=0.5: about 1/4 of samples keep the image.
    "TimmRandAugment": (0.45, 0.97),
    # p=0.5.
    "RandomErasing": (0.2, 0.8),
}

# ---------------------------------------------------------------------------
# Test images.
# ---------------------------------------------------------------------------


def synth(w: int, h: int, seed: int) -> np.ndarray:
    """A photo-like RGB image: smooth gradients, fine texture and noise,
    saturated flat regions with sharp edges, thin lines."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    fx = x / max(w - 1, 1)
    fy = y / max(h - 1, 1)
    r = 30 + 200 * fx + 20 * np.sin(6.0 * fy)
    g = 20 + 210 * fy * (1 - 0.4 * fx)
    b = 128 + 110 * np.sin(2 * math.pi * (1.5 * fx + fy))
    img = np.stack([r, g, b], -1)
    texture = 14 * np.sin(0.9 * x + 0.3 * y) * np.cos(1.3 * y) + rng.normal(0, 5, (h, w))
    img += texture[..., None]
    # Saturated rectangle, dark disc, white diagonal, black vertical line.
    img[int(h * 0.15) : int(h * 0.45) + 1, int(w * 0.55) : int(w * 0.85) + 1] = (250, 20, 35)
    disc = (x - w * 0.3) ** 2 + (y - h * 0.65) ** 2 <= (0.18 * min(w, h)) ** 2
    img[disc] = (10, 40, 200)
    img[np.abs(x - y * w / max(h, 1)) < 1.0] = (255, 255, 255)
    img[:, int(w * 0.7) : int(w * 0.7) + 1] = (0, 0, 0)
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


def low_contrast(w: int, h: int, seed: int) -> np.ndarray:
    """Values in a narrow band per channel (what autocontrast and equalize
    stretch), with a few outliers at the ends of that band."""
    a = synth(w, h, seed).astype(np.float64)
    lo = np.array([90.0, 60.0, 120.0])
    return np.round(lo + a * (50.0 / 255.0)).astype(np.uint8)


def make_images(work: str, repo: str) -> dict[str, str]:
    """name -> PNG path."""
    out = {}

    def save(name: str, arr: np.ndarray) -> None:
        path = os.path.join(work, f"{name}.png")
        Image.fromarray(arr, "RGB").save(path)
        out[name] = path

    save("synth257x193", synth(257, 193, 1))
    save("synth64", synth(64, 64, 2))
    save("synth48", synth(48, 48, 3))
    save("synth31x40", synth(31, 40, 4))
    save("tiny1x1", synth(1, 1, 5))
    save("tiny2x3", synth(2, 3, 6))
    save("tiny5x7", synth(5, 7, 7))
    save("lowc40x30", low_contrast(40, 30, 8))
    photos = os.environ.get("STOKER_PHOTOS") or os.path.join(repo, "..", "shared", "photos")
    if os.path.isdir(photos):
        jpgs = sorted(f for f in os.listdir(photos) if f.lower().endswith(".jpg"))
        if jpgs:
            with Image.open(os.path.join(photos, jpgs[0])) as im:
                im = im.convert("RGB")
                w, h = im.size
                cw, ch = min(w, 240), min(h, 180)
                left, top = (w - cw) // 2, (h - ch) // 2
                save("photo", np.asarray(im.crop((left, top, left + cw, top + ch))))
    return out


def load(path: str) -> Image.Image:
    with Image.open(path) as im:
        return im.convert("RGB")


# ---------------------------------------------------------------------------
# Helpers both references share: torchvision's argument parsing and its
# random draws with degenerate ranges (torch draws float32).
# ---------------------------------------------------------------------------


class Unsupported(Exception):
    """An op the reference cannot predict (a non-degenerate range)."""


def f32(v: float) -> float:
    return float(np.float32(v))


def point(lo: float, hi: float, what: str) -> float:
    if lo != hi:
        raise Unsupported(f"{what} [{lo}, {hi}] is not degenerate")
    return lo


def angle_range(v: Any) -> tuple[float, float]:
    """torchvision's _setup_angle: a number d is [-d, d]."""
    if isinstance(v, (int, float)):
        return (-float(v), float(v))
    return (float(v[0]), float(v[1]))


def hw(size: Any) -> tuple[int, int]:
    """A crop size as (h, w)."""
    if isinstance(size, int):
        return size, size
    if len(size) == 1:
        return size[0], size[0]
    return size[0], size[1]


def parse_pad_padding(padding: Any) -> list[int]:
    """torchvision's _parse_pad_padding: [left, right, top, bottom]."""
    if isinstance(padding, int):
        return [padding] * 4
    if len(padding) == 1:
        return [padding[0]] * 4
    if len(padding) == 2:
        return [padding[0], padding[0], padding[1], padding[1]]
    return [padding[0], padding[2], padding[1], padding[3]]


def randomcrop_geometry(op: dict, w: int, h: int) -> tuple[list[int], int, int, int, int]:
    """RandomCrop.make_params without the draw: (padding ltrb, slack h, slack w,
    crop h, crop w)."""
    ch, cw = hw(op["size"])
    padding = op["padding"]
    parsed = parse_pad_padding(padding) if padding else None
    ph, pw = h, w
    if parsed is not None:
        pl, pr, pt, pb = parsed
        ph += pt + pb
        pw += pl + pr
    else:
        pl = pr = pt = pb = 0
    if op["pad_if_needed"]:
        if ph < ch:
            d = ch - ph
            pt, pb, ph = pt + d, pb + d, ph + 2 * d
        if pw < cw:
            d = cw - pw
            pl, pr, pw = pl + d, pr + d, pw + 2 * d
    if ph < ch or pw < cw:
        raise ValueError(f"crop {ch}x{cw} larger than padded image {ph}x{pw}")
    return [pl, pt, pr, pb], ph - ch, pw - cw, ch, cw


def box_trial(area: float, scale: Any, ratio: Any, what: str) -> tuple[int, int]:
    """The (w, h) of a RandomResizedCrop/RandomErasing draw with degenerate
    scale and ratio (torch draws float32; log and exp of the ratio in
    float32 too)."""
    s = f32(point(float(scale[0]), float(scale[1]), f"{what} scale"))
    lr0 = f32(math.log(f32(ratio[0])))
    lr1 = f32(math.log(f32(ratio[1])))
    aspect = f32(math.exp(f32(point(lr0, lr1, f"{what} ratio"))))
    target = area * s
    return int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))


def rrc_box(op: dict, w: int, h: int) -> tuple[Optional[tuple[int, int]], tuple[int, int, int, int]]:
    """RandomResizedCrop.make_params with degenerate ranges: ((cw, ch), None)
    when a crop of that size at any position is drawn, else the fallback
    centre box (top, left, h, w)."""
    scale = op["scale"]
    ratio = op["ratio"]
    cw, ch = box_trial(float(w * h), scale, ratio, "RandomResizedCrop")
    if 0 < cw <= w and 0 < ch <= h:
        return (cw, ch), (0, 0, 0, 0)
    in_ratio = float(w) / float(h)
    if in_ratio < min(ratio):
        bw = w
        bh = int(round(bw / min(ratio)))
    elif in_ratio > max(ratio):
        bh = h
        bw = int(round(bh * max(ratio)))
    else:
        bw, bh = w, h
    return None, ((h - bh) // 2, (w - bw) // 2, bh, bw)


def erasing_box(op: dict, w: int, h: int) -> Optional[tuple[int, int]]:
    """RandomErasing's (h, w) with degenerate ranges; None: nothing erased."""
    eh, ew = box_trial(float(w * h), op["scale"], op["ratio"], "RandomErasing")
    # box_trial returns (sqrt(area*aspect), sqrt(area/aspect)); RandomErasing
    # calls the first h.
    if not (eh < h and ew < w):
        return None
    return eh, ew


def affine_translations(op: dict, w: int, h: int) -> list[tuple[int, int]]:
    """Every translation RandomAffine can draw: int(round(uniform(-d, d)))."""
    t = op["translate"]
    if t is None:
        return [(0, 0)]
    dx, dy = float(t[0] * w), float(t[1] * h)
    xs = [v for v in range(-math.ceil(dx) - 1, math.ceil(dx) + 2) if abs(v) <= dx + 0.5]
    ys = [v for v in range(-math.ceil(dy) - 1, math.ceil(dy) + 2) if abs(v) <= dy + 0.5]
    return [(x, y) for y in ys for x in xs]


def affine_fixed(op: dict) -> tuple[float, float, list[float]]:
    """RandomAffine's angle, scale and shear for degenerate ranges."""
    angle = f32(point(*angle_range(op["degrees"]), "degrees"))
    sc = op["scale"]
    scale = f32(point(float(sc[0]), float(sc[1]), "scale")) if sc is not None else 1.0
    shear = [0.0, 0.0]
    sh = op["shear"]
    if sh is not None:
        r = angle_range(sh) if isinstance(sh, (int, float)) else [float(v) for v in sh]
        shear[0] = f32(point(r[0], r[1], "shear x"))
        if len(r) == 4:
            shear[1] = f32(point(r[2], r[3], "shear y"))
    return angle, scale, shear


def jitter_range(v: Any, center: float, clip: bool) -> Optional[tuple[float, float]]:
    """ColorJitter._check_input."""
    if v is None:
        return None
    if isinstance(v, (int, float)):
        r = [center - v, center + v]
        if clip:
            r[0] = max(r[0], 0.0)
    else:
        r = [float(v[0]), float(v[1])]
    return None if r[0] == r[1] == center else (float(r[0]), float(r[1]))


def jitter_factors(op: dict) -> list[Optional[float]]:
    """[brightness, contrast, saturation, hue], None where not set."""
    ranges = [
        jitter_range(op["brightness"], 1.0, True),
        jitter_range(op["contrast"], 1.0, True),
        jitter_range(op["saturation"], 1.0, True),
        jitter_range(op["hue"], 0.0, False),
    ]
    return [None if r is None else f32(point(r[0], r[1], "ColorJitter factor")) for r in ranges]


def torch_linspace_f32(start: float, end: float, n: int) -> list[float]:
    """torch.linspace(start, end, n) in float32, as its CPU kernel computes it
    where the kernel takes its scalar path (AVX512 builds for n < 32, any
    build for n < 16): the first half `start + step * i`, the second half
    `end - step * (n - 1 - i)`, each a fused multiply-add (one rounding; the
    kernel is compiled with FMA contraction). Computed here in float64, where
    the product and the sum are exact, then rounded once.

    AVX2 builds take a vector path for the first 16 values of n >= 16 (base
    + j * step), which differs from this by one ulp at a few bins; that is
    torch's own machine dependence."""
    s, e = np.float32(start), np.float32(end)
    if n == 1:
        return [float(s)]
    step = float(np.float32((e - s) / np.float32(n - 1)))
    s, e = float(s), float(e)
    out = []
    for i in range(n):
        if i < n // 2:
            out.append(float(np.float32(s + step * i)))
        else:
            out.append(float(np.float32(e - step * (n - 1 - i))))
    return out


def posterize_bins(n: int, div: float) -> list[int]:
    """(8 - (torch.arange(n) / ((n - 1) / div))).round().int()."""
    x = np.arange(n, dtype=np.float32) / np.float32((n - 1) / div)
    return [int(v) for v in np.round(np.float32(8) - x)]


def policy_space(name: str) -> dict[str, tuple[Callable[[int, int, int], Optional[list[float]]], bool]]:
    """The policies' _AUGMENTATION_SPACE, in torchvision's order."""
    wide = name == "TrivialAugmentWide"
    shear = 0.99 if wide else 0.3
    enh = 0.99 if wide else 0.9
    space: dict[str, tuple[Callable, bool]] = {}
    if name != "AutoAugment":
        space["Identity"] = (lambda n, h, w: None, False)
    space["ShearX"] = (lambda n, h, w: torch_linspace_f32(0.0, shear, n), True)
    space["ShearY"] = (lambda n, h, w: torch_linspace_f32(0.0, shear, n), True)
    if wide:
        space["TranslateX"] = (lambda n, h, w: torch_linspace_f32(0.0, 32.0, n), True)
        space["TranslateY"] = (lambda n, h, w: torch_linspace_f32(0.0, 32.0, n), True)
        space["Rotate"] = (lambda n, h, w: torch_linspace_f32(0.0, 135.0, n), True)
    else:
        space["TranslateX"] = (lambda n, h, w: torch_linspace_f32(0.0, 150.0 / 331.0 * w, n), True)
        space["TranslateY"] = (lambda n, h, w: torch_linspace_f32(0.0, 150.0 / 331.0 * h, n), True)
        space["Rotate"] = (lambda n, h, w: torch_linspace_f32(0.0, 30.0, n), True)
    for k in ("Brightness", "Color", "Contrast", "Sharpness"):
        space[k] = (lambda n, h, w: torch_linspace_f32(0.0, enh, n), True)
    space["Posterize"] = (lambda n, h, w: [float(b) for b in posterize_bins(n, 6.0 if wide else 4.0)], False)
    space["Solarize"] = (lambda n, h, w: torch_linspace_f32(1.0, 0.0, n), False)
    space["AutoContrast"] = (lambda n, h, w: None, False)
    space["Equalize"] = (lambda n, h, w: None, False)
    if name == "AutoAugment":
        space["Invert"] = (lambda n, h, w: None, False)
    return space


IMAGENET_POLICY = [
    (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, None)),
    (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)),
    (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)),
    (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
    (("Equalize", 0.0, None), ("Equalize", 0.8, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)),
    (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, None)),
    (("Color", 0.4, 0), ("Equalize", 0.6, None)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
]


def signed_magnitudes(space: dict, tid: str, n: int, idx: Optional[int], h: int, w: int) -> list[float]:
    """The magnitudes a policy can apply op `tid` with: bin `idx` (None: any
    bin), both signs where the op is signed; [0.0] for ops without one."""
    fn, signed = space[tid]
    mags = fn(n, h, w)
    if mags is None:
        return [0.0]
    chosen = mags if idx is None else [mags[idx]]
    out = []
    for m in chosen:
        m = float(m)
        out.append(m)
        if signed:
            out.append(-m)
    return out


# ---------------------------------------------------------------------------
# The PIL reference: torchvision's PIL kernels.
# ---------------------------------------------------------------------------

PIL_FILTERS = {
    "nearest": Image.NEAREST,
    "nearest-exact": Image.NEAREST,
    "bilinear": Image.BILINEAR,
    "bicubic": Image.BICUBIC,
    "box": Image.BOX,
    "hamming": Image.HAMMING,
    "lanczos": Image.LANCZOS,
}


def parse_fill(fill: Any, img: Image.Image) -> Any:
    """_functional_pil._parse_fill for an RGB image."""
    if fill is None:
        fill = 0
    if isinstance(fill, (int, float)):
        fill = [fill] * 3
    if len(fill) == 1:
        fill = list(fill) * 3
    return tuple(int(x) for x in fill)


def pil_pad(img: Image.Image, padding: Any, fill: Any = 0, mode: str = "constant") -> Image.Image:
    """_functional_pil.pad."""
    if isinstance(padding, list):
        padding = tuple(padding)
    if isinstance(padding, tuple) and len(padding) == 1:
        padding = padding[0]
    if mode == "constant":
        return ImageOps.expand(img, border=padding, fill=parse_fill(fill, img))
    if isinstance(padding, int):
        l = t = r = b = padding
    elif len(padding) == 2:
        l = r = padding[0]
        t = b = padding[1]
    else:
        l, t, r, b = padding
    arr = np.asarray(img)
    arr = np.pad(arr, ((t, b), (l, r), (0, 0)), mode)
    return Image.fromarray(arr)


def pil_crop(img: Image.Image, top: int, left: int, height: int, width: int) -> Image.Image:
    return img.crop((left, top, left + width, top + height))


def pil_center_crop(img: Image.Image, size: Any) -> Image.Image:
    """_center_crop_image_pil."""
    ch, cw = hw(size)
    w, h = img.size
    if ch > h or cw > w:
        pad = [
            (cw - w) // 2 if cw > w else 0,
            (ch - h) // 2 if ch > h else 0,
            (cw - w + 1) // 2 if cw > w else 0,
            (ch - h + 1) // 2 if ch > h else 0,
        ]
        img = pil_pad(img, pad, fill=0)
        w, h = img.size
        if (cw, ch) == (w, h):
            return img
    top = int(round((h - ch) / 2.0))
    left = int(round((w - cw) / 2.0))
    return pil_crop(img, top, left, ch, cw)


def resized_output_size(h: int, w: int, size: Any, max_size: Optional[int]) -> tuple[int, int]:
    """torchvision's _compute_resized_output_size: (new_h, new_w)."""
    if isinstance(size, int):
        size = [size]
    short, long = (w, h) if w <= h else (h, w)
    if size is None:
        new_short, new_long = int(max_size * short / long), max_size
        new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    elif len(size) == 1:
        req = size[0]
        new_short, new_long = req, int(req * long / short)
        if max_size is not None and new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), max_size
        new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    else:
        new_w, new_h = size[1], size[0]
    return new_h, new_w


def pil_resize(img: Image.Image, size: Any, interpolation: str, max_size: Optional[int] = None) -> Image.Image:
    """_resize_image_pil."""
    w, h = img.size
    nh, nw = resized_output_size(h, w, size, max_size)
    if (nh, nw) == (h, w):
        return img
    return img.resize((nw, nh), resample=PIL_FILTERS[interpolation])


def inverse_affine_matrix(center, angle, translate, scale, shear) -> list[float]:
    """torchvision's _get_inverse_affine_matrix (inverted=True)."""
    rot = math.radians(angle)
    sx = math.radians(shear[0])
    sy = math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    cos_sy = math.cos(sy)
    tan_sx = math.tan(sx)
    rot_minus_sy = rot - sy
    cx_plus_tx = cx + tx
    cy_plus_ty = cy + ty
    a = math.cos(rot_minus_sy) / cos_sy
    b = -(a * tan_sx + math.sin(rot))
    c = math.sin(rot_minus_sy) / cos_sy
    d = math.cos(rot) - c * tan_sx
    m = [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0]
    m[2] += cx - m[0] * cx_plus_tx - m[1] * cy_plus_ty
    m[5] += cy - m[3] * cx_plus_tx - m[4] * cy_plus_ty
    return m


def pil_affine(img, angle, translate, scale, shear, interpolation, fill, center) -> Image.Image:
    """_affine_image_pil."""
    if center is None:
        w, h = img.size
        center = [w * 0.5, h * 0.5]
    else:
        center = [float(c) for c in center]
    matrix = inverse_affine_matrix(center, float(angle), [float(t) for t in translate], scale, shear)
    return img.transform(img.size, Image.AFFINE, matrix, PIL_FILTERS[interpolation], fillcolor=parse_fill(fill, img))


def pil_rotate(img, angle, interpolation="nearest", expand=False, center=None, fill=None) -> Image.Image:
    """_functional_pil.rotate."""
    return img.rotate(angle, PIL_FILTERS[interpolation], expand, center, fillcolor=parse_fill(fill, img))


def pil_permute(img: Image.Image, perm: tuple[int, ...]) -> Image.Image:
    """torchvision's permute_channels: output channel i is input channel perm[i]."""
    bands = img.split()
    return Image.merge("RGB", [bands[i] for i in perm])


def pil_grayscale3(img: Image.Image) -> Image.Image:
    """_functional_pil.to_grayscale(img, 3)."""
    g = np.array(img.convert("L"), dtype=np.uint8)
    return Image.fromarray(np.dstack([g, g, g]))


def pil_adjust_hue(img: Image.Image, hue_factor: float) -> Image.Image:
    """_functional_pil.adjust_hue."""
    h, s, v = img.convert("HSV").split()
    np_h = np.array(h, dtype=np.uint8)
    np_h += np.int32(hue_factor * 255).astype(np.uint8)
    h = Image.fromarray(np_h)
    return Image.merge("HSV", (h, s, v)).convert("RGB")


def gaussian_kernel1d(k: int, sigma: float) -> np.ndarray:
    """_get_gaussian_kernel1d in float32."""
    half = (k - 1) * 0.5
    x = np.array(torch_linspace_f32(-half, half, k), dtype=np.float32)
    pdf = np.exp(np.float32(-0.5) * (x / np.float32(sigma)) ** 2, dtype=np.float32)
    return (pdf / pdf.sum(dtype=np.float32)).astype(np.float32)


def pil_gaussian_blur(img: Image.Image, kernel_size: tuple[int, int], sigma: float) -> Image.Image:
    """gaussian_blur_image on the image as a uint8 tensor: reflect padding,
    a float32 2-D kernel (outer product of the 1-D ones), round half to
    even. Accumulated here in float64."""
    kx = gaussian_kernel1d(kernel_size[0], sigma)
    ky = gaussian_kernel1d(kernel_size[1], sigma)
    k2 = (ky[:, None] * kx[None, :]).astype(np.float32).astype(np.float64)
    px, py = kernel_size[0] // 2, kernel_size[1] // 2
    a = np.asarray(img).astype(np.float64)
    h, w = a.shape[:2]
    if py >= h or px >= w:
        raise ValueError("reflect padding larger than the image (torch refuses it)")
    a = np.pad(a, ((py, py), (px, px), (0, 0)), mode="reflect")
    out = np.zeros((h, w, 3))
    for dy in range(k2.shape[0]):
        for dx in range(k2.shape[1]):
            out += k2[dy, dx] * a[dy : dy + h, dx : dx + w]
    return Image.fromarray(np.round(out).astype(np.uint8))


def pil_policy_apply(img: Image.Image, tid: str, mag: float, interpolation: str, fill: Any) -> Image.Image:
    """_AutoAugmentBase._apply_image_or_video_transform on a PIL image."""
    if tid == "Identity":
        return img
    if tid == "ShearX":
        return pil_affine(img, 0.0, [0, 0], 1.0, [math.degrees(math.atan(mag)), 0.0], interpolation, fill, [0, 0])
    if tid == "ShearY":
        return pil_affine(img, 0.0, [0, 0], 1.0, [0.0, math.degrees(math.atan(mag))], interpolation, fill, [0, 0])
    if tid == "TranslateX":
        return pil_affine(img, 0.0, [int(mag), 0], 1.0, [0.0, 0.0], interpolation, fill, None)
    if tid == "TranslateY":
        return pil_affine(img, 0.0, [0, int(mag)], 1.0, [0.0, 0.0], interpolation, fill, None)
    if tid == "Rotate":
        return pil_rotate(img, mag, interpolation, False, None, fill)
    if tid == "Brightness":
        return ImageEnhance.Brightness(img).enhance(1.0 + mag)
    if tid == "Color":
        return ImageEnhance.Color(img).enhance(1.0 + mag)
    if tid == "Contrast":
        return ImageEnhance.Contrast(img).enhance(1.0 + mag)
    if tid == "Sharpness":
        return ImageEnhance.Sharpness(img).enhance(1.0 + mag)
    if tid == "Posterize":
        return ImageOps.posterize(img, int(mag))
    if tid == "Solarize":
        return ImageOps.solarize(img, 255.0 * mag)
    if tid == "AutoContrast":
        return ImageOps.autocontrast(img)
    if tid == "Equalize":
        return ImageOps.equalize(img)
    if tid == "Invert":
        return ImageOps.invert(img)
    raise ValueError(tid)


def with_p(op: dict, apply: Callable[[], Image.Image], img: Image.Image) -> list[Image.Image]:
    """An op applied with probability p: p=1 applies, p=0 keeps, else both."""
    p = float(op["p"])
    if p >= 1.0:
        return [apply()]
    if p <= 0.0:
        return [img]
    return [img, apply()]


class PilReference:
    """torchvision's PIL path, reproduced. Each op maps an image to the list
    of images torchvision could output for it."""

    name = "pil"

    def leaf(self, op: dict, img: Image.Image, state: dict) -> list[Image.Image]:
        name = op["op"]
        w, h = img.size
        interp = op.get("interpolation")  # the ops that resample have one
        if name == "RandomHorizontalFlip":
            return with_p(op, lambda: img.transpose(Image.FLIP_LEFT_RIGHT), img)
        if name == "RandomVerticalFlip":
            return with_p(op, lambda: img.transpose(Image.FLIP_TOP_BOTTOM), img)
        if name == "RandomInvert":
            return with_p(op, lambda: ImageOps.invert(img), img)
        if name == "RandomPosterize":
            return with_p(op, lambda: ImageOps.posterize(img, op["bits"]), img)
        if name == "RandomSolarize":
            return with_p(op, lambda: ImageOps.solarize(img, op["threshold"]), img)
        if name == "RandomEqualize":
            return with_p(op, lambda: ImageOps.equalize(img), img)
        if name == "RandomAutocontrast":
            return with_p(op, lambda: ImageOps.autocontrast(img), img)
        if name == "RandomAdjustSharpness":
            return with_p(op, lambda: ImageEnhance.Sharpness(img).enhance(op["sharpness_factor"]), img)
        if name == "RandomGrayscale":
            return with_p(op, lambda: pil_grayscale3(img), img)
        if name == "Grayscale":
            if op["num_output_channels"] != 3:
                raise Unsupported("Grayscale with one channel")
            return [pil_grayscale3(img)]
        if name == "ColorJitter":
            return self.color_jitter(op, img)
        if name == "RandomPhotometricDistort":
            return self.photometric(op, img)
        if name == "RandomChannelPermutation":
            return [pil_permute(img, perm) for perm in itertools.permutations(range(3))]
        if name == "Pad":
            return [pil_pad(img, op["padding"], op["fill"], op["padding_mode"])]
        if name == "CenterCrop":
            return [pil_center_crop(img, op["size"])]
        if name == "RandomCrop":
            ltrb, sh, sw, ch, cw = randomcrop_geometry(op, w, h)
            padded = img
            if any(ltrb):
                padded = pil_pad(img, ltrb, op["fill"], op["padding_mode"])
            check_count((sh + 1) * (sw + 1), "RandomCrop offsets")
            return [pil_crop(padded, t, l, ch, cw) for t in range(sh + 1) for l in range(sw + 1)]
        if name == "Resize":
            return [pil_resize(img, op["size"], interp, op["max_size"])]
        if name == "ScaleJitter":
            # torchvision's make_params with a one-value scale_range.
            (a, b), scale = op["target_size"], point(*op["scale_range"], "scale_range")
            r = min(b / h, a / w) * scale
            return [img.resize((int(w * r), int(h * r)), resample=PIL_FILTERS[interp])]
        if name == "RandomShortestSize":
            sizes = op["min_size"] if isinstance(op["min_size"], list) else [op["min_size"]]
            out = []
            for m in sizes:
                r = m / min(h, w)
                if op["max_size"] is not None:
                    r = min(r, op["max_size"] / max(h, w))
                out.append(img.resize((int(w * r), int(h * r)), resample=PIL_FILTERS[interp]))
            return out
        if name == "FixedSizeCrop":
            # The references' FixedSizeCrop on an image no larger than size:
            # padded on the right and bottom only.
            ch, cw = hw(op["size"])
            if h > ch or w > cw:
                raise Unsupported("FixedSizeCrop's crop offsets (RandomCrop's cases)")
            return [pil_pad(img, [0, 0, cw - w, ch - h], op["fill"], op["padding_mode"])]
        if name == "RandomResizedCrop":
            size = list(hw(op["size"]))
            free, (t, l, bh, bw) = rrc_box(op, w, h)
            boxes = [(t, l, bh, bw)]
            if free is not None:
                cw, ch = free
                check_count((h - ch + 1) * (w - cw + 1), "RandomResizedCrop positions")
                boxes = [(t, l, ch, cw) for t in range(h - ch + 1) for l in range(w - cw + 1)]
            return [pil_resize(pil_crop(img, *b), size, interp) for b in boxes]
        if name == "RandomRotation":
            angle = f32(point(*angle_range(op["degrees"]), "degrees"))
            return [pil_rotate(img, angle, interp, op["expand"], op["center"], op["fill"])]
        if name == "RandomAffine":
            angle, scale, shear = affine_fixed(op)
            out = []
            for t in affine_translations(op, w, h):
                out.append(pil_affine(img, angle, t, scale, shear, interp, op["fill"], op["center"]))
            return out
        if name == "GaussianBlur":
            k = op["kernel_size"]
            ks = (k, k) if isinstance(k, int) else (k[0], k[1]) if len(k) == 2 else (k[0], k[0])
            sig = op["sigma"]
            lo, hi = (sig, sig) if isinstance(sig, (int, float)) else (sig[0], sig[-1])
            return [pil_gaussian_blur(img, ks, f32(point(float(lo), float(hi), "sigma")))]
        if name == "RandomErasing":
            return self.erasing(op, img, state)
        raise Unsupported(f"no PIL reference for {name}")

    def color_jitter(self, op: dict, img: Image.Image) -> list[Image.Image]:
        factors = jitter_factors(op)
        fns = [
            lambda im, f: ImageEnhance.Brightness(im).enhance(f),
            lambda im, f: ImageEnhance.Contrast(im).enhance(f),
            lambda im, f: ImageEnhance.Color(im).enhance(f),
            pil_adjust_hue,
        ]
        used = [i for i in range(4) if factors[i] is not None]
        out = []
        for order in itertools.permutations(used):
            im = img
            for i in order:
                im = fns[i](im, factors[i])
            out.append(im)
        return out or [img]

    def photometric(self, op: dict, img: Image.Image) -> list[Image.Image]:
        """torchvision's RandomPhotometricDistort with p 0 or 1 and fixed
        factors: every place of contrast and every channel order."""
        p = float(op["p"])
        if p <= 0.0:
            return [img]
        if p < 1.0:
            raise Unsupported("RandomPhotometricDistort p strictly between 0 and 1")
        b, c, s, h = (f32(point(*op[k], f"RandomPhotometricDistort {k}")) for k in ("brightness", "contrast", "saturation", "hue"))
        out = []
        for contrast_before in (True, False):
            im = ImageEnhance.Brightness(img).enhance(b)
            if contrast_before:
                im = ImageEnhance.Contrast(im).enhance(c)
            im = pil_adjust_hue(ImageEnhance.Color(im).enhance(s), h)
            if not contrast_before:
                im = ImageEnhance.Contrast(im).enhance(c)
            out += [pil_permute(im, perm) for perm in itertools.permutations(range(3))]
        return out

    def erasing(self, op: dict, img: Image.Image, state: dict) -> list[Image.Image]:
        p = float(op["p"])
        w, h = img.size
        box = erasing_box(op, w, h)
        value = op["value"]
        if isinstance(value, str):
            raise Unsupported("random erasing noise")
        vals = [float(value)] * 3 if isinstance(value, (int, float)) else [float(v) for v in value]
        if len(vals) == 1:
            vals = vals * 3
        pix = erase_pixels(vals, state)
        if box is None or p <= 0.0:
            return [img]
        eh, ew = box
        arr = np.asarray(img)
        out = [] if p >= 1.0 else [img]
        check_count((h - eh + 1) * (w - ew + 1), "RandomErasing positions")
        for i in range(h - eh + 1):
            for j in range(w - ew + 1):
                a = arr.copy()
                a[i : i + eh, j : j + ew] = pix
                out.append(Image.fromarray(a))
        return out

    def policy_apply(self, policy: dict, img: Image.Image, tid: str, mag: float) -> Image.Image:
        return pil_policy_apply(img, tid, mag, policy["interpolation"], policy["fill"])

    def space(self, policy: dict):
        return policy_space(policy["op"])

    def imagenet_policy(self, policy: dict):
        return IMAGENET_POLICY

    def to_uint8(self, img: Any, state: dict) -> Image.Image:
        return img


def erase_pixels(vals: list[float], state: dict) -> list[int]:
    """The uint8 value RandomErasing's `value` stands for where it sits: on a
    uint8 image torch truncates it; after ToDtype(scale=True) it is in
    [0, 1]; after Normalize it is normalised (x * std + mean)."""
    if not state.get("float"):
        return [int(v) for v in vals]
    out = []
    for c, v in enumerate(vals):
        if state.get("normalize"):
            mean, std = state["normalize"]
            v = v * std[c % len(std)] + mean[c % len(mean)]
        if state.get("scale"):
            v *= 255.0
        out.append(int(min(255, max(0, round(v)))))
    return out


MAX_CANDIDATES = 5000


def check_count(n: int, what: str) -> None:
    if n > MAX_CANDIDATES:
        raise Unsupported(f"{n} {what} to try; pick a case with fewer")


# ---------------------------------------------------------------------------
# The torchvision reference: torchvision.transforms.v2 itself.
# ---------------------------------------------------------------------------


class TorchvisionReference:
    name = "torchvision"

    def __init__(self) -> None:
        import torch
        import torchvision.transforms.v2 as T

        self.torch = torch
        self.T = T
        self.cache: dict[str, Any] = {}

    def build(self, op: dict):
        key = json.dumps(op, sort_keys=True)
        if key not in self.cache:
            self.cache[key] = self._build(op)
        return self.cache[key]

    def _build(self, op: dict):
        if op["op"] == "ToDtype":
            return self.T.ToDtype(getattr(self.torch, op["dtype"]), scale=op["scale"])
        if op["op"] == "ConvertImageDtype":
            return self.T.ConvertImageDtype(getattr(self.torch, op["dtype"]))
        args = {k: v for k, v in op.items() if k != "op"}
        if "interpolation" in args:
            args["interpolation"] = self.T.InterpolationMode(args["interpolation"])
        if op["op"] == "AutoAugment" and "policy" in args:
            args["policy"] = self.T.AutoAugmentPolicy(args["policy"])
        return getattr(self.T, op["op"])(**args)

    def leaf(self, op: dict, img: Any, state: dict) -> list[Any]:
        name = op["op"]
        if name == "FixedSizeCrop":
            # Not in torchvision.transforms.v2: the detection references'
            # class, which on an image no larger than size pads on the
            # right and bottom with torchvision's own pad.
            w, h = img.size if isinstance(img, Image.Image) else (img.shape[-1], img.shape[-2])
            ch, cw = hw(op["size"])
            if h > ch or w > cw:
                raise Unsupported("FixedSizeCrop's crop offsets (RandomCrop's cases)")
            fill = op["fill"]
            fill = tuple(fill) if isinstance(fill, list) else fill
            return [self.T.functional.pad(img, [0, 0, cw - w, ch - h], fill=fill, padding_mode=op["padding_mode"])]
        t = self.build(op)
        if name in OUTPUT_OPS:
            return [t(img)]
        if isinstance(img, Image.Image):
            w, h = img.size
        else:
            h, w = img.shape[-2:]
        p = op.get("p")
        if p is not None and 0.0 < float(p) < 1.0 and name not in ("RandomErasing",):
            raise Unsupported("p strictly between 0 and 1")
        if name == "RandomCrop":
            params = t.make_params([img])
            _, sh, sw, _, _ = randomcrop_geometry(op, w, h)
            out = []
            check_count((sh + 1) * (sw + 1), "RandomCrop offsets")
            for top in range(sh + 1):
                for left in range(sw + 1):
                    out.append(t.transform(img, dict(params, top=top, left=left)))
            return out
        if name == "RandomResizedCrop":
            free, _ = rrc_box(op, w, h)
            if free is None:
                return [t(img)]
            params = t.make_params([img])
            cw, ch = free
            assert (params["width"], params["height"]) == (cw, ch), (params, free)
            check_count((h - ch + 1) * (w - cw + 1), "RandomResizedCrop positions")
            return [
                t.transform(img, dict(params, top=top, left=left)) for top in range(h - ch + 1) for left in range(w - cw + 1)
            ]
        if name == "RandomAffine" and op["translate"] is not None:
            params = t.make_params([img])
            return [t.transform(img, dict(params, translate=tr)) for tr in affine_translations(op, w, h)]
        if name == "ColorJitter":
            params = t.make_params([img])
            out, seen = [], set()
            for perm in itertools.permutations(range(4)):
                used = tuple(i for i in perm if params[["brightness_factor", "contrast_factor", "saturation_factor", "hue_factor"][i]] is not None)
                if used in seen:
                    continue
                seen.add(used)
                out.append(t.transform(img, dict(params, fn_idx=self.torch.tensor(perm))))
            return out
        if name == "RandomChannelPermutation":
            return [t.transform(img, dict(permutation=self.torch.tensor(perm))) for perm in itertools.permutations(range(3))]
        if name == "RandomPhotometricDistort":
            params = t.make_params([img])
            return [
                t.transform(img, dict(params, contrast_before=before, channel_permutation=perm if perm is None else self.torch.tensor(perm)))
                for before in (True, False)
                for perm in ([None] if params["channel_permutation"] is None else list(itertools.permutations(range(3))))
            ]
        if name == "RandomErasing":
            params = t.make_params([img])
            if params["v"] is None:
                return [img]
            eh, ew = params["h"], params["w"]
            pp = float(op["p"])
            out = [] if pp >= 1.0 else [img]
            check_count((h - eh + 1) * (w - ew + 1), "RandomErasing positions")
            for i in range(h - eh + 1):
                for j in range(w - ew + 1):
                    out.append(t.transform(img, dict(params, i=i, j=j)))
            return out
        return [t(img)]

    def policy_apply(self, policy: dict, img: Any, tid: str, mag: float) -> Any:
        t = self.build(policy)
        return t._apply_image_or_video_transform(img, tid, mag, interpolation=t.interpolation, fill=t._fill)

    def space(self, policy: dict):
        t = self.build(policy)

        def as_floats(fn):
            def magnitudes(n, h, w):
                m = fn(n, h, w)
                return None if m is None else [float(v) for v in m]

            return magnitudes

        return {k: (as_floats(fn), signed) for k, (fn, signed) in t._AUGMENTATION_SPACE.items()}

    def imagenet_policy(self, policy: dict):
        return self.build(policy)._policies

    def to_uint8(self, img: Any, state: dict) -> Image.Image:
        if isinstance(img, Image.Image):
            return img
        x = img.as_subclass(self.torch.Tensor).detach().to("cpu")
        if x.is_floating_point():
            x = x.double()
            if state.get("normalize"):
                mean, std = state["normalize"]
                x = x * self.torch.tensor(std, dtype=x.dtype)[:, None, None] + self.torch.tensor(mean, dtype=x.dtype)[:, None, None]
            if state.get("scale"):
                x = x * 255.0
            x = x.round().clamp(0, 255)
        arr = x.to(self.torch.uint8).permute(1, 2, 0).numpy()
        return Image.fromarray(np.ascontiguousarray(arr))


# ---------------------------------------------------------------------------
# Applying a spec with a reference: containers and policies structurally,
# leaves by the reference. Every function returns the candidate outputs.
# ---------------------------------------------------------------------------

POLICIES = ("AutoAugment", "RandAugment", "TrivialAugmentWide")
OUTPUT_OPS = ("ToImage", "ToDtype", "Normalize", "PILToTensor", "ToTensor", "ConvertImageDtype")


def apply_op(ref, op: dict, images: list[Any], state: dict) -> list[Any]:
    name = op["op"]
    if name == "Compose":
        for child in op["transforms"]:
            images = apply_op(ref, child, images, state)
        return images
    if name == "RandomApply":
        p = float(op["p"])
        applied = images
        if p > 0.0:
            for child in op["transforms"]:
                applied = apply_op(ref, child, applied, state)
        if p >= 1.0:
            return applied
        return images + applied if p > 0.0 else images
    if name == "RandomChoice":
        out = []
        for child in op["transforms"]:
            out += apply_op(ref, child, images, dict(state))
        return out
    if name == "RandomOrder":
        out = []
        for order in itertools.permutations(op["transforms"]):
            ims = images
            for child in order:
                ims = apply_op(ref, child, ims, dict(state))
            out += ims
        return out
    if name in POLICIES:
        out = []
        for im in images:
            out += policy_candidates(ref, op, im)
        return out
    if name in OUTPUT_OPS:
        if name == "ToTensor":
            state["float"], state["scale"] = True, True
        if name in ("ToDtype", "ConvertImageDtype"):
            state["float"] = "float" in op["dtype"]
            # ConvertImageDtype always scales; ToDtype when asked.
            state["scale"] = op["scale"] if name == "ToDtype" else True
        if name == "Normalize":
            state["normalize"] = (op["mean"], op["std"])
        if isinstance(ref, PilReference):
            return images
    out = []
    for im in images:
        out += ref.leaf(op, im, state)
    check_count(len(out), "candidates")
    return out


def policy_candidates(ref, op: dict, img: Any) -> list[Any]:
    """Every image a policy can output for `img`."""
    name = op["op"]
    space = ref.space(op)
    w, h = img.size
    if name == "AutoAugment":
        if op["policy"] != "imagenet":
            raise Unsupported("AutoAugment policies other than imagenet")
        out = []
        for sub in ref.imagenet_policy(op):
            ims = [img]
            for tid, prob, idx in sub:
                nxt = list(ims) if prob < 1.0 else []
                if prob > 0.0:
                    for im in ims:
                        for m in signed_magnitudes(space, tid, 10, idx, h, w):
                            nxt.append(ref.policy_apply(op, im, tid, m))
                ims = nxt
            out += ims
        return out
    bins = op["num_magnitude_bins"]
    if name == "RandAugment":
        ims = [img]
        for _ in range(op["num_ops"]):
            nxt = []
            for im in ims:
                for tid in space:
                    for m in signed_magnitudes(space, tid, bins, op["magnitude"], h, w):
                        nxt.append(ref.policy_apply(op, im, tid, m))
            ims = nxt
        return ims
    out = []
    for tid in space:
        for m in signed_magnitudes(space, tid, bins, None, h, w):
            out.append(ref.policy_apply(op, img, tid, m))
    return out


def reference_outputs(ref, ops: list[dict], img: Image.Image) -> list[np.ndarray]:
    ops = [with_defaults(o) for o in ops]
    state: dict = {}
    images: list[Any] = [img]
    for op in ops:
        images = apply_op(ref, op, images, state)
    arrays, seen = [], set()
    for im in images:
        a = np.asarray(ref.to_uint8(im, state).convert("RGB"), dtype=np.uint8)
        key = (a.shape, a.tobytes())
        if key not in seen:
            seen.add(key)
            arrays.append(a)
    return arrays


# ---------------------------------------------------------------------------
# Cases.
# ---------------------------------------------------------------------------


@dataclass
class Case:
    image: str
    ops: list[dict]
    # Fix the output to a square with a trailing CenterCrop (sized from the
    # reference output) unless the spec already ends at a fixed square.
    square: bool = True
    note: str = ""

    @property
    def key(self) -> str:
        op = with_defaults(self.ops[0])
        name = op["op"]
        if name in ("RandomRotation", "RandomAffine"):
            return f"{name}/{op['interpolation'].replace('nearest-exact', 'nearest')}"
        if name in ("Resize", "RandomResizedCrop"):
            return f"{name}/{op['interpolation'].replace('nearest-exact', 'nearest')}"
        if name in OUTPUT_OPS:
            return next(o["op"] for o in self.ops if o["op"] not in OUTPUT_OPS)
        return name

    def label(self) -> str:
        def short(op: dict) -> str:
            args = ",".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in op.items() if k != "op")
            return f"{op['op']}({args})"

        return " + ".join(short(o) for o in self.ops)


# Every op's arguments and defaults, from Stoker's op schema (`stoker
# transforms --json`, or the installed package's `_stoker.op_schema()`):
# the references read every argument from the op dict, never a default of
# their own.
SCHEMA: dict[str, dict] = {}


def load_schema(stoker_bin: Optional[str]) -> None:
    if stoker_bin:
        out = subprocess.run([stoker_bin, "transforms", "--json"], check=True, capture_output=True, text=True).stdout
        entries = json.loads(out)
    else:
        try:
            from stoker import _stoker
        except ImportError:
            sys.exit("transform oracle: the op schema needs the stoker binary or the stoker package")
        entries = _stoker.op_schema()
    SCHEMA.update({e["name"]: e for e in entries})


def with_defaults(op: dict) -> dict:
    """The op with every argument it omits at its schema default (children too)."""
    out = dict(op)
    for a in SCHEMA[op["op"]]["args"]:
        if a["name"] not in out and not a["required"]:
            out[a["name"]] = a["default"]
    if "transforms" in out:
        out["transforms"] = [with_defaults(c) for c in out["transforms"]]
    return out


# Ops of the schema with no case here, each with the reason.
NO_CASE: dict[str, str] = {
    # Ops on the boxes alone: they move no pixels (tests/python/targets_oracle.py
    # checks them against torchvision).
    "ClampBoundingBoxes": "moves no pixels",
    "SanitizeBoundingBoxes": "moves no pixels",
    "ConvertBoundingBoxFormat": "moves no pixels",
    # A constant Pad at a random offset: Pad's cases check those pixels,
    # targets_oracle.py its boxes; the size and offset draws are Stoker's.
    "RandomZoomOut": "a Pad at a random offset (Pad's cases)",
    # The detection recipes' ops resolve to steps other ops' cases check;
    # targets_oracle.py checks their drawn sizes and offsets against
    # torchvision's rules, and their boxes.
    "RandomIoUCrop": "a plain crop at a drawn box (RandomCrop's cases)",
    "ToPureTensor": "moves no pixels",
}


def uncovered_ops(cases: list) -> list[str]:
    """A failure line for each op of the schema that no case (nor a
    random spec) uses and NO_CASE does not excuse: a new op needs a case."""
    seen: set[str] = set()

    def walk(o: dict) -> None:
        seen.add(o["op"])
        for child in o.get("transforms", []):
            walk(child)

    for case in cases:
        for o in case.ops:
            walk(o)
    for spec_op, _ in random_specs():
        walk(spec_op)
    return [f"{name}: no oracle case (add one to build_cases, or its reason to NO_CASE)" for name in SCHEMA if name not in seen and name not in NO_CASE]


def op(name: str, **args: Any) -> dict:
    return {"op": name, **args}


def build_cases(images: dict[str, str]) -> list[Case]:
    C: list[Case] = []
    big, sq, sq48, odd = "synth257x193", "synth64", "synth48", "synth31x40"
    tiny = ["tiny1x1", "tiny2x3", "tiny5x7"]
    photo = ["photo"] if "photo" in images else []
    main = [big, odd] + photo

    def add(imgs, *ops_, **kw):
        for im in imgs:
            C.append(Case(im, [dict(o) for o in ops_], **kw))

    # Flips.
    add(main + [sq] + tiny, op("RandomHorizontalFlip", p=1.0))
    add(main + [sq] + tiny, op("RandomVerticalFlip", p=1.0))
    add([odd], op("RandomHorizontalFlip", p=0.0))
    add([odd], op("RandomVerticalFlip", p=0.0))
    # Lookups.
    add(main + tiny, op("RandomInvert", p=1.0))
    for bits in (1, 3, 7, 8):
        add([big], op("RandomPosterize", bits=bits, p=1.0))
    add(tiny + photo, op("RandomPosterize", bits=2, p=1.0))
    for thr in (0, 1, 100.5, 128, 255):
        add([big], op("RandomSolarize", threshold=thr, p=1.0))
    add(tiny + photo, op("RandomSolarize", threshold=128, p=1.0))
    add([big, odd, "lowc40x30"] + tiny + photo, op("Grayscale", num_output_channels=3))
    add([odd], op("RandomGrayscale", p=1.0))
    add([big, odd, "lowc40x30"] + tiny + photo, op("RandomEqualize", p=1.0))
    add([big, odd, "lowc40x30"] + tiny + photo, op("RandomAutocontrast", p=1.0))
    add([odd], op("RandomEqualize", p=0.0))
    # Colour.
    for f in (0.0, 0.5, 1.3, 2.5):
        add([big], op("ColorJitter", brightness=[f, f]))
    add(photo + tiny, op("ColorJitter", brightness=[1.3, 1.3]))
    for f in (0.0, 0.4, 1.5):
        add([big], op("ColorJitter", contrast=[f, f]))
    add(["lowc40x30"] + photo + tiny, op("ColorJitter", contrast=[1.5, 1.5]))
    for f in (0.0, 0.6, 1.7):
        add([big], op("ColorJitter", saturation=[f, f]))
    add(photo + tiny, op("ColorJitter", saturation=[1.7, 1.7]))
    for f in (-0.5, -0.35, -0.2, 0.05, 0.2, 0.5):
        add([big], op("ColorJitter", hue=[f, f]))
    add(photo + tiny, op("ColorJitter", hue=[0.2, 0.2]))
    # The detection recipe's distortion: fixed factors, every place of
    # contrast and every channel order; and the permutation alone.
    distort = dict(brightness=[1.2, 1.2], contrast=[0.7, 0.7], saturation=[1.4, 1.4], hue=[0.04, 0.04])
    add([sq48, odd] + photo + tiny, op("RandomPhotometricDistort", **distort, p=1.0))
    add([odd], op("RandomPhotometricDistort", **distort, p=0.0))
    add([big, odd] + tiny, op("RandomChannelPermutation"))
    # All four: the order is random (torch.randperm), every order is tried.
    add([sq48], op("ColorJitter", brightness=[1.2, 1.2], contrast=[0.8, 0.8], saturation=[1.4, 1.4], hue=[0.1, 0.1]))
    for f in (0.0, 0.3, 2.0, 5.0):
        add([big], op("RandomAdjustSharpness", sharpness_factor=f, p=1.0))
    add(photo + tiny, op("RandomAdjustSharpness", sharpness_factor=2.0, p=1.0))
    # Blur.
    add([big, sq] + photo, op("GaussianBlur", kernel_size=3, sigma=[1.5, 1.5]))
    add([big], op("GaussianBlur", kernel_size=[5, 3], sigma=[0.8, 0.8]))
    add([big], op("GaussianBlur", kernel_size=[3, 7], sigma=[2.0, 2.0]))
    add([big], op("GaussianBlur", kernel_size=9, sigma=[3.25, 3.25]))
    add(["tiny5x7"], op("GaussianBlur", kernel_size=3, sigma=[1.0, 1.0]))
    # Padding: every mode, int / [x, y] / [l, t, r, b], fills, tiny images.
    for mode in ("constant", "edge", "reflect", "symmetric"):
        add([odd], op("Pad", padding=3, padding_mode=mode))
        add([odd], op("Pad", padding=[2, 5], padding_mode=mode))
        add([big], op("Pad", padding=[1, 2, 3, 4], padding_mode=mode))
        add(["tiny2x3", "tiny5x7"], op("Pad", padding=[4, 1, 0, 6], padding_mode=mode))
    add(["tiny1x1"], op("Pad", padding=2, padding_mode="edge"))
    add(["tiny1x1"], op("Pad", padding=2, padding_mode="symmetric"))
    add([odd], op("Pad", padding=4, fill=[200, 30, 90]))
    add([odd], op("Pad", padding=[0, 3], fill=77))
    # Crops.
    for s in (1, 16, 31, 40, 57):
        add([odd], op("CenterCrop", size=s), square=False)
    add([big], op("CenterCrop", size=[100, 150]))
    add([big], op("CenterCrop", size=[220, 300]))
    add(tiny, op("CenterCrop", size=4), square=False)
    # RandomCrop: padded to exactly the crop (deterministic), pad_if_needed,
    # every padding mode; then with slack (every offset tried).
    add([odd], op("RandomCrop", size=[46, 37], padding=3))
    add([odd], op("RandomCrop", size=[40, 31], padding=[4, 2], fill=[10, 250, 120]))
    for mode in ("constant", "edge", "reflect", "symmetric"):
        add([odd], op("RandomCrop", size=44, pad_if_needed=True, padding_mode=mode), square=False)
        add(["tiny5x7"], op("RandomCrop", size=[9, 8], padding=[1, 1, 2, 1], padding_mode=mode))
    add([odd], op("RandomCrop", size=48, padding=[2, 1, 3, 0], pad_if_needed=True, fill=[255, 0, 0]), square=False)
    add([sq48], op("RandomCrop", size=40), square=False)
    add([sq48], op("RandomCrop", size=44, padding=2, padding_mode="reflect"), square=False)
    # Resize: up and down, every filter, [h, w], max_size, size=None.
    for interp in ("bilinear", "bicubic", "nearest", "lanczos", "box", "hamming"):
        add([big], op("Resize", size=100, interpolation=interp))
        add([odd], op("Resize", size=77, interpolation=interp))
    add(photo, op("Resize", size=120))
    # The detection recipes' resizes, with draws that have one outcome.
    add([big, odd] + photo, op("ScaleJitter", target_size=[120, 90], scale_range=[0.8, 0.8]))
    add([big] + photo, op("RandomShortestSize", min_size=[64], max_size=150))
    add([odd, sq], op("FixedSizeCrop", size=80, fill=[10, 20, 30]), square=False)
    add(photo, op("Resize", size=96, interpolation="bicubic"))
    add([big], op("Resize", size=[90, 90]))
    add([big], op("Resize", size=[90, 90], interpolation="box"))
    add([big], op("Resize", size=[90, 90], interpolation="lanczos"))
    add([big], op("Resize", size=[64, 200], interpolation="bicubic"))
    add([big], op("Resize", size=100, max_size=120))
    add([big], op("Resize", size=None, max_size=150))
    add([odd], op("Resize", size=[31, 31]))
    add(tiny, op("Resize", size=[9, 9]))
    add(["tiny2x3"], op("Resize", size=[9, 9], interpolation="bicubic"))
    add(["tiny1x1"], op("Resize", size=5, interpolation="nearest"))
    # RandomResizedCrop: the whole image (square), the fallback centre box
    # (non-square, ratio 1), a fixed-size box at every position.
    for interp in ("bilinear", "bicubic", "nearest"):
        add([sq], op("RandomResizedCrop", size=48, scale=[1.0, 1.0], ratio=[1.0, 1.0], interpolation=interp), square=False)
    add([big], op("RandomResizedCrop", size=64, scale=[1.0, 1.0], ratio=[1.0, 1.0]), square=False)
    add(photo, op("RandomResizedCrop", size=112, scale=[1.0, 1.0], ratio=[1.0, 1.0]), square=False)
    add([odd], op("RandomResizedCrop", size=[50, 50], scale=[1.0, 1.0], ratio=[1.0, 1.0]), square=False)
    add([sq], op("RandomResizedCrop", size=40, scale=[0.25, 0.25], ratio=[1.0, 1.0]), square=False)
    # Rotation: every filter, angles, expand, centre, fill.
    for interp in ("nearest", "bilinear", "bicubic"):
        for deg in (30.0, -45.0, 90.0, 180.0, 12.5):
            add([odd], op("RandomRotation", degrees=[deg, deg], interpolation=interp))
        add([big] + photo, op("RandomRotation", degrees=[30.0, 30.0], interpolation=interp))
        add([big], op("RandomRotation", degrees=[-20.0, -20.0], interpolation=interp, expand=True))
        add([odd], op("RandomRotation", degrees=[75.0, 75.0], interpolation=interp, expand=True, fill=[255, 128, 0]))
        add([odd], op("RandomRotation", degrees=[33.0, 33.0], interpolation=interp, center=[5.0, 30.5], fill=60))
    add(tiny, op("RandomRotation", degrees=[30.0, 30.0]))
    add(tiny, op("RandomRotation", degrees=[45.0, 45.0], interpolation="bilinear", expand=True))
    add([odd], op("RandomRotation", degrees=[0.0, 0.0], center=[3.0, 4.0]))
    add([odd], op("RandomRotation", degrees=[360.0, 360.0]))
    # Affine: rotation + scale + shear; shears about (0, 0) as the policies
    # use them; translations (every draw tried); fills.
    for interp in ("nearest", "bilinear", "bicubic"):
        add([big], op("RandomAffine", degrees=[20.0, 20.0], scale=[0.75, 0.75], shear=[10.0, 10.0, -5.0, -5.0], interpolation=interp, fill=[0, 128, 255]))
        add([odd], op("RandomAffine", degrees=[-35.0, -35.0], scale=[1.25, 1.25], shear=[12.0, 12.0], interpolation=interp))
        add(photo, op("RandomAffine", degrees=[10.0, 10.0], scale=[1.125, 1.125], interpolation=interp))
    add([odd, big], op("RandomAffine", degrees=0, shear=[16.5, 16.5], center=[0, 0]))
    add([odd, big], op("RandomAffine", degrees=0, shear=[0, 0, -16.5, -16.5], center=[0, 0]))
    add([odd], op("RandomAffine", degrees=0, shear=[-25.0, -25.0], center=[0, 0], interpolation="bilinear", fill=128))
    add([sq48], op("RandomAffine", degrees=[15.0, 15.0], translate=[0.1, 0.05], scale=[0.875, 0.875]))
    add([sq48], op("RandomAffine", degrees=0, translate=[0.2, 0.0]))
    add([sq48], op("RandomAffine", degrees=[5.0, 5.0], translate=[0.0, 0.125], interpolation="bilinear", fill=[9, 99, 199]))
    add([odd], op("RandomAffine", degrees=[40.0, 40.0], center=[10.0, 2.0], interpolation="nearest-exact"))
    add(tiny, op("RandomAffine", degrees=[25.0, 25.0], scale=[1.5, 1.5], shear=[5.0, 5.0]))
    # RandomErasing: a fixed-size box at every position, on the uint8 image,
    # after ToDtype(scale=True), after Normalize (0 is the mean colour).
    add([sq48], op("RandomErasing", p=1.0, scale=[0.25, 0.25], ratio=[1.0, 1.0], value=[10, 200, 30]))
    add([sq48], op("RandomErasing", p=1.0, scale=[0.0625, 0.0625], ratio=[1.0, 1.0], value=0))
    add(
        [sq48],
        op("ToImage"),
        op("ToDtype", dtype="float32", scale=True),
        op("RandomErasing", p=1.0, scale=[0.25, 0.25], ratio=[1.0, 1.0], value=1.0),
    )
    add(
        [sq48],
        op("ToImage"),
        op("ToDtype", dtype="float32", scale=True),
        op("Normalize", mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        op("RandomErasing", p=1.0, scale=[0.25, 0.25], ratio=[1.0, 1.0], value=0),
    )
    # The other output conversions, seen through the value they give erasing.
    add([sq48], op("PILToTensor"), op("RandomErasing", p=1.0, scale=[0.25, 0.25], ratio=[1.0, 1.0], value=[10, 200, 30]))
    add([sq48], op("ToTensor"), op("RandomErasing", p=1.0, scale=[0.25, 0.25], ratio=[1.0, 1.0], value=1.0))
    add([sq48], op("ToImage"), op("ConvertImageDtype"), op("RandomErasing", p=1.0, scale=[0.25, 0.25], ratio=[1.0, 1.0], value=0.5))
    # Containers.
    add([odd], op("Compose", transforms=[op("RandomHorizontalFlip", p=1.0), op("RandomInvert", p=1.0)]))
    add([odd], op("RandomApply", transforms=[op("RandomVerticalFlip", p=1.0), op("RandomSolarize", threshold=100, p=1.0)], p=0.5))
    add([odd], op("RandomChoice", transforms=[op("RandomHorizontalFlip", p=1.0), op("RandomEqualize", p=1.0), op("RandomPosterize", bits=3, p=1.0)]))
    add([odd], op("RandomOrder", transforms=[op("RandomPosterize", bits=4, p=1.0), op("RandomAutocontrast", p=1.0)]))
    return C


# Random ops: the candidate check on the policies (every outcome tried) over
# RATE_POSITIONS positions, determinism, and the rate of change.
def random_specs() -> list[tuple[dict, bool]]:
    """(op, whether every outcome can be enumerated)."""
    return [
        (op("RandAugment"), True),
        (op("RandAugment", num_ops=1, magnitude=20, interpolation="bilinear", fill=[128, 64, 0]), True),
        (op("TrivialAugmentWide"), True),
        (op("AutoAugment"), True),
        (op("TimmRandAugment", config="rand-m9-mstd0.5-inc1", img_mean=[124, 116, 104]), False),
        (op("RandomErasing", p=0.5, value=[0, 0, 0]), False),
    ]


# ---------------------------------------------------------------------------
# Running Stoker.
# ---------------------------------------------------------------------------


class Stoker:
    def __init__(self, binary: str, work: str) -> None:
        self.binary = binary
        self.work = work
        self.runs = 0
        self.seconds = 0.0

    def augment(self, ops: list[dict], image: str, seed: int = 0, position: int = 0) -> np.ndarray:
        self.runs += 1
        out = os.path.join(self.work, f"out_{self.runs}.png")
        spec = json.dumps({"version": 1, "ops": ops}, separators=(",", ":"))
        cmd = [self.binary, "augment", "--transform", spec, "--input", image, "--output", out]
        cmd += ["--seed", str(seed), "--position", str(position)]
        env = dict(os.environ, STOKER_LOG="warn")
        env.pop("RUST_LOG", None)
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
        self.seconds += time.monotonic() - t0
        if p.returncode != 0:
            raise RuntimeError(f"stoker augment failed ({p.returncode}): {p.stderr.strip()[-400:]}")
        with Image.open(out) as im:
            arr = np.asarray(im.convert("RGB"), dtype=np.uint8)
        os.remove(out)
        return arr


def compare(got: np.ndarray, cands: list[np.ndarray]) -> tuple[int, float, float, int]:
    """(max, mean, fraction differing, index) against the closest candidate."""
    best = None
    g = got.astype(np.int16)
    for i, c in enumerate(cands):
        if c.shape != got.shape:
            continue
        d = np.abs(g - c.astype(np.int16))
        m = (int(d.max()) if d.size else 0, float(d.mean()) if d.size else 0.0, float((d > 0).mean()) if d.size else 0.0, i)
        if best is None or m[:2] < best[:2]:
            best = m
            if m[0] == 0:
                break
    if best is None:
        shapes = sorted({c.shape for c in cands})
        raise RuntimeError(f"Stoker's output is {got.shape[1]}x{got.shape[0]}, the reference's {[f'{s[1]}x{s[0]}' for s in shapes]}")
    return best


# ---------------------------------------------------------------------------
# Main.
# ---------------------------------------------------------------------------


def square_spec(case: Case, cands: list[np.ndarray]) -> tuple[list[dict], list[np.ndarray]]:
    """The spec Stoker runs: the case's ops, then CenterCrop(S) before any
    output op, S the larger side of the reference output (so nothing is cut,
    and a short side is padded with zeros as torchvision's CenterCrop does).
    The references get the same CenterCrop."""
    ops = [dict(o) for o in case.ops]
    if not case.square:
        return ops, cands
    h, w = cands[0].shape[:2]
    s = max(h, w)
    cut = next((i for i, o in enumerate(ops) if o["op"] in OUTPUT_OPS), len(ops))
    ops.insert(cut, op("CenterCrop", size=s))
    cropped = [np.asarray(pil_center_crop(Image.fromarray(c), s)) for c in cands]
    return ops, cropped


def run(args) -> int:
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.makedirs(args.work, exist_ok=True)
    images = make_images(args.work, repo)
    refs = []
    if args.oracle in ("pil", "self-check"):
        refs.append(PilReference())
    if args.oracle in ("torchvision", "self-check"):
        refs.append(TorchvisionReference())
        import torch
        import torchvision

        print(
            f"transform oracle: torch {torch.__version__}, torchvision {torchvision.__version__}, "
            f"CPU capability {torch.backends.cpu.get_cpu_capability()} (the policies' magnitudes are "
            "reproduced for AVX512 builds; AVX2 builds round a few bins of 31 differently)"
        )
    stoker = None if args.oracle == "self-check" else Stoker(args.stoker, args.work)
    load_schema(args.stoker)
    only = re.compile(args.only) if args.only else None

    print(f"transform oracle: reference {args.oracle}; images: {', '.join(f'{k} {load(v).size[0]}x{load(v).size[1]}' for k, v in images.items())}")
    if "photo" not in images:
        print("transform oracle: ../shared/photos not found, no real photo")
    cases = build_cases(images)
    failures: list[str] = uncovered_ops(cases)
    worst: dict[str, tuple[int, float]] = {}
    n = 0
    t0 = time.monotonic()
    for case in cases:
        label = case.label()
        if only and not only.search(f"{case.key} {label} {case.image}"):
            continue
        n += 1
        bound = BOUNDS[case.key]
        img = load(images[case.image])
        line = f"{label:<92} {case.image:<13}"
        try:
            cands = reference_outputs(refs[0], case.ops, img)
            ops, cands = square_spec(case, cands)
            if args.oracle == "self-check":
                other = reference_outputs(refs[1], case.ops, img)
                _, other = square_spec(case, other)
                # Every torchvision outcome must be one of PIL's, and back.
                worst_pair = (0, 0.0, 0.0, 0)
                for a, b in ((other, cands), (cands, other)):
                    exact = {x.tobytes() for x in b}
                    for o in a:
                        if o.tobytes() not in exact:
                            m = compare(o, b)
                            worst_pair = max(worst_pair, m, key=lambda x: x[:2])
                mx, mean, frac, _ = worst_pair
                best = f"{len(cands)}/{len(other)} outcomes"
            else:
                got = stoker.augment(ops, images[case.image])
                mx, mean, frac, _ = compare(got, cands)
                best = f"best of {len(cands)}" if len(cands) > 1 else ""
        except Unsupported as e:
            print(f"{line} SKIP ({e})")
            n -= 1
            continue
        except Exception as e:  # noqa: BLE001 - reported per case
            print(f"{line} FAIL {e}")
            failures.append(f"{label} on {case.image}: {e}")
            continue
        ok = bound.ok(mx, mean, cands[0].shape[0] * cands[0].shape[1])
        w = worst.get(case.key, (0, 0.0))
        worst[case.key] = (max(w[0], mx), max(w[1], mean))
        size = f"{cands[0].shape[1]}x{cands[0].shape[0]}"
        print(f"{line} {size:>7} max {mx:3d} mean {mean:8.5f} differ {frac:8.4%} [{bound}] {'ok' if ok else 'FAIL'} {best}".rstrip())
        if not ok:
            failures.append(f"{label} on {case.image}: max {mx} mean {mean:.5f} (bound {bound})")

    if args.oracle != "self-check":
        n, failures = random_checks(args, refs[0], stoker, images, only, n, failures, worst)
    else:
        n, failures = policy_self_check(refs, images, only, n, failures)

    print()
    print("per-op worst (max, mean):")
    for k in sorted(worst):
        print(f"  {k:<28} max {worst[k][0]:3d} mean {worst[k][1]:.5f}   bound {BOUNDS.get(k, '-')}")
    timing = f" ({time.monotonic() - t0:.1f}s" + (f", {stoker.runs} stoker runs in {stoker.seconds:.1f}s)" if stoker else ")")
    if failures:
        print(f"transform oracle: {n} cases, {len(failures)} outside bounds{timing}:")
        for f in failures:
            print(f"  FAIL {f}")
        return 1
    print(f"transform oracle: {n} cases, all within bounds{timing}")
    return 0


def random_checks(args, ref, stoker: Stoker, images, only, n, failures, worst):
    image = images["synth48"]
    img = load(image)
    base = np.asarray(img)
    for spec_op, enumerable in random_specs():
        key = spec_op["op"]
        label = Case("synth48", [spec_op]).label()
        if only and not only.search(f"{key} {label} synth48"):
            continue
        ops = [spec_op, op("CenterCrop", size=48)]
        try:
            # (a) Determinism: the same seed and position twice.
            n += 1
            a = stoker.augment(ops, image, seed=11, position=5)
            b = stoker.augment(ops, image, seed=11, position=5)
            same = a.shape == b.shape and np.array_equal(a, b)
            print(f"{label:<92} {'synth48':<13} determinism: seed 11 position 5 twice {'identical ok' if same else 'DIFFER FAIL'}")
            if not same:
                failures.append(f"{label}: two runs with the same seed and position differ")
            # (b) Over many positions: how often the image changes, how many
            # distinct outputs, and (policies) each output against every
            # outcome torchvision could draw.
            outs = [stoker.augment(ops, image, seed=11, position=p) for p in range(RATE_POSITIONS)]
            changed = sum(not np.array_equal(o, base) for o in outs) / len(outs)
            distinct = len({o.tobytes() for o in outs})
            lo, hi = RATES[key]
            n += 1
            ok = lo <= changed <= hi and distinct >= RATE_POSITIONS // 4
            print(
                f"{label:<92} {'synth48':<13} rate: {RATE_POSITIONS} positions, changed {changed:.0%} "
                f"(expect {lo:.0%}-{hi:.0%}), {distinct} distinct {'ok' if ok else 'FAIL'}"
            )
            if not ok:
                failures.append(f"{label}: changed {changed:.0%} of {RATE_POSITIONS} positions (expect {lo:.0%}-{hi:.0%}), {distinct} distinct")
            if enumerable:
                n += 1
                cands = reference_outputs(ref, [spec_op], img)
                bound = BOUNDS[key]
                stats = [compare(o, cands) for o in outs]
                mx = max(s[0] for s in stats)
                mean = max(s[1] for s in stats)
                ok = all(bound.ok(st[0], st[1], base.shape[0] * base.shape[1]) for st in stats)
                w = worst.get(key, (0, 0.0))
                worst[key] = (max(w[0], mx), max(w[1], mean))
                print(
                    f"{label:<92} {'synth48':<13} outcomes: {RATE_POSITIONS} positions vs {len(cands)} possible, "
                    f"worst max {mx} mean {mean:.5f} [{bound}] {'ok' if ok else 'FAIL'}"
                )
                if not ok:
                    bad = [p for p, st in enumerate(stats) if not bound.ok(st[0], st[1], base.shape[0] * base.shape[1])]
                    failures.append(f"{label}: positions {bad} match no torchvision outcome (worst max {mx} mean {mean:.5f})")
        except Unsupported as e:
            print(f"{label:<92} {'synth48':<13} SKIP ({e})")
        except Exception as e:  # noqa: BLE001
            print(f"{label:<92} {'synth48':<13} FAIL {e}")
            failures.append(f"{label}: {e}")
    return n, failures


def policy_self_check(refs, images, only, n, failures):
    """Both references' outcome sets for the policies must be equal."""
    img = load(images["synth48"])
    for spec_op, enumerable in random_specs():
        label = Case("synth48", [spec_op]).label()
        if not enumerable or (only and not only.search(f"{spec_op['op']} {label} synth48")):
            continue
        n += 1
        a = reference_outputs(refs[0], [spec_op], img)
        b = reference_outputs(refs[1], [spec_op], img)
        sa, sb = {x.tobytes() for x in a}, {x.tobytes() for x in b}
        ok = sa == sb
        print(f"{label:<92} {'synth48':<13} outcomes: pil {len(sa)}, torchvision {len(sb)}, common {len(sa & sb)} {'ok' if ok else 'FAIL'}")
        if not ok:
            worst = max((compare(x, a) for x in b), key=lambda m: m[:2])
            failures.append(f"{label}: the references' outcomes differ (worst torchvision outcome vs PIL: max {worst[0]} mean {worst[1]:.5f})")
    return n, failures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stoker", nargs="?", help="the stoker binary (not needed with --oracle self-check)")
    ap.add_argument("work", help="a scratch folder for the images and outputs")
    ap.add_argument("--oracle", choices=("pil", "torchvision", "self-check"), default="pil")
    ap.add_argument("--only", help="run only the cases whose op key, spec or image matches this regex")
    args = ap.parse_args()
    if args.oracle != "self-check" and not args.stoker:
        ap.error("the stoker binary is needed unless --oracle self-check")
    sys.exit(run(args))


if __name__ == "__main__":
    main()
