"""The PyTorch baselines of scripts/gpu-check.sh, on the GPU machine.

  decode IMAGE_DIR BATCH SECONDS
      torchvision.io.decode_jpeg(list, device="cuda") in batches of BATCH,
      decode only, over every JPEG under IMAGE_DIR, for about SECONDS
      (after one warm-up pass); the GPU is synchronised after each batch.
  dataloader IMAGE_DIR SIZE WORKERS PASSES
      torch.utils.data.DataLoader with WORKERS processes, batch 64: PIL
      decode + RandomResizedCrop(SIZE) + RandomHorizontalFlip + PILToTensor
      (uint8 CHW, what Stoker's workers produce in HWC), PASSES passes
      after a warm-up pass that starts the worker processes.

Each prints one JSON object: what, images, seconds, images_per_sec.
"""

import json
import os
import sys
import time

import torch


def jpegs(root):
    out = []
    for dirpath, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            if name.lower().endswith((".jpg", ".jpeg")):
                out.append(os.path.join(dirpath, name))
    return out


def decode(root, batch, seconds):
    import torchvision
    from torchvision.io import decode_jpeg

    datas = [torchvision.io.read_file(p) for p in jpegs(root)]
    chunks = [datas[i : i + batch] for i in range(0, len(datas), batch)]
    for c in chunks:
        decode_jpeg(c, device="cuda")
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for c in chunks:
            decode_jpeg(c, device="cuda")
            torch.cuda.synchronize()
        n += len(datas)
    dt = time.perf_counter() - t0
    return {"what": f"torchvision decode_jpeg cuda batch={batch}", "images": n, "seconds": dt, "images_per_sec": n / dt}


class Files(torch.utils.data.Dataset):
    def __init__(self, paths, size):
        from torchvision import transforms

        self.paths = paths
        self.transform = transforms.Compose(
            [
                transforms.RandomResizedCrop(size),
                transforms.RandomHorizontalFlip(),
                transforms.PILToTensor(),
            ]
        )

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image

        with Image.open(self.paths[i]) as img:
            return self.transform(img.convert("RGB"))


def dataloader(root, size, workers, passes):
    loader = torch.utils.data.DataLoader(
        Files(jpegs(root), size), batch_size=64, shuffle=True, num_workers=workers, persistent_workers=True
    )
    for _ in loader:
        pass
    n, t0 = 0, time.perf_counter()
    for _ in range(passes):
        for batch in loader:
            n += batch.shape[0]
    dt = time.perf_counter() - t0
    return {"what": f"torch DataLoader workers={workers}", "images": n, "seconds": dt, "images_per_sec": n / dt}


def main():
    mode = sys.argv[1]
    if mode == "decode":
        r = decode(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    elif mode == "dataloader":
        r = dataloader(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(f"unknown mode {mode!r}")
    print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
