"""Checks `Loader(workers="local")` on a CUDA machine: the loader starts a
GPU worker on the training device beside a CPU worker, an epoch arrives on
the device exactly once, and both workers served. Run by
scripts/gpu-check.sh.

usage: local_gpu_check.py DATASET EXPECTED_COUNT
"""

import sys
import time

import torch

import stoker


def main():
    dataset, expected = sys.argv[1], int(sys.argv[2])
    loader = stoker.Loader(workers="local", dataset=dataset, batch_size=256, image_size=224, device="cuda:0",
                           dtype=torch.bfloat16, mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    roles = sorted(w["role"] for w in loader.local_workers)
    assert roles == ["cpu", "gpu"], loader.local_workers
    for epoch in range(2):
        seen = set()
        t0 = time.perf_counter()
        for b in loader:
            assert b["image"].device.type == "cuda" and b["image"].dtype == torch.bfloat16
            for k in b["key"]:
                assert k not in seen, f"{k} twice"
                seen.add(k)
        torch.cuda.synchronize()
        rate = len(seen) / (time.perf_counter() - t0)
        assert len(seen) == expected, (len(seen), expected)
        report = loader.report()
        print(f"local-gpu epoch {epoch}: {len(seen)} samples exactly once on cuda, {rate:.0f} img/s; "
              f"per worker {report['workers']}", flush=True)
    assert all(n > 0 for n in report["workers"].values()), report["workers"]
    print("local-gpu: ok (a GPU and a CPU local worker, both served)")


if __name__ == "__main__":
    main()
