#!/usr/bin/env bash
# Runs Stoker's whole test suite on a fresh machine.
#
# Installs what the tests need, once, under target/ (nothing system-wide):
#   - target/tools/bin/s3s-fs : a real S3-compatible server (crates.io)
#   - target/pyenv            : Python with pillow, numpy, webdataset and
#                               prometheus_client (an independent parser of
#                               the metrics text), dnslib (the tests' DNS
#                               server), kubernetes-validate (the Kubernetes
#                               schemas, offline), tfrecord (an independent
#                               TFRecord writer, and its tfrecord2idx),
#                               datasets and pyarrow (Hugging Face's Parquet
#                               writer), and the stoker package built from
#                               client/python
#   - target/mxenv            : Python with MXNet 1.9.1 (and numpy<1.24, which
#                               it needs), MXNet's own RecordIO writer
#   - target/tools/deb/       : promtool and prometheus, kubectl (its
#                               kustomize), from Debian's packages, extracted
#                               (scripts/deb-tool.sh)
#   - stoker-base:bookworm    : a local Docker base image (scripts/docker-base.sh,
#                               debootstrap), where Docker runs and we are root,
#     stoker-prometheus:local   and Prometheus on it (scripts/prometheus.sh)
# (the downloads in the background, beside the compiles), then runs every
# unit and integration test with cargo-nextest (cargo test
# when nextest is not installed), built with the worker's fault-injection
# points (`--features stoker/failpoints`). Extra arguments go to the test
# runner.
set -euo pipefail
cd "$(dirname "$0")/.."

# What waits on the network and the disk (pip, debootstrap) runs in the
# background beside what keeps the cores busy (compiling s3s-fs and the
# wheel); each logs to target/install-logs/NAME.log, printed when it is
# waited for, and a failure stops the script with its log.
logs=target/install-logs
mkdir -p "$logs"
# Each step's wall time, in target/test-phases.txt ("SECONDS STEP" lines;
# .ci/run prints them).
: >target/test-phases.txt
step_start=$SECONDS
step_done() { # STEP: the time since the last step ended
  echo "$((SECONDS - step_start)) $1" >>target/test-phases.txt
  step_start=$SECONDS
}
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
declare -A started
background() { # NAME COMMAND...
  local name=$1
  shift
  "$@" >"$logs/$name.log" 2>&1 &
  started[$name]=$!
}
wait_for() { # NAME
  if ! wait "${started[$1]}"; then
    cat "$logs/$1.log" >&2
    echo "error: $1 failed; its log is above and in $logs/$1.log" >&2
    exit 1
  fi
  cat "$logs/$1.log"
}

venv() { # DIR "MODULES" PACKAGE...: a venv at DIR with PACKAGES, unless MODULES import there
  local dir=$1 modules=$2
  shift 2
  local python=${VENV_PYTHON:-python3}
  if [ ! -x "$dir/bin/python" ] || ! "$dir/bin/python" -c "import $modules" 2>/dev/null; then
    echo "==> creating $dir with $python ($*)"
    if ! "$python" -m venv "$dir"; then
      echo "error: $python -m venv failed: install Python's venv module (Debian, Ubuntu: apt-get install python3-venv)" >&2
      return 1
    fi
    "$dir/bin/pip" install --quiet --disable-pip-version-check "$@"
  fi
}

# MXNet 1.9.1 needs numpy<1.24, which has no wheels past Python 3.11: its
# venv takes python3.11, 3.10 or 3.9 where python3 is newer.
mxnet_python() {
  local p
  for p in python3 python3.11 python3.10 python3.9; do
    if command -v "$p" >/dev/null && "$p" -c 'import sys; sys.exit(not (3, 8) <= sys.version_info[:2] <= (3, 11))'; then
      echo "$p"
      return
    fi
  done
  echo "error: MXNet's RecordIO writer (target/mxenv) needs Python 3.8 to 3.11 beside python3 $(python3 -V 2>&1 | cut -d' ' -f2); install one (e.g. apt-get install python3.11-venv, or uv python install 3.11)" >&2
  return 1
}

PY_PACKAGES="pillow numpy webdataset prometheus_client dnslib kubernetes-validate tfrecord datasets pyarrow mypy"
TORCH_PACKAGES="torch torchvision lightning mypy pycocotools"

# The base the container test builds the worker image from: no registry can
# be reached, so it is made locally. Without it the test says why and skips,
# unless STOKER_REQUIRE names docker (as .ci/run does where Docker runs):
# then a missing image stops the run here, with its log.
docker_images() {
  local required=no
  [[ ,${STOKER_REQUIRE:-}, == *,docker,* ]] && required=yes
  if docker info >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    if ! scripts/docker-base.sh; then
      [[ $required == yes ]] && { echo "error: no Docker base image, and STOKER_REQUIRE requires docker"; return 1; }
      echo "warning: no Docker base image: the container and cluster tests will skip"
    elif ! scripts/prometheus.sh; then
      [[ $required == yes ]] && { echo "error: no Prometheus image, and STOKER_REQUIRE requires docker"; return 1; }
      echo "warning: no Prometheus image: the cluster tests will skip"
    fi
  else
    [[ $required == yes ]] && { echo "error: STOKER_REQUIRE requires docker, and Docker does not run here as root"; return 1; }
    echo "==> no Docker, or not root: the container and cluster tests will skip"
  fi
}

echo "==> promtool and kubectl from Debian's packages (target/tools/deb)"
scripts/deb-tool.sh prometheus >/dev/null
scripts/deb-tool.sh kubernetes-client >/dev/null

echo "==> in the background: Python venvs (target/pyenv, target/mxenv, target/torchenv) and Docker images"
# shellcheck disable=SC2086 # lists of package names
background pyenv venv target/pyenv 'PIL, numpy, webdataset, prometheus_client, dnslib, kubernetes_validate, tfrecord, datasets, pyarrow, mypy' $PY_PACKAGES
# MXNet 1.9.1 needs numpy<1.24 (and a Python it has wheels for).
mxpython=$(mxnet_python)
VENV_PYTHON=$mxpython background mxenv venv target/mxenv mxnet 'mxnet==1.9.1' 'numpy<1.24'
# torch, torchvision and lightning in a venv of their own: the main one
# stays without torch, for the package's numpy path.
# shellcheck disable=SC2086
background torchenv venv target/torchenv 'torch, torchvision, lightning, mypy, pycocotools' $TORCH_PACKAGES
background docker docker_images

S3S_VERSION=0.14.1
if [ ! -x target/tools/bin/s3s-fs ]; then
  echo "==> installing s3s-fs $S3S_VERSION (S3-compatible server for the tests)"
  cargo install --quiet --locked s3s-fs --version "$S3S_VERSION" --features binary --root target/tools
fi

# The Python package, built once from this checkout as an abi3 wheel
# (maturin; scripts/wheel.sh), then installed into both venvs without Rust.
step_done "tools: promtool, kubectl, s3s-fs"
wait_for pyenv
step_done "waiting for the Python venv"
echo "==> building the stoker wheel (scripts/wheel.sh) and installing it"
wheel=$(scripts/wheel.sh)
step_done "the stoker wheel"
wait_for torchenv
for venv in target/pyenv target/torchenv; do
  # Its dependencies, then the wheel itself even when the version is the same.
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$wheel"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
done
wait_for mxenv
wait_for docker
step_done "installing the wheel, the other venvs, Docker images"

export STOKER_TEST_S3S_FS="$PWD/target/tools/bin/s3s-fs"
export STOKER_TEST_PYTHON="$PWD/target/pyenv/bin/python"
export STOKER_TEST_MXNET_PYTHON="$PWD/target/mxenv/bin/python"
export STOKER_TEST_TORCH_PYTHON="$PWD/target/torchenv/bin/python"

# The worker's fault-injection points (FAILPOINTS) are compiled into the
# `stoker` binary the integration tests run, and only there: a release
# build (`cargo build --release`) carries none of them.
FEATURES=(--features stoker/failpoints)
# Built first, as the runner would build them, so that the build's time
# and the tests' are told apart.
echo "==> building the tests"
cargo test --release --workspace "${FEATURES[@]}" --no-run
step_done "building the tests"
trap 'step_done "running the tests"; kill $(jobs -p) 2>/dev/null || true' EXIT
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --release --workspace "${FEATURES[@]}" --no-fail-fast "$@"
else
  echo "==> cargo-nextest not found, using cargo test"
  cargo test --release --workspace "${FEATURES[@]}" --no-fail-fast "$@"
fi
