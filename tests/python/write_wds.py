"""Writes WebDataset shards from an ImageFolder tree with webdataset.TarWriter.

An independent writer for the integration tests: keys are <class>/<stem>,
members <key>.jpg and <key>.cls, labels by sorted class folder.

usage: write_wds.py IMAGE_FOLDER OUT_DIR SAMPLES_PER_SHARD
"""

import os
import sys

import webdataset as wds


def main() -> None:
    src, out, per_shard = sys.argv[1], sys.argv[2], int(sys.argv[3])
    os.makedirs(out, exist_ok=True)
    classes = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    samples = []
    for label, cls in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(src, cls))):
            stem, ext = os.path.splitext(name)
            with open(os.path.join(src, cls, name), "rb") as f:
                samples.append({"__key__": f"{cls}/{stem}", ext.lstrip(".").lower(): f.read(), "cls": label})
    for shard, start in enumerate(range(0, len(samples), per_shard)):
        with wds.TarWriter(os.path.join(out, f"wds-{shard:06d}.tar")) as sink:
            for sample in samples[start : start + per_shard]:
                sink.write(sample)


if __name__ == "__main__":
    main()
