#!/usr/bin/env bash
# The read path of each shard format against WebDataset's, side by side in
# one run: the same images packed as WebDataset (stoker pack) and written
# by each format's own writer (TFRecord: the `tfrecord` package; RecordIO:
# MXNet; Parquet: Hugging Face `datasets`, row groups of 100 rows, its
# default for images), one local worker, `stoker doctor --json` on each in
# alternating rounds.
# doctor's `storage` stage reads and parses the shards and sends counts
# only, so it is the read path alone; `decode + transform` is the whole
# worker pipeline. Prints each round and the medians and ratios.
#
#   scripts/bench-formats.sh [IMAGES] [ROUNDS] [SECONDS]   (default 2000 3 3)
#
# Needs a release build, target/pyenv and target/mxenv (scripts/test.sh
# makes them).
# Images are cut from ../shared/photos when it has any, else procedural.
set -euo pipefail
cd "$(dirname "$0")/.."
images=${1:-2000}
rounds=${2:-3}
seconds=${3:-3}
bin=target/release/stoker
py=target/pyenv/bin/python
mxpy=target/mxenv/bin/python
formats="wds tfrecord recordio parquet"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT

"$bin" synth --output "$work/img" --images "$images" --classes 10 --photos ../shared/photos >/dev/null 2>&1
"$bin" pack --input "$work/img" --output "$work/wds" --shard-size 32M >/dev/null 2>&1
shards=$(find "$work/wds" -name '*.tar' | wc -l)
"$py" tests/python/write_tfrecord.py "$work/img" "$work/tfrecord" "$shards" .tfrecord >/dev/null
"$mxpy" tests/python/write_recordio.py "$work/img" "$work/recordio" "$shards" >/dev/null
"$py" tests/python/write_parquet.py "$work/img" "$work/parquet" "$shards" 100 >/dev/null 2>&1
echo "== $images images, $shards shards each:" $(for f in $formats; do echo "$f $(du -sh "$work/$f" | cut -f1)"; done)

port=$((40000 + RANDOM % 20000))
"$bin" worker --listen "127.0.0.1:$port" >"$work/worker.log" 2>&1 &
for _ in $(seq 50); do grep -q listening "$work/worker.log" && break; sleep 0.1; done

results=$work/results.tsv
for round in $(seq "$rounds"); do
    for format in $formats; do
        "$bin" doctor --workers "127.0.0.1:$port" --dataset "$work/$format" --batch-size 64 --image-size 224 \
            --seconds "$seconds" --json 2>/dev/null | tail -1 |
            "$py" -c '
import json, sys
d = json.load(sys.stdin)
by = {(s["stage"], s["worker"]): s["images_per_sec"] for s in d["stages"]}
print(sys.argv[1], sys.argv[2], round(by[("storage", None)]), round(by[("decode + transform", None)]), sep="\t")
' "$round" "$format" | tee -a "$results"
    done
done
"$py" - "$results" <<'PY'
import statistics, sys
rows = [line.split("\t") for line in open(sys.argv[1]).read().split("\n") if line]
med = {}
for fmt in ("wds", "tfrecord", "recordio", "parquet"):
    got = [r for r in rows if r[1] == fmt]
    med[fmt] = [statistics.median(float(r[i]) for r in got) for i in (2, 3)]
    print(f"median {fmt:9s} storage (read + parse) {med[fmt][0]:10.0f} images/s   decode + transform {med[fmt][1]:8.0f} images/s")
for fmt in ("tfrecord", "recordio", "parquet"):
    print(f"ratio {fmt} / wds: storage {med[fmt][0] / med['wds'][0]:.2f}x, decode + transform {med[fmt][1] / med['wds'][1]:.2f}x")
PY
