"""Writes Parquet shards from an ImageFolder tree the way Hugging Face
publishes image datasets: a `datasets.Dataset` with an `Image()` feature
(struct of `bytes` and `path`) and a `ClassLabel`, saved with
`Dataset.to_parquet` (pyarrow underneath).

An independent writer for the integration tests. Labels are 0-based class
indices (sorted class folders); each image's path is `<class>/<stem>`, the
key WebDataset shards of the same tree use. Shards are `train-<i>.parquet`,
with ROWS_PER_GROUP rows in each row group.

usage: write_parquet.py IMAGE_FOLDER OUT_DIR SHARDS ROWS_PER_GROUP
           [--not-image SHARD:ROW] [--null-image SHARD:ROW] [--binary]

--not-image writes text in that row's image bytes, --null-image writes a
null image; --binary writes the image column as plain binary (pyarrow
alone, no path) named `jpeg`, with an int64 `class`. Prints one JSON line:
per shard, its name, size, each row's key, and each row group's row count
and bytes (its column chunks, compressed).
"""

import argparse
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
from datasets import ClassLabel, Dataset, Features, Image

from image_folder import read_image_folder


def spot(value):
    return tuple(map(int, value.split(":"))) if value else None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("src")
    p.add_argument("out")
    p.add_argument("shards", type=int)
    p.add_argument("rows_per_group", type=int)
    p.add_argument("--not-image", type=spot)
    p.add_argument("--null-image", type=spot)
    p.add_argument("--binary", action="store_true")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    classes, samples = read_image_folder(a.src)
    per_shard = -(-len(samples) // a.shards)
    shards = []
    for shard in range(a.shards):
        rows = samples[shard * per_shard : (shard + 1) * per_shard]
        images, labels, keys = [], [], []
        for i, (key, data, label) in enumerate(rows):
            if (shard, i) == a.not_image:
                data = b"this is not an image"
            image = None if (shard, i) == a.null_image else {"bytes": data, "path": key}
            images.append(image)
            labels.append(label)
            keys.append(key)
        name = f"train-{shard}.parquet"
        path = os.path.join(a.out, name)
        if a.binary:
            table = pa.table(
                {
                    "jpeg": pa.array([None if im is None else im["bytes"] for im in images], pa.binary()),
                    "class": pa.array(labels, pa.int64()),
                }
            )
            pq.write_table(table, path, row_group_size=a.rows_per_group)
        else:
            features = Features({"image": Image(), "label": ClassLabel(names=classes)})
            ds = Dataset.from_dict({"image": images, "label": labels}, features=features)
            ds.to_parquet(path, batch_size=a.rows_per_group)
        meta = pq.ParquetFile(path).metadata
        groups = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        group_bytes = [
            sum(meta.row_group(g).column(c).total_compressed_size for c in range(meta.num_columns))
            for g in range(meta.num_row_groups)
        ]
        shards.append(
            {
                "name": name,
                "size": os.path.getsize(path),
                "keys": keys,
                "row_groups": groups,
                "group_bytes": group_bytes,
            }
        )
    print(json.dumps({"shards": shards}))


if __name__ == "__main__":
    main()
