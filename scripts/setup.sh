#!/usr/bin/env bash
# Set-up for a fresh Debian 12 machine: installs what fsdp.cpp needs from Debian's packages (only
# what is missing, so a second run does nothing), then configures and builds into build/.
# Usage: scripts/setup.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

# LibTorch and the Gloo it was built with: Debian 12's 1.13 (CPU), or Debian 13's 2.6 in
# scripts/chroot.sh's root. FSDP_CUDA=1 (scripts/chroot.sh --cuda): the CUDA builds of both (each
# conflicts with its CPU twin), the CUDA toolkit (headers, and nvcc, which the CUDA LibTorch's CMake
# package looks for) and NCCL.
TORCH_PACKAGES=(libtorch-dev libgloo-dev)
if [[ -n "${FSDP_CUDA:-}" ]]; then
  TORCH_PACKAGES=(libtorch-cuda-dev libgloo-cuda-dev nvidia-cuda-dev nvidia-cuda-toolkit libnccl-dev)
fi
PACKAGES=(
  build-essential cmake ninja-build pkg-config
  "${TORCH_PACKAGES[@]}"
  libopenblas0-openmp     # fast fp32 BLAS; without it LibTorch falls back to reference BLAS
  libopenmpi-dev openmpi-bin
  libgtest-dev
  libyaml-cpp-dev         # the trainer's YAML configs
  zlib1g-dev              # CRC-32 of checkpoint files
  nlohmann-json3-dev      # checkpoint metadata
  libonig-dev             # the tokenizer's regexes (Oniguruma, as Hugging Face's tokenizers uses)
  libutf8proc-dev         # the tokenizer's Unicode normalization, case and categories
  iproute2                # network namespaces for the two-host test
  python3                 # tests/safetensors_check.py reads our files without LibTorch
)
# EXTRA_PACKAGES: what another script needs on top (scripts/fuzz.sh: clang and libFuzzer).
read -r -a extra <<<"${EXTRA_PACKAGES:-}"
PACKAGES+=("${extra[@]}")
# scripts/fetch_assets.sh needs node and npm (GPT-2's tokenizer files come from the npm registry).
# Machines that already have them, e.g. from NodeSource, whose nodejs bundles npm and conflicts
# with Debian's npm package, keep their own. Inside scripts/chroot.sh's root (FSDP_IN_CHROOT) the
# assets were fetched outside, into the same repository.
IN_CHROOT=${FSDP_IN_CHROOT:-}
if [[ -z "$IN_CHROOT" ]] && { ! command -v node >/dev/null || ! command -v npm >/dev/null; }; then
  PACKAGES+=(nodejs npm)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[[ "${1:-}" == "--no-build" ]] && exit 0

[[ -n "$IN_CHROOT" ]] || scripts/fetch_assets.sh

BUILD_DIR=${BUILD_DIR:-build}
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  # FSDP_CMAKE_ARGS: extra configure options (scripts/test.sh --sanitize passes -DFSDP_SANITIZE=ON).
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${FSDP_CMAKE_ARGS:-}
fi
cmake --build "$BUILD_DIR" -j"$(nproc)"
