"""A sample's other fields (``Loader(fields=...)``): how they are named,
parsed and turned into a batch's columns. ``Field`` shares one parser with
the command line (``_stoker.parse_field``); ``Field.KINDS`` comes from
``_stoker.field_kinds()``."""

import json

import numpy as np

from ._stoker import field_kinds as _field_kinds
from ._stoker import parse_field
from .errors import ConfigError

_RESERVED = ("image", "label", "key", "views", "epoch", "index", "padded", "valid")


class Field:
    """A sample's field beyond its image and label, for ``Loader(fields=...)``.

    ``source`` is where it is in the shard: a WebDataset member extension
    (``"txt"``, ``"json"``, ``"cls"``, ``"seg.png"``), a TFRecord feature
    name, a Parquet column, or RecordIO's ``"label"`` (the header's whole
    label array). ``kind`` is how it is read: ``"auto"`` (WebDataset's
    decoder for the extension: ``txt`` is text, ``json`` JSON, ``cls`` an
    int, ``npy`` an array; for record formats the stored type), ``"int"``,
    ``"int_list"``, ``"float"``, ``"float_list"``, ``"text"``, ``"json"``,
    ``"bytes"`` or ``"npy"``. A sample without a required field is skipped
    (``missing_field``); an ``optional`` one arrives as ``None``, and for
    tensors with ``batch["valid"][name]``, a bool tensor.

    In a batch, text is a list of ``str``, JSON a list of ``dict``, bytes a
    list of ``bytes``; numbers a tensor ``[B]`` (or ``[B, K]`` when the
    batch's lists have one length, else a list of tensors); arrays a stacked tensor when they
    share dtype and shape, else a list. ``kind="mask"`` reads a segmentation
    mask (an 8-bit grayscale image of the image's size, such as
    ``"seg.png"``) that follows the image's crops, flips, pads and
    rotations with nearest-neighbour sampling and none of its colour ops:
    a ``[B, 1, H, W]`` uint8 tensor on the loader's device.
    ``kind="targets"`` reads detection targets (docs/detection.md), and
    ``kind="targets_with_masks"`` also each instance's mask from its COCO
    ``segmentation``.
    """

    # From the workers' field-kind table (core/src/field.rs): each kind's
    # name, then each name or alias -> the kind ("txt" is "text").
    KINDS = tuple(k for k, _ in _field_kinds())
    _NAMES = {name: k for k, aliases in _field_kinds() for name in (k, *aliases)}

    def __init__(self, source: str, kind: str = "auto", optional: bool = False) -> None:
        canonical = self._NAMES.get(kind) if isinstance(kind, str) else None
        if canonical is None:
            raise ConfigError(f"unknown field kind {kind!r} (kinds: {', '.join(self.KINDS)})")
        self.source, self.kind, self.optional = str(source), canonical, bool(optional)

    def __repr__(self):
        return f"Field({self.source!r}, kind={self.kind!r}, optional={self.optional})"


def _fields(fields):
    """``fields={"caption": "txt", "meta": Field("json", optional=True)}`` as
    [(name, Field)], in order, checked."""
    out = []
    for name, f in (fields or {}).items():
        if name in _RESERVED:
            raise ConfigError(f"field name {name!r} is reserved ({', '.join(_RESERVED)} are the batch's own)")
        if isinstance(f, str):
            # The command line's spelling: "txt", "txt?", "txt?:bytes", "txt:bytes?".
            source, kind, optional = parse_field(str(name), f)
            f = Field(source, kind, optional=optional)
        if not isinstance(f, Field):
            raise ConfigError(f"field {name!r}: give a source string or stoker.Field, got {f!r}")
        out.append((str(name), f))
    return out


def _target(value, torch, device):
    """One image's targets as torchvision's detection models take them: a
    dict of ``boxes`` (float32 ``[N, 4]``, in ``format``), ``labels``
    (int64 ``[N]``), and ``iscrowd``, ``area``, ``keypoints`` (``[N, K,
    3]``: x, y, visibility) and ``masks`` (uint8 ``[N, H, W]``) when the
    dataset has them (masks when the field asks), as tensors on the
    loader's device (numpy arrays without torch); ``canvas_size`` is the
    image's (height, width)."""
    out = {}
    for name, item in value.items():
        if isinstance(item, tuple) and len(item) == 3 and isinstance(item[2], bytes):
            arr = np.frombuffer(item[2], dtype=np.dtype(item[0])).reshape(item[1])
            out[name] = _tensor(torch, arr.copy(), device) if torch is not None else arr.copy()
        else:
            out[name] = item
    return out


def _target_list(values, torch, device):
    """targets_form='lists': a dict per image (``None`` where absent). On a
    GPU, each per-instance key's arrays go as one pinned copy for the
    batch, and each image's tensor is its rows of it (a view): one
    transfer a key, not one a key and an image."""
    if torch is None or str(device) == "cpu":
        return [None if v is None else _target(v, torch, device) for v in values]
    dicts = [None if v is None else _target(v, None, None) for v in values]
    present = [d for d in dicts if d is not None]
    for name in {k for d in present for k, a in d.items() if isinstance(a, np.ndarray)}:
        arrays = [d.get(name) for d in present]
        same = all(
            isinstance(a, np.ndarray) and a.ndim and a.dtype == arrays[0].dtype and a.shape[1:] == arrays[0].shape[1:]
            for a in arrays
        )
        if not same:  # an odd one out: each image's on its own
            for d, a in zip(present, arrays):
                if isinstance(a, np.ndarray):
                    d[name] = _tensor(torch, a, device)
            continue
        whole = torch.from_numpy(np.ascontiguousarray(np.concatenate(arrays))).pin_memory()
        parts = whole.to(device, non_blocking=True).split([len(a) for a in arrays])
        for d, part in zip(present, parts):
            d[name] = part
    return dicts


# The batch forms of detection targets (``Loader(targets_form=...)``).
TARGETS_FORMS = ("lists", "padded", "flat")


def _check_targets_form(form, size_divisibility, fields, size):
    """The loader's targets_form and size_divisibility, checked (``size``:
    the transform's square output, None where each image keeps its own)."""
    if form not in TARGETS_FORMS:
        raise ConfigError(f"targets_form must be one of {', '.join(TARGETS_FORMS)}, got {form!r}")
    if isinstance(size_divisibility, bool) or not isinstance(size_divisibility, int) or size_divisibility < 0:
        raise ConfigError(f"size_divisibility must be an int >= 0, got {size_divisibility!r}")
    if size_divisibility and form != "padded":
        raise ConfigError("size_divisibility pads the images of targets_form='padded' only")
    kinds = {f.kind for _, f in fields}
    if form != "lists" and not kinds & {"targets", "targets_with_masks"}:
        raise ConfigError(f"targets_form={form!r} needs a field of kind 'targets' (stoker.Field(source, 'targets'))")
    if form == "flat" and size is None and "targets_with_masks" in kinds:
        raise ConfigError(
            "targets_form='flat' concatenates the batch's masks, which needs images of one size, and the "
            "transform keeps each image's own: end it at a fixed size, or use targets_form='lists'"
        )


def _each_image(batch, sizes, form, torch):
    """A batch of images of their own sizes (a pipeline that ends at no
    fixed square size) arrives as one block of the batch's largest height
    and width, each image at its top left. The block's padding is set to 0
    after the conversion, as Detectron2 pads normalised images; then
    targets_form 'lists' gives each image's ``[3, h, w]`` view of the
    block, a list, and the other forms the block with ``image_sizes``."""
    image = batch["image"]
    sizes = [(int(h), int(w)) for h, w in sizes]
    height, width = image.shape[-2:]
    if any(size != (height, width) for size in sizes):
        if torch is not None:
            own = torch.tensor(sizes, device=image.device).reshape(-1, 2)
            rows = torch.arange(height, device=image.device)[None, :] < own[:, :1]
            cols = torch.arange(width, device=image.device)[None, :] < own[:, 1:]
            image.masked_fill_(~(rows[:, None, :, None] & cols[:, None, None, :]), 0)
        else:
            for i, (h, w) in enumerate(sizes):
                image[i, :, h:, :] = 0
                image[i, :, :h, w:] = 0
    if form == "lists":
        batch["image"] = [image[i, :, :h, :w] for i, (h, w) in enumerate(sizes)]
    else:
        batch["image_sizes"] = sizes


def _pad_images(batch, divisibility, torch):
    """targets_form='padded': the images padded on the bottom and right to
    a multiple of ``divisibility``, with each image's own size before
    padding in ``image_sizes`` ([(h, w)], as Detectron2's ``ImageList``)."""
    image = batch["image"]
    h, w = image.shape[-2:]
    batch.setdefault("image_sizes", [(int(h), int(w))] * image.shape[0])
    if divisibility > 1:
        ph, pw = -h % divisibility, -w % divisibility
        if ph or pw:
            if torch is not None:
                image = torch.nn.functional.pad(image, (0, pw, 0, ph))
            else:
                image = np.pad(image, ((0, 0), (0, 0), (0, ph), (0, pw)))
    batch["image"] = image


def _array(item):
    return np.frombuffer(item[2], dtype=np.dtype(item[0])).reshape(item[1])


def _flat_targets(values, torch, device):
    """targets_form='flat': a batch's targets concatenated, as Ultralytics'
    ``collate_fn`` gives them: ``batch_idx`` (float32 [M]), ``cls``
    (float32 [M, 1]), ``bboxes`` (float32 [M, 4]: centre x, y, width,
    height, each divided by its image's side) and ``keypoints`` (float32
    [M, K, 3], x and y divided likewise) and ``masks`` (uint8 [M, H, W])
    when the dataset has them; one tensor each, moved to the device once.
    An absent value has no instances."""
    idx, cls, boxes, points, masks = [], [], [], [], []
    for i, v in enumerate(values):
        if v is None:
            continue
        b = _array(v["boxes"]).astype(np.float64)
        h, w = v["canvas_size"]
        fmt = v["format"]
        if fmt == "XYXY":
            cx, cy, bw, bh = (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2, b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
        elif fmt == "XYWH":
            cx, cy, bw, bh = b[:, 0] + b[:, 2] / 2, b[:, 1] + b[:, 3] / 2, b[:, 2], b[:, 3]
        else:
            cx, cy, bw, bh = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
        boxes.append(np.stack([cx / w, cy / h, bw / w, bh / h], axis=1))
        cls.append(_array(v["labels"]).reshape(-1, 1))
        idx.append(np.full(len(b), i))
        if "keypoints" in v:
            k = _array(v["keypoints"]).astype(np.float64)
            points.append(np.concatenate([k[..., :1] / w, k[..., 1:2] / h, k[..., 2:]], axis=-1))
        if "masks" in v:
            masks.append(_array(v["masks"]))
    out = {
        "batch_idx": np.concatenate(idx) if idx else np.zeros(0),
        "cls": np.concatenate(cls) if cls else np.zeros((0, 1)),
        "bboxes": np.concatenate(boxes) if boxes else np.zeros((0, 4)),
    }
    if points:
        out["keypoints"] = np.concatenate(points)
    out = {k: a.astype(np.float32) for k, a in out.items()}
    if masks:
        out["masks"] = np.concatenate(masks)
    return {k: _tensor(torch, a, device) for k, a in out.items()} if torch is not None else out


def _field_column(field, values, torch, device, targets_form="lists"):
    """One field's values in a batch: lists for text, JSON and bytes,
    tensors (numpy without torch) for numbers and arrays, with a validity
    mask when a value is absent; detection targets as ``targets_form``
    says."""
    present = [v is not None for v in values]
    mask = None
    if not all(present):
        mask = np.asarray(present, dtype=bool)
        mask = torch.from_numpy(mask).to(device) if torch is not None else mask
    first = next((v for v in values if v is not None), None)
    if first is None:
        return list(values), mask
    if isinstance(first, str) and field.kind in ("json", "auto") and _is_json(field):
        return [None if v is None else json.loads(v) for v in values], mask
    if isinstance(first, (str, bytes)):
        return list(values), mask
    if isinstance(first, dict) and targets_form == "flat":
        return _flat_targets(values, torch, device), mask
    if isinstance(first, dict):  # detection targets
        return _target_list(values, torch, device), mask
    if isinstance(first, tuple):  # .npy: (dtype, shape, data)
        arrays = [None if v is None else np.frombuffer(v[2], dtype=np.dtype(v[0])).reshape(v[1]) for v in values]
        same = all(a is not None and a.shape == arrays[0].shape and a.dtype == arrays[0].dtype for a in arrays)
        if same:
            stacked = np.stack(arrays)
            return (_tensor(torch, stacked, device) if torch is not None else stacked), mask
        return [a if a is None or torch is None else _tensor(torch, a, device) for a in arrays], mask
    dtype = np.int64 if isinstance(first, int) or (isinstance(first, list) and first and isinstance(first[0], int)) else np.float64
    if field.kind in ("float", "float_list"):
        dtype = np.float64
    if isinstance(first, list):
        lengths = {len(v) for v in values if v is not None}
        if len(lengths) == 1:
            width = lengths.pop()
            arr = np.asarray([v if v is not None else [0] * width for v in values], dtype=dtype).reshape(len(values), width)
            return (_tensor(torch, arr, device) if torch is not None else arr), mask
        ragged = [None if v is None else np.asarray(v, dtype=dtype) for v in values]
        return [a if a is None or torch is None else _tensor(torch, a, device) for a in ragged], mask
    arr = np.asarray([v if v is not None else 0 for v in values], dtype=dtype)
    return (_tensor(torch, arr, device) if torch is not None else arr), mask


def _is_json(field):
    return field.kind == "json" or (field.kind == "auto" and field.source.rsplit(".", 1)[-1] in ("json", "jsn"))


def _tensor(torch, arr, device):
    return torch.from_numpy(np.ascontiguousarray(arr)).to(device)


def _convert_view(data, size, n, output, torch, device, channels_last):
    """A view's uint8 HWC images as NCHW, with its own pipeline's output
    conversion (ToDtype / Normalize), on the loader's device."""
    dtype, mean, std = output
    hwc = np.frombuffer(data, dtype=np.uint8).reshape(n, size, size, 3)
    if torch is None:
        image = np.ascontiguousarray(hwc.transpose(0, 3, 1, 2))
        if dtype not in (None, "uint8") or mean is not None:
            image = image.astype(np.float32) / np.float32(255.0)
            if mean is not None:
                mean_ = np.asarray(mean, np.float32).reshape(1, 3, 1, 1)
                std_ = np.asarray(std, np.float32).reshape(1, 3, 1, 1)
                image = (image - mean_) / std_
        return image
    image = torch.from_numpy(np.array(hwc))
    if device != "cpu":
        image = image.pin_memory().to(device, non_blocking=True)
    image = image.permute(0, 3, 1, 2)
    if dtype not in (None, "uint8") or mean is not None:
        image = image.to(getattr(torch, dtype or "float32")) / 255.0
        if mean is not None:
            m = torch.tensor(mean, dtype=image.dtype, device=image.device).view(1, 3, 1, 1)
            s = torch.tensor(std, dtype=image.dtype, device=image.device).view(1, 3, 1, 1)
            image = (image - m) / s
    return image.contiguous(memory_format=torch.channels_last) if channels_last else image.contiguous()
