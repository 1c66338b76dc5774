"""Writes MXNet RecordIO shards from an ImageFolder tree with MXNet's own
writer (mx.recordio.MXIndexedRecordIO and mx.recordio.pack), the way
im2rec lays them out: one record per image, IRHeader(flag, label, id, id2)
then the encoded image, and an .idx of `<key>\t<offset>` lines beside each
.rec.

An independent writer for the integration tests (run with MXNet 1.9.1's
Python). Labels are 0-based class indices (sorted class folders); id is the
image's index in the tree. Shards are named `train-<i>.rec`.

usage: write_recordio.py IMAGE_FOLDER OUT_DIR SHARDS
           [--multi-label SHARD:RECORD] [--not-image SHARD:RECORD]
           [--short SHARD:RECORD] [--magic SHARD:RECORD] [--truncate SHARD]
           [--no-index]

--multi-label writes that record with labels [label, 99.0] (flag 2),
--not-image writes text instead of the image, --short writes a record of
five bytes (shorter than IRHeader), --magic appends bytes holding RecordIO's
magic number at a 4-byte boundary after the JPEG (the writer splits the
record there; decoders ignore bytes after the JPEG's end), --truncate cuts
that shard in the middle of its last record, --no-index removes the .idx
files. Prints one JSON line: per shard, its name, size, and per record (in
file order) the image's key and byte offset.
"""

import argparse
import json
import os
import struct

import mxnet as mx

from image_folder import read_image_folder

MAGIC = 0xCED7230A


def spot(value):
    return tuple(map(int, value.split(":"))) if value else None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("src")
    p.add_argument("out")
    p.add_argument("shards", type=int)
    for flag in ("--multi-label", "--not-image", "--short", "--magic"):
        p.add_argument(flag, type=spot)
    p.add_argument("--truncate", type=int)
    p.add_argument("--no-index", action="store_true")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    _, samples = read_image_folder(a.src)
    per_shard = -(-len(samples) // a.shards)
    shards = []
    for shard in range(a.shards):
        name = f"train-{shard}.rec"
        rec = os.path.join(a.out, name)
        idx = os.path.join(a.out, f"train-{shard}.idx")
        writer = mx.recordio.MXIndexedRecordIO(idx, rec, "w")
        records = []
        for i, (key, jpeg, label) in enumerate(samples[shard * per_shard : (shard + 1) * per_shard]):
            here = (shard, i)
            image_id = shard * per_shard + i
            if here == a.multi_label:
                header = mx.recordio.IRHeader(0, [float(label), 99.0], image_id, 0)
            else:
                header = mx.recordio.IRHeader(0, float(label), image_id, 0)
            image = jpeg
            if here == a.not_image:
                image = b"this is not an image"
            if here == a.magic:
                # IRHeader is 24 bytes: pad the JPEG to a 4-byte boundary.
                image = jpeg + b"\0" * (-len(jpeg) % 4) + struct.pack("<I", MAGIC) + b"tail"
            packed = mx.recordio.pack(header, image)
            if here == a.short:
                packed = b"short"
            records.append({"key": key, "offset": writer.tell()})
            writer.write_idx(i, packed)
        writer.close()
        shards.append({"name": name, "records": records})
    if a.truncate is not None:
        path = os.path.join(a.out, shards[a.truncate]["name"])
        last = shards[a.truncate]["records"][-1]["offset"]
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(last + (size - last) // 2)
    if a.no_index:
        for shard in range(a.shards):
            os.remove(os.path.join(a.out, f"train-{shard}.idx"))
    for s in shards:
        s["size"] = os.path.getsize(os.path.join(a.out, s["name"]))
    print(json.dumps({"shards": shards}))


if __name__ == "__main__":
    main()
