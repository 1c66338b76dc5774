#!/bin/sh
# Starts s3s-fs over /data with the credentials and buckets from the
# environment: S3_ACCESS_KEY, S3_SECRET_KEY, S3_BUCKETS (space-separated
# bucket names, made as folders when missing).
set -eu
: "${S3_ACCESS_KEY:?set S3_ACCESS_KEY}"
: "${S3_SECRET_KEY:?set S3_SECRET_KEY}"
for bucket in ${S3_BUCKETS:-}; do
    mkdir -p "/data/$bucket"
done
exec s3s-fs --host 0.0.0.0 --port 9000 \
    --access-key "$S3_ACCESS_KEY" --secret-key "$S3_SECRET_KEY" /data
