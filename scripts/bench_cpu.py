"""Orchestrates scripts/bench-cpu.sh: runs Stoker and the PIL baseline in
alternation, then `stoker stream` end to end, and prints medians.

Each round runs `stoker bench --threads 1` (the worker's decode + transform
code on one thread, no network) and scripts/bench_pil.py (one Python
process) over the same JPEGs held in memory, two passes each. Alternating
the two within one run keeps machine noise from favouring either side.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STOKER = os.path.join(ROOT, "target", "release", "stoker")
PHOTOS = os.path.join(ROOT, "..", "shared", "photos")


def run_json(cmd, **kw):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    rounds = int(sys.argv[1])
    work = tempfile.mkdtemp(prefix="stoker-bench-")
    try:
        images = os.path.join(work, "images")
        synth = [STOKER, "synth", "--output", images, "--images", "500", "--classes", "10", "--quality", "95"]
        have_photos = os.path.isdir(PHOTOS) and any(f.endswith(".jpg") for f in os.listdir(PHOTOS))
        if have_photos:
            synth += ["--photos", PHOTOS]
        subprocess.run(synth, check=True, capture_output=True)
        sizes = [os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(images) for f in fs]
        source = "cut from ../shared/photos" if have_photos else "procedural (no ../shared/photos)"
        print(f"images: {len(sizes)} JPEGs, 500x375, {source}, "
              f"median {statistics.median(sizes) / 1000:.0f} KB", flush=True)

        stoker_rates, zune_rates, pil_rates = [], [], []
        bench = [STOKER, "bench", "--input", images, "--threads", "1", "--passes", "2"]
        zune_env = dict(os.environ, STOKER_JPEG_DECODER="zune")
        for r in range(rounds):
            s = run_json(bench)
            z = run_json(bench, env=zune_env)
            p = run_json([sys.executable, os.path.join(ROOT, "scripts", "bench_pil.py"), images, "224", "2"])
            stoker_rates.append(s["images_per_sec"])
            zune_rates.append(z["images_per_sec"])
            pil_rates.append(p["images_per_sec"])
            print(f"round {r + 1}: stoker {s['images_per_sec']:.0f}/s, stoker/zune-jpeg {z['images_per_sec']:.0f}/s, "
                  f"PIL {p['images_per_sec']:.0f}/s, ratio {s['images_per_sec'] / p['images_per_sec']:.2f}",
                  flush=True)

        # End to end: pack, one worker process per two cores, stream.
        shards = os.path.join(work, "shards")
        subprocess.run([STOKER, "pack", "--input", images, "--output", shards, "--shard-size", "4M"],
                       check=True, capture_output=True)
        cores = os.cpu_count() or 1
        threads = max(1, cores)
        worker = subprocess.Popen([STOKER, "worker", "--listen", "127.0.0.1:0", "--threads", str(threads)],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            addr = worker.stdout.readline().strip().rsplit(" ", 1)[-1]
            stream_rates, stream_bytes = [], []
            for _ in range(max(3, rounds // 2)):
                j = run_json([STOKER, "stream", "--workers", addr, "--dataset", shards, "--batch-size", "64",
                              "--image-size", "224", "--epochs", "2", "--json"])
                stream_rates.append(j["images_per_sec"])
                stream_bytes.append(j["bytes_per_sec"])
        finally:
            worker.terminate()
            worker.wait()

        s_med, p_med = statistics.median(stoker_rates), statistics.median(pil_rates)
        z_med = statistics.median(zune_rates)
        ratios = [a / b for a, b in zip(stoker_rates, pil_rates)]
        zune_ratios = [a / b for a, b in zip(zune_rates, pil_rates)]
        print()
        print(f"| measurement (median of {rounds} rounds) | images/s |")
        print("| --- | --- |")
        print(f"| stoker train pipeline, 1 core (region decode) | {s_med:.0f} |")
        print(f"| stoker train pipeline, 1 core, STOKER_JPEG_DECODER=zune (whole image) | {z_med:.0f} |")
        print(f"| PIL decode + RandomResizedCrop + flip, 1 core | {p_med:.0f} |")
        print(f"| ratio stoker / PIL (median of per-round ratios) | {statistics.median(ratios):.2f}x |")
        print(f"| ratio stoker with zune-jpeg / PIL | {statistics.median(zune_ratios):.2f}x |")
        print(f"| stoker stream end to end, 1 worker x {threads} threads + client, {cores} cores, "
              f"224x224 train | {statistics.median(stream_rates):.0f} "
              f"({statistics.median(stream_bytes) / 1e6:.0f} MB/s) |")
        print(f"host: {cores} cores, {time.strftime('%Y-%m-%d')}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
