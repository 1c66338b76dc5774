"""Batch transforms (MixUp, CutMix, a RandomChoice of them): they run in
the training process on each batch the loader yields, as torchvision's do
after collation. ``stoker.transforms`` re-exports them, which is where
users find them.
"""

# The annotations are text (never evaluated): stubgen.py copies them into
# transforms.pyi.
from __future__ import annotations

import math
import numbers
from typing import Literal, Sequence, TypeVar

import numpy as np

from ._kinds import _is_number, _plain
from ._torchvision import _tv_version, _where


# A batch of images or labels: a numpy array or a torch tensor (torch is
# not imported); a transform gives back what it was given.
_Array = TypeVar("_Array")


def batch_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
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
    needs_float: bool = False

    def _draw(self, rng, height, width):
        raise NotImplementedError

    def _mix(self, images, params):
        raise NotImplementedError

    def __call__(
        self, images: _Array, labels: _Array, rng: np.random.Generator | None = None
    ) -> tuple[_Array, _Array]:
        rng = np.random.default_rng() if rng is None else rng
        if images.ndim != 4:
            raise ValueError(f"{self._name()}: expected a batch [B, C, H, W], got shape {tuple(images.shape)}")
        if labels.shape[0] != images.shape[0]:
            raise ValueError(f"{self._name()}: the batch has {images.shape[0]} images but {labels.shape[0]} labels")
        params = self._draw(rng, int(images.shape[-2]), int(images.shape[-1]))
        return params["by"]._apply(images, labels, params)

    def _name(self):
        return type(self).__name__

    def mixes_float_only(self) -> bool:
        """Whether some outcome needs float images."""
        return self.needs_float


class _MixBase(BatchTransform):
    def __init__(
        self, *, alpha: float = 1.0, num_classes: int | None = None, labels_getter: Literal["default"] = "default"
    ) -> None:
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

    needs_float: bool = True

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

    def __init__(self, transforms: Sequence[object], p: Sequence[float] | None = None) -> None:
        converted = [_from_torchvision(t, f"RandomChoice.transforms[{i}]") for i, t in enumerate(transforms)]
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

    def mixes_float_only(self) -> bool:
        return any(t.mixes_float_only() for t in self.transforms)

    def _draw(self, rng, height, width):
        i = int(rng.choice(len(self.transforms), p=self.p))
        return self.transforms[i]._draw(rng, height, width)

    def __repr__(self):
        return f"RandomChoice([{', '.join(repr(t) for t in self.transforms)}], p={self.p!r})"

    def __eq__(self, other):
        return type(other) is type(self) and (other.transforms, other.p) == (self.transforms, self.p)

    __hash__ = None


def _is_batch(obj):
    """Whether `obj` is a batch transform: stoker's, or torchvision v2's
    MixUp, CutMix or a RandomChoice of them."""
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


def _from_torchvision(obj, path):
    """Stoker's batch transform for torchvision v2's MixUp, CutMix or a
    RandomChoice of them (a stoker one passes through); ValueError naming
    `path` for anything else."""
    if isinstance(obj, BatchTransform):
        return obj
    name = type(obj).__name__
    if not _is_batch(obj):
        raise ValueError(f"{_where(path, name)}: not a batch transform (MixUp, CutMix or a RandomChoice of them)")
    if name == "RandomChoice":
        prefix = f"{path}.transforms" if path else "transforms"
        children = [_from_torchvision(c, f"{prefix}[{i}]") for i, c in enumerate(obj.transforms)]
        return BatchRandomChoice(children, p=_plain(obj.p))
    getter = getattr(obj, "_labels_getter", None)
    if getattr(getter, "__name__", None) != "_find_labels_default_heuristic":
        raise ValueError(
            f"{_where(path, name)}: labels_getter other than 'default' is not supported "
            f"(stoker batches carry labels in 'label')"
        )
    cls = MixUp if name == "MixUp" else CutMix
    try:
        return cls(alpha=obj.alpha, num_classes=obj.num_classes)
    except ValueError as e:
        raise ValueError(f"{_where(path, name)}: {e}") from None


for _public in (batch_rng, BatchTransform, MixUp, CutMix, BatchRandomChoice):
    _public.__module__ = "stoker.transforms"
