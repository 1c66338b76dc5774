"""torchvision's five detection training recipes through from_torchvision.

The recipes are built as torchvision's `references/detection/presets.py`
builds `DetectionPresetTrain(data_augmentation=..., use_v2=True)` on PIL
images: the recipe's ops, then ToImage, ToDtype(float32, scale=True),
ConvertBoundingBoxFormat(XYXY), SanitizeBoundingBoxes and ToPureTensor.
`lsj` uses the references' own FixedSizeCrop, which the torchvision
package does not ship: users copy `references/detection/transforms.py`
into their project, so a module named `transforms` with that class stands
in for it here (from_torchvision reads its attributes only).

Each recipe converts op for op with torchvision's arguments, and a worker
accepts each as it is: `lsj` ends at a fixed square size, the others keep
each image's own size.

usage: detection_recipes.py; ends with `detection recipes: ...`.
"""

import collections
import sys
import tempfile
from pathlib import Path

import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

import stoker
from stoker import transforms as T

MEAN = (123.0, 117.0, 104.0)

# The references' transforms.py as a user's project holds it: the class
# and the attributes its __init__ sets (from_torchvision reads no more).
REFERENCES = '''
class FixedSizeCrop:
    def __init__(self, size, fill=0, padding_mode="constant"):
        size = (size, size) if isinstance(size, int) else tuple(size)
        self.crop_height, self.crop_width = size
        self.fill = fill
        self.padding_mode = padding_mode
'''


def recipe(name, reference_transforms):
    if name == "hflip":
        ops = [v2.RandomHorizontalFlip(p=0.5)]
    elif name == "lsj":
        ops = [
            v2.ScaleJitter(target_size=(1024, 1024), antialias=True),
            reference_transforms.FixedSizeCrop(size=(1024, 1024), fill=MEAN),
            v2.RandomHorizontalFlip(p=0.5),
        ]
    elif name == "multiscale":
        ops = [
            v2.RandomShortestSize(min_size=(480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800), max_size=1333),
            v2.RandomHorizontalFlip(p=0.5),
        ]
    elif name == "ssd":
        fill = collections.defaultdict(lambda: MEAN, {tv_tensors.Mask: 0})
        ops = [v2.RandomPhotometricDistort(), v2.RandomZoomOut(fill=fill), v2.RandomIoUCrop(),
               v2.RandomHorizontalFlip(p=0.5)]
    else:
        ops = [v2.RandomIoUCrop(), v2.RandomHorizontalFlip(p=0.5)]
    ops += [v2.ToImage(), v2.ToDtype(torch.float, scale=True), v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
            v2.SanitizeBoundingBoxes(), v2.ToPureTensor()]
    return v2.Compose(ops)


TAIL = ["ToImage", "ToDtype", "ConvertBoundingBoxFormat", "SanitizeBoundingBoxes", "ToPureTensor"]
WANT = {
    "hflip": (["RandomHorizontalFlip"], None),
    "lsj": (["ScaleJitter", "FixedSizeCrop", "RandomHorizontalFlip"], 1024),
    "multiscale": (["RandomShortestSize", "RandomHorizontalFlip"], None),
    "ssd": (["RandomPhotometricDistort", "RandomZoomOut", "RandomIoUCrop", "RandomHorizontalFlip"], None),
    "ssdlite": (["RandomIoUCrop", "RandomHorizontalFlip"], None),
}


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "transforms.py").write_text(REFERENCES)
        sys.path.insert(0, d)
        import transforms as reference_transforms  # the stand-in above

        check = stoker._stoker.check_transform
        for name, (ops, size) in WANT.items():
            converted = T.from_torchvision(recipe(name, reference_transforms))
            got = [t.op for t in converted.transforms]
            assert got == ops + TAIL, (name, got)
            by_name = {t.op: t for t in converted.transforms}
            if name == "lsj":
                assert by_name["ScaleJitter"].target_size == [1024, 1024]
                assert by_name["FixedSizeCrop"].size == 1024 and by_name["FixedSizeCrop"].fill == list(MEAN)
            if name == "multiscale":
                assert by_name["RandomShortestSize"].min_size == list(range(480, 801, 32))
                assert by_name["RandomShortestSize"].max_size == 1333
            if name == "ssd":
                # torchvision looks the fill dict up with `in`: images get 0.
                assert by_name["RandomZoomOut"].fill == 0, by_name["RandomZoomOut"].fill
                assert by_name["RandomIoUCrop"].trials == 40 and by_name["RandomIoUCrop"].sampler_options is None
            # lsj ends at its square; the others keep each image's own size
            # (no side), as torchvision's detection models take them.
            got_size, _ = check(converted.to_json())
            assert got_size == size, (name, got_size)
    print(f"detection recipes: {', '.join(WANT)} convert op for op; lsj ends at 1024x1024, the others keep each "
          "image's own size")
    return 0


if __name__ == "__main__":
    sys.exit(main())
