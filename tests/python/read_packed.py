"""Reads shards `stoker pack --format FORMAT` wrote with that format's own
reader, and prints one JSON line: each sample's key and label, in order.

- tfrecord: the `tfrecord` package's `tfrecord_loader`, driven by the DALI
  index written beside each shard (so the index is read too; but for a
  one-record shard, which that loader cannot index);
- recordio: MXNet's `MXIndexedRecordIO` through the `.idx`, records
  unpacked with `mx.recordio.unpack` (the key is <shard>:<index>);
- parquet: Hugging Face `datasets.Dataset.from_parquet`, which must see an
  `Image` and a `ClassLabel`; every image is decoded by PIL.

usage: read_packed.py FORMAT DIR
"""

import glob
import io
import json
import os
import sys


def main() -> None:
    fmt, root = sys.argv[1:3]
    out = []
    if fmt == "tfrecord":
        from tfrecord.reader import tfrecord_loader

        for path in sorted(glob.glob(os.path.join(root, "*.tfrecord"))):
            description = {"image/encoded": "byte", "image/class/label": "int", "image/filename": "byte"}
            index = path + ".idx"
            with open(index) as f:
                lines = len(f.read().splitlines())
            # The loader reads the index with numpy.loadtxt, which flattens
            # a one-line file: a one-record shard is read without it.
            for ex in tfrecord_loader(path, index if lines > 1 else None, description):
                assert bytes(ex["image/encoded"][:2]) in (b"\xff\xd8", b"\x89P"), "not an image"
                out.append([bytes(ex["image/filename"]).decode(), int(ex["image/class/label"][0])])
    elif fmt == "recordio":
        import mxnet as mx

        for path in sorted(glob.glob(os.path.join(root, "*.rec"))):
            rec = mx.recordio.MXIndexedRecordIO(path[: -len(".rec")] + ".idx", path, "r")
            for i in sorted(rec.keys):
                header, image = mx.recordio.unpack(rec.read_idx(i))
                assert image[:2] in (b"\xff\xd8", b"\x89P"), "not an image"
                out.append([f"{os.path.basename(path)}:{i}", int(header.label)])
            rec.close()
    elif fmt == "parquet":
        from datasets import ClassLabel, Dataset, Image

        files = sorted(glob.glob(os.path.join(root, "*.parquet")))
        ds = Dataset.from_parquet(files)
        assert isinstance(ds.features["image"], Image), ds.features
        assert isinstance(ds.features["label"], ClassLabel), ds.features
        for row in ds:
            row["image"].load()
            out.append([row["image"].filename or "", int(row["label"])])
        raw = Dataset.from_parquet(files).cast_column("image", Image(decode=False))
        for i, row in enumerate(raw):
            out[i][0] = row["image"]["path"]
    else:
        raise SystemExit(f"unknown format {fmt}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
