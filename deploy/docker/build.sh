#!/usr/bin/env bash
# Builds the worker image from this checkout:
#
#   deploy/docker/build.sh [TAG] [--base IMAGE]   (default stoker-worker:latest,
#                                                   base debian:bookworm-slim)
#
# Builds `stoker` in release mode, strips it into target/docker/ (the build
# context: nothing else of the tree is sent to Docker) and runs docker build
# with deploy/docker/worker.Dockerfile.
set -euo pipefail
cd "$(dirname "$0")/../.."
tag=stoker-worker:latest
base=debian:bookworm-slim
while [ $# -gt 0 ]; do
    case $1 in
    --base) base=$2; shift 2 ;;
    *) tag=$1; shift ;;
    esac
done
cargo build --release --bin stoker
mkdir -p target/docker
strip -o target/docker/stoker target/release/stoker
docker build -q -f deploy/docker/worker.Dockerfile --build-arg "BASE_IMAGE=$base" -t "$tag" target/docker >/dev/null
docker image ls "$tag" --format '==> {{.Repository}}:{{.Tag}} {{.Size}}'
