#!/usr/bin/env bash
# Session 33 on the GPU: build against the wheel's LibTorch, the whole suite (the CUDA path of the
# replica all-reduce stages and the MPI progress thread), then compute profiles for the time model.
set -uo pipefail
R=$OUT; T0=$SECONDS
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
stamp() { echo "== $1 at $((SECONDS - T0)) s" | tee -a "$R/times.txt"; }
mpirun --version | head -1 > "$R/mpi.txt"
RESULTS_DIR=$R scripts/gpu.sh --build-only || { stamp "build failed"; exit 1; }
stamp build
timeout 220 ctest --test-dir build-gpu -j12 --timeout 200 > "$R/suite.log" 2>&1
echo "suite rc=$?" >> "$R/times.txt"; grep -E "tests passed|Failed|\*\*\*|Timeout" "$R/suite.log" | tail -25
stamp suite
P=build-gpu/bin/fsdp-plan
G2="--config configs/gpt2-124m.yaml --device cuda --train.gradient_accumulation_steps 1 --mixed_precision bf16 --fsdp_config.fsdp_forward_prefetch true"
XL="$G2 --model.n_layer 48 --model.n_head 25 --model.n_embd 1600 --data.seq_len 1024"
L7="--config configs/llama-small.yaml --device cuda --model.n_head 32 --model.n_kv_head 32 --model.dim 4096 --model.intermediate_size 11008 --model.vocab_size 32000 --model.tie_embeddings false --data.seq_len 4096 --train.micro_batch_size 1 --mixed_precision bf16 --fsdp_config.fsdp_activation_checkpointing true --fsdp_config.fsdp_forward_prefetch true"
prof() {  # name, then fsdp-plan's flags
  local n=$1; shift
  timeout 90 $P "$@" --num_processes 8 --num_machines 1 --profile 5 > "$R/plan_$n.txt" 2>&1 || echo "$n: rc $?"
  grep -E "compute:|compute \(|optimizer \(|step  |tokens/s \(" "$R/plan_$n.txt"; stamp "$n"
}
prof 124m_b16_s512 $G2 --data.seq_len 512 --train.micro_batch_size 16
prof xl_b8_s1024 $XL --train.micro_batch_size 8 || true
grep -q "TFLOP/s achieved" "$R/plan_xl_b8_s1024.txt" || prof xl_b4_s1024 $XL --train.micro_batch_size 4
prof llama7b_8layers $L7 --model.n_layer 8
nvidia-smi --query-gpu=name,memory.total --format=csv >> "$R/mpi.txt"
stamp end
