#!/usr/bin/env bash
# Where the GPU time goes when Stoker feeds training on the training GPU:
# scripts/bench-train.sh's synthetic case and a Stoker case (by default
# stoker-local, the README's `workers="local"`: GPU lanes in the trainer's
# process), each with its measured steps recorded by torch.profiler
# (Kineto/CUPTI, which sees every kernel in the process, nvJPEG's and
# Stoker's included), then a table of the two side by side
# (scripts/train_profile.py): the training step's kernel time with and
# without Stoker, the GPU's idle time, each Stoker and nvJPEG kernel's
# launches and GPU time per image, and the samples each worker made; and
# how the lanes decode the dataset's JPEGs (hardware engine, CUDA backend,
# CPU), from `stoker bench --gpu-only` over the same files.
#
# Run it on the GPU machine from the repository root, with what
# scripts/bench-train.sh needs (`scripts/gpu-check.sh --stage`):
#
#   scripts/profile-train.sh                  # table last; JSON and logs in $OUT
#
# Settings (environment): PROFILE_TRAIN_CASE (stoker-local; any case of
# bench-train.sh), PROFILE_TRAIN_STEPS (40 profiled steps, after bench-train's
# warm-up), and bench-train.sh's own.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-profile-train-out}
mkdir -p "$out"
case=${PROFILE_TRAIN_CASE:-stoker-local}
OUT=$out BENCH_TRAIN_PROFILE=1 BENCH_TRAIN_ROUNDS=1 BENCH_TRAIN_SECONDS=0 \
    BENCH_TRAIN_STEPS=${PROFILE_TRAIN_STEPS:-40} BENCH_TRAIN_CASES="synthetic $case" \
    scripts/bench-train.sh >"$out/bench-train.log" 2>&1
rc=$?
for f in "$out/profile-synthetic-1.json" "$out/profile-$case-1.json"; do
    [[ -s $f ]] || { tail -n 20 "$out/bench-train.log"; echo "profile-train: $f was not written (rc $rc)" >&2; exit 1; }
done
grep '^train ' "$out/bench-train.log"
sed "s/^/the dataset's JPEGs on the lanes (stoker bench --gpu-only): /" "$out/decode-paths.txt" 2>/dev/null
echo
python3 scripts/train_profile.py "$out/profile-synthetic-1.json" "$out/profile-$case-1.json" "$case" | tee "$out/profile.md"
