#!/usr/bin/env bash
# Two stoker builds side by side on a GPU machine, in one run, alternating
# rounds (medians reported): what the worker's pipeline makes and what one
# `stoker stream` client receives of it.
#
#   scripts/bench-serve.sh BASE_STOKER NEW_STOKER [PHOTOS_DIR]
#   (BENCH_SERVE_ROUNDS=3, BENCH_SERVE_IMAGES=8192)
#
# Per build and round:
# - `stoker bench --device cuda`, whole host and --gpu-only, on `train`
#   (RandomResizedCrop 224 + flip) and on Seed 000's load N=1 (flips and a
#   rotation before the crop): the CPU threads' policy;
# - one GPU worker on this host and one `stoker stream` client with default
#   flags (a warm-up epoch, then 4 measured): the serving path, as a ratio
#   to that build's own `bench` rate;
# - client ingest from two replay workers (`--replay`: samples resent from
#   memory, so only transport, assembly and the upload count) into the GPU
#   as bfloat16: the client's receiving path.
set -euo pipefail
cd "$(dirname "$0")/.."
base=$1
new=$2
photos=${3:-.carry/photos}
rounds=${BENCH_SERVE_ROUNDS:-3}
nimages=${BENCH_SERVE_IMAGES:-8192}
out=${OUT:-bench-serve-out}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$new" synth --output "$work/imgs" --images "$nimages" --classes 8 --quality 95 --photos "$photos" >"$out/synth.log" 2>&1 ||
    "$new" synth --output "$work/imgs" --images "$nimages" --classes 8 >>"$out/synth.log" 2>&1
"$new" pack --input "$work/imgs" --output "$work/shards" --shard-size 8M >>"$out/synth.log" 2>&1
heavy1='{"version": 1, "ops": [{"op": "RandomHorizontalFlip"}, {"op": "RandomVerticalFlip"}, {"op": "RandomRotation", "degrees": 30}, {"op": "RandomResizedCrop", "size": 224}, {"op": "RandomHorizontalFlip"}]}'
results=$out/results.jsonl
: >"$results"
row() { # build, what, images/s
    echo "{\"build\": \"$1\", \"what\": \"$2\", \"images_per_sec\": $3}" | tee -a "$results"
}
rate() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["images_per_sec"])'; }
start_worker() { # bin, log, args...
    local bin=$1 log=$2
    shift 2
    "$bin" worker --listen 127.0.0.1:0 "$@" >"$work/w.out" 2>"$log" &
    wpid=$!
    for _ in $(seq 100); do grep -q listening "$work/w.out" 2>/dev/null && break; sleep 0.2; done
    addr=$(sed -n 's/.*listening on //p' "$work/w.out")
}
passes=$(((40000 + nimages - 1) / nimages))
for r in $(seq "$rounds"); do
    for build in base new; do
        bin=$base
        [[ $build == new ]] && bin=$new
        for spec in train heavy1; do
            t=train
            [[ $spec == heavy1 ]] && t=$heavy1
            for mode in host gpu-only; do
                flag=()
                [[ $mode == gpu-only ]] && flag=(--gpu-only)
                v=$(timeout 120 "$bin" bench --device cuda "${flag[@]}" --input "$work/imgs" --passes "$passes" \
                    --transform "$t" 2>>"$out/bench-$build.log" | rate)
                row "$build" "bench $spec $mode" "$v"
            done
        done
        start_worker "$bin" "$out/worker-$build.log" --device cuda
        timeout 120 "$bin" stream --workers "$addr" --dataset "$work/shards" --batch-size 256 --image-size 224 \
            --epochs 1 >/dev/null 2>>"$out/stream-$build.log"
        v=$(timeout 300 "$bin" stream --workers "$addr" --dataset "$work/shards" --batch-size 256 --image-size 224 \
            --epochs 4 --json 2>>"$out/stream-$build.log" | rate)
        row "$build" "stream one client" "$v"
        kill -INT $wpid
        wait $wpid 2>/dev/null || true
        addrs=()
        pids=()
        for i in 1 2; do
            start_worker "$bin" "$out/replay-$build.log" --device cpu --threads 4 --replay
            addrs+=("$addr")
            pids+=("$wpid")
            timeout 120 "$bin" stream --workers "$addr" --dataset "$work/shards" --batch-size 256 --image-size 224 \
                --epochs 1 >/dev/null 2>>"$out/ingest-$build.log"
        done
        list=$(IFS=,; echo "${addrs[*]}")
        v=$(timeout 120 "$bin" stream --workers "$list" --dataset "$work/shards" --batch-size 256 --image-size 224 \
            --epochs 6 --device cuda --dtype bfloat16 --normalize --json 2>>"$out/ingest-$build.log" | rate)
        row "$build" "client ingest into cuda (2 replay workers)" "$v"
        kill -TERM "${pids[@]}"
        wait "${pids[@]}" 2>/dev/null || true
    done
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
whats = list(dict.fromkeys(r["what"] for r in rows))
med = {(b, w): statistics.median([r["images_per_sec"] for r in rows if (r["build"], r["what"]) == (b, w)])
       for b in ("base", "new") for w in whats}
print(f"| what | base img/s | new img/s | new / base |")
print("| --- | ---: | ---: | ---: |")
for w in whats:
    print(f"| {w} | {med['base', w]:.0f} | {med['new', w]:.0f} | {med['new', w] / med['base', w]:.2f} |")
for b in ("base", "new"):
    print(f"{b}: stream one client / bench whole host (train) = {med[b, 'stream one client'] / med[b, 'bench train host']:.2f}x; "
          f"whole host / gpu-only: train {med[b, 'bench train host'] / med[b, 'bench train gpu-only']:.2f}x, "
          f"heavy1 {med[b, 'bench heavy1 host'] / med[b, 'bench heavy1 gpu-only']:.2f}x")
PY
