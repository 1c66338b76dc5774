"""Checks stoker.doctor(loader, train_step=...) against real workers.

usage: doctor_check.py WORKERS DATASET SAMPLES
A slow training step (50 ms a batch) is fed by the pipeline with time to
spare: no waiting, and the workers measured suffice. A step that does
nothing waits on the pipeline most of the time, and needs more workers.
The loader's position is kept: its next epoch delivers every sample once.
Prints one summary line when every check passes.
"""

import sys
import time

import stoker


def main():
    workers, dataset, samples = sys.argv[1], sys.argv[2], int(sys.argv[3])
    loader = stoker.Loader(workers, dataset, batch_size=8, image_size=32, last_batch="partial")
    n_workers = len(workers.split(","))

    slow = stoker.doctor(loader, train_step=lambda batch: time.sleep(0.05), samples=64, seconds=0.3, steps=4)
    stages = {s["stage"] for s in slow["stages"]}
    assert stages == {"storage", "decode + transform", "transport", "client"}, stages
    assert slow["bottleneck"] in stages, slow
    assert 100 < slow["train_step"]["images_per_sec"] < 200, slow["train_step"]
    assert slow["waiting_fraction"] == 0.0, slow
    assert slow["workers_for_target"] <= n_workers, slow

    fast = stoker.doctor(loader, train_step=lambda batch: None, samples=64, seconds=0.3, steps=50)
    assert fast["waiting_fraction"] > 0.5, fast
    assert fast["workers_for_target"] > n_workers, fast

    keys = [k for batch in loader for k in batch["key"]]
    assert len(keys) == samples and len(set(keys)) == samples, (len(keys), len(set(keys)))
    print(
        f"python doctor ok: slow step {slow['train_step']['images_per_sec']:.0f} images/s, no waiting; "
        f"no-op step waits {fast['waiting_fraction']:.0%}, needs {fast['workers_for_target']} workers; "
        f"then {samples} samples once"
    )


if __name__ == "__main__":
    main()
