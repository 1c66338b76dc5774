#!/usr/bin/env python3
"""Train a torchvision ResNet fed by Stoker, by torch's DataLoader, or by one
synthetic batch already on the GPU (the upper bound), and report how fast it
trains and how much of the time it waited for data.

    # Stoker: workers decode and augment; batches land on the GPU normalised.
    stoker pack --input ~/imagenet/train --output /data/shards
    stoker worker --listen 127.0.0.1:50051 &
    python3 scripts/bench_train.py --loader stoker --workers 127.0.0.1:50051 --dataset /data/shards

    # The same loop fed by torchvision's ImageFolder through a DataLoader.
    python3 scripts/bench_train.py --loader dataloader --image-folder ~/imagenet/train --dataloader-workers 15

    # NVIDIA DALI in this process, reading the same ImageFolder (the
    # incumbent on a training node; needs nvidia-dali-cuda130).
    python3 scripts/bench_train.py --loader dali --image-folder ~/imagenet/train --dali-threads 12

    # Synthetic data already on the device: what the GPU can do alone.
    python3 scripts/bench_train.py --loader synthetic

Every path hands the training step the same input: a [B, 3, S, S] tensor on
the GPU, scaled to [0, 1] and normalised with the ImageNet mean and std, in
--dtype (bfloat16 by default, with the step under autocast), labels int64.
Stoker's workers do RandomResizedCrop(S) + horizontal flip, the DataLoader
path does the same with torchvision's transforms; both send uint8 pixels and
normalise on the device.

What is measured, over --steps steps (more, until --seconds have passed)
after --warmup steps:

- images/s: steps x batch size / wall time, the GPU synchronised before the
  clock stops.
- host wait: wall time the training loop spent getting the next batch
  (inside ``next()``, plus, for the DataLoader, launching its copy and
  normalisation), as a fraction of the wall time.
- GPU idle: CUDA events on the training stream mark where each step's
  compute starts (the batch is on the device, and for Stoker the stream has
  waited for its upload) and ends. The gaps between one step's end and the
  next one's start, as a fraction of the GPU time from the first fetch to
  the last step's end, are time the GPU spent not training: idle, or, for
  the DataLoader, busy only copying and normalising the input. Events are
  read once at the end; nothing synchronises during the measurement.

With --profile PATH the measured steps run under torch.profiler (every
kernel in the process, nvJPEG's and Stoker's included) and PATH gets where
the GPU time went (scripts/train_profile.py); the rates of such a run are
not the benchmark's. With --json the last line of stdout is one JSON
object with these figures.
torch and torchvision are imported in main(), so ``--help`` works without
them.
"""

import argparse
import contextlib
import json
import os
import tempfile
import statistics
import sys
import time
import warnings

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
ARCHS = ("resnet18", "resnet50")
DTYPES = ("bfloat16", "float32")


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Train a torchvision ResNet from Stoker, torch's DataLoader or synthetic data; "
        "report images/s and the time spent waiting for data.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  bench_train.py --loader stoker --workers 127.0.0.1:50051 --dataset /data/shards\n"
        "  bench_train.py --loader dataloader --image-folder /data/imagenet/train --dataloader-workers 15\n"
        "  bench_train.py --loader synthetic --json",
    )
    p.add_argument("--loader", choices=("stoker", "dataloader", "dali", "synthetic"), default="stoker",
                   help="where batches come from (default: stoker)")
    g = p.add_argument_group("stoker")
    g.add_argument("--workers", help="comma-separated worker addresses, host:port,...")
    g.add_argument("--dataset", help="dataset URI the workers read (s3://..., file:///..., or a path)")
    g.add_argument("--prefetch", type=int, default=4, help="batches the Stoker client keeps ready (default: 4)")
    g.add_argument("--token", help="bearer token for the workers (default: $STOKER_TOKEN)")
    g.add_argument("--in-process-worker", metavar="ARGS",
                   help="also start a worker inside this process with these `stoker worker` arguments "
                        "(e.g. \"--device cuda --gpu-only\"): on the training GPU it shares the trainer's CUDA context")
    g.add_argument("--local-threads", type=int, metavar="N",
                   help="threads of the CPU worker that --workers local starts (default: the Loader's, its cores less one)")
    g.add_argument("--trainer-cores", type=int, default=0, metavar="N",
                   help="after the warm-up, pin this process's threads but Stoker's to N cores of its set and "
                        "every Stoker thread (this process's and the local workers') to the others; 0: no pinning")
    g.add_argument("--free-cores", type=int, default=0, metavar="N",
                   help="after the warm-up, keep every Stoker thread off N cores of this process's set, "
                        "leaving the training loop's threads where the scheduler puts them; 0: no pinning")
    g.add_argument("--shared-memory", type=int, default=256, metavar="MIB",
                   help="MiB of the ring workers on this host write into; 0: all over the network (default: 256)")
    g = p.add_argument_group("dataloader")
    g.add_argument("--image-folder", help="ImageFolder tree (one subfolder per class) of JPEGs")
    g.add_argument("--dataloader-workers", type=int, default=15, help="DataLoader worker processes (default: 15)")
    g.add_argument("--prefetch-factor", type=int, default=2,
                   help="batches each DataLoader worker prepares ahead (default: 2)")
    g = p.add_argument_group("dali")
    g.add_argument("--dali-threads", type=int, default=12, help="DALI's CPU threads (default: 12; reads --image-folder)")
    g = p.add_argument_group("training")
    g.add_argument("--arch", choices=ARCHS, default="resnet18", help="torchvision model (default: resnet18)")
    g.add_argument("--num-classes", type=int, default=1000,
                   help="model outputs (default: 1000); labels are taken modulo this")
    g.add_argument("--batch-size", type=int, default=256, help="images per step (default: 256)")
    g.add_argument("--image-size", type=int, default=224, help="crop size S of the S x S input (default: 224)")
    g.add_argument("--steps", type=int, default=200, help="measured steps, at least (default: 200)")
    g.add_argument("--seconds", type=float, default=0.0,
                   help="measure for at least this long too, taking more steps if needed (default: 0)")
    g.add_argument("--warmup", type=int, default=30,
                   help="steps before the measurement: cuDNN autotuning, worker start-up (default: 30)")
    g.add_argument("--dtype", choices=DTYPES, default="bfloat16",
                   help="input dtype; bfloat16 also runs the step under autocast (default: bfloat16)")
    g.add_argument("--lr", type=float, default=0.1, help="SGD learning rate (default: 0.1)")
    g.add_argument("--device", default="cuda:0", help="training device (default: cuda:0)")
    g.add_argument("--seed", type=int, default=0, help="augmentation / shuffling seed (default: 0)")
    p.add_argument("--trace", metavar="PATH",
                   help="write each measured step's fetch wait, GPU gap and compute (ms) and epoch to PATH (JSON)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line of stdout")
    p.add_argument("--profile", metavar="PATH",
                   help="record the measured steps with torch.profiler and write where the GPU time went to PATH "
                        "(JSON, scripts/train_profile.py)")
    args = p.parse_args(argv)

    if args.loader == "stoker" and not ((args.workers or args.in_process_worker) and args.dataset):
        p.error("--loader stoker needs --dataset and --workers, --in-process-worker or both")
    if args.loader == "dataloader" and not args.image_folder:
        p.error("--loader dataloader needs --image-folder")
    for name in ("batch_size", "image_size", "steps", "num_classes", "prefetch", "prefetch_factor"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("warmup", "dataloader_workers", "seconds"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must not be negative")
    if not args.device.startswith("cuda"):
        p.error("--device must be a CUDA device: the measurement uses CUDA events")
    return args


def endless(loader, counter):
    """Batches from `loader` forever: each pass over it is one epoch (for
    stoker.Loader, iterating again streams the next epoch). Counts the
    epochs started in counter["epochs"]."""
    while True:
        counter["epochs"] += 1
        n = 0
        for batch in loader:
            n += 1
            yield batch
        if n == 0:
            raise RuntimeError("the loader yielded no batch in a whole epoch: is the dataset smaller than one batch?")


class StokerSource:
    """Batches from Stoker workers. The client uploads each batch to the GPU
    and converts it there (uint8 HWC to normalised NCHW in `dtype`); the
    tensor reaches torch through DLPack, and torch's current stream waits
    for the upload, so nothing here blocks on the GPU."""

    def __init__(self, args, torch, device, dtype):
        import stoker

        self.torch = torch
        self.shape = (args.batch_size, 3, args.image_size, args.image_size)
        self.dtype = dtype
        workers = [w for w in (args.workers or "").split(",") if w]
        self.worker = None
        if args.in_process_worker:
            import shlex

            self.worker = stoker.InProcessWorker(shlex.split(args.in_process_worker) + ["--listen", "127.0.0.1:0"])
            workers.insert(0, self.worker.address)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.loader = stoker.Loader(
                workers=workers,
                dataset=args.dataset,
                batch_size=args.batch_size,
                image_size=args.image_size,
                transform="train",
                device=str(device),
                dtype=dtype,
                mean=list(IMAGENET_MEAN),
                std=list(IMAGENET_STD),
                seed=args.seed,
                last_batch="drop",
                # The kernel writes the layout the channels_last model takes.
                channels_last=True,
                prefetch=args.prefetch,
                token=args.token,
                shared_memory=args.shared_memory << 20,
                **({} if args.local_threads is None else {"local_threads": args.local_threads}),
            )
        # stoker.Loader warns when it cannot upload through its own pinned
        # ring (no usable GPU for the client); batches then arrive through
        # torch's pin_memory() + copy. Say so in the report.
        self.client_upload = True
        for w in caught:
            if "upload" in str(w.message):
                self.client_upload = False
            print(f"warning: {w.message}", file=sys.stderr)
        self.epochs = {"epochs": 0}
        self.it = endless(self.loader, self.epochs)
        self.checked = False

    def profile(self):
        """The last epoch's samples by worker role (local workers; else by
        address)."""
        roles = {w["address"]: w["role"] for w in self.loader.local_workers}
        by_role = {}
        for addr, n in ((self.loader.report() or {}).get("workers") or {}).items():
            role = roles.get(addr, addr)
            by_role[role] = by_role.get(role, 0) + n
        return {"by_role": by_role}

    def next(self):
        batch = next(self.it)
        images, labels = batch["image"], batch["label"]
        if not self.checked:
            # Metadata only: no synchronisation.
            if not images.is_cuda or images.dtype != self.dtype or tuple(images.shape) != self.shape:
                raise RuntimeError(f"stoker batch is {images.dtype} {tuple(images.shape)} on {images.device}, "
                                   f"expected {self.dtype} {self.shape} on the GPU")
            self.checked = True
        return images, labels

    def config(self, args):
        try:
            batches = len(self.loader)
        except TypeError:
            batches = None
        return {"workers": args.workers, "in_process_worker": args.in_process_worker,
                "dataset": args.dataset, "prefetch": args.prefetch,
                "client_upload": self.client_upload, "batches_per_epoch": batches,
                "epochs_started": self.epochs["epochs"]}

    def close(self):
        # Stops the epoch in progress (stoker.Loader's iteration ends it).
        self.it.close()
        if self.worker is not None:
            self.worker.stop()


class DataLoaderSource:
    """torchvision's ImageFolder through torch's DataLoader: PIL decode +
    RandomResizedCrop + RandomHorizontalFlip + PILToTensor (uint8 CHW) in
    worker processes, pinned, copied to the GPU without blocking, then
    scaled and normalised there, as Stoker's client does."""

    def __init__(self, args, torch, device, dtype):
        from torchvision import datasets, transforms

        self.torch, self.device, self.dtype = torch, device, dtype
        transform = transforms.Compose([
            transforms.RandomResizedCrop(args.image_size),
            transforms.RandomHorizontalFlip(),
            transforms.PILToTensor(),
        ])
        self.dataset = datasets.ImageFolder(args.image_folder, transform=transform)
        workers = args.dataloader_workers
        self.loader = torch.utils.data.DataLoader(
            self.dataset,
            batch_size=args.batch_size,
            shuffle=True,
            num_workers=workers,
            pin_memory=True,
            drop_last=True,
            persistent_workers=workers > 0,
            prefetch_factor=args.prefetch_factor if workers > 0 else None,
            generator=torch.Generator().manual_seed(args.seed),
        )
        # (x / 255 - mean) / std == (x - 255 mean) / (255 std), one op fewer.
        self.mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1) * 255
        self.epochs = {"epochs": 0}
        self.it = endless(self.loader, self.epochs)

    def next(self):
        images, labels = next(self.it)
        images = images.to(self.device, non_blocking=True)
        labels = labels.to(self.device, non_blocking=True)
        images = images.float().sub_(self.mean).div_(self.std).to(self.dtype)
        return images, labels

    def config(self, args):
        return {"image_folder": args.image_folder, "images": len(self.dataset),
                "dataloader_workers": args.dataloader_workers, "prefetch_factor": args.prefetch_factor,
                "pin_memory": True, "batches_per_epoch": len(self.loader), "epochs_started": self.epochs["epochs"]}

    def close(self):
        self.it.close()


class DaliSource:
    """NVIDIA DALI inside the training process, on the training GPU: files
    read and shuffled by DALI's reader, nvJPEG's mixed decoder fused with
    RandomResizedCrop's window (torchvision's scale and ratio), a resize to
    S x S, a random horizontal flip, and normalisation to CHW float16 in one
    kernel, then bfloat16 (DALI has no bfloat16 output): the same input as
    the other paths, in device memory."""

    def __init__(self, args, torch, device, dtype):
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        self.torch, self.dtype = torch, dtype
        size = args.image_size

        @pipeline_def(batch_size=args.batch_size, num_threads=args.dali_threads, device_id=device.index or 0,
                      seed=args.seed, prefetch_queue_depth=2)
        def pipe():
            jpegs, labels = fn.readers.file(file_root=args.image_folder, random_shuffle=True, name="reader")
            images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB,
                                                   random_area=[0.08, 1.0], random_aspect_ratio=[0.75, 4 / 3])
            images = fn.resize(images, resize_x=size, resize_y=size)
            images = fn.crop_mirror_normalize(images, dtype=types.FLOAT16, output_layout="CHW",
                                              mean=[255 * m for m in IMAGENET_MEAN],
                                              std=[255 * s for s in IMAGENET_STD],
                                              mirror=fn.random.coin_flip())
            return images, labels.gpu()

        self.pipe = pipe()
        self.pipe.build()
        self.loader = DALIGenericIterator([self.pipe], ["image", "label"], reader_name="reader",
                                          last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)
        self.epochs = {"epochs": 0}
        self.it = endless(self.loader, self.epochs)

    def next(self):
        batch = next(self.it)[0]
        return batch["image"].to(self.dtype), batch["label"].view(-1).long()

    def config(self, args):
        return {"image_folder": args.image_folder, "dali_threads": args.dali_threads, "epochs_started": self.epochs["epochs"]}

    def close(self):
        self.it.close()


class SyntheticSource:
    """One normalised batch, made on the device once and reused: the loop
    never waits for data, which makes it the upper bound."""

    def __init__(self, args, torch, device, dtype):
        g = torch.Generator(device=device).manual_seed(args.seed)
        shape = (args.batch_size, 3, args.image_size, args.image_size)
        self.images = torch.randn(shape, device=device, generator=g).to(dtype)
        self.images = self.images.contiguous(memory_format=torch.channels_last)
        self.labels = torch.randint(0, args.num_classes, (args.batch_size,), device=device, generator=g)

    def next(self):
        return self.images, self.labels

    def config(self, args):
        return {}

    def close(self):
        pass


SOURCES = {"stoker": StokerSource, "dataloader": DataLoaderSource, "dali": DaliSource, "synthetic": SyntheticSource}


def write_profile(args, profiler, steps, source_figures):
    """Where the profiled steps' GPU time went, to --profile (JSON)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import train_profile

    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        profiler.export_chrome_trace(trace)
        figures = train_profile.summarize(trace, steps, steps * args.batch_size, **source_figures)
    figures["loader"] = args.loader
    with open(args.profile, "w") as f:
        json.dump(figures, f, indent=1)
    print(f"profile: {steps} steps; training kernels {figures.get('train_kernel_ms_per_step', 0):.2f} ms/step, "
          f"GPU idle {100 * figures.get('gpu_idle_fraction', 0):.1f}%, Stoker's kernels "
          f"{figures.get('stoker_kernel_us_per_image', 0):.1f} us/image, nvJPEG's "
          f"{figures.get('nvjpeg_kernel_us_per_image', 0):.1f} us/image -> {args.profile}", flush=True)


def pin_trainer(n, source, trainer=True):
    """Gives the training loop n cores of its own: every Stoker thread,
    this process's (named stoker-*) and each local worker process's, on
    all but the first n cores of this process's set, and, with `trainer`,
    this process's other threads on those n. Run after the warm-up, so
    that torch's threads exist."""
    cpus = sorted(os.sched_getaffinity(0))
    if not 0 < n < len(cpus):
        sys.exit(f"error: --trainer-cores {n}: this process may use {len(cpus)} cores")
    mine, theirs = set(cpus[:n]), set(cpus[n:])
    loader = getattr(source, "loader", None)
    others = [w["pid"] for w in getattr(loader, "local_workers", []) if w.get("pid") not in (None, os.getpid())]
    counts = {"trainer": 0, "stoker": 0}
    for pid in [os.getpid()] + others:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    ours = pid != os.getpid() or f.read().startswith("stoker")
                if ours or trainer:
                    os.sched_setaffinity(int(tid), theirs if ours else mine)
            except (FileNotFoundError, ProcessLookupError):
                continue  # a thread that ended meanwhile
            counts["stoker" if ours else "trainer"] += 1
    return {"trainer_cores": sorted(mine), "stoker_cores": len(theirs), "threads": counts}


def main(argv=None):
    args = parse_args(argv)

    import torch
    import torch.nn.functional as F
    import torchvision

    if not torch.cuda.is_available():
        sys.exit("error: no CUDA device: this example trains on the GPU")
    device = torch.device(args.device)
    torch.cuda.set_device(device)
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    amp = dtype == torch.bfloat16

    model = getattr(torchvision.models, args.arch)(num_classes=args.num_classes)
    model = model.to(device, memory_format=torch.channels_last).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)

    def train_step(images, labels):
        # channels_last is what cuDNN runs fastest in bf16; a no-op for the
        # synthetic batch, one device copy for the NCHW batches.
        images = images.contiguous(memory_format=torch.channels_last)
        # Fold labels into the model's classes (-1, "no label", becomes the
        # last class): the benchmark needs valid targets, not a meaningful task.
        labels = labels.remainder(args.num_classes)
        ctx = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if amp else contextlib.nullcontext()
        with ctx:
            loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    source = SOURCES[args.loader](args, torch, device, dtype)
    try:
        for _ in range(args.warmup):
            train_step(*source.next())
        torch.cuda.synchronize()
        pinned = None
        if args.trainer_cores or args.free_cores:
            pinned = pin_trainer(args.trainer_cores or args.free_cores, source, trainer=bool(args.trainer_cores))

        # One event before the first fetch, then per step: `ready` once the
        # batch is usable on the training stream, `done` after the optimizer
        # step. The GPU gap before step k is done[k-1] -> ready[k] (start ->
        # ready[0] for the first).
        Event = torch.cuda.Event
        start = Event(enable_timing=True)
        ready, done, fetch, epochs = [], [], [], []
        counter = getattr(source, "epochs", None)
        profiler = contextlib.nullcontext()
        if args.profile:
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
        t0 = time.perf_counter()
        profiler.__enter__()
        start.record()
        # --steps steps, and more until --seconds have passed; the host may
        # run a few steps ahead of the GPU, and the wall time below waits
        # for the last.
        while len(done) < args.steps or time.perf_counter() - t0 < args.seconds:
            f0 = time.perf_counter()
            images, labels = source.next()
            ready.append(Event(enable_timing=True))
            ready[-1].record()
            fetch.append(time.perf_counter() - f0)
            epochs.append(counter["epochs"] if counter else 0)
            loss = train_step(images, labels)
            done.append(Event(enable_timing=True))
            done[-1].record()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        profiler.__exit__(None, None, None)
        final_loss = loss.item()
        if args.profile:
            write_profile(args, profiler, len(done), getattr(source, "profile", dict)())
    finally:
        source.close()

    steps = len(done)
    gpu_total = start.elapsed_time(done[-1])  # milliseconds
    gaps = [start.elapsed_time(ready[0])] + [done[k - 1].elapsed_time(ready[k]) for k in range(1, steps)]
    compute = [ready[k].elapsed_time(done[k]) for k in range(steps)]
    if args.trace:
        with open(args.trace, "w") as f:
            json.dump({"fetch_ms": [1e3 * x for x in fetch], "gap_ms": gaps, "compute_ms": compute,
                       "epoch": epochs}, f)
    result = {
        "loader": args.loader,
        "arch": args.arch,
        "dtype": args.dtype,
        "batch_size": args.batch_size,
        "image_size": args.image_size,
        "steps": steps,
        "warmup": args.warmup,
        "pinned": pinned,
        "seconds": wall,
        "images_per_sec": steps * args.batch_size / wall,
        "wait_fraction": sum(fetch) / wall,
        "gpu_idle_fraction": sum(gaps) / gpu_total if gpu_total > 0 else 0.0,
        "fetch_ms_median": 1e3 * statistics.median(fetch),
        "fetch_ms_max": 1e3 * max(fetch),
        "gpu_gap_ms_median": statistics.median(gaps),
        "gpu_gap_ms_max": max(gaps),
        "step_compute_ms_median": statistics.median(compute),
        "step_compute_ms_mean": statistics.fmean(compute),
        "loss": final_loss,
        "gpu": torch.cuda.get_device_name(device),
        "config": source.config(args),
    }
    cfg = " ".join(f"{k}={v}" for k, v in result["config"].items())
    print(f"{args.loader} {args.arch} {args.dtype} batch {args.batch_size} on {result['gpu']}: "
          f"{result['images_per_sec']:.0f} images/s over {steps} steps ({wall:.2f} s); "
          f"waiting for data {100 * result['wait_fraction']:.1f}% of the wall time, "
          f"GPU idle between steps {100 * result['gpu_idle_fraction']:.1f}%; "
          f"compute {result['step_compute_ms_median']:.1f} ms/step (median), "
          f"fetch {result['fetch_ms_median']:.1f} ms median / {result['fetch_ms_max']:.1f} ms max; "
          f"loss {final_loss:.3f}" + (f"; {cfg}" if cfg else ""), flush=True)
    if args.json:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
