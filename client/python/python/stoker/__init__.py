"""Stoker: decode and augment images on remote workers, stream ready
batches into a PyTorch training job.

    loader = stoker.Loader(workers=["10.0.0.5:50051"], dataset="s3://bucket/train/",
                           batch_size=256, image_size=224, transform="train", seed=0)
    for epoch in range(90):
        for batch in loader:          # each pass over the loader is the next epoch
            images, labels = batch["image"], batch["label"]

``transform`` is a preset (``"train"``: RandomResizedCrop + horizontal
flip; ``"eval"``: Resize + CenterCrop) or a pipeline of torchvision's
transforms, which the workers run: a ``stoker.transforms`` pipeline, a
``torchvision.transforms`` (v1 or v2) one, converted as it is, or its JSON::

    from torchvision.transforms import v2
    transform = v2.Compose([v2.RandomResizedCrop(176), v2.RandomHorizontalFlip(),
                            v2.TrivialAugmentWide(), v2.PILToTensor(),
                            v2.ToDtype(torch.float32, scale=True),
                            v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
                            v2.RandomErasing(0.1)])
    loader = stoker.Loader(workers, dataset, batch_size=256, transform=transform,
                           batch_transform=v2.MixUp(num_classes=1000), device="cuda")

``batch_transform`` (``MixUp``, ``CutMix`` or a ``RandomChoice`` of them,
from ``stoker.transforms`` or torchvision v2) runs on each converted batch
in this process.

Each batch is a dict: ``image`` ``[B, 3, H, W]`` (uint8; with ``mean`` and
``std``, float32 scaled to [0, 1] then normalised, as torchvision's
``ToTensor`` + ``Normalize``; ``dtype`` picks another float type; a
pipeline's trailing ``ToDtype`` / ``ToTensor`` / ``Normalize`` sets these),
``label`` int64 ``[B]`` (soft targets float32 ``[B, num_classes]`` after
MixUp / CutMix), ``key`` a list of str. They are torch tensors when torch
is installed (on ``device``), numpy arrays otherwise.

Every sample of this rank's share of an epoch arrives exactly once, also
when workers fail; rank and world size come from torch.distributed or the
RANK / WORLD_SIZE environment variables when not given.
"""
import time
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

from . import transforms
from ._stoker import InProcessWorker
from .errors import ConfigError, StokerError
from .fields import Field

if TYPE_CHECKING:
    from .loader import Loader

__all__ = ["ConfigError", "Field", "InProcessWorker", "Loader", "StokerError", "__version__", "doctor", "transforms"]

try:
    # The installed distribution's version (Cargo.toml's, through maturin).
    __version__: str = _version("stoker")
except PackageNotFoundError:  # imported from a source tree, not installed
    __version__ = "0+unknown"



def __getattr__(name: str) -> Any:
    # The Loader (and torch, its base class with torch installed) is
    # imported when first used, so that ``python -m stoker`` and local
    # worker processes start without importing torch.
    if name == "Loader":
        from .loader import Loader

        return Loader
    raise AttributeError(f"module 'stoker' has no attribute {name!r}")


def doctor(
    loader: "Loader",
    train_step: Optional[Callable[[Dict[str, Any]], Any]] = None,
    samples: int = 2048,
    seconds: float = 2.0,
    steps: int = 10,
) -> Dict[str, Any]:
    """Finds the bottleneck of ``loader``'s input pipeline (``stoker doctor``).

    Measures, in turn: storage, each worker's decode + transform, the
    transport and this client's batch assembly (and upload), as
    ``stoker doctor`` does. With ``train_step`` (a function taking a batch
    as the loader yields it), it first times that step on one batch cached
    where the loader put it (``steps`` runs after a warm-up, synchronising
    CUDA when torch is there): the rate training would go at if data were
    free. The loader's position is kept. The result is ``stoker doctor``'s dict, plus ``train_step`` (its
    images/s), ``waiting_fraction`` (the share of step time training would
    spend waiting on the pipeline measured) and ``workers_for_target`` sized
    for the step's rate.
    """
    target = None
    step_rate = None
    if train_step is not None:
        # One batch of the next epoch; the loader's position is kept.
        saved = loader.state_dict()
        batches = iter(loader)
        batch = next(batches)
        batches.close()
        loader.load_state_dict(saved)
        torch = loader._torch
        cuda = torch is not None and torch.cuda.is_available()
        n = len(batch["label"])
        train_step(batch)  # warm-up
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(int(steps)):
            train_step(batch)
        if cuda:
            torch.cuda.synchronize()
        step_rate = int(steps) * n / max(time.perf_counter() - started, 1e-9)
        target = step_rate
    # A plain dict: the step's measurements join the extension's.
    result: Dict[str, Any] = dict(loader._client.doctor(int(samples), float(seconds), target))
    if step_rate is not None:
        result["train_step"] = {"images_per_sec": step_rate}
        rates = {s["stage"]: s["images_per_sec"] for s in result["stages"] if s["worker"] is None}
        pipeline = min(rates.values())
        result["waiting_fraction"] = max(0.0, 1.0 - pipeline / step_rate)
    return result
