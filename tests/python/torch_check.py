"""Checks the `stoker` package's torch path on a CUDA machine: batches land on
the device as normalised bfloat16 NCHW tensors, agree with the host path,
and cover the epoch exactly once. Run by scripts/gpu-check.sh.

usage: torch_check.py WORKERS DATASET BATCH_SIZE
"""

import sys
import time

import torch

import stoker


def main():
    workers, dataset, batch_size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    common = dict(workers=workers, dataset=dataset, batch_size=batch_size, image_size=224, seed=5, last_batch="partial")
    host = stoker.Loader(device="cpu", **common)
    dev = stoker.Loader(device="cuda:0", dtype=torch.bfloat16, mean=mean, std=std, **common)
    assert dev._client.uploads(), f"the client's own upload is not in use: {dev._client.upload_error()}"
    ref = {}
    for b in host:
        assert b["image"].dtype == torch.uint8 and b["image"].device.type == "cpu"
        for i, k in enumerate(b["key"]):
            ref[k] = b["image"][i]
    m = torch.tensor(mean).view(3, 1, 1)
    s = torch.tensor(std).view(3, 1, 1)
    seen, worst, t0 = [], 0.0, time.perf_counter()
    for b in dev:
        img, label = b["image"], b["label"]
        assert img.is_cuda and img.dtype == torch.bfloat16 and img.shape[1:] == (3, 224, 224), (img.device, img.dtype, img.shape)
        assert label.is_cuda and label.dtype == torch.int64
        for i, k in enumerate(b["key"]):
            want = (ref[k].float() / 255.0 - m) / s
            worst = max(worst, (img[i].float().cpu() - want).abs().max().item())
        seen += b["key"]
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    assert len(seen) == len(set(seen)) == len(ref), (len(seen), len(set(seen)), len(ref))
    assert worst < 0.05, worst

    # channels_last: the kernel writes NHWC; torch sees [B,3,H,W] with
    # channels-last strides, the same values.
    cl = stoker.Loader(device="cuda:0", dtype=torch.bfloat16, mean=mean, std=std, channels_last=True, **common)
    b = next(iter(cl))
    img = b["image"]
    assert img.shape[1:] == (3, 224, 224) and img.is_contiguous(memory_format=torch.channels_last), img.stride()
    for i, k in enumerate(b["key"]):
        want = (ref[k].float() / 255.0 - m) / s
        worst = max(worst, (img[i].float().cpu() - want).abs().max().item())
    assert worst < 0.05, worst
    print(f"torch package check: {len(seen)} samples once on {torch.cuda.get_device_name()} as bfloat16 NCHW and channels_last, "
          f"max |device - host normalised| {worst:.4f} (bfloat16 rounding), {len(seen) / dt:.0f} images/s incl. the check")


if __name__ == "__main__":
    main()
