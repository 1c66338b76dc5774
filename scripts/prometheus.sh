#!/usr/bin/env bash
# Prometheus for the tests, from Debian's package (no registry can be
# reached here, and Debian's packages can):
#   target/tools/deb/prometheus/usr/bin/{prometheus,promtool}: the
#       package's files (scripts/deb-tool.sh: nothing installed, no service)
#   stoker-prometheus:local: those binaries on the local base image
#       (scripts/docker-base.sh), standing in for prom/prometheus in the
#       compose cluster's tests (STOKER_PROMETHEUS_IMAGE); made where Docker
#       runs and the base image exists.
#
#   scripts/prometheus.sh [BASE_IMAGE]   (default stoker-base:bookworm)
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-stoker-base:bookworm}
image=stoker-prometheus:local
dest=$(scripts/deb-tool.sh prometheus)
"$dest/usr/bin/promtool" --version 2>&1 | head -1

if ! docker image inspect "$base" >/dev/null 2>&1; then
    echo "==> no $base: no $image (the compose tests will skip)"
    exit 0
fi
if docker image inspect "$image" >/dev/null 2>&1; then
    echo "==> $image exists"
    exit 0
fi
ctx=$(mktemp -d)
cp "$dest/usr/bin/prometheus" "$ctx/"
# The same entry point and user as prom/prometheus.
docker build -q -t "$image" -f - "$ctx" >/dev/null <<DOCKERFILE
FROM $base
COPY prometheus /bin/prometheus
RUN mkdir /prometheus && chown 65534:65534 /prometheus
USER 65534
WORKDIR /prometheus
VOLUME /prometheus
ENTRYPOINT ["/bin/prometheus"]
DOCKERFILE
rm -rf "$ctx"
docker image ls "$image" --format '==> {{.Repository}}:{{.Tag}} {{.Size}}'
