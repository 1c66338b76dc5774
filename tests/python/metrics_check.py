"""Checks the Python loader's metrics endpoint (metrics_port=) against its
report() and the batches it yielded.

usage: metrics_check.py WORKERS DATASET SAMPLES
Prints one summary line when every check passes; fails naming the check.
"""

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


def main():
    workers, dataset, samples = sys.argv[1], sys.argv[2], int(sys.argv[3])
    port = free_port()
    loader = stoker.Loader(workers, dataset, batch_size=8, image_size=32, last_batch="partial", metrics_port=port)
    batches = 0
    delivered = 0
    for batch in loader:
        batches += 1
        delivered += len(batch["label"])
    report = loader.report()
    m = scrape(port)
    assert delivered == samples, f"yielded {delivered} samples, expected {samples}"
    assert m[("stoker_client_samples_total", ())] == samples, m
    assert m[("stoker_client_batches_total", ())] == batches == report["batches"], (m, report)
    assert report["samples"] == samples, report
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
    print(
        f"python metrics ok: {samples} samples in {batches} batches, waited {wait:.3f}s, "
        f"recommended workers {recommended:.0f}"
    )


if __name__ == "__main__":
    main()
