"""The Python loader's fields over LAION-style WebDataset shards
(tests/python/write_records.py wds): every complete sample once, with its
caption as str, its metadata as dict and its multi-label as a [B, 3]
int64 tensor (numpy without torch); an optional caption arrives as None
with its validity mask; bad requests are refused before connecting.

usage: fields_check.py WORKER DATASET MANIFEST
"""

import json
import sys

import numpy as np

import stoker


def main() -> None:
    worker, dataset, manifest = sys.argv[1:4]
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
    print(f"ok: {len(got)} samples with caption, meta and labels")


if __name__ == "__main__":
    main()
