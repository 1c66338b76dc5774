#!/usr/bin/env bash
# CPU transform benchmark, side by side in one run: Stoker's worker
# pipeline (`stoker bench`) against torchvision on PIL (a DataLoader with
# one and two worker processes) and DALI's CPU pipeline, on the same
# ImageNet-like JPEGs, for two workloads:
#   - Seed 000's augmentation load: N x (RandomHorizontalFlip,
#     RandomVerticalFlip, RandomRotation(30)), RandomResizedCrop(224),
#     RandomHorizontalFlip, ToDtype + Normalize; N = 1, 4, 8, 12;
#   - torchvision's reference recipe: RandomResizedCrop(176),
#     RandomHorizontalFlip, TrivialAugmentWide, ToDtype + Normalize,
#     RandomErasing(0.1).
# Rounds alternate the contenders; prints medians and per-core ratios as a
# Markdown table (also written to target/bench-transforms.md).
#
# Installs, once, under target/benchenv (nothing system-wide): torch and
# torchvision (CPU wheels where that index is reachable, else PyPI's),
# nvidia-dali-cuda130 (its CPU backend needs no GPU), pillow, numpy.
#
# usage: scripts/bench-transforms.sh [--images 640] [--rounds 3]
#          [--measure 320] [--seed000 1,4,8,12] [--skip-dali] [--no-scaling]
#          [--wait-quiet] [--out FILE] ...   (--help for all)
# STOKER_NO_BUILD=1 uses target/release/stoker as it is (no cargo build).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${STOKER_NO_BUILD:-}" ]; then
  cargo build --release --quiet
fi

ENV=target/benchenv
if [ ! -x "$ENV/bin/python" ] || ! "$ENV/bin/python" -c 'import torch, torchvision, PIL, numpy, nvidia.dali' 2>/dev/null; then
  echo "==> creating $ENV (torch, torchvision, nvidia-dali-cuda130, pillow, numpy)" >&2
  python3 -m venv "$ENV"
  PIP=("$ENV/bin/pip" install --quiet --disable-pip-version-check)
  # CPU-only wheels are much smaller; fall back to PyPI's (CUDA) wheels,
  # which run on the CPU just as well.
  if ! "${PIP[@]}" --timeout 20 --retries 0 --index-url https://download.pytorch.org/whl/cpu torch torchvision 2>/dev/null; then
    echo "==> the CPU wheel index is not reachable: torch and torchvision from PyPI" >&2
    "${PIP[@]}" torch torchvision
  fi
  "${PIP[@]}" nvidia-dali-cuda130 pillow numpy
fi

exec "$ENV/bin/python" scripts/bench_transforms.py "$@"
