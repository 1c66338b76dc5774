#!/usr/bin/env bash
# Multi-view speed: DINOv2's crops (2 global at 224, 8 local at 96) from
# one decode, beside the single `train` view at 224, from one worker per
# device, in alternating rounds (the order flips each round); medians of
# images/s and views/s. The main image is the first global crop; `--view`
# adds the other nine. On a GPU machine, BENCH_VIEWS_DEVICES="cpu cuda"
# runs a CPU worker and a GPU worker (its lanes and its CPU threads) side
# by side on the same shards.
#
#   scripts/bench-views.sh [IMAGES [ROUNDS [THREADS]]]   (default 1024, 5, all cores)
#   (STOKER_BIN: the binary, default target/release/stoker, built if missing;
#    STOKER_PHOTOS: default ../shared/photos; BENCH_VIEWS_DEVICES: default cpu)
set -euo pipefail
cd "$(dirname "$0")/.."
images=${1:-1024}
rounds=${2:-5}
threads=${3:-$(nproc)}
bin=${STOKER_BIN:-target/release/stoker}
photos=${STOKER_PHOTOS:-../shared/photos}
devices=${BENCH_VIEWS_DEVICES:-cpu}
[[ -x $bin ]] || cargo build --release --quiet
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
$bin synth --output "$work/img" --images "$images" --classes 10 --photos "$photos" >/dev/null 2>&1
$bin pack --input "$work/img" --output "$work/shards" --shard-size 16M >/dev/null 2>&1
declare -A addrs
for d in $devices; do
    STOKER_LOG=warn $bin worker --listen 127.0.0.1:0 --threads "$threads" --device "$d" >"$work/worker-$d.out" \
        2>"$work/worker-$d.log" &
    pids+=($!)
    for _ in $(seq 300); do grep -q "listening on" "$work/worker-$d.out" 2>/dev/null && break; sleep 0.1; done
    addrs[$d]=$(sed -n 's/.*listening on //p' "$work/worker-$d.out")
done
global='{"version": 1, "ops": [{"op": "RandomResizedCrop", "size": 224, "scale": [0.32, 1.0]}, {"op": "RandomHorizontalFlip"}]}'
local='{"version": 1, "ops": [{"op": "RandomResizedCrop", "size": 96, "scale": [0.05, 0.32]}, {"op": "RandomHorizontalFlip"}]}'
dino=(--transform "$global" --view "global_1=$global")
for i in $(seq 0 7); do dino+=(--view "local_$i=$local"); done
run() { # device, label, views per image, extra args...
    local d=$1 label=$2 per=$3
    shift 3
    $bin stream --workers "${addrs[$d]}" --dataset "$work/shards" --batch-size 64 --json "$@" 2>/dev/null | tail -n 1 |
        python3 -c "import json,sys; r=json.load(sys.stdin); print('$d', '$label', r['images_per_sec'], $per)"
}
for d in $devices; do
    run "$d" warmup 1 --transform train >/dev/null
    run "$d" warmup 10 "${dino[@]}" >/dev/null
done
: >"$work/rates"
for r in $(seq "$rounds"); do
    for d in $devices; do
        if ((r % 2)); then
            run "$d" single 1 --transform train >>"$work/rates"
            run "$d" dino 10 "${dino[@]}" >>"$work/rates"
        else
            run "$d" dino 10 "${dino[@]}" >>"$work/rates"
            run "$d" single 1 --transform train >>"$work/rates"
        fi
    done
done
python3 - "$work/rates" "$threads" "$images" "$devices" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
devices = sys.argv[4].split()
print(f"one worker per device ({', '.join(devices)}), {sys.argv[2]} threads, {sys.argv[3]} photos, "
      f"{len(rows) // (2 * len(devices))} alternating rounds")
views = {}
for d in devices:
    for k, label in (("single", "train at 224 (1 view)"), ("dino", "DINOv2 crops: 2 x 224 + 8 x 96 (10 views)")):
        picked = [(float(r), int(p)) for dev, name, r, p in rows if (dev, name) == (d, k)]
        med = statistics.median(r for r, _ in picked)
        views[d, k] = med * picked[0][1]
        print(f"  {d:5s} {label:44s} median {med:8.1f} images/s {views[d, k]:9.1f} views/s  "
              f"rounds {[round(r) for r, _ in picked]}")
if "cpu" in devices and "cuda" in devices:
    for k in ("single", "dino"):
        print(f"  ratio cuda / cpu worker, {k}: {views['cuda', k] / views['cpu', k]:.2f}x")
PY
