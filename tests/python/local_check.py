"""Checks `stoker.Loader(workers="local")` and the package's one-error,
never-silent contract with no worker started by hand:

- local workers started by the loader serve a relative dataset path (the
  caller's) exactly once per epoch, and stop with the loader;
- an epoch whose every sample is skipped raises StokerError naming the
  reason, and the skips reach the `stoker` logger at WARNING;
- settings that cannot work raise ConfigError (a StokerError and a
  ValueError): an address without a port, an unknown last_batch, a local
  GPU worker on a machine without a GPU;
- "txt?", "txt?:bytes" and Field("txt", optional=True) are one spelling;
- a peer that is not a Stoker worker is named as such.

usage: local_check.py SHARDS_DIR EXPECTED_TSV HTTP_ADDR
"""

import logging
import os
import sys
import time

import stoker


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def raises(fn, cls, *needles):
    try:
        fn()
    except cls as e:
        text = str(e)
        for n in needles:
            assert n in text, f"{n!r} not in {text!r}"
        return e
    raise AssertionError(f"no {cls.__name__} raised")


def main():
    shards, tsv, http_addr = sys.argv[1], sys.argv[2], sys.argv[3]
    expected = {}
    for line in open(tsv):
        key, label = line.rstrip("\n").split("\t")
        expected[key] = int(label)
    # A relative path is the caller's: run from the dataset's parent.
    os.chdir(os.path.dirname(shards))
    relative = os.path.basename(shards)

    records = Records()
    logging.getLogger("stoker").addHandler(records)

    loader = stoker.Loader(workers="local", dataset=relative, batch_size=8, image_size=32, local_threads=1, seed=3)
    workers = loader.local_workers
    assert len(workers) == 1 and workers[0]["role"] == "cpu", workers
    assert workers[0]["address"].startswith("unix:") and workers[0]["pid"], workers
    pid = workers[0]["pid"]
    for epoch in range(2):
        seen = {}
        for batch in loader:
            for key, label in zip(batch["key"], batch["label"].tolist()):
                assert key not in seen, f"epoch {epoch}: {key} twice"
                seen[key] = label
        assert seen == expected, f"epoch {epoch}: {len(seen)} samples, expected {len(expected)}"
    del loader
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] != "Z":
        assert time.monotonic() < deadline, f"local worker {pid} outlived its loader"
        time.sleep(0.02)
    print(f"local workers: {len(expected)} samples x 2 epochs exactly once from a relative path; stopped with the loader")

    # A consumer that fetched a batch ahead of the one it trained on saves
    # the position after the trained one; the resumed epoch has the rest.
    common = dict(workers="local", dataset=relative, batch_size=8, image_size=32, local_threads=1, seed=3)
    loader = stoker.Loader(**common)
    batches = iter(loader)
    trained = next(batches)
    next(batches)  # fetched ahead, never trained on
    state = loader.state_dict(through_index=trained["index"])
    batches.close()
    del loader
    resumed = stoker.Loader(**common)
    resumed.load_state_dict(state)
    keys = list(trained["key"]) + [k for b in resumed for k in b["key"]]
    assert sorted(keys) == sorted(expected), f"{len(keys)} keys after the resume, expected {len(expected)}"
    del resumed
    print("state_dict(through_index=...): a resume after a batch fetched ahead has the rest exactly once")

    # Every sample skipped: an error naming the reason, and the skips logged.
    records.records.clear()
    skipping = stoker.Loader(
        workers="local", dataset=relative, batch_size=8, image_size=32, local_threads=1, fields={"x": "npy"}
    )
    e = raises(lambda: list(skipping), stoker.StokerError, "no sample delivered", "missing")
    warnings = [r for r in records.records if r.levelno == logging.WARNING and r.name == "stoker"]
    assert any("samples skipped" in r.getMessage() and "missing" in r.getMessage() for r in warnings), [
        r.getMessage() for r in records.records
    ]
    # Said once, by the client: not again by the local worker that skipped.
    twice = [r.getMessage() for r in warnings if "local worker" in r.getMessage() and "skipped" in r.getMessage()]
    assert not twice, twice
    del skipping
    print(f"never silent: {e}; {len(warnings)} warnings in the stoker logger")

    # Configuration errors: one type, a StokerError and a ValueError.
    e = raises(
        lambda: stoker.Loader(workers="127.0.0.1", dataset=shards, batch_size=8), stoker.ConfigError, "HOST:PORT"
    )
    assert isinstance(e, ValueError) and isinstance(e, stoker.StokerError)
    raises(lambda: stoker.Loader(workers="local", dataset=relative, batch_size=8, last_batch="most"), stoker.ConfigError)
    raises(
        lambda: stoker.Loader(workers="local", dataset=relative, batch_size=8, fields={"c": "txt:str8"}),
        stoker.ConfigError,
        "str8",
    )
    raises(
        lambda: stoker.Loader(workers=["10.9.9.9:1"], dataset=relative, batch_size=8),
        stoker.ConfigError,
        "relative path",
    )
    if not os.path.exists("/dev/nvidiactl"):
        # No GPU here: a GPU worker asked for in this process says why it
        # cannot start (CUDA is loaded at run time), never a panic.
        raises(
            lambda: stoker.Loader(workers="local", dataset=relative, batch_size=8, local_threads=1, local_gpu=0),
            stoker.ConfigError,
            "local gpu worker in this process on cuda:0",
            "no usable gpu",
        )
    print("config errors: ConfigError (StokerError, ValueError) naming the setting")

    # One spelling for an optional field, in Python as in the CLI.
    for spec in ("txt?", "txt?:bytes", "txt:bytes?", stoker.Field("txt", optional=True)):
        loader = stoker.Loader(
            workers="local", dataset=relative, batch_size=8, image_size=32, local_threads=1, fields={"c": spec}
        )
        n = 0
        for batch in loader:
            assert batch["c"] == [None] * len(batch["key"]), batch["c"]
            n += len(batch["key"])
        assert n == len(expected), (spec, n)
        del loader
    print("optional fields: txt?, txt?:bytes, txt:bytes? and Field(optional=True) deliver every sample")

    e = raises(
        lambda: stoker.Loader(workers=http_addr, dataset=shards, batch_size=8, connect_timeout=5),
        stoker.StokerError,
        "not a Stoker worker",
        http_addr,
    )
    print(f"not a worker: {e}")


if __name__ == "__main__":
    main()
