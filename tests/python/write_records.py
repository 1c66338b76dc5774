"""Writes image-text shards with each ecosystem's own writer, and the
record of what was written, for the integration tests of fields.

    write_records.py wds IMAGE_FOLDER OUT_DIR MANIFEST
        LAION-style WebDataset shards (webdataset.TarWriter): per sample
        <key>.jpg, <key>.cls, <key>.txt (a caption of about 100 bytes),
        <key>.json (about 300 bytes of metadata) and <key>.labels (a
        multi-label, as text). Sample 3 has no caption, sample 5's caption
        is not UTF-8, sample 7's JSON is malformed.
    write_records.py parquet IMAGE_FOLDER OUT_DIR MANIFEST
        Parquet shards as Hugging Face publishes them (datasets.Dataset
        with an Image() and a ClassLabel feature, to_parquet): and the
        columns caption (string; null in row 2), labels (Sequence of int64)
        and box (Sequence of float32).
    write_records.py tfrecord IMAGE_FOLDER OUT_DIR MANIFEST
        TFRecord shards (the tfrecord package): image/encoded,
        image/class/label, and the extra features caption (bytes),
        labels (an int64 list of 1 to 3 values) and box (float list).

MANIFEST is JSON: {"complete": {key: {"caption", "meta", "labels", "box",
"label"}}, "incomplete": {key: reason_kind}}.
"""

import json
import os
import sys


def images(src):
    classes = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    out = []
    for label, cls in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(src, cls))):
            with open(os.path.join(src, cls, name), "rb") as f:
                out.append((f"{cls}/{os.path.splitext(name)[0]}", label, f.read()))
    return out


def caption(i):
    base = f"a photo of sample {i}, caption with unicode \u00e9\u00e8\u4e2d and padding "
    return (base * 3)[:100]


def meta(i):
    return {"id": i, "width": 96, "height": 72, "source": "synthetic", "tags": [f"t{i % 5}", "x" * 40],
            "similarity": 0.25 + i / 1000, "note": "y" * 150}


def labels(i):
    return [i % 7, (i * 3) % 11, 42]


class StdlibTarWriter:
    """webdataset.TarWriter's layout (members <key>.<ext> in sample order,
    str encoded as UTF-8, int as its decimal text) with the standard
    library, where webdataset is not installed (the GPU machine)."""

    def __init__(self, path):
        import tarfile
        self.tar = tarfile.open(path, "w")

    def write(self, sample):
        import io
        import tarfile
        key = sample["__key__"]
        for ext, value in sample.items():
            if ext == "__key__":
                continue
            data = value if isinstance(value, bytes) else str(value).encode()
            info = tarfile.TarInfo(f"{key}.{ext}")
            info.size = len(data)
            self.tar.addfile(info, io.BytesIO(data))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.tar.close()


def write_wds(src, out, manifest):
    try:
        import webdataset as wds
        writer = wds.TarWriter
    except ImportError:
        writer = StdlibTarWriter
    os.makedirs(out, exist_ok=True)
    complete, incomplete = {}, {}
    samples = images(src)
    per_shard = max(1, len(samples) // 3)
    for shard, start in enumerate(range(0, len(samples), per_shard)):
        with writer(os.path.join(out, f"laion-{shard:06d}.tar")) as sink:
            for i in range(start, min(start + per_shard, len(samples))):
                key, label, data = samples[i]
                sample = {"__key__": key, "jpg": data, "cls": label, "labels": " ".join(map(str, labels(i)))}
                cap, m = caption(i), json.dumps(meta(i))
                if i == 3:
                    incomplete[key] = "missing_field"
                elif i == 5:
                    sample["txt"] = b"\xff\xfe not utf-8"
                    incomplete[key] = "bad_field"
                else:
                    sample["txt"] = cap
                if i == 7:
                    sample["json"] = m[:-5].encode()
                    incomplete.setdefault(key, "bad_field")
                else:
                    sample["json"] = m
                if key not in incomplete:
                    complete[key] = {"caption": cap, "meta": meta(i), "labels": labels(i), "label": label}
                sink.write(sample)
    with open(manifest, "w") as f:
        json.dump({"complete": complete, "incomplete": incomplete}, f)


def write_tfrecord(src, out, manifest):
    from tfrecord import TFRecordWriter
    os.makedirs(out, exist_ok=True)
    complete = {}
    samples = images(src)
    per_shard = max(1, len(samples) // 2)
    for shard, start in enumerate(range(0, len(samples), per_shard)):
        writer = TFRecordWriter(os.path.join(out, f"records-{shard:05d}.tfrecord"))
        for i in range(start, min(start + per_shard, len(samples))):
            key, label, data = samples[i]
            box = [0.125 * (i % 4), 0.5, 0.75, 1.0]
            # A ragged multi-label: 1 to 3 labels.
            ragged = labels(i)[: 1 + i % 3]
            writer.write({
                "image/encoded": (data, "byte"),
                "image/class/label": (label, "int"),
                "image/filename": (key.encode(), "byte"),
                "caption": (caption(i).encode(), "byte"),
                "labels": (ragged, "int"),
                "box": (box, "float"),
            })
            complete[key] = {"caption": caption(i), "labels": ragged, "box": box, "label": label}
        writer.close()
    with open(manifest, "w") as f:
        json.dump({"complete": complete, "incomplete": {}}, f)


def write_parquet(src, out, manifest):
    from datasets import ClassLabel, Dataset, Features, Image, Sequence, Value
    os.makedirs(out, exist_ok=True)
    samples = images(src)
    classes = sorted({k.split("/")[0] for k, _, _ in samples})
    complete, incomplete = {}, {}
    per_shard = max(1, len(samples) // 2)
    for shard, start in enumerate(range(0, len(samples), per_shard)):
        rows = {"image": [], "label": [], "caption": [], "labels": [], "box": []}
        for i in range(start, min(start + per_shard, len(samples))):
            key, label, data = samples[i]
            box = [0.125 * (i % 4), 0.5, 0.75, 1.0]
            cap = None if i == 2 else caption(i)
            rows["image"].append({"bytes": data, "path": key})
            rows["label"].append(label)
            rows["caption"].append(cap)
            rows["labels"].append(labels(i))
            rows["box"].append(box)
            if cap is None:
                incomplete[key] = "missing_field"
            else:
                complete[key] = {"caption": cap, "labels": labels(i), "box": box, "label": label}
        features = Features({"image": Image(), "label": ClassLabel(names=classes), "caption": Value("string"),
                             "labels": Sequence(Value("int64")), "box": Sequence(Value("float32"))})
        Dataset.from_dict(rows, features=features).to_parquet(os.path.join(out, f"train-{shard}.parquet"))
    with open(manifest, "w") as f:
        json.dump({"complete": complete, "incomplete": incomplete}, f)


def main():
    kind, src, out, manifest = sys.argv[1:5]
    {"wds": write_wds, "tfrecord": write_tfrecord, "parquet": write_parquet}[kind](src, out, manifest)


if __name__ == "__main__":
    main()
