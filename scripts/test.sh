#!/usr/bin/env bash
# The test command: set-up (packages, configure, build), then every test under CTest.
# Extra arguments go to ctest, e.g. scripts/test.sh -R parity
#   scripts/test.sh --sanitize [ctest args]: the same suite built with AddressSanitizer and
#   UndefinedBehaviorSanitizer into build-sanitize/ (multi-rank tests included); any report fails
#   the test it came from. Leak checking is on, with tests/sanitize/lsan.supp for what OpenMPI (not
#   instrumented) keeps until exit.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--sanitize" ]]; then
  shift
  export BUILD_DIR=${BUILD_DIR:-build-sanitize} FSDP_CMAKE_ARGS="-DFSDP_SANITIZE=ON"
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
  export LSAN_OPTIONS="suppressions=$PWD/tests/sanitize/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
fi
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
source scripts/env.sh
ctest --test-dir "$BUILD_DIR" --output-on-failure "$@"
