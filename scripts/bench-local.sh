#!/usr/bin/env bash
# Workers on the training node: what one `stoker stream` client receives
# from a worker on its own host, through the shared-memory ring and over
# gRPC, against what the worker's pipeline makes alone (`stoker bench`
# with the same threads or GPU), side by side in one run, alternating
# rounds, medians reported.
#
#   scripts/bench-local.sh [STOKER] [PHOTOS_DIR]
#   (BENCH_LOCAL_ROUNDS=3, BENCH_LOCAL_IMAGES=8192, BENCH_LOCAL_THREADS=8,
#   BENCH_LOCAL_PARTS="cpu gpu": which workers)
#
# Per round:
# - cpu: `stoker bench --device cpu --threads T`; a CPU worker with T
#   threads and a client with default flags, into host memory, through the
#   ring (default) and with --shared-memory 0; and through the ring into
#   the GPU as bfloat16 (the training loop's path) when there is one;
# - gpu: `stoker bench --device cuda`; a GPU worker and a client, through
#   the ring and over gRPC.
# Each stream runs a warm-up epoch's worth first (the worker's first
# epoch), then 4 measured epochs.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-.carry/stoker}
photos=${2:-.carry/photos}
rounds=${BENCH_LOCAL_ROUNDS:-3}
nimages=${BENCH_LOCAL_IMAGES:-8192}
threads=${BENCH_LOCAL_THREADS:-8}
parts=${BENCH_LOCAL_PARTS:-cpu gpu}
part() { [[ " $parts " == *" $1 "* ]]; }
out=${OUT:-bench-local-out}
mkdir -p "$out"
work=$(mktemp -d)
wpid=""
trap '[[ -n $wpid ]] && kill -TERM $wpid 2>/dev/null; rm -rf "$work"' EXIT
for d in /usr/local/cuda/lib64 /usr/local/cuda-13.0/targets/x86_64-linux/lib /usr/local/nvidia/lib64; do
    [[ -d $d ]] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
done
gpu=no
nvidia-smi -L >/dev/null 2>&1 && gpu=yes
"$bin" synth --output "$work/imgs" --images "$nimages" --classes 8 --quality 95 --photos "$photos" >"$out/synth.log" 2>&1 ||
    "$bin" synth --output "$work/imgs" --images "$nimages" --classes 8 >>"$out/synth.log" 2>&1
"$bin" pack --input "$work/imgs" --output "$work/shards" --shard-size 8M >>"$out/synth.log" 2>&1
results=$out/results.jsonl
: >"$results"
row() { # what, images/s
    echo "{\"what\": \"$1\", \"images_per_sec\": ${2:-0}}" | tee -a "$results"
}
rate() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["images_per_sec"])' 2>/dev/null || echo 0; }
start_worker() { # log, args...
    local log=$1
    shift
    "$bin" worker --listen 127.0.0.1:0 "$@" >"$work/w.out" 2>"$log" &
    wpid=$!
    for _ in $(seq 100); do grep -q listening "$work/w.out" 2>/dev/null && break; sleep 0.2; done
    addr=$(sed -n 's/.*listening on //p' "$work/w.out")
}
stop_worker() { kill -TERM "$wpid"; wait "$wpid" 2>/dev/null || true; wpid=""; }
stream_rate() { # epochs, more args...
    local epochs=$1
    shift
    timeout 300 "$bin" stream --workers "$addr" --dataset "$work/shards" --batch-size 256 --image-size 224 \
        --epochs "$epochs" --json "$@" 2>>"$out/stream.log" | rate
}
passes=$(((40000 + nimages - 1) / nimages))
for r in $(seq "$rounds"); do
    if part cpu; then
        row "cpu bench, $threads threads" "$(timeout 300 "$bin" bench --device cpu --threads "$threads" --input "$work/imgs" \
            --passes 2 2>>"$out/bench.log" | rate)"
        start_worker "$out/worker-cpu.log" --device cpu --threads "$threads"
        stream_rate 1 >/dev/null
        row "cpu worker, shm" "$(stream_rate 4)"
        row "cpu worker, grpc" "$(stream_rate 4 --shared-memory 0)"
        [[ $gpu == yes ]] && row "cpu worker, shm, into cuda bf16" "$(stream_rate 4 --device cuda --dtype bfloat16 --normalize)"
        stop_worker
    fi
    if part gpu && [[ $gpu == yes ]]; then
        row "gpu bench" "$(timeout 300 "$bin" bench --device cuda --input "$work/imgs" --passes "$passes" 2>>"$out/bench.log" | rate)"
        start_worker "$out/worker-gpu.log" --device cuda
        stream_rate 1 >/dev/null
        row "gpu worker, shm" "$(stream_rate 4)"
        row "gpu worker, grpc" "$(stream_rate 4 --shared-memory 0)"
        stop_worker
    fi
done
python3 - "$results" "$threads" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
runs = {}
for r in rows:
    runs.setdefault(r["what"], []).append(r["images_per_sec"])
med = {k: statistics.median(v) for k, v in runs.items()}
print("| what | median img/s | × its bench | all |")
print("| --- | ---: | ---: | --- |")
bench = {"cpu": med.get(f"cpu bench, {sys.argv[2]} threads"), "gpu": med.get("gpu bench")}
for k, v in runs.items():
    base = bench[k.split()[0]]
    ratio = f"{med[k] / base:.2f}" if base and "bench" not in k else ""
    print(f"| {k} | {med[k]:.0f} | {ratio} | {' '.join(f'{x:.0f}' for x in v)} |")
PY
