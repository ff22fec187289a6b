#!/usr/bin/env bash
# The main job until the trainer exists: set-up, then a small GPT-2 trained with FULL_SHARD on 2
# ranks on synthetic data. Extra arguments go to fsdp-demo (e.g. --steps 100).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
# fsdp-run is the launcher; MPI is the faster backend on one host (Gloo: fsdp-run's default).
BIN=${BUILD_DIR:-build}/bin
exec "$BIN/fsdp-run" --nproc-per-node 2 --backend mpi "$BIN/fsdp-demo" "$@"
