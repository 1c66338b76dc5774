#!/usr/bin/env bash
# The one-line single-node path, measured: `stoker.Loader(workers="local")`
# in a Python loop against `stoker bench --device cpu` with the same CPU
# threads, on the same images, in one run. Rounds alternate (loader, bench)
# and the medians are printed, with their ratio. Also the install time of
# the wheel scripts/wheel.sh builds, into fresh venvs (no Rust used).
#
#   scripts/bench-local-workers.sh [THREADS] [IMAGES] [ROUNDS]
#
# Needs target/pyenv with the stoker package (scripts/test.sh makes it) and
# a release build. Uses ../shared/photos as the source images when present
# (procedural images otherwise). Elsewhere (the GPU machine, with what
# `scripts/gpu-check.sh --stage` carries) name them: BENCH_PY (a Python
# that imports stoker), BENCH_STOKER (the binary), BENCH_WHEEL_STOKER (the
# wheel's `stoker` command), BENCH_PHOTOS (a folder of photos).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
images=${2:-1024}
rounds=${3:-3}
py=${BENCH_PY:-target/pyenv/bin/python}
stoker=${BENCH_STOKER:-target/release/stoker}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

photos=()
photo_dir=${BENCH_PHOTOS:-../shared/photos}
[ -d "$photo_dir" ] && photos=(--photos "$photo_dir")
"$stoker" synth --output "$work/images" --images "$images" --classes 8 --width 500 --height 375 "${photos[@]}" >/dev/null 2>&1
"$stoker" pack --input "$work/images" --output "$work/shards" --shard-size 8M >/dev/null 2>&1

loader_rate() {
  "$py" - "$work/shards" "$threads" <<'PY'
import sys, time
import stoker
shards, threads = sys.argv[1], int(sys.argv[2])
loader = stoker.Loader(workers="local", dataset=shards, batch_size=128, image_size=224, local_threads=threads)
list(loader)  # warm-up epoch: page cache, worker start
t0, n = time.perf_counter(), 0
for epoch in range(2):
    for b in loader:
        n += len(b["key"])
print(f"{n / (time.perf_counter() - t0):.1f}")
PY
}

bench_rate() { # STOKER_BINARY
  "$1" bench --input "$work/images" --threads "$threads" --passes 3 --image-size 224 2>/dev/null | tail -1 |
    "$py" -c 'import json, sys; print(round(json.load(sys.stdin)["images_per_sec"], 1))'
}

# The wheel's own `stoker` (the code its local workers run: libjpeg-turbo
# built from source) and the release binary (the system's static libjpeg).
wheel_stoker=${BENCH_WHEEL_STOKER:-target/pyenv/bin/stoker}
loader=() wbench=() bench=()
for r in $(seq "$rounds"); do
  loader+=("$(loader_rate)")
  wbench+=("$(bench_rate "$wheel_stoker")")
  bench+=("$(bench_rate "$stoker")")
  echo "round $r: loader ${loader[-1]} img/s, wheel's bench ${wbench[-1]} img/s, binary's bench ${bench[-1]} img/s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
ml=$(median "${loader[@]}") mw=$(median "${wbench[@]}") mb=$(median "${bench[@]}")
echo "median: Loader(workers=\"local\", local_threads=$threads) $ml img/s"
echo "  stoker bench --device cpu --threads $threads, the wheel's: $mw img/s; ratio $(ratio "$ml" "$mw")"
echo "  stoker bench --device cpu --threads $threads, the release binary's: $mb img/s; ratio $(ratio "$ml" "$mb")"

wheel=$(ls target/wheels/stoker-*-abi3-*.whl 2>/dev/null | head -1 || true)
if [ -n "$wheel" ] && [ -z "${BENCH_PY:-}" ]; then
  times=()
  for r in $(seq "$rounds"); do
    python3 -m venv "$work/venv$r"
    start=$(date +%s.%N)
    "$work/venv$r/bin/pip" install --quiet --disable-pip-version-check "$wheel"
    times+=("$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}')")
    "$work/venv$r/bin/stoker" --version >/dev/null
  done
  echo "wheel install into a fresh venv (numpy from the index or pip's cache): ${times[*]} s; median $(median "${times[@]}") s ($(du -h "$wheel" | cut -f1) wheel)"
fi
