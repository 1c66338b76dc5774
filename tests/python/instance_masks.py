"""Instance masks (a field of kind ``targets_with_masks``) against
pycocotools and torchvision.

- Drawing: ``_stoker.draw_outline`` (what a worker draws before any
  geometry) equals pycocotools' ``decode(frPyObjects(...))`` pixel for
  pixel, an instance of several polygons being their union (as
  torchvision's detection references make Mask R-CNN's masks), on DRAWS
  random outlines: polygons with repeated points, points past the image
  and half-pixel corners, and RLEs, compressed and not. Bad outlines raise
  ConfigError saying what is wrong.
- Through ``stoker pack`` and a worker: a COCO JSON of IMAGES images with
  polygon and RLE instances, packed, then delivered through a pipeline of
  geometric ops whose draws are fixed (a flip with p=1, a pad, a resize, a
  centre crop, a rotation of one angle) ending in SanitizeBoundingBoxes.
  torchvision v2 runs the same Compose on the same boxes: the same
  instances are kept, with the same boxes (1e-3); and each kept instance's
  mask equals torchvision's ops on its pycocotools mask as a PIL image
  (nearest sampling), pixel for pixel. Against ``tv_tensors.Mask`` (torch's
  tensor kernels, which sample nearest half a pixel over from PIL's),
  every pixel that differs is within two pixels of the tensor mask's edge
  (its 5x5 neighbourhood holds both values); the median IoU of instances
  of 100 pixels or more is reported.
- Batch forms: flat concatenates the masks in ``batch_idx`` order; flat on
  images of their own sizes is refused when the Loader is made.
- Mask R-CNN (``maskrcnn_resnet50_fpn``, no weights) takes the lists form
  in training mode; its mask loss is finite.

usage: instance_masks.py WORKER DIR STOKER; ends with ``instance masks: ...``.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import torchvision
from PIL import Image
from pycocotools import mask as coco_mask
from torchvision import tv_tensors
from torchvision.transforms import v2

import stoker
from stoker import _stoker

DRAWS, IMAGES = 600, 12


def pycoco(segmentation, w, h):
    """An instance's mask as torchvision's detection references make it."""
    if isinstance(segmentation, list):
        m = coco_mask.decode(coco_mask.frPyObjects(segmentation, h, w))
        return m.any(axis=2).astype(np.uint8)
    rle = segmentation
    if isinstance(rle["counts"], list):
        rle = coco_mask.frPyObjects(rle, h, w)
    return coco_mask.decode(rle)


def random_outline(rng, w, h):
    if rng.random() < 0.25:
        blob = (rng.random((h, w)) < 0.3).astype(np.uint8)
        rle = coco_mask.encode(np.asfortranarray(blob))
        if rng.random() < 0.5:
            return {"counts": rle["counts"].decode(), "size": [h, w]}
        counts, value, run = [], 0, 0
        for v in blob.T.ravel():  # column-major, first a run of 0s
            if v != value:
                counts.append(run)
                value, run = v, 0
            run += 1
        return {"counts": counts + [run], "size": [h, w]}
    polygons = []
    for _ in range(int(rng.integers(1, 3))):
        k = int(rng.integers(3, 10))
        pts = rng.uniform(-2, [w + 2, h + 2], size=(k, 2))
        if rng.random() < 0.4:
            pts = np.round(pts * 2) / 2
        if rng.random() < 0.2:
            pts[1] = pts[0]
        polygons.append(pts.ravel().tolist())
    return polygons


def check_drawing():
    rng = np.random.default_rng(11)
    for _ in range(DRAWS):
        w, h = int(rng.integers(1, 48)), int(rng.integers(1, 48))
        s = random_outline(rng, w, h)
        got = np.frombuffer(_stoker.draw_outline(json.dumps(s), w, h), np.uint8).reshape(h, w)
        want = pycoco(s, w, h)
        assert np.array_equal(got, want), (s, w, h, np.argwhere(got != want)[:5])
    for bad, why in [
        ([[1, 1, 2, 2]], "polygon 0 has 2 points, fewer than 3"),
        ({"counts": [3], "size": [2, 2]}, "rle counts cover 3 pixels"),
        ({"counts": [4], "size": [2, 2]}, "rle size 2x2 is not its image's 3x2"),
    ]:
        try:
            _stoker.draw_outline(json.dumps(bad), 3, 2)
        except stoker.ConfigError as e:
            assert why in str(e), (bad, e)
        else:
            raise AssertionError(f"{bad} drew")


def star(rng, cx, cy, r, k):
    angles = np.sort(rng.uniform(0, 2 * np.pi, k))
    radii = rng.uniform(0.4 * r, r, k)
    return np.stack([cx + radii * np.cos(angles), cy + radii * np.sin(angles)], axis=1).ravel().tolist()


def coco_dataset(root):
    """IMAGES JPEGs with 1 to 5 instances each (polygons; every fourth an
    RLE crowd), as a COCO instances file; returns its annotations by file
    stem, with each image's size."""
    rng = np.random.default_rng(5)
    (root / "images").mkdir(parents=True)
    images, annotations, by_key = [], [], {}
    for i in range(IMAGES):
        w, h = int(rng.integers(90, 160)), int(rng.integers(70, 130))
        name = f"im{i:02d}.jpg"
        pixels = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / "images" / name, quality=90)
        images.append({"id": i + 1, "file_name": name, "width": w, "height": h})
        instances = []
        for j in range(int(rng.integers(1, 6))):
            crowd = (i + j) % 4 == 3
            if crowd:
                blob = np.zeros((h, w), np.uint8)
                y, x = int(rng.integers(0, h - 20)), int(rng.integers(0, w - 20))
                blob[y:y + int(rng.integers(5, 20)), x:x + int(rng.integers(5, 20))] = 1
                rle = coco_mask.encode(np.asfortranarray(blob))
                seg = {"counts": rle["counts"].decode(), "size": [h, w]}
            else:
                r = float(rng.uniform(6, min(w, h) / 3))
                cx, cy = rng.uniform(r, w - r), rng.uniform(r, h - r)
                seg = [star(rng, cx, cy, r, int(rng.integers(5, 12)))]
                if rng.random() < 0.3:
                    seg.append(star(rng, rng.uniform(5, w - 5), rng.uniform(5, h - 5), 4.0, 5))
            m = pycoco(seg, w, h)
            ys, xs = np.nonzero(m)
            bbox = [float(xs.min()), float(ys.min()), float(xs.max() + 1 - xs.min()), float(ys.max() + 1 - ys.min())]
            ann = {"id": len(annotations) + 1, "image_id": i + 1, "category_id": j + 1, "bbox": bbox,
                   "area": float(m.sum()), "iscrowd": int(crowd), "segmentation": seg}
            annotations.append(ann)
            instances.append(ann)
        by_key[Path(name).stem] = ((w, h), instances)
    categories = [{"id": c, "name": f"class{c}"} for c in range(1, 6)]
    doc = {"images": images, "annotations": annotations, "categories": categories}
    (root / "instances.json").write_text(json.dumps(doc))
    return by_key


def pipeline(interpolation=v2.InterpolationMode.BILINEAR):
    return v2.Compose([
        v2.RandomHorizontalFlip(p=1.0),
        v2.Pad([3, 5, 7, 2]),
        v2.Resize([96, 120], interpolation=interpolation),
        v2.CenterCrop(88),
        v2.RandomRotation(degrees=(20, 20)),
        v2.SanitizeBoundingBoxes(min_size=2),
    ])


def torchvision_instances(size, instances):
    """torchvision's kept labels and boxes (XYWH, as the dataset's), its
    masks through the same ops on PIL images with nearest sampling, and
    through its tensor kernels for tv_tensors.Mask."""
    w, h = size
    masks = [pycoco(a["segmentation"], w, h) for a in instances]
    boxes = tv_tensors.BoundingBoxes([a["bbox"] for a in instances], format="XYWH", canvas_size=(h, w))
    labels = torch.tensor([a["category_id"] for a in instances])
    tensor_masks = tv_tensors.Mask(torch.from_numpy(np.stack(masks)))
    image = tv_tensors.Image(torch.zeros(3, h, w, dtype=torch.uint8))
    out = pipeline()({"image": image, "boxes": boxes, "labels": labels, "masks": tensor_masks})
    # Per instance, on its own: the PIL path keeps all, Sanitize aside.
    geometry = v2.Compose(pipeline(v2.InterpolationMode.NEAREST).transforms[:-1])
    pil = [np.asarray(geometry(Image.fromarray(m * 255, mode="L"))) // 255 for m in masks]
    return out["labels"].tolist(), out["boxes"], out["masks"].numpy(), pil


def loader(worker, dataset, form="lists", transform=None):
    return stoker.Loader([worker], dataset, batch_size=4, transform=transform or pipeline(), seed=3,
                         deterministic=True, rank=0, world_size=1, last_batch="partial",
                         fields={"targets": stoker.Field("json", "targets_with_masks")}, targets_form=form)


def check_delivered(worker, dataset, by_key):
    instances = exact = 0
    ious = []
    for batch in loader(worker, dataset):
        for key, t in zip(batch["key"], batch["targets"]):
            size, anns = by_key[key.rsplit("/", 1)[-1]]
            labels, boxes, tensor_masks, pil = torchvision_instances(size, anns)
            assert t["labels"].tolist() == labels, (key, t["labels"], labels)
            assert torch.allclose(t["boxes"], boxes.as_subclass(torch.Tensor).float(), atol=1e-3 * 88), key
            masks = t["masks"]
            assert masks.dtype == torch.uint8 and tuple(masks.shape) == (len(labels), 88, 88), masks.shape
            by_label = {a["category_id"]: i for i, a in enumerate(anns)}
            for m, tm, label in zip(masks.numpy(), tensor_masks, labels):
                want = pil[by_label[label]]
                assert np.array_equal(m, want), (key, label, int((m != want).sum()))
                exact += 1
                # Where the tensor kernels' mask differs, it is within two
                # pixels of its edge (their nearest sampling is half a pixel
                # over, through a resize and a rotation).
                off = (m != tm) & ~edge_band(tm)
                assert not off.any(), (key, label, np.argwhere(off)[:5])
                if want.sum() >= 100:
                    ious.append((m & tm).sum() / max((m | tm).sum(), 1))
            instances += len(anns)
    assert exact > IMAGES and ious, (exact, ious)
    return instances, exact, float(np.median(ious))


def edge_band(mask, r=2):
    """The pixels of ``mask`` within ``r`` of its edge: their (2r+1)-square
    neighbourhood holds both values."""
    padded = np.pad(mask, r, mode="edge")
    h, w = mask.shape
    shifts = [padded[dy:dy + h, dx:dx + w] for dy in range(2 * r + 1) for dx in range(2 * r + 1)]
    return np.maximum.reduce(shifts) != np.minimum.reduce(shifts)


def check_forms(worker, dataset):
    flat = next(iter(loader(worker, dataset, "flat")))["targets"]
    lists = next(iter(loader(worker, dataset, "lists")))["targets"]
    want = torch.cat([t["masks"] for t in lists])
    assert torch.equal(flat["masks"], want) and len(flat["batch_idx"]) == len(want), flat["masks"].shape
    own_size = v2.Compose([v2.RandomHorizontalFlip(p=1.0)])
    try:
        loader(worker, dataset, "flat", own_size)
    except stoker.ConfigError as e:
        assert "needs images of one size" in str(e), e
    else:
        raise AssertionError("flat masks of images of their own sizes were accepted")
    batch = next(iter(loader(worker, dataset, "lists", own_size)))
    for image, t in zip(batch["image"], batch["targets"]):
        assert tuple(t["masks"].shape[1:]) == tuple(image.shape[1:]), (t["masks"].shape, image.shape)
    return len(want)


def check_model(worker, dataset):
    torch.manual_seed(0)
    model = torchvision.models.detection.maskrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=6, min_size=88, max_size=88)
    model.train()
    floats = v2.Compose([*pipeline().transforms, v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
    batch = next(iter(loader(worker, dataset, "lists", floats)))
    keep = ("boxes", "labels", "masks")
    targets = [{k: t[k] for k in keep} for t in batch["targets"]]
    for t in targets:
        t["boxes"] = v2.functional.convert_bounding_box_format(
            tv_tensors.BoundingBoxes(t["boxes"], format="XYWH", canvas_size=(88, 88)), new_format="XYXY")
    losses = model(list(batch["image"]), targets)
    assert torch.isfinite(losses["loss_mask"]), losses
    return float(losses["loss_mask"])


def main() -> None:
    worker, root, stoker_bin = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    check_drawing()
    by_key = coco_dataset(root / "coco")
    dataset = root / "packed"
    subprocess.run([stoker_bin, "pack", "--input", str(root / "coco" / "images"), "--annotations",
                    str(root / "coco" / "instances.json"), "--output", str(dataset), "--format", "wds"],
                   check=True)
    instances, exact, iou = check_delivered(worker, str(dataset), by_key)
    flat = check_forms(worker, str(dataset))
    loss = check_model(worker, str(dataset))
    print(f"instance masks: {DRAWS} outlines drawn as pycocotools draws them; {exact} of {instances} instances "
          f"kept as torchvision keeps them, each mask torchvision's on PIL pixel for pixel (median IoU "
          f"{iou:.3f} with its tensor kernels); flat concatenates {flat}; Mask R-CNN's loss_mask {loss:.3f}")


if __name__ == "__main__":
    main()
