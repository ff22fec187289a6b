#!/usr/bin/env bash
# Compiles and links fsdp.cpp against a CUDA LibTorch on a machine without a GPU, so that the CUDA
# build cannot rot between sessions that have one: Debian 13's libtorch-cuda-dev 2.6 (CUDA 12.4,
# NCCL 2.22) in the chroot that `scripts/chroot.sh --cuda` makes and caches (about 2.5 GB to
# download the first time), built into build-cuda/. Runs nothing: the CUDA tests need a GPU
# (scripts/gpu.sh on a GPU machine). cuDNN is a placeholder there, so the links accept the
# libraries' references to it that stay undefined (--allow-shlib-undefined); nothing we build
# calls it. Needs root (or sudo). Usage: scripts/cuda_build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/chroot.sh --cuda env BUILD_DIR=build-cuda \
  FSDP_CMAKE_ARGS="-DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined" scripts/setup.sh
