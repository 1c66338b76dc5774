#!/usr/bin/env bash
# Detection benchmark, CPU, side by side in one run: Stoker's worker on one
# core against torchvision v2's `ssd` recipe in one DataLoader worker, on
# COCO-like 640x480 images with 7 boxes each on average
# (scripts/bench_detection.py says how). Prints a table of medians last.
#
# Needs the torch venv (target/torchenv: torch, torchvision and the stoker
# package), which scripts/test.sh installs.
#
# usage: scripts/bench-detection.sh [ROUNDS [--without OP,...]]   (default 5)
#   --without RandomPhotometricDistort: the recipe less those ops, to see
#   where the time goes
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin stoker
if [ ! -x target/torchenv/bin/python ] || ! target/torchenv/bin/python -c 'import torch, torchvision, stoker' 2>/dev/null; then
  echo "error: target/torchenv (torch, torchvision, stoker) is missing: run scripts/test.sh once" >&2
  exit 1
fi
exec target/torchenv/bin/python scripts/bench_detection.py "${1:-5}" "${@:2}"
