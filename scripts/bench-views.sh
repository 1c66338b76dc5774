#!/usr/bin/env bash
# Multi-view speed: DINOv2's crops (2 global at 224, 8 local at 96) from
# one decode, beside the single `train` view at 224, from one CPU worker,
# in alternating rounds (the order flips each round); medians of images/s
# and views/s. The main image is the first global crop; `--view` adds the
# other nine.
#
#   scripts/bench-views.sh [IMAGES [ROUNDS [THREADS]]]   (default 1024, 5, all cores)
#
# Needs the release build. Photos from ../shared/photos when present.
set -euo pipefail
cd "$(dirname "$0")/.."
images=${1:-1024}
rounds=${2:-5}
threads=${3:-$(nproc)}
bin=target/release/stoker
[[ -x $bin ]] || cargo build --release --quiet
work=$(mktemp -d)
trap 'kill $wpid 2>/dev/null || true; rm -rf "$work"' EXIT
$bin synth --output "$work/img" --images "$images" --classes 10 --photos ../shared/photos >/dev/null 2>&1
$bin pack --input "$work/img" --output "$work/shards" --shard-size 16M >/dev/null 2>&1
STOKER_LOG=warn $bin worker --listen 127.0.0.1:0 --threads "$threads" >"$work/worker.out" 2>"$work/worker.log" &
wpid=$!
for _ in $(seq 100); do grep -q "listening on" "$work/worker.out" 2>/dev/null && break; sleep 0.1; done
addr=$(sed -n 's/.*listening on //p' "$work/worker.out")
global='{"version": 1, "ops": [{"op": "RandomResizedCrop", "size": 224, "scale": [0.32, 1.0]}, {"op": "RandomHorizontalFlip"}]}'
local='{"version": 1, "ops": [{"op": "RandomResizedCrop", "size": 96, "scale": [0.05, 0.32]}, {"op": "RandomHorizontalFlip"}]}'
dino=(--transform "$global" --view "global_1=$global")
for i in $(seq 0 7); do dino+=(--view "local_$i=$local"); done
run() { # label, views per image, extra args...
    local label=$1 per=$2
    shift 2
    $bin stream --workers "$addr" --dataset "$work/shards" --batch-size 64 --json "$@" 2>/dev/null | tail -n 1 |
        python3 -c "import json,sys; r=json.load(sys.stdin); print('$label', r['images_per_sec'], $per)"
}
run warmup 1 --transform train >/dev/null
run warmup 10 "${dino[@]}" >/dev/null
: >"$work/rates"
for r in $(seq "$rounds"); do
    if ((r % 2)); then
        run single 1 --transform train >>"$work/rates"
        run dino 10 "${dino[@]}" >>"$work/rates"
    else
        run dino 10 "${dino[@]}" >>"$work/rates"
        run single 1 --transform train >>"$work/rates"
    fi
done
python3 - "$work/rates" "$threads" "$images" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print(f"one cpu worker, {sys.argv[2]} threads, {sys.argv[3]} photos, {len(rows) // 2} alternating rounds")
for k, label in (("single", "train at 224 (1 view)"), ("dino", "DINOv2 crops: 2 x 224 + 8 x 96 (10 views)")):
    rates = [float(r) for name, r, _ in rows if name == k]
    per = int([p for name, _, p in rows if name == k][0])
    med = statistics.median(rates)
    print(f"  {label:44s} median {med:8.1f} images/s {med * per:9.1f} views/s  rounds {[round(x) for x in rates]}")
PY
