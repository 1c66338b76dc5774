#!/usr/bin/env bash
# End-to-end training benchmark on the GPU machine: a ResNet training loop
# (scripts/bench_train.py; ResNet-18, bfloat16, batch 256, 224x224)
# fed in turn by
#
#   synthetic     one batch already on the GPU, reused: the upper bound
#   dataloader    torch's DataLoader, $(nproc)-1 workers, pin_memory, over an
#                 ImageFolder of JPEGs
#   stoker-cpu    Stoker, CPU workers on this host (2 processes splitting all
#                 cores but $BENCH_TRAIN_TRAINER_CORES), dataset packed from
#                 the same ImageFolder; their samples come through the
#                 client's shared-memory ring (stoker-shm)
#   stoker-cpu-net  the same workers, everything over gRPC (--shared-memory 0)
#   stoker-replay Stoker, workers that resend cached results (--replay): no
#                 decode cost, so this is the client's ingest into training
#                 when the workers have the capacity
#   stoker-gpu    Stoker, one GPU worker on GPU 1 (only with 2+ GPUs)
#   stoker-gpu0   Stoker, one GPU worker on GPU 0, the training GPU itself:
#                 its JPEG engines are hardware of their own, beside the SMs
#                 that train (--gpu-only, so the host's cores stay the
#                 trainer's); through shared memory
#   stoker-gpu0-net the same worker, everything over gRPC
#   stoker-mix    the GPU worker on GPU 0 and the CPU workers together,
#                 through shared memory
#   stoker-inproc a GPU worker inside the training process
#                 (stoker.InProcessWorker, --gpu-only), on GPU 0 in the
#                 trainer's own CUDA context
#   stoker-inproc-mix  that worker and the 2 CPU workers, through shared memory
#   stoker-local  the README's line, Loader(workers="local"): the loader
#                 runs a GPU worker in the training process (its lanes on
#                 GPU 0, the trainer's context) and a CPU worker process
#                 of $(nproc)-1 threads, through shared memory
#   stoker-local-tN  the same with a CPU worker of N threads
#                 (local_threads=N), for the split between the lanes, the
#                 CPU worker and the trainer's own thread
#   stoker-local-smsS  the same with the lanes on S SMs (STOKER_LOCAL_GPU_SMS=S:
#                 a count, `all` or `auto`; `stoker-local` takes the default,
#                 auto), for the share a green context leaves the trainer
#   stoker-local-pinN  stoker-local with the training loop's threads pinned
#                 to N cores of their own after the warm-up, every Stoker
#                 thread (the lanes, the client's, the CPU worker's) to the
#                 others (bench_train.py --trainer-cores N)
#   CASE-high     any case with the lanes' and the uploader's streams at the
#                 device's highest priority (STOKER_GPU_PRIORITY=high)
#   CASE-noahead  any Stoker case with each epoch started only when the loop
#                 asks for it (STOKER_EPOCH_AHEAD=0), as before 2026-11-28
#   stoker-local-freeN  stoker-local with every Stoker thread kept off N cores,
#                 the training loop's threads left to the scheduler
#                 (bench_train.py --free-cores N)
#   dali          NVIDIA DALI in the training process on GPU 0 (mixed
#                 decoder with the crop window, resize, flip, normalise;
#                 $(nproc)-4 threads) over the same ImageFolder; only when
#                 DALI imports (its wheels unpacked under /tmp/dali/site from
#                 parts in /tmp/dp, as ../shared/GPU.md says)
#
# alternating the cases round by round, and prints a table of medians with
# each case's ratio to the upper bound, the fraction of wall time the loop
# waited for data and the fraction of GPU time idle between steps.
#
# Needs, from the repository root: .carry/stoker (the binary) and the stoker
# Python package, importable or as a wheel in .carry/wheels (both staged by
# `scripts/gpu-check.sh --stage`), .carry/photos/ (optional: procedural JPEGs
# without), torch and torchvision. Run it as one device call:
#
#   scripts/bench-train.sh                    # logs and results.jsonl in $OUT
#
# Settings (environment): BENCH_TRAIN_ROUNDS (2), BENCH_TRAIN_SECONDS (20:
# each case measures at least this long, so that an epoch boundary or a
# hiccup does not decide its figure), BENCH_TRAIN_STEPS (50 measured steps
# at least), BENCH_TRAIN_WARMUP (30), BENCH_TRAIN_ARCH
# (resnet18), BENCH_TRAIN_BATCH (256), BENCH_TRAIN_PREFETCH (8, Stoker's),
# BENCH_TRAIN_IMAGES (4096 distinct JPEGs), BENCH_TRAIN_COPIES (4),
# BENCH_TRAIN_TRAINER_CORES (2), BENCH_TRAIN_PROFILE (1: each case also
# writes where its GPU time went, profile-CASE-ROUND.json, through
# torch.profiler: scripts/profile-train.sh), BENCH_TRAIN_TRACE (1: each case
# also writes its steps' waits, gaps, compute and epochs, trace-CASE-ROUND.json),
# BENCH_TRAIN_CASES (a space-separated
# subset of the cases above; default: every case but the -net and mix
# ones), BENCH_TRAIN_CASE_TIMEOUT (100 seconds per
# training run), BENCH_TRAIN_BUDGET (450 seconds since the start: no round
# starts that would, at the last round's pace, end after it; the first always
# runs). The defaults fit one 10-minute device call: about a minute of set-up
# and 3 minutes a round (6 cases of about 30 s) on the two-H200 host.
set -uo pipefail
cd "$(dirname "$0")/.."

out=${OUT:-bench-train-out}
mkdir -p "$out"
rounds=${BENCH_TRAIN_ROUNDS:-2}
seconds=${BENCH_TRAIN_SECONDS:-20}
steps=${BENCH_TRAIN_STEPS:-50}
warmup=${BENCH_TRAIN_WARMUP:-30}
arch=${BENCH_TRAIN_ARCH:-resnet18}
batch=${BENCH_TRAIN_BATCH:-256}
prefetch=${BENCH_TRAIN_PREFETCH:-8}
images=${BENCH_TRAIN_IMAGES:-4096}
copies=${BENCH_TRAIN_COPIES:-4}
trainer_cores=${BENCH_TRAIN_TRAINER_CORES:-2}
budget=${BENCH_TRAIN_BUDGET:-450}
case_timeout=${BENCH_TRAIN_CASE_TIMEOUT:-100}
stoker=$PWD/.carry/stoker
train=$PWD/scripts/bench_train.py
results=$out/results.jsonl
: >"$results"

work=$(mktemp -d)
pids=()
cleanup() {
    # The workers this script started, by pid.
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$work"
}
trap cleanup EXIT

for d in /usr/local/cuda/lib64 /usr/local/cuda-13.0/targets/x86_64-linux/lib /usr/local/nvidia/lib64; do
    [[ -d $d ]] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
done
chmod +x "$stoker" 2>/dev/null
[[ -x $stoker ]] || { echo "bench-train: $stoker is missing (scripts/gpu-check.sh --stage builds it)" >&2; exit 1; }
if ! python3 -c 'import stoker' 2>/dev/null; then
    if ls .carry/wheels/*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --target "$work/site" .carry/wheels/*.whl >"$out/pip.log" 2>&1
        export PYTHONPATH=$work/site${PYTHONPATH:+:$PYTHONPATH}
    fi
    python3 -c 'import stoker' 2>>"$out/pip.log" || { echo "bench-train: the stoker package is not importable (see $out/pip.log)" >&2; exit 1; }
fi

# DALI, when its bundle was brought (GPU.md): unpacked once.
if [[ ! -d /tmp/dali/site ]] && ls /tmp/dp/part-* >/dev/null 2>&1; then
    mkdir -p /tmp/dali && cat /tmp/dp/part-* | xz -d | tar -x -C /tmp/dali
fi
[[ -d /tmp/dali/site ]] && export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/dali/site
dali=no
python3 -c 'import nvidia.dali' >/dev/null 2>&1 && dali=yes

cores=$(nproc)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
{
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
    echo "cores: $cores"
    df -h /dev/shm | tail -n 1 | sed 's/^/shm: /'
    python3 -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)'
} >"$out/machine.log" 2>&1

# The dataset: $images distinct ImageNet-like JPEGs (500x375, quality 95) cut
# from the photos, drawn by 4 synth processes in parallel, each image then
# hard-linked $copies times under other names, so that an epoch is long
# (16,384 samples, 64 steps of 256 by default) and epoch boundaries, where
# both loaders restart their pipelines, weigh as little as they can in a
# short run. Every loader reads the same files from the page cache.
t_setup=$SECONDS
parts=4
for j in $(seq 0 $((parts - 1))); do
    ( "$stoker" synth --output "$work/parts/$j" --images $((images / parts)) --classes 8 --quality 95 \
        --seed "$j" --photos .carry/photos >"$out/synth-$j.log" 2>&1 ||
      "$stoker" synth --output "$work/parts/$j" --images $((images / parts)) --classes 8 --quality 95 \
        --seed "$j" >>"$out/synth-$j.log" 2>&1 ) &
done
wait
python3 - "$work/parts" "$work/imgs" "$copies" <<'PY' || exit 1
import os, sys
parts, dest, copies = sys.argv[1], sys.argv[2], int(sys.argv[3])
n = 0
for part in sorted(os.listdir(parts)):
    for cls in sorted(os.listdir(os.path.join(parts, part))):
        os.makedirs(os.path.join(dest, cls), exist_ok=True)
        for name in sorted(os.listdir(os.path.join(parts, part, cls))):
            for c in range(copies):
                os.link(os.path.join(parts, part, cls, name), os.path.join(dest, cls, f"p{part}c{c}_{name}"))
                n += 1
if n == 0:
    sys.exit("bench-train: synth wrote no images")
PY
"$stoker" pack --input "$work/imgs" --output "$work/shards" --shard-size 32M >"$out/pack.log" 2>&1 ||
    { echo "bench-train: stoker pack failed (see $out/pack.log)" >&2; exit 1; }
samples=$(find "$work/imgs" -name '*.jpg' | wc -l)
if [[ ${BENCH_TRAIN_PROFILE:-0} == 1 ]]; then
    # How the GPU lanes decode these JPEGs (hardware engine, CUDA backend,
    # handed to the CPU): a JPEG's path depends on the JPEG alone.
    CUDA_VISIBLE_DEVICES=0 timeout 120 "$stoker" bench --device cuda --gpu-only --input "$work/imgs" --passes 1 \
        >/dev/null 2>"$out/decode-paths.log"
    grep -h "^gpu decodes" "$out/decode-paths.log" | sed 's/ (all passes)//' >"$out/decode-paths.txt"
fi
echo "bench-train: $samples samples ($images distinct JPEGs x $copies), $(du -sh "$work/shards" | cut -f1) of shards; $(grep -m1 packed "$out/pack.log")" |
    tee "$out/setup.log"

# Starts a worker (the arguments after the log name) on a free port and sets
# $addr to its address (not printed: a $(...) subshell would lose its pid).
# It stays up for the whole run; `cleanup` stops it.
start_worker() {
    local name=$1
    shift
    # A short grace period: stopping the workers at the end takes no longer.
    "$@" --listen 127.0.0.1:0 --grace-period 2 >"$work/$name.out" 2>"$out/worker-$name.log" &
    pids+=($!)
    for _ in $(seq 150); do
        grep -q listening "$work/$name.out" 2>/dev/null && break
        kill -0 "${pids[-1]}" 2>/dev/null || break # exited: will not listen
        sleep 0.2
    done
    addr=$(sed -n 's/.*listening on //p' "$work/$name.out")
    [[ -n $addr ]] || echo "bench-train: worker $name did not start (see $out/worker-$name.log)" >&2
}

# CPU workers: two processes sharing every core but the trainer's.
wthreads=$(((cores - trainer_cores) / 2))
((wthreads < 1)) && wthreads=1
start_worker cpu0 "$stoker" worker --device cpu --threads "$wthreads"
cpu_workers=$addr
start_worker cpu1 "$stoker" worker --device cpu --threads "$wthreads"
cpu_workers=$cpu_workers,$addr
# Replay workers, warmed up one at a time with a full epoch each (the same
# shard ranges the training loop asks for: one rank, full batches), so that
# either holds every shard's results whichever it is given later.
replay_workers=""
replay_rounds="0 1"
# Not warmed up when no case uses them.
[[ -n ${BENCH_TRAIN_CASES:-} && " $BENCH_TRAIN_CASES " != *" stoker-replay "* ]] && replay_rounds=""
for i in $replay_rounds; do
    start_worker "replay$i" "$stoker" worker --device cpu --threads "$wthreads" --replay
    timeout 120 "$stoker" stream --workers "$addr" --dataset "$work/shards" --batch-size "$batch" --image-size 224 \
        --epochs 1 --drop-last >/dev/null 2>>"$out/replay-warmup.log"
    replay_workers=${replay_workers:+$replay_workers,}$addr
done
gpu_worker=""
if ((gpus >= 2)); then
    # Bash exports an assignment before a function call to what it runs.
    CUDA_VISIBLE_DEVICES=1 start_worker gpu "$stoker" worker --device cuda
    gpu_worker=$addr
fi
# On the training GPU: --gpu-only leaves the host's cores to the trainer.
CUDA_VISIBLE_DEVICES=0 start_worker gpu0 "$stoker" worker --device cuda --gpu-only
gpu0_worker=$addr
echo "bench-train: workers cpu $cpu_workers ($wthreads threads each), replay $replay_workers, gpu on GPU 1 ${gpu_worker:-none ($gpus GPU)}, gpu on GPU 0 ${gpu0_worker:-none}; setup $((SECONDS - t_setup)) s" |
    tee -a "$out/setup.log"

# One case: bench_train.py with the common flags plus the case's own; appends its
# JSON line, labelled, to results.jsonl.
run_case() {
    local case=$1 round=$2
    shift 2
    local log="$out/train-$case.log"
    echo "--- round $round: $case" >>"$log"
    local profile=()
    [[ ${BENCH_TRAIN_PROFILE:-0} == 1 ]] && profile=(--profile "$out/profile-$case-$round.json")
    [[ ${BENCH_TRAIN_TRACE:-0} == 1 ]] && profile+=(--trace "$out/trace-$case-$round.json")
    timeout "$case_timeout" python3 "$train" --arch "$arch" --batch-size "$batch" --image-size 224 --steps "$steps" \
        --seconds "$seconds" --warmup "$warmup" --dtype bfloat16 --json "${profile[@]}" "$@" 2>>"$log" | tee -a "$log" | grep '^{' | tail -n 1 |
        python3 -c "import json,sys
for l in sys.stdin:
    r = json.loads(l); r['case'] = '$case'; r['round'] = $round; print(json.dumps(r))" >>"$results"
    grep -q "\"case\": \"$case\", \"round\": $round}" "$results" || echo "bench-train: $case failed in round $round (see $log)" >&2
}

if [[ -n ${BENCH_TRAIN_CASES:-} ]]; then
    read -r -a cases <<<"$BENCH_TRAIN_CASES"
else
    cases=(synthetic dataloader stoker-cpu stoker-replay stoker-local)
    [[ -n $gpu_worker ]] && cases+=(stoker-gpu)
    [[ -n $gpu0_worker ]] && cases+=(stoker-gpu0)
fi
if [[ $dali == no && " ${cases[*]} " == *" dali "* ]]; then
    echo "bench-train: DALI does not import here: its case is left out" >&2
    read -r -a cases <<<"$(printf '%s\n' "${cases[@]}" | grep -vx dali | tr '\n' ' ')"
fi
t_bench=$SECONDS
last=0
done_rounds=0
for r in $(seq "$rounds"); do
    if ((r > 1 && SECONDS + last > budget)); then
        echo "bench-train: stopping after $done_rounds round(s): another (~${last} s) would pass the ${budget} s budget" >&2
        break
    fi
    t_round=$SECONDS
    for c in "${cases[@]}"; do
        # A case ending in -high: the same with the lanes' and the
        # uploader's streams at the device's highest priority; in -noahead,
        # with each epoch started only when the loop asks for it.
        base=${c%-noahead}
        if [[ $base != "$c" ]]; then export STOKER_EPOCH_AHEAD=0; else unset STOKER_EPOCH_AHEAD; fi
        stem=$base
        base=${stem%-high}
        if [[ $base != "$stem" ]]; then export STOKER_GPU_PRIORITY=high; else unset STOKER_GPU_PRIORITY; fi
        case $base in
        synthetic) run_case "$c" "$r" --loader synthetic ;;
        dataloader) run_case "$c" "$r" --loader dataloader --image-folder "$work/imgs" --dataloader-workers $((cores - 1)) ;;
        stoker-cpu) run_case "$c" "$r" --loader stoker --workers "$cpu_workers" --dataset "$work/shards" --prefetch "$prefetch" ;;
        stoker-cpu-net) run_case "$c" "$r" --loader stoker --workers "$cpu_workers" --dataset "$work/shards" --prefetch "$prefetch" --shared-memory 0 ;;
        stoker-gpu0-net) run_case "$c" "$r" --loader stoker --workers "$gpu0_worker" --dataset "$work/shards" --prefetch "$prefetch" --shared-memory 0 ;;
        dali) run_case "$c" "$r" --loader dali --image-folder "$work/imgs" --dali-threads $((cores > 5 ? cores - 4 : 1)) ;;
        stoker-inproc) run_case "$c" "$r" --loader stoker --in-process-worker "--device cuda --gpu-only" --dataset "$work/shards" --prefetch "$prefetch" ;;
        stoker-inproc-mix) run_case "$c" "$r" --loader stoker --in-process-worker "--device cuda --gpu-only" --workers "$cpu_workers" --dataset "$work/shards" --prefetch "$prefetch" ;;
        stoker-local) run_case "$c" "$r" --loader stoker --workers local --dataset "$work/shards" --prefetch "$prefetch" ;;
        stoker-local-t*) run_case "$c" "$r" --loader stoker --workers local --dataset "$work/shards" --prefetch "$prefetch" \
            --local-threads "${base#stoker-local-t}" ;;
        stoker-local-sms*) STOKER_LOCAL_GPU_SMS=${base#stoker-local-sms} run_case "$c" "$r" --loader stoker --workers local \
            --dataset "$work/shards" --prefetch "$prefetch" ;;
        stoker-local-pin*) run_case "$c" "$r" --loader stoker --workers local --dataset "$work/shards" --prefetch "$prefetch" \
            --trainer-cores "${base#stoker-local-pin}" ;;
        stoker-local-free*) run_case "$c" "$r" --loader stoker --workers local --dataset "$work/shards" --prefetch "$prefetch" \
            --free-cores "${base#stoker-local-free}" ;;
        stoker-mix) run_case "$c" "$r" --loader stoker --workers "$gpu0_worker,$cpu_workers" --dataset "$work/shards" --prefetch "$prefetch" ;;
        stoker-replay) run_case "$c" "$r" --loader stoker --workers "$replay_workers" --dataset "$work/shards" --prefetch "$prefetch" ;;
        stoker-gpu) run_case "$c" "$r" --loader stoker --workers "$gpu_worker" --dataset "$work/shards" --prefetch "$prefetch" ;;
        stoker-gpu0) run_case "$c" "$r" --loader stoker --workers "$gpu0_worker" --dataset "$work/shards" --prefetch "$prefetch" ;;
        esac
    done
    last=$((SECONDS - t_round))
    done_rounds=$r
done
echo "bench-train: $done_rounds round(s) in $((SECONDS - t_bench)) s, setup $((t_bench - t_setup)) s" | tee -a "$out/setup.log"

# The table: medians over the rounds; the ratio is the case's median over
# the synthetic median. Every line starts with "train " (gpu-check greps it).
python3 - "$results" "$cores" "${cases[@]}" <<'PY' | tee "$out/summary.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cores, cases = int(sys.argv[2]), sys.argv[3:]
names = {
    "synthetic": "synthetic batch on the GPU (upper bound)",
    "dataloader": f"torch DataLoader, {cores - 1} workers, pin_memory",
    "stoker-cpu": "stoker, 2 CPU workers on this host, shm",
    "stoker-cpu-net": "stoker, 2 CPU workers on this host, grpc",
    "stoker-gpu0-net": "stoker, GPU worker on GPU 0, grpc",
    "stoker-mix": "stoker, GPU worker on GPU 0 + 2 CPU workers, shm",
    "stoker-inproc": "stoker, in-process GPU worker on GPU 0",
    "stoker-inproc-mix": "stoker, in-process GPU worker + 2 CPU workers",
    "stoker-local": 'stoker, workers="local" (in-process GPU + CPU)',
    "dali": f"DALI in-process on GPU 0, {max(cores - 4, 1)} threads",
    "stoker-replay": "stoker, 2 replay workers (no decode)",
    "stoker-gpu": "stoker, 1 GPU worker on GPU 1",
    "stoker-gpu0": "stoker, GPU worker on GPU 0 (the trainer's), shm",
}
def derived(case):
    for prefix, what in (("stoker-local-t", 'CPU worker {} threads'), ("stoker-local-pin", "trainer on {} core(s) of its own"),
                         ("stoker-local-free", "Stoker off {} core(s)"), ("stoker-local-sms", "lanes on {} SMs")):
        if case.startswith(prefix):
            return 'stoker, workers="local", ' + what.format(case[len(prefix):])
    return names.get(case, case)
for case in cases:
    base, extra = case, ""
    if base.endswith("-noahead"):
        base, extra = base[:-len("-noahead")], ", epochs not started ahead" + extra
    if base.endswith("-high"):
        base, extra = base[:-len("-high")], ", high prio" + extra
    names[case] = derived(base) + extra
by = {}
for r in rows:
    by.setdefault(r["case"], []).append(r)
if not rows:
    print("train no results (see the train-*.log files)")
    sys.exit(0)
first = rows[0]
print(f"train {first['arch']} {first['dtype']}, batch {first['batch_size']}, {first['image_size']}px, "
      f"at least {min(r['seconds'] for r in rows):.0f} s of measured steps per case after {first['warmup']}, on {first['gpu']}")
print(f"train {'case':<44} {'n':>2} {'images/s':>9} {'x upper':>8} {'host wait':>10} {'gpu idle':>9}  per round")
upper = statistics.median(r["images_per_sec"] for r in by["synthetic"]) if "synthetic" in by else None
for case in cases:
    label, rs = names[case], by.get(case)
    if not rs:
        print(f"train {label:<44} failed in every round: see train-{case}.log")
        continue
    ips = statistics.median(r["images_per_sec"] for r in rs)
    wait = statistics.median(r["wait_fraction"] for r in rs)
    idle = statistics.median(r["gpu_idle_fraction"] for r in rs)
    ratio = f"{ips / upper:.2f}x" if upper else "-"
    each = " ".join(f"{r['images_per_sec']:.0f}" for r in rs)
    print(f"train {label:<44} {len(rs):>2} {ips:>9.0f} {ratio:>8} {100 * wait:>9.1f}% {100 * idle:>8.1f}%  {each}")
for case, rs in by.items():
    up = {r["config"].get("client_upload") for r in rs} - {None}
    if False in up:
        print(f"train note: {case} had no client upload (batches copied by torch); see its log")
PY
