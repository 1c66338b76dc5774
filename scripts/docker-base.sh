#!/usr/bin/env bash
# Makes the local base image the tests build Stoker's images from, since no
# registry can be reached here: a Debian bookworm root filesystem made with
# debootstrap (Debian's package) and loaded with `docker import`. Users build
# the same Dockerfiles from the public images (the Dockerfiles' defaults).
#
#   scripts/docker-base.sh [IMAGE]     (default stoker-base:bookworm)
#
# The Debian mirror is the one this machine's apt already uses: the first
# enabled `deb` source for bookworm in /etc/apt/sources.list or
# /etc/apt/sources.list.d/ (one-line `.list` files and deb822 `.sources`
# files). STOKER_DEBIAN_MIRROR=URL overrides it, for a machine without
# one. The image's own apt sources name the same mirror, so the
# Dockerfiles' `apt-get install` uses it too.
#
#   scripts/docker-base.sh --print-mirror   only says which mirror it would
#                                           use (APT_ETC=DIR reads DIR
#                                           instead of /etc/apt: the tests)
#
# Does nothing when the image exists. Needs root (debootstrap) and Docker.
set -euo pipefail
suite=bookworm
if [ "${1:-}" != --print-mirror ]; then
    image=${1:-stoker-base:bookworm}
    if docker image inspect "$image" >/dev/null 2>&1; then
        echo "==> $image exists"
        exit 0
    fi
fi

# The URIs of enabled `deb` entries for $suite, in the order apt reads them.
apt_mirrors() {
    local etc=${APT_ETC:-/etc/apt}
    local files=()
    [ -f "$etc/sources.list" ] && files+=("$etc/sources.list")
    local f
    for f in "$etc"/sources.list.d/*; do
        case $f in *.list | *.sources) [ -f "$f" ] && files+=("$f") ;; esac
    done
    for f in "${files[@]}"; do
        case $f in
        *.sources)
            # deb822: paragraphs of `Field: value` lines, blank-line
            # separated; Types, URIs and Suites hold space-separated lists.
            awk -v suite="$suite" '
                function flush() {
                    if (types ~ /(^| )deb( |$)/ && suites ~ ("(^| )" suite "( |$)") && tolower(enabled) != "no")
                        { n = split(uris, u, " "); for (i = 1; i <= n; i++) print u[i] }
                    types = ""; uris = ""; suites = ""; enabled = ""; field = ""
                }
                /^[ \t]*#/ { next }
                /^[ \t]*$/ { flush(); next }
                /^[ \t]/ { if (field == "uris") uris = uris " " $0; next }  # a folded line
                {
                    field = tolower(substr($0, 1, index($0, ":") - 1))
                    value = substr($0, index($0, ":") + 1)
                    gsub(/^[ \t]+|[ \t]+$/, "", value)
                    if (field == "types") types = value
                    else if (field == "uris") uris = value
                    else if (field == "suites") suites = value
                    else if (field == "enabled") enabled = value
                }
                END { flush() }' "$f"
            ;;
        *)
            # One-line: deb [OPTIONS] URI SUITE COMPONENT...
            awk -v suite="$suite" '
                { sub(/#.*/, "") }
                $1 != "deb" { next }
                {
                    line = $0
                    if (match(line, /\[[^]]*\]/)) line = substr(line, 1, RSTART - 1) substr(line, RSTART + RLENGTH)
                    n = split(line, w, /[ \t]+/)
                    j = 0
                    for (i = 1; i <= n; i++) if (w[i] != "") a[++j] = w[i]
                    if (j >= 3 && a[3] == suite) print a[2]
                }' "$f"
            ;;
        esac
    done
    return 0
}

mirror=${STOKER_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
    mirrors=$(apt_mirrors)
    mirror=${mirrors%%$'\n'*}
fi
if [ -z "$mirror" ]; then
    echo "docker-base.sh: no apt source for $suite in ${APT_ETC:-/etc/apt}/sources.list or sources.list.d/; set STOKER_DEBIAN_MIRROR to a Debian mirror's URL" >&2
    exit 1
fi
if [ "${1:-}" = --print-mirror ]; then
    echo "$mirror"
    exit 0
fi
if ! command -v debootstrap >/dev/null; then
    echo "==> installing debootstrap"
    apt-get install -y -q debootstrap >/dev/null
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
echo "==> debootstrap $suite (minbase) for $image from $mirror"
debootstrap --variant=minbase "$suite" "$root" "$mirror" >/dev/null
# What an image needs no copy of: package lists, docs, manuals, locales.
rm -rf "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
tar -C "$root" -c . | docker import - "$image" >/dev/null
docker image ls "$image" --format '==> {{.Repository}}:{{.Tag}} {{.Size}}'
