#!/usr/bin/env bash
# The test command: set-up (packages, configure, build), then every test under CTest.
# Extra arguments go to ctest, e.g. scripts/test.sh -R parity
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
source scripts/env.sh
ctest --test-dir "$BUILD_DIR" --output-on-failure "$@"
