#!/usr/bin/env bash
# Two stoker builds side by side on a GPU machine, in one run, alternating
# rounds (medians reported): what the worker's pipeline makes and what one
# `stoker stream` client receives of it.
#
#   scripts/bench-serve.sh BASE_STOKER NEW_STOKER [PHOTOS_DIR]
#   (BENCH_SERVE_ROUNDS=3, BENCH_SERVE_IMAGES=8192, BENCH_SERVE_PARTS="bench
#   stream ingest": which parts to run)
#
# Per round, for each build:
# - `stoker bench --device cuda`, whole host and --gpu-only, on `train`
#   (RandomResizedCrop 224 + flip) and on Seed 000's load N=1 (flips and a
#   rotation before the crop): the CPU threads' policy;
# - one GPU worker of that build on this host, and one `stoker stream`
#   client with default flags of each build (a warm-up epoch, then 4
#   measured): the serving path, as a ratio to the build's own `bench`;
#   the new build's client also reads one epoch of the dataset packed four
#   times over (as many images as 4 epochs, with one epoch's start and end);
# - two replay workers of that build (`--replay`: samples resent from
#   memory, so only transport, assembly and the upload count), and a client
#   of each build ingesting into the GPU as bfloat16.
# Worker and client of different builds tell the worker's changes from the
# client's (the wire is plain gRPC either way); a replay worker is a CPU
# worker, which lends no page-locked buffer.
set -euo pipefail
cd "$(dirname "$0")/.."
base=$1
new=$2
photos=${3:-.carry/photos}
rounds=${BENCH_SERVE_ROUNDS:-3}
parts=${BENCH_SERVE_PARTS:-bench stream ingest}
part() { [[ " $parts " == *" $1 "* ]]; }
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
# The same images four times over, under other class names: one epoch of
# four times the length.
mkdir -p "$work/imgs4"
for k in 1 2 3 4; do
    for c in "$work"/imgs/*/; do cp -al "$c" "$work/imgs4/$k-$(basename "$c")"; done
done
"$new" pack --input "$work/imgs4" --output "$work/shards4" --shard-size 8M >>"$out/synth.log" 2>&1
stream_rate() { # bin, dataset, epochs, more args...
    local bin=$1 data=$2 epochs=$3
    shift 3
    timeout 300 "$bin" stream --workers "$addr" --dataset "$data" --batch-size 256 --image-size 224 \
        --epochs "$epochs" --json "$@" 2>>"$out/stream.log" | rate
}
bin_of() { if [[ $1 == new ]]; then echo "$new"; else echo "$base"; fi; }
for r in $(seq "$rounds"); do
    for build in base new; do
        bin=$(bin_of $build)
        for spec in train heavy1; do
            part bench || break
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
        part stream || continue
        start_worker "$bin" "$out/worker-$build.log" --device cuda
        stream_rate "$new" "$work/shards" 1 >/dev/null
        for client in base new; do
            v=$(stream_rate "$(bin_of $client)" "$work/shards" 4)
            row "$build" "stream: $build cuda worker, $client client, 4 epochs" "$v"
        done
        v=$(stream_rate "$new" "$work/shards4" 1)
        row "$build" "stream: $build cuda worker, new client, 1 epoch of 4x" "$v"
        kill -INT $wpid
        wait $wpid 2>/dev/null || true
        part ingest || continue
        addrs=()
        pids=()
        for i in 1 2; do
            start_worker "$bin" "$out/replay-$build.log" --device cpu --threads 4 --replay
            addrs+=("$addr")
            pids+=("$wpid")
            stream_rate "$new" "$work/shards" 1 >/dev/null
        done
        addr=$(IFS=,; echo "${addrs[*]}")
        for client in base new; do
            v=$(stream_rate "$(bin_of $client)" "$work/shards" 6 --device cuda --dtype bfloat16 --normalize)
            row "$build" "ingest: 2 $build replay workers, $client client, into cuda" "$v"
        done
        kill -TERM "${pids[@]}"
        wait "${pids[@]}" 2>/dev/null || true
    done
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
runs = {}
for r in rows:
    key = f"{r['what']} ({r['build']})" if r["what"].startswith("bench") else r["what"]
    runs.setdefault(key, []).append(r["images_per_sec"])
med = {k: statistics.median(v) for k, v in runs.items()}
print("| what | median img/s | all |")
print("| --- | ---: | --- |")
for k, v in runs.items():
    print(f"| {k} | {med[k]:.0f} | {' '.join(f'{x:.0f}' for x in v)} |")
for b in ("base", "new"):
    if f"bench train host ({b})" in med:
        host, alone = med[f"bench train host ({b})"], med[f"bench train gpu-only ({b})"]
        h1, a1 = med[f"bench heavy1 host ({b})"], med[f"bench heavy1 gpu-only ({b})"]
        print(f"{b}: whole host / gpu-only: train {host / alone:.2f}x, heavy1 {h1 / a1:.2f}x")
        s = med.get(f"stream: {b} cuda worker, {b} client, 4 epochs")
        if s:
            print(f"{b}: one stream client (4 epochs) / bench: whole host (train) {s / host:.2f}x, gpu-only {s / alone:.2f}x")
s4 = med.get("stream: new cuda worker, new client, 1 epoch of 4x")
if s4 and "bench train host (new)" in med:
    print(f"new: one stream client, 1 epoch of 4x / bench whole host (train): {s4 / med['bench train host (new)']:.2f}x")
PY
