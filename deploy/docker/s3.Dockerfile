# The local cluster's S3-compatible store: s3s-fs (crates.io), a real S3
# server over a folder, the one the tests use, started by s3-entrypoint.sh
# from S3_ACCESS_KEY, S3_SECRET_KEY and S3_BUCKETS. For a local cluster only:
# point the workers at MinIO or S3 for anything else (docs/deploy.md).
#
# Build with deploy/docker/build.sh (it installs s3s-fs and uses its folder
# as the build context).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
COPY s3s-fs s3-entrypoint.sh /usr/local/bin/
RUN useradd --system --uid 10002 --no-create-home --shell /usr/sbin/nologin s3 \
    && mkdir /data && chown 10002:10002 /data
USER 10002:10002
VOLUME /data
EXPOSE 9000
ENTRYPOINT ["s3-entrypoint.sh"]
