#!/usr/bin/env bash
# CPU benchmark, side by side in one run:
#   1. the worker's `train` pipeline (decode + RandomResizedCrop(224) + flip,
#      uint8 out) on one core, against PIL doing the same on one core;
#   2. `stoker stream` end to end on this machine (workers + client).
# Images: ImageNet-like 500x375 JPEGs cut from ../shared/photos when present,
# procedural ones otherwise. Prints a table of medians last.
#
# usage: scripts/bench-cpu.sh [ROUNDS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
if [ ! -x target/pyenv/bin/python ] || ! target/pyenv/bin/python -c 'import PIL, numpy' 2>/dev/null; then
  python3 -m venv target/pyenv
  target/pyenv/bin/pip install --quiet --disable-pip-version-check pillow numpy webdataset
fi
exec target/pyenv/bin/python scripts/bench_cpu.py "${1:-5}"
