"""Orchestrates scripts/bench-transforms.sh: Stoker's CPU transform throughput
beside torchvision (PIL, DataLoader workers) and DALI's CPU pipeline, on
the same JPEGs, in one run, as ratios of medians.

Workloads (one JSON spec each; Stoker reads it as is, and the torchvision
and DALI pipelines are built from the same list of ops):
  seed000-N  N x (RandomHorizontalFlip, RandomVerticalFlip,
             RandomRotation(30)), then RandomResizedCrop(224),
             RandomHorizontalFlip, PILToTensor, ToDtype(float32, scale),
             Normalize(ImageNet mean/std); N from --seed000 (1,4,8,12).
  tv-recipe  torchvision's classification reference (presets.py,
             ClassificationPresetTrain with auto_augment_policy="ta_wide",
             random_erase 0.1, crop 176): RandomResizedCrop(176, bilinear),
             RandomHorizontalFlip, TrivialAugmentWide(bilinear),
             PILToTensor, ToDtype(float32, scale), Normalize,
             RandomErasing(0.1).

Contenders, each in a process of its own, alternated within every round
(the order rotates from round to round):
  stoker x1/x2     `stoker bench --threads 1|2` (decode + every op, the
                   worker's code, images held in memory, no network).
  torchvision w1/w2  torch DataLoader(num_workers=1|2, batch 64, default
                   collation) over an ImageFolder-like Dataset (PIL open,
                   convert RGB, the v2 Compose); warm-up batches first,
                   then a fixed number of images timed.
  dali t1/t2       DALI pipeline, device_id=None (CPU only), num_threads
                   1|2, batch 64: readers.file, decoders.image(cpu) and
                   the ops as DALI operators (see dali_pipeline()).

Per core = images/s divided by the threads / worker processes given.
The tables give medians over the rounds and the ratio of the medians.

Subcommands `torch` and `dali` are the child processes; `main` (default)
runs everything. See --help.
"""

import argparse
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHOTOS = os.path.join(ROOT, "..", "shared", "photos")
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
BATCH = 64
# What an ImageNet train image typically is (width, height), with weights.
SIZES = [((500, 375), 6), ((375, 500), 2), ((500, 333), 3), ((333, 500), 1), ((500, 400), 1),
         ((500, 500), 1), ((640, 480), 1)]


# --------------------------------------------------------------------------
# The workloads: lists of torchvision v2 ops in Stoker's JSON form.

def output_ops():
    return [{"op": "PILToTensor"}, {"op": "ToDtype", "dtype": "float32", "scale": True},
            {"op": "Normalize", "mean": MEAN, "std": STD}]


def seed000_ops(n):
    ops = []
    for _ in range(n):
        ops += [{"op": "RandomHorizontalFlip", "p": 0.5}, {"op": "RandomVerticalFlip", "p": 0.5},
                {"op": "RandomRotation", "degrees": 30}]
    ops += [{"op": "RandomResizedCrop", "size": 224}, {"op": "RandomHorizontalFlip", "p": 0.5}]
    return ops + output_ops()


def recipe_ops():
    return ([{"op": "RandomResizedCrop", "size": 176, "interpolation": "bilinear", "antialias": True},
             {"op": "RandomHorizontalFlip", "p": 0.5},
             {"op": "TrivialAugmentWide", "interpolation": "bilinear"}]
            + output_ops() + [{"op": "RandomErasing", "p": 0.1}])


def spec_json(ops):
    return json.dumps({"version": 1, "ops": ops}, separators=(",", ":"))


# --------------------------------------------------------------------------
# Child: torchvision on PIL in a DataLoader.

def torchvision_compose(ops):
    from torchvision.transforms import InterpolationMode, v2
    import torch

    interp = {"nearest": InterpolationMode.NEAREST, "bilinear": InterpolationMode.BILINEAR}
    out = []
    for o in ops:
        name = o["op"]
        if name == "RandomHorizontalFlip":
            out.append(v2.RandomHorizontalFlip(p=o.get("p", 0.5)))
        elif name == "RandomVerticalFlip":
            out.append(v2.RandomVerticalFlip(p=o.get("p", 0.5)))
        elif name == "RandomRotation":
            out.append(v2.RandomRotation(o["degrees"]))
        elif name == "RandomResizedCrop":
            out.append(v2.RandomResizedCrop(o["size"], interpolation=interp[o.get("interpolation", "bilinear")],
                                            antialias=o.get("antialias", True)))
        elif name == "TrivialAugmentWide":
            out.append(v2.TrivialAugmentWide(interpolation=interp[o.get("interpolation", "nearest")]))
        elif name == "PILToTensor":
            out.append(v2.PILToTensor())
        elif name == "ToDtype":
            out.append(v2.ToDtype(getattr(torch, o["dtype"]), scale=o.get("scale", False)))
        elif name == "Normalize":
            out.append(v2.Normalize(mean=o["mean"], std=o["std"]))
        elif name == "RandomErasing":
            out.append(v2.RandomErasing(p=o.get("p", 0.5)))
        else:
            raise SystemExit(f"torchvision_compose: no mapping for {name}")
    return v2.Compose(out)


def list_images(root):
    """(path, class index) for every JPEG under root, ImageFolder-style."""
    out = []
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    for label, c in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(root, c))):
            if name.lower().endswith((".jpg", ".jpeg")):
                out.append((os.path.join(root, c, name), label))
    return out


def proc_cpu_seconds(pid):
    """user + system CPU seconds of a live process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_torch(a):
    import torch
    from PIL import Image

    torch.set_num_threads(1)
    ops = json.loads(a.spec)["ops"]
    if a.uint8:
        ops = [o for o in ops if o["op"] not in ("ToDtype", "Normalize")]
    transform = torchvision_compose(ops)
    files = list_images(a.input)
    order = list(range(len(files)))
    random.Random(1).shuffle(order)
    warmup_batches = 2 * a.workers
    measure_batches = max(1, a.images // BATCH)
    # Enough indices that the workers never run out (each keeps
    # prefetch_factor batches queued beyond the ones we take).
    total = (warmup_batches + measure_batches + 4 * a.workers + 2) * BATCH

    class Dataset(torch.utils.data.Dataset):
        def __len__(self):
            return total

        def __getitem__(self, i):
            path, label = files[order[i % len(order)]]
            with Image.open(path) as im:
                img = im.convert("RGB")
            return transform(img), label

    loader = torch.utils.data.DataLoader(Dataset(), batch_size=BATCH, shuffle=False, num_workers=a.workers,
                                         drop_last=True)
    it = iter(loader)
    x = None
    for _ in range(warmup_batches):
        x, _ = next(it)
    pids = [w.pid for w in getattr(it, "_workers", [])]
    cpu0 = sum(proc_cpu_seconds(p) for p in pids) + time.process_time()
    t0 = time.perf_counter()
    n = 0
    for _ in range(measure_batches):
        x, _ = next(it)
        n += x.shape[0]
    dt = time.perf_counter() - t0
    cpu = sum(proc_cpu_seconds(p) for p in pids) + time.process_time() - cpu0
    del it
    print(json.dumps({"images": n, "seconds": dt, "images_per_sec": n / dt, "cpu_cores": cpu / dt,
                      "batch_shape": list(x.shape), "dtype": str(x.dtype)}))


# --------------------------------------------------------------------------
# Child: DALI's CPU pipeline.

def dali_pipeline(a, ops):
    """The ops as DALI CPU operators, DALI's usual way: flips are fn.flip
    with coin-flip arguments (a horizontal flip just before the output
    conversion folds into crop_mirror_normalize's `mirror`, as DALI's
    examples do), RandomRotation is fn.rotate(keep_size, nearest, fill 0),
    RandomResizedCrop is fn.random_resized_crop (linear, antialiased;
    with --dali-fused-crop and the crop first, decoders.image_random_crop
    + resize, DALI's ROI-decoding form), TrivialAugmentWide is
    nvidia.dali.auto_aug.trivial_augment.trivial_augment_wide (31 bins,
    linear, fill 0 as torchvision), ToDtype+Normalize is
    crop_mirror_normalize(float, CHW), RandomErasing is fn.erase on a
    coin flip with torchvision's area/ratio draws."""
    from nvidia.dali import fn, pipeline_def, types
    import nvidia.dali.math as dmath

    # scripts/bench_dali_gpu.py runs the same ops on a GPU (mixed decode).
    gpu = getattr(a, "gpu", False)
    decoder = "mixed" if gpu else "cpu"
    names = [o["op"] for o in ops]
    fused_crop = a.dali_fused_crop and names and names[0] == "RandomResizedCrop"

    @pipeline_def(batch_size=getattr(a, "batch", BATCH), num_threads=a.threads, device_id=0 if gpu else None,
                  enable_conditionals=True,
                  seed=1234, prefetch_queue_depth=2)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=a.input, random_shuffle=True, name="reader")
        rest = list(ops)
        if fused_crop:
            o = rest.pop(0)
            images = fn.decoders.image_random_crop(jpegs, device=decoder, output_type=types.RGB,
                                                   random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
            images = fn.resize(images, size=[o["size"], o["size"]], interp_type=types.INTERP_LINEAR,
                               antialias=True)
        else:
            images = fn.decoders.image(jpegs, device=decoder, output_type=types.RGB)
        mirror = None
        normalize = None
        for i, o in enumerate(rest):
            name = o["op"]
            if name == "RandomHorizontalFlip":
                later = [x["op"] for x in rest[i + 1:] if x["op"] != "PILToTensor"]
                if later[:1] == ["ToDtype"] and mirror is None:
                    mirror = fn.random.coin_flip(probability=o.get("p", 0.5))
                else:
                    images = fn.flip(images, horizontal=fn.random.coin_flip(probability=o.get("p", 0.5)),
                                     vertical=0)
            elif name == "RandomVerticalFlip":
                images = fn.flip(images, horizontal=0, vertical=fn.random.coin_flip(probability=o.get("p", 0.5)))
            elif name == "RandomRotation":
                d = o["degrees"]
                images = fn.rotate(images, angle=fn.random.uniform(range=[-d, d]), keep_size=True, fill_value=0,
                                   interp_type=types.INTERP_NN)
            elif name == "RandomResizedCrop":
                images = fn.random_resized_crop(images, size=[o["size"], o["size"]], random_area=[0.08, 1.0],
                                                random_aspect_ratio=[3 / 4, 4 / 3],
                                                interp_type=types.INTERP_LINEAR, antialias=True)
            elif name == "TrivialAugmentWide":
                from nvidia.dali.auto_aug import trivial_augment

                images = trivial_augment.trivial_augment_wide(images, num_magnitude_bins=31, fill_value=0,
                                                              interp_type=types.INTERP_LINEAR)
            elif name == "PILToTensor":
                pass
            elif name == "ToDtype":
                normalize = normalize or {"mean": [0.0] * 3, "std": [255.0] * 3}
            elif name == "Normalize":
                normalize = {"mean": [m * 255 for m in o["mean"]], "std": [s * 255 for s in o["std"]]}
                images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                                  mirror=mirror if mirror is not None else 0, **normalize)
            elif name == "RandomErasing":
                if a.dali_no_erase:
                    continue
                # torchvision's draw: area in scale, log-uniform aspect in
                # ratio; the box clipped to the image (no retries).
                area = fn.random.uniform(range=[0.02, 0.33])
                r = dmath.exp(fn.random.uniform(range=[math.log(0.3), math.log(3.3)]))
                h = dmath.min(dmath.sqrt(area * r), 1.0)
                w = dmath.min(dmath.sqrt(area / r), 1.0)
                anchor = fn.stack(fn.random.uniform(range=[0.0, 1.0]) * (1.0 - h),
                                  fn.random.uniform(range=[0.0, 1.0]) * (1.0 - w))
                shape = fn.stack(h, w)
                if fn.random.coin_flip(probability=o.get("p", 0.5), dtype=types.BOOL):
                    images = fn.erase(images, anchor=anchor, shape=shape, axis_names="HW", fill_value=0.0,
                                      normalized_anchor=True, normalized_shape=True)
                else:
                    images = images
            else:
                raise SystemExit(f"dali_pipeline: no mapping for {name}")
        return images, labels

    return pipe()


def child_dali(a):
    ops = json.loads(a.spec)["ops"]
    if a.dali_no_ta:
        ops = [o for o in ops if o["op"] != "TrivialAugmentWide"]
    p = dali_pipeline(a, ops)
    p.build()
    warmup = 3
    measure_batches = max(1, a.images // BATCH)
    out = None
    for _ in range(warmup):
        out = p.run()
    c0, t0 = time.process_time(), time.perf_counter()
    n = 0
    for _ in range(measure_batches):
        out = p.run()
        n += len(out[0])
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    first = out[0].at(0)
    print(json.dumps({"images": n, "seconds": dt, "images_per_sec": n / dt, "cpu_cores": cpu / dt,
                      "batch_shape": [len(out[0])] + list(first.shape), "dtype": str(first.dtype)}))


# --------------------------------------------------------------------------
# Main: images, the machine, rounds, tables.

BUSY = ("cargo", "rustc", "cargo-nextest", "cc1", "cc1plus", "build-script-")


def busy_processes():
    found = set()
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm in BUSY or comm.startswith("build-script-"):
            found.add(comm)
    return sorted(found)


def busy_cores(seconds=1.0):
    """Cores busy over `seconds` (from /proc/stat); this script is idle
    meanwhile, so it is other processes' load."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + v[4]
        return sum(v[:8]) - idle, sum(v[:8])
    b0, t0 = sample()
    time.sleep(seconds)
    b1, t1 = sample()
    cores = os.cpu_count() or 1
    return cores * (b1 - b0) / max(1, t1 - t0)


def cpu_seconds():
    """(CPU seconds of the whole machine, of this process and its reaped
    children, wall clock): the difference of two readings tells what
    other processes used meanwhile."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    machine_busy = (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")
    t = os.times()
    return machine_busy, t.user + t.system + t.children_user + t.children_system, time.perf_counter()


def wait_quiet(args, log):
    """Before each run: a Rust build (cargo, rustc, cc1 by process name)
    or other load (over 0.3 cores busy while this script idles) disturbs
    the timings. With --wait-quiet it waits for the machine to be quiet;
    otherwise it warns."""
    def why():
        b = busy_processes()
        if b:
            return f"{', '.join(b)} running"
        c = busy_cores()
        return f"{c:.2f} cores busy with other work" if c > args.max_busy else None
    w = why()
    if not w:
        return
    if not args.wait_quiet:
        log(f"warning: {w}: timings are disturbed")
        return
    log(f"waiting: {w}")
    t0 = time.time()
    quiet = 0
    while quiet < 2:
        time.sleep(5)
        quiet = quiet + 1 if not why() else 0
    args.waited += time.time() - t0
    log(f"quiet again after {time.time() - t0:.0f}s")


def make_images(args, work, log):
    """ImageNet-like JPEGs (quality --quality) cut from ../shared/photos:
    a random crop of a random photo at a typical ImageNet shape, resized
    to it. Without the photos, `stoker synth` draws them. Returns (dir,
    description)."""
    out = os.path.join(work, "images")
    photos = sorted(f for f in os.listdir(PHOTOS) if f.lower().endswith((".jpg", ".jpeg"))) \
        if os.path.isdir(PHOTOS) else []
    if not photos:
        log("no ../shared/photos: the images come from `stoker synth` (procedural, 500x375)")
        subprocess.run([args.stoker, "synth", "--output", out, "--images", str(args.images), "--classes", "10",
                        "--quality", str(args.quality)], check=True, capture_output=True)
        return out, f"{args.images} procedural 500x375 JPEGs from `stoker synth` (no ../shared/photos)"
    from PIL import Image

    rng = random.Random(0)
    sources = []
    for name in photos:
        with Image.open(os.path.join(PHOTOS, name)) as im:
            sources.append((os.path.splitext(name)[0], im.convert("RGB")))
    shapes, weights = zip(*SIZES)
    for i in range(args.images):
        label, img = sources[i % len(sources)]
        w, h = rng.choices(shapes, weights)[0]
        aspect = w / h
        W, H = img.size
        # The largest box of that aspect in the photo, scaled by
        # sqrt(0.35..1) in each side, placed at random.
        cw, ch = (W, W / aspect) if W / aspect <= H else (H * aspect, H)
        s = math.sqrt(rng.uniform(0.35, 1.0))
        cw, ch = max(w // 2, cw * s), max(h // 2, ch * s)
        cw, ch = min(cw, W), min(ch, H)
        x, y = rng.uniform(0, W - cw), rng.uniform(0, H - ch)
        crop = img.resize((w, h), Image.BICUBIC, box=(x, y, x + cw, y + ch))
        d = os.path.join(out, label)
        os.makedirs(d, exist_ok=True)
        crop.save(os.path.join(d, f"{i:06d}.jpg"), quality=args.quality)
    sizes = [os.path.getsize(p) for p, _ in list_images(out)]
    desc = (f"{args.images} JPEGs cut from the {len(photos)} photos in ../shared/photos "
            f"(random crops resized to ImageNet shapes: 500x375 most, 375x500, 500x333, 333x500, 500x400, "
            f"500x500, 640x480), quality {args.quality}, median {statistics.median(sizes) / 1000:.0f} KB")
    return out, desc


def machine():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{model}, {cores} cores available ({os.cpu_count()} online), {platform.system()} {platform.release()}"


def git_head():
    try:
        r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        return f"commit {r.stdout.strip()}" if r.returncode == 0 else "no git"
    except OSError:
        return "no git"


def versions(args):
    v = {}
    out = subprocess.run([args.stoker, "--version"], capture_output=True, text=True)
    v["stoker"] = out.stdout.strip().removeprefix("stoker ") or "?"
    v["stoker"] += f" (checkout at {git_head()})"
    v["python"] = platform.python_version()
    import numpy
    import PIL
    from PIL import features

    v["pillow"] = f"{PIL.__version__} (libjpeg-turbo {features.version('jpg')})" \
        if features.check_feature("libjpeg_turbo") else PIL.__version__
    v["numpy"] = numpy.__version__
    import torch
    import torchvision

    v["torch"] = torch.__version__
    v["torchvision"] = torchvision.__version__
    if not args.skip_dali:
        try:
            import nvidia.dali as dali

            v["dali"] = dali.__version__
        except ImportError as e:
            v["dali"] = f"not importable ({e})"
    return v


def contenders(args, workload):
    """(id, label, per-core divisor, kind, extra) for one workload."""
    out = [("stoker-1", "Stoker, 1 thread", 1), ("torchvision-1", "torchvision on PIL, 1 DataLoader worker", 1)]
    if not args.no_uint8:
        out.append(("torchvision_u8-1", "torchvision on PIL, 1 worker, uint8 out (no ToDtype/Normalize)", 1))
    if not args.skip_dali:
        out.append(("dali-1", "DALI CPU, num_threads=1", 1))
        if workload == "tv-recipe" and not args.no_dali_roi:
            out.append(("dali_roi-1", "DALI CPU, num_threads=1, ROI decode (decoders.image_random_crop + resize)", 1))
    if not args.no_scaling:
        out += [("stoker-2", "Stoker, 2 threads", 2), ("torchvision-2", "torchvision on PIL, 2 DataLoader workers", 2)]
        if not args.skip_dali:
            out.append(("dali-2", "DALI CPU, num_threads=2", 2))
    return out


def run_json(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_contender(args, cid, images, spec, dali_flags):
    kind, n = cid.rsplit("-", 1)
    if kind == "stoker":
        j = run_json([args.stoker, "bench", "--input", images, "--transform", spec, "--threads", n,
                      "--passes", str(args.stoker_passes)])
        j["cpu_cores"] = None
        j["binary_mtime"] = os.path.getmtime(args.stoker)
        return j
    me = [sys.executable, os.path.abspath(__file__)]
    per = str(args.measure * int(n))
    if kind.startswith("torchvision"):
        u8 = ["--uint8"] if kind == "torchvision_u8" else []
        return run_json(me + ["torch", "--input", images, "--spec", spec, "--workers", n, "--images", per] + u8)
    roi = ["--dali-fused-crop"] if kind == "dali_roi" else []
    return run_json(me + ["dali", "--input", images, "--spec", spec, "--threads", n, "--images", per] + dali_flags
                    + roi)


def dali_check(args, images, log):
    """Whether TrivialAugmentWide and the erasing run on DALI's CPU backend
    here: flags for the recipe's DALI runs, and a note for the report."""
    me = [sys.executable, os.path.abspath(__file__), "dali", "--input", images, "--threads", "1",
          "--images", str(BATCH)]
    spec = spec_json(recipe_ops())
    notes = []
    flags = []
    try:
        run_json(me + ["--spec", spec])
        notes.append("TrivialAugmentWide (nvidia.dali.auto_aug.trivial_augment.trivial_augment_wide) and "
                     "RandomErasing (fn.erase under a coin-flip conditional) run on DALI's CPU backend")
        return flags, notes
    except RuntimeError as e:
        log(f"DALI with TrivialAugmentWide and erasing failed: {str(e)[-600:]}")
    try:
        run_json(me + ["--spec", spec, "--dali-no-erase"])
        flags = ["--dali-no-erase"]
        notes.append("DALI: fn.erase failed on the CPU backend here; its recipe runs are WITHOUT RandomErasing")
        return flags, notes
    except RuntimeError as e:
        log(f"DALI without erasing failed: {str(e)[-600:]}")
    run_json(me + ["--spec", spec, "--dali-no-ta"])
    flags = ["--dali-no-ta"]
    notes.append("DALI: trivial_augment_wide failed on the CPU backend here; its recipe runs are WITHOUT "
                 "TrivialAugmentWide (a lighter pipeline than the others)")
    return flags, notes


def fmt(x, nd=0):
    return "—" if x is None else f"{x:,.{nd}f}"


def main(args):
    lines = []

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    t_start = time.time()
    if not os.path.isfile(args.stoker):
        raise SystemExit(f"{args.stoker} is missing: build it (cargo build --release)")
    work = tempfile.mkdtemp(prefix="stoker-bench-transforms-")
    try:
        if args.input:
            images, desc = args.input, f"{len(list_images(args.input))} JPEGs from {args.input}"
        else:
            images, desc = make_images(args, work, log)
        n_images = len(list_images(images))
        vers = versions(args)
        log(f"machine: {machine()}")
        log("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))
        log(f"images: {desc}")

        workloads = [(f"seed000-{n}", f"Seed 000's load, N={n}", seed000_ops(n)) for n in args.seed000]
        if not args.skip_recipe:
            workloads.append(("tv-recipe", "torchvision reference recipe (TA-wide, erasing 0.1)", recipe_ops()))
        dali_flags, notes = ([], [])
        if not args.skip_dali and not args.skip_recipe:
            dali_flags, notes = dali_check(args, images, log)

        # results[(workload, contender)] = list of per-round dicts
        results = {}
        for r in range(args.rounds):
            log(f"== round {r + 1}/{args.rounds} (load average {os.getloadavg()[0]:.2f})")
            for wi, (wid, _, ops) in enumerate(workloads):
                spec = spec_json(ops)
                cs = contenders(args, wid)
                k = (r + wi) % len(cs)
                for cid, label, cores in cs[k:] + cs[:k]:
                    flags = dali_flags if wid == "tv-recipe" else []
                    for attempt in range(1, 4):
                        wait_quiet(args, log)
                        c0 = cpu_seconds()
                        j = run_contender(args, cid, images, spec, flags)
                        c1 = cpu_seconds()
                        # Other processes' CPU while it ran, in cores.
                        j["other_cores"] = ((c1[0] - c0[0]) - (c1[1] - c0[1])) / max(1e-9, c1[2] - c0[2])
                        log(f"  {wid:12} {cid:16} {j['images_per_sec']:8.1f} images/s  "
                            f"{j['images_per_sec'] / cores:8.1f}/core  ({j['images']} images, {j['seconds']:.2f}s"
                            + (f", {j['cpu_cores']:.2f} cores busy" if j.get("cpu_cores") else "")
                            + f", other work {j['other_cores']:.2f} cores)")
                        if j["other_cores"] <= args.max_busy or not args.wait_quiet:
                            break
                        log("  disturbed by other work: again" if attempt < 3 else "  disturbed: kept")
                    results.setdefault((wid, cid), []).append(j)

        # Tables. The binary may have been rebuilt while --wait-quiet
        # waited: name the one(s) that ran.
        built = sorted({x["binary_mtime"] for (w, c), rs in results.items() if c.startswith("stoker")
                        for x in rs})
        stamps = ", ".join(time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) for t in built)
        vers["stoker"] = vers["stoker"].split(" (")[0] + f" (binary built {stamps} UTC" + \
            (", REBUILT DURING THE RUN" if len(built) > 1 else "") + f"; checkout at {git_head()})"
        title = "Stoker CPU transform throughput vs torchvision (PIL) and DALI (CPU)"
        lines.append(f"### {title}")
        lines.append("")
        lines.append(f"- Machine: {machine()}")
        lines.append("- Versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))
        lines.append(f"- Images: {desc}")
        lines.append(f"- Method: {args.rounds} rounds, contenders alternated within each round (order rotating); "
                     f"median images/s over the rounds. Stoker: `stoker bench --threads N --passes "
                     f"{args.stoker_passes}` (all {n_images} images per pass, held in memory). torchvision: "
                     f"DataLoader, batch {BATCH}, default collation, {2} warm-up batches per worker, then "
                     f"{args.measure} images per worker timed. DALI: batch {BATCH}, 3 warm-up iterations, then "
                     f"{args.measure} images per thread timed. Per core = images/s / threads (or worker "
                     f"processes). Ratio = median Stoker per core / median baseline per core. "
                     f"'Cores busy': the contender's processes' CPU time over the timed window; 'other work': "
                     f"other processes' CPU over the whole run (with --wait-quiet a run above {args.max_busy} "
                     f"cores of it is repeated, up to 3 tries).")
        lines.append("- Stoker's worker delivers uint8 HWC pixels: PILToTensor/ToDtype/Normalize in a spec are "
                     "the client's conversion (in the training process, on the GPU when batches land there), "
                     "so its figures exclude the float conversion and normalisation and the batch collation, "
                     "which the torchvision and DALI figures include (float32 CHW out). RandomErasing runs "
                     "in the worker (in uint8, filling the normalised zero's colour).")
        for n in notes:
            lines.append(f"- {n}.")
        lines.append("- DALI ops: fn.flip with coin flips (the flip before the output conversion folded into "
                     "crop_mirror_normalize's mirror), fn.rotate(keep_size, nearest, fill 0), "
                     "fn.random_resized_crop (linear, antialias), trivial_augment_wide(31 bins, linear, fill 0), "
                     "crop_mirror_normalize(float32, CHW), fn.erase on a coin flip. \"ROI decode\": the "
                     "recipe's RandomResizedCrop as decoders.image_random_crop + resize, DALI's own fast path "
                     "(Stoker too decodes only the crop's region when the crop comes first).")
        lines.append("")
        lines.append("| workload | contender | median images/s | per core | rounds (images/s) | cores busy | "
                     "other work (cores, max) |")
        lines.append("|---|---|---:|---:|---|---:|---:|")
        med = {}
        for wid, wname, _ in workloads:
            for cid, label, cores in contenders(args, wid):
                rs = results.get((wid, cid), [])
                if not rs:
                    continue
                rates = [x["images_per_sec"] for x in rs]
                m = statistics.median(rates)
                med[(wid, cid)] = m / cores
                busy = [x["cpu_cores"] for x in rs if x.get("cpu_cores")]
                lab = label
                if cid.startswith("dali") and wid == "tv-recipe" and "--dali-no-ta" in dali_flags:
                    lab += " (WITHOUT TrivialAugmentWide)"
                if cid.startswith("dali") and wid == "tv-recipe" and "--dali-no-erase" in dali_flags:
                    lab += " (WITHOUT RandomErasing)"
                lines.append(f"| {wname} | {lab} | {fmt(m)} | {fmt(m / cores)} | "
                             f"{', '.join(fmt(x) for x in rates)} | "
                             f"{fmt(statistics.median(busy), 2) if busy else '—'} | "
                             f"{fmt(max(x.get('other_cores', 0) for x in rs), 2)} |")
        lines.append("")
        lines.append("Ratios (per core, ratio of medians) against the issue's targets:")
        lines.append("")
        lines.append("| workload | Stoker / baseline | cores | ratio | per-round ratios | target | met |")
        lines.append("|---|---|---:|---:|---|---:|---|")
        for wid, wname, _ in workloads:
            pairs = [("torchvision", "torchvision (PIL)", 3.0), ("torchvision_u8", "torchvision (PIL), uint8 out", None)]
            if not args.skip_dali:
                pairs.append(("dali", "DALI CPU", 1.5 if wid == "tv-recipe" else None))
                pairs.append(("dali_roi", "DALI CPU, ROI decode", 1.5 if wid == "tv-recipe" else None))
            for base, bname, target in pairs:
                for n in ([1] if args.no_scaling else [1, 2]):
                    s, b = med.get((wid, f"stoker-{n}")), med.get((wid, f"{base}-{n}"))
                    if s is None or b is None:
                        continue
                    sr = [x["images_per_sec"] for x in results[(wid, f"stoker-{n}")]]
                    br = [x["images_per_sec"] for x in results[(wid, f"{base}-{n}")]]
                    per_round = ", ".join(f"{x / y:.2f}" for x, y in zip(sr, br))
                    ratio = s / b
                    t = f"≥ {target:g}×" if target and n == 1 else "—"
                    met = ""
                    if target and n == 1:
                        # "yes" only when every round's ratio clears the target.
                        low = min(x / y for x, y in zip(sr, br))
                        met = "yes" if low >= target else ("borderline (not every round)" if ratio >= target
                                                           else "**no**")
                    lines.append(f"| {wname} | Stoker / {bname} | {n} | {ratio:.2f}× | {per_round} | {t} | {met} |")
        lines.append("")
        lines.append(f"Command: `scripts/bench-transforms.sh {' '.join(args.argv)}`".rstrip() + f"; "
                     f"took {(time.time() - t_start) / 60:.1f} min"
                     + (f", {args.waited / 60:.1f} of them waiting for a quiet machine" if args.waited else "")
                     + ".")
        text = "\n".join(lines) + "\n"
        print(text)
        if args.out:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out, "w") as f:
                f.write(text)
            raw = os.path.splitext(args.out)[0] + ".json"
            with open(raw, "w") as f:
                json.dump({"machine": machine(), "versions": vers, "images": desc, "argv": args.argv,
                           "notes": notes,
                           "runs": [{"workload": w, "contender": c, "rounds": rs}
                                    for (w, c), rs in results.items()]}, f, indent=1)
            log(f"written to {args.out} (every run: {raw})")
    finally:
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def parse():
    argv = sys.argv[1:]
    if argv[:1] in (["torch"], ["dali"]):
        p = argparse.ArgumentParser(prog=f"bench_transforms.py {argv[0]}")
        p.add_argument("--input", required=True)
        p.add_argument("--spec", required=True)
        p.add_argument("--images", type=int, required=True, help="images to time (rounded down to batches)")
        p.add_argument("--workers", type=int, default=1)
        p.add_argument("--threads", type=int, default=1)
        p.add_argument("--uint8", action="store_true", help="torch: without ToDtype/Normalize (uint8 out)")
        p.add_argument("--dali-no-ta", action="store_true")
        p.add_argument("--dali-no-erase", action="store_true")
        p.add_argument("--dali-fused-crop", action="store_true")
        a = p.parse_args(argv[1:])
        (child_torch if argv[0] == "torch" else child_dali)(a)
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=640, help="JPEGs to make (default 640)")
    p.add_argument("--quality", type=int, default=90, help="their JPEG quality (default 90)")
    p.add_argument("--input", help="use this ImageFolder-like folder of JPEGs instead of making them")
    p.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    p.add_argument("--measure", type=int, default=320,
                   help="torchvision/DALI: images timed per worker or thread, in batches of 64 (default 320)")
    p.add_argument("--stoker-passes", type=int, default=2, help="stoker bench --passes (default 2)")
    p.add_argument("--seed000", default="1,4,8,12", help="N values of the Seed 000 workload (default 1,4,8,12)")
    p.add_argument("--skip-recipe", action="store_true", help="leave out the torchvision recipe workload")
    p.add_argument("--skip-dali", action="store_true", help="leave out DALI")
    p.add_argument("--no-scaling", action="store_true", help="1-core contenders only (no 2-thread/worker runs)")
    p.add_argument("--no-uint8", action="store_true",
                   help="leave out torchvision with uint8 output (the work Stoker's worker does)")
    p.add_argument("--no-dali-roi", action="store_true",
                   help="leave out DALI with decoders.image_random_crop (ROI decode) on the recipe")
    p.add_argument("--wait-quiet", action="store_true",
                   help="before each run, wait while cargo/rustc run or other work keeps the CPU busy")
    p.add_argument("--max-busy", type=float, default=0.3,
                   help="cores other work may keep busy before a run counts as disturbed (default 0.3)")
    p.add_argument("--out", default=os.path.join(ROOT, "target", "bench-transforms.md"),
                   help="also write the Markdown here (default target/bench-transforms.md), and every "
                        "run's numbers beside it (.json)")
    p.add_argument("--stoker", default=os.path.join(ROOT, "target", "release", "stoker"))
    p.add_argument("--keep", action="store_true", help="keep the temporary images")
    a = p.parse_args(argv)
    a.argv = argv
    a.waited = 0.0
    a.seed000 = [int(x) for x in a.seed000.split(",") if x.strip()]
    main(a)


if __name__ == "__main__":
    parse()
