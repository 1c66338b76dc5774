"""Checks the package as a PyTorch user meets it, with torch and
torchvision installed and no worker started by hand: a Loader with
`workers="local"` and a torchvision v2 Compose is an IterableDataset that
`torch.utils.data.DataLoader(loader, batch_size=None)` iterates, and an
epoch through it delivers every sample exactly once as float tensors.

usage: torch_local_check.py SHARDS_DIR EXPECTED_TSV
"""

import gc
import sys
import weakref

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
    try:
        next(iter(DataLoader(loader)))
    except stoker.ConfigError as e:
        assert "batch_size=None" in str(e), e
    else:
        raise AssertionError("DataLoader(loader) without batch_size=None must refuse, not yield [1, B, ...]")
    assert isinstance(stoker.__version__, str) and stoker.__version__[0].isdigit(), stoker.__version__
    checked = check_devices(shards)
    dropped = check_dropped_loader_is_collected(shards)
    print(
        f"torch: DataLoader(loader, batch_size=None) over local workers: {len(seen)} samples exactly once; "
        f"DataLoader(loader) refused; stoker {stoker.__version__}; {checked}; {dropped}"
    )


def check_dropped_loader_is_collected(shards):
    """A Loader iterated directly in a function and deleted there is gone
    at once (its worker processes and device memory with it), not kept
    until the function returns: the check for `DataLoader(loader)` reads
    only a fetcher frame's locals, never the caller's (a snapshot of them
    would hold the Loader)."""
    loader = stoker.Loader(workers="local", dataset=shards, batch_size=8, image_size=32, local_threads=1)
    gone = weakref.ref(loader)
    n = 0
    for batch in loader:
        n += len(batch["key"])
    assert n > 0
    del loader, batch
    gc.collect()
    assert gone() is None, [type(r).__name__ for r in gc.get_referrers(gone())]
    return f"a deleted loader is collected in the function that iterated it ({n} samples)"


def check_devices(shards):
    """On a machine where torch sees no GPU, a CUDA device is a ConfigError
    naming why (never torch's RuntimeError, never a Rust panic, which
    `except Exception` would miss); a string torch cannot parse too."""
    refused = []
    devices = ["not-a-device"] + ([] if torch.cuda.is_available() else ["cuda", "cuda:0", "cuda:1"])
    for device in devices:
        try:
            stoker.Loader(workers="local", dataset=shards, batch_size=8, image_size=32, device=device)
        except stoker.ConfigError as e:
            assert device in str(e), e
            refused.append(device)
        else:
            raise AssertionError(f"device={device!r} was accepted")
    return f"device refused with ConfigError: {', '.join(refused)}"


if __name__ == "__main__":
    main()
