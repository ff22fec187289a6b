#!/usr/bin/env bash
# The main job until the trainer exists: set-up, then a small GPT-2 trained with FULL_SHARD on 2
# ranks on synthetic data. Extra arguments go to fsdp-demo (e.g. --steps 100).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
exec mpirun --oversubscribe --bind-to none -np 2 build/bin/fsdp-demo "$@"
