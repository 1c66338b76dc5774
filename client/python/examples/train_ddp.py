#!/usr/bin/env python3
"""Data-parallel training fed by Stoker, one process per rank under torchrun.

    stoker pack --input ~/imagenet/train --output /data/shards
    torchrun --nproc_per_node 8 train_ddp.py --dataset /data/shards

Each rank's loader takes its share of every epoch (rank and world size come
from torch.distributed) and, with ``--workers local`` (the default), starts
its own workers on this node: a GPU worker on its device, a CPU worker on
its share of the cores. ``--workers HOST:PORT,...`` uses a remote fleet
instead. On a machine without CUDA it trains on the CPU over gloo.

Every rank takes the same number of steps, so that DDP's all-reduce never
waits on a rank that ran out: where a rank's share is short, its batches
are padded with real samples it had before (``batch["padded"]``, the last
ones of a batch), which this loop leaves out of the loss.

With ``--keys-out DIR``, each rank writes the keys it trained on, the
padding of each batch and its batch count to ``DIR/rank-N.json`` (the tests
check the ranks' union).
"""

import argparse
import json
import os
from typing import List, Optional

import torch
import torch.distributed as dist
import torchvision
from torch.nn.parallel import DistributedDataParallel
from torchvision.transforms import v2

import stoker

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def parse(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True, help="shards: a folder or s3://bucket/prefix/")
    p.add_argument("--workers", default="local", help="'local' or HOST:PORT,... (default: local)")
    p.add_argument("--local-threads", type=int, default=None, help="CPU threads of this rank's local worker")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--last-batch", default="pad", choices=("pad", "partial", "drop"),
                   help="an epoch's last batch: full with padding (default: constant shapes), partial, or dropped")
    p.add_argument("--keys-out", default=None, help="write DIR/rank-N.json with the keys trained on")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> None:
    args = parse(argv)
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    # The workers run this pipeline; the loader delivers its float output.
    transform = v2.Compose(
        [
            v2.RandomResizedCrop(args.image_size),
            v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(MEAN, STD),
        ]
    )
    loader = stoker.Loader(
        workers=args.workers,
        dataset=args.dataset,
        batch_size=args.batch_size,
        transform=transform,
        device=str(device),
        local_threads=args.local_threads,
        seed=0,
        last_batch=args.last_batch,
    )
    model = torchvision.models.resnet18(num_classes=args.classes).to(device)
    model = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss(reduction="none")

    keys: List[List[str]] = []
    padding: List[List[List[str]]] = []
    batches = 0
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        seen: List[str] = []
        pads: List[List[str]] = []
        for batch in loader:
            real = len(batch["key"]) - int(batch["padded"])
            optimizer.zero_grad(set_to_none=True)
            per_sample = loss_fn(model(batch["image"]), batch["label"] % args.classes)
            # Padding out of the loss. A batch of padding alone still steps
            # (its gradients are zeros), so every rank joins the all-reduce.
            loss = per_sample[:real].sum() / max(real, 1)
            loss.backward()
            optimizer.step()
            seen.extend(batch["key"][:real])
            pads.append(list(batch["key"][real:]))
            batches += 1
        keys.append(seen)
        padding.append(pads)
        if rank == 0:
            print(f"epoch {epoch}: loss {loss.item():.3f}", flush=True)
    if args.keys_out:
        with open(os.path.join(args.keys_out, f"rank-{rank}.json"), "w") as f:
            json.dump({"rank": rank, "batches": batches, "keys": keys, "padding": padding}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
