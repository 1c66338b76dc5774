#!/usr/bin/env bash
# Makes the local base image the tests build Stoker's images from, since no
# registry can be reached here: a Debian bookworm root filesystem made with
# debootstrap (Debian's package) and loaded with `docker import`. Users build
# the same Dockerfiles from the public images (the Dockerfiles' defaults).
#
#   scripts/docker-base.sh [IMAGE]     (default stoker-base:bookworm)
#
# Does nothing when the image exists. Needs root (debootstrap) and Docker.
set -euo pipefail
image=${1:-stoker-base:bookworm}
if docker image inspect "$image" >/dev/null 2>&1; then
    echo "==> $image exists"
    exit 0
fi
if ! command -v debootstrap >/dev/null; then
    echo "==> installing debootstrap"
    apt-get install -y -q debootstrap >/dev/null
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
echo "==> debootstrap bookworm (minbase) for $image"
debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/dev/null
# What an image needs no copy of: package lists, docs, manuals, locales.
rm -rf "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
tar -C "$root" -c . | docker import - "$image" >/dev/null
docker image ls "$image" --format '==> {{.Repository}}:{{.Tag}} {{.Size}}'
