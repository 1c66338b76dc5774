"""Detection batches in each targets_form, through torch's DataLoader, into
a torchvision detection model's training forward pass (CPU, no weights).

- lists: `torch.utils.data.DataLoader(loader, batch_size=None)` gives the
  images and a list of target dicts, which
  `fasterrcnn_mobilenet_v3_large_320_fpn` takes as they are; on the first
  batch its losses are finite and backpropagate.
- padded: the same images, padded to a multiple of size_divisibility, with
  `image_sizes`; the pixels inside each image's size are the lists form's.
- flat: `batch_idx`, `cls`, `bboxes` (normalised centre x, y, w, h) equal
  the lists form's boxes converted, image by image.

The three loaders share seed and transform with deterministic=True, so
their batches are the same samples with the same draws.

usage: detection_model.py WORKER DATASET; ends with `detection model: ...`.
"""

import sys

import torch
import torchvision
from torchvision.transforms import v2

import stoker

S = 72


def loader(worker, dataset, form, pipeline=None, **kw):
    pipeline = pipeline or v2.Compose([
        v2.RandomHorizontalFlip(),
        v2.Resize([S, S]),
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.ConvertBoundingBoxFormat("XYXY"),
        v2.SanitizeBoundingBoxes(),
    ])
    return stoker.Loader([worker], dataset, batch_size=4, transform=pipeline, seed=5, deterministic=True,
                         rank=0, world_size=1, fields={"targets": stoker.Field("json", "targets")},
                         targets_form=form, **kw)


def main() -> None:
    worker, dataset = sys.argv[1:3]
    torch.manual_seed(0)
    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=4)
    model.train()
    lists = []
    for batch in torch.utils.data.DataLoader(loader(worker, dataset, "lists"), batch_size=None):
        images, targets = list(batch["image"]), batch["targets"]
        assert all(t["boxes"].dtype == torch.float32 and t["labels"].dtype == torch.int64 for t in targets)
        if not lists:
            # One training step (a CPU forward and backward takes seconds).
            losses = model(images, [{"boxes": t["boxes"], "labels": t["labels"]} for t in targets])
            total = sum(losses.values())
            assert torch.isfinite(total), losses
            total.backward()
        lists.append(batch)
    n = sum(len(b["key"]) for b in lists)
    assert n > 0

    padded = list(loader(worker, dataset, "padded", size_divisibility=32))
    assert [b["key"] for b in padded] == [b["key"] for b in lists]
    for p, ref in zip(padded, lists):
        assert p["image"].shape[-2:] == (96, 96), p["image"].shape
        assert p["image_sizes"] == [(S, S)] * len(p["key"]), p["image_sizes"]
        assert torch.equal(p["image"][..., :S, :S], ref["image"]) and not p["image"][..., S:, :].any()
        for t, r in zip(p["targets"], ref["targets"]):
            assert torch.equal(t["boxes"], r["boxes"])

    flat = list(loader(worker, dataset, "flat"))
    assert [b["key"] for b in flat] == [b["key"] for b in lists]
    instances = 0
    for f, ref in zip(flat, lists):
        t = f["targets"]
        assert set(t) == {"batch_idx", "cls", "bboxes"}, set(t)
        want_idx, want_cls, want_boxes = [], [], []
        for i, r in enumerate(ref["targets"]):
            b = r["boxes"].double()
            h, w = r["canvas_size"]
            want_boxes.append(torch.stack([(b[:, 0] + b[:, 2]) / 2 / w, (b[:, 1] + b[:, 3]) / 2 / h,
                                           (b[:, 2] - b[:, 0]) / w, (b[:, 3] - b[:, 1]) / h], dim=1))
            want_cls.append(r["labels"].reshape(-1, 1).float())
            want_idx.append(torch.full((len(b),), float(i)))
        assert t["bboxes"].dtype == torch.float32 and t["bboxes"].shape == (sum(len(x) for x in want_idx), 4)
        assert torch.equal(t["batch_idx"], torch.cat(want_idx)), (t["batch_idx"], want_idx)
        assert torch.equal(t["cls"], torch.cat(want_cls))
        assert (t["bboxes"].double() - torch.cat(want_boxes)).abs().max() < 1e-6
        instances += len(t["batch_idx"])
    sizes = each_images_own_size(worker, dataset, model)
    print(f"detection model: {n} images in {len(lists)} batches through DataLoader, the first through "
          f"fasterrcnn_mobilenet_v3_large_320_fpn's training forward and backward (lists); padded and flat forms "
          f"agree ({instances} instances); each image's own size: {sizes} sizes, lists into the model, padded "
          f"blocks agree")


def each_images_own_size(worker, dataset, model):
    """torchvision's hflip recipe keeps each image's own size: the lists
    form's images are a list of [3, h, w] tensors (each its targets'
    canvas), which the detector takes as they are; the padded form's are
    their block, padded to a multiple of 32, the same pixels at each top
    left and zeros around them (after Normalize: Detectron2's padding),
    with image_sizes; grouped by aspect, batches of one aspect. Returns how
    many sizes the images had."""
    own = v2.Compose([
        v2.RandomHorizontalFlip(),
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3]),
        v2.ConvertBoundingBoxFormat("XYXY"),
        v2.SanitizeBoundingBoxes(),
    ])
    lists = list(loader(worker, dataset, "lists", own))
    sizes = set()
    for b in lists:
        assert isinstance(b["image"], list) and len(b["image"]) == len(b["key"]), type(b["image"])
        for image, t in zip(b["image"], b["targets"]):
            assert image.shape[0] == 3 and tuple(image.shape[1:]) == tuple(t["canvas_size"]), (image.shape, t)
            sizes.add(tuple(image.shape[1:]))
    assert len(sizes) > 1, sizes
    first = lists[0]
    losses = model(first["image"], [{"boxes": t["boxes"], "labels": t["labels"]} for t in first["targets"]])
    assert torch.isfinite(sum(losses.values())), losses
    padded = list(loader(worker, dataset, "padded", own, size_divisibility=32))
    assert [b["key"] for b in padded] == [b["key"] for b in lists]
    for p, ref in zip(padded, lists):
        own_sizes = [tuple(i.shape[1:]) for i in ref["image"]]
        assert p["image_sizes"] == own_sizes, (p["image_sizes"], own_sizes)
        height, width = (-(-max(s[k] for s in own_sizes) // 32) * 32 for k in (0, 1))
        assert tuple(p["image"].shape) == (len(own_sizes), 3, height, width), p["image"].shape
        for block, image, (h, w) in zip(p["image"], ref["image"], own_sizes):
            assert torch.equal(block[:, :h, :w], image)
            assert not block[:, h:, :].any() and not block[:, :, w:].any(), "padding is not zero"
    # Grouped by aspect: every batch but the last two (the two groups'
    # partial batches, combined) holds one aspect; each sample once, and
    # as many batches.
    grouped = list(loader(worker, dataset, "lists", own, aspect_ratio_grouping=True))
    assert sorted(k for b in grouped for k in b["key"]) == sorted(k for b in lists for k in b["key"])
    assert len(grouped) == len(lists), (len(grouped), len(lists))
    mixed = [i for i, b in enumerate(grouped) if len({i.shape[2] > i.shape[1] for i in b["image"]}) > 1]
    assert all(i >= len(grouped) - 2 for i in mixed), mixed
    return len(sizes)


if __name__ == "__main__":
    main()
