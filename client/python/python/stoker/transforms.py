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

import enum
import inspect
import json
import math
import numbers

import numpy as np

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

# torchvision's InterpolationMode values, and PIL's resampling codes.
INTERPOLATIONS = ("nearest", "nearest-exact", "bilinear", "bicubic", "box", "hamming", "lanczos")
_PIL_CODES = {0: "nearest", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming", 1: "lanczos"}
PADDING_MODES = ("constant", "edge", "reflect", "symmetric")
DTYPES = ("uint8", "float32", "float16", "bfloat16", "float64")
_DTYPE_ALIASES = {"float": "float32", "half": "float16", "double": "float64"}


class _ArgError(ValueError):
    """A bad argument value; the caller adds the op and its position."""


# ---------------------------------------------------------------------------
# Argument kinds: each turns a Python value (tuples, numpy or torch scalars,
# torchvision enums) into its JSON form, or raises _ArgError naming the
# argument. Ranges and limits are the worker's to check (check_transform);
# these check shapes and types.


def _plain(v):
    """numpy arrays and scalars, torch tensors -> Python values; tuples -> lists."""
    if hasattr(v, "tolist") and not isinstance(v, (list, tuple, str)):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _is_number(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _number(name, v):
    v = _plain(v)
    if not _is_number(v) or not math.isfinite(v):
        raise _ArgError(f"{name} must be a finite number, got {v!r}")
    return int(v) if isinstance(v, numbers.Integral) else float(v)


def _int(name, v):
    v = _plain(v)
    if not isinstance(v, numbers.Integral) or isinstance(v, bool):
        raise _ArgError(f"{name} must be an int, got {v!r}")
    return int(v)


def _opt_int(name, v):
    return None if v is None else _int(name, v)


def _bool(name, v):
    v = _plain(v)
    if not isinstance(v, bool):
        raise _ArgError(f"{name} must be True or False, got {v!r}")
    return v


def _opt_bool(name, v):
    return None if v is None else _bool(name, v)


def _p(name, v):
    v = _number(name, v)
    if not 0.0 <= v <= 1.0:
        raise _ArgError(f"{name} must lie in [0, 1], got {v!r}")
    return v


def _numbers(name, v, lengths, what):
    v = _plain(v)
    if not isinstance(v, list) or len(v) not in lengths:
        raise _ArgError(f"{name} must be {what}, got {v!r}")
    return [_number(name, x) for x in v]


def _ints(name, v, lengths, what):
    v = _plain(v)
    if not isinstance(v, list) or len(v) not in lengths:
        raise _ArgError(f"{name} must be {what}, got {v!r}")
    return [_int(name, x) for x in v]


def _int_or(name, v, what):
    """An int, or the error naming every accepted form."""
    if not isinstance(v, numbers.Integral) or isinstance(v, bool):
        raise _ArgError(f"{name} must be {what}, got {v!r}")
    return int(v)


def _size(name, v):
    """A crop's size: an int, or [h, w] (a square [s, s] is written as s)."""
    v = _plain(v)
    if isinstance(v, list):
        sides = _ints(name, v, (1, 2), "an int or [h, w]")
        return sides[0] if len(set(sides)) == 1 else sides
    return _int_or(name, v, "an int or [h, w]")


def _resize_size(name, v):
    """Resize's size: an int (the shorter side), [h, w], or None (with max_size)."""
    v = _plain(v)
    if v is None:
        return None
    if isinstance(v, list):
        sides = _ints(name, v, (1, 2), "an int, [h, w] or None")
        return sides[0] if len(sides) == 1 else sides
    return _int_or(name, v, "an int, [h, w] or None")


def _kernel(name, v):
    v = _plain(v)
    if isinstance(v, list):
        return _ints(name, v, (1, 2), "an int or [kx, ky]")
    return _int_or(name, v, "an int or [kx, ky]")


def _range(name, v):
    """A number or [min, max]."""
    v = _plain(v)
    if isinstance(v, list) or not _is_number(v):
        return _numbers(name, v, (2,), "a number or [min, max]")
    return _number(name, v)


def _opt_range(name, v):
    return None if v is None else _range(name, v)


def _pair(name, v):
    return _numbers(name, v, (2,), "[min, max]")


def _opt_pair(name, v):
    return None if v is None else _numbers(name, v, (2,), "None or a pair of numbers")


def _shear(name, v):
    v = _plain(v)
    if v is None:
        return None
    if isinstance(v, list) or not _is_number(v):
        return _numbers(name, v, (2, 4), "None, a number, [min, max] or [x min, x max, y min, y max]")
    return _number(name, v)


def _image_entry(name, d):
    """The value a torchvision dict keyed by input type (fill, dtype) has
    for the image: the entry of ``tv_tensors.Image``, ``PIL.Image.Image``
    or a plain ``torch.Tensor`` (these must agree), else ``"others"``."""
    found = []
    for key, value in d.items():
        if isinstance(key, type):
            module = key.__module__ or ""
            image = key.__name__ == "Image" and module.startswith(("torchvision.tv_tensors", "PIL"))
            tensor = key.__name__ == "Tensor" and module.split(".")[0] == "torch"
            if image or tensor:
                found.append(value)
    values = [_plain(v) for v in found]
    if values:
        if any(v != values[0] for v in values):
            raise _ArgError(f"{name} gives images different values by type ({d!r}); Stoker has one image type")
        return found[0]
    if "others" in d:
        return d["others"]
    raise _ArgError(f"{name} {d!r} has no entry for images nor 'others'")


def _fill(name, v):
    """A fill colour: None, a number, or one number per channel."""
    if isinstance(v, dict):
        v = _image_entry(name, v)
    v = _plain(v)
    if v is None:
        return None
    if isinstance(v, list) or not _is_number(v):
        return _numbers(name, v, (1, 3), "None, a number or [r, g, b]")
    return _number(name, v)


def _padding(name, v):
    what = "an int, [left/right, top/bottom] or [left, top, right, bottom]"
    v = _plain(v)
    if isinstance(v, list):
        return _ints(name, v, (1, 2, 4), what)
    return _int_or(name, v, what)


def _opt_padding(name, v):
    return None if v is None else _padding(name, v)


def _padding_mode(name, v):
    if v not in PADDING_MODES:
        raise _ArgError(f"{name} must be one of {', '.join(PADDING_MODES)}, got {v!r}")
    return v


def _interpolation(name, v):
    """torchvision's InterpolationMode, its value string, or a PIL code."""
    if isinstance(v, enum.Enum):
        v = v.value
    if isinstance(v, numbers.Integral) and not isinstance(v, bool) and int(v) in _PIL_CODES:
        return _PIL_CODES[int(v)]
    if isinstance(v, str) and v.lower() in INTERPOLATIONS:
        return v.lower()
    raise _ArgError(f"{name} must be an InterpolationMode, one of {', '.join(INTERPOLATIONS)} or a PIL code, got {v!r}")


def _timm_interpolation(name, v):
    if v == "random":
        return v
    v = _interpolation(name, v)
    if v not in ("bilinear", "bicubic"):
        raise _ArgError(f"{name} must be random, bilinear or bicubic, got {v!r}")
    return v


def dtype_name(v, name="dtype"):
    """A dtype's name (``"float32"``) from a torch dtype, a numpy dtype or
    a string; one of uint8, float32, float16, bfloat16, float64."""
    if isinstance(v, str):
        s = v[len("torch.") :] if v.startswith("torch.") else v
    elif type(v).__name__ == "dtype" and type(v).__module__ == "torch":
        s = str(v)[len("torch.") :]
    elif v is None:
        raise _ArgError(f"{name} must be one of {', '.join(DTYPES)}, got None")
    else:
        try:
            s = np.dtype(v).name
        except TypeError:
            raise _ArgError(f"{name} must be one of {', '.join(DTYPES)}, got {v!r}") from None
    s = _DTYPE_ALIASES.get(s, s)
    if s not in DTYPES:
        raise _ArgError(f"{name} must be one of {', '.join(DTYPES)}, got {v!r}")
    return s


def _dtype(name, v):
    if isinstance(v, dict):
        v = _image_entry(name, v)
        if v is None:
            # No conversion for images: they stay uint8.
            return "uint8"
    return dtype_name(v, name)


def _policy(name, v):
    if isinstance(v, enum.Enum):
        v = v.value
    if not isinstance(v, str):
        raise _ArgError(f"{name} must be an AutoAugmentPolicy or its value, got {v!r}")
    return v.lower()


def _str(name, v):
    if not isinstance(v, str):
        raise _ArgError(f"{name} must be a string, got {v!r}")
    return v


def _weights(name, v):
    v = _plain(v)
    if v is None:
        return None
    if not isinstance(v, list):
        raise _ArgError(f"{name} must be None or a list of weights, got {v!r}")
    return [_number(name, x) for x in v]


def _floats(name, v):
    v = _plain(v)
    if _is_number(v):
        return [_number(name, v)]
    if not isinstance(v, list) or len(v) not in (1, 3):
        raise _ArgError(f"{name} must be one number per channel (3), got {v!r}")
    return [float(_number(name, x)) for x in v]


def _erase_value(name, v):
    v = _plain(v)
    if v == "random":
        return v
    if isinstance(v, list) or not _is_number(v):
        values = _numbers(name, v, (1, 3), "a number, [r, g, b] or 'random'")
        return values[0] if len(values) == 1 else values
    return _number(name, v)


_REQUIRED = inspect.Parameter.empty

# ---------------------------------------------------------------------------
# The ops come from the workers' own op schema (``_stoker.op_schema()``,
# declared once per op in Rust: core/src/transform/ops/). Each argument's
# kind names its converter here; its name, position, default and doc are
# the schema's.

_KINDS = {
    "transforms": "transforms",
    "probability": _p,
    "number": _number,
    "int": _int,
    "opt_int": _opt_int,
    "bool": _bool,
    "opt_bool": _opt_bool,
    "size": _size,
    "resize_size": _resize_size,
    "kernel": _kernel,
    "range": _range,
    "opt_range": _opt_range,
    "pair": _pair,
    "opt_pair": _opt_pair,
    "shear": _shear,
    "fill": _fill,
    "padding": _padding,
    "opt_padding": _opt_padding,
    "padding_mode": _padding_mode,
    "interpolation": _interpolation,
    "timm_interpolation": _timm_interpolation,
    "dtype": _dtype,
    "policy": _policy,
    "str": _str,
    "weights": _weights,
    "per_channel": _floats,
    "erase_value": _erase_value,
}


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


def _where(path, name):
    return f"{path} ({name})" if path else name


class Transform:
    """A Stoker op: one of torchvision's transforms, run by the workers.

    Its arguments are attributes (``RandomResizedCrop(224).scale``),
    normalised to their JSON form. ``to_dict()`` is its JSON object,
    ``to_json()`` the versioned pipeline of it alone (a ``Compose``: of its
    transforms).
    """

    op = None
    _args = ()

    def __init__(self, *args, **kwargs):
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

    def arguments(self):
        """The arguments, by name, in torchvision's order (children as objects)."""
        return {name: getattr(self, name) for name, _, _ in self._args}

    def to_dict(self):
        """The op's JSON object: ``{"op": name, argument: value, ...}``."""
        d = {"op": self.op}
        for name, value in self.arguments().items():
            d[name] = [t.to_dict() for t in value] if name == "transforms" else value
        return d

    def ops(self):
        """The op dicts of a pipeline of this op alone."""
        return [self.to_dict()]

    def to_json(self):
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


def from_dict(d, path="ops[0]"):
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


def from_json(text):
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


def _tv_module(module):
    """Which torchvision API a module is part of: "v1", "v2" or None."""
    module = module or ""
    if module.startswith("torchvision.transforms.v2."):
        return "v2"
    if module in ("torchvision.transforms.transforms", "torchvision.transforms.autoaugment"):
        return "v1"
    return None


def _tv_version(obj):
    """Which torchvision API made `obj` ("v1", "v2" or None), by its class's
    module: torchvision is never imported."""
    return _tv_module(type(obj).__module__)


def _is_batch(obj):
    if isinstance(obj, BatchTransform):
        return True
    name = type(obj).__name__
    if _tv_version(obj) == "v2":
        if name in ("MixUp", "CutMix"):
            return True
        if name == "RandomChoice":
            children = list(getattr(obj, "transforms", []))
            return bool(children) and all(_is_batch(c) for c in children)
    return False


def from_torchvision(obj):
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
    if name in ("MixUp", "CutMix") and version == "v2":
        return _from_tv_mix(obj, path)
    if name == "RandomChoice" and version == "v2" and _is_batch(obj):
        children = [_convert(c, _child(path, i)) for i, c in enumerate(obj.transforms)]
        return BatchRandomChoice(children, p=_plain(obj.p))
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


def _from_tv_mix(obj, path):
    getter = getattr(obj, "_labels_getter", None)
    if getattr(getter, "__name__", None) != "_find_labels_default_heuristic":
        raise _unsupported(obj, path, "labels_getter other than 'default' (stoker batches carry labels in 'label')")
    cls = MixUp if type(obj).__name__ == "MixUp" else CutMix
    try:
        return cls(alpha=obj.alpha, num_classes=obj.num_classes)
    except ValueError as e:
        raise ValueError(f"{_where(path, type(obj).__name__)}: {e}") from None


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


# ---------------------------------------------------------------------------
# Batch transforms


def batch_rng(seed, epoch, index):
    """The random source of batch ``index`` of ``epoch``: a numpy Generator
    seeded from (seed, epoch, index) only, so two runs of a loader mix the
    same batches the same way, on torch or numpy batches alike."""
    return np.random.default_rng(np.random.SeedSequence([int(seed) & (2**64 - 1), int(epoch), int(index), 0x4D49]))


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


class BatchTransform:
    """A transform of whole batches, run where the loader yields them.

    ``t(images, labels, rng=None)`` takes a batch ``[B, C, H, W]`` (torch
    tensor or numpy array) and index labels ``[B]`` (or soft ``[B,
    num_classes]``) and returns the mixed images and soft labels
    ``[B, num_classes]`` float32. ``rng`` is a ``numpy.random.Generator``
    (``batch_rng(seed, epoch, index)`` in the loader), a fresh one when None.
    """

    #: Whether the transform needs float images (MixUp does).
    needs_float = False

    def _draw(self, rng, height, width):
        raise NotImplementedError

    def _mix(self, images, params):
        raise NotImplementedError

    def __call__(self, images, labels, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        if images.ndim != 4:
            raise ValueError(f"{self._name()}: expected a batch [B, C, H, W], got shape {tuple(images.shape)}")
        if labels.shape[0] != images.shape[0]:
            raise ValueError(f"{self._name()}: the batch has {images.shape[0]} images but {labels.shape[0]} labels")
        params = self._draw(rng, int(images.shape[-2]), int(images.shape[-1]))
        return params["by"]._apply(images, labels, params)

    def _name(self):
        return type(self).__name__

    def mixes_float_only(self):
        """Whether some outcome needs float images."""
        return self.needs_float


class _MixBase(BatchTransform):
    def __init__(self, *, alpha=1.0, num_classes=None, labels_getter="default"):
        if not _is_number(alpha) or not alpha > 0 or not math.isfinite(alpha):
            raise ValueError(f"{self._name()}: alpha must be a positive number, got {alpha!r}")
        if num_classes is not None and (
            not isinstance(num_classes, numbers.Integral) or isinstance(num_classes, bool) or num_classes < 1
        ):
            raise ValueError(f"{self._name()}: num_classes must be a positive int or None, got {num_classes!r}")
        if labels_getter != "default":
            raise ValueError(
                f"{self._name()}: labels_getter must be 'default' (stoker batches carry their labels in 'label'), "
                f"got {labels_getter!r}"
            )
        self.alpha = float(alpha)
        self.num_classes = None if num_classes is None else int(num_classes)
        self.labels_getter = labels_getter

    def __repr__(self):
        return f"{self._name()}(alpha={self.alpha!r}, num_classes={self.num_classes!r})"

    def __eq__(self, other):
        return type(other) is type(self) and (other.alpha, other.num_classes) == (self.alpha, self.num_classes)

    __hash__ = None

    def _lam(self, rng):
        return float(rng.beta(self.alpha, self.alpha))

    def _soft_labels(self, labels, lam):
        """torchvision's ``_mixup_label``: one-hot (index labels), float,
        ``label.roll(1, 0) * (1 - lam) + label * lam``."""
        if _is_torch(labels):
            import torch

            if labels.ndim == 1:
                if self.num_classes is None:
                    raise ValueError(f"{self._name()}: num_classes must be passed if the labels are index-based (1D)")
                labels = torch.nn.functional.one_hot(labels, num_classes=self.num_classes)
            if not labels.dtype.is_floating_point:
                labels = labels.float()
            return labels.roll(1, 0).mul_(1.0 - lam).add_(labels.mul(lam))
        labels = np.asarray(labels)
        if labels.ndim == 1:
            if self.num_classes is None:
                raise ValueError(f"{self._name()}: num_classes must be passed if the labels are index-based (1D)")
            if labels.size and (labels.min() < 0 or labels.max() >= self.num_classes):
                raise ValueError(
                    f"{self._name()}: labels must lie in [0, {self.num_classes}) for num_classes={self.num_classes}, "
                    f"got {int(labels.min())}..{int(labels.max())}"
                )
            onehot = np.zeros((labels.shape[0], self.num_classes), dtype=np.float32)
            onehot[np.arange(labels.shape[0]), labels] = 1.0
            labels = onehot
        elif not np.issubdtype(labels.dtype, np.floating):
            labels = labels.astype(np.float32)
        if labels.ndim == 2 and self.num_classes is not None and labels.shape[-1] != self.num_classes:
            raise ValueError(
                f"{self._name()}: 2D labels have {labels.shape[-1]} classes, num_classes is {self.num_classes}"
            )
        return (np.roll(labels, 1, axis=0) * (1.0 - lam) + labels * lam).astype(labels.dtype, copy=False)


class MixUp(_MixBase):
    """torchvision v2's ``MixUp(*, alpha=1.0, num_classes=None,
    labels_getter="default")`` on a batch.

    ``lam ~ Beta(alpha, alpha)``; ``images = lam * x + (1 - lam) * x.roll(1, 0)``;
    labels become one-hot ``[B, num_classes]`` float, mixed the same way.
    Images must be float (as torchvision requires): give the loader a float
    conversion (``ToDtype(torch.float32, scale=True)``, ``mean``/``std``...).
    """

    needs_float = True

    def _draw(self, rng, height, width):
        return {"by": self, "lam": self._lam(rng)}

    def _apply(self, images, labels, params):
        lam = params["lam"]
        if _is_torch(images):
            if not images.is_floating_point():
                raise ValueError(f"MixUp needs float images, got {images.dtype}: convert them first")
            import torch

            channels_last = images.is_contiguous(memory_format=torch.channels_last) and not images.is_contiguous()
            out = images.roll(1, 0).mul_(1.0 - lam).add_(images.mul(lam))
            if channels_last:
                out = out.contiguous(memory_format=torch.channels_last)
        else:
            if not np.issubdtype(images.dtype, np.floating):
                raise ValueError(f"MixUp needs float images, got {images.dtype}: convert them first")
            out = (np.roll(images, 1, axis=0) * (1.0 - lam) + images * lam).astype(images.dtype, copy=False)
        return out, self._soft_labels(labels, lam)


class CutMix(_MixBase):
    """torchvision v2's ``CutMix(*, alpha=1.0, num_classes=None,
    labels_getter="default")`` on a batch.

    ``lam ~ Beta(alpha, alpha)``; a box centred at a uniform pixel
    ``(r_x, r_y)`` with half-sides ``int(0.5 * sqrt(1 - lam) * W)`` and
    ``... * H``, clipped to the image, is pasted from the batch rolled by
    one; ``lam`` becomes ``1 - box area / image area`` and the labels are
    mixed with it. Works on uint8 images too.
    """

    def _draw(self, rng, height, width):
        lam = self._lam(rng)
        r_x = int(rng.integers(width))
        r_y = int(rng.integers(height))
        r = 0.5 * math.sqrt(1.0 - lam)
        r_w_half = int(r * width)
        r_h_half = int(r * height)
        x1 = max(r_x - r_w_half, 0)
        y1 = max(r_y - r_h_half, 0)
        x2 = min(r_x + r_w_half, width)
        y2 = min(r_y + r_h_half, height)
        lam_adjusted = float(1.0 - (x2 - x1) * (y2 - y1) / (width * height))
        return {"by": self, "box": (x1, y1, x2, y2), "lam": lam_adjusted}

    def _apply(self, images, labels, params):
        x1, y1, x2, y2 = params["box"]
        if _is_torch(images):
            rolled = images.roll(1, 0)
            out = images.clone()
        else:
            rolled = np.roll(images, 1, axis=0)
            out = images.copy()
        out[..., y1:y2, x1:x2] = rolled[..., y1:y2, x1:x2]
        return out, self._soft_labels(labels, params["lam"])


class BatchRandomChoice(BatchTransform):
    """``RandomChoice([MixUp(...), CutMix(...)], p=None)`` on a batch: one of
    them per batch, with weights ``p`` (equal when None), as torchvision's
    ``RandomChoice`` does. ``stoker.transforms.RandomChoice`` of batch
    transforms makes one."""

    def __init__(self, transforms, p=None):
        transforms = list(transforms)
        converted = []
        for i, t in enumerate(transforms):
            c = t if isinstance(t, BatchTransform) else _convert(t, f"transforms[{i}]")
            if not isinstance(c, BatchTransform):
                raise ValueError(f"RandomChoice: transforms[{i}] ({type(t).__name__}) is not a batch transform")
            converted.append(c)
        if not converted:
            raise ValueError("RandomChoice: pass at least one transform")
        if p is None:
            p = [1.0] * len(converted)
        p = _plain(p)
        if not isinstance(p, list) or len(p) != len(converted) or not all(_is_number(w) and w >= 0 for w in p):
            raise ValueError(f"RandomChoice: p must be {len(converted)} non-negative weights, got {p!r}")
        total = float(sum(p))
        if total <= 0:
            raise ValueError(f"RandomChoice: p must have a positive sum, got {p!r}")
        self.transforms = converted
        self.p = [w / total for w in p]

    def _name(self):
        return "RandomChoice"

    def mixes_float_only(self):
        return any(t.mixes_float_only() for t in self.transforms)

    def _draw(self, rng, height, width):
        i = int(rng.choice(len(self.transforms), p=self.p))
        return self.transforms[i]._draw(rng, height, width)

    def __repr__(self):
        return f"RandomChoice([{', '.join(repr(t) for t in self.transforms)}], p={self.p!r})"

    def __eq__(self, other):
        return type(other) is type(self) and (other.transforms, other.p) == (self.transforms, self.p)

    __hash__ = None


__all__ += ["BatchRandomChoice", "batch_rng", "dtype_name"]


def as_batch_transform(obj):
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


def as_pipeline_json(transform):
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
