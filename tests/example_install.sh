#!/usr/bin/env bash
# The installed package as a user consumes it: `cmake --install` the build into a fresh prefix,
# configure examples/ (a project of the user's own) against it with find_package(fsdp) and
# nothing else, build it, and train its model at world size 2 under mpirun; the example exits
# non-zero unless its loss fell.
# Usage: example_install.sh BUILD_DIR SOURCE_DIR MPIRUN
set -euo pipefail
BUILD=$1 SRC=$2 MPIRUN=$3
WORK=$(mktemp -d /tmp/fsdp_example.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

cmake --install "$BUILD" --prefix "$WORK/prefix" >"$WORK/install.log"
test -f "$WORK/prefix/lib/cmake/fsdp/fsdpConfig.cmake"
test -f "$WORK/prefix/include/fsdp/fsdp.h"
test -x "$WORK/prefix/bin/fsdp-run"
# The consumer sees the installed prefix only: not this source tree, not the build tree. It
# names the LibTorch the build used, as a user of PyTorch's wheel must (Debian's is found anyway).
torch_dir=$(sed -n 's/^Torch_DIR:PATH=//p' "$BUILD/CMakeCache.txt")
cmake -S "$SRC/examples" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$WORK/prefix" ${torch_dir:+-DTorch_DIR="$torch_dir"} >"$WORK/configure.log" || {
  cat "$WORK/configure.log"
  exit 1
}
if grep -rq -- "$SRC/include\|$BUILD" "$WORK/build/build.ninja"; then
  echo "FAIL: the example's build refers to the source or build tree, not the installed prefix"
  exit 1
fi
cmake --build "$WORK/build" >"$WORK/build.log" || {
  cat "$WORK/build.log"
  exit 1
}
"$MPIRUN" --allow-run-as-root --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS=1 \
  "$WORK/build/train_mlp" 40
