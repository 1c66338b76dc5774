#!/usr/bin/env bash
# Fuzzes the parsers that read untrusted shard bytes (the stoker-formats
# crate, worker/formats) and the CPU decode and transforms (stoker-image,
# worker/image: target image_transform, which also fails on memory over the
# per-sample bound) for a bounded time, and fails on any crash.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET [TARGET...]]   (default: 20 s, every target)
#
# Installs cargo-fuzz under target/tools when missing (nothing system-wide).
# Stable Rust is enough: RUSTC_BOOTSTRAP=1 lets cargo-fuzz pass the unstable
# flags of libFuzzer's coverage instrumentation. No sanitizer
# (--sanitizer none): stoker-formats and stoker-image have no unsafe code,
# so AddressSanitizer would mostly re-check what bounds checks already catch
# (the SIMD inside zune-jpeg and fast_image_resize runs as it ships), at
# several times the cost per run. Overflow checks and debug assertions stay
# on (--debug-assertions).
#
# Each target starts from its committed seeds (worker/formats/fuzz/corpus/T)
# and keeps what it discovers in worker/formats/fuzz/target/corpus/T (not
# committed), which later runs on the same machine start from too. A crash,
# a hang (10 s on one input) or more than 512 MB of memory fails the script
# and leaves the input in worker/formats/fuzz/artifacts/T/; reproduce it with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir worker/formats/fuzz -s none -a T FILE
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=${1:-20}
[ $# -gt 0 ] && shift
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(tar_stream tar_header image_header tfrecord_stream recordio_stream image_transform npy_field field_bytes)

CARGO_FUZZ_VERSION=0.13.2
export PATH="$PWD/target/tools/bin:$PATH"
if ! cargo fuzz --version 2>/dev/null | grep -qF "$CARGO_FUZZ_VERSION"; then
  echo "==> installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install --quiet --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION" --root target/tools
fi

export RUSTC_BOOTSTRAP=1
FUZZ_DIR=worker/formats/fuzz
FLAGS=(--fuzz-dir "$FUZZ_DIR" --sanitizer none --debug-assertions)

echo "==> building the fuzz targets"
cargo fuzz build "${FLAGS[@]}"

# libFuzzer runs on one core: the targets run as many at a time as the
# machine has cores (FUZZ_JOBS), each for its full time.
fuzz_one() { # TARGET: fuzzes it; its log is $FUZZ_DIR/target/TARGET.log
  local target=$1 found="$FUZZ_DIR/target/corpus/$1"
  mkdir -p "$found"
  cargo fuzz run "${FLAGS[@]}" "$target" "$found" "$FUZZ_DIR/corpus/$target" -- \
      -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=512 -print_final_stats=1 \
      >"$FUZZ_DIR/target/$target.log" 2>&1
}
jobs=${FUZZ_JOBS:-$(nproc)}
for ((i = 0; i < ${#TARGETS[@]}; i += jobs)); do
  batch=("${TARGETS[@]:i:jobs}")
  pids=()
  for target in "${batch[@]}"; do
    echo "==> fuzzing $target for ${SECONDS_PER_TARGET}s"
    fuzz_one "$target" &
    pids+=($!)
  done
  for k in "${!batch[@]}"; do
    target=${batch[k]}
    log="$FUZZ_DIR/target/$target.log"
    if ! wait "${pids[k]}"; then
      tail -n 60 "$log"
      echo "fuzz target $target failed; its log is $log, the input under $FUZZ_DIR/artifacts/$target/" >&2
      wait
      exit 1
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    edges=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
    echo "    $target: no crash: $runs runs, $rate runs/s, $edges coverage edges"
  done
done
