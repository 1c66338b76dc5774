"""Checks `stoker.transforms` and the Loader's pipelines.

usage: transforms_check.py [--workers W --dataset D --expected TSV] [--torchvision]

Sections, each ending with one summary line:
  - json: every op's torchvision defaults and argument order, JSON round
    trips, refusals naming the op, its position and the argument (Python's
    and the worker's parser, `_stoker.check_transform`);
  - kinds: each argument kind of the schema has exactly one converter,
    and no converter is orphaned;
  - loader refusals: bad pipelines, sizes, dtype / mean conflicts and
    batch transforms refused before connecting;
  - mix: MixUp / CutMix on numpy batches (formula, soft labels,
    determinism);
  - loader (with --workers, --dataset and --expected, a TSV of
    `key<TAB>label`): a stoker pipeline streamed through real workers,
    every sample once, float32 after Normalize; MixUp / CutMix on its
    batches;
  - torchvision: `from_torchvision` on v1 and v2 objects (every op, the
    reference recipes, refusals), MixUp / CutMix against torchvision's on
    torch tensors, timm's RandAugment. Runs when torchvision imports and
    prints a SKIP line otherwise; `--torchvision` makes it required.

Where the native extension is not built (a machine with torch only), the
json checks that need it and the loader sections are skipped with a line
saying so, and `stoker/transforms.py` is loaded from this checkout.

Exits non-zero with the failed check.
"""

import argparse
import collections
import importlib.util
import inspect
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = os.path.join(HERE, "..", "..", "client", "python", "python", "stoker", "transforms.py")


def load():
    """(stoker or None, stoker.transforms)."""
    try:
        import stoker
        from stoker import transforms

        return stoker, transforms
    except ImportError as e:
        print(f"note: stoker package not importable ({e}); loading transforms.py from the checkout")
        spec = importlib.util.spec_from_file_location("stoker_transforms", MODULE)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return None, module


def raises(fn, *needles, exc=ValueError):
    """Runs fn, which must raise `exc` with every needle in its message."""
    try:
        fn()
    except exc as e:
        msg = str(e)
        for n in needles:
            assert n in msg, f"error {msg!r} lacks {n!r}"
        return msg
    raise AssertionError(f"no {exc.__name__} (expected one naming {needles})")


# A value of each argument kind for the ops' required arguments: the
# defaults and the argument order come from the workers' op schema
# (_stoker.op_schema()), which torch_check.py compares with torchvision's
# own signatures.
SAMPLES = {
    "size": (32, 32),
    "resize_size": (40, 40),
    "range": (15, 15),
    "number": (2, 2),
    "int": (4, 4),
    "kernel": (5, 5),
    "padding": (2, 2),
    "str": ("rand-m9-mstd0.5-inc1", "rand-m9-mstd0.5-inc1"),
    "dtype": ("float32", "float32"),
    "per_channel": ((0.5, 0.5, 0.5), [0.5, 0.5, 0.5]),
    "box_format": ("xywh", "XYWH"),
    "int_pair": ((64, 48), [64, 48]),
    "ints": ((32, 48), [32, 48]),
}


def required(T, entry):
    """The op's required arguments: (positional values, their JSON)."""
    flip = T.RandomHorizontalFlip()
    args, json_values = [], {}
    for a in entry["args"]:
        if not a["required"]:
            continue
        if a["kind"] == "transforms":
            value, as_json = [flip], [flip.to_dict()]
        else:
            assert a["kind"] in SAMPLES, f"{entry['name']}.{a['name']}: no sample of kind {a['kind']!r}"
            value, as_json = SAMPLES[a["kind"]]
        args.append(value)
        json_values[a["name"]] = as_json
    return args, json_values


def flat(T, pipeline):
    """The pipeline with its top-level Composes opened, as the worker reads it."""
    ops = []
    for t in pipeline.transforms:
        ops += flat(T, t).transforms if t.op == "Compose" else [t]
    return T.Compose(ops)


def valid_pipeline(T, op):
    """A pipeline the worker accepts, with `op` in it."""
    crop = T.RandomResizedCrop(32)
    name = op.op
    if name in ("RandomResizedCrop", "CenterCrop", "RandomCrop"):
        return T.Compose([T.Resize(48), op])
    if name in ("Resize", "Pad", "RandomRotation", "RandomZoomOut", "RandomIoUCrop", "ScaleJitter", "RandomShortestSize"):
        # Sizes that change (expand=True rotates into a larger image).
        return T.Compose([T.RandomResizedCrop(28), op, T.CenterCrop(32)])
    if name in ("ToTensor", "ToImage", "ToPureTensor", "PILToTensor", "ToDtype", "ConvertImageDtype"):
        return T.Compose([crop, op])
    if name == "Normalize":
        return T.Compose([crop, T.ToDtype("float32", scale=True), op])
    if name == "RandomErasing":
        return T.Compose([crop, T.ToTensor(), op])
    return T.Compose([crop, op])


def check_json(stoker, T):
    schema = {entry["name"]: entry for entry in stoker._stoker.op_schema()}
    names = list(T.OP_NAMES)
    assert names == list(schema), sorted(set(names) ^ set(schema))
    ops = {}
    for name in names:
        cls = getattr(T, name)
        args, req_json = required(T, schema[name])
        op = cls(*args)
        ops[name] = op
        # Defaults and order: the schema's, required arguments first; each
        # default as the class converts it is the schema's JSON value.
        defaults = {a["name"]: a["default"] for a in schema[name]["args"] if not a["required"]}
        want = {"op": name, **req_json, **defaults}
        got = op.to_dict()
        assert got == want and list(got) == list(want), f"{name}: {got} != {want}"
        params = list(inspect.signature(cls).parameters)
        assert params == [k for k in want if k != "op"], f"{name} signature {params}"
        # The versioned envelope, and back.
        doc = json.loads(op.to_json())
        assert doc["version"] == 1, doc
        back = T.from_json(op.to_json())
        if name == "Compose":
            assert back == op, (back, op)
        else:
            assert back.transforms == [op], (back, op)
    # Positional order as torchvision's.
    assert T.RandomCrop(32, 4, True, 7, "edge").to_dict() == {
        "op": "RandomCrop",
        "size": 32,
        "padding": 4,
        "pad_if_needed": True,
        "fill": 7,
        "padding_mode": "edge",
    }
    assert T.ColorJitter(0.4, 0.3, (0.2, 0.5), 0.1).to_dict()["saturation"] == [0.2, 0.5]
    assert T.RandomErasing(0.25, (0.1, 0.2), (0.5, 2.0), "random").value == "random"
    assert T.RandomErasing(value=(1, 2, 3)).value == [1, 2, 3]
    # Shapes: a square [s, s] crop is s; Resize keeps [h, w] and reads [s] as s.
    assert T.CenterCrop((32, 32)).size == 32 and T.CenterCrop([24, 32]).size == [24, 32]
    assert T.Resize([32]).size == 32 and T.Resize((32, 32)).size == [32, 32]
    assert T.Resize(None, max_size=64).to_dict()["size"] is None
    # Interpolation: value strings, PIL codes, enum members.
    import enum

    class Mode(enum.Enum):
        BICUBIC = "bicubic"

    for given, want in [
        ("bicubic", "bicubic"),
        (3, "bicubic"),
        (0, "nearest"),
        (1, "lanczos"),
        (Mode.BICUBIC, "bicubic"),
    ]:
        assert T.Resize(32, interpolation=given).interpolation == want, given
    # dtypes by name, numpy dtype or alias.
    assert T.ToDtype(np.float16, scale=True).dtype == "float16"
    assert T.ToDtype("torch.bfloat16", scale=True).dtype == "bfloat16"
    assert T.ConvertImageDtype("float").dtype == "float32"
    assert T.Normalize((0.5, 0.4, 0.3), np.array([0.2, 0.2, 0.2])).std == [0.2, 0.2, 0.2]
    assert T.Pad([1, 2]).padding == [1, 2] and T.Pad((1, 2, 3, 4)).padding == [1, 2, 3, 4]
    assert T.RandomAffine(10, shear=(1, 2, 3, 4)).shear == [1, 2, 3, 4]
    assert T.RandomRotation(10, fill=(1, 2, 3)).fill == [1, 2, 3]
    # Nested containers round trip through JSON.
    nested = T.Compose(
        [
            T.RandomResizedCrop(32),
            T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
            T.RandomChoice([T.RandomInvert(1.0), T.RandomRotation(30)], p=[2, 1]),
            T.RandomOrder([T.RandomEqualize(), T.RandomAutocontrast()]),
        ]
    )
    assert T.from_json(nested.to_json()) == nested
    assert [d["op"] for d in json.loads(nested.to_json())["ops"]] == [
        "RandomResizedCrop",
        "RandomApply",
        "RandomChoice",
        "RandomOrder",
    ]
    # Op dicts are accepted in containers.
    assert T.Compose([{"op": "CenterCrop", "size": 8}]).transforms == [T.CenterCrop(8)]

    # Python's refusals: the op, its position, the argument.
    raises(lambda: T.RandomCrop(32, padding="x"), "RandomCrop", "padding")
    raises(lambda: T.RandomResizedCrop(32, scale=0.5), "RandomResizedCrop", "scale")
    raises(lambda: T.Resize(32, interpolation="cubic"), "Resize", "interpolation", "bilinear")
    raises(lambda: T.ToDtype("int64"), "ToDtype", "dtype", "float32")
    raises(lambda: T.RandomHorizontalFlip(1.5), "RandomHorizontalFlip", "p")
    raises(lambda: T.Pad([1, 2, 3]), "Pad", "padding")
    raises(lambda: T.RandomCrop(32, padding_mode="wrap"), "RandomCrop", "padding_mode", "reflect")
    raises(lambda: T.RandomResizedCrop(), "RandomResizedCrop", "size", exc=TypeError)
    raises(lambda: T.RandomInvert(0.5, 3), "RandomInvert", exc=TypeError)
    raises(lambda: T.Compose([]), "Compose", "transforms")
    raises(lambda: T.Compose([T.MixUp(num_classes=3)]), "transforms[0] (MixUp)", "batch_transform")
    raises(
        lambda: T.from_json(json.dumps({"version": 1, "ops": [{"op": "CenterCrop", "size": 8}, {"op": "Blur"}]})),
        "ops[1]",
        "'Blur'",
        "GaussianBlur",
    )
    raises(
        lambda: T.from_json(
            json.dumps(
                {
                    "version": 1,
                    "ops": [
                        {"op": "CenterCrop", "size": 8},
                        {"op": "RandomApply", "transforms": [{"op": "RandomCrop", "size": 4, "fil": 3}]},
                    ],
                }
            )
        ),
        "ops[1].transforms[0] (RandomCrop)",
        "'fil'",
    )
    raises(
        lambda: T.from_json(json.dumps({"ops": [{"op": "CenterCrop", "size": 8}, {"op": "Pad"}]})),
        "ops[1] (Pad)",
        "padding",
    )
    raises(lambda: T.from_json('{"version": 2, "ops": []}'), "version")
    raises(lambda: T.from_json("{"), "not valid JSON")
    print(
        f"transforms json: {len(names)} ops, defaults, order and round trips ok; python refusals name op and argument"
    )

    if stoker is None:
        print("SKIP worker parser checks: the native extension is not built here")
        return
    check = stoker._stoker.check_transform
    # Every op in a pipeline the worker accepts; the worker's canonical JSON
    # reads back to the same pipeline.
    accepted = {
        "Grayscale": T.Grayscale(3),
        "ToDtype": T.ToDtype("float32", scale=True),
    }
    for name in names:
        op = accepted.get(name, ops[name])
        pipeline = valid_pipeline(T, op)
        size, canonical = check(pipeline.to_json())
        assert size == 32, (name, size)
        assert T.from_json(canonical) == flat(T, pipeline), f"{name}: {canonical} != {pipeline.to_json()}"
    # The worker's refusals, by position and argument.
    crop = T.RandomResizedCrop(32)
    cases = [
        ([crop, T.Grayscale()], ["ops[1] (Grayscale)", "num_output_channels", "3"]),
        ([crop, T.ToDtype("float32")], ["ops[1] (ToDtype)", "scale"]),
        ([crop, T.Normalize([0.5] * 3, [0.2] * 3)], ["ops[1] (Normalize)", "ToDtype"]),
        ([crop, T.ToTensor(), T.RandomHorizontalFlip()], ["ops[2] (RandomHorizontalFlip)", "output"]),
        ([crop, T.RandomHorizontalFlip(), T.GaussianBlur(4)], ["ops[2] (GaussianBlur)", "kernel_size"]),
        ([crop, T.AutoAugment("cifar10")], ["ops[1] (AutoAugment)", "cifar10"]),
        ([crop, T.RandomRotation(10, interpolation="box")], ["ops[1] (RandomRotation)", "interpolation"]),
    ]
    for ops_, needles in cases:
        raises(lambda ops_=ops_: check(T.Compose(ops_).to_json()), *needles)
    # No fixed square size: each image keeps its own (no side).
    for ops_ in ([T.Resize(32)], [T.CenterCrop([24, 32])], [T.RandomHorizontalFlip()]):
        assert check(T.Compose(ops_).to_json())[0] is None, ops_
    raises(lambda: check(T.Compose([T.Resize(32)]).to_json(), 32), "each image's own size", "32x32")
    raises(
        lambda: check(json.dumps({"version": 1, "ops": [{"op": "CenterCrop", "size": 8, "bogus": 1}]})),
        "ops[0]",
        "bogus",
    )
    raises(lambda: check(T.Compose([crop]).to_json(), 64), "32x32", "64x64")
    assert check("train") == (224, check("train", 224)[1])
    print("transforms json: every op accepted by the worker's parser, canonical JSON reads back; refusals name ops[i]")


def check_kinds(stoker, T):
    """Every argument kind of the op schema (core's one table of them,
    ``_stoker.arg_kinds()``) has exactly one converter in stoker/_kinds.py,
    and no converter is left without a kind; a failure names the kind."""
    if stoker is None:
        print("SKIP argument kinds: the native extension is not built here")
        return
    kinds = [k["name"] for k in stoker._stoker.arg_kinds()]
    for name in kinds:
        assert kinds.count(name) == 1, f"kind {name!r}: declared {kinds.count(name)} times in the schema"
        assert name in T._KINDS, f"kind {name!r}: no converter in stoker/_kinds.py"
    for name in T._KINDS:
        assert name in kinds, f"kind {name!r}: its converter in stoker/_kinds.py is of no kind in the schema"
    used = {a["kind"] for op in stoker._stoker.op_schema() for a in op["args"]}
    assert used <= set(kinds), f"kinds {sorted(used - set(kinds))} are used by ops but not listed"
    print(f"transforms kinds: {len(kinds)} argument kinds, one converter each, none orphaned")


def check_loader_refusals(stoker, T):
    if stoker is None:
        print("SKIP loader refusals: the native extension is not built here")
        return
    # Nothing listens there: each refusal comes before connecting.
    nowhere = "127.0.0.1:9"

    def loader(**kw):
        return stoker.Loader(workers=nowhere, dataset="/nonexistent", batch_size=4, **kw)

    crop = T.RandomResizedCrop(32)
    norm = T.Compose([crop, T.ToDtype("float32", scale=True), T.Normalize([0.5] * 3, [0.25] * 3)])
    raises(lambda: loader(transform=T.Compose([crop, T.Grayscale()])), "ops[1] (Grayscale)", "num_output_channels")
    raises(lambda: loader(transform=norm, image_size=64), "32x32", "64x64")
    raises(lambda: loader(transform=norm.to_json(), dtype="float16"), "dtype", "float16", "float32")
    raises(lambda: loader(transform=norm, mean=[0.4] * 3, std=[0.25] * 3), "mean", "Normalize")
    raises(lambda: loader(transform="train", batch_transform=T.MixUp(num_classes=10)), "MixUp", "uint8")
    raises(
        lambda: loader(transform=T.Compose([crop, T.ToImage()]), batch_transform=T.MixUp(num_classes=10)),
        "MixUp",
        "float",
    )
    raises(lambda: loader(transform=T.MixUp(num_classes=10)), "batch transform", "batch_transform")
    raises(lambda: loader(transform=norm, batch_transform=T.RandomInvert()), "batch_transform", "MixUp")
    raises(lambda: loader(transform='{"ops": [{"op": "Nope"}]}'), "Nope")
    raises(lambda: loader(transform="rotate"), "unknown transform")
    print("transforms loader refusals: bad pipelines, sizes, dtype/mean conflicts and batch transforms refused")


def check_mix_numpy(T):
    rng = np.random.default_rng(1)
    b, c, h, w, k = 8, 3, 16, 20, 5
    images = rng.random((b, c, h, w), dtype=np.float32)
    labels = rng.integers(0, k, size=b)
    onehot = np.eye(k, dtype=np.float32)[labels]

    # MixUp: the formula, with lam drawn first from the generator.
    mixup = T.MixUp(alpha=0.8, num_classes=k)
    out, soft = mixup(images, labels, rng=np.random.default_rng(7))
    lam = np.random.default_rng(7).beta(0.8, 0.8)
    assert out.dtype == np.float32 and out.shape == images.shape
    assert np.allclose(out, lam * images + (1 - lam) * np.roll(images, 1, 0), atol=1e-6)
    assert soft.dtype == np.float32 and soft.shape == (b, k)
    assert np.allclose(soft, lam * onehot + (1 - lam) * np.roll(onehot, 1, 0), atol=1e-6)
    assert np.allclose(soft.sum(1), 1.0, atol=1e-6)
    raises(lambda: mixup(images.astype(np.uint8), labels), "MixUp", "float")
    raises(lambda: mixup(images, labels[:3]), "labels")
    raises(lambda: T.MixUp()(images, labels), "num_classes")
    raises(lambda: T.MixUp(num_classes=3)(images, labels + 3), "labels", "num_classes")
    raises(lambda: T.MixUp(alpha=0, num_classes=3), "alpha")
    raises(lambda: T.CutMix(num_classes=3, labels_getter=lambda x: x), "labels_getter")

    # CutMix: the box pasted from the batch rolled by one; lam from its area.
    u8 = (images * 255).astype(np.uint8)
    cutmix = T.CutMix(num_classes=k)
    boxes = 0
    for seed in range(40):
        params = cutmix._draw(np.random.default_rng(seed), h, w)
        x1, y1, x2, y2 = params["box"]
        assert 0 <= x1 <= x2 <= w and 0 <= y1 <= y2 <= h, params
        assert abs(params["lam"] - (1 - (x2 - x1) * (y2 - y1) / (w * h))) < 1e-12
        out, soft = cutmix(u8, labels, rng=np.random.default_rng(seed))
        assert out.dtype == np.uint8 and out.shape == u8.shape
        want = u8.copy()
        want[..., y1:y2, x1:x2] = np.roll(u8, 1, 0)[..., y1:y2, x1:x2]
        assert np.array_equal(out, want), seed
        lam = params["lam"]
        assert np.allclose(soft, lam * onehot + (1 - lam) * np.roll(onehot, 1, 0), atol=1e-6)
        assert np.allclose(soft.sum(1), 1.0, atol=1e-6)
        boxes += (x2 - x1) * (y2 - y1) > 0
    assert boxes > 20, boxes
    # Soft labels in, soft labels out.
    out, soft2 = cutmix(u8, onehot, rng=np.random.default_rng(3))
    assert soft2.shape == (b, k) and np.allclose(soft2.sum(1), 1.0)

    # A choice between them: both picked, weights respected.
    choice = T.RandomChoice([T.MixUp(num_classes=k), T.CutMix(num_classes=k)], p=[3, 1])
    assert isinstance(choice, T.BatchRandomChoice) and choice.p == [0.75, 0.25]
    # The transforms by keyword too; an image transform among batch ones
    # is refused naming the container and the position.
    keyword = T.RandomChoice(transforms=[T.MixUp(num_classes=k), T.CutMix(num_classes=k)], p=[3, 1])
    assert isinstance(keyword, T.BatchRandomChoice) and keyword == choice
    raises(lambda: T.BatchRandomChoice([T.MixUp(num_classes=k), T.RandomInvert(1.0)]),
           "RandomChoice", "transforms[1]", "RandomInvert", "not a batch transform")
    picks = [type(choice._draw(np.random.default_rng(s), h, w)["by"]).__name__ for s in range(400)]
    assert 0.65 < picks.count("MixUp") / 400 < 0.85, picks.count("MixUp")
    # Deterministic per (seed, epoch, index).
    a = choice(images, labels, rng=T.batch_rng(5, 2, 9))
    again = choice(images, labels, rng=T.batch_rng(5, 2, 9))
    other = choice(images, labels, rng=T.batch_rng(5, 2, 10))
    assert np.array_equal(a[0], again[0]) and np.array_equal(a[1], again[1])
    assert not np.array_equal(a[1], other[1])
    print("transforms mix: MixUp / CutMix on numpy batches match the formulas, soft labels sum to 1, deterministic")


class FakeClient:
    """Stands in for the native client: records its options (the one dict
    a Loader hands the client, `_stoker.pyi`'s `_LoaderOptions`) and hands out
    `batches` raw batches (HWC uint8 pixels, as the workers deliver), so the
    Loader's own conversion and batch transforms run without workers."""

    made = []

    def __init__(self, options):
        self.options = options
        self.batches = []
        FakeClient.made.append(self)

    def uploads(self):
        return False

    def upload_error(self):
        return "fake client"

    def start_epoch(self, epoch, resume):
        self.queue = list(self.batches)
        return 1

    def next_batch(self):
        return self.queue.pop(0) if self.queue else None

    def state(self):
        return {"fake": len(self.queue)}

    def stop_epoch(self, generation):
        pass

    def batches_per_epoch(self):
        return len(self.batches)


def check_loader_conversion(stoker, T):
    """The Loader's conversion of a pipeline's output ops and its batch
    transforms, on numpy or (when installed) torch, with FakeClient."""
    if stoker is None:
        print("SKIP loader conversion: the native extension is not built here")
        return
    try:
        import torch
    except ImportError:
        torch = None
    # With torch installed the loader yields tensors, else numpy arrays.
    backend = "numpy" if torch is None else "torch"

    def as_np(x):
        return x if torch is None else x.numpy()

    rng = np.random.default_rng(0)
    size, n, classes = 32, 6, 4
    hwc = rng.integers(0, 256, size=(n, size, size, 3), dtype=np.uint8)
    labels = [int(x) for x in rng.integers(0, classes, size=n)]
    raw = (hwc.tobytes(), (size, size, [(size, size)] * n), labels, [f"k{i}" for i in range(n)], 3, 0, [], [])
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    crop = T.RandomResizedCrop(size)
    chw = hwc.transpose(0, 3, 1, 2).astype(np.float64) / 255.0
    normalised = (chw - np.asarray(mean)[None, :, None, None]) / np.asarray(std)[None, :, None, None]
    pipeline = T.Compose([crop, T.ToDtype("float32", scale=True), T.Normalize(mean, std)])

    def batch(**kw):
        loader = stoker.Loader(workers="fake:1", dataset="/fake", batch_size=n, seed=5, **kw)
        client = FakeClient.made[-1]
        client.batches = [raw]
        got = list(loader)
        assert len(got) == 1
        return got[0], client

    import stoker.loader

    real = stoker.loader.Client
    stoker.loader.Client = FakeClient
    try:
        b, client = batch(transform=pipeline)
        # The client gets the pipeline and no size (the pipeline's); its mean
        # and std go with an upload to a GPU only (`device`): on the host the
        # Loader normalises, as checked below.
        options = client.options
        assert options["image_size"] is None and json.loads(options["transform"]) == json.loads(pipeline.to_json())
        assert options["device"] is None
        img = as_np(b["image"])
        assert img.dtype == np.float32 and img.shape == (n, 3, size, size), (img.dtype, img.shape)
        assert np.allclose(img, normalised, atol=1e-5)
        b, _ = batch(transform=T.Compose([crop, T.ToTensor()]))
        assert as_np(b["image"]).dtype == np.float32 and np.allclose(as_np(b["image"]), chw, atol=1e-6)
        b, _ = batch(transform=T.Compose([crop, T.ToDtype("float16", scale=True)]), dtype="float16")
        assert as_np(b["image"]).dtype == np.float16 and np.allclose(as_np(b["image"]), chw, atol=1e-3)
        b, _ = batch(transform=T.Compose([crop, T.ToImage()]))
        assert as_np(b["image"]).dtype == np.uint8
        # MixUp on the converted batch, with the draws of (seed 5, epoch 0, index 3).
        b, _ = batch(transform=pipeline, batch_transform=T.MixUp(alpha=0.4, num_classes=classes))
        lam = T.batch_rng(5, 0, 3).beta(0.4, 0.4)
        assert np.allclose(as_np(b["image"]), lam * normalised + (1 - lam) * np.roll(normalised, 1, 0), atol=1e-5)
        soft = as_np(b["label"])
        onehot = np.eye(classes)[labels]
        assert soft.dtype == np.float32 and soft.shape == (n, classes)
        assert np.allclose(soft, lam * onehot + (1 - lam) * np.roll(onehot, 1, 0), atol=1e-6)
        if torch is not None:
            b, _ = batch(transform=T.Compose([crop, T.ToDtype("bfloat16", scale=True)]))
            assert b["image"].dtype == torch.bfloat16
            b, _ = batch(transform=pipeline, channels_last=True, batch_transform=T.CutMix(num_classes=classes))
            assert b["image"].is_contiguous(memory_format=torch.channels_last)
        else:
            raises(lambda: batch(transform=T.Compose([crop, T.ToDtype("bfloat16", scale=True)])), "bfloat16", "torch")
    finally:
        stoker.loader.Client = real
    print(f"transforms loader conversion: pipeline dtype/mean/std and MixUp applied to batches ({backend})")


def check_loader(stoker, T, workers, dataset, expected_path):
    expected = {}
    with open(expected_path) as f:
        for line in f:
            key, label = line.rstrip("\n").split("\t")
            expected[key] = int(label)
    n, classes = len(expected), len(set(expected.values()))
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    pipeline = T.Compose(
        [
            T.RandomResizedCrop(40, scale=(0.25, 1.0)),
            T.RandomHorizontalFlip(),
            T.ColorJitter(0.4, 0.4, 0.4, 0.1),
            T.ToDtype("float32", scale=True),
            T.Normalize(mean, std),
            T.RandomErasing(0.5),
        ]
    )

    def loader(**kw):
        args = dict(workers=workers, dataset=dataset, batch_size=8, transform=pipeline, seed=11, last_batch="partial")
        args.update(kw)
        return stoker.Loader(**args)

    def arrays(batch):
        """The batch's image and label as numpy (torch tensors where torch is installed)."""
        image, label = batch["image"], batch["label"]
        if not isinstance(image, np.ndarray):
            image, label = image.cpu().numpy(), label.cpu().numpy()
        return image, label

    plain = loader()
    assert plain.image_size == 40, plain.image_size
    seen = []
    lo, hi = np.float32(np.inf), np.float32(-np.inf)
    for batch in plain:
        (image, label), keys = arrays(batch), batch["key"]
        assert image.dtype == np.float32, (type(image), image.dtype)
        assert image.shape == (len(keys), 3, 40, 40), image.shape
        assert label.dtype == np.int64 and label.shape == (len(keys),)
        for i, key in enumerate(keys):
            assert expected[key] == label[i], (key, label[i])
        # Normalised from [0, 1]: back within it (erased boxes are 0, the mean).
        pixels = (
            image * np.asarray(std, np.float32)[None, :, None, None] + np.asarray(mean, np.float32)[None, :, None, None]
        )
        lo, hi = min(lo, pixels.min()), max(hi, pixels.max())
        seen += keys
    assert len(seen) == len(set(seen)) == n and set(seen) == set(expected), f"{len(seen)} keys of {n}"
    assert -1e-4 <= lo and hi <= 1 + 1e-4 and hi - lo > 0.5, (lo, hi)
    # The same pipeline as JSON, with the matching explicit size and mean.
    same = loader(transform=pipeline.to_json(), image_size=40, mean=mean, std=std)
    assert sum(len(b["key"]) for b in same) == n

    # MixUp / CutMix on the loader's batches: soft labels, deterministic per
    # (seed, epoch, batch index).
    def mixed(**kw):
        out = {}
        ld = loader(deterministic=True, **kw)
        for batch in ld:
            out[batch["index"]] = (*arrays(batch), batch["key"])
        return out

    choice = T.RandomChoice([T.MixUp(alpha=1.0, num_classes=classes), T.CutMix(alpha=1.0, num_classes=classes)])
    first, second = mixed(batch_transform=choice), mixed(batch_transform=choice)
    assert first.keys() == second.keys() and len(first) == -(-n // 8)
    for index, (image, label, keys) in first.items():
        assert image.dtype == np.float32 and image.shape == (len(keys), 3, 40, 40)
        assert label.dtype == np.float32 and label.shape == (len(keys), classes), label.shape
        assert np.allclose(label.sum(1), 1.0, atol=1e-5)
        image2, label2, keys2 = second[index]
        assert keys == keys2 and np.array_equal(image, image2) and np.array_equal(label, label2), index
    # CutMix on uint8 batches of the train preset.
    cut = loader(transform="train", image_size=32, batch_transform=T.CutMix(num_classes=classes))
    total = 0
    for batch in cut:
        image, label = arrays(batch)
        assert image.dtype == np.uint8 and label.shape == (len(batch["key"]), classes)
        total += len(batch["key"])
    assert total == n
    # A torchvision pipeline as it is, when torchvision is there.
    extra = ""
    try:
        import torch
        from torchvision.transforms import v2
    except ImportError:
        pass
    else:
        recipe = v2.Compose(
            [
                v2.RandomResizedCrop(40, antialias=True),
                v2.RandomHorizontalFlip(),
                v2.TrivialAugmentWide(interpolation=v2.InterpolationMode.BILINEAR),
                v2.PILToTensor(),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize(mean, std),
                v2.RandomErasing(0.1),
            ]
        )
        tv = loader(
            transform=recipe,
            batch_transform=v2.RandomChoice([v2.MixUp(num_classes=classes), v2.CutMix(num_classes=classes)]),
        )
        keys = []
        for batch in tv:
            assert batch["image"].dtype == torch.float32 and tuple(batch["image"].shape[1:]) == (3, 40, 40)
            assert batch["label"].shape == (len(batch["key"]), classes)
            keys += batch["key"]
        assert sorted(keys) == sorted(expected)
        extra = "; torchvision's recipe with MixUp/CutMix streamed as torch tensors"
    print(
        f"transforms loader: {n} samples exactly once through a pipeline, float32 [B, 3, 40, 40] after Normalize; "
        f"MixUp/CutMix batches deterministic{extra}"
    )


class Fixed:
    """A generator whose draws are given: beta() is `lam`, integers() the next of `ints`."""

    def __init__(self, lam, ints):
        self.lam, self.ints = lam, iter(ints)

    def beta(self, a, b):
        return self.lam

    def integers(self, n):
        value = next(self.ints)
        assert 0 <= value < n, (value, n)
        return value


def check_torchvision(stoker, T, required_):
    try:
        import torch
        import torchvision
        from torchvision import transforms as v1
        from torchvision import tv_tensors
        from torchvision.transforms import InterpolationMode as IM
        from torchvision.transforms import v2
    except ImportError as e:
        if required_:
            raise AssertionError(f"--torchvision given but torchvision does not import: {e}") from None
        print(f"SKIP from_torchvision: torchvision not installed ({e})")
        return
    conv = T.from_torchvision
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]

    # The reference recipe (torchvision's classification training).
    recipe = v2.Compose(
        [
            v2.RandomResizedCrop(176, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.TrivialAugmentWide(interpolation=IM.BILINEAR),
            v2.PILToTensor(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean, std),
            v2.RandomErasing(0.1),
        ]
    )
    want = T.Compose(
        [
            T.RandomResizedCrop(176),
            T.RandomHorizontalFlip(),
            T.TrivialAugmentWide(interpolation="bilinear"),
            T.PILToTensor(),
            T.ToDtype("float32", scale=True),
            T.Normalize(mean, std),
            T.RandomErasing(0.1),
        ]
    )
    assert conv(recipe) == want, conv(recipe)
    # What the worker accepts: converted pipelines, checked by its parser.
    accepted = [conv(recipe)]
    assert json.loads(conv(recipe).to_json())["ops"][0] == {
        "op": "RandomResizedCrop",
        "size": 176,
        "scale": [0.08, 1.0],
        "ratio": [0.75, 1.3333333333333333],
        "interpolation": "bilinear",
        "antialias": True,
    }

    # SimCLR's view, v1 and v2.
    for tv in (v1, v2):
        simclr = tv.Compose(
            [
                tv.RandomResizedCrop(224),
                tv.RandomHorizontalFlip(),
                tv.RandomApply([tv.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
                tv.RandomGrayscale(p=0.2),
                tv.GaussianBlur(23, sigma=(0.1, 2.0)),
                tv.ToTensor(),
            ]
        )
        got = conv(simclr)
        assert got == T.Compose(
            [
                T.RandomResizedCrop(224),
                T.RandomHorizontalFlip(),
                T.RandomApply([T.ColorJitter([0.6, 1.4], [0.6, 1.4], [0.6, 1.4], [-0.1, 0.1])], p=0.8),
                T.RandomGrayscale(0.2),
                T.GaussianBlur([23, 23], sigma=[0.1, 2.0]),
                T.ToTensor(),
            ]
        ), (tv.__name__, got)
        accepted.append(got)

    # The policies.
    for tv in (v1, v2):
        assert conv(tv.RandAugment()) == T.RandAugment()
        assert conv(tv.RandAugment(3, 12, 21, IM.BILINEAR, [10, 20, 30])) == T.RandAugment(
            3, 12, 21, "bilinear", [10, 20, 30]
        )
        assert conv(tv.AutoAugment(tv.AutoAugmentPolicy.IMAGENET)) == T.AutoAugment("imagenet")
        assert conv(tv.AutoAugment(tv.AutoAugmentPolicy.CIFAR10)).policy == "cifar10"  # the worker refuses it
        assert conv(tv.TrivialAugmentWide(fill=5)) == T.TrivialAugmentWide(fill=5)

    # Every op, v1 and v2: built with the same arguments, the conversion is
    # the stoker op built with them (ranges as torchvision expands them).
    cases = [
        ("RandomResizedCrop", (96,), dict(scale=(0.2, 0.9), ratio=(0.5, 2.0), interpolation=IM.BICUBIC), None),
        ("RandomResizedCrop", ((64, 80),), dict(interpolation=IM.NEAREST_EXACT, antialias=False), None),
        ("Resize", (80,), dict(interpolation=IM.LANCZOS, max_size=120), None),
        ("Resize", ((64, 48),), dict(interpolation=IM.BOX), None),
        ("CenterCrop", (64,), {}, None),
        ("CenterCrop", ((48, 64),), {}, None),
        ("RandomCrop", (32,), dict(padding=4, padding_mode="reflect"), None),
        ("RandomCrop", (32,), dict(padding=(1, 2), pad_if_needed=True, fill=(9, 8, 7)), None),
        ("RandomCrop", (32,), dict(padding=(1, 2, 3, 4), fill=3, padding_mode="symmetric"), None),
        ("Pad", ((1, 2, 3, 4),), dict(fill=(1, 2, 3), padding_mode="edge"), None),
        ("Pad", (5,), {}, None),
        ("RandomHorizontalFlip", (0.3,), {}, None),
        ("RandomVerticalFlip", (0.7,), {}, None),
        ("RandomRotation", (30,), dict(interpolation=IM.BILINEAR, expand=True, center=(3, 4), fill=(1, 2, 3)), None),
        ("RandomRotation", ((-10, 20),), {}, None),
        ("RandomAffine", (15,), dict(translate=(0.1, 0.2), scale=(0.8, 1.2), shear=10, fill=7), None),
        ("RandomAffine", ((-5, 5),), dict(shear=(1, 2, 3, 4), interpolation=IM.BICUBIC, center=(1, 2)), None),
        ("ColorJitter", (0.4, 0.3, 0.2, 0.1), {}, None),
        ("ColorJitter", ((0.5, 1.5),), dict(hue=(-0.2, 0.1)), None),
        ("Grayscale", (3,), {}, None),
        ("RandomGrayscale", (0.3,), {}, None),
        ("RandomSolarize", (100,), dict(p=0.2), None),
        ("RandomPosterize", (3,), dict(p=0.4), None),
        ("RandomEqualize", (0.6,), {}, None),
        ("RandomAutocontrast", (0.6,), {}, None),
        ("RandomAdjustSharpness", (2.5,), dict(p=0.3), None),
        ("RandomInvert", (0.1,), {}, None),
        ("GaussianBlur", (5,), dict(sigma=0.7), None),
        ("GaussianBlur", ((3, 5),), dict(sigma=(0.2, 1.0)), None),
        ("RandomErasing", (0.3, (0.05, 0.2), (0.5, 2.0)), dict(value=(1, 2, 3)), None),
        ("RandomErasing", (), dict(value="random"), None),
        ("RandomErasing", (), dict(value=4), None),
        ("ToTensor", (), {}, None),
        ("PILToTensor", (), {}, None),
        ("ConvertImageDtype", (torch.float16,), {}, None),
        ("Normalize", ((0.1, 0.2, 0.3), (0.3, 0.2, 0.1)), {}, None),
        ("ToImage", (), {}, None),
        ("ToDtype", (torch.bfloat16,), dict(scale=True), None),
    ]
    jitter = {"ColorJitter"}
    count = 0
    for tv in (v1, v2):
        for name, args, kwargs, padding in cases:
            if not hasattr(tv, name):
                assert tv is v1 and name in ("ToImage", "ToDtype"), name
                continue
            obj = getattr(tv, name)(*args, **kwargs)
            got = conv(obj)
            ref = getattr(T, name)(*args, **kwargs)
            if name in jitter:
                # torchvision keeps the expanded ranges.
                ref = T.ColorJitter(
                    *[None if r is None else list(r) for r in (obj.brightness, obj.contrast, obj.saturation, obj.hue)]
                )
                assert ref.brightness == [max(0, 1 - args[0]), 1 + args[0]] if isinstance(args[0], float) else True
            if name in ("RandomRotation", "RandomAffine"):
                d = args[0]
                ref.degrees = [-d, d] if not isinstance(d, tuple) else list(d)
                if name == "RandomAffine" and isinstance(ref.shear, (int, float)):
                    ref.shear = [-ref.shear, ref.shear]
            if name == "GaussianBlur":
                k = args[0]
                ref.kernel_size = [k, k] if isinstance(k, int) else list(k)
                s = kwargs["sigma"]
                ref.sigma = [s, s] if isinstance(s, float) else list(s)
            if padding is not None:
                ref.padding = padding if tv is v2 else ref.padding
            if name == "RandomErasing" and isinstance(kwargs.get("value"), int):
                ref.value = 4.0 if tv is v2 else 4
            assert got == ref, f"{tv.__name__}.{name}{args}{kwargs}: {got} != {ref}"
            count += 1
            if name not in ("CenterCrop", "RandomResizedCrop") or args[0] in (64, 96):
                accepted.append(valid_pipeline(T, got))
    # v2's type-keyed fill and dtype dicts: the image's entry.
    assert conv(v2.RandomRotation(10, fill={tv_tensors.Image: 127, tv_tensors.Mask: 0})).fill == 127
    assert conv(v2.Pad(2, fill={tv_tensors.Image: (1, 2, 3), "others": 0})).fill == [1, 2, 3]
    assert conv(v2.RandomAffine(5, fill={"others": 9})).fill == 9
    # The detection references' ssd recipe: torchvision looks the dict up
    # with `in`, so images get no entry and are filled with 0.
    ssd_fill = collections.defaultdict(lambda: (123.0, 117.0, 104.0), {tv_tensors.Mask: 0})
    assert conv(v2.RandomZoomOut(fill=ssd_fill)).fill == 0
    assert conv(v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True)).dtype == "float32"
    assert conv(v2.ToDtype({tv_tensors.Mask: torch.int64, "others": None})).dtype == "uint8"
    raises(
        lambda: conv(v2.Compose([v2.RandomCrop(8), v2.RandomRotation(5, fill={tv_tensors.Image: 1, torch.Tensor: 2})])),
        "transforms[1] (RandomRotation)",
        "fill",
    )
    raises(lambda: conv(v2.Compose([v2.CenterCrop(8), v2.ToDtype(torch.int64)])), "transforms[1] (ToDtype)", "dtype")
    # Interpolation given as a PIL code or a string (v2 keeps it as given).
    assert conv(v2.Resize(32, interpolation=3)).interpolation == "bicubic"
    assert conv(v2.RandomResizedCrop(32, interpolation="nearest")).interpolation == "nearest"
    assert conv(v1.Resize(32, interpolation=2)).interpolation == "bilinear"
    # Containers, nested and in both versions.
    for tv in (v1, v2):
        nested = tv.Compose(
            [
                tv.RandomChoice([tv.RandomRotation(5), tv.RandomInvert()], p=[1, 3]),
                tv.RandomOrder([tv.RandomEqualize(), tv.Compose([tv.CenterCrop(16)])]),
            ]
        )
        got = conv(nested)
        assert got.transforms[0].op == "RandomChoice" and got.transforms[0].p in ([1, 3], [0.25, 0.75])
        assert got.transforms[1].transforms[1] == T.Compose([T.CenterCrop(16)])
    # A stoker Compose may hold torchvision objects.
    assert T.Compose([v2.CenterCrop(8), T.RandomInvert()]) == T.Compose([T.CenterCrop(8), T.RandomInvert()])

    # Refusals: Lambda, a class of one's own, a subclass, an op Stoker lacks.
    class Mine(torch.nn.Module):
        def forward(self, x):
            return x

    class MyCrop(v2.RandomCrop):
        pass

    supported = "supported: Compose, RandomApply"
    for tv in (v1, v2):
        raises(
            lambda tv=tv: conv(
                tv.Compose([tv.RandomResizedCrop(8), tv.RandomHorizontalFlip(), tv.ToTensor(), tv.Lambda(lambda x: x)])
            ),
            "transforms[3] (Lambda)",
            supported,
        )
        raises(
            lambda tv=tv: conv(tv.Compose([tv.CenterCrop(8), tv.RandomApply([tv.ColorJitter(0.1), Mine()])])),
            "transforms[1].transforms[1] (Mine)",
            supported,
        )
    raises(lambda: conv(v2.Compose([MyCrop(8)])), "transforms[0] (MyCrop)", "subclass")
    raises(lambda: conv(v2.Compose([v2.CenterCrop(8), v2.ElasticTransform()])), "transforms[1] (ElasticTransform)")
    raises(lambda: conv(v1.Lambda(lambda x: x)), "transform (Lambda)")
    raises(
        lambda: conv(v2.Compose([v2.CenterCrop(8), v2.MixUp(num_classes=3)])),
        "transforms[1] (MixUp)",
        "batch_transform",
    )

    # MixUp / CutMix: converted, and on torch batches what torchvision's do
    # with the same draws.
    assert conv(v2.MixUp(alpha=0.2, num_classes=10)) == T.MixUp(alpha=0.2, num_classes=10)
    assert conv(v2.CutMix(num_classes=10)) == T.CutMix(num_classes=10)
    choice = conv(v2.RandomChoice([v2.MixUp(num_classes=10), v2.CutMix(num_classes=10)], p=[0.3, 0.7]))
    assert isinstance(choice, T.BatchRandomChoice) and np.allclose(choice.p, [0.3, 0.7])
    raises(lambda: conv(v2.MixUp(num_classes=10, labels_getter=lambda x: x[1])), "labels_getter")
    # Inside a choice, the error names where the bad one sits.
    raises(lambda: conv(v2.RandomChoice([v2.MixUp(num_classes=10), v2.CutMix(num_classes=10, labels_getter=lambda x: x[1])])),
           "transforms[1] (CutMix)", "labels_getter")
    torch.manual_seed(0)
    images = torch.rand(6, 3, 12, 10)
    labels = torch.randint(0, 10, (6,))
    for seed in range(20):
        rng = np.random.default_rng(seed)
        mix, params = T.MixUp(alpha=0.5, num_classes=10), None
        params = mix._draw(np.random.default_rng(seed), 12, 10)
        ours = mix(images, labels, rng=rng)
        tv_mix = v2.MixUp(alpha=0.5, num_classes=10)
        tv_mix.make_params = lambda flat, lam=params["lam"]: {"lam": lam}
        theirs = tv_mix(images, labels)
        assert torch.allclose(ours[0], theirs[0]) and torch.allclose(ours[1], theirs[1]), seed
        assert ours[1].dtype == torch.float32 and ours[1].shape == (6, 10)
        cut = T.CutMix(num_classes=10)
        params = cut._draw(np.random.default_rng(seed), 12, 10)
        u8 = (images * 255).to(torch.uint8)
        ours = cut(u8, labels, rng=np.random.default_rng(seed))
        tv_cut = v2.CutMix(num_classes=10)
        tv_cut.make_params = lambda flat, p=params: {"box": p["box"], "lam_adjusted": p["lam"]}
        theirs = tv_cut(u8, labels)
        assert torch.equal(ours[0], theirs[0]) and torch.allclose(ours[1], theirs[1]), seed
    # torchvision's own box from the same (lam, r_x, r_y): the same box.
    import math

    for lam, rx, ry, h, w in [(0.3, 4, 7, 12, 10), (0.9, 0, 11, 12, 10), (0.01, 9, 0, 12, 10)]:
        r = 0.5 * math.sqrt(1.0 - lam)
        tv_box = (
            int(torch.clamp(torch.tensor([rx]) - int(r * w), min=0)),
            int(torch.clamp(torch.tensor([ry]) - int(r * h), min=0)),
            int(torch.clamp(torch.tensor([rx]) + int(r * w), max=w)),
            int(torch.clamp(torch.tensor([ry]) + int(r * h), max=h)),
        )

        assert T.CutMix(num_classes=2)._draw(Fixed(lam, [rx, ry]), h, w)["box"] == tv_box
    # channels_last batches stay channels_last.
    cl = images.contiguous(memory_format=torch.channels_last)
    out, _ = T.MixUp(num_classes=10)(cl, labels, rng=np.random.default_rng(0))
    assert out.is_contiguous(memory_format=torch.channels_last)
    raises(lambda: T.MixUp(num_classes=10)((images * 255).to(torch.uint8), labels), "MixUp", "float")
    # On a GPU: the same batches as on the CPU, left on the device.
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        choice = T.RandomChoice([T.MixUp(num_classes=10), T.CutMix(num_classes=10)])
        for seed in range(10):
            cpu = choice(images, labels, rng=T.batch_rng(1, 0, seed))
            gpu = choice(images.cuda(), labels.cuda(), rng=T.batch_rng(1, 0, seed))
            assert gpu[0].is_cuda and gpu[1].is_cuda
            assert torch.allclose(cpu[0], gpu[0].cpu(), atol=1e-6) and torch.allclose(cpu[1], gpu[1].cpu()), seed

    # timm's RandAugment, when timm is there.
    try:
        from timm.data.auto_augment import rand_augment_transform
    except ImportError as e:
        print(f"SKIP timm RandAugment conversion: timm not installed ({e})")
    else:
        ra = rand_augment_transform("rand-m9-mstd0.5-inc1", {"translate_const": 100, "img_mean": (124, 116, 104)})
        assert conv(ra) == T.TimmRandAugment("rand-m9-n2-p0.5-mstd0.5-inc1", img_mean=[124, 116, 104]), conv(ra)
        from PIL import Image

        ra = rand_augment_transform(
            "rand-m7-n3-p0.8-mstd101-mmax9", {"interpolation": Image.BICUBIC, "translate_pct": 0.3}
        )
        assert conv(ra) == T.TimmRandAugment(
            "rand-m7-n3-p0.8-mstd101-mmax9-inc0", img_mean=[128, 128, 128], interpolation="bicubic", translate_pct=0.3
        ), conv(ra)
        raises(lambda: conv(rand_augment_transform("rand-m9-t3a", {})), "transform (RandAugment)", "subset")
        raises(lambda: conv(rand_augment_transform("rand-m9-tweights", {})), "transform (RandAugment)")
    if stoker is not None:
        for pipeline in accepted:
            try:
                stoker._stoker.check_transform(pipeline.to_json())
            except ValueError as e:
                raise AssertionError(f"{pipeline}: {e}") from None
        checked = f"{len(accepted)} converted pipelines accepted by the worker's parser"
    else:
        checked = "worker's parser not checked (no native extension)"
    print(
        f"transforms torchvision {torchvision.__version__}: recipes, policies, {count} op conversions (v1 and v2), "
        f"refusals and MixUp/CutMix against torchvision ok{' (and on cuda)' if on_gpu else ''}; {checked}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers")
    parser.add_argument("--dataset")
    parser.add_argument("--expected")
    parser.add_argument("--torchvision", action="store_true", help="fail when torchvision does not import")
    args = parser.parse_args()
    stoker, T = load()
    check_json(stoker, T)
    check_kinds(stoker, T)
    check_loader_refusals(stoker, T)
    check_mix_numpy(T)
    check_loader_conversion(stoker, T)
    if args.workers:
        assert stoker is not None, "the loader checks need the stoker package"
        check_loader(stoker, T, args.workers, args.dataset, args.expected)
    check_torchvision(stoker, T, args.torchvision)
    print("transforms check: all passed")


if __name__ == "__main__":
    sys.exit(main())
