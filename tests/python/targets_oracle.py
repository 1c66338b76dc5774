"""Boxes and keypoints through Stoker's geometric ops against torchvision v2.

For many draws (an image size, random boxes and keypoints, an op with
random arguments), Stoker moves the targets (`_stoker.follow_targets`, the
worker's own code) and torchvision moves the same targets
(`tv_tensors.BoundingBoxes` and `tv_tensors.KeyPoints`, float64):

- ops whose outcome the arguments fix (Resize, CenterCrop, Pad, the flips
  with p=1, RandomRotation and RandomAffine with one-value ranges) run as
  torchvision's own transform classes;
- ops that draw a box or an offset (RandomResizedCrop, RandomCrop,
  RandomZoomOut) run as torchvision's functional kernels at what Stoker
  drew (its resolved steps).

Every pipeline ends with CenterCrop(S) (a spec ends at a fixed size),
which torchvision applies too. Coordinates must agree exactly (within
1e-9 pixels) through flips, crops and pads, and within 1e-4 of the canvas
through resizes and warps (torchvision scales in float32: its ratios are
rounded to float32 even for float64 boxes); the canvases exactly.

usage: targets_oracle.py [DRAWS]; ends with
`targets oracle: N draws, M boxes, K keypoints, all within bounds`.
"""

from __future__ import annotations

import json
import random
import sys

import torch
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from stoker import _stoker

S = 64  # the final CenterCrop(S)


def draw_targets(rng: random.Random, w: int, h: int):
    n = rng.randint(0, 6)
    boxes = []
    for _ in range(n):
        # On a quarter-pixel grid: exact in float32 and float64 alike.
        x1, x2 = sorted(rng.randint(0, 4 * w) / 4 for _ in range(2))
        y1, y2 = sorted(rng.randint(0, 4 * h) / 4 for _ in range(2))
        boxes.append([x1, y1, x2, y2])
    k = rng.choice([0, 3])
    points = [[[rng.randint(0, 4 * w) / 4, rng.randint(0, 4 * h) / 4, 2.0] for _ in range(k)] for _ in boxes]
    return boxes, points if k and boxes else None


def draw_op(rng: random.Random, w: int, h: int):
    """(stoker op JSON, torchvision transform or None, needs Stoker's steps)."""
    kind = rng.choice(
        ["hflip", "vflip", "resize", "center_crop", "pad", "rotate", "rotate_expand", "affine", "rrc", "crop", "zoom_out"]
        + ["iou_crop", "scale_jitter", "shortest_size", "fixed_size_crop"]
    )
    if kind == "hflip":
        return {"op": "RandomHorizontalFlip", "p": 1.0}, v2.RandomHorizontalFlip(p=1.0)
    if kind == "vflip":
        return {"op": "RandomVerticalFlip", "p": 1.0}, v2.RandomVerticalFlip(p=1.0)
    if kind == "resize":
        size = [rng.randint(8, 300), rng.randint(8, 300)]
        return {"op": "Resize", "size": size}, v2.Resize(size)
    if kind == "center_crop":
        size = [rng.randint(4, h + 40), rng.randint(4, w + 40)]
        return {"op": "CenterCrop", "size": size}, v2.CenterCrop(size)
    if kind == "pad":
        padding = [rng.randint(0, 30) for _ in range(4)]
        return {"op": "Pad", "padding": padding}, v2.Pad(padding)
    if kind in ("rotate", "rotate_expand"):
        angle = rng.uniform(-180, 180)
        expand = kind == "rotate_expand"
        center = None if rng.random() < 0.5 or expand else [rng.uniform(0, w), rng.uniform(0, h)]
        op = {"op": "RandomRotation", "degrees": [angle, angle], "expand": expand, "center": center}
        return op, v2.RandomRotation([angle, angle], expand=expand, center=center)
    if kind == "affine":
        angle = rng.uniform(-90, 90)
        scale = rng.uniform(0.5, 1.5)
        sx, sy = rng.uniform(-30, 30), rng.uniform(-30, 30)
        op = {"op": "RandomAffine", "degrees": [angle, angle], "scale": [scale, scale], "shear": [sx, sx, sy, sy]}
        return op, v2.RandomAffine([angle, angle], scale=(scale, scale), shear=[sx, sx, sy, sy])
    if kind == "zoom_out":
        lo = rng.uniform(1.0, 2.0)
        return {"op": "RandomZoomOut", "side_range": [lo, lo + rng.uniform(0.0, 2.0)], "p": 1.0}, None
    if kind == "iou_crop":
        options = rng.choice([None, [0.0, 0.1, 0.3], [0.5, 0.7]])
        return {"op": "RandomIoUCrop", "min_scale": rng.uniform(0.2, 0.6), "sampler_options": options}, None
    if kind == "scale_jitter":
        target = [rng.randint(16, 300), rng.randint(16, 300)]
        return {"op": "ScaleJitter", "target_size": target, "scale_range": [0.2, 1.5]}, None
    if kind == "shortest_size":
        sizes = [rng.randint(8, 200) for _ in range(rng.randint(1, 4))]
        max_size = rng.choice([None, max(sizes) + rng.randint(1, 100)])
        return {"op": "RandomShortestSize", "min_size": sizes, "max_size": max_size}, None
    if kind == "fixed_size_crop":
        return {"op": "FixedSizeCrop", "size": [rng.randint(4, h + 40), rng.randint(4, w + 40)], "fill": 9}, None
    if kind == "rrc":
        return {"op": "RandomResizedCrop", "size": rng.randint(8, 200)}, None
    size = [rng.randint(4, h + 20), rng.randint(4, w + 20)]
    padding = rng.choice([None, rng.randint(1, 12)])
    return {"op": "RandomCrop", "size": size, "padding": padding, "pad_if_needed": True}, None


def check_draw(op, drawn, w, h, boxes):
    """Why the sizes and offsets Stoker drew are not ones torchvision's
    `make_params` could draw for `op`, or None."""
    name = op["op"]
    resize = next(((s[2]) for s in drawn if s[0] == "crop_resize"), (w, h))
    if name == "ScaleJitter":
        a, b = op["target_size"]
        base = min(b / h, a / w)
        lo, hi = op["scale_range"]
        # int(side * base * scale): the scale must explain both sides.
        ok = any(int(w * base * s) == resize[0] and int(h * base * s) == resize[1]
                 for s in [lo + (hi - lo) * i / 20000 for i in range(20001)])
        return None if ok else f"size {resize} is no int(side * {base:.4f} * scale) for a scale in {op['scale_range']}"
    if name == "RandomShortestSize":
        sizes = []
        for m in op["min_size"]:
            r = m / min(h, w)
            if op["max_size"] is not None:
                r = min(r, op["max_size"] / max(h, w))
            sizes.append((max(1, int(w * r)), max(1, int(h * r))))
        return None if tuple(resize) in sizes else f"size {resize} is none of {sizes}"
    if name == "RandomIoUCrop" and drawn:
        (left, top, cw, ch), out = drawn[0][1], drawn[0][2]
        if tuple(out) != (cw, ch) or left < 0 or top < 0 or left + cw > w or top + ch > h:
            return f"crop {drawn[0]} is not a crop inside the image"
        if not (0.5 <= cw / ch <= 2.0 and cw >= int(w * op["min_scale"]) and ch >= int(h * op["min_scale"])):
            return f"crop {drawn[0]} is outside the scale and aspect limits"
        centres = [((b[0] + b[2]) / 2, (b[1] + b[3]) / 2) for b in boxes]
        if not any(left < x < left + cw and top < y < top + ch for x, y in centres):
            return f"crop {drawn[0]} holds no box's centre"
    return None


def from_steps(steps, boxes, points):
    """torchvision's kernels at the steps Stoker resolved (crops and pads)."""
    out = [boxes, points]
    for step in steps:
        name = step[0]
        for i, t in enumerate(out):
            if t is None:
                continue
            if name == "crop_resize":
                (left, top, cw, ch), (ow, oh) = step[1], step[2]
                if (left, top, cw, ch) != (0, 0, *reversed(t.canvas_size)):
                    t = F.crop(t, top=top, left=left, height=ch, width=cw)
                if (ow, oh) != (cw, ch):
                    t = F.resize(t, [oh, ow])
            elif name == "pad":
                t = F.pad(t, list(step[1]))
            elif name == "flip_horizontal":
                t = F.horizontal_flip(t)
            elif name == "flip_vertical":
                t = F.vertical_flip(t)
            else:
                raise AssertionError(f"unexpected step {step}")
            out[i] = t
    return out


def main() -> int:
    draws = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    rng = random.Random(20261129)
    failures = []
    n_boxes = n_points = bad_draws = canvas_quirks = 0
    for draw in range(draws):
        w, h = rng.randint(8, 240), rng.randint(8, 240)
        boxes, points = draw_targets(rng, w, h)
        op, reference = draw_op(rng, w, h)
        spec = json.dumps({"ops": [op, {"op": "CenterCrop", "size": S}]})
        seed = rng.getrandbits(63)
        ours = _stoker.follow_targets(spec, S, w, h, seed, boxes, "XYXY", points)
        tb = tv_tensors.BoundingBoxes(
            torch.tensor(boxes, dtype=torch.float64).reshape(-1, 4), format="XYXY", canvas_size=(h, w)
        )
        tk = None
        if points is not None:
            xy = [[p[:2] for p in inst] for inst in points]
            tk = tv_tensors.KeyPoints(
                torch.tensor(xy, dtype=torch.float64).reshape(len(points), -1, 2), canvas_size=(h, w)
            )
        steps = ours["steps"]
        kept = list(range(len(boxes)))  # which instances torchvision keeps, in order
        if reference is None:
            # The drawn op's steps as Stoker resolved them (the final
            # CenterCrop's come after them), through torchvision's kernels.
            drawn = steps[: ours["before_last"]]
            problem = check_draw(op, drawn, w, h, boxes)
            if problem:
                failures.append(f"draw {draw} {op} on {w}x{h}: {problem}")
            if op["op"] == "RandomIoUCrop" and drawn:
                (left, top, cw, ch), _ = drawn[0][1], drawn[0][2]
                centre = [((b[0] + b[2]) / 2, (b[1] + b[3]) / 2) for b in boxes]
                outside = [not (left < x < left + cw and top < y < top + ch) for x, y in centre]
                tb, tk = from_steps(drawn, tb, tk)
                # torchvision's mark for a later SanitizeBoundingBoxes.
                tb[torch.tensor(outside, dtype=torch.bool)] = 0
            elif op["op"] == "FixedSizeCrop":
                # The references' FixedSizeCrop: the crop (translate and
                # clamp), boxes left empty dropped, then padding right and
                # bottom, which moves nothing.
                crops = [s for s in drawn if s[0] == "crop_resize"]
                tb, tk = from_steps(crops, tb, tk)
                plain = tb.as_subclass(torch.Tensor).reshape(-1, 4)
                valid = (plain[:, 0] < plain[:, 2]) & (plain[:, 1] < plain[:, 3])
                kept = [i for i, v in zip(kept, valid.tolist()) if v]
                height, width = (op["size"] * 2)[:2] if isinstance(op["size"], int) else op["size"]
                tb = tv_tensors.BoundingBoxes(plain[valid], format="XYXY", canvas_size=(height, width))
                if tk is not None:
                    tk = tv_tensors.KeyPoints(tk.as_subclass(torch.Tensor)[valid], canvas_size=(height, width))
            else:
                tb, tk = from_steps(drawn, tb, tk)
        else:
            tb, tk = (reference(tb), None) if tk is None else reference(tb, tk)
            if op.get("expand"):
                # torchvision sizes the boxes' canvas after an expanding
                # rotation in float32 with a 1e-4 tolerance, PIL the image
                # in float64: where an extent is within that of a whole
                # pixel they differ by one, and torchvision's boxes then
                # sit on a canvas that is not their image's. Stoker keeps
                # the image's canvas (docs/detection.md): such draws are
                # counted, and compared with torchvision's boxes put on the
                # image's canvas.
                w2, h2 = next(s[2] for s in steps if s[0] == "affine")
                if tuple(tb.canvas_size) != (h2, w2):
                    canvas_quirks += 1
                    plain = F.clamp_bounding_boxes(
                        tb.as_subclass(torch.Tensor), format="XYXY", canvas_size=(h2, w2), clamping_mode="soft"
                    )
                    tb = tv_tensors.BoundingBoxes(plain, format="XYXY", canvas_size=(h2, w2))
                    if tk is not None:
                        tk = tv_tensors.KeyPoints(tk.as_subclass(torch.Tensor), canvas_size=(h2, w2))
        tb = F.center_crop(tb, [S, S])
        tk = None if tk is None else F.center_crop(tk, [S, S])
        if ours["labels"] != kept:
            failures.append(f"draw {draw} {op}: kept instances {ours['labels']}, torchvision's {kept}")
            bad_draws += 1
            continue
        scaled = op["op"] in ("RandomRotation", "RandomAffine", "Resize", "RandomResizedCrop", "ScaleJitter", "RandomShortestSize")
        bound = 1e-4 * S if scaled else 1e-9
        failed = len(failures)
        got_canvas = tuple(ours["canvas"])
        if got_canvas != (S, S):
            failures.append(f"draw {draw} {op}: canvas {got_canvas}")
        got = torch.tensor(ours["boxes"], dtype=torch.float64).reshape(-1, 4)
        want = tb.as_subclass(torch.Tensor).reshape(-1, 4)
        err = (got - want).abs().max().item() if got.numel() else 0.0
        if err > bound:
            failures.append(f"draw {draw} {op} on {w}x{h}: boxes differ by {err:.3g}\n  stoker {got.tolist()}\n  tv     {want.tolist()}")
        n_boxes += len(boxes)
        if points is not None:
            gotk = torch.tensor([[p[:2] for p in inst] for inst in ours["keypoints"]], dtype=torch.float64)
            wantk = tk.as_subclass(torch.Tensor).reshape(gotk.shape)
            errk = (gotk - wantk).abs().max().item() if gotk.numel() else 0.0
            if errk > bound:
                failures.append(f"draw {draw} {op} on {w}x{h}: keypoints differ by {errk:.3g}")
            n_points += gotk.numel() // 2
        bad_draws += len(failures) > failed
    for f in failures[:20]:
        print(f)
    if failures:
        print(f"targets oracle: {bad_draws} of {draws} draws outside their bounds")
        return 1
    print(
        f"targets oracle: {draws} draws, {n_boxes} boxes, {n_points} keypoints, all within bounds "
        f"({canvas_quirks} expanding rotations where torchvision's box canvas is a pixel off its image's, "
        "compared on the image's)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
