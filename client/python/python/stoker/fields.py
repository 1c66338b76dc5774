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
    (int64 ``[N]``), and ``iscrowd``, ``area`` and ``keypoints`` (``[N, K,
    3]``: x, y, visibility) when the dataset has them, as tensors on the
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


def _field_column(field, values, torch, device):
    """One field's values in a batch: lists for text, JSON and bytes,
    tensors (numpy without torch) for numbers and arrays, with a validity
    mask when a value is absent."""
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
    if isinstance(first, dict):  # detection targets
        return [None if v is None else _target(v, torch, device) for v in values], mask
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
