"""Checks the `stoker` Python package against real workers (numpy path:
torch is not installed in the test environment).

usage: package_check.py WORKERS DATASET EXPECTED_TSV BATCH_SIZE
EXPECTED_TSV holds one `key<TAB>label` line per sample of the dataset.
Exits non-zero with the failed check; prints one summary line when all pass.
"""

import json
import sys
import threading

import numpy as np

import stoker


def main():
    workers, dataset, expected_path, batch_size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    expected = {}
    with open(expected_path) as f:
        for line in f:
            key, label = line.rstrip("\n").split("\t")
            expected[key] = int(label)
    n = len(expected)
    size = 32

    def loader(**kw):
        args = dict(workers=workers, dataset=dataset, batch_size=batch_size, image_size=size, seed=3)
        args.update(kw)
        return stoker.Loader(**args)

    # The whole epoch, exactly once, with the right labels; batch shapes.
    partial = loader(last_batch="partial", rank=0, world_size=1)
    assert len(partial) == -(-n // batch_size), (len(partial), n)
    pixels = {}
    for epoch in range(2):
        assert partial.epoch == epoch
        seen, batches = [], 0
        for batch in partial:
            image, label, keys = batch["image"], batch["label"], batch["key"]
            assert isinstance(image, np.ndarray) and image.dtype == np.uint8, type(image)
            assert image.shape == (len(keys), 3, size, size), image.shape
            assert label.dtype == np.int64 and label.shape == (len(keys),)
            assert batch["epoch"] == epoch
            for i, key in enumerate(keys):
                assert expected[key] == label[i], (key, label[i])
                if epoch == 0:
                    pixels[key] = image[i].copy()
            seen += keys
            batches += 1
        assert batches == len(partial), (batches, len(partial))
        assert len(seen) == len(set(seen)) == n and set(seen) == set(expected), f"epoch {epoch}: {len(seen)} keys"
        # The next epoch was started once this one's items were all in; the
        # loop's next iteration takes it (epoch 1 above, delivered once).
        assert partial._client.epoch_ahead() == epoch + 1, partial._client.epoch_ahead()
    # Same (seed, epoch, key), same pixels; another epoch, other crops:
    # going back to epoch 0 stops epoch 2, started ahead, and starts 0.
    partial.set_epoch(0)
    changed = 0
    again = {}
    for batch in partial:
        for i, key in enumerate(batch["key"]):
            again[key] = batch["image"][i]
    assert all(np.array_equal(again[k], pixels[k]) for k in expected), "epoch 0 replayed differently"
    assert partial.epoch == 1

    # Last-batch policies.
    drop = loader(last_batch="drop")
    sizes = [len(b["key"]) for b in drop]
    assert len(sizes) == len(drop) == n // batch_size and set(sizes) == {batch_size}, sizes
    pad = loader(last_batch="pad")
    padded = [(len(b["key"]), b["padded"], b["image"].shape[0]) for b in pad]
    assert all(k == batch_size and s == batch_size for k, _, s in padded), padded
    assert padded[-1][1] == (-n) % batch_size, padded[-1]
    assert sum(p for _, p, _ in padded) == (-n) % batch_size

    # Two ranks cover the epoch exactly once between them, in the same
    # number of batches (what keeps data-parallel training in step).
    shares, steps = [], []
    for rank in range(2):
        r = loader(last_batch="partial", rank=rank, world_size=2)
        batches = list(r)
        steps.append((len(batches), len(r)))
        shares.append([k for b in batches for k in b["key"][: len(b["key"]) - b["padded"]]])
    assert steps[0] == steps[1] and steps[0][0] == steps[0][1], steps
    assert not set(shares[0]) & set(shares[1]), "ranks overlap"
    assert sorted(shares[0] + shares[1]) == sorted(expected), "ranks miss samples"
    assert shares[0] and shares[1], "a rank got nothing"

    # Deterministic order, and resuming from state_dict(): a fresh loader
    # given the state of one stopped after 2 batches yields the rest of the
    # epoch, batch for batch.
    def det():
        return loader(last_batch="partial", deterministic=True)

    # A checkpoint thread may read the position while the loop waits for a
    # batch.
    watched, errors = det(), []

    def poll():
        try:
            for _ in range(200):
                watched.state_dict()
                watched.report()
        except Exception as e:  # noqa: BLE001 - any error fails the check
            errors.append(e)

    poller = threading.Thread(target=poll)
    poller.start()
    whole = [(b["index"], list(b["key"])) for b in watched]
    poller.join()
    assert not errors, errors
    stopped = det()
    it = iter(stopped)
    first = [next(it) for _ in range(2)]
    state = stopped.state_dict()
    assert state["epoch"] == 0 and state["position"]["batches"] == 2, state
    del it
    resumed = det()
    # A checkpoint goes through JSON, and one taken before the first batch
    # after loading keeps the loaded position.
    resumed.load_state_dict(json.loads(json.dumps(state)))
    assert resumed.state_dict() == json.loads(json.dumps(state)), "loaded position lost before iterating"
    rest = [(b["index"], list(b["key"])) for b in resumed]
    assert [(b["index"], list(b["key"])) for b in first] + rest == whole, "resumed epoch differs"
    assert resumed.state_dict() == {"epoch": 1, "position": None}
    try:
        other = loader(last_batch="partial", deterministic=True, seed=4)
        other.load_state_dict(state)
        next(iter(other))
    except stoker.StokerError as e:
        assert "seed" in str(e), str(e)
    else:
        raise AssertionError("a state saved with another seed was accepted")
    # A sample's identity is its position in the shard: partly delivered
    # items list position ranges, and a state from before (no version,
    # keys) cannot resume mid-item, and says why.
    assert state["position"]["version"] == 2, state
    for item, ranges in state["position"]["partial"]:
        assert all(len(r) == 2 and r[0] < r[1] for r in ranges), state
    old = json.loads(json.dumps(state))
    del old["position"]["version"]
    old["position"]["partial"] = [[0, ["class_000/img_000000"]]]
    try:
        stale = det()
        stale.load_state_dict(old)
        next(iter(stale))
    except stoker.StokerError as e:
        assert "identified by their position" in str(e), str(e)
    else:
        raise AssertionError("a state naming samples by key was accepted")

    # Normalisation: float32, scaled to [0, 1] then (x - mean) / std.
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    norm = loader(last_batch="partial", mean=mean, std=std)
    batch = next(iter(norm))
    img = batch["image"]
    assert img.dtype == np.float32 and np.isfinite(img).all()
    lo = (0 - np.array(mean)) / np.array(std)
    hi = (1 - np.array(mean)) / np.array(std)
    assert (img.min(axis=(0, 2, 3)) >= lo - 1e-5).all() and (img.max(axis=(0, 2, 3)) <= hi + 1e-5).all()

    # Errors name their cause.
    for kwargs, needle in [
        (dict(dataset=dataset + "/missing-folder"), "missing-folder"),
        (dict(transform="sepia"), "sepia"),
        (dict(workers="127.0.0.1:1"), "127.0.0.1:1"),
    ]:
        try:
            loader(**kwargs)
        # A bad transform is the caller's mistake: ValueError, before any
        # connection; the others are the service's answers.
        except (stoker.StokerError, ValueError) as e:
            assert needle in str(e), (needle, str(e))
        else:
            raise AssertionError(f"no error for {kwargs}")
    try:
        loader(last_batch="wrap")
    except ValueError as e:
        assert "last_batch" in str(e)
    else:
        raise AssertionError("last_batch='wrap' accepted")

    report = partial.report()
    assert report["samples"] == n and report["skipped"] == 0, report
    print(
        f"python package: {n} samples x 2 epochs exactly once, replay identical, "
        f"drop {len(sizes)} / pad {len(padded)} / partial {len(partial)} batches, "
        f"ranks {len(shares[0])}+{len(shares[1])} in {steps[0][0]} batches each, "
        f"resume after 2 of {len(whole)} batches identical, normalised range ok, errors name their cause"
    )


if __name__ == "__main__":
    main()
