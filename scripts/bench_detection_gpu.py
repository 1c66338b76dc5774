"""Detection on the GPU machine, side by side in one run: a Stoker GPU
worker against DALI's COCO SSD pipeline, on the same COCO-like images
(scripts/bench_detection.py's: 640x480 cuts of the photos, 7 boxes each on
average). Run by scripts/bench-detection-gpu.sh on the GPU machine.

- Stoker: one `stoker worker --device cuda` process on the GPU (nvJPEG and
  the GPU lanes; boxes moved on its host side), the images in 16 WebDataset
  shards with a `.json` of targets each; this process consumes batches
  through `stoker.Loader(device="cuda")`: float32 images and each image's
  targets dict (boxes, labels) as torch tensors on the GPU. The pipeline
  is torchvision's `ssd` recipe (RandomPhotometricDistort, RandomZoomOut,
  RandomIoUCrop, RandomHorizontalFlip), then Resize([300, 300]),
  ToDtype(float32, scale=True), ConvertBoundingBoxFormat(XYXY),
  SanitizeBoundingBoxes, through `from_torchvision`.
- DALI, in this process, its own idiomatic pipeline for the same recipe,
  every image op on the GPU: `readers.coco` (the same images as a folder
  with a COCO `instances.json`, boxes relative and ltrb), the `mixed`
  decoder (nvJPEG), the photometric distortion as `brightness_contrast`
  and `hsv` (each of brightness, contrast, saturation, hue with
  probability 0.5, as torchvision draws them; no channel permutation:
  DALI has no op for it), the zoom-out as `paste` + `bbox_paste` (ratio 1
  to 4, probability 0.5, filled with the mean), the IoU crop as
  `random_bbox_crop` (torchvision's thresholds, scale 0.3 to 1, aspect 0.5
  to 2, 40 attempts) + `slice`, `bb_flip` + `flip`, `resize` to 300x300 and
  `crop_mirror_normalize` to float32 CHW in [0, 1]. Images, boxes and
  labels are left in device memory as DALI's own TensorLists, not
  converted to torch tensors (Stoker's side delivers torch tensors).

Each round is one epoch of each, alternating, Stoker from a new loader (so
it does not work ahead while DALI runs); each timed from its first batch
to its last, the GPU synchronized before the clock stops. Medians of the
rounds and of the per-round ratios are printed last.

usage: bench_detection_gpu.py --stoker BIN [--photos DIR] [--images 4096]
    [--rounds 3] [--batch 64] [--dali-threads N]
"""

import argparse
import json
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_detection  # noqa: E402  (the images and the recipe live there)

SEED = 20261129
# torchvision's RandomZoomOut fill for the ssd recipe is 0 for the image
# (`_get_fill` finds no image entry in its defaultdict); DALI's paste takes
# a fill value: the same 0.
FILL = (0, 0, 0)


def _image(i):
    photos = _image.photos
    return bench_detection.make_image(i, random.Random(SEED * 100_000 + i), photos)


def _init(folder):
    _image.photos = bench_detection.load_photos(folder)


def make_images(n, photos):
    with multiprocessing.Pool(os.cpu_count(), initializer=_init, initargs=(photos,)) as pool:
        return pool.map(_image, range(n), chunksize=16)


def write_coco(samples, folder):
    """The images as files in `folder`/images and their boxes as COCO
    instances in `folder`/instances.json (what `readers.coco` reads)."""
    images_dir = os.path.join(folder, "images")
    os.makedirs(images_dir)
    images, annotations = [], []
    for i, (key, jpeg, doc) in enumerate(samples):
        name = f"{key}.jpg"
        with open(os.path.join(images_dir, name), "wb") as f:
            f.write(jpeg)
        images.append({"id": i + 1, "file_name": name, "width": bench_detection.W, "height": bench_detection.H})
        for box, label in zip(doc["boxes"], doc["labels"]):
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1, "category_id": label, "bbox": box,
                                "area": box[2] * box[3], "iscrowd": 0})
    categories = [{"id": c, "name": f"class{c}"} for c in range(1, 81)]
    with open(os.path.join(folder, "instances.json"), "w") as f:
        json.dump({"images": images, "annotations": annotations, "categories": categories}, f)
    return images_dir, os.path.join(folder, "instances.json")


def dali_pipeline(images_dir, annotations, batch, threads):
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=0, seed=SEED, prefetch_queue_depth=2)
    def pipe():
        jpegs, boxes, labels = fn.readers.coco(file_root=images_dir, annotations_file=annotations, ltrb=True,
                                               ratio=True, random_shuffle=True, name="reader")
        images = fn.decoders.image(jpegs, device="mixed", output_type=types.RGB)

        def coin():
            return fn.cast(fn.random.coin_flip(probability=0.5), dtype=types.FLOAT)

        def maybe(lo, hi):  # a factor drawn with probability 0.5, else 1 (identity)
            return coin() * (fn.random.uniform(range=[lo, hi]) - 1.0) + 1.0

        images = fn.brightness_contrast(images, brightness=maybe(0.875, 1.125), contrast=maybe(0.5, 1.5),
                                        contrast_center=128)
        hue = coin() * fn.random.uniform(range=[-18.0, 18.0])
        images = fn.hsv(images, hue=hue, saturation=maybe(0.5, 1.5))
        ratio = maybe(1.0, 4.0)
        px, py = fn.random.uniform(range=[0.0, 1.0]), fn.random.uniform(range=[0.0, 1.0])
        images = fn.paste(images, ratio=ratio, paste_x=px, paste_y=py, fill_value=FILL)
        boxes = fn.bbox_paste(boxes, ratio=ratio, paste_x=px, paste_y=py, ltrb=True)
        begin, size, boxes, labels = fn.random_bbox_crop(boxes, labels, device="cpu", aspect_ratio=[0.5, 2.0],
                                                         thresholds=[0.0, 0.1, 0.3, 0.5, 0.7, 0.9],
                                                         scaling=[0.3, 1.0], bbox_layout="xyXY", allow_no_crop=True,
                                                         num_attempts=40)
        images = fn.slice(images, begin, size, out_of_bounds_policy="trim_to_shape")
        flip = fn.random.coin_flip(probability=0.5)
        boxes = fn.bb_flip(boxes, ltrb=True, horizontal=flip)
        images = fn.flip(images, horizontal=flip)
        images = fn.resize(images, resize_x=300, resize_y=300)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mean=[0.0] * 3,
                                          std=[255.0] * 3)
        return images, boxes.gpu(), labels.gpu()

    p = pipe()
    p.build()
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stoker", required=True, help="the stoker binary")
    ap.add_argument("--photos", default=bench_detection.PHOTOS, help="photos to cut the images from")
    ap.add_argument("--images", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--dali-threads", type=int, default=max(1, (os.cpu_count() or 4) - 2))
    ap.add_argument("--per-image-targets", action="store_true",
                    help="also time Stoker with each image's target tensors copied to the GPU on their own "
                         "(the client before it copied them as one transfer a key)")
    a = ap.parse_args()

    import torch

    import stoker

    work = tempfile.mkdtemp(prefix="stoker-bench-detection-gpu-")
    worker = None
    try:
        t0 = time.perf_counter()
        samples = make_images(a.images, a.photos)
        shards = os.path.join(work, "shards")
        bench_detection.write_shards(samples, shards, count=16)
        images_dir, annotations = write_coco(samples, work)
        boxes = sum(len(d["boxes"]) for _, _, d in samples)
        print(f"images: {a.images} JPEGs {bench_detection.W}x{bench_detection.H}, {boxes / a.images:.1f} boxes each "
              f"on average (made in {time.perf_counter() - t0:.0f} s)", flush=True)

        worker = subprocess.Popen([a.stoker, "worker", "--listen", "127.0.0.1:0", "--device", "cuda"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        addr = worker.stdout.readline().strip().rsplit(" ", 1)[-1]
        transform = bench_detection.recipe()

        def stoker_epoch():
            loader = stoker.Loader([addr], shards, batch_size=a.batch, transform=transform, device="cuda",
                                   rank=0, world_size=1, last_batch="drop",
                                   fields={"targets": stoker.Field("json", "targets")})
            start, n, nboxes = None, 0, 0
            for b in loader:
                if start is None:
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    continue
                n += b["image"].shape[0]
                nboxes += sum(t["boxes"].shape[0] for t in b["targets"])
            torch.cuda.synchronize()
            assert b["image"].is_cuda and b["targets"][0]["boxes"].is_cuda
            return n / (time.perf_counter() - start), nboxes / max(n, 1)

        # The targets on the GPU (one copy a key for the batch, each image's
        # rows of it) are those the host path gives, batch for batch.
        def first_batches(device, n=4):
            loader = stoker.Loader([addr], shards, batch_size=a.batch, transform=transform, device=device,
                                   rank=0, world_size=1, deterministic=True, seed=3,
                                   fields={"targets": stoker.Field("json", "targets")})
            out = []
            for b in loader:
                out.append((b["key"], [{k: v.cpu() if hasattr(v, "cpu") else v for k, v in t.items()}
                                       for t in b["targets"]]))
                if len(out) == n:
                    break
            return out

        on_gpu, on_host = first_batches("cuda"), first_batches("cpu")
        for (keys, g), (keys2, h) in zip(on_gpu, on_host):
            assert keys == keys2
            for tg, th in zip(g, h):
                assert tg.keys() == th.keys() and all(
                    torch.equal(tg[k], th[k]) if isinstance(th[k], torch.Tensor) else tg[k] == th[k] for k in th)
        print(f"targets on the gpu equal the host's: {sum(len(k) for k, _ in on_gpu)} images", flush=True)

        pipe = dali_pipeline(images_dir, annotations, a.batch, a.dali_threads)
        batches = a.images // a.batch

        def dali_epoch():
            out = pipe.run()  # the first batch, as Stoker's: not timed
            out[0].as_cpu()
            start, nboxes = time.perf_counter(), 0
            for _ in range(batches - 1):
                out = pipe.run()
                nboxes += sum(out[1][i].shape()[0] for i in range(len(out[1])))
            out[0].as_cpu()
            out[1].as_cpu()
            return (batches - 1) * a.batch / (time.perf_counter() - start), nboxes / ((batches - 1) * a.batch)

        def per_image_epoch():
            import stoker.fields as fields

            batched = fields._target_list
            fields._target_list = lambda values, torch, device: [
                None if v is None else fields._target(v, torch, device) for v in values]
            try:
                return stoker_epoch()
            finally:
                fields._target_list = batched

        stoker_epoch()  # warm up the worker (kernels compiled, lanes started)
        dali_epoch()
        ours, theirs, per_image = [], [], []
        for r in range(a.rounds):
            s, sb = stoker_epoch()
            d, db = dali_epoch()
            ours.append(s)
            theirs.append(d)
            extra = ""
            if a.per_image_targets:
                per_image.append(per_image_epoch()[0])
                extra = f", stoker with per-image target copies {per_image[-1]:.0f}/s"
            print(f"round {r + 1}: stoker {s:.0f}/s ({sb:.1f} boxes kept per image), "
                  f"dali {d:.0f}/s ({db:.1f}), ratio {s / d:.2f}{extra}", flush=True)
        ratios = [x / y for x, y in zip(ours, theirs)]
        print()
        print(f"| ssd recipe + Resize(300), 640x480, one GPU (median of {a.rounds} rounds) | images/s |")
        print("| --- | --- |")
        print(f"| stoker GPU worker, batches of {a.batch} into torch on the GPU | {statistics.median(ours):.0f} |")
        print(f"| DALI COCO SSD pipeline ({a.dali_threads} threads), output left in device memory | "
              f"{statistics.median(theirs):.0f} |")
        print(f"| ratio stoker / DALI (median of per-round ratios) | {statistics.median(ratios):.2f}x |")
        if per_image:
            print(f"| stoker, each image's target tensors copied on their own | {statistics.median(per_image):.0f} |")
        print(f"host: {os.cpu_count()} cores, {torch.cuda.get_device_name()}, {time.strftime('%Y-%m-%d')}")
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
