"""Augmentation pipelines for Stoker's workers, in torchvision's terms.

Every class here has the name, the arguments, the argument order and the
defaults of its ``torchvision.transforms.v2`` namesake, and means what
torchvision means applied to a PIL image; a worker runs it on every image
of the dataset::

    from stoker import transforms as T

    pipeline = T.Compose([
        T.RandomResizedCrop(176),
        T.RandomHorizontalFlip(),
        T.TrivialAugmentWide(interpolation="bilinear"),
        T.PILToTensor(),
        T.ToDtype("float32", scale=True),       # torch.float32 works too
        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        T.RandomErasing(0.1),
    ])
    loader = stoker.Loader(workers, dataset, batch_size=256, transform=pipeline)

A torchvision pipeline (``torchvision.transforms`` or ``.v2``) converts as
it is: ``Loader(..., transform=tv_pipeline)`` or ``from_torchvision(obj)``.
Anything Stoker cannot run the same way (a ``Lambda``, a class of your own,
an argument value it cannot express) is refused, naming the transform and
its position; nothing is ever replaced by something close.

A pipeline travels as versioned JSON (``to_json()``; ``from_json()`` reads
it back): ``{"version": 1, "ops": [{"op": "RandomResizedCrop", "size": 176,
...}, ...]}``, one object per op with torchvision's argument names.
Interpolation modes are their value strings (``"bilinear"``), dtypes their
names (``"float32"``). The worker checks it before any work: it must end at
a fixed, square size; the output conversion (``ToImage``, ``PILToTensor``,
``ToTensor``, ``ToDtype``, ``ConvertImageDtype``, ``Normalize``) comes last,
where only ``RandomErasing`` may follow it, and is what the loader applies
to the delivered uint8 batch (``ToDtype(torch.float32, scale=True)`` +
``Normalize(mean, std)`` give float32 normalised images).

``MixUp`` and ``CutMix`` (and a ``RandomChoice`` of them) are batch
transforms: they run in the training process on each batch the loader
yields (``Loader(..., batch_transform=T.MixUp(num_classes=1000))``),
exactly as torchvision's do after collation, and turn ``label`` into soft
targets ``[B, num_classes]`` float32.

Nothing here imports torch or torchvision: torchvision objects are
recognised by their class's module and name.
"""

# The annotations are text (never evaluated): stubgen.py copies them into
# transforms.pyi, beside the op classes' types from the op schema.
from __future__ import annotations

import inspect
import json
import math
import numbers
from typing import Any

from ._batch import BatchRandomChoice, BatchTransform, CutMix, MixUp, _is_batch, batch_rng
from ._batch import _from_torchvision as _batch_from_torchvision
from ._torchvision import _tv_module, _tv_version, _where
from ._kinds import (  # DTYPES, INTERPOLATIONS, PADDING_MODES: public, re-exported
    _KINDS,
    _PIL_CODES,
    _REQUIRED,
    DTYPES,
    INTERPOLATIONS,
    PADDING_MODES,
    _ArgError,
    _plain,
    dtype_name,
)

__all__ = [
    "Transform",
    "BatchTransform",
    "MixUp",
    "CutMix",
    "from_json",
    "from_dict",
    "from_torchvision",
    "OP_NAMES",
    "SPEC_VERSION",
]

SPEC_VERSION = 1

def _op_table(schema):
    """name -> (summary, [(argument, converter, default)], schema entry),
    in torchvision's positional order and with its defaults."""
    table = {}
    for op in schema:
        args = []
        for a in op["args"]:
            kind = _KINDS.get(a["kind"])
            if kind is None:
                raise ImportError(
                    f"stoker.transforms: {op['name']}.{a['name']} is of kind {a['kind']!r}, which this "
                    f"package cannot convert: the extension and the package come from different builds"
                )
            args.append((a["name"], kind, _REQUIRED if a["required"] else a["default"]))
        table[op["name"]] = (op["doc"], args, op)
    return table


def _load_schema():
    from . import _stoker

    return _stoker.op_schema()


_OPS = _op_table(_load_schema())

OP_NAMES = tuple(_OPS)
_CONTAINERS = tuple(name for name, (_, _, entry) in _OPS.items() if entry["role"] == "container")
_SUPPORTED = ", ".join(OP_NAMES + ("MixUp", "CutMix"))


class Transform:
    """A Stoker op: one of torchvision's transforms, run by the workers.

    Its arguments are attributes (``RandomResizedCrop(224).scale``),
    normalised to their JSON form. ``to_dict()`` is its JSON object,
    ``to_json()`` the versioned pipeline of it alone (a ``Compose``: of its
    transforms).
    """

    #: The op's name (None on this base).
    op: str | None = None
    _args = ()

    def __init__(self, *args: object, **kwargs: object) -> None:
        try:
            bound = self.__signature__.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.op}: {e}") from None
        bound.apply_defaults()
        self._set(bound.arguments, "")

    def _set(self, values, path):
        for name, kind, _ in self._args:
            value = values[name]
            try:
                if kind == "transforms":
                    value = _children(value, path)
                else:
                    value = kind(name, value)
            except _ArgError as e:
                raise ValueError(f"{_where(path, self.op)}: {e}") from None
            setattr(self, name, value)

    # Any: each argument's value is its kind's JSON form (children as
    # objects), one of many types.
    def arguments(self) -> dict[str, Any]:
        """The arguments, by name, in torchvision's order (children as objects)."""
        return {name: getattr(self, name) for name, _, _ in self._args}

    # Any: a JSON object's values are any JSON.
    def to_dict(self) -> dict[str, Any]:
        """The op's JSON object: ``{"op": name, argument: value, ...}``."""
        d = {"op": self.op}
        for name, value in self.arguments().items():
            d[name] = [t.to_dict() for t in value] if name == "transforms" else value
        return d

    # Any: a JSON object's values are any JSON.
    def ops(self) -> list[dict[str, Any]]:
        """The op dicts of a pipeline of this op alone."""
        return [self.to_dict()]

    def to_json(self) -> str:
        """The versioned JSON pipeline: ``{"version": 1, "ops": [...]}``."""
        return json.dumps({"version": SPEC_VERSION, "ops": self.ops()}, allow_nan=False)

    def __eq__(self, other):
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    __hash__ = None

    def __repr__(self):
        parts = []
        for name, value in self.arguments().items():
            if isinstance(value, list) and value and isinstance(value[0], Transform):
                value = "[" + ", ".join(repr(t) for t in value) + "]"
            else:
                value = repr(value)
            parts.append(f"{name}={value}")
        return f"{self.op}({', '.join(parts)})"


def _children(value, path):
    """A container's transforms: stoker ops, op dicts or torchvision objects."""
    value = list(value) if not isinstance(value, (str, bytes, dict)) and hasattr(value, "__iter__") else value
    if not isinstance(value, list) or not value:
        raise _ArgError(f"transforms must be a non-empty list of transforms, got {value!r}")
    out = []
    for i, child in enumerate(value):
        where = f"{path}.transforms[{i}]" if path else f"transforms[{i}]"
        if isinstance(child, Transform):
            out.append(child)
        elif isinstance(child, BatchTransform):
            raise ValueError(
                f"{where} ({type(child).__name__}): a batch transform cannot be part of a pipeline: "
                f"pass it as Loader(batch_transform=...)"
            )
        elif isinstance(child, dict):
            out.append(_from_dict(child, where))
        else:
            converted = _convert(child, where)
            if isinstance(converted, BatchTransform):
                raise ValueError(
                    f"{where} ({type(child).__name__}): a batch transform cannot be part of a pipeline: "
                    f"pass it as Loader(batch_transform=...)"
                )
            out.append(converted)
    return out


class _Compose(Transform):
    def ops(self):
        return [t.to_dict() for t in self.transforms]


class _RandomChoice(Transform):
    def __new__(cls, *args, **kwargs):
        # A choice of MixUp / CutMix is a batch transform.
        transforms = args[0] if args else kwargs.get("transforms")
        if (
            hasattr(transforms, "__len__")
            and hasattr(transforms, "__getitem__")
            and not isinstance(transforms, (str, dict))
        ):
            transforms = list(transforms)
            batch = [_is_batch(t) for t in transforms]
            if transforms and all(batch):
                kwargs = {k: v for k, v in kwargs.items() if k != "transforms"}
                return BatchRandomChoice(transforms, *args[1:], **kwargs)
            if any(batch):
                raise ValueError(
                    "RandomChoice: transforms mixes batch transforms (MixUp, CutMix) with image transforms"
                )
        return super().__new__(cls)


_BASES = {"Compose": _Compose, "RandomChoice": _RandomChoice}


def _make_class(name, summary, args, entry):
    params = [inspect.Parameter(arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default) for arg, _, default in args]
    listing = ", ".join(p.name if p.default is _REQUIRED else f"{p.name}={p.default!r}" for p in params)
    lines = [summary, "", f"``{entry['origin']}({listing})``; JSON ``{{\"op\": \"{name}\", ...}}``."]
    if entry["args"]:
        lines += ["", "Args:"]
        lines += [f"    {a['name']}: {a['doc']}" for a in entry["args"]]
    doc = "\n".join(lines)
    cls = type(
        name,
        (_BASES.get(name, Transform),),
        {
            "op": name,
            "_args": tuple(args),
            "__signature__": inspect.Signature(params),
            "__doc__": doc,
            "__module__": __name__,
        },
    )
    cls.__qualname__ = name
    return cls


_CLASSES = {name: _make_class(name, summary, args, entry) for name, (summary, args, entry) in _OPS.items()}
globals().update(_CLASSES)
__all__ += list(_CLASSES)


def _construct(name, values, path):
    """An op of `name` from already-named values, errors naming `path`."""
    cls = _CLASSES[name]
    obj = Transform.__new__(cls)
    missing = [arg for arg, _, default in cls._args if arg not in values and default is _REQUIRED]
    if missing:
        raise ValueError(f"{_where(path, name)}: missing argument {missing[0]!r}")
    full = {}
    for arg, _, default in cls._args:
        full[arg] = values[arg] if arg in values else default
    obj._set(full, path)
    return obj


# ---------------------------------------------------------------------------
# JSON


# Any: a JSON object's values are any JSON.
def from_dict(d: dict[str, Any], path: str = "ops[0]") -> Transform:
    """An op from its JSON object (``{"op": "Resize", "size": 256}``)."""
    return _from_dict(d, path)


def _from_dict(d, path):
    if not isinstance(d, dict):
        raise ValueError(f"{path}: an op must be a JSON object, got {d!r}")
    name = d.get("op")
    if not isinstance(name, str):
        raise ValueError(f'{path}: missing "op" (the transform\'s name)')
    if name not in _OPS:
        raise ValueError(f"{path}: unknown op {name!r}; supported: {', '.join(OP_NAMES)}")
    known = [arg for arg, _, _ in _OPS[name][1]]
    for key in d:
        if key != "op" and key not in known:
            raise ValueError(
                f"{_where(path, name)}: unknown argument {key!r}; {name} takes {', '.join(known) or 'none'}"
            )
    values = {k: v for k, v in d.items() if k != "op"}
    if "transforms" in values and isinstance(values["transforms"], list):
        # Children are JSON objects too.
        values["transforms"] = [_from_dict(c, f"{path}.transforms[{i}]") for i, c in enumerate(values["transforms"])]
    return _construct(name, values, path)


def from_json(text: str) -> Compose:
    """A ``Compose`` of the ops of a JSON pipeline (``to_json()``'s form).

    Errors name the op by its position (``ops[3] (RandomCrop)``) and the
    argument.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"transform spec is not valid JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("ops"), list):
        raise ValueError('a transform spec is {"version": 1, "ops": [...]}')
    extra = set(doc) - {"version", "ops"}
    if extra:
        raise ValueError(f"transform spec: unknown field {sorted(extra)[0]!r}")
    version = doc.get("version", SPEC_VERSION)
    if version != SPEC_VERSION:
        raise ValueError(f"transform spec version {version!r} is not supported (this reads version {SPEC_VERSION})")
    if not doc["ops"]:
        raise ValueError("transform has no ops")
    ops = [_from_dict(op, f"ops[{i}]") for i, op in enumerate(doc["ops"])]
    return _CLASSES["Compose"](ops)


# ---------------------------------------------------------------------------
# torchvision (and timm) objects


def from_torchvision(obj: object) -> Transform | BatchTransform:
    """The Stoker pipeline of a torchvision transform.

    ``obj`` is a ``torchvision.transforms`` (v1) or ``torchvision.transforms.v2``
    transform or container, read through its attributes: a ``Compose``
    gives a ``Compose``, a single transform its op; v2 ``MixUp`` /
    ``CutMix`` (and a ``RandomChoice`` of them) give the batch transforms
    here. timm's ``RandAugment`` (``rand_augment_transform``) gives
    ``TimmRandAugment``. Stoker ops and op dicts pass through.

    Raises ``ValueError`` for anything else (a ``Lambda``, a class of your
    own, a subclass of a torchvision class, an argument value Stoker cannot
    express), naming the transform's class and its position
    (``transforms[3] (Lambda)``) and listing the supported ops.
    """
    return _convert(obj, "")


def _unsupported(obj, path, why=None):
    name = type(obj).__name__
    where = f"{path} ({name})" if path else f"transform ({name})"
    why = why or "not a transform stoker can run"
    return ValueError(f"{where}: {why}; supported: {_SUPPORTED}")


def _convert(obj, path):
    if isinstance(obj, (Transform, BatchTransform)):
        return obj
    if isinstance(obj, dict):
        return _from_dict(obj, path or "ops[0]")
    cls = type(obj)
    name = cls.__name__
    if cls.__module__ == "timm.data.auto_augment" and name == "RandAugment":
        return _from_timm(obj, path)
    version = _tv_version(obj)
    if version is None and _is_reference_crop(obj):
        return _from_reference_crop(obj, path)
    if version is None:
        module = cls.__module__ or ""
        base = next((b for b in cls.__mro__[1:] if _tv_module(b.__module__) and b.__name__ in _OPS), None)
        if isinstance(obj, (list, tuple)):
            why = "a list: wrap it in Compose"
        elif base is not None:
            why = f"a subclass of torchvision's {base.__name__}: its own code would not run on the workers"
        elif module.startswith("torchvision"):
            why = "not one of the torchvision transforms stoker runs"
        else:
            why = f"a class of {module!r}, not torchvision's: its code would not run on the workers"
        raise _unsupported(obj, path, why)
    if _is_batch(obj):
        return _batch_from_torchvision(obj, path)
    if name not in _OPS:
        raise _unsupported(obj, path)
    values = {}
    for arg, _, default in _OPS[name][1]:
        if arg == "transforms":
            values[arg] = [_convert(c, _child(path, i)) for i, c in enumerate(obj.transforms)]
            if any(isinstance(c, BatchTransform) for c in values[arg]):
                i = next(i for i, c in enumerate(values[arg]) if isinstance(c, BatchTransform))
                raise ValueError(
                    f"{_child(path, i)} ({type(obj.transforms[i]).__name__}): a batch transform cannot be part "
                    f"of a pipeline: pass it as Loader(batch_transform=...)"
                )
            continue
        if not hasattr(obj, arg):
            if default is _REQUIRED:
                raise _unsupported(obj, path, f"has no attribute {arg!r} to read")
            continue
        values[arg] = _tv_value(name, arg, getattr(obj, arg), version)
    return _construct(name, values, path)


def _is_reference_crop(obj):
    """Whether ``obj`` is the ``FixedSizeCrop`` of torchvision's detection
    references (``references/detection/transforms.py``, which users copy
    into their project: the ``lsj`` recipe), not shipped in the package."""
    cls = type(obj)
    module = (cls.__module__ or "").rsplit(".", 1)[-1]
    return (
        cls.__name__ == "FixedSizeCrop"
        and module == "transforms"
        and all(hasattr(obj, a) for a in ("crop_height", "crop_width", "fill", "padding_mode"))
    )


def _from_reference_crop(obj, path):
    """The references' FixedSizeCrop, read through its attributes."""
    size = [int(obj.crop_height), int(obj.crop_width)]
    values = {"size": size, "fill": obj.fill, "padding_mode": obj.padding_mode}
    return _construct("FixedSizeCrop", values, path)


def _child(path, i):
    return f"{path}.transforms[{i}]" if path else f"transforms[{i}]"


def _tv_value(name, arg, value, version):
    """An attribute of a torchvision transform as the argument it came from."""
    if version == "v2":
        if name == "RandomCrop" and arg == "padding" and value is not None:
            # v2 keeps padding parsed as [left, right, top, bottom].
            left, right, top, bottom = _plain(value)
            if left == right == top == bottom:
                return left
            if (left, top) == (right, bottom):
                return [left, top]
            return [left, top, right, bottom]
        if name == "RandomErasing" and arg == "value":
            # v2 keeps value as a list of floats, None for "random".
            if value is None:
                return "random"
    return value


# timm's transform lists (timm.data.auto_augment._RAND_TRANSFORMS and the
# increasing variant), which the config's inc flag chooses between.
_TIMM_OPS = [
    "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd", "Color",
    "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel",
]  # fmt: skip
_TIMM_INCREASING = {"Posterize", "Solarize", "Color", "Contrast", "Brightness", "Sharpness"}
_TIMM_OPS_INC = [f"{n}Increasing" if n in _TIMM_INCREASING else n for n in _TIMM_OPS]


def _from_timm(obj, path):
    """timm's RandAugment object (``rand_augment_transform(config, hparams)``)
    back to its config string and hparams."""
    ops = list(getattr(obj, "ops", []))
    names = [getattr(o, "name", None) for o in ops]
    if names not in (_TIMM_OPS, _TIMM_OPS_INC):
        raise _unsupported(obj, path, f"ops {names} are not timm's standard RandAugment set (a 't' transform subset)")
    if getattr(obj, "choice_weights", None) is not None:
        raise _unsupported(obj, path, "weighted op choice is not supported")
    first = ops[0]
    for o in ops[1:]:
        same = (o.prob, o.magnitude, o.magnitude_std, o.magnitude_max, o.kwargs.get("fillcolor"))
        if same != (
            first.prob,
            first.magnitude,
            first.magnitude_std,
            first.magnitude_max,
            first.kwargs.get("fillcolor"),
        ):
            raise _unsupported(obj, path, "its ops have different settings")
    config = [f"rand-m{_num_str(first.magnitude)}", f"n{int(obj.num_layers)}", f"p{_num_str(first.prob)}"]
    mstd = float(first.magnitude_std or 0)
    config.append("mstd101" if math.isinf(mstd) else f"mstd{_num_str(mstd)}")
    if first.magnitude_max is not None:
        config.append(f"mmax{_num_str(first.magnitude_max)}")
    config.append("inc1" if names == _TIMM_OPS_INC else "inc0")
    resample = first.kwargs.get("resample")
    codes = [int(getattr(r, "value", r)) for r in resample] if isinstance(resample, (list, tuple)) else None
    if codes is not None and sorted(codes) == [2, 3]:
        interpolation = "random"
    elif codes is not None and len(set(codes)) == 1:
        interpolation = _PIL_CODES.get(codes[0], codes[0])
    elif isinstance(getattr(resample, "value", resample), numbers.Integral):
        interpolation = _PIL_CODES.get(int(getattr(resample, "value", resample)), resample)
    else:
        interpolation = resample
    hparams = first.hparams
    values = {
        "config": "-".join(config),
        "img_mean": first.kwargs.get("fillcolor"),
        "interpolation": interpolation,
        "translate_pct": hparams.get("translate_pct", 0.45),
    }
    return _construct("TimmRandAugment", values, path)


def _num_str(v):
    v = float(v)
    return str(int(v)) if v.is_integer() else repr(v)


__all__ += ["BatchRandomChoice", "batch_rng", "dtype_name"]


def as_batch_transform(obj: object) -> BatchTransform:
    """A batch transform from a stoker one or torchvision's MixUp / CutMix /
    RandomChoice of them; ValueError for anything else."""
    if isinstance(obj, BatchTransform):
        return obj
    if _is_batch(obj):
        return _convert(obj, "")
    raise ValueError(
        f"batch_transform ({type(obj).__name__}) must be MixUp, CutMix or RandomChoice of them "
        f"(stoker.transforms or torchvision.transforms.v2)"
    )


def as_pipeline_json(transform: object) -> str:
    """The JSON of a pipeline given as a stoker op, a torchvision object, an
    op dict or a JSON string; ``"train"`` and ``"eval"`` pass through."""
    if isinstance(transform, str):
        return transform
    if isinstance(transform, BatchTransform) or _is_batch(transform):
        raise ValueError(
            f"transform ({type(transform).__name__}) is a batch transform: pass it as Loader(batch_transform=...)"
        )
    if isinstance(transform, (list, tuple)):
        transform = _CLASSES["Compose"](list(transform))
    return _convert(transform, "").to_json()
