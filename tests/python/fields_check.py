"""The Python loader's fields over LAION-style WebDataset shards
(tests/python/write_records.py wds): every complete sample once, with its
caption as str, its metadata as dict and its multi-label as a [B, 3]
int64 tensor (numpy without torch); an optional caption arrives as None
with its validity mask; bad requests are refused before connecting.

With MASKS (tests/python/write_masks.py's shards), a mask field arrives
as a [B, 1, H, W] uint8 array of 0 and 255, where the image is red.

usage: fields_check.py WORKER DATASET MANIFEST [MASKS]
"""

import json
import sys

import numpy as np

import stoker


def main() -> None:
    worker, dataset, manifest = sys.argv[1:4]
    masks = sys.argv[4] if len(sys.argv) > 4 else None
    with open(manifest) as f:
        manifest = json.load(f)
    complete = manifest["complete"]

    def loader(**fields):
        return stoker.Loader([worker], dataset, batch_size=4, image_size=32, transform="eval",
                             last_batch="partial", rank=0, world_size=1, fields=fields)

    got = {}
    for batch in loader(caption="txt", meta="json", labels=stoker.Field("labels", "int_list")):
        labels = np.asarray(batch["labels"])
        assert labels.dtype == np.int64 and labels.shape == (len(batch["key"]), 3), (labels.dtype, labels.shape)
        for i, key in enumerate(batch["key"]):
            assert key not in got, f"{key} delivered twice"
            assert isinstance(batch["caption"][i], str) and isinstance(batch["meta"][i], dict)
            got[key] = {"caption": batch["caption"][i], "meta": batch["meta"][i], "labels": labels[i].tolist()}
    want = {k: {"caption": v["caption"], "meta": v["meta"], "labels": v["labels"]} for k, v in complete.items()}
    assert got == want, f"{len(got)} delivered, {len(want)} expected"

    missing = [k for k, why in manifest["incomplete"].items() if why == "missing_field"]
    seen = {}
    for batch in loader(caption=stoker.Field("txt", optional=True), n=stoker.Field("cls", "int", optional=True)):
        for i, key in enumerate(batch["key"]):
            seen[key] = batch["caption"][i]
        if "valid" in batch:
            assert "n" not in batch["valid"], "every sample has a cls"
    for key in missing:
        assert key in seen and seen[key] is None, key

    bad_requests = [(lambda: {"label": "txt"}, "reserved"), (lambda: {"x": stoker.Field("txt", "str8")}, "unknown field kind"),
                    (lambda: {"x": "pyd"}, "has no decoder")]
    for bad, says in bad_requests:
        try:
            stoker.Loader([worker], dataset, batch_size=4, rank=0, world_size=1, fields=bad())
        except Exception as e:  # ValueError, or the package's error type
            assert says in str(e), e
        else:
            raise AssertionError(f"{bad} accepted")
    # Views: each its own pipeline's size, NCHW; a float view normalised.
    local = '{"version": 1, "ops": [{"op": "RandomResizedCrop", "size": 24, "scale": [0.05, 0.4]}]}'
    normalised = ('{"version": 1, "ops": [{"op": "RandomResizedCrop", "size": 40}, {"op": "ToDtype", "dtype": "float32", '
                  '"scale": true}, {"op": "Normalize", "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}]}')
    views = stoker.Loader([worker], dataset, batch_size=4, image_size=32, transform="eval", last_batch="partial",
                          rank=0, world_size=1, views={"local_0": local, "local_1": local, "g": normalised})
    for batch in views:
        n = len(batch["key"])
        l0, l1, g = (np.asarray(batch["views"][k]) for k in ("local_0", "local_1", "g"))
        assert l0.shape == (n, 3, 24, 24) and l0.dtype == np.uint8, (l0.shape, l0.dtype)
        assert g.shape == (n, 3, 40, 40) and g.dtype == np.float32 and g.min() >= -2.0001 and g.max() <= 2.0001
        assert not np.array_equal(l0, l1), "two views of one pipeline draw independently"
    try:
        stoker.Loader([worker], dataset, batch_size=4, rank=0, world_size=1, views={"label": local})
    except ValueError as e:
        assert "reserved" in str(e), e
    else:
        raise AssertionError("a view named label accepted")
    if masks is not None:
        nearest = ('{"version": 1, "ops": [{"op": "RandomResizedCrop", "size": 32, "interpolation": "nearest"}, '
                   '{"op": "RandomHorizontalFlip"}]}')
        seen = 0
        for batch in stoker.Loader([worker], masks, batch_size=4, transform=nearest, last_batch="partial", rank=0,
                                   world_size=1, fields={"seg": stoker.Field("seg.png", "mask")}):
            seg, image = np.asarray(batch["seg"]), np.asarray(batch["image"])
            n = len(batch["key"])
            assert seg.shape == (n, 1, 32, 32) and seg.dtype == np.uint8, (seg.shape, seg.dtype)
            red = (image[:, 0] == 255) & (image[:, 2] == 0)
            assert np.array_equal(seg[:, 0] == 255, red), "the mask is where the image is red"
            seen += n
        assert seen == 21, seen
    # Ragged numbers (a TFRecord multi-label of 1 to 3 values) arrive as a
    # list of arrays; fixed ones (a box of 4) as one [B, 4] array.
    import os
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        here = os.path.dirname(os.path.abspath(__file__))
        images = os.path.join(tmp, "images")
        for c in range(2):
            os.makedirs(os.path.join(images, f"c{c}"))
            for i in range(6):
                from PIL import Image
                Image.new("RGB", (40, 30), (40 * i, 90 * c, 20)).save(os.path.join(images, f"c{c}", f"{i}.jpg"))
        records = os.path.join(tmp, "tfr")
        subprocess.run([sys.executable, os.path.join(here, "write_records.py"), "tfrecord", images, records,
                        os.path.join(tmp, "m.json")], check=True)
        with open(os.path.join(tmp, "m.json")) as f:
            want = json.load(f)["complete"]
        ragged = {}
        for batch in stoker.Loader([worker], records, batch_size=4, image_size=16, transform="eval", last_batch="partial",
                                   rank=0, world_size=1, fields={"labels": "labels", "box": stoker.Field("box", "float_list")}):
            lengths = {len(want[k]["labels"]) for k in batch["key"]}
            # A list when the lengths differ in the batch, else [B, K].
            assert isinstance(batch["labels"], list) == (len(lengths) > 1), (lengths, type(batch["labels"]))
            box = np.asarray(batch["box"])
            assert box.shape == (len(batch["key"]), 4) and box.dtype == np.float64, (box.shape, box.dtype)
            for key, labels in zip(batch["key"], batch["labels"]):
                ragged[key] = np.asarray(labels).tolist()
        assert ragged == {k: v["labels"] for k, v in want.items()}, ragged
    print(f"ok: {len(got)} samples with caption, meta and labels")


if __name__ == "__main__":
    main()
