# The Stoker CPU worker: the `stoker` binary on Debian bookworm, as a
# non-root user, serving gRPC on 50051 and Prometheus metrics on 9090.
#
# Build with deploy/docker/build.sh (it builds and strips the binary and
# uses it as the build context). The binary is built on the host, for
# glibc 2.36 (bookworm) or older.
#
#   BASE_IMAGE  the base: debian:bookworm-slim for users; the tests pass a
#               local image (scripts/docker-base.sh), since they cannot pull
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

COPY stoker /usr/local/bin/stoker
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin stoker
USER 10001:10001

EXPOSE 50051 9090
# Asks grpc.health.v1, not merely whether the port is open: a draining
# worker is unhealthy.
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
    CMD ["stoker", "health", "127.0.0.1:50051", "--timeout", "4"]
ENTRYPOINT ["stoker", "worker"]
CMD ["--listen", "0.0.0.0:50051", "--metrics-listen", "0.0.0.0:9090"]
