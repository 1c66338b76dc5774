#!/usr/bin/env python3
"""Lightning training fed by Stoker: a LightningDataModule whose loader
position is saved in Lightning's checkpoints and restored from them, so a
run stopped mid-epoch resumes with the batches it had not trained on.

    stoker pack --input ~/imagenet/train --output /data/shards
    python train_lightning.py --dataset /data/shards --devices 8 --ckpt-dir ckpts
    python train_lightning.py --dataset /data/shards --devices 8 --ckpt-dir ckpts --resume ckpts/last.ckpt

(Not named lightning.py: run as a script, that name would shadow the
``lightning`` package.) ``--workers local`` (the default) starts each
rank's workers on its node; on a machine without CUDA it trains on the CPU
with gloo.

The loader goes to Lightning inside ``StokerBatches``, a
``DataLoader(loader, batch_size=None)`` with ``state_dict`` and
``load_state_dict``: the protocol Lightning checks to call a dataloader
resumable (it warns on a mid-epoch resume otherwise) and through which it
saves and restores the position with the loops' state. Each rank streams
its own share of the epoch, so the state it saves gathers every rank's
position (Lightning writes rank 0's) and each rank restores its own.
Lightning fetches one batch ahead of the one it trains on, so the module
notes the index of each batch it trained, and the position saved is the
loader's after that batch (``state_dict(through_index=...)``), not after
the one fetched ahead.

With ``--keys-out DIR``, each rank appends the keys it trained on to
``DIR/rank-N.jsonl`` (the tests check a stopped and resumed run with it).
"""

import argparse
import json
import os
from typing import Any, Dict, List, Optional

import lightning as L
import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision.transforms import v2

import stoker

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


class StokerData(L.LightningDataModule):
    """The training set, streamed by Stoker's workers."""

    def __init__(self, workers: str, dataset: str, batch_size: int, image_size: int, local_threads: Optional[int]):
        super().__init__()
        self.workers, self.dataset = workers, dataset
        self.batch_size, self.image_size, self.local_threads = batch_size, image_size, local_threads
        self.loader: Optional[stoker.Loader] = None
        # The index of the last batch trained on, this epoch (the module sets it).
        self.trained: Optional[int] = None
        self._restored: Optional[Dict[str, Any]] = None

    def setup(self, stage: str) -> None:
        if self.loader is not None:
            return
        transform = v2.Compose(
            [
                v2.RandomResizedCrop(self.image_size),
                v2.RandomHorizontalFlip(),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize(MEAN, STD),
            ]
        )
        device = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
        # Rank and world size come from torch.distributed, set up by now.
        self.loader = stoker.Loader(
            workers=self.workers,
            dataset=self.dataset,
            batch_size=self.batch_size,
            transform=transform,
            device=device,
            local_threads=self.local_threads,
            # Full batches on every rank; the padding is left out of the loss.
            last_batch="pad",
        )
        if self._restored is not None:
            self.loader.load_state_dict(self._restored)

    def train_dataloader(self) -> "StokerBatches":
        assert self.loader is not None
        return StokerBatches(self)

    def positions(self) -> Dict[str, Any]:
        # Every rank has its own share, hence its own position; the
        # checkpoint is written by rank 0, so it gathers them all
        # (Lightning saves the loops' state on every rank).
        assert self.loader is not None
        if self.trained is None:
            mine = self.loader.state_dict()
        else:
            mine = self.loader.state_dict(through_index=self.trained)
        positions: List[Any] = [mine]
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            positions = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(positions, mine)
        return {"loaders": positions}

    def restore(self, state_dict: Dict[str, Any]) -> None:
        positions = state_dict["loaders"]
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        if len(positions) <= rank:
            raise stoker.ConfigError(f"the checkpoint holds {len(positions)} ranks' positions; this is rank {rank}")
        self._restored = positions[rank]
        if self.loader is not None:
            self.loader.load_state_dict(self._restored)


class StokerBatches(DataLoader[Dict[str, Any]]):
    """The loader's batches as Lightning takes them, resumable: Lightning
    saves ``state_dict()`` with its loops and hands it back to
    ``load_state_dict`` on resume, before iterating."""

    def __init__(self, data: StokerData):
        assert data.loader is not None
        super().__init__(data.loader, batch_size=None)
        self.data = data

    def state_dict(self) -> Dict[str, Any]:
        return self.data.positions()

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.data.restore(state_dict)


class Classifier(L.LightningModule):
    def __init__(self, data: StokerData, classes: int, lr: float, keys_out: Optional[str]):
        super().__init__()
        self.data = data
        self.model = torchvision.models.resnet18(num_classes=classes)
        self.classes, self.lr, self.keys_out = classes, lr, keys_out

    def training_step(self, batch: Dict[str, Any], batch_idx: int) -> torch.Tensor:
        # The last batch["padded"] samples are padding (a rank whose share is
        # short repeats samples it had): out of the loss.
        real = len(batch["key"]) - int(batch["padded"])
        per_sample = torch.nn.functional.cross_entropy(
            self.model(batch["image"]), batch["label"] % self.classes, reduction="none"
        )
        loss = per_sample[:real].sum() / max(real, 1)
        self.log("loss", loss, prog_bar=True)
        # Noted here, not in on_train_batch_end: checkpoint callbacks run
        # before the module's hook, and the checkpoint after this step must
        # count this batch as trained.
        self.data.trained = int(batch["index"])
        if self.keys_out:
            path = os.path.join(self.keys_out, f"rank-{self.global_rank}.jsonl")
            with open(path, "a") as f:
                f.write(json.dumps({"epoch": self.current_epoch, "keys": list(batch["key"][:real]),
                                    "padding": list(batch["key"][real:])}) + "\n")
        return loss

    def on_train_epoch_start(self) -> None:
        self.data.trained = None

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True)
    p.add_argument("--workers", default="local")
    p.add_argument("--local-threads", type=int, default=None)
    p.add_argument("--devices", type=int, default=1, help="processes (GPUs, or CPU ranks without CUDA)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=-1, help="stop after this many steps (a checkpoint is saved)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--ckpt-dir", default="checkpoints")
    p.add_argument("--ckpt-every", type=int, default=1000, help="save a checkpoint every this many steps")
    p.add_argument("--resume", default=None, help="a checkpoint to resume from, mid-epoch or not")
    p.add_argument("--keys-out", default=None)
    args = p.parse_args(argv)

    data = StokerData(args.workers, args.dataset, args.batch_size, args.image_size, args.local_threads)
    model = Classifier(data, args.classes, args.lr, args.keys_out)
    checkpoint = L.pytorch.callbacks.ModelCheckpoint(dirpath=args.ckpt_dir, save_last=True, every_n_train_steps=args.ckpt_every)
    trainer = L.Trainer(
        accelerator="gpu" if torch.cuda.is_available() else "cpu",
        devices=args.devices,
        strategy="ddp" if args.devices > 1 else "auto",
        max_epochs=args.epochs,
        max_steps=args.max_steps,
        callbacks=[checkpoint],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=data, ckpt_path=args.resume)


if __name__ == "__main__":
    main()
