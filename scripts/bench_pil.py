"""The PIL baseline for scripts/bench-cpu.sh: what a PyTorch DataLoader
worker does per image for the `train` transform, on one core.

PIL decode + torchvision's RandomResizedCrop(size) (scale 0.08-1, ratio
3/4-4/3, bilinear) + RandomHorizontalFlip, uint8 HWC out. The crop
parameters follow torchvision's get_params exactly; torchvision itself is
not needed (on PIL images it calls the same PIL operations).

usage: bench_pil.py IMAGE_DIR SIZE PASSES
prints one JSON object: images, seconds, images_per_sec
"""

import io
import json
import math
import os
import random
import sys
import time

import numpy as np
from PIL import Image


def rrc_params(width, height, rng, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = height, int(round(height * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def train_transform(data: bytes, size: int, rng: random.Random) -> np.ndarray:
    img = Image.open(io.BytesIO(data)).convert("RGB")
    top, left, h, w = rrc_params(img.width, img.height, rng)
    img = img.crop((left, top, left + w, top + h)).resize((size, size), Image.BILINEAR)
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    return np.asarray(img, dtype=np.uint8)


def main() -> None:
    root, size, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    blobs = []
    for dirpath, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            if name.lower().endswith((".jpg", ".jpeg", ".png")):
                with open(os.path.join(dirpath, name), "rb") as f:
                    blobs.append(f.read())
    rng = random.Random(0)
    done = 0
    start = time.perf_counter()
    for _ in range(passes):
        for data in blobs:
            out = train_transform(data, size, rng)
            assert out.shape == (size, size, 3)
            done += 1
    seconds = time.perf_counter() - start
    print(json.dumps({"images": done, "seconds": seconds, "images_per_sec": done / seconds}))


if __name__ == "__main__":
    main()
