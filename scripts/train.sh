#!/usr/bin/env bash
# The main job: set-up (packages, npm assets, build), then fsdp-train on the default config (a
# small GPT-2 on the bundled State of the Union corpus, FULL_SHARD over 2 ranks), then a sample
# from the checkpoint it wrote. Each run writes its checkpoints and metrics to a new folder
# build/runs/<date-time>/. Extra arguments go to fsdp-train (e.g. --optim.max_steps 100).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
BIN=${BUILD_DIR:-build}/bin
RUN=${BUILD_DIR:-build}/runs/$(date +%Y%m%d-%H%M%S)
# fsdp-run is the launcher; MPI is the faster backend on one host (Gloo: fsdp-run's default).
"$BIN/fsdp-run" --nproc-per-node 2 --backend mpi \
  "$BIN/fsdp-train" --config configs/default.yaml --train.checkpoint_dir "$RUN/checkpoints" \
  --train.metrics_file "$RUN/metrics.jsonl" "$@"
"$BIN/fsdp-train" sample --checkpoint "$RUN/checkpoints" --prompt "My fellow citizens," \
  --max-new-tokens 60
