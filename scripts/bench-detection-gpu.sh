#!/usr/bin/env bash
# Detection on the GPU machine, side by side in one run: a Stoker GPU worker
# against DALI's COCO SSD pipeline on the same COCO-like images
# (scripts/bench_detection_gpu.py says how). Prints a table of medians last.
#
# Needs what `scripts/gpu-check.sh --stage` stages (.carry/stoker, the wheel
# in .carry/wheels, the photos) and DALI importable: its bundle unpacked in
# /tmp/dali (../shared/GPU.md says how to bring it).
#
# usage: scripts/bench-detection-gpu.sh [ROUNDS]   (default 3;
#   GPU_BENCH_IMAGES=4096, GPU_BENCH_BATCH=64)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .carry/stoker && -f .carry-xz/carry.tar.xz ]]; then
    tar -xJf .carry-xz/carry.tar.xz
fi
if [[ ! -d /tmp/dali/site && -d /tmp/dp ]]; then
    mkdir -p /tmp/dali && cat /tmp/dp/part-* | xz -d | tar -x -C /tmp/dali
fi
export PYTHONPATH=/tmp/dali/site${PYTHONPATH:+:$PYTHONPATH}
if ! python3 -c 'import nvidia.dali' 2>/dev/null; then
    echo "error: DALI does not import: bring its bundle to /tmp/dp (../shared/GPU.md)" >&2
    exit 1
fi
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
python3 -m pip install -q --no-index --no-deps --target "$site" .carry/wheels/*.whl
export PYTHONPATH=$site:$PYTHONPATH
for d in /usr/local/cuda/lib64 /usr/local/cuda-13.0/targets/x86_64-linux/lib /usr/local/nvidia/lib64; do
    [[ -d $d ]] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
done
exec python3 scripts/bench_detection_gpu.py --stoker .carry/stoker --photos .carry/photos \
    --rounds "${1:-3}" --images "${GPU_BENCH_IMAGES:-4096}" --batch "${GPU_BENCH_BATCH:-64}" "${@:2}"
