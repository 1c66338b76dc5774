#!/usr/bin/env bash
# Builds the stoker Python package as one abi3 wheel (CPython 3.9 and
# later, this platform) into target/wheels, and prints its path. The wheel
# holds the client, the whole `stoker` command line and its worker: pip
# installs it with no Rust toolchain. The cargo build inside reuses
# client/python/target, so a rebuild after a change is quick.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/wheels
rm -rf "$out"
mkdir -p "$out"
python=${PYTHON:-target/pyenv/bin/python}
"$python" -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$out" ./client/python >&2
ls "$out"/stoker-*-abi3-*.whl
