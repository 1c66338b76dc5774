"""Checks `stoker.InProcessWorker`: a worker inside this Python process,
against a worker process of the same build.

usage: inprocess_check.py WORKER_PROCESS DATASET EXPECTED_TSV
Exits non-zero with the failed check; prints one summary line when all pass.
"""

import sys

import numpy as np

import stoker


def epoch_pixels(workers, dataset, epoch):
    loader = stoker.Loader(workers=workers, dataset=dataset, batch_size=8, image_size=32, seed=9,
                           last_batch="partial", start_epoch=epoch)
    out = {}
    for batch in loader:
        for i, key in enumerate(batch["key"]):
            assert key not in out, f"{key} arrived twice"
            out[key] = (int(batch["label"][i]), batch["image"][i].copy())
    return out


def main():
    process_worker, dataset, expected_path = sys.argv[1], sys.argv[2], sys.argv[3]
    expected = {}
    with open(expected_path) as f:
        for line in f:
            key, label = line.rstrip("\n").split("\t")
            expected[key] = int(label)

    worker = stoker.InProcessWorker(["--device", "cpu", "--threads", "1", "--listen", "127.0.0.1:0"])
    host, port = worker.address.rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0, worker.address
    for epoch in (0, 1):
        inside = epoch_pixels([worker.address], dataset, epoch)
        assert {k: v[0] for k, v in inside.items()} == expected, f"epoch {epoch}: keys or labels differ"
        outside = epoch_pixels([process_worker], dataset, epoch)
        for key, (_, pixels) in inside.items():
            # The extension's worker decodes with zune-jpeg (no libjpeg-turbo
            # in a shared object): the same crops, IDCTs a grey level apart.
            diff = np.abs(pixels.astype(np.int16) - outside[key][1].astype(np.int16)).mean()
            assert diff <= 2.0, f"epoch {epoch}: {key} differs from the worker process's by {diff:.2f} on average"
    worker.stop()
    worker.stop()  # a second stop does nothing
    try:
        stoker.Loader(workers=[worker.address], dataset=dataset, batch_size=8, image_size=32, progress_timeout=5)
    except stoker.StokerError as e:
        assert worker.address in str(e), e
    else:
        raise AssertionError("a stopped in-process worker still answered")

    try:
        stoker.InProcessWorker(["--no-such-flag"])
    except stoker.StokerError as e:
        assert "--no-such-flag" in str(e), e
    else:
        raise AssertionError("an unknown worker argument was accepted")
    print(f"in-process worker: {len(expected)} samples x 2 epochs exactly once, pixels within 2 grey levels of a worker process's")


if __name__ == "__main__":
    main()
