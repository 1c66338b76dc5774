# The Stoker worker image, CPU or GPU: the `stoker` binary as a non-root
# user, serving gRPC on 50051 and Prometheus metrics on 9090.
#
# Build with deploy/docker/build.sh: it builds and strips the binary and
# uses its folder as the build context (nothing else of the tree is sent).
# The binary is built on the host for glibc 2.36 (bookworm) or older, so it
# runs on both bases.
#
#   FLAVOR           cpu (default) or gpu
#   BASE_IMAGE       the CPU base: debian:bookworm-slim
#   CUDA_BASE_IMAGE  the GPU base: NVIDIA's CUDA `base` image (driver
#                    glue, no toolkit libraries)
#   CUDA_PACKAGES    what the GPU image adds to it from NVIDIA's apt
#                    repository: NVRTC (compiles the kernels for the GPU at
#                    start) and nvJPEG, about 115 MB, instead of the 2+ GB
#                    `runtime` image. Empty adds nothing.
#
# Both flavours carry the distribution's CA certificates (ca-certificates,
# /etc/ssl/certs), which the worker's TLS to S3 trusts; it is installed
# where the base lacks it (debian:bookworm-slim; NVIDIA's images have it).
# A private CA is added at run time: mount its PEM file and point
# AWS_CA_BUNDLE at it (docs/datasets.md, "S3 over TLS").
#
# The tests cannot pull, so they pass a local Debian base for both bases
# and no CUDA packages (scripts/docker-base.sh). The worker loads every CUDA
# library at run time by soname: the GPU image on a host without a GPU, or
# without the NVIDIA container toolkit, falls back to the CPU and says so.
ARG FLAVOR=cpu
ARG BASE_IMAGE=debian:bookworm-slim
ARG CUDA_BASE_IMAGE=nvidia/cuda:13.0.1-base-ubuntu24.04

FROM ${BASE_IMAGE} AS base-cpu

FROM ${CUDA_BASE_IMAGE} AS base-gpu
ARG CUDA_PACKAGES="cuda-nvrtc-13-0 libnvjpeg-13-0"
RUN if [ -n "$CUDA_PACKAGES" ]; then \
        apt-get update \
        && apt-get install -y --no-install-recommends $CUDA_PACKAGES \
        && rm -rf /var/lib/apt/lists/*; \
    fi
# What the NVIDIA container toolkit mounts into the container: the driver's
# compute libraries (libcuda) and nvidia-smi.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

FROM base-${FLAVOR}
# The distribution's CA certificates, unless the base has them.
RUN if ! dpkg-query -W -f '${Status}' ca-certificates 2>/dev/null | grep -q 'ok installed'; then \
        apt-get update \
        && apt-get install -y --no-install-recommends ca-certificates \
        && apt-get clean && rm -rf /var/lib/apt/lists/*; \
    fi \
    && test -s /etc/ssl/certs/ca-certificates.crt
COPY stoker /usr/local/bin/stoker
# /run/stoker holds the token file of the compose cluster (a volume).
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin stoker \
    && mkdir -p /run/stoker && chown 10001:10001 /run/stoker
USER 10001:10001

EXPOSE 50051 9090
# Asks grpc.health.v1, not merely whether the port is open: a draining
# worker is unhealthy.
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
    CMD ["stoker", "health", "127.0.0.1:50051", "--timeout", "4"]
ENTRYPOINT ["stoker", "worker"]
CMD ["--listen", "0.0.0.0:50051", "--metrics-listen", "0.0.0.0:9090"]
