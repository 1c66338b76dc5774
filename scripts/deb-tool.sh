#!/usr/bin/env bash
# Extracts a Debian package's files under target/tools/deb/PACKAGE with
# dpkg-deb (nothing is installed system-wide, no service is started, no root
# needed) and prints that folder. For the tools the tests run: promtool and
# prometheus (package prometheus), kubectl (package kubernetes-client).
#
#   scripts/deb-tool.sh PACKAGE
set -euo pipefail
cd "$(dirname "$0")/.."
pkg=$1
dest=target/tools/deb/$pkg
if [ ! -f "$dest/.extracted" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # A fresh machine may have no package lists yet: apt-get update once
    # (as root), then again.
    if ! (cd "$tmp" && apt-get download -q "$pkg" >/dev/null 2>&1); then
        if [ "$(id -u)" = 0 ]; then
            apt-get update -q >/dev/null 2>&1 || true
        fi
        (cd "$tmp" && apt-get download -q "$pkg" >/dev/null 2>&1) || {
            echo "deb-tool.sh: cannot download Debian's $pkg package (apt-get download $pkg):" \
                "run 'apt-get update' as root first, and check that $pkg is in your apt sources" >&2
            exit 1
        }
    fi
    rm -rf "$dest"
    mkdir -p "$dest"
    dpkg-deb -x "$tmp/${pkg}"_*.deb "$dest"
    touch "$dest/.extracted"
fi
echo "$PWD/$dest"
