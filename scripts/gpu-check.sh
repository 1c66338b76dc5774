#!/usr/bin/env bash
# Runs the GPU tests and the GPU benchmark on a CUDA machine, in one call,
# from the repository root, with binaries built elsewhere:
#
#   .carry/stoker        the stoker binary (cargo build --release --features failpoints)
#   .carry/integration   the integration test binary (cargo test --release --no-run,
#                        the same features)
#   .carry/photos/       the photos (../shared/photos); procedural JPEGs without
#
# Build and stage them with `scripts/gpu-check.sh --stage` on the build machine;
# it also packs them into .carry-xz/carry.tar.xz, which is what to carry to
# the device (under its 64 MiB limit), and which this script unpacks.
# Full logs go to $OUT (or ./gpu-check-out); a short table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--stage" ]]; then
    set -e
    # With the fault-injection points, as scripts/test.sh builds them: the
    # GPU lanes' panic test needs them (they cost nothing unless set).
    cargo build --release --bin stoker --features failpoints
    bin=$(cargo test --release --no-run -p stoker --test integration --features failpoints --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "integration":
        print(m["executable"])')
    mkdir -p .carry/photos
    strip -o .carry/stoker target/release/stoker
    strip -o .carry/integration "$bin"
    cp ../shared/photos/*.jpg .carry/photos/ 2>/dev/null || true
    # The Python package as an abi3 wheel, for the torch check: built by
    # scripts/wheel.sh, which reuses this workspace's release build.
    rm -rf .carry/wheels
    mkdir -p .carry/wheels
    cp "$(scripts/wheel.sh | tail -n 1)" .carry/wheels/
    du -sh .carry
    # The device takes at most 64 MiB of carried files: .carry itself is
    # larger (the binaries hold the parquet and arrow readers), so it also
    # goes compressed. Carry .carry-xz; this script unpacks it there.
    rm -rf .carry-xz
    mkdir -p .carry-xz
    tar -cf - .carry | xz -T0 -6 >.carry-xz/carry.tar.xz
    du -sh .carry-xz
    exit 0
fi

if [[ ! -x .carry/stoker && -f .carry-xz/carry.tar.xz ]]; then
    tar -xJf .carry-xz/carry.tar.xz
fi

# The panic tests need the worker's fault-injection points: a stoker built
# without them ignores FAILPOINTS (and a PNG meant to panic arrives).
if ! grep -q stoker-decode-panic .carry/stoker; then
    echo "gpu-check: .carry/stoker has no failpoints: stage it with scripts/gpu-check.sh --stage" >&2
    exit 1
fi

out=${OUT:-gpu-check-out}
mkdir -p "$out"
work=$(mktemp -d)
for d in /usr/local/cuda/lib64 /usr/local/cuda-13.0/targets/x86_64-linux/lib /usr/local/nvidia/lib64; do
    [[ -d $d ]] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
done
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | sed 's/^/gpu: /'

# The tests find their helper files (tests/python/...) in this checkout,
# not under the build machine's path compiled into the binary.
export STOKER_REPO_ROOT=$PWD
# Here a GPU test that finds no usable GPU fails instead of skipping.
export STOKER_REQUIRE=gpu
export STOKER_BIN=$PWD/.carry/stoker STOKER_PHOTOS=$PWD/.carry/photos STOKER_GPU_BENCH_DIR=$work/bench
# The integration tests' Python: the machine's own (pillow, numpy; tests that need
# webdataset's writer fall back to the standard library's tarfile there).
export STOKER_TEST_PYTHON=${STOKER_TEST_PYTHON:-$(command -v python3)}
chmod +x .carry/stoker .carry/integration 2>/dev/null

# The lanes (two, every transform of the core set), the decoder's
# single-image path on busy lanes, and the hand-over of the lanes' images
# on the device to a loader in the same process (the uploader's copies
# alone, then an in-process worker end to end), under each of
# compute-sanitizer's tools;
# memcheck also tracks stream-ordered allocations (a write from a stream
# not ordered after the allocation). About 4 minutes: the whole check runs
# it (GPU_CHECK_SANITIZE_LANES=0 leaves it out), and
# `scripts/gpu-check.sh --sanitize-lanes` runs it alone.
sanitize_lanes() {
    for tool in memcheck racecheck synccheck; do
        extra=()
        tests=(gpu_runner_matches_the_cpu_on_every_transform gpu_single_decodes_on_busy_lanes
            client_device_takes_images_left_on_the_device gpu_handoff_leaves_the_lanes_images_on_the_loaders_device)
        [[ $tool == memcheck ]] && extra=(--track-stream-ordered-races all)
        # racecheck loses track of nvJPEG's kernel launches from four
        # threads at once ("Internal Sanitizer Error: ... failure to track
        # a kernel launch", then no end): the lanes' kernels and the
        # uploader's copies only.
        [[ $tool == racecheck ]] && tests=(gpu_runner_matches_the_cpu_on_every_transform
            client_device_takes_images_left_on_the_device)
        STOKER_GPU_PARITY_ROUNDS=1 STOKER_GPU_PARITY_IMAGES=24 timeout 240 compute-sanitizer --tool "$tool" "${extra[@]}" \
            .carry/integration "${tests[@]}" --test-threads 1 >"$out/sanitizer-lanes-$tool.log" 2>&1
        echo "$tool lanes: $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer-lanes-$tool.log" || tail -n 2 "$out/sanitizer-lanes-$tool.log") ($(grep -m1 '^test result' "$out/sanitizer-lanes-$tool.log"))"
    done
}
if [[ "${1:-}" == "--sanitize-lanes" ]]; then
    sanitize_lanes 2>&1 | tee "$out/sanitizer-lanes.log"
    ! grep -qE "ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]|test result: FAILED" "$out"/sanitizer-lanes-*.log
    exit
fi
# The parity tests (tests/integration/gpu_parity.rs) repeat their GPU-vs-CPU
# comparison: a race that wrongs one decode in hundreds must fail here.
export STOKER_GPU_PARITY_ROUNDS=${GPU_CHECK_PARITY_ROUNDS:-10}
.carry/integration gpu device --test-threads 1 --nocapture 2>&1 | tee "$out/gpu-tests.log"
tests_rc=${PIPESTATUS[0]}

# The worker's own report of the path it took.
STOKER_LOG=info timeout 20 .carry/stoker worker --listen 127.0.0.1:0 --device auto >/dev/null 2>"$out/worker-auto.log" &
sleep 5; kill %1 2>/dev/null; wait 2>/dev/null
grep -m1 -E "gpu|device" "$out/worker-auto.log" | sed 's/^/worker --device auto: /'

# Benchmarks, side by side in one run, alternating rounds; medians below.
# Images: ImageNet-like 500x375 JPEGs cut from the photos (procedural ones
# without photos), written once and read by every contender; 8,192 of them,
# so that an epoch of `stoker stream` (32 shards of 8 MB... a hundred) is
# long enough for its start and tail not to decide the rate.
rounds=${GPU_CHECK_ROUNDS:-3}
nimages=${GPU_CHECK_IMAGES:-8192}
imgs=$work/imgs
.carry/stoker synth --output "$imgs" --images "$nimages" --classes 8 --quality 95 --photos .carry/photos >"$out/synth.log" 2>&1 ||
    .carry/stoker synth --output "$imgs" --images "$nimages" --classes 8 >>"$out/synth.log" 2>&1
du -sh "$imgs" | sed "s/^/bench images: $nimages jpegs, /"
bench=$out/bench.jsonl
: >"$bench"
cores=$(nproc)
# Passes of about 50,000 images for the GPU, 8,000 per core for the CPU.
gpu_passes=$(((50000 + nimages - 1) / nimages))
for r in $(seq "$rounds"); do
    for b in 128 256; do
        timeout 120 python3 scripts/bench_torch.py decode "$imgs" "$b" 3 >>"$bench" 2>>"$out/torch.log"
    done
    # The GPU worker's pipeline: the whole host (GPU lanes, and CPU threads
    # taking JPEGs while the lanes have a backlog), then the GPU alone.
    timeout 120 .carry/stoker bench --device cuda --input "$imgs" --passes "$gpu_passes" \
        >>"$bench" 2>>"$out/stoker-bench.log"
    timeout 120 .carry/stoker bench --device cuda --gpu-only --input "$imgs" --passes "$gpu_passes" \
        >>"$bench" 2>>"$out/stoker-bench.log"
    timeout 120 .carry/stoker bench --device cpu --input "$imgs" --passes 1 --threads "$cores" \
        >>"$bench" 2>>"$out/stoker-bench.log"
    timeout 300 python3 scripts/bench_torch.py dataloader "$imgs" 224 $((cores - 1)) 1 >>"$bench" 2>>"$out/torch.log"
done
grep -h "^decoded on" "$out/stoker-bench.log" | tail -n 2 | sed 's/^/stoker bench --device cuda: /'

# End to end: `stoker stream`, default flags, from one worker on this host
# (GPU, then CPU): a warm-up epoch, then 4 measured; then two clients at
# once on the GPU worker.
.carry/stoker pack --input "$imgs" --output "$work/shards" --shard-size 8M >"$out/pack.log" 2>&1
# A worker stopped by a signal must exit 0 (a GPU worker once segfaulted at
# exit: lanes freeing CUDA resources while the libraries tore down).
exits_rc=0
worker_exit() { # what, exit status
    echo "worker-exit: $1 exited $2 on its stop signal" | tee -a "$out/worker-exits.log"
    [[ $2 == 0 ]] || exits_rc=1
}
stream_json() { # label, stream arguments...
    local label=$1
    shift
    timeout 300 .carry/stoker stream --dataset "$work/shards" --batch-size 256 --image-size 224 --json "$@" 2>>"$out/stream.log" |
        tail -n 1 | python3 -c "import json,sys; r=json.load(sys.stdin); r['what']='$label'; print(json.dumps(r))"
}
for device in cuda cpu; do
    STOKER_LOG=info .carry/stoker worker --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --device "$device" \
        >"$work/worker.out" 2>"$out/worker-$device.log" &
    wpid=$!
    for _ in $(seq 100); do grep -q listening "$work/worker.out" 2>/dev/null && break; sleep 0.2; done
    addr=$(sed -n 's/.*listening on //p' "$work/worker.out")
    timeout 120 .carry/stoker stream --workers "$addr" --dataset "$work/shards" --batch-size 256 --image-size 224 \
        --epochs 1 >/dev/null 2>>"$out/stream.log"
    stream_json "stoker stream, one $device worker" --workers "$addr" --epochs 4 >>"$bench"
    if [[ $device == cuda ]]; then
        stream_json "stoker stream, two clients on one cuda worker: client A" --workers "$addr" --epochs 4 >"$work/a.json" &
        apid=$!
        stream_json "stoker stream, two clients on one cuda worker: client B" --workers "$addr" --epochs 4 >"$work/b.json"
        wait $apid
        cat "$work/a.json" "$work/b.json" >>"$bench"
    fi
    # The worker's own metrics after 1 + 4 (+ 2 x 4) epochs: every sample
    # sent was decoded on the GPU or the CPU, once.
    murl=$(sed -n 's/.*metrics on //p' "$work/worker.out")
    epochs=$([[ $device == cuda ]] && echo 13 || echo 5)
    python3 - "$murl" "$device" $((epochs * nimages)) <<'PY' 2>&1 | tee -a "$out/worker-metrics.log"
import re, sys, urllib.request
url, device, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
text = urllib.request.urlopen(url, timeout=10).read().decode()
m = {}
for line in text.splitlines():
    if line and not line.startswith("#"):
        series, value = line.rsplit(" ", 1)
        m[series] = float(value)
g = lambda s: m.get(s, 0.0)
sent, gpu, cpu = g("stoker_worker_samples_sent_total"), g('stoker_worker_samples_total{path="gpu"}'), g('stoker_worker_samples_total{path="cpu"}')
batches = g('stoker_worker_stage_seconds_count{stage="gpu_batch"}')
mean_ms = 1e3 * g('stoker_worker_stage_seconds_sum{stage="gpu_batch"}') / max(batches, 1)
reserved = g('stoker_worker_gpu_memory_bytes{state="reserved"}')
ok = sent == expected and gpu + cpu == sent and (device == "cpu" or gpu > 0)
print(f"worker-metrics {device}: {'ok' if ok else 'MISMATCH'}: sent {sent:.0f} of {expected} expected, gpu {gpu:.0f}, cpu {cpu:.0f}, "
      f"gpu batches {batches:.0f} (mean {mean_ms:.1f} ms), gpu memory reserved {reserved / 2**20:.0f} MiB")
sys.exit(0 if ok else 1)
PY
    [[ ${PIPESTATUS[0]} == 0 ]] || exits_rc=1
    if [[ $device == cuda ]]; then
        # stoker doctor against the GPU worker, the client stage uploading
        # to this GPU (after the metrics check: its items are counted too).
        timeout 120 .carry/stoker doctor --workers "$addr" --dataset "$work/shards" --batch-size 256 \
            --image-size 224 --device cuda --normalize --seconds 2 2>&1 | tee "$out/doctor.log" | sed 's/^/doctor: /'
    fi
    kill -INT $wpid; wait $wpid 2>/dev/null
    worker_exit "$device worker" $?
    grep -h "worker stopped" "$out/worker-$device.log" | sed "s/^.*worker stopped/$device worker stopped:/"
done

# Every shard format through one GPU worker: the same images packed as
# TFRecord, RecordIO and Parquet, one epoch each with --keys-out; each must
# deliver every image once, and the worker's metrics must show the JPEGs
# decoded on the GPU (the formats share the pipeline after the reader).
STOKER_LOG=info .carry/stoker worker --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --device cuda \
    >"$work/worker.out" 2>"$out/worker-formats.log" &
wpid=$!
for _ in $(seq 100); do grep -q listening "$work/worker.out" 2>/dev/null && break; sleep 0.2; done
addr=$(sed -n 's/.*listening on //p' "$work/worker.out")
murl=$(sed -n 's/.*metrics on //p' "$work/worker.out")
for format in tfrecord recordio parquet; do
    .carry/stoker pack --input "$imgs" --output "$work/$format" --shard-size 8M --format "$format" >>"$out/pack.log" 2>&1
    timeout 120 .carry/stoker stream --workers "$addr" --dataset "$work/$format" --batch-size 256 --image-size 224 \
        --keys-out "$work/$format.keys" --json 2>>"$out/stream.log" | tail -n 1 >"$work/$format.json"
    python3 - "$format" "$work/$format.keys" "$work/$format.json" "$nimages" <<'PY' 2>&1 | tee -a "$out/formats.log"
import json, sys
fmt, keys_path, json_path, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
keys = [line.split("\t")[1] for line in open(keys_path) if line.strip()]
summary = json.load(open(json_path))
ok = len(keys) == n and len(set(keys)) == n and summary["skipped"] == 0
print(f"format {fmt}: {'ok' if ok else 'MISMATCH'}: {len(set(keys))} distinct of {len(keys)} delivered, {n} expected, "
      f"{summary['skipped']} skipped, {summary['images_per_sec']:.0f} images/s")
sys.exit(0 if ok else 1)
PY
    [[ ${PIPESTATUS[0]} == 0 ]] || exits_rc=1
done
python3 - "$murl" $((3 * nimages)) <<'PY' 2>&1 | tee -a "$out/formats.log"
import sys, urllib.request
url, expected = sys.argv[1], int(sys.argv[2])
m = {}
for line in urllib.request.urlopen(url, timeout=10).read().decode().splitlines():
    if line and not line.startswith("#"):
        series, value = line.rsplit(" ", 1)
        m[series] = float(value)
sent, gpu, cpu = m["stoker_worker_samples_sent_total"], m['stoker_worker_samples_total{path="gpu"}'], m['stoker_worker_samples_total{path="cpu"}']
ok = sent == expected and gpu + cpu == sent and gpu > 0
print(f"formats worker-metrics: {'ok' if ok else 'MISMATCH'}: sent {sent:.0f} of {expected}, gpu {gpu:.0f}, cpu {cpu:.0f}")
sys.exit(0 if ok else 1)
PY
[[ ${PIPESTATUS[0]} == 0 ]] || exits_rc=1
kill -INT $wpid; wait $wpid 2>/dev/null
worker_exit "formats cuda worker" $?

# Client ingest: workers replaying cached samples (--replay: each shard is
# processed once, then resent from memory), so only transport, batch
# assembly in the pinned ring, the copy to the GPU and the bfloat16 NCHW
# normalising conversion are measured. A warm-up epoch per worker fills
# its cache; 6 epochs of 8,192 images (7.4 GB) per measured run.
for n in 1 2; do
    addrs=()
    pids=()
    for i in $(seq "$n"); do
        .carry/stoker worker --listen 127.0.0.1:0 --device cpu --threads 4 --replay >"$work/replay$i.out" 2>>"$out/replay-workers.log" &
        pids+=($!)
    done
    for i in $(seq "$n"); do
        for _ in $(seq 100); do grep -q listening "$work/replay$i.out" 2>/dev/null && break; sleep 0.2; done
        addrs+=("$(sed -n 's/.*listening on //p' "$work/replay$i.out")")
    done
    list=$(IFS=,; echo "${addrs[*]}")
    # Each worker caches only what it processed: warm each one on the
    # whole dataset, so that later items find their results wherever they go.
    for a in "${addrs[@]}"; do
        timeout 120 .carry/stoker stream --workers "$a" --dataset "$work/shards" --batch-size 256 --image-size 224 \
            --epochs 1 >/dev/null 2>>"$out/ingest.log"
    done
    for dev in cuda cpu; do
        timeout 120 .carry/stoker stream --workers "$list" --dataset "$work/shards" --batch-size 256 --image-size 224 \
            --epochs 6 --device "$dev" --dtype bfloat16 --normalize --json 2>>"$out/ingest.log" | tail -n 1 |
            python3 -c "import json,sys; r=json.load(sys.stdin); r['what']='client ingest into $dev ($n replay workers)'; print(json.dumps(r)); print(f\"ingest {r['what']}: {r['images_per_sec']:.0f} images/s, {r['bytes_per_sec']/1e9:.2f} GB/s, landed in {r['device']}\", file=sys.stderr)" >>"$bench" 2>>"$out/ingest-summary.log"
    done
    kill -TERM "${pids[@]}"; wait "${pids[@]}" 2>/dev/null
done
cat "$out/ingest-summary.log" 2>/dev/null

# The Python package's torch path: batches on the device, from a GPU worker.
if ls .carry/wheels/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target "$work/site" .carry/wheels/*.whl >"$out/pip.log" 2>&1
    # --gpu-only: the check compares two loads of the same samples, which
    # must decode on the same path both times (the CPU path differs from
    # nvJPEG by a grey level or so, and a whole-host worker may take a
    # sample on either).
    .carry/stoker worker --listen 127.0.0.1:0 --device cuda --gpu-only >"$work/worker.out" 2>"$out/worker-torch.log" &
    wpid=$!
    for _ in $(seq 100); do grep -q listening "$work/worker.out" 2>/dev/null && break; sleep 0.2; done
    addr=$(sed -n 's/.*listening on //p' "$work/worker.out")
    PYTHONPATH=$work/site timeout 120 python3 tests/python/torch_check.py "$addr" "$work/shards" 128 2>&1 | tee "$out/torch-check.log"
    kill -TERM $wpid; wait $wpid 2>/dev/null
    worker_exit "torch-check worker" $?
    # workers="local": the loader starts a GPU and a CPU worker itself.
    PYTHONPATH=$work/site timeout 300 python3 tests/python/local_gpu_check.py "$work/shards" "$nimages" 2>&1 |
        tee "$out/local-gpu-check.log"
    [[ ${PIPESTATUS[0]} == 0 ]] || { echo "gpu-check: local_gpu_check.py failed" >>"$out/worker-exits.log"; exits_rc=1; }
fi

# Memory checking of the decode + kernel comparison.
if command -v compute-sanitizer >/dev/null; then
    timeout 180 compute-sanitizer --tool memcheck .carry/integration gpu_decode_and_train_crop_match --test-threads 1 \
        >"$out/memcheck.log" 2>&1
    echo "memcheck: $(grep -m1 'ERROR SUMMARY' "$out/memcheck.log" || tail -n 2 "$out/memcheck.log")"
    # The step kernels: chains (rendered, and read through by the
    # crop-resize), bilinear and bicubic warps, Pillow's resampling, the
    # colour kernels.
    timeout 240 compute-sanitizer --tool memcheck .carry/integration gpu_chain gpu_colour --test-threads 1 \
        >"$out/memcheck-steps.log" 2>&1
    echo "memcheck step kernels: $(grep -m1 'ERROR SUMMARY' "$out/memcheck-steps.log" || tail -n 2 "$out/memcheck-steps.log")"
    # Masks and views on the lanes, in a GPU worker under the sanitizer:
    # the one-channel mask chains, a batch of mixed output sizes, Pillow's
    # resampling for a view. API errors are not reported: the worker's
    # probe asks for what a device may lack. Closing its standard input
    # stops it, and the sanitizer then prints its summary.
    python3 tests/python/write_masks.py "$work/seg" 64 jpg >/dev/null 2>>"$out/memcheck-parts.log"
    mkfifo "$work/mc-stdin"
    timeout 300 compute-sanitizer --tool memcheck --report-api-errors no .carry/stoker worker --listen 127.0.0.1:0 \
        --device cuda --gpu-only --gpu-batch 16 --stop-on-stdin-eof <"$work/mc-stdin" >"$work/mc-worker.out" \
        2>>"$out/memcheck-parts.log" &
    mc=$!
    exec 7>"$work/mc-stdin"
    for _ in $(seq 300); do grep -q listening "$work/mc-worker.out" 2>/dev/null && break; sleep 0.2; done
    maddr=$(sed -n 's/.*listening on //p' "$work/mc-worker.out")
    bicubic='{"ops": [{"op": "RandomResizedCrop", "size": 24, "interpolation": "bicubic"}]}'
    timeout 240 .carry/stoker stream --workers "$maddr" --dataset "$work/seg" --batch-size 16 --image-size 48 \
        --field mask=seg.png:mask --view g=train:32 --view "l=$bicubic" --json 2>>"$out/memcheck-parts.log" |
        tail -n 1 >"$work/mc-stream.json"
    exec 7>&-
    wait "$mc"
    # The sanitizer reports on its standard output, which the worker's
    # address shares.
    cat "$work/mc-worker.out" >>"$out/memcheck-parts.log"
    echo "memcheck masks and views (worker): $(grep -m1 'ERROR SUMMARY' "$work/mc-worker.out" || tail -n 2 "$out/memcheck-parts.log"); $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%d samples delivered, %d skipped" % (r["samples"], r["skipped"]))' "$work/mc-stream.json" 2>&1)"
    if [[ ${GPU_CHECK_SANITIZE_LANES:-1} != 0 ]]; then
        sanitize_lanes
    fi
    # The client's conversion kernels, every dtype and layout.
    timeout 120 compute-sanitizer --tool memcheck .carry/integration client_device_converts_every_dtype_and_layout \
        --test-threads 1 >"$out/memcheck-client.log" 2>&1
    echo "memcheck client convert: $(grep -m1 'ERROR SUMMARY' "$out/memcheck-client.log" || tail -n 2 "$out/memcheck-client.log")"
fi

# Every transform op against torchvision itself (torch and torchvision are
# on the GPU machine; CI uses PIL, torchvision's own backend), and the
# Python package's torchvision conversion and MixUp / CutMix on the device.
timeout 300 python3 tests/python/transform_oracle.py --oracle torchvision .carry/stoker "$work/oracle" \
    >"$out/transform-oracle.log" 2>&1
echo "transform-oracle: exit $? ($(tail -n 1 "$out/transform-oracle.log"))"
if [[ -d $work/site ]]; then
    PYTHONPATH=$work/site timeout 300 python3 tests/python/transforms_check.py --torchvision \
        >"$out/transforms-check.log" 2>&1
    echo "transforms-check --torchvision: exit $? ($(tail -n 1 "$out/transforms-check.log"))"
fi

# --- End-to-end training benchmark (scripts/bench-train.sh) -----------------
# A ResNet-18 bfloat16 training loop fed by a synthetic batch on the GPU (the
# upper bound), torch's DataLoader and Stoker workers; a table of "train ..."
# lines in the summary. Off by default: it takes minutes, and the whole of
# gpu-check must fit in one 10-minute device call. GPU_CHECK_TRAIN=1 runs it
# here for one round (about 2-3 minutes; BENCH_TRAIN_ROUNDS asks for more,
# GPU_CHECK_TRAIN_BUDGET, default 180 s, stops starting them), killed at that
# budget + 120 s. The full benchmark (3 rounds, medians) is better run as its
# own device call: `scripts/bench-train.sh`.
if [[ "${GPU_CHECK_TRAIN:-0}" != 0 ]]; then
    train_budget=${GPU_CHECK_TRAIN_BUDGET:-180}
    OUT=$out/train BENCH_TRAIN_BUDGET=$train_budget BENCH_TRAIN_ROUNDS=${BENCH_TRAIN_ROUNDS:-1} \
        timeout $((train_budget + 120)) bash scripts/bench-train.sh >"$out/bench-train.log" 2>&1
    echo "bench-train: exit $? (log $out/bench-train.log, details in $out/train/)"
fi
# --- end of the training benchmark -------------------------------------------

echo
echo "=== gpu-check summary ==="
grep -E "^test result|^gpu-vs-cpu worst|^gpu-worker|^gpu-decode-race:|^decoded |^client-upload|^gpu-steps" "$out/gpu-tests.log"
grep -hE "^transform oracle" "$out/transform-oracle.log" 2>/dev/null
tail -n 1 "$out/transforms-check.log" 2>/dev/null | sed 's/^/transforms-check: /'
cat "$out/worker-exits.log" 2>/dev/null
cat "$out/worker-metrics.log" 2>/dev/null
cat "$out/formats.log" 2>/dev/null
sed 's/^/doctor: /' "$out/doctor.log" 2>/dev/null
awk '/^gpu-backends/ { if ($NF > m) m = $NF } END { if (m != "") printf "cuda vs hardware backend decode, worst mad %s\n", m }' "$out/gpu-tests.log"
grep -E "^skipped" "$out/gpu-tests.log"
grep -hE "^torch package check|Error" "$out/torch-check.log" 2>/dev/null | tail -n 3
grep -h "gpu memory pool" "$out/stoker-bench.log" | tail -n 1
grep -hE "^train |^bench-train: .*(failed|stopping|missing|not importable|did not start)" "$out/bench-train.log" 2>/dev/null
python3 - "$bench" "$rounds" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
def name(r):
    if "what" in r:
        return r["what"]
    if r["device"] == "cpu":
        return f"stoker bench --device cpu --threads {r['threads']}"
    return "stoker bench --device cuda" + (" --gpu-only" if r.get("gpu_only") else "") + " (worker pipeline, rrc224+flip)"
by = {}
for r in rows:
    by.setdefault(name(r), []).append(r["images_per_sec"])
print(f"{'what':<72} {'n':>2} {'median img/s':>12}  all")
for k, v in by.items():
    print(f"{k:<72} {len(v):>2} {statistics.median(v):>12.0f}  {' '.join(f'{x:.0f}' for x in v)}")
def med(prefix):
    v = [x for k, xs in by.items() if k.startswith(prefix) for x in xs]
    return statistics.median(v) if v else None
g, t128, t256 = med("stoker bench --device cuda ("), med("torchvision decode_jpeg cuda batch=128"), med("torchvision decode_jpeg cuda batch=256")
gonly = med("stoker bench --device cuda --gpu-only")
c, d = med("stoker bench --device cpu"), med("torch DataLoader")
s1, a, b = med("stoker stream, one cuda worker"), med("stoker stream, two clients on one cuda worker: client A"), med("stoker stream, two clients on one cuda worker: client B")
if g and t128 and t256:
    best = max(t128, t256)
    print(f"ratio gpu worker, whole host / torchvision decode-only (best batch): {g / best:.2f}x")
if g and gonly and c:
    print(f"ratio gpu worker, whole host / (gpu only + cpu only): {g / (gonly + c):.2f}x")
if g and s1:
    print(f"ratio stoker stream, one client, default flags / stoker bench --device cuda: {s1 / g:.2f}x")
if g and a and b:
    print(f"ratio stoker stream, two clients together / stoker bench --device cuda: {(a + b) / g:.2f}x")
if c and d:
    print(f"ratio cpu worker (all cores) / torch DataLoader: {c / d:.2f}x")
PY
grep -h "^local-gpu" "$out/local-gpu-check.log" 2>/dev/null
# A sanitizer's error anywhere fails the check.
if grep -lE "ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]" "$out"/memcheck*.log "$out"/sanitizer-*.log 2>/dev/null; then
    echo "gpu-check: compute-sanitizer reported errors (the files above)"
    exits_rc=1
fi
rm -rf "$work"
(( tests_rc != 0 )) && exit "$tests_rc"
exit "$exits_rc"
