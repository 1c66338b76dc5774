"""Writes TFRecord shards from an ImageFolder tree with the `tfrecord`
package's TFRecordWriter, in the layout of TensorFlow's ImageNet shards.

An independent writer for the integration tests: one tf.train.Example per
image with `image/encoded` (the JPEG), `image/class/label` (1-based, as
TensorFlow's ImageNet has it: sorted class folder + 1) and `image/filename`
(<class>/<stem>, the key WebDataset shards of the same tree use). Shards are
named like TensorFlow's, `train-00000-of-00003`, with SUFFIX appended.

usage: write_tfrecord.py IMAGE_FOLDER OUT_DIR SHARDS [SUFFIX]
           [--corrupt SHARD:RECORD] [--not-image SHARD:RECORD] [--truncate SHARD]

--corrupt flips one byte of a record's data after writing (its data
checksum no longer matches), --not-image writes text in that record's
image/encoded, --truncate cuts that shard in the middle of its last record.
Prints one JSON line: per shard, its name and each record's byte offset.
"""

import argparse
import json
import os

from tfrecord import TFRecordWriter

from image_folder import read_image_folder


def records(path):
    """Byte offsets and lengths of each record of a TFRecord file."""
    out = []
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    while at < len(data):
        length = int.from_bytes(data[at : at + 8], "little")
        out.append((at, length))
        at += 8 + 4 + length + 4
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("src")
    p.add_argument("out")
    p.add_argument("shards", type=int)
    p.add_argument("suffix", nargs="?", default="")
    p.add_argument("--corrupt")
    p.add_argument("--not-image")
    p.add_argument("--truncate", type=int)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    _, samples = read_image_folder(a.src)
    # TensorFlow's ImageNet labels are 1-based.
    samples = [(key, data, label + 1) for key, data, label in samples]
    not_image = tuple(map(int, a.not_image.split(":"))) if a.not_image else None
    names = []
    per_shard = -(-len(samples) // a.shards)
    for shard in range(a.shards):
        name = f"train-{shard:05d}-of-{a.shards:05d}{a.suffix}"
        names.append(name)
        writer = TFRecordWriter(os.path.join(a.out, name))
        for i, (key, jpeg, label) in enumerate(samples[shard * per_shard : (shard + 1) * per_shard]):
            image = b"this is not an image" if not_image == (shard, i) else jpeg
            writer.write(
                {
                    "image/encoded": (image, "byte"),
                    "image/class/label": (label, "int"),
                    "image/filename": (key.encode(), "byte"),
                }
            )
        writer.close()
    if a.corrupt:
        shard, record = map(int, a.corrupt.split(":"))
        path = os.path.join(a.out, names[shard])
        offset, length = records(path)[record]
        with open(path, "r+b") as f:
            f.seek(offset + 12 + length // 2)
            byte = f.read(1)
            f.seek(offset + 12 + length // 2)
            f.write(bytes([byte[0] ^ 0x5A]))
    if a.truncate is not None:
        path = os.path.join(a.out, names[a.truncate])
        offset, length = records(path)[-1]
        with open(path, "r+b") as f:
            f.truncate(offset + 12 + length // 2)
    print(json.dumps({"shards": [{"name": n, "offsets": [o for o, _ in records(os.path.join(a.out, n))]} for n in names]}))


if __name__ == "__main__":
    main()
