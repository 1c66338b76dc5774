#!/usr/bin/env bash
# The GPU worker's pipeline (`stoker bench --device cuda`) on the transform
# workloads of scripts/bench-transforms.sh, on a GPU machine: Seed 000's
# augmentation load, N x (RandomHorizontalFlip, RandomVerticalFlip,
# RandomRotation(30)) then RandomResizedCrop(224), flip and normalize, for
# N = 1, 4, 8, 12 (the flat line: the rate at N = 12 over the rate at N = 1),
# and torchvision's reference recipe against the worker's own `train` rate.
# Rounds alternate the workloads; medians are reported.
#
# Where DALI imports (../shared/GPU.md: its wheels unpacked, PYTHONPATH set),
# each round also runs DALI's GPU pipeline on the same images and workloads
# (scripts/bench_dali_gpu.py: nvJPEG through its `mixed` decoder, its own
# ops, the output left in device memory, while `stoker bench` copies its
# output to host memory), and the table gets a DALI column and ratios.
#
#   scripts/bench-transforms-gpu.sh [STOKER_BIN] [PHOTOS_DIR]
#   (defaults: .carry/stoker, .carry/photos; GPU_BENCH_ROUNDS=3, GPU_BENCH_IMAGES=4096,
#    GPU_BENCH_WORKLOADS="train heavy1 heavy4 heavy8 heavy12 recipe")
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

train="{\"version\": 1, \"ops\": [{\"op\": \"RandomResizedCrop\", \"size\": 224}, {\"op\": \"RandomHorizontalFlip\"}, $norm]}"
workloads=${GPU_BENCH_WORKLOADS:-train heavy1 heavy4 heavy8 heavy12 recipe}
modes=(host gpu-only)
if python3 -c 'import nvidia.dali' 2>/dev/null; then
    modes+=(dali)
    python3 -c 'import nvidia.dali as d; print("dali", d.__version__)' 2>/dev/null | tail -n 1
else
    echo "dali: not importable; no DALI column (../shared/GPU.md says how to bring it)"
fi
results=$out/results.jsonl
: >"$results"
passes=$(((20000 + nimages - 1) / nimages))
for r in $(seq "$rounds"); do
    for what in $workloads; do
        case $what in
            train) spec=train ;;
            recipe) spec=$recipe ;;
            heavy*) spec=$(heavy "${what#heavy}") ;;
        esac
        for mode in "${modes[@]}"; do
            if [[ $mode == dali ]]; then
                dspec=$spec; [[ $what == train ]] && dspec=$train
                rate=$(timeout 300 python3 scripts/bench_dali_gpu.py --input "$work/imgs" --spec "$dspec" \
                    --threads "$(nproc)" 2>>"$out/dali.log" | tail -n 1 | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["images_per_sec"])') || rate=null
                echo "{\"round\": $r, \"what\": \"$what\", \"mode\": \"$mode\", \"images_per_sec\": $rate}" | tee -a "$results"
                continue
            fi
            flag=(); [[ $mode == gpu-only ]] && flag=(--gpu-only)
            rate=$(timeout 300 "$stoker" bench --device cuda "${flag[@]}" --input "$work/imgs" --passes "$passes" \
                --transform "$spec" 2>>"$out/bench.log" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["images_per_sec"])')
            echo "{\"round\": $r, \"what\": \"$what\", \"mode\": \"$mode\", \"images_per_sec\": $rate}" | tee -a "$results"
        done
    done
done
python3 - "$results" "$workloads" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
workloads = sys.argv[2].split()
med = {}
for (w, m) in {(r["what"], r["mode"]) for r in rows}:
    rates = [r["images_per_sec"] for r in rows if (r["what"], r["mode"]) == (w, m) and r["images_per_sec"] is not None]
    med[w, m] = statistics.median(rates) if rates else None
dali = any(m == "dali" for (_, m) in med)
fmt = lambda v: "-" if v is None else f"{v:.0f}"
head = "| workload | whole host img/s | gpu lanes only img/s |"
if dali:
    head += " DALI GPU img/s | best Stoker / DALI |"
print(head)
print("| --- | ---: | ---: |" + (" ---: | ---: |" if dali else ""))
for w in workloads:
    host, lanes = med.get((w, "host")), med.get((w, "gpu-only"))
    line = f"| {w} | {fmt(host)} | {fmt(lanes)} |"
    if dali:
        d = med.get((w, "dali"))
        best = max(v for v in (host, lanes) if v is not None)
        line += f" {fmt(d)} | {'-' if not d else f'{best / d:.2f}'} |"
    print(line)
for m in ["host", "gpu-only"]:
    h1, h12 = med.get(("heavy1", m)), med.get(("heavy12", m))
    t, rc = med.get(("train", m)), med.get(("recipe", m))
    if h1 and h12:
        print(f"flat line ({m}): N=12 / N=1 = {h12 / h1:.2f}x")
    if t and rc:
        print(f"recipe / train ({m}) = {rc / t:.2f}x")
PY
