"""Checks the Python loader's metrics endpoint (metrics_port=) against its
report() and the batches it yielded.

usage: metrics_check.py WORKERS DATASET SAMPLES
Prints one summary line when every check passes; fails naming the check.
"""

import os
import socket
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

import stoker


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200, r.status
        text = r.read().decode()
    values = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            values[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return values


def epoch(workers, dataset, samples, port):
    """One epoch of a loader serving metrics on `port`: (loader, metrics
    scraped after it, batches, its report)."""
    loader = stoker.Loader(workers, dataset, batch_size=8, image_size=32, last_batch="partial", metrics_port=port)
    batches = 0
    delivered = 0
    for batch in loader:
        batches += 1
        delivered += len(batch["label"])
    assert delivered == samples, f"yielded {delivered} samples, expected {samples}"
    report = loader.report()
    assert report["samples"] == samples, report
    return loader, scrape(port), batches, report


def main():
    workers, dataset, samples = sys.argv[1], sys.argv[2], int(sys.argv[3])
    # Each epoch started only when asked: the lifetime counters are this
    # epoch's, exactly.
    os.environ["STOKER_EPOCH_AHEAD"] = "0"
    port = free_port()
    loader, m, batches, report = epoch(workers, dataset, samples, port)
    assert m[("stoker_client_samples_total", ())] == samples, m
    assert m[("stoker_client_batches_total", ())] == batches == report["batches"], (m, report)
    wait = m[("stoker_client_wait_seconds_total", ())]
    assert abs(wait - report["wait_seconds"]) < 1e-6, (wait, report)
    per_worker = {dict(k[1])["worker"]: v for k, v in m.items() if k[0] == "stoker_client_worker_samples_total"}
    assert per_worker == {k: float(v) for k, v in report["workers"].items()}, (per_worker, report)
    recommended = m.get(("stoker_client_recommended_workers", ()))
    assert recommended is not None and recommended >= 1, m
    assert recommended == report["recommended_workers"], (recommended, report)
    # A second loader on the same port cannot start, and says why.
    try:
        stoker.Loader(workers, dataset, batch_size=8, image_size=32, metrics_port=port)
    except Exception as e:  # StokerError or ValueError, whichever the binding raises
        assert "cannot listen for metrics on 127.0.0.1:" in str(e), str(e)
    else:
        raise AssertionError("a second loader on a port in use started")
    del loader
    # With the next epoch started ahead (the default), what was received
    # counts it too (samples received from workers), while the batches are
    # those handed to the consumer.
    del os.environ["STOKER_EPOCH_AHEAD"]
    ahead, m, ahead_batches, ahead_report = epoch(workers, dataset, samples, free_port())
    assert ahead._client.epoch_ahead() == 1, ahead._client.epoch_ahead()
    assert m[("stoker_client_batches_total", ())] == ahead_batches == ahead_report["batches"], (m, ahead_report)
    assert m[("stoker_client_samples_total", ())] >= samples, m
    print(
        f"python metrics ok: {samples} samples in {batches} batches, waited {wait:.3f}s, "
        f"recommended workers {recommended:.0f}; with the next epoch started ahead, "
        f"{m[('stoker_client_samples_total', ())]:.0f} samples received"
    )


if __name__ == "__main__":
    main()
