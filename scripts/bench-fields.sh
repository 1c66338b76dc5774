#!/usr/bin/env bash
# The image-text stream's speed: LAION-style WebDataset shards (per sample
# a JPEG, a caption of about 100 bytes and a JSON of about 300, written by
# webdataset's TarWriter through tests/python/write_records.py), streamed
# from one CPU worker with `train` at 224, with and without the caption
# and metadata as fields. Alternating rounds (the order flips each round),
# medians, and their ratio (issue 23 asks >= 0.95x).
#
#   scripts/bench-fields.sh [IMAGES [ROUNDS [THREADS]]]   (default 2048, 5, all cores)
#
# Needs the release build and target/pyenv (scripts/test.sh makes it).
# Photos from ../shared/photos when present (procedural images otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
images=${1:-2048}
rounds=${2:-5}
threads=${3:-$(nproc)}
bin=target/release/stoker
py=target/pyenv/bin/python
[[ -x $bin ]] || cargo build --release --quiet
work=$(mktemp -d)
trap 'kill $wpid 2>/dev/null || true; rm -rf "$work"' EXIT
$bin synth --output "$work/img" --images "$images" --classes 10 --photos ../shared/photos >/dev/null 2>&1
$py tests/python/write_records.py wds "$work/img" "$work/laion" "$work/manifest.json"
STOKER_LOG=warn $bin worker --listen 127.0.0.1:0 --threads "$threads" >"$work/worker.out" 2>"$work/worker.log" &
wpid=$!
for _ in $(seq 100); do grep -q "listening on" "$work/worker.out" 2>/dev/null && break; sleep 0.1; done
addr=$(sed -n 's/.*listening on //p' "$work/worker.out")
run() { # label, extra args...
    local label=$1
    shift
    $bin stream --workers "$addr" --dataset "$work/laion" --batch-size 256 --image-size 224 --transform train \
        --json "$@" 2>/dev/null | tail -n 1 |
        python3 -c "import json,sys; r=json.load(sys.stdin); print('$label', r['images_per_sec'], r['samples'])"
}
fields=(--field caption=txt --field meta=json)
# One warm-up epoch each (page cache, pool threads).
run warmup >/dev/null
run warmup "${fields[@]}" >/dev/null
: >"$work/rates"
for r in $(seq "$rounds"); do
    if ((r % 2)); then
        run images >>"$work/rates"
        run fields "${fields[@]}" >>"$work/rates"
    else
        run fields "${fields[@]}" >>"$work/rates"
        run images >>"$work/rates"
    fi
done
python3 - "$work/rates" "$threads" "$images" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
rates = {k: [float(r) for name, r, _ in rows if name == k] for k in ("images", "fields")}
samples = {k: {int(n) for name, _, n in rows if name == k} for k in ("images", "fields")}
med = {k: statistics.median(v) for k, v in rates.items()}
print(f"one cpu worker, {sys.argv[2]} threads, {sys.argv[3]} LAION-style samples, train at 224, {len(rates['images'])} alternating rounds")
for k, label in (("images", "images only"), ("fields", "images + caption (txt) + meta (json)")):
    print(f"  {label:40s} median {med[k]:8.1f} images/s  rounds {[round(x) for x in rates[k]]}  delivered {sorted(samples[k])}")
print(f"  ratio fields / images only: {med['fields'] / med['images']:.3f}x")
PY
