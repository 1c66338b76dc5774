"""Stoker: decode and augment images on remote workers, stream ready
batches into a PyTorch training job.

    loader = stoker.Loader(workers=["10.0.0.5:50051"], dataset="s3://bucket/train/",
                           batch_size=256, image_size=224, transform="train", seed=0)
    for epoch in range(90):
        for batch in loader:          # each pass over the loader is the next epoch
            images, labels = batch["image"], batch["label"]

Each batch is a dict: ``image`` ``[B, 3, H, W]`` (uint8; with ``mean`` and
``std``, float32 scaled to [0, 1] then normalised, as torchvision's
``ToTensor`` + ``Normalize``; ``dtype`` picks another float type on torch), ``label`` int64 ``[B]``, ``key`` a list of str.
They are torch tensors when torch is installed (on ``device``), numpy arrays
otherwise.

Every sample of this rank's share of an epoch arrives exactly once, also
when workers fail; rank and world size come from torch.distributed or the
RANK / WORLD_SIZE environment variables when not given.
"""

import os
import time
import warnings

import numpy as np

from ._stoker import Client, StokerError

__all__ = ["Loader", "StokerError"]

_LAST_BATCH = ("drop", "partial", "pad")


def _distributed():
    """(rank, world_size) from torch.distributed, the environment, or (0, 1)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:
        pass
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def _torch():
    try:
        import torch

        return torch
    except ImportError:
        return None


class Loader:
    """An iterable over the batches of one epoch at a time.

    Iterating starts the next epoch (the first is ``start_epoch``);
    ``set_epoch(e)`` chooses it. ``len(loader)`` is the number of batches per
    epoch, known when the dataset has a ``stoker-index.json`` (``stoker
    pack`` writes one).

    ``last_batch``: ``"drop"`` (default) drops an incomplete last batch,
    ``"partial"`` yields it as it is, ``"pad"`` fills it up to
    ``batch_size`` by repeating its last sample. ``batch["padded"]`` counts
    the repeats at the end of a batch (mask them out of the loss). When the
    dataset has an index, every rank yields ``len(loader)`` batches, the
    same number on every rank, so data-parallel training never waits on a
    rank with an extra step; samples skipped as unreadable are made up the
    same way.

    ``channels_last=True`` (torch) yields ``image`` as ``[B, 3, H, W]`` with
    channels-last strides, what a ``channels_last`` model takes: on the GPU
    the client's kernel writes that layout directly, with no extra copy.

    ``deterministic=True`` fills batches in plan order rather than arrival
    order: batch k of an epoch depends only on (seed, epoch, rank, k), not
    on the number or speed of workers.

    ``workers`` entries of the form ``"dns://NAME:PORT"`` stand for every
    address NAME resolves to, resolved again every ``resolve_interval``
    seconds (``dns_server="IP:PORT"`` asks that server instead of the
    system's resolver): workers that appear get work, those that disappear
    are drained, and nothing is lost or delivered twice.

    ``format``: the shards' format, ``"auto"`` (by the files' extensions:
    ``.tar``, ``.tfrecord`` / ``.tfrecords`` / ``.tfrec``, ``.rec``,
    ``.parquet``), ``"wds"``, ``"tfrecord"`` (needed for TensorFlow's
    extension-less ``train-00000-of-01024``), ``"recordio"`` (MXNet) or
    ``"parquet"`` (Hugging Face). ``image_key`` and ``label_key`` name the
    image and label fields: TFRecord features (default ``image/encoded``
    and ``image/class/label``) or Parquet columns (default ``image`` and
    ``label``); ``label_offset`` is added to every label (``-1`` for
    TensorFlow's 1-based ImageNet labels).

    ``metrics_port=PORT`` (or ``"HOST:PORT"``) serves the loader's Prometheus
    metrics at ``/metrics``: time the training loop waited for batches,
    samples, bytes and batches received, reassigned items, samples per
    worker and the recommended worker count. ``report()`` has the same
    figures for the current epoch.

    ``state_dict()`` / ``load_state_dict()`` save and restore the position
    in an epoch: after loading, iterating resumes that epoch with exactly
    the batches not yet delivered (the same batches, with
    ``deterministic=True``).
    """

    def __init__(
        self,
        workers,
        dataset,
        batch_size,
        image_size=224,
        transform="train",
        device="cpu",
        dtype=None,
        mean=None,
        std=None,
        seed=0,
        rank=None,
        world_size=None,
        last_batch="drop",
        prefetch=4,
        max_errors=None,
        token=None,
        progress_timeout=60.0,
        start_epoch=0,
        deterministic=False,
        channels_last=False,
        metrics_port=None,
        dns_server=None,
        resolve_interval=10.0,
        format="auto",
        image_key=None,
        label_key=None,
        label_offset=0,
    ):
        if isinstance(workers, str):
            workers = [w for w in workers.split(",") if w]
        if last_batch not in _LAST_BATCH:
            raise ValueError(f"last_batch must be one of {_LAST_BATCH}, got {last_batch!r}")
        if (mean is None) != (std is None):
            raise ValueError("give both mean and std, or neither")
        if rank is None or world_size is None:
            r, w = _distributed()
            rank = r if rank is None else rank
            world_size = w if world_size is None else world_size
        self.batch_size = int(batch_size)
        self.last_batch = last_batch
        self.rank, self.world_size = int(rank), int(world_size)
        self.device = str(device)
        self._torch = _torch()
        if self.device != "cpu" and self._torch is None:
            raise ValueError(f"device={self.device!r} needs torch, which is not installed")
        self._dtype = dtype
        self._channels_last = bool(channels_last)
        self._mean = None if mean is None else np.asarray(mean, dtype=np.float32).reshape(1, 3, 1, 1)
        self._std = None if std is None else np.asarray(std, dtype=np.float32).reshape(1, 3, 1, 1)
        upload = self._upload_target()
        self._client = Client(
            list(workers),
            str(dataset),
            self.batch_size,
            int(image_size),
            str(transform),
            int(seed),
            self.rank,
            self.world_size,
            int(prefetch),
            last_batch,
            None if max_errors is None else str(max_errors),
            token if token is not None else os.environ.get("STOKER_TOKEN"),
            float(progress_timeout),
            bool(deterministic),
            upload,
            None if mean is None else [float(x) for x in mean],
            None if std is None else [float(x) for x in std],
            None if metrics_port is None else str(metrics_port),
            None if dns_server is None else str(dns_server),
            float(resolve_interval),
            str(format),
            None if image_key is None else str(image_key),
            None if label_key is None else str(label_key),
            int(label_offset),
        )
        if upload is not None and not self._client.uploads():
            warnings.warn(
                f"stoker: the client cannot upload ({self._client.upload_error()}); "
                f"batches are copied to {self.device} by torch",
                stacklevel=2,
            )
        self._epoch = int(start_epoch)
        # The epoch being iterated, or stopped part-way; None between epochs.
        self._active = None
        # A position to resume, from load_state_dict.
        self._resume = None

    def _upload_target(self):
        """(ordinal, dtype name) for the client's own upload to a CUDA
        device: pinned ring, side-stream copy, conversion kernel; batches
        reach torch through DLPack without a copy. None on the CPU."""
        torch = self._torch
        if torch is None or not self.device.startswith("cuda"):
            return None
        dev = torch.device(self.device)
        ordinal = dev.index if dev.index is not None else torch.cuda.current_device()
        names = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16", torch.uint8: "uint8"}
        if self._dtype is None:
            dtype = "float32" if self._mean is not None else "uint8"
        elif self._dtype in names:
            dtype = names[self._dtype]
        else:
            raise ValueError(f"dtype must be one of {list(names)}, got {self._dtype!r}")
        # channels_last: the kernel writes NHWC, handed to torch as an
        # [B, 3, H, W] view with channels_last strides (no copy).
        return int(ordinal), dtype, "nhwc" if self._channels_last else "nchw"

    @property
    def epoch(self):
        """The epoch the next iteration streams."""
        return self._epoch

    def set_epoch(self, epoch):
        self._epoch = int(epoch)

    def __len__(self):
        batches = self._client.batches_per_epoch()
        if batches is None:
            raise TypeError("the dataset has no stoker-index.json with sample counts: its length is unknown")
        return batches

    def state_dict(self):
        """The loader's position: the epoch, and within it what was delivered.

        A dict of plain values (ints, strings, lists), fit for a checkpoint.
        """
        if self._active is not None:
            return {"epoch": self._active, "position": self._client.state()}
        # Loaded but not iterated yet: the loaded position still stands.
        return {"epoch": self._epoch, "position": self._resume}

    def load_state_dict(self, state):
        """Restores a position from ``state_dict()``: the next iteration
        resumes its epoch with the batches not yet delivered."""
        try:
            epoch, position = int(state["epoch"]), state["position"]
        except (KeyError, TypeError, ValueError) as e:
            raise StokerError(f"not a stoker.Loader state: {e!r}") from None
        self._epoch, self._resume, self._active = epoch, position, None

    def report(self):
        """The current or last epoch: samples, skipped, reassigned items, skip reasons."""
        r = self._client.report()
        if r is None:
            return None
        samples, skipped, retries, reasons, batches, wait, elapsed, recommended, workers = r
        return {
            "samples": samples,
            "skipped": skipped,
            "reassigned": retries,
            "skip_reasons": reasons,
            "batches": batches,
            "wait_seconds": wait,
            "seconds": elapsed,
            "recommended_workers": recommended,
            "workers": dict(workers),
        }

    def __iter__(self):
        epoch = self._epoch
        # A refused resume (other settings) keeps the loaded position.
        generation = self._client.start_epoch(epoch, self._resume)
        self._resume = None
        self._epoch = epoch + 1
        self._active = epoch
        try:
            while True:
                raw = self._client.next_batch()
                if raw is None:
                    self._active = None
                    return
                yield self._convert(*raw, epoch=epoch)
        except BaseException:
            # An abandoned iteration (break, error, Ctrl-C) stops its epoch,
            # unless a newer iteration has started; a finished one keeps
            # its report.
            self._client.stop_epoch(generation)
            raise

    def _convert(self, pixels, size, labels, keys, index, padded, epoch):
        n = len(keys)
        if not isinstance(pixels, bytes):
            # Already on the device, converted: shared through DLPack, and
            # torch's current stream waits for the upload.
            image = self._torch.from_dlpack(pixels)
            if self._channels_last:
                image = image.permute(0, 3, 1, 2)
            label = self._torch.from_numpy(np.asarray(labels, dtype=np.int64)).to(self.device, non_blocking=True)
            return {"image": image, "label": label, "key": list(keys), "epoch": epoch, "index": index, "padded": padded}
        hwc = np.frombuffer(pixels, dtype=np.uint8).reshape(n, size, size, 3)
        labels = np.asarray(labels, dtype=np.int64)
        torch = self._torch
        if torch is None:
            image = np.ascontiguousarray(hwc.transpose(0, 3, 1, 2))
            if self._mean is not None:
                image = (image.astype(np.float32) / 255.0 - self._mean) / self._std
            label = labels
        else:
            # uint8 crosses to the device (4x fewer bytes than float32); the
            # layout change and normalisation happen there.
            image = torch.from_numpy(np.array(hwc))
            if self.device != "cpu":
                image = image.pin_memory().to(self.device, non_blocking=True)
            image = image.permute(0, 3, 1, 2)
            if self._mean is not None or self._dtype is not None:
                image = image.to(self._dtype or torch.float32)
                if image.is_floating_point():
                    image = image / 255.0
                if self._mean is not None:
                    mean = torch.from_numpy(self._mean).to(image.device, image.dtype)
                    std = torch.from_numpy(self._std).to(image.device, image.dtype)
                    image = (image - mean) / std
            if self._channels_last:
                image = image.contiguous(memory_format=torch.channels_last)
            else:
                image = image.contiguous()
            label = torch.from_numpy(labels).to(self.device)
        return {"image": image, "label": label, "key": list(keys), "epoch": epoch, "index": index, "padded": padded}


def doctor(loader, train_step=None, samples=2048, seconds=2.0, steps=10):
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
    result = loader._client.doctor(int(samples), float(seconds), target)
    if step_rate is not None:
        result["train_step"] = {"images_per_sec": step_rate}
        rates = {s["stage"]: s["images_per_sec"] for s in result["stages"] if s["worker"] is None}
        pipeline = min(rates.values())
        result["waiting_fraction"] = max(0.0, 1.0 - pipeline / step_rate)
    return result
