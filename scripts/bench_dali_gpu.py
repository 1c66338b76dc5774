"""DALI's GPU pipeline on one transform workload, for
scripts/bench-transforms-gpu.sh: the ops of a Stoker spec as DALI's own
operators (the mapping of bench_transforms.dali_pipeline: fn.flip,
fn.rotate nearest, fn.random_resized_crop antialiased, DALI's
trivial_augment_wide, crop_mirror_normalize, fn.erase), with the
`mixed` decoder (nvJPEG) and every op on the GPU. The output stays in
device memory (Stoker's bench writes host memory). Prints one JSON line:
images, seconds, images_per_sec.

    python3 scripts/bench_dali_gpu.py --input DIR --spec JSON [--images 20000]
        [--threads 12] [--batch 256]
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_transforms  # noqa: E402  (the op mapping lives there)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", required=True, help="ImageFolder-like folder of JPEGs")
    p.add_argument("--spec", required=True, help="a Stoker transform spec (JSON)")
    p.add_argument("--images", type=int, default=20000, help="images to time (default 20000)")
    p.add_argument("--threads", type=int, default=12, help="DALI num_threads (default 12)")
    p.add_argument("--batch", type=int, default=256, help="batch size (default 256)")
    a = p.parse_args()
    a.gpu = True
    a.dali_fused_crop = False
    a.dali_no_erase = False
    ops = json.loads(a.spec)["ops"]
    pipe = bench_transforms.dali_pipeline(a, ops)
    pipe.build()
    out = None
    for _ in range(5):
        out = pipe.run()
    out[0].as_cpu()
    batches = max(1, a.images // a.batch)
    t0 = time.perf_counter()
    for _ in range(batches):
        out = pipe.run()
    # The last batch's pixels are ready once its copy to the host is: the
    # clock stops after the GPU finished.
    out[0].as_cpu()
    dt = time.perf_counter() - t0
    n = batches * a.batch
    print(json.dumps({"images": n, "seconds": dt, "images_per_sec": n / dt}))


if __name__ == "__main__":
    main()
