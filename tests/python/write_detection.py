"""Writes small detection datasets in the formats users have, for
`stoker pack`'s detection readers (tests/integration/detection_formats.rs):

- coco/: JPEGs and COCO JSON written with Python's json module, as the
  COCO tools do: instances.json (categories with gaps in their ids,
  polygons, a crowd RLE, a box 0.4 px past its image's edge, an image
  without annotations) and person_keypoints.json (COCO's 17 keypoint
  names and skeleton);
- yolo/: an Ultralytics dataset (data.yaml, images/{train,val},
  labels/{train,val}/*.txt; a PNG, an image without a label file);
- hf/cppe5/ and hf/coco/: Parquet written by Hugging Face `datasets` with
  the features cppe-5 (XYWH, no image paths) and detection-datasets/coco
  (XYXY, float64 boxes, bbox_id) define;
- coco_bad/, yolo_bad/, hf_bad/: one bad annotation per image.

expected.json holds, per dataset and key, the image's size and its
instances converted to pixels here, independently of Stoker: boxes in the
format stoker packs them (COCO XYWH, YOLO CXCYWH, Hugging Face as given),
labels, iscrowd, keypoints. bad.json holds, per bad dataset, the images
and annotations each report line must name and its reason (every string
of a problem in one line).

usage: write_detection.py OUT_DIR
"""

import io
import json
import os
import sys

import numpy as np
from datasets import ClassLabel, Dataset, Features, Image, Sequence, Value
from PIL import Image as PILImage

KEYPOINTS = ["nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
             "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee",
             "right_knee", "left_ankle", "right_ankle"]
SKELETON = [[16, 14], [14, 12], [17, 15], [15, 13], [12, 13], [6, 12], [7, 13], [6, 7], [6, 8], [7, 9],
            [8, 10], [9, 11], [2, 3], [1, 2], [1, 3], [2, 4], [3, 5], [4, 6], [5, 7]]


def image_bytes(w, h, fmt="JPEG", seed=0):
    img = PILImage.new("RGB", (w, h), ((40 * seed) % 256, 120, 200))
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


def save_image(path, w, h, seed=0):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fmt = "PNG" if path.endswith(".png") else "JPEG"
    with open(path, "wb") as f:
        f.write(image_bytes(w, h, fmt, seed))


def coco(out, expected):
    root = os.path.join(out, "coco")
    sizes = {"a.jpg": (64, 48), "b.jpg": (80, 60), "c.jpg": (50, 70), "d.jpg": (40, 40), "e.jpg": (60, 40),
             "f.jpg": (48, 64)}
    for i, (name, (w, h)) in enumerate(sizes.items()):
        save_image(os.path.join(root, "images", name), w, h, i)
    images = [{"id": 10 + i, "file_name": n, "width": w, "height": h} for i, (n, (w, h)) in enumerate(sizes.items())]
    ids = {img["file_name"]: img["id"] for img in images}
    anns = [
        # a: a polygon, a crowd RLE, a box 0.4 px past the right edge.
        {"id": 1, "image_id": ids["a.jpg"], "category_id": 1, "bbox": [3.25, 4.5, 20.75, 30.0], "area": 400.5,
         "iscrowd": 0, "segmentation": [[3.25, 4.5, 24.0, 4.5, 24.0, 34.5, 3.25, 34.5]]},
        {"id": 2, "image_id": ids["a.jpg"], "category_id": 7, "bbox": [30.0, 10.0, 12.0, 8.0], "area": 96.0,
         "iscrowd": 1, "segmentation": {"counts": [330, 8, 2734], "size": [48, 64]}},
        {"id": 3, "image_id": ids["a.jpg"], "category_id": 3, "bbox": [50.4, 40.0, 14.0, 8.0], "area": 112.0,
         "iscrowd": 0, "segmentation": [[50.4, 40.0, 64.4, 40.0, 64.4, 48.0]]},
        {"id": 4, "image_id": ids["b.jpg"], "category_id": 3, "bbox": [0.0, 0.0, 80.0, 60.0], "area": 4800.0,
         "iscrowd": 0, "segmentation": [[0, 0, 80, 0, 80, 60]]},
        {"id": 5, "image_id": ids["c.jpg"], "category_id": 1, "bbox": [10.1, 20.2, 5.3, 40.4], "area": 214.12,
         "iscrowd": 0, "segmentation": [[10.1, 20.2, 15.4, 20.2, 15.4, 60.6]]},
    ]
    cats = [{"id": 1, "name": "person", "supercategory": "person"}, {"id": 3, "name": "car", "supercategory": "v"},
            {"id": 7, "name": "dog", "supercategory": "animal"}]
    instances = {"info": {}, "licenses": [], "images": images[:4], "annotations": anns, "categories": cats}
    with open(os.path.join(root, "instances.json"), "w") as f:
        json.dump(instances, f)
    want = {}
    for img in images[:4]:
        key = img["file_name"].rsplit(".", 1)[0]
        mine = [a for a in anns if a["image_id"] == img["id"]]
        boxes = []
        for a in mine:
            x, y, w, h = a["bbox"]
            # Clamped onto the image when at most 1 px outside.
            w = min(x + w, img["width"]) - x
            h = min(y + h, img["height"]) - y
            boxes.append([x, y, w, h])
        want[key] = {"size": [img["width"], img["height"]], "format": "XYWH", "boxes": boxes,
                     "labels": [a["category_id"] for a in mine], "iscrowd": [a["iscrowd"] for a in mine],
                     "area": [a["area"] for a in mine]}
    expected["coco"] = want

    # Person keypoints: 17 points each, some not labelled (v = 0).
    kp_anns = []
    want = {}
    for n, name in enumerate(["e.jpg", "f.jpg"]):
        w, h = sizes[name]
        points = []
        for k in range(17):
            v = 0 if (k + n) % 5 == 0 else 1 + (k % 2)
            points += [0, 0, 0] if v == 0 else [round(2.5 + k * (w - 6) / 17, 2), round(3 + k * (h - 6) / 17, 2), v]
        box = [1.5, 2.0, w - 4.0, h - 5.0]
        kp_anns.append({"id": 20 + n, "image_id": ids[name], "category_id": 1, "bbox": box, "area": 100.0,
                        "iscrowd": 0, "num_keypoints": sum(1 for i in range(2, 51, 3) if points[i] > 0),
                        "keypoints": points, "segmentation": [[1.5, 2, 10, 2, 10, 10]]})
        want[name.rsplit(".", 1)[0]] = {"size": [w, h], "format": "XYWH", "boxes": [box], "labels": [1],
                                         "iscrowd": [0], "keypoints": [[points[i:i + 3] for i in range(0, 51, 3)]]}
    person = [{"id": 1, "name": "person", "supercategory": "person", "keypoints": KEYPOINTS, "skeleton": SKELETON}]
    with open(os.path.join(root, "person_keypoints.json"), "w") as f:
        json.dump({"images": images[4:], "annotations": kp_anns, "categories": person}, f)
    expected["coco_keypoints"] = want


def coco_bad(out, bad):
    root = os.path.join(out, "coco_bad")
    names = ["g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8", "g9"]
    images = []
    for i, n in enumerate(names):
        if n != "g7":  # listed, not on disk
            save_image(os.path.join(root, "images", n + ".jpg"), 64, 48, i)
        images.append({"id": i + 1, "file_name": n + ".jpg", "width": 64, "height": 48})
    nan = float("nan")

    def ann(i, image, **kw):
        a = {"id": i, "image_id": image, "category_id": 1, "bbox": [1.0, 1.0, 5.0, 5.0], "area": 25.0, "iscrowd": 0,
             "segmentation": [[1, 1, 6, 1, 6, 6]]}
        a.update(kw)
        return a

    anns = [
        ann(101, 1, bbox=[60.0, 10.0, 10.0, 10.0]),
        ann(102, 2, bbox=[nan, 1.0, 5.0, 5.0]),
        ann(103, 3, bbox=[5.0, 5.0, -3.0, 4.0]),
        ann(104, 4, category_id=99),
        ann(105, 5, segmentation=[[1, 1, 2, 2]]),
        ann(106, 6, category_id=2, keypoints=[1, 1, 2, 3, 3, 2]),
        ann(107, 999),
        ann(108, 7),
        ann(109, 8, bbox=[60.0, 40.0, 4.5, 8.0]),  # 0.5 px past the edge: clamped, packed
    ]
    cats = [{"id": 1, "name": "cat"}, {"id": 2, "name": "person", "keypoints": ["a", "b", "c"], "skeleton": []}]
    with open(os.path.join(root, "instances.json"), "w") as f:
        json.dump({"images": images, "annotations": anns, "categories": cats}, f)  # NaN as Python writes it
    bad["coco"] = {
        "packed": 2,
        "problems": [
            ["g1.jpg (64x48), annotation 101", "box reaches outside the image by more than 1 px"],
            ["g2.jpg (64x48), annotation 102", "box not a finite number"],
            ["g3.jpg (64x48), annotation 103", "box negative width or height"],
            ["g4.jpg, annotation 104 (category_id 99)", "category not in the file's categories"],
            ["g5.jpg, annotation 105 (segmentation", "polygon 0 has 2 points, fewer than 3"],
            ["g6.jpg, annotation 106 (keypoints: 6 numbers, category keypoints: 3)", "keypoints disagree"],
            ["instances.json, annotation 107 (image_id 999)", "annotation of no image in the file"],
            ["g7.jpg", "image file missing"],
        ],
        "clamped": ["g8.jpg (64x48), annotation 109"],
    }


def yolo(out, expected, bad):
    for name, rows, problems in [
        ("yolo", {
            "train/p.jpg": ((100, 50), ["2 0.5 0.5 0.2 0.4", "0 0.125 0.25 0.25 0.5"]),
            "train/q.jpg": ((64, 64), None),  # no label file: background
            "train/r.jpg": ((30, 90), ["1 0.5 0.5 1 1"]),
            "train/s.png": ((40, 30), ["0 0.25 0.5 0.1 0.2", ""]),
            "val/v.jpg": ((50, 50), ["1 0.5 0.5 0.5 0.5"]),
        }, None),
        ("yolo_bad", {
            "train/y1.jpg": ((40, 40), ["0 0.5 0.5 0.1"]),
            "train/y2.jpg": ((40, 40), ["0 0.5 0.5 0.1 0.1", "5 0.5 0.5 0.1 0.1"]),
            "train/y3.jpg": ((40, 40), ["0 0.95 0.5 0.3 0.2"]),
            "train/y4.jpg": ((40, 40), ["0 nan 0.5 0.1 0.1"]),
            "train/y5.jpg": ((40, 40), ["1 0.5 0.5 0.2 0.2"]),
        }, [
            ["y1.jpg, ", "labels/train/y1.txt line 1 \"0 0.5 0.5 0.1\"", "line not of 5 fields (cls cx cy w h)"],
            ["y2.jpg, ", "labels/train/y2.txt line 2 \"5 0.5 0.5 0.1 0.1\"", "class not in names (0..3)"],
            ["y3.jpg (40x40), ", "labels/train/y3.txt line 1", "box reaches outside the image by more than 1 px"],
            ["y4.jpg (40x40), ", "labels/train/y4.txt line 1", "box not a finite number"],
        ]),
    ]:
        root = os.path.join(out, name)
        want = {}
        for i, (path, ((w, h), lines)) in enumerate(rows.items()):
            save_image(os.path.join(root, "images", path), w, h, i)
            key = "images/" + path.rsplit(".", 1)[0]
            boxes, labels = [], []
            if lines is not None:
                label = os.path.join(root, "labels", path.rsplit(".", 1)[0] + ".txt")
                os.makedirs(os.path.dirname(label), exist_ok=True)
                with open(label, "w") as f:
                    f.write("\n".join(lines) + "\n")
                for line in filter(None, lines if problems is None else []):
                    c, cx, cy, bw, bh = line.split()
                    boxes.append([float(cx) * w, float(cy) * h, float(bw) * w, float(bh) * h])
                    labels.append(int(c))
            if path.startswith("train/"):
                want[key] = {"size": [w, h], "format": "CXCYWH", "boxes": boxes, "labels": labels}
        with open(os.path.join(root, "data.yaml"), "w") as f:
            f.write("# an Ultralytics dataset\ntrain: images/train  # train images\nval: images/val\n"
                    "test:  # none\nnames:\n  0: cat\n  1: dog\n  2: bird\n")
        if problems is None:
            expected[name] = want
        else:
            bad[name] = {"packed": 1, "problems": problems, "clamped": []}


def hf(out, expected, bad):
    cppe = Features({
        "image_id": Value("int64"), "image": Image(), "width": Value("int32"), "height": Value("int32"),
        "objects": Sequence({"id": Value("int64"), "area": Value("int64"),
                             "bbox": Sequence(Value("float32"), length=4),
                             "category": ClassLabel(names=["Coverall", "Face_Shield", "Gloves", "Goggles", "Mask"])}),
    })
    coco80 = ["person", "bicycle", "car"] + [f"class{i}" for i in range(3, 80)]
    detcoco = Features({
        "image_id": Value("int64"), "image": Image(), "width": Value("int64"), "height": Value("int64"),
        "objects": Sequence({"bbox_id": Value("int64"), "category": ClassLabel(names=coco80),
                             "bbox": Sequence(Value("float64"), length=4), "area": Value("float64")}),
    })
    nan = float("nan")
    sets = [
        ("hf/cppe5", cppe, "XYWH", False, [
            ((70, 50), [[2.5, 3.25, 20.0, 10.5], [40.0, 0.0, 30.0, 50.0]], [4, 0]),
            ((32, 48), [], []),
            ((45, 45), [[0.0, 0.0, 45.0, 45.0]], [2]),
        ], None),
        ("hf/coco", detcoco, "XYXY", True, [
            ((64, 40), [[1.5, 2.5, 30.25, 39.0], [10.0, 10.0, 64.0, 20.0]], [0, 2]),
            ((40, 64), [[0.1, 0.2, 0.3, 0.4]], [79]),
        ], None),
        ("hf_bad", cppe, "XYWH", False, [
            ((40, 40), [[30.0, 5.0, 20.0, 5.0]], [1]),
            ((40, 40), [[5.0, 5.0, -2.0, 5.0]], [1]),
            ((40, 40), [[nan, 5.0, 2.0, 5.0]], [1]),
            ((40, 40), [[5.0, 5.0, 2.0, 5.0]], [-1]),
            ((40, 40), [[5.0, 5.0, 2.0, 5.0]], [1]),
        ], [
            ["row 0 (40x40), object 0 (id 1000) [30.0, 5.0, 20.0, 5.0]", "box reaches outside the image by more than 1 px"],
            ["row 1 (40x40), object 0 (id 1001) [5.0, 5.0, -2.0, 5.0]", "box negative width or height"],
            ["row 2 (40x40), object 0 (id 1002) [NaN, 5.0, 2.0, 5.0]", "box not a finite number"],
            ["row 3, object 0 (id 1003) (category -1)", "category not in the ClassLabel's 5 names"],
        ]),
    ]
    for name, features, fmt, with_paths, rows, problems in sets:
        records = {"image_id": [], "image": [], "width": [], "height": [], "objects": []}
        want = {}
        n = 0
        for i, ((w, h), boxes, cats) in enumerate(rows):
            image_id = 500 + i
            path = f"{image_id:012d}.jpg" if with_paths else None
            records["image_id"].append(image_id)
            records["image"].append({"bytes": image_bytes(w, h, seed=i), "path": path})
            records["width"].append(w)
            records["height"].append(h)
            ids = list(range(1000 + n, 1000 + n + len(boxes)))
            n += len(boxes)
            if with_paths:
                areas = [(b[2] - b[0]) * (b[3] - b[1]) for b in boxes]
                records["objects"].append({"bbox_id": ids, "category": cats, "bbox": boxes, "area": areas})
            else:
                areas = [int(b[2] * b[3]) if b[2] == b[2] else 0 for b in boxes]
                records["objects"].append({"id": ids, "area": areas, "bbox": boxes, "category": cats})
            key = f"{image_id:012d}" if with_paths else str(image_id)
            # cppe-5's boxes are float32: compare with those.
            if features is cppe:
                boxes = [[float(np.float32(v)) for v in b] for b in boxes]
            want[key] = {"size": [w, h], "format": fmt, "boxes": boxes, "labels": cats, "area": areas}
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        Dataset.from_dict(records, features=features).to_parquet(os.path.join(folder, "train-00000-of-00001.parquet"))
        if problems is None:
            expected[name] = want
        else:
            bad[name] = {"packed": 1, "problems": problems, "clamped": []}


def main():
    out = sys.argv[1]
    expected, bad = {}, {}
    coco(out, expected)
    coco_bad(out, bad)
    yolo(out, expected, bad)
    hf(out, expected, bad)
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    with open(os.path.join(out, "bad.json"), "w") as f:
        json.dump(bad, f, indent=1)
    print(f"detection datasets: {sum(len(v) for v in expected.values())} images, {len(bad)} bad datasets")


if __name__ == "__main__":
    main()
