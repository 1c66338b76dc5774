"""Orchestrates scripts/bench-detection.sh: Stoker against torchvision v2's
`ssd` detection recipe, per core, side by side in one run.

Images: COCO-like 640x480 JPEGs cut from ../shared/photos (procedural
without them), each with 1 to 13 generated boxes (7 on average), in one
WebDataset shard with a `.json` of targets (COCO's XYWH).

The pipeline is torchvision's references/detection `ssd` recipe (v2):
RandomPhotometricDistort, RandomZoomOut, RandomIoUCrop,
RandomHorizontalFlip, then Resize([300, 300]) (what SSD300's model does
first; Stoker batches one size), ToImage, ToDtype(float32, scale=True),
ConvertBoundingBoxFormat(XYXY), SanitizeBoundingBoxes. Stoker runs the
same torchvision object through `from_torchvision`.

- Stoker: one `stoker worker --threads 1` process; this process consumes
  batches of 32 through `stoker.Loader` (float32 conversion on the client).
- torchvision: a `DataLoader(num_workers=1, batch_size=32)` over the same
  images and targets held in memory, decoded by PIL (the recipe's backend),
  targets as `tv_tensors.BoundingBoxes`; this process consumes its batches.

Each round is one epoch of each, alternating, each from a new loader (so
neither works ahead while the other is measured), timed from its first
batch to its last; medians of the rounds and of the per-round ratios are
printed last.

usage: bench_detection.py [ROUNDS [--without OP,...]] (default 5 rounds, the
whole recipe); run by scripts/bench-detection.sh.
"""

import io
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

import numpy as np
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

import stoker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STOKER = os.path.join(ROOT, "target", "release", "stoker")
PHOTOS = os.path.join(ROOT, "..", "shared", "photos")
N, W, H, BATCH = 384, 640, 480, 32


def load_photos(folder=PHOTOS):
    """The photos to cut images from, RGB (none when the folder is not
    there: the images are then procedural)."""
    if not os.path.isdir(folder):
        return []
    return [Image.open(os.path.join(folder, f)).convert("RGB") for f in sorted(os.listdir(folder))
            if f.endswith(".jpg")]


def make_image(i, rng, photos):
    """Image `i`: (key, jpeg bytes, targets JSON), a 640x480 cut of a photo
    with 1 to 13 boxes (COCO's XYWH), drawn from `rng`."""
    if photos:
        p = photos[i % len(photos)]
        scale = rng.uniform(max(W / p.width, H / p.height), max(1.0, 2 * W / p.width))
        p = p.resize((max(W, int(p.width * scale)), max(H, int(p.height * scale))))
        x, y = rng.randint(0, p.width - W), rng.randint(0, p.height - H)
        img = p.crop((x, y, x + W, y + H))
    else:
        img = Image.fromarray(np.random.default_rng(i).integers(0, 255, (H, W, 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    boxes, labels = [], []
    for _ in range(rng.randint(1, 13)):
        bw, bh = rng.uniform(16, W / 2), rng.uniform(16, H / 2)
        bx, by = rng.uniform(0, W - bw), rng.uniform(0, H - bh)
        boxes.append([round(bx, 2), round(by, 2), round(bw, 2), round(bh, 2)])
        labels.append(rng.randint(1, 80))
    return f"img{i:05d}", buf.getvalue(), {"boxes": boxes, "format": "XYWH", "labels": labels}


def make_images(rng):
    """(key, jpeg bytes, targets JSON) for N COCO-like images."""
    photos = load_photos()
    return [make_image(i, rng, photos) for i in range(N)]


def write_shards(samples, folder, count=1):
    """`samples` as `count` WebDataset shards in `folder` (a `.jpg` and a
    `.json` of targets each)."""
    os.makedirs(folder, exist_ok=True)
    per = -(-len(samples) // count)
    for s in range(count):
        with tarfile.open(os.path.join(folder, f"shard-{s:06d}.tar"), "w") as tar:
            for key, jpeg, doc in samples[s * per:(s + 1) * per]:
                for ext, data in (("jpg", jpeg), ("json", json.dumps(doc).encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


# The recipe's ops left out (`--without RandomZoomOut,...`): where the time goes.
WITHOUT = set()


def recipe():
    ops = [v2.RandomPhotometricDistort(), v2.RandomZoomOut(), v2.RandomIoUCrop(), v2.RandomHorizontalFlip(p=0.5)]
    return v2.Compose([o for o in ops if type(o).__name__ not in WITHOUT] + [
        v2.Resize([300, 300]),
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.ConvertBoundingBoxFormat("XYXY"),
        v2.SanitizeBoundingBoxes(),
    ])


class Coco(torch.utils.data.Dataset):
    """The images and targets in memory, as torchvision's detection
    references read COCO: a PIL image and a dict of tv_tensors."""

    def __init__(self, samples):
        self.samples = samples
        self.transform = recipe()

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        _, jpeg, doc = self.samples[i]
        img = Image.open(io.BytesIO(jpeg)).convert("RGB")
        boxes = tv_tensors.BoundingBoxes(torch.tensor(doc["boxes"]), format="XYWH", canvas_size=(img.height, img.width))
        target = {"boxes": boxes, "labels": torch.tensor(doc["labels"])}
        return self.transform(img, target)


def collate(batch):
    return tuple(zip(*batch))


def timed(iterable):
    """Images per second from the first batch's arrival to the last's:
    the steady rate, without either side's start (a worker process, a
    connection)."""
    start, n = None, 0
    for images, _ in iterable:
        if start is None:
            start = time.perf_counter()
        else:
            n += len(images)
    return n / (time.perf_counter() - start), n


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    if len(sys.argv) > 3 and sys.argv[2] == "--without":
        WITHOUT.update(sys.argv[3].split(","))
        print(f"without {', '.join(sorted(WITHOUT))}")
    rng = random.Random(20261129)
    work = tempfile.mkdtemp(prefix="stoker-bench-detection-")
    worker = None
    try:
        samples = make_images(rng)
        shards = os.path.join(work, "shards")
        write_shards(samples, shards)
        boxes = sum(len(d["boxes"]) for _, _, d in samples)
        source = "cut from ../shared/photos" if os.path.isdir(PHOTOS) else "procedural"
        print(f"images: {N} JPEGs {W}x{H} ({source}), {boxes / N:.1f} boxes each on average", flush=True)

        worker = subprocess.Popen([STOKER, "worker", "--listen", "127.0.0.1:0", "--threads", "1"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        addr = worker.stdout.readline().strip().rsplit(" ", 1)[-1]
        # A new loader of each per round, so neither works ahead while the
        # other is measured.
        def stoker_epoch():
            loader = stoker.Loader([addr], shards, batch_size=BATCH, transform=recipe(), rank=0, world_size=1,
                                   fields={"targets": stoker.Field("json", "targets")})
            return timed((b["image"], b["targets"]) for b in loader)

        def torchvision_epoch():
            dl = torch.utils.data.DataLoader(Coco(samples), batch_size=BATCH, shuffle=True, num_workers=1,
                                             collate_fn=collate, prefetch_factor=4)
            return timed(dl)

        stoker_epoch()  # warm the worker up
        ours, theirs = [], []
        for r in range(rounds):
            s, _ = stoker_epoch()
            t, _ = torchvision_epoch()
            ours.append(s)
            theirs.append(t)
            print(f"round {r + 1}: stoker {s:.0f}/s, torchvision DataLoader worker {t:.0f}/s, ratio {s / t:.2f}",
                  flush=True)
        ratios = [a / b for a, b in zip(ours, theirs)]
        print()
        print(f"| ssd recipe + Resize(300), 640x480, 1 core (median of {rounds} rounds) | images/s |")
        print("| --- | --- |")
        print(f"| stoker worker, 1 thread | {statistics.median(ours):.0f} |")
        print(f"| torchvision v2 in a DataLoader worker (PIL) | {statistics.median(theirs):.0f} |")
        print(f"| ratio stoker / torchvision (median of per-round ratios) | {statistics.median(ratios):.2f}x |")
        print(f"host: {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}")
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
