# The compose cluster's one-shot `fill` job (deploy/compose.yaml), run by
# bash in the worker image:
#  1. the token workers and trainer share, in the `secrets` volume:
#     $STOKER_TOKEN when set, else 24 random bytes, made once;
#  2. a demo dataset at $STOKER_DATASET: $STOKER_DEMO_IMAGES procedural
#     JPEGs of $STOKER_DEMO_WIDTH x $STOKER_DEMO_HEIGHT (stoker synth)
#     packed into WebDataset shards with an index (stoker pack).
#     STOKER_DEMO_IMAGES=0 skips it (a dataset of your own).
set -euo pipefail
token=/run/stoker/token
if [ -n "${STOKER_TOKEN:-}" ]; then
    printf '%s\n' "$STOKER_TOKEN" >"$token"
elif [ ! -s "$token" ]; then
    od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$token"
    echo >>"$token"
fi
echo "fill: token in $token"

if [ "${STOKER_DEMO_IMAGES:-0}" -le 0 ]; then
    echo "fill: STOKER_DEMO_IMAGES=0, no demo dataset written"
    exit 0
fi
images=$(mktemp -d)
stoker synth --output "$images" --images "$STOKER_DEMO_IMAGES" --classes "${STOKER_DEMO_CLASSES:-10}" \
    --width "${STOKER_DEMO_WIDTH:-500}" --height "${STOKER_DEMO_HEIGHT:-375}"
# The store may still be starting: try for a minute.
for attempt in $(seq 1 30); do
    if stoker pack --input "$images" --output "$STOKER_DATASET" --shard-size "${STOKER_DEMO_SHARD_SIZE:-8M}"; then
        echo "fill: $STOKER_DEMO_IMAGES images in $STOKER_DATASET"
        exit 0
    fi
    echo "fill: pack failed (attempt $attempt of 30), retrying in 2 s" >&2
    sleep 2
done
echo "fill: could not write $STOKER_DATASET" >&2
exit 1
