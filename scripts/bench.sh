#!/usr/bin/env bash
# The benchmarks (bench/README.md): set-up, then GPT-2 124M at world size 2 (fp32 and bf16, every
# strategy with and without prefetch and activation checkpointing), the planner's view of GPT-2
# large, and one GPT-2 large FULL_SHARD step; and NO_SHARD/FULL_SHARD again with glibc's heap for
# every block instead of fsdp's host allocator. Writes bench/results/*.json,
# bench/results/table.md and the memory plot (bench/memory_plot.py: each run's per-rank peak beside
# the plan's, bench/results/memory-by-strategy.png), and prints the table. About 20 minutes on a
# 2-core machine.
#   scripts/bench.sh            everything
#   scripts/bench.sh --quick    a tiny model only (a minute: checks that the benchmark runs)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
BUILD_DIR=${BUILD_DIR:-build}
source scripts/env.sh
bin=$BUILD_DIR/bin
out=bench/results
mkdir -p "$out"

# What the numbers depend on, recorded in every JSON record.
blas=$(readlink -f /etc/alternatives/libblas.so.3-x86_64-linux-gnu 2>/dev/null || echo unknown)
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
label="cpu: $cpu, $(nproc) cores; blas: $blas, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset};"
label+=" allocator: blocks >= 1 MiB fsdp's host allocator (cached, headroom 0.5; --allocator glibc:"
label+=" malloc), smaller ones glibc malloc with M_MMAP_THRESHOLD and M_TRIM_THRESHOLD 1 GiB;"
label+=" OpenMPI shared memory"

bench() {  # bench NAME ARGS...: one fsdp-bench run on 2 ranks, its table appended to table.md
  local name=$1
  shift
  echo "== $name" | tee -a "$out/table.md"
  "$bin/fsdp-run" --backend mpi --nproc-per-node 2 "$bin/fsdp-bench" --label "$label" \
    --json "$out/$name.json" "$@" | tee "$out/$name.log"
  sed -n '/^| strategy/,/^(GPT-2/p' "$out/$name.log" >>"$out/table.md"
  echo >>"$out/table.md"
}

{
  echo "# fsdp-bench results, $(date -u +%Y-%m-%d)"
  echo
  echo "$label"
  echo
} >"$out/table.md"

if [[ "${1:-}" == "--quick" ]]; then
  bench quick --model tiny --seq 64 --steps 1
  exit 0
fi

# Three timed steps per run (medians of three). Each run also builds its model and takes a warm-up
# step, about 25 s here (first-touch page faults cost ~12 us a page on this VM), so --repeats 2
# would take the script past 30 minutes.
bench gpt2-124m-fp32 --model 124m --seq 512 --dtype fp32 --steps 3
bench gpt2-124m-bf16 --model 124m --seq 512 --dtype bf16 --steps 3
bench gpt2-124m-fp32-glibc --model 124m --seq 512 --dtype fp32 --steps 3 --allocator glibc \
  --strategies NO_SHARD,FULL_SHARD --variants plain

large=(--num_processes 2 --model.n_layer 36 --model.n_head 20 --model.n_embd 1280
  --model.n_positions 1024 --data.seq_len 512 --train.micro_batch_size 1)
echo "== gpt2-large plan (fsdp-plan)" | tee -a "$out/table.md"
"$bin/fsdp-plan" "${large[@]}" | tee "$out/gpt2-large-plan.txt"
sed -n '/^every strategy/,$p' "$out/gpt2-large-plan.txt" >>"$out/table.md"
echo >>"$out/table.md"
bench gpt2-large-fp32 --model large --seq 512 --dtype fp32 --steps 1 \
  --strategies FULL_SHARD --variants prefetch

echo "== memory by strategy (bench/results/memory-by-strategy.png)" >>"$out/table.md"
/usr/bin/python3 bench/memory_plot.py >>"$out/table.md"  # Debian's: python3-matplotlib for the plot

echo
cat "$out/table.md"
