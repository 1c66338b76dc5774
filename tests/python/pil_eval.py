"""The reference for Stoker's `eval` transform: torchvision's
Resize(size * 256 // 224) + CenterCrop(size) on PIL images, written out as
raw uint8 HWC RGB.

torchvision is not needed: on PIL images its Resize is PIL's bilinear
resize with antialiasing, and its CenterCrop rounds the offsets with
Python's round(); both are reproduced here exactly.

usage: pil_eval.py SIZE OUT_DIR IMAGE...
"""

import os
import sys

import numpy as np
from PIL import Image


def eval_transform(img: Image.Image, size: int) -> np.ndarray:
    shorter = size * 256 // 224
    w, h = img.size
    if w <= h:
        new_w, new_h = shorter, int(shorter * h / w)
    else:
        new_w, new_h = int(shorter * w / h), shorter
    img = img.resize((new_w, new_h), Image.BILINEAR)
    top = int(round((new_h - size) / 2.0))
    left = int(round((new_w - size) / 2.0))
    img = img.crop((left, top, left + size, top + size))
    return np.asarray(img, dtype=np.uint8)


def main() -> None:
    size, out = int(sys.argv[1]), sys.argv[2]
    for path in sys.argv[3:]:
        img = Image.open(path).convert("RGB")
        arr = eval_transform(img, size)
        assert arr.shape == (size, size, 3), arr.shape
        name = os.path.splitext(os.path.basename(path))[0] + ".raw"
        with open(os.path.join(out, name), "wb") as f:
            f.write(arr.tobytes())


if __name__ == "__main__":
    main()
