"""Writes a segmentation dataset whose masks mark a known shape, with
webdataset's TarWriter: per sample <key>.png (a red ellipse on a blue
ground, lossless), <key>.seg.png (a grayscale mask, 255 on the ellipse, 0
elsewhere) and <key>.cls. Sample 1 has no mask, sample 2's mask is a
different size, sample 3's mask is a palette PNG. With `jpg`, the images
are <key>.jpg (quality 95: what a GPU worker decodes on the device).
Without webdataset installed (the GPU machine), the standard library's
tarfile writes the same layout.

usage: write_masks.py OUT_DIR SAMPLES [jpg]
"""

import io
import os
import random
import sys

from PIL import Image, ImageDraw

try:
    from webdataset import TarWriter
except ImportError:
    from write_records import StdlibTarWriter as TarWriter


def encoded(img, fmt="PNG"):
    out = io.BytesIO()
    img.save(out, format=fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    return out.getvalue()


def main():
    out, n = sys.argv[1], int(sys.argv[2])
    ext = "jpg" if sys.argv[3:] == ["jpg"] else "png"
    os.makedirs(out, exist_ok=True)
    rnd = random.Random(7)
    with TarWriter(os.path.join(out, "seg-000000.tar")) as sink:
        for i in range(n):
            w, h = 160, 120
            x0, y0 = rnd.randint(5, 70), rnd.randint(5, 50)
            box = (x0, y0, x0 + rnd.randint(30, 80), y0 + rnd.randint(25, 60))
            img = Image.new("RGB", (w, h), (0, 0, 255))
            ImageDraw.Draw(img).ellipse(box, fill=(255, 0, 0))
            mask = Image.new("L", (w, h), 0)
            ImageDraw.Draw(mask).ellipse(box, fill=255)
            image = encoded(img, "JPEG" if ext == "jpg" else "PNG")
            sample = {"__key__": f"s{i:04d}", ext: image, "cls": i % 3}
            if i == 2:
                mask = mask.resize((w // 2, h // 2))
            if i == 3:
                mask = mask.convert("P")
            if i != 1:
                sample["seg.png"] = encoded(mask)
            sink.write(sample)


if __name__ == "__main__":
    main()
