#!/usr/bin/env bash
# Installs everything the tests need, then runs every test: Python (pytest) and
# frontend (node's test runner). Browser tests drive Debian's chromium.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The optional PyTorch helpers and the framework callbacks are tested for real (torch is not a
# dependency). torch first, so that the frameworks' extras find it and pull no other build.
# [test] includes the remote-logdir stack: s3fs, gcsfs, dask.distributed, moto[server] (the S3
# server the tests start), gcp-storage-emulator, and boto3 (TensorBoard's own s3:// loader).
python3 -c "import torch" 2>/dev/null || python3 -m pip install -q --disable-pip-version-check "torch==2.13.0"
python3 -m pip install -q --disable-pip-version-check -e ".[test,hparams,hf,lightning,keras]"
python3 -m ruff check .
(cd frontend && npm ci --no-audit --no-fund --loglevel=error && npm test)
# Keras runs on the torch backend in the tests (never TensorFlow).
KERAS_BACKEND=torch python3 -m pytest -q -p no:cacheprovider tests "$@"
