#!/usr/bin/env bash
# Builds the stoker Python package as one abi3 wheel (CPython 3.9 and
# later, this platform) into target/wheels, and prints its path. The wheel
# holds the client, the whole `stoker` command line and its worker: pip
# installs it with no Rust toolchain. Building it needs Rust (cargo) and
# compiles the worker and client from source, the first time for many
# minutes; cargo's progress goes to standard error. The cargo build inside
# goes to the repository's target/ (client/python/.cargo/config.toml): it
# reuses the crates a release build of the workspace compiled alike
# (`cargo build --release`, scripts/test.sh), and a rebuild after a change
# is quick.
#
# Its Python: $PYTHON, else the tests' venv (target/pyenv, which
# scripts/test.sh makes), else python3 on the PATH; it needs pip.
# `scripts/wheel.sh --print-python` prints the one it would use and exits.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-}
if [[ -z $python ]]; then
    if [[ -x target/pyenv/bin/python ]]; then
        python=target/pyenv/bin/python
    else
        python=$(command -v python3 || true)
    fi
fi
if [[ -z $python ]] || ! "$python" -m pip --version >/dev/null 2>&1; then
    echo "wheel.sh: no Python with pip found (tried \$PYTHON, target/pyenv/bin/python, python3);" \
        "install python3 and python3-pip, or set PYTHON" >&2
    exit 1
fi
if [[ ${1:-} == --print-python ]]; then
    echo "$python"
    exit 0
fi
if ! command -v cargo >/dev/null; then
    echo "wheel.sh: building the wheel compiles Rust: install a Rust toolchain (https://rustup.rs)" >&2
    exit 1
fi
# The worker inside decodes JPEG crops with libjpeg-turbo, built from
# source with its SIMD: that needs nasm (cmake comes from PyPI as a build
# requirement). Without nasm on the PATH, Debian's package is extracted
# under target/tools/deb (scripts/deb-tool.sh, nothing system-wide).
if ! command -v nasm >/dev/null; then
    if command -v apt-get >/dev/null && deb=$(scripts/deb-tool.sh nasm 2>/dev/null); then
        export PATH="$deb/usr/bin:$PATH"
    else
        echo "wheel.sh: building the wheel needs nasm (libjpeg-turbo's SIMD): install it" \
            "(apt-get install nasm, dnf install nasm, brew install nasm)" >&2
        exit 1
    fi
fi
out=target/wheels
rm -rf "$out"
mkdir -p "$out"
echo "wheel.sh: building the stoker wheel with $python; the first build compiles for many minutes" >&2
start=$SECONDS
# -v: maturin's and cargo's progress (Compiling ...), on standard error.
"$python" -m pip wheel -v --disable-pip-version-check --no-deps --wheel-dir "$out" ./client/python 2>&1 |
    grep --line-buffered -E "Compiling|Finished|Built wheel|error|warning: unused" >&2 || true
wheel=$(ls "$out"/stoker-*-abi3-*.whl 2>/dev/null || true)
if [[ -z $wheel ]]; then
    echo "wheel.sh: the build made no wheel; run '$python -m pip wheel -v --no-deps ./client/python' to see why" >&2
    exit 1
fi
echo "wheel.sh: built in $((SECONDS - start)) s" >&2
echo "$wheel"
