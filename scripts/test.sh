#!/usr/bin/env bash
# The test command: set-up (packages, configure, build), then every test under CTest.
# Extra arguments go to ctest, e.g. scripts/test.sh -R parity, or -L quick (docs/testing.md)
#   scripts/test.sh --sanitize [ctest args]: the same suite built with AddressSanitizer and
#   UndefinedBehaviorSanitizer into build-sanitize/ (multi-rank tests included); any report fails
#   the test it came from. Leak checking is on, with tests/sanitize/lsan.supp for what OpenMPI (not
#   instrumented) keeps until exit.
#   scripts/test.sh --libtorch 2 [--sanitize] [ctest args]: the same suite on Debian 13's LibTorch
#   2.x, built into build-libtorch2/ inside the trixie chroot that scripts/chroot.sh makes (and
#   caches) as root. The assets are fetched here first, outside, into the shared repository.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--libtorch" ]]; then
  [[ "${2:-}" == "2" ]] || {
    echo "test.sh: --libtorch takes 2 (Debian 13's LibTorch 2.x); 1.13 is the default" >&2
    exit 2
  }
  shift 2
  scripts/setup.sh --no-build # node and npm for the assets (and the 1.13 packages, unused here)
  scripts/fetch_assets.sh
  build=build-libtorch2
  [[ "${1:-}" == "--sanitize" ]] && build+=-sanitize
  exec scripts/chroot.sh env BUILD_DIR="$build" scripts/test.sh "$@"
fi
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
# One test per core (a -j argument wins): the multi-rank tests oversubscribe anyway, and the suite
# is checked to pass at -j2 on 2 cores, under a second suite's load too (docs/testing.md).
export CTEST_PARALLEL_LEVEL=${CTEST_PARALLEL_LEVEL:-$(nproc)}
ctest --test-dir "$BUILD_DIR" --output-on-failure "$@"
