#!/usr/bin/env bash
# Builds the images of the local cluster (deploy/compose.yaml) from this
# checkout:
#
#   stoker-worker:TAG      the CPU worker (worker.Dockerfile, FLAVOR=cpu)
#   stoker-worker-gpu:TAG  the GPU worker (worker.Dockerfile, FLAVOR=gpu)
#   stoker-s3:TAG          the S3-compatible store (s3.Dockerfile, s3s-fs)
#
#   deploy/docker/build.sh [--tag TAG] [--base IMAGE] [--cuda-base IMAGE]
#                          [--cuda-packages 'PKG ...'] [--bin PATH]
#                          [--s3s-fs PATH] [--no-gpu]
#
# Defaults: TAG latest, the public bases (debian:bookworm-slim, NVIDIA's
# CUDA base image with NVRTC and nvJPEG from its apt repository), `stoker`
# built with cargo and s3s-fs installed with cargo under target/tools.
# --bin and --s3s-fs take prebuilt binaries instead (the tests do).
# Each image's context is a folder of its own under target/docker/.
set -euo pipefail
cd "$(dirname "$0")/../.."
S3S_VERSION=0.14.1 # the version scripts/test.sh installs
tag=latest
base=debian:bookworm-slim
cuda_base=
cuda_packages=
cuda_packages_set=0
bin=
s3s_fs=
gpu=1
while [ $# -gt 0 ]; do
    case $1 in
    --tag) tag=$2; shift 2 ;;
    --base) base=$2; shift 2 ;;
    --cuda-base) cuda_base=$2; shift 2 ;;
    --cuda-packages) cuda_packages=$2; cuda_packages_set=1; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --s3s-fs) s3s_fs=$2; shift 2 ;;
    --no-gpu) gpu=0; shift ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ -z "$bin" ]; then
    cargo build --release --bin stoker
    bin=target/release/stoker
fi
if [ -z "$s3s_fs" ]; then
    if [ ! -x target/tools/bin/s3s-fs ]; then
        cargo install --quiet --locked s3s-fs --version "$S3S_VERSION" --features binary --root target/tools
    fi
    s3s_fs=target/tools/bin/s3s-fs
fi

worker_ctx=target/docker/worker
s3_ctx=target/docker/s3
mkdir -p "$worker_ctx" "$s3_ctx"
strip -o "$worker_ctx/stoker" "$bin" 2>/dev/null || cp "$bin" "$worker_ctx/stoker"
strip -o "$s3_ctx/s3s-fs" "$s3s_fs" 2>/dev/null || cp "$s3s_fs" "$s3_ctx/s3s-fs"
cp deploy/docker/s3-entrypoint.sh "$s3_ctx/"

# The legacy builder (no BuildKit) builds every stage before the one it
# needs, so the CPU build names a CUDA base too: the CPU base, with nothing
# added, when no CUDA base is given.
build() { # image dockerfile context build-args...
    local image=$1 file=$2 ctx=$3
    shift 3
    docker build -q -f "deploy/docker/$file" "$@" -t "$image:$tag" "$ctx" >/dev/null
    docker image ls "$image:$tag" --format '==> {{.Repository}}:{{.Tag}} {{.Size}}'
}
cpu_args=(--build-arg "BASE_IMAGE=$base" --build-arg FLAVOR=cpu
    --build-arg "CUDA_BASE_IMAGE=${cuda_base:-$base}" --build-arg CUDA_PACKAGES=)
build stoker-worker worker.Dockerfile "$worker_ctx" "${cpu_args[@]}"
if [ "$gpu" = 1 ]; then
    gpu_args=(--build-arg "BASE_IMAGE=$base" --build-arg FLAVOR=gpu)
    [ -n "$cuda_base" ] && gpu_args+=(--build-arg "CUDA_BASE_IMAGE=$cuda_base")
    [ "$cuda_packages_set" = 1 ] && gpu_args+=(--build-arg "CUDA_PACKAGES=$cuda_packages")
    build stoker-worker-gpu worker.Dockerfile "$worker_ctx" "${gpu_args[@]}"
fi
build stoker-s3 s3.Dockerfile "$s3_ctx" --build-arg "BASE_IMAGE=$base"
