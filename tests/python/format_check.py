"""The Python loader over shards of another format: one epoch with
format=FORMAT and label_offset=LABEL_OFFSET delivers every expected key
once, with its label; an unknown format is refused.

usage: format_check.py WORKER DATASET EXPECTED_TSV FORMAT LABEL_OFFSET
(EXPECTED_TSV: key<TAB>label per line)
"""

import sys

import stoker


def main() -> None:
    worker, dataset, expected_path, fmt, label_offset = sys.argv[1:6]
    with open(expected_path) as f:
        expected = dict((k, int(v)) for k, v in (line.rstrip("\n").split("\t") for line in f))
    loader = stoker.Loader(
        [worker],
        dataset,
        batch_size=8,
        image_size=32,
        transform="eval",
        format=fmt,
        label_offset=int(label_offset),
        last_batch="partial",
        rank=0,
        world_size=1,
    )
    got = {}
    for batch in loader:
        for key, label in zip(batch["key"], batch["label"]):
            assert key not in got, f"{key} delivered twice"
            got[key] = int(label)
    assert got == expected, f"{len(got)} delivered, {len(expected)} expected; differing: {set(got.items()) ^ set(expected.items())}"
    try:
        stoker.Loader([worker], dataset, batch_size=8, format="lmdb", rank=0, world_size=1)
    except Exception as e:  # the package's error type
        assert "unknown shard format" in str(e), e
    else:
        raise AssertionError("format='lmdb' was accepted")
    print(f"ok: {len(got)} samples from {fmt} through the Python loader")


if __name__ == "__main__":
    main()
