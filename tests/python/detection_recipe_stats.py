"""torchvision's five detection recipes, whole, through a worker, against
torchvision itself on the same images and boxes.

Each recipe is built as detection_recipes.py builds it (presets.py with
use_v2=True): hflip, multiscale, ssd and ssdlite keep each image's own
size; lsj is built at a target size of 256 instead of 1024 (the same ops
and ratios, a sixteenth of the pixels, for CI's time). Stoker runs it through `from_torchvision` on
a worker over EPOCHS epochs of IMAGES JPEGs with 1 to 9 boxes each;
torchvision runs the same Compose on the same boxes and labels, with a
blank image of the same size (its pixels move no box), TV_DRAWS times per
image; lsj's FixedSizeCrop, which the torchvision package does not ship,
is the references' behaviour written out here (REFERENCES).

- Matched draws (hflip, multiscale): the only draw that moves a box
  relative to its image is the flip (multiscale's shortest side scales
  the image and its boxes alike), so every Stoker sample's boxes, as
  fractions of its image, must equal within 1e-3 torchvision's output
  with the flip forced off or on; and the flipped fraction must be within
  4.5 standard deviations of 0.5 (binomial).
- Statistically (all five): the distributions of five statistics must be
  the same. Per image: the fraction of its boxes kept. Per kept box,
  normalised by the output canvas: area, centre x, centre y, and log
  aspect (w / h). Each is a two-sample Kolmogorov-Smirnov test at
  alpha = 1e-4 (critical D = 2.146 * sqrt(1/n + 1/m)); 25 tests, so a
  false alarm has probability under 0.25%, and every draw is seeded, so a
  run's outcome repeats.
- Power: the same tests must tell torchvision's ssd from itself with the
  zoom-out's side range (1, 2) instead of (1, 4) and the IoU crop's
  min_scale 0.5 instead of 0.3, at the same sample sizes: a test that
  cannot fail would pass that too.

usage: detection_recipe_stats.py WORKER; ends with `detection recipe
statistics: ...`.
"""

import io
import json
import math
import random
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

import stoker

sys.path.insert(0, str(Path(__file__).resolve().parent))
import detection_recipes  # noqa: E402  (the recipes, as presets.py builds them)

IMAGES, EPOCHS, TV_DRAWS = 48, 8, 16
W, H = 200, 150
ALPHA_C = 2.146  # sqrt(-ln(1e-4 / 2) / 2)


def dataset(root):
    """IMAGES JPEGs of W x H with 1 to 9 random boxes (XYWH) each, as one
    WebDataset shard with a `.json` of targets; returns the boxes by key."""
    rng = random.Random(7)
    targets = {}
    with tarfile.open(root / "shard-000000.tar", "w") as tar:
        for i in range(IMAGES):
            key = f"img{i:03d}"
            pixels = np.random.default_rng(i).integers(0, 255, (H, W, 3), dtype=np.uint8)
            buf = io.BytesIO()
            Image.fromarray(pixels).save(buf, "JPEG", quality=90)
            boxes, labels = [], []
            for _ in range(rng.randint(1, 9)):
                bw, bh = rng.uniform(8, W * 0.6), rng.uniform(8, H * 0.6)
                boxes.append([round(rng.uniform(0, W - bw), 2), round(rng.uniform(0, H - bh), 2), round(bw, 2),
                              round(bh, 2)])
                labels.append(rng.randint(1, 20))
            doc = {"boxes": boxes, "format": "XYWH", "labels": labels}
            targets[key] = doc
            for ext, data in (("jpg", buf.getvalue()), ("json", json.dumps(doc).encode())):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return targets


# The references' FixedSizeCrop, runnable (detection_recipes.py's stand-in
# has its attributes only): the crop, one draw for both offsets, boxes
# clamped and those left empty dropped with their labels, then padding on
# the right and bottom. torchvision's side runs it; from_torchvision reads
# its attributes.
REFERENCES = detection_recipes.REFERENCES.replace("class FixedSizeCrop:", """import torch
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as F


class FixedSizeCrop(torch.nn.Module):""").replace("        self.fill = fill", """        super().__init__()
        self.fill = fill""") + """
    def forward(self, image, target):
        h, w = image.shape[-2:]
        nh, nw = min(h, self.crop_height), min(w, self.crop_width)
        r = float(torch.rand(1))
        top, left = int((h - nh) * r), int((w - nw) * r)
        image = F.crop(image, top, left, nh, nw)
        boxes = F.crop(F.convert_bounding_box_format(target["boxes"], new_format="XYXY"), top, left, nh, nw)
        valid = (boxes[:, 0] < boxes[:, 2]) & (boxes[:, 1] < boxes[:, 3])
        target = dict(target, boxes=tv_tensors.wrap(boxes[valid], like=boxes), labels=target["labels"][valid])
        pad = [0, 0, self.crop_width - nw, self.crop_height - nh]
        return F.pad(image, pad, fill=0), dict(target, boxes=F.pad(target["boxes"], pad))
"""


def build(name, refs, **changes):
    """The recipe `name` as the test runs it (see the module's doc);
    `changes` replace ops' arguments (the power check)."""
    compose = detection_recipes.recipe(name, refs)
    ops = list(compose.transforms)
    if name == "lsj":
        ops[0] = v2.ScaleJitter(target_size=(256, 256), antialias=True)
        ops[1] = refs.FixedSizeCrop(size=(256, 256), fill=detection_recipes.MEAN)
    for i, op in enumerate(ops):
        if isinstance(op, v2.RandomZoomOut) and "side_range" in changes:
            ops[i] = v2.RandomZoomOut(fill=op.fill, side_range=changes["side_range"])
        if isinstance(op, v2.RandomIoUCrop) and "min_scale" in changes:
            ops[i] = v2.RandomIoUCrop(min_scale=changes["min_scale"])
    return v2.Compose(ops)


def run_torchvision(compose, doc):
    """`compose` on a blank image of W x H and the boxes and labels of
    `doc`: (boxes [N, 4], canvas (h, w)). The pixels move no box."""
    image = tv_tensors.Image(torch.zeros(3, H, W, dtype=torch.uint8))
    boxes = tv_tensors.BoundingBoxes(torch.tensor(doc["boxes"]), format="XYWH", canvas_size=(H, W))
    image, target = compose(image, {"boxes": boxes, "labels": torch.tensor(doc["labels"])})
    return torch.as_tensor(target["boxes"]).reshape(-1, 4).double(), tuple(image.shape[-2:])


def torchvision_outputs(compose, targets, draws, seed):
    """(key, boxes XYXY [N, 4], canvas (h, w)) for `draws` runs of
    `compose` on each image."""
    torch.manual_seed(seed)
    return [(key, *run_torchvision(compose, doc)) for _ in range(draws) for key, doc in targets.items()]


def stoker_outputs(compose, worker, shards):
    """(key, boxes XYXY [N, 4], canvas (h, w)) for EPOCHS epochs of
    `compose` through the worker."""
    loader = stoker.Loader([worker], str(shards), batch_size=16, transform=compose, seed=3, rank=0, world_size=1,
                           fields={"targets": stoker.Field("json", "targets")})
    out = []
    for epoch in range(EPOCHS):
        loader.set_epoch(epoch)
        for batch in loader:
            # A list of each image's tensor, or one tensor of equal images.
            for image, key, t in zip(batch["image"], batch["key"], batch["targets"]):
                out.append((key, t["boxes"].reshape(-1, 4).double(), tuple(image.shape[-2:])))
    assert len(out) == IMAGES * EPOCHS, len(out)
    return out


def statistics(outputs, targets):
    """The five statistics' samples (see the module's doc)."""
    kept, area, cx, cy, aspect = [], [], [], [], []
    for key, boxes, (h, w) in outputs:
        kept.append(len(boxes) / len(targets[key]["boxes"]))
        if len(boxes) == 0:
            continue
        bw, bh = (boxes[:, 2] - boxes[:, 0]) / w, (boxes[:, 3] - boxes[:, 1]) / h
        area += (bw * bh).tolist()
        cx += ((boxes[:, 0] + boxes[:, 2]) / (2 * w)).tolist()
        cy += ((boxes[:, 1] + boxes[:, 3]) / (2 * h)).tolist()
        aspect += torch.log(bw / bh).tolist()
    return {"kept": kept, "area": area, "centre x": cx, "centre y": cy, "log aspect": aspect}


def ks(a, b):
    """Two-sample Kolmogorov-Smirnov: (D, the critical D at alpha 1e-4)."""
    a, b = np.sort(np.asarray(a)), np.sort(np.asarray(b))
    grid = np.concatenate([a, b])
    d = np.max(np.abs(np.searchsorted(a, grid, side="right") / len(a) - np.searchsorted(b, grid, side="right") / len(b)))
    return float(d), ALPHA_C * math.sqrt(1 / len(a) + 1 / len(b))


def differences(ours, theirs):
    """The statistics whose distributions differ, with D and critical D;
    and the largest D / critical D of all."""
    out, worst = [], 0.0
    for name in ours:
        d, crit = ks(ours[name], theirs[name])
        worst = max(worst, d / crit)
        if d > crit:
            out.append(f"{name}: D {d:.3f} > {crit:.3f}")
    return out, worst


def matched(name, compose, outputs, targets):
    """hflip and multiscale: each sample's boxes are torchvision's with the
    flip forced off or on. Returns how many were flipped."""
    ops = [op for op in compose.transforms if not isinstance(op, v2.RandomShortestSize)]
    fixed = {p: v2.Compose([v2.RandomHorizontalFlip(p=p) if isinstance(op, v2.RandomHorizontalFlip) else op
                            for op in ops]) for p in (0.0, 1.0)}
    def relative(boxes, canvas):
        h, w = canvas
        return boxes / torch.tensor([w, h, w, h], dtype=boxes.dtype)

    flipped = 0
    for key, boxes, canvas in outputs:
        boxes = relative(boxes, canvas)
        want = {p: relative(*run_torchvision(c, targets[key])) for p, c in fixed.items()}
        close = {p: w.shape == boxes.shape and bool(((w - boxes).abs() <= 1e-3).all()) for p, w in want.items()}
        assert any(close.values()), f"{name} {key}: {boxes.tolist()} is neither {want[0.0].tolist()} nor {want[1.0].tolist()}"
        flipped += close[1.0] and not close[0.0]
    n = len(outputs)
    assert abs(flipped - n / 2) <= 4.5 * math.sqrt(n / 4), f"{name}: {flipped} of {n} flipped"
    return flipped


def main() -> int:
    worker = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "transforms.py").write_text(REFERENCES)
        sys.path.insert(0, d)
        import transforms as refs  # the references' FixedSizeCrop stand-in

        shards = root / "shards"
        shards.mkdir()
        targets = dataset(shards)
        lines = []
        for name in detection_recipes.WANT:
            compose = build(name, refs)
            ours = stoker_outputs(compose, worker, shards)
            theirs = torchvision_outputs(compose, targets, TV_DRAWS, seed=11)
            diff, worst = differences(statistics(ours, targets), statistics(theirs, targets))
            assert not diff, f"{name}: stoker's distribution differs from torchvision's: {'; '.join(diff)}"
            note = ""
            if name in ("hflip", "multiscale"):
                note = f", {matched(name, compose, ours, targets)} of {len(ours)} flipped, each matched"
            lines.append(f"{name} ({len(ours)} samples{note}, largest D {worst:.2f} of the critical)")

        # Power: the same tests tell a changed ssd from torchvision's own.
        changed = build("ssd", refs, side_range=(1.0, 2.0), min_scale=0.5)
        base = statistics(torchvision_outputs(build("ssd", refs), targets, EPOCHS, seed=12), targets)
        other = statistics(torchvision_outputs(changed, targets, TV_DRAWS, seed=13), targets)
        caught, _ = differences(base, other)
        assert caught, "the tests could not tell a changed ssd recipe from torchvision's"
    print(f"detection recipe statistics: {'; '.join(lines)}; the same distributions as torchvision's "
          f"(5 KS tests each, alpha 1e-4); a changed ssd is caught ({caught[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
