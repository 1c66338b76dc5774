"""Detection targets through the Python loader: a `targets` field arrives
as a list of torchvision-style dicts, one per image, of numpy arrays
(tensors with torch): `boxes` float32 [N, 4], `labels` int64 [N], with
`format` and `canvas_size`. With Resize([64, 64]) and a certain
horizontal flip, each image's boxes are its JSON's (XYWH) scaled and
mirrored, which this script computes from the shard itself.

usage: targets_check.py WORKER DATASET
"""

import io
import json
import sys
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

import stoker
from stoker import transforms as T

S = 64


def main() -> None:
    worker, dataset = sys.argv[1:3]
    docs, sizes = {}, {}
    for shard in sorted(Path(dataset).glob("*.tar")):
        with tarfile.open(shard) as tar:
            for m in tar.getmembers():
                key, ext = m.name.split(".", 1)
                data = tar.extractfile(m).read()
                if ext == "json":
                    docs[key] = json.loads(data)
                else:
                    sizes[key] = Image.open(io.BytesIO(data)).size
    pipeline = T.Compose([T.Resize([S, S]), T.RandomHorizontalFlip(p=1.0)])
    loader = stoker.Loader([worker], dataset, batch_size=4, transform=pipeline, last_batch="partial",
                           rank=0, world_size=1, fields={"targets": stoker.Field("json", "targets")})
    seen = 0
    for batch in loader:
        targets = batch["targets"]
        assert isinstance(targets, list) and len(targets) == len(batch["key"]), type(targets)
        for key, t in zip(batch["key"], targets):
            doc, (w, h) = docs[key], sizes[key]
            want = np.array([[x, y, x + bw, y + bh] for x, y, bw, bh in doc["boxes"]], dtype=np.float64)
            want *= [S / w, S / h, S / w, S / h]
            want = np.stack([S - want[:, 2], want[:, 1], S - want[:, 0], want[:, 3]], axis=1)
            # Delivered in the dataset's format, XYWH.
            want[:, 2:] -= want[:, :2]
            boxes, labels = t["boxes"], t["labels"]
            assert boxes.dtype == np.float32 and boxes.shape == (len(doc["boxes"]), 4), (boxes.dtype, boxes.shape)
            assert labels.dtype == np.int64 and labels.tolist() == doc["labels"], (labels, doc["labels"])
            assert np.abs(boxes - want).max() < 1e-4, (key, boxes, want)
            assert t["format"] == "XYWH" and tuple(t["canvas_size"]) == (S, S), (t["format"], t["canvas_size"])
            seen += 1
    # The shard's last sample has a box outside its image: skipped, named.
    assert seen == len(docs) - 1, (seen, len(docs))
    reasons = loader.report()["skip_reasons"]
    assert len(reasons) == 1 and "reaches outside the image" in reasons[0][1], reasons
    print(f"targets check: {seen} images' targets as torchvision dicts, boxes as computed from their JSON")


if __name__ == "__main__":
    main()
