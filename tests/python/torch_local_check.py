"""Checks the package as a PyTorch user meets it, with torch and
torchvision installed and no worker started by hand: a Loader with
`workers="local"` and a torchvision v2 Compose is an IterableDataset that
`torch.utils.data.DataLoader(loader, batch_size=None)` iterates, and an
epoch through it delivers every sample exactly once as float tensors.

usage: torch_local_check.py SHARDS_DIR EXPECTED_TSV
"""

import sys

import torch
from torch.utils.data import DataLoader, IterableDataset
from torchvision.transforms import v2

import stoker


def main():
    shards, tsv = sys.argv[1], sys.argv[2]
    expected = dict(line.rstrip("\n").split("\t") for line in open(tsv))
    transform = v2.Compose(
        [
            v2.RandomResizedCrop(32),
            v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )
    loader = stoker.Loader(workers="local", dataset=shards, batch_size=8, transform=transform, local_threads=1)
    assert isinstance(loader, IterableDataset), type(loader).__mro__
    seen = {}
    for batch in DataLoader(loader, batch_size=None):
        image = batch["image"]
        assert image.dtype == torch.float32 and image.shape[1:] == (3, 32, 32), (image.dtype, image.shape)
        assert image.min() < 0, "normalised"
        for key, label in zip(batch["key"], batch["label"].tolist()):
            assert key not in seen, f"{key} twice"
            seen[key] = str(label)
    assert seen == expected, f"{len(seen)} samples, expected {len(expected)}"
    try:
        list(DataLoader(loader, batch_size=None, num_workers=1))
    except Exception as e:  # torch re-raises a worker's error as its own type
        assert "batch_size=None" in str(e), e
    else:
        raise AssertionError("a Loader iterated in a DataLoader worker process must refuse")
    print(f"torch: DataLoader(loader, batch_size=None) over local workers: {len(seen)} samples exactly once")


if __name__ == "__main__":
    main()
