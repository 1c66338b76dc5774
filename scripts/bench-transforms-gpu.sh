#!/usr/bin/env bash
# The GPU worker's pipeline (`stoker bench --device cuda`) on the transform
# workloads of scripts/bench-transforms.sh, on a GPU machine: Seed 000's
# augmentation load, N x (RandomHorizontalFlip, RandomVerticalFlip,
# RandomRotation(30)) then RandomResizedCrop(224), flip and normalize, for
# N = 1, 4, 8, 12 (the flat line: the rate at N = 12 over the rate at N = 1),
# and torchvision's reference recipe against the worker's own `train` rate.
# Rounds alternate the workloads; medians are reported.
#
#   scripts/bench-transforms-gpu.sh [STOKER_BIN] [PHOTOS_DIR]
#   (defaults: .carry/stoker, .carry/photos; GPU_BENCH_ROUNDS=3, GPU_BENCH_IMAGES=4096)
set -euo pipefail
cd "$(dirname "$0")/.."
stoker=${1:-.carry/stoker}
photos=${2:-.carry/photos}
rounds=${GPU_BENCH_ROUNDS:-3}
nimages=${GPU_BENCH_IMAGES:-4096}
out=${OUT:-bench-transforms-gpu-out}
mkdir -p "$out"
work=$(mktemp -d)
"$stoker" synth --output "$work/imgs" --images "$nimages" --classes 8 --quality 95 --photos "$photos" >"$out/synth.log" 2>&1 ||
    "$stoker" synth --output "$work/imgs" --images "$nimages" --classes 8 >>"$out/synth.log" 2>&1

norm='{"op": "ToDtype", "dtype": "float32", "scale": true}, {"op": "Normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}'
heavy() { # N
    local ops=""
    for _ in $(seq "$1"); do
        ops+='{"op": "RandomHorizontalFlip"}, {"op": "RandomVerticalFlip"}, {"op": "RandomRotation", "degrees": 30}, '
    done
    echo "{\"version\": 1, \"ops\": [$ops{\"op\": \"RandomResizedCrop\", \"size\": 224}, {\"op\": \"RandomHorizontalFlip\"}, $norm]}"
}
recipe="{\"version\": 1, \"ops\": [{\"op\": \"RandomResizedCrop\", \"size\": 176}, {\"op\": \"RandomHorizontalFlip\"}, {\"op\": \"TrivialAugmentWide\", \"interpolation\": \"bilinear\"}, {\"op\": \"PILToTensor\"}, $norm, {\"op\": \"RandomErasing\", \"p\": 0.1}]}"

results=$out/results.jsonl
: >"$results"
passes=$(((20000 + nimages - 1) / nimages))
for r in $(seq "$rounds"); do
    for what in train heavy1 heavy4 heavy8 heavy12 recipe; do
        case $what in
            train) spec=train ;;
            recipe) spec=$recipe ;;
            heavy*) spec=$(heavy "${what#heavy}") ;;
        esac
        for mode in host gpu-only; do
            flag=(); [[ $mode == gpu-only ]] && flag=(--gpu-only)
            rate=$(timeout 300 "$stoker" bench --device cuda "${flag[@]}" --input "$work/imgs" --passes "$passes" \
                --transform "$spec" 2>>"$out/bench.log" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["images_per_sec"])')
            echo "{\"round\": $r, \"what\": \"$what\", \"mode\": \"$mode\", \"images_per_sec\": $rate}" | tee -a "$results"
        done
    done
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for (w, m) in {(r["what"], r["mode"]) for r in rows}:
    med[w, m] = statistics.median(r["images_per_sec"] for r in rows if (r["what"], r["mode"]) == (w, m))
print("| workload | whole host img/s | gpu lanes only img/s |")
print("| --- | ---: | ---: |")
for w in ["train", "heavy1", "heavy4", "heavy8", "heavy12", "recipe"]:
    print(f"| {w} | {med[w, 'host']:.0f} | {med[w, 'gpu-only']:.0f} |")
for m in ["host", "gpu-only"]:
    print(f"flat line ({m}): N=12 / N=1 = {med['heavy12', m] / med['heavy1', m]:.2f}x; recipe / train = {med['recipe', m] / med['train', m]:.2f}x")
PY
