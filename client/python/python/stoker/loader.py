"""``stoker.Loader``: the training loop's side of Stoker."""

import collections
import json
import os
import sys
import warnings
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from . import transforms
from ._stoker import Client, check_transform
from .errors import ConfigError, StokerError
from .fields import _RESERVED, _check_targets_form, _convert_view, _each_image, _field_column, _fields, _pad_images

if TYPE_CHECKING:  # the stub's TypedDicts, not at run time
    from ._stoker import _LoaderOptions, _LocalOptions

try:  # With torch, a Loader is an IterableDataset of whole batches.
    from torch.utils.data import IterableDataset as _Base
except ImportError:  # pragma: no cover - numpy-only installs
    _Base = object

_LAST_BATCH = ("drop", "partial", "pad")
# Batches whose positions `state_dict(through_index=...)` can give.
_KEPT_POSITIONS = 32


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


def _pipeline_output(canonical):
    """(dtype name or None, mean or None, std or None) of a validated
    pipeline's output conversion: its top-level ToTensor / ToDtype /
    ConvertImageDtype and Normalize (the worker's reading)."""
    dtype = mean = std = None
    try:
        ops = json.loads(canonical).get("ops", [])
    except (ValueError, AttributeError):
        return None, None, None
    for op in ops:
        name = op.get("op")
        if name == "ToTensor":
            dtype = "float32"
        elif name in ("ToDtype", "ConvertImageDtype"):
            dtype = transforms.dtype_name(op["dtype"])
        elif name == "Normalize":
            mean, std = op["mean"], op["std"]
            if len(mean) == 1:
                mean = mean * 3
            if len(std) == 1:
                std = std * 3
    return dtype, mean, std


def _same(a, b):
    return np.allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=1e-6, atol=1e-7)


class Loader(_Base):
    """An iterable over the batches of one epoch at a time (with torch
    installed, an ``IterableDataset`` of whole batches:
    ``torch.utils.data.DataLoader(loader, batch_size=None)`` works).

    ``workers``: addresses (``"HOST:PORT"``, ``"unix:PATH"``,
    ``"dns://NAME:PORT"``), a list or comma-separated, or ``"local"``:
    workers this loader starts on this host and supervises (a worker
    process that dies is started again, its items going to the others
    meanwhile),
    stopped with the loader or this process. They are a CPU worker with
    ``local_threads`` threads (by default the cores this process may use,
    shared among ``LOCAL_WORLD_SIZE`` ranks, less one for the training
    loop), and a GPU worker on the training device when there is one
    (``device``, else torch's current CUDA device; ``local_gpu=False``
    starts none, an int picks one), which runs inside this process, its
    lanes on the device's primary CUDA context as torch's work is (a
    separate process would take turns with training on the GPU), confined
    to a share of the SMs (``STOKER_LOCAL_GPU_SMS``: ``auto``, the
    default, ``all`` or a count; docs/gpu.md); it is
    not restarted, and its failure to start raises ``ConfigError`` naming
    why. They listen on Unix sockets in a
    directory only this user may enter, and write samples into the
    shared-memory ring. ``"local"`` mixes with addresses:
    ``workers=["local", "dns://pool:50051"]``.

    Settings that cannot work raise ``stoker.ConfigError`` (a
    ``StokerError`` and a ``ValueError``) before any work; failures while
    streaming raise ``StokerError``; an epoch in which every sample was
    skipped raises ``StokerError`` naming the reasons. Skipped samples,
    failed workers and reassigned items are logged to the ``stoker`` logger
    (``logging``) at WARNING.

    ``transform``: ``"train"`` (RandomResizedCrop + RandomHorizontalFlip)
    or ``"eval"`` (Resize to ``image_size * 256 / 224`` + CenterCrop) at
    ``image_size`` (224 when None); or a pipeline the workers run on every
    image: a ``stoker.transforms`` object, a torchvision (v1 or v2)
    transform or ``Compose`` (converted by
    ``stoker.transforms.from_torchvision``: a ``Lambda`` or an argument
    Stoker cannot express is refused, naming it and its position), or the
    JSON of one. A pipeline sets the image size (``image_size``, if given,
    must agree); it is checked before connecting, and a refused one raises
    ``ConfigError`` naming the op (``ops[3] (RandomCrop)``) and the argument.
    Its trailing ``ToTensor`` / ``ToDtype`` / ``ConvertImageDtype`` and
    ``Normalize`` become the loader's ``dtype``, ``mean`` and ``std``
    (given as well, they must agree). ``loader.transform`` is the checked
    pipeline's JSON, ``loader.image_size`` its output side.

    A pipeline that ends at no fixed square size (torchvision's detection
    recipes: a shortest-side resize, a zoom-out, no resize at all) keeps
    each image's own size, and ``loader.image_size`` is None. Its batches
    are packed in host memory, each image at the top left of a block of
    the batch's largest height and width, and copied to ``device`` by
    torch. ``batch["image"]`` is then a list of ``[3, H, W]`` tensors, one
    per image (views into one block, as Detectron2's ``ImageList`` gives
    them); with ``targets_form="padded"`` or ``"flat"``, the block itself,
    zeros around each image, with ``batch["image_sizes"]``. Views and
    ``batch_transform`` need one size. ``aspect_ratio_grouping=True``
    (Detectron2's ``ASPECT_RATIO_GROUPING``) fills landscape images'
    batches apart from the others', so a block wastes less on padding; the
    two last partial batches are combined, so the batch count and exactly
    once are as without it.

    ``batch_transform``: ``MixUp`` or ``CutMix`` (or a ``RandomChoice`` of
    them; from ``stoker.transforms`` or ``torchvision.transforms.v2``),
    applied to every batch after its conversion, on the loader's device,
    as torchvision's are after collation; ``label`` then holds soft targets
    ``[B, num_classes]`` float32. Its draws depend on (seed, epoch, batch
    index) only. MixUp needs float images (a float ``dtype``, ``mean`` /
    ``std``, or a pipeline's float conversion); CutMix also mixes uint8.

    Iterating starts the next epoch (the first is ``start_epoch``);
    ``set_epoch(e)`` chooses it. ``len(loader)`` is the number of batches per
    epoch, known when the dataset has a ``stoker-index.json`` (``stoker
    pack`` writes one).

    ``last_batch``: ``"partial"`` (default, as ``stoker stream`` and
    torch's ``DataLoader``) yields an incomplete last batch as it is,
    ``"drop"`` drops it, ``"pad"`` fills it up to
    ``batch_size`` with real samples received before (distinct within a
    batch as far as the rank has them). ``batch["padded"]`` counts the
    padding at the end of a batch (mask it out of the loss). When the
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

    ``views={"global_1": pipeline, "local_0": pipeline, ...}`` (or a list,
    named ``"0"``, ``"1"``, ...) makes more augmented views of each image
    from the same decode, each with its own pipeline (any ``transform``
    form) and its own random draws: ``batch["views"][name]``, an NCHW
    tensor of that pipeline's size and output dtype. DINOv2's 2 global and
    8 local crops are ``transform`` plus 9 views.

    ``fields={"caption": "txt", "meta": "json", "labels": stoker.Field("labels",
    "int_list")}`` delivers each sample's other fields under those names
    (see :class:`Field`): a caption as ``batch["caption"]``, a list of
    ``str``. A sample without a required field is skipped with the reason
    ``missing_field``; one whose text is not UTF-8 or whose JSON does not
    parse, as ``bad_field``.

    With a field of kind ``targets`` (detection), ``targets_form`` chooses
    its batch form (docs/detection.md): ``"lists"`` (a dict per image, as
    torchvision's detection models take), ``"padded"`` (also
    ``batch["image_sizes"]``, the images padded to a multiple of
    ``size_divisibility``, as Detectron2's ``ImageList``), or ``"flat"``
    (``batch_idx``, ``cls``, normalised ``bboxes``, ``keypoints`` and
    ``masks`` concatenated, as Ultralytics' ``collate_fn``). Kind
    ``targets_with_masks`` adds each instance's mask, drawn from its COCO
    ``segmentation``: ``masks``, uint8 ``[N, H, W]``.

    ``connect_timeout`` (seconds, 10 by default) bounds the first contact
    with each worker: connecting, and its answer listing the dataset. A
    worker that accepts and never answers (stopped, hung) is then named in
    the error with the wait, instead of holding the constructor up.

    ``shared_memory``: bytes of the shared-memory ring (a sealed memfd)
    that workers on this host write samples into instead of sending them
    over gRPC; 256 MiB by default, allocated as it is first written. A
    worker is on this host when it shares the kernel and PID namespace
    (its ``Info`` says so); others, and any worker that cannot map the
    ring, send over the network. ``0`` sends everything over the network.

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
        workers: Union[str, Sequence[str]],
        dataset: str,
        batch_size: int,
        image_size: Optional[int] = None,
        transform: Any = "train",
        device: Any = "cpu",
        dtype: Any = None,
        mean: Optional[Sequence[float]] = None,
        std: Optional[Sequence[float]] = None,
        seed: int = 0,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        last_batch: str = "partial",
        prefetch: int = 4,
        max_errors: Union[int, float, str, None] = None,
        token: Optional[str] = None,
        progress_timeout: float = 60.0,
        start_epoch: int = 0,
        deterministic: bool = False,
        aspect_ratio_grouping: bool = False,
        channels_last: bool = False,
        metrics_port: Union[int, str, None] = None,
        dns_server: Optional[str] = None,
        resolve_interval: float = 10.0,
        format: str = "auto",
        image_key: Optional[str] = None,
        label_key: Optional[str] = None,
        label_offset: int = 0,
        batch_transform: Any = None,
        fields: Optional[Dict[str, Any]] = None,
        views: Any = None,
        shared_memory: int = 256 << 20,
        connect_timeout: float = 10.0,
        local_threads: Optional[int] = None,
        local_gpu: Union[bool, int, None] = None,
        targets_form: str = "lists",
        size_divisibility: int = 0,
    ) -> None:
        if isinstance(workers, str):
            workers = [w for w in workers.split(",") if w]
        workers = [str(w) for w in workers]
        if last_batch not in _LAST_BATCH:
            raise ConfigError(f"last_batch must be one of {_LAST_BATCH}, got {last_batch!r}")
        if (mean is None) != (std is None):
            raise ConfigError("give both mean and std, or neither")
        # The pipeline, checked as a worker would before connecting.
        try:
            spec = transforms.as_pipeline_json(transform)
        except ConfigError:
            raise
        except ValueError as e:
            raise ConfigError(str(e)) from None
        size, canonical = check_transform(spec, None if image_size is None else int(image_size))
        # None: the pipeline keeps each image's own size.
        self.image_size = size
        self.transform = canonical
        dtype_name = None if dtype is None else transforms.dtype_name(dtype)
        p_dtype, p_mean, p_std = _pipeline_output(canonical)
        if p_dtype is not None and dtype_name is not None and p_dtype != dtype_name:
            raise ConfigError(f"dtype={dtype_name} differs from the transform's output dtype {p_dtype}")
        if p_mean is not None and mean is not None and not (_same(p_mean, mean) and _same(p_std, std)):
            raise ConfigError(
                f"mean={list(mean)}, std={list(std)} differ from the transform's Normalize(mean={p_mean}, std={p_std})"
            )
        dtype_name = dtype_name or p_dtype
        if p_mean is not None:
            mean, std = p_mean, p_std
        if mean is not None and dtype_name == "uint8":
            raise ConfigError("normalising (mean, std) needs a float dtype, but the output dtype is uint8")
        self._fields = _fields(fields)
        _check_targets_form(targets_form, size_divisibility, self._fields, size)
        self._targets_form, self._size_divisibility = targets_form, size_divisibility
        self._views = _views(views)
        self._batch_transform = None if batch_transform is None else transforms.as_batch_transform(batch_transform)
        if self._batch_transform is not None and size is None:
            raise ConfigError(
                f"batch_transform {self._batch_transform!r} mixes images of one size, and the transform keeps each "
                "image's own: end it at a fixed size (Resize([s, s]), CenterCrop(s), RandomResizedCrop(s))"
            )
        if self._batch_transform is not None:
            floats = dtype_name not in (None, "uint8") or mean is not None
            if self._batch_transform.mixes_float_only() and not floats:
                raise ConfigError(
                    "batch_transform: MixUp needs float images, but the loader delivers uint8: end the transform "
                    "with ToDtype(torch.float32, scale=True) (and Normalize), or pass dtype / mean and std"
                )
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
            raise ConfigError(f"device={self.device!r} needs torch, which is not installed")
        if self.device != "cpu":
            _check_device(self._torch, self.device)
        if self._torch is None and dtype_name == "bfloat16":
            raise ConfigError("dtype bfloat16 needs torch, which is not installed (numpy has no bfloat16)")
        self._dtype_name = dtype_name
        self._dtype = None if dtype_name is None or self._torch is None else getattr(self._torch, dtype_name)
        self._seed = int(seed)
        self._channels_last = bool(channels_last)
        self._mean = None if mean is None else np.asarray(mean, dtype=np.float32).reshape(1, 3, 1, 1)
        self._std = None if std is None else np.asarray(std, dtype=np.float32).reshape(1, 3, 1, 1)
        # Images of their own sizes are packed in host memory and copied by
        # torch: the client's upload takes one size.
        upload = None if size is None else self._upload_target()
        local: "Optional[_LocalOptions]" = None
        if "local" in workers:
            local = self._local_workers(local_threads, local_gpu, upload)
        # The one object that crosses into Rust: LoaderConfig's fields as
        # plain values (client/python/src/options.rs checks them).
        options: "_LoaderOptions" = {
            "workers": workers,
            "dataset": str(dataset),
            "format": str(format),
            "record": {
                "image": None if image_key is None else str(image_key),
                "label": None if label_key is None else str(label_key),
                "label_offset": int(label_offset),
            },
            "fields": [
                {"name": name, "source": f.source, "kind": f.kind, "optional": f.optional} for name, f in self._fields
            ],
            "views": [{"name": name, "transform": canonical} for name, canonical, _ in self._views],
            "batch_size": self.batch_size,
            "transform": spec,
            "image_size": None if image_size is None else int(image_size),
            "seed": int(seed),
            "rank": self.rank,
            "world_size": self.world_size,
            "prefetch": int(prefetch),
            "last_batch": last_batch,
            "deterministic": bool(deterministic),
            "aspect_ratio_grouping": bool(aspect_ratio_grouping),
            "progress_timeout": float(progress_timeout),
            "connect_timeout": float(connect_timeout),
            "max_errors": None if max_errors is None else str(max_errors),
            "token": token if token is not None else os.environ.get("STOKER_TOKEN"),
            "device": None if upload is None else {
                "ordinal": upload[0],
                "dtype": upload[1],
                "layout": upload[2],
                "mean": None if mean is None else [float(x) for x in mean],
                "std": None if std is None else [float(x) for x in std],
            },
            "metrics_listen": None if metrics_port is None else str(metrics_port),
            "resolve_interval": float(resolve_interval),
            "dns_server": None if dns_server is None else str(dns_server),
            "shared_memory": int(shared_memory),
            "local": local,
        }
        self._client = Client(options)
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
        # The position after each of the epoch's last batches, by index.
        self._positions = collections.OrderedDict()

    def _local_workers(self, threads, gpu, upload) -> "_LocalOptions":
        """How the client starts ``"local"`` workers: the command that is
        ``stoker``, the CPU worker's threads, and the GPU worker's ordinal
        or None."""
        if threads is not None and int(threads) < 1:
            raise ConfigError(f"local_threads must be at least 1, got {threads}")
        if gpu is None:
            # The training device: where batches go, else torch's current
            # CUDA device when there is one.
            torch = self._torch
            if upload is not None or self.device.startswith("cuda"):
                dev = torch.device(self.device)
                gpu = dev.index if dev.index is not None else torch.cuda.current_device()
            elif torch is not None and torch.cuda.is_available():
                gpu = torch.cuda.current_device()
        elif gpu is False:
            gpu = None
        return {
            "command": [sys.executable, "-m", "stoker"],
            "threads": None if threads is None else int(threads),
            "gpu": None if gpu is None else int(gpu),
        }

    @property
    def local_workers(self) -> List[Dict[str, Any]]:
        """The local workers this loader started and supervises (the
        ``"local"`` entry of ``workers``): a dict each, with ``address``
        (``unix:PATH``), ``role`` (``"cpu"`` or ``"gpu"``), ``in_process``
        (the GPU worker runs in this process, its lanes on the training
        device's CUDA context), ``pid`` (this process's for that one; None
        while one is started again) and ``restarts``."""
        return [dict(w) for w in self._client.local_workers()]

    def _upload_target(self):
        """(ordinal, dtype name) for the client's own upload to a CUDA
        device: pinned ring, side-stream copy, conversion kernel; batches
        reach torch through DLPack without a copy. None on the CPU."""
        torch = self._torch
        if torch is None or not self.device.startswith("cuda"):
            return None
        dev = torch.device(self.device)
        ordinal = dev.index if dev.index is not None else torch.cuda.current_device()
        names = ("float32", "float16", "bfloat16", "uint8")
        if self._dtype_name is None:
            dtype = "float32" if self._mean is not None else "uint8"
        elif self._dtype_name in names:
            dtype = self._dtype_name
        else:
            # float64: converted by torch after a uint8 copy.
            return None
        # channels_last: the kernel writes NHWC, handed to torch as an
        # [B, 3, H, W] view with channels_last strides (no copy).
        return int(ordinal), dtype, "nhwc" if self._channels_last else "nchw"

    @property
    def epoch(self) -> int:
        """The epoch the next iteration streams."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        self._epoch = int(epoch)

    def __len__(self) -> int:
        batches = self._client.batches_per_epoch()
        if batches is None:
            raise TypeError("the dataset has no stoker-index.json with sample counts: its length is unknown")
        return batches

    def state_dict(self, through_index: Optional[int] = None) -> Dict[str, Any]:
        """The loader's position: the epoch, and within it what was delivered.

        A dict of plain values (ints, strings, lists), fit for a checkpoint.
        ``through_index=i`` gives the position just after the batch whose
        ``batch["index"]`` is ``i`` instead of after the last one yielded:
        for consumers that fetch ahead of what they trained on (Lightning
        prefetches a batch), so that a resume repeats nothing and skips
        nothing. The last ``_KEPT_POSITIONS`` batches' positions are kept.
        """
        if through_index is not None:
            try:
                epoch, position = self._positions[int(through_index)]
            except KeyError:
                raise StokerError(
                    f"no position kept for batch index {through_index} of this epoch "
                    f"(kept: {sorted(self._positions)})"
                ) from None
            return {"epoch": epoch, "position": position}
        if self._active is not None:
            return {"epoch": self._active, "position": self._client.state()}
        # Loaded but not iterated yet: the loaded position still stands.
        return {"epoch": self._epoch, "position": self._resume}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores a position from ``state_dict()``: the next iteration
        resumes its epoch with the batches not yet delivered."""
        try:
            epoch, position = int(state["epoch"]), state["position"]
        except (KeyError, TypeError, ValueError) as e:
            raise StokerError(f"not a stoker.Loader state: {e!r}") from None
        self._epoch, self._resume, self._active = epoch, position, None

    def report(self) -> Optional[Dict[str, Any]]:
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
            "workers": {addr: n for addr, n, _ in workers},
            # Of each worker's samples, those a GPU worker in this process
            # left on the loader's device (no copy through the host).
            "device_samples": {addr: n for addr, _, n in workers},
        }

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        if _Base is not object:
            from torch.utils.data import get_worker_info

            if get_worker_info() is not None:
                raise StokerError(
                    "a stoker.Loader is iterated in a DataLoader worker process: it does its own parallel work "
                    "and yields whole batches, so wrap it as DataLoader(loader, batch_size=None) (num_workers=0)"
                )
            if _collated_by_dataloader(sys._getframe(1)):
                raise ConfigError(
                    "DataLoader(loader) batches the loader's batches again (images [1, B, 3, H, W]): "
                    "a stoker.Loader yields whole batches, so wrap it as DataLoader(loader, batch_size=None)"
                )
        epoch = self._epoch
        # A refused resume (other settings) keeps the loaded position.
        self._positions.clear()
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
                batch = self._convert(*raw, epoch=epoch)
                if self._batch_transform is not None:
                    rng = transforms.batch_rng(self._seed, epoch, batch["index"])
                    batch["image"], batch["label"] = self._batch_transform(batch["image"], batch["label"], rng=rng)
                self._positions[batch["index"]] = (epoch, self._client.state())
                while len(self._positions) > _KEPT_POSITIONS:
                    self._positions.popitem(last=False)
                yield batch
        except BaseException:
            # An abandoned iteration (break, error, Ctrl-C) stops its epoch,
            # unless a newer iteration has started; a finished one keeps
            # its report.
            self._client.stop_epoch(generation)
            raise

    def _convert(self, pixels, shape, labels, keys, index, padded, fields, views, epoch):
        height, width, sizes = shape
        batch = self._convert_images(pixels, (height, width), labels, keys, index, padded, epoch)
        if self.image_size is None:
            _each_image(batch, sizes, self._targets_form, self._torch)
        if self._views:
            batch["views"] = {
                name: _convert_view(data, vsize, len(keys), output, self._torch, self.device, self._channels_last)
                for (name, vsize, data), (_, _, output) in zip(views, self._views)
            }
        valid = {}
        for (name, field), values in zip(self._fields, fields):
            batch[name], mask = _field_column(field, values, self._torch, self.device, self._targets_form)
            if mask is not None:
                valid[name] = mask
        if valid:
            batch["valid"] = valid
        if self._targets_form == "padded":
            _pad_images(batch, self._size_divisibility, self._torch)
        return batch

    def _convert_images(self, pixels, hw, labels, keys, index, padded, epoch):
        n = len(keys)
        if not isinstance(pixels, bytes):
            # Already on the device, converted: shared through DLPack, and
            # torch's current stream waits for the upload.
            image = self._torch.from_dlpack(pixels)
            if self._channels_last:
                image = image.permute(0, 3, 1, 2)
            label = self._torch.from_numpy(np.asarray(labels, dtype=np.int64)).to(self.device, non_blocking=True)
            return {"image": image, "label": label, "key": list(keys), "epoch": epoch, "index": index, "padded": padded}
        hwc = np.frombuffer(pixels, dtype=np.uint8).reshape(n, hw[0], hw[1], 3)
        labels = np.asarray(labels, dtype=np.int64)
        torch = self._torch
        if torch is None:
            image = np.ascontiguousarray(hwc.transpose(0, 3, 1, 2))
            if self._mean is not None or self._dtype_name not in (None, "uint8"):
                work = np.float64 if self._dtype_name == "float64" else np.float32
                image = image.astype(work) / work(255.0)
                if self._mean is not None:
                    image = (image - self._mean.astype(work)) / self._std.astype(work)
                image = image.astype(self._dtype_name or "float32", copy=False)
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


def _views(views):
    """``views={"global_0": pipeline, ...}`` (or a list, named "0", "1",
    ...) as [(name, canonical JSON, (dtype, mean, std))], each pipeline
    checked as the main one is."""
    if views is None:
        return []
    items = views.items() if isinstance(views, dict) else ((str(i), v) for i, v in enumerate(views))
    out = []
    for name, view in items:
        if name in _RESERVED:
            raise ConfigError(f"view name {name!r} is reserved ({', '.join(_RESERVED)} are the batch's own)")
        try:
            spec = transforms.as_pipeline_json(view)
            _, canonical = check_transform(spec, None)
        except ValueError as e:
            raise ConfigError(f"view {name!r}: {e}") from None
        out.append((str(name), canonical, _pipeline_output(canonical)))
    return out


def _collated_by_dataloader(caller) -> bool:
    """Whether ``caller``, the frame that asked a Loader's iterator for its
    first batch, is a torch ``DataLoader`` fetcher that batches what it is
    given (``batch_size`` not None): its ``auto_collation``."""
    # Only a frame that is a fetcher's has its locals read: reading
    # `f_locals` keeps a snapshot of them on the frame (CPython 3.11 and
    # earlier), and a user's function that iterates a Loader would then
    # keep the Loader (its workers, its device memory) alive past its
    # `del`, until the function returns.
    if caller is None or caller.f_code.co_name != "fetch":
        return False
    fetcher = caller.f_locals.get("self")
    return type(fetcher).__module__ == "torch.utils.data._utils.fetch" and bool(
        getattr(fetcher, "auto_collation", False)
    )


def _check_device(torch, device):
    """Refuses a ``device`` torch cannot use, naming why, before any work:
    ``torch.device`` parses it, and a CUDA device must be one torch sees."""
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as e:
        raise ConfigError(f"device={device!r} is not a torch device: {e}") from None
    if dev.type != "cuda":
        return
    if not torch.cuda.is_available():
        raise ConfigError(
            f"device={device!r}, but torch sees no usable CUDA device on this machine "
            f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}); "
            "use device='cpu', or run where a GPU is"
        )
    count = torch.cuda.device_count()
    if dev.index is not None and dev.index >= count:
        raise ConfigError(f"device={device!r}, but torch sees {count} CUDA device(s)")
