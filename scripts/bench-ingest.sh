#!/usr/bin/env bash
# Client ingest on this machine: one `stoker worker --replay` (results
# cached after a warm-up epoch, so the worker only sends) and `stoker
# stream` into host memory, on loopback. Reports, as medians of ROUNDS runs,
# the rate and the client's own CPU time per GB received (user + system,
# from /usr/bin/time): the cost that decides how many cores a training
# job must give its loader. The GPU version runs in scripts/gpu-check.sh.
#
#   scripts/bench-ingest.sh [ROUNDS]     (default 5; builds the release binary)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
cargo build --release --quiet --bin stoker
bin=$PWD/target/release/stoker
work=$(mktemp -d)
trap 'kill $wpid 2>/dev/null; rm -rf "$work"' EXIT
"$bin" synth --output "$work/imgs" --images 512 --classes 4 >/dev/null 2>&1
"$bin" pack --input "$work/imgs" --output "$work/shards" --shard-size 4M >/dev/null 2>&1
"$bin" worker --listen 127.0.0.1:0 --threads 2 --replay >"$work/worker.out" 2>"$work/worker.log" &
wpid=$!
for _ in $(seq 100); do grep -q listening "$work/worker.out" 2>/dev/null && break; sleep 0.1; done
addr=$(sed -n 's/.*listening on //p' "$work/worker.out")
run() {
    /usr/bin/time -f "%U %S" -o "$work/time" "$bin" stream --workers "$addr" --dataset "$work/shards" \
        --batch-size 256 --image-size 224 --epochs "$1" --json 2>/dev/null | tail -n 1 >"$work/summary"
}
run 1 # warm-up: fills the worker's replay cache
for r in $(seq "$rounds"); do
    run 16
    python3 - "$work/summary" "$work/time" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
user, system = map(float, open(sys.argv[2]).read().split()[-2:])
gb = s["bytes"] / 1e9
print(json.dumps({"gb_per_s": s["bytes_per_sec"] / 1e9, "images_per_s": s["images_per_sec"],
                  "client_cpu_s_per_gb": (user + system) / gb, "gb": gb}))
PY
done | tee "$work/rounds.jsonl"
python3 - "$work/rounds.jsonl" "$(nproc)" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda k: statistics.median(r[k] for r in rows)
print(f"client ingest into host memory, {len(rows)} runs of {rows[0]['gb']:.2f} GB, worker and client on {sys.argv[2]} cores:")
print(f"  median {med('gb_per_s'):.2f} GB/s ({med('images_per_s'):.0f} images/s of 224x224x3), "
      f"client CPU {med('client_cpu_s_per_gb'):.2f} s per GB received")
PY
