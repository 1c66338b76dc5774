#!/usr/bin/env bash
# Runs the GPU tests and the GPU benchmark on a CUDA machine, in one call,
# from the repository root, with binaries built elsewhere:
#
#   .carry/stoker        the stoker binary (cargo build --release)
#   .carry/integration   the integration test binary (cargo test --release --no-run)
#   .carry/photos/       the photos (../shared/photos); procedural JPEGs without
#
# Build and stage them with `scripts/gpu-check.sh --stage` on the build machine.
# Full logs go to $OUT (or ./gpu-check-out); a short table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--stage" ]]; then
    set -e
    cargo build --release --bin stoker
    bin=$(cargo test --release --no-run -p stoker-server --test integration --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "integration":
        print(m["executable"])')
    mkdir -p .carry/photos
    strip -o .carry/stoker target/release/stoker
    strip -o .carry/integration "$bin"
    cp ../shared/photos/*.jpg .carry/photos/ 2>/dev/null || true
    du -sh .carry
    exit 0
fi

out=${OUT:-gpu-check-out}
mkdir -p "$out"
work=$(mktemp -d)
for d in /usr/local/cuda/lib64 /usr/local/cuda-13.0/targets/x86_64-linux/lib /usr/local/nvidia/lib64; do
    [[ -d $d ]] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
done
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | sed 's/^/gpu: /'

export STOKER_BIN=$PWD/.carry/stoker STOKER_PHOTOS=$PWD/.carry/photos STOKER_GPU_BENCH_DIR=$work/bench
chmod +x .carry/stoker .carry/integration 2>/dev/null
.carry/integration gpu device --test-threads 1 --nocapture 2>&1 | tee "$out/gpu-tests.log"
tests_rc=${PIPESTATUS[0]}

# The worker's own report of the path it took.
STOKER_LOG=info timeout 20 .carry/stoker worker --listen 127.0.0.1:0 --device auto >/dev/null 2>"$out/worker-auto.log" &
sleep 5; kill %1 2>/dev/null; wait 2>/dev/null
grep -m1 -E "gpu|device" "$out/worker-auto.log" | sed 's/^/worker --device auto: /'

# Reference: torchvision's GPU decode alone, on the same JPEGs.
PYTHONUNBUFFERED=1 timeout 120 python3 - "$work/bench" <<'PY' 2>&1 | tee "$out/torchvision.log"
import glob, sys, time
import torch, torchvision
from torchvision.io import decode_jpeg
files = sorted(glob.glob(sys.argv[1] + "/*.jpg"))
datas = [torchvision.io.read_file(f) for f in files]
for batch in (64, 128, 256):
    chunks = [datas[i:i + batch] for i in range(0, len(datas), batch)]
    for c in chunks:
        decode_jpeg(c, device="cuda")
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 1.5:
        for c in chunks:
            decode_jpeg(c, device="cuda")
        torch.cuda.synchronize()
        n += len(datas)
    print(f"torchvision-bench batch={batch:<4} jpegs={len(datas)} decode_jpeg(cuda)={n / (time.perf_counter() - t0):.0f} img/s (torch {torch.__version__})")
PY

# Memory checking of the decode + kernel comparison.
if command -v compute-sanitizer >/dev/null; then
    timeout 180 compute-sanitizer --tool memcheck .carry/integration gpu_decode_and_train_crop_match --test-threads 1 \
        >"$out/memcheck.log" 2>&1
    echo "memcheck: $(grep -m1 'ERROR SUMMARY' "$out/memcheck.log" || tail -n 2 "$out/memcheck.log")"
fi

echo
echo "=== gpu-check summary ==="
grep -E "^test result|^gpu-vs-cpu worst|^decoded " "$out/gpu-tests.log"
awk '/^gpu-backends/ { if ($NF > m) m = $NF } END { if (m != "") printf "cuda vs hardware backend decode, worst mad %s\n", m }' "$out/gpu-tests.log"
grep -E "^skipped" "$out/gpu-tests.log"
printf '%-12s %-6s %-12s %s\n' what batch images/s note
grep -E "^gpu-bench batch" "$out/gpu-tests.log" | sed -E 's/.*batch=([0-9]+).*backend=([a-z]+) decode-only=([0-9]+).*train-pipeline=([0-9]+).*/nvjpeg      \1 \3 decode only (\2)\nstoker-gpu  \1 \4 decode+rrc224+flip+d2h/' |
    awk '{printf "%-12s %-6s %-12s %s %s %s\n", $1, $2, $3, $4, $5, $6}'
grep -E "^gpu-bench-cuda" "$out/gpu-tests.log" | sed -E 's/.*batch=([0-9]+).*decode-only=([0-9]+).*/nvjpeg \1 \2/' |
    awk '{printf "%-12s %-6s %-12s decode only (cuda backend)\n", $1, $2, $3}'
grep -E "^torchvision-bench" "$out/torchvision.log" | sed -E 's/.*batch=([0-9]+).*=([0-9]+) img.*/torchvision \1 \2/' |
    awk '{printf "%-12s %-6s %-12s decode_jpeg(cuda) only\n", $1, $2, $3}'
grep -E "^gpu-bench device memory" "$out/gpu-tests.log"
rm -rf "$work"
exit "$tests_rc"
