"""The argument kinds of the op schema (core/src/transform/schema.rs's
``ArgKind``), each with its converter: a Python value (tuples, numpy or
torch scalars, torchvision enums) in, its JSON form out, or ``_ArgError``
naming the argument. Ranges and limits are the worker's to check; these
check shapes and types. ``stoker.transforms`` re-exports the public names.
"""

# The annotations are text (never evaluated): stubgen.py copies
# dtype_name's into transforms.pyi.
from __future__ import annotations

import enum
import inspect
import math
import numbers

import numpy as np

# torchvision's InterpolationMode values, and PIL's resampling codes.
INTERPOLATIONS = ("nearest", "nearest-exact", "bilinear", "bicubic", "box", "hamming", "lanczos")
_PIL_CODES = {0: "nearest", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming", 1: "lanczos"}
PADDING_MODES = ("constant", "edge", "reflect", "symmetric")
DTYPES = ("uint8", "float32", "float16", "bfloat16", "float64")
_DTYPE_ALIASES = {"float": "float32", "half": "float16", "double": "float64"}


_MISSING = object()


class _ArgError(ValueError):
    """A bad argument value; the caller adds the op and its position."""


# Each argument kind's one converter, by the kind's name (ArgKind::name in
# core/src/transform/schema.rs, the one table of kinds). The tests check
# it against the extension's list (``_stoker.arg_kinds()``): a kind without
# a converter, or a converter of no kind, fails them naming the kind.
_KINDS = {}


def _converter(kind):
    """Registers the decorated function as the converter of ``kind``; a
    second converter for the same kind stops the import, naming it."""

    def register(fn):
        _register(kind, fn)
        return fn

    return register


def _register(kind, converter):
    if kind in _KINDS:
        first, second = (getattr(c, "__name__", c) for c in (_KINDS[kind], converter))
        raise ImportError(f"stoker: argument kind {kind!r} has two converters: {first} and {second}")
    _KINDS[kind] = converter


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


@_converter("number")
def _number(name, v):
    v = _plain(v)
    if not _is_number(v) or not math.isfinite(v):
        raise _ArgError(f"{name} must be a finite number, got {v!r}")
    return int(v) if isinstance(v, numbers.Integral) else float(v)


@_converter("int")
def _int(name, v):
    v = _plain(v)
    if not isinstance(v, numbers.Integral) or isinstance(v, bool):
        raise _ArgError(f"{name} must be an int, got {v!r}")
    return int(v)


@_converter("opt_int")
def _opt_int(name, v):
    return None if v is None else _int(name, v)


@_converter("bool")
def _bool(name, v):
    v = _plain(v)
    if not isinstance(v, bool):
        raise _ArgError(f"{name} must be True or False, got {v!r}")
    return v


@_converter("opt_bool")
def _opt_bool(name, v):
    return None if v is None else _bool(name, v)


@_converter("probability")
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


@_converter("size")
def _size(name, v):
    """A crop's size: an int, or [h, w] (a square [s, s] is written as s)."""
    v = _plain(v)
    if isinstance(v, list):
        sides = _ints(name, v, (1, 2), "an int or [h, w]")
        return sides[0] if len(set(sides)) == 1 else sides
    return _int_or(name, v, "an int or [h, w]")


@_converter("resize_size")
def _resize_size(name, v):
    """Resize's size: an int (the shorter side), [h, w], or None (with max_size)."""
    v = _plain(v)
    if v is None:
        return None
    if isinstance(v, list):
        sides = _ints(name, v, (1, 2), "an int, [h, w] or None")
        return sides[0] if len(sides) == 1 else sides
    return _int_or(name, v, "an int, [h, w] or None")


@_converter("kernel")
def _kernel(name, v):
    v = _plain(v)
    if isinstance(v, list):
        return _ints(name, v, (1, 2), "an int or [kx, ky]")
    return _int_or(name, v, "an int or [kx, ky]")


@_converter("range")
def _range(name, v):
    """A number or [min, max]."""
    v = _plain(v)
    if isinstance(v, list) or not _is_number(v):
        return _numbers(name, v, (2,), "a number or [min, max]")
    return _number(name, v)


@_converter("opt_range")
def _opt_range(name, v):
    return None if v is None else _range(name, v)


@_converter("pair")
def _pair(name, v):
    return _numbers(name, v, (2,), "[min, max]")


@_converter("opt_pair")
def _opt_pair(name, v):
    return None if v is None else _numbers(name, v, (2,), "None or a pair of numbers")


@_converter("shear")
def _shear(name, v):
    v = _plain(v)
    if v is None:
        return None
    if isinstance(v, list) or not _is_number(v):
        return _numbers(name, v, (2, 4), "None, a number, [min, max] or [x min, x max, y min, y max]")
    return _number(name, v)


def _image_entry(name, d, missing=_MISSING):
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
    if missing is _MISSING:
        raise _ArgError(f"{name} {d!r} has no entry for images nor 'others'")
    return missing


@_converter("fill")
def _fill(name, v):
    """A fill colour: None, a number, or one number per channel."""
    if isinstance(v, dict):
        # torchvision looks a fill dict up with ``in`` (``_get_fill``), so
        # one without an image entry (the detection references' ``ssd``
        # recipe: ``defaultdict(lambda: mean, {tv_tensors.Mask: 0})``,
        # whose default is never asked for) gives images None, which
        # torchvision fills as 0.
        v = _image_entry(name, v, missing=0)
    v = _plain(v)
    if v is None:
        return None
    if isinstance(v, list) or not _is_number(v):
        return _numbers(name, v, (1, 3), "None, a number or [r, g, b]")
    return _number(name, v)


@_converter("padding")
def _padding(name, v):
    what = "an int, [left/right, top/bottom] or [left, top, right, bottom]"
    v = _plain(v)
    if isinstance(v, list):
        return _ints(name, v, (1, 2, 4), what)
    return _int_or(name, v, what)


@_converter("opt_padding")
def _opt_padding(name, v):
    return None if v is None else _padding(name, v)


@_converter("padding_mode")
def _padding_mode(name, v):
    if v not in PADDING_MODES:
        raise _ArgError(f"{name} must be one of {', '.join(PADDING_MODES)}, got {v!r}")
    return v


@_converter("interpolation")
def _interpolation(name, v):
    """torchvision's InterpolationMode, its value string, or a PIL code."""
    if isinstance(v, enum.Enum):
        v = v.value
    if isinstance(v, numbers.Integral) and not isinstance(v, bool) and int(v) in _PIL_CODES:
        return _PIL_CODES[int(v)]
    if isinstance(v, str) and v.lower() in INTERPOLATIONS:
        return v.lower()
    raise _ArgError(f"{name} must be an InterpolationMode, one of {', '.join(INTERPOLATIONS)} or a PIL code, got {v!r}")


@_converter("timm_interpolation")
def _timm_interpolation(name, v):
    if v == "random":
        return v
    v = _interpolation(name, v)
    if v not in ("bilinear", "bicubic"):
        raise _ArgError(f"{name} must be random, bilinear or bicubic, got {v!r}")
    return v


def dtype_name(v: object, name: str = "dtype") -> str:
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


@_converter("dtype")
def _dtype(name, v):
    if isinstance(v, dict):
        v = _image_entry(name, v)
        if v is None:
            # No conversion for images: they stay uint8.
            return "uint8"
    return dtype_name(v, name)


@_converter("policy")
def _policy(name, v):
    if isinstance(v, enum.Enum):
        v = v.value
    if not isinstance(v, str):
        raise _ArgError(f"{name} must be an AutoAugmentPolicy or its value, got {v!r}")
    return v.lower()


@_converter("str")
def _str(name, v):
    if not isinstance(v, str):
        raise _ArgError(f"{name} must be a string, got {v!r}")
    return v


BOX_FORMATS = ("XYXY", "XYWH", "CXCYWH")


@_converter("box_format")
def _box_format(name, v):
    """torchvision's ``BoundingBoxFormat`` (upright formats) or its name."""
    if isinstance(v, enum.Enum):
        v = v.name
    if not isinstance(v, str) or v.upper() not in BOX_FORMATS:
        raise _ArgError(f"{name} must be one of {', '.join(BOX_FORMATS)} (a BoundingBoxFormat or its name), got {v!r}")
    return v.upper()


@_converter("int_pair")
def _int_pair(name, v):
    return _ints(name, v, (2,), "a pair of ints")


@_converter("ints")
def _int_list(name, v):
    """An int, or a list of ints (kept a list, as torchvision keeps it)."""
    v = _plain(v)
    if isinstance(v, list):
        return _ints(name, v, range(1, 65), "an int or a list of 1 to 64 ints")
    return [_int_or(name, v, "an int or a list of ints")]


@_converter("opt_numbers")
def _opt_numbers(name, v):
    v = _plain(v)
    if v is None:
        return None
    if not isinstance(v, list):
        raise _ArgError(f"{name} must be None or a list of numbers, got {v!r}")
    return [_number(name, x) for x in v]


@_converter("weights")
def _weights(name, v):
    v = _plain(v)
    if v is None:
        return None
    if not isinstance(v, list):
        raise _ArgError(f"{name} must be None or a list of weights, got {v!r}")
    return [_number(name, x) for x in v]


@_converter("per_channel")
def _floats(name, v):
    v = _plain(v)
    if _is_number(v):
        return [_number(name, v)]
    if not isinstance(v, list) or len(v) not in (1, 3):
        raise _ArgError(f"{name} must be one number per channel (3), got {v!r}")
    return [float(_number(name, x)) for x in v]


@_converter("erase_value")
def _erase_value(name, v):
    v = _plain(v)
    if v == "random":
        return v
    if isinstance(v, list) or not _is_number(v):
        values = _numbers(name, v, (1, 3), "a number, [r, g, b] or 'random'")
        return values[0] if len(values) == 1 else values
    return _number(name, v)


_REQUIRED = inspect.Parameter.empty


# A container's children are converted by stoker.transforms (``_children``),
# which knows their position in the pipeline; this marks the kind.
_register("transforms", "transforms")


# Shown by stoker.transforms, where users find it.
dtype_name.__module__ = "stoker.transforms"
