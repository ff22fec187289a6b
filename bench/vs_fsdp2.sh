#!/usr/bin/env bash
# fsdp.cpp against PyTorch FSDP2 on the CPU, on one host, in one run: the same model (GPT-2; on
# FSDP2's side both Hugging Face's GPT2LMHeadModel and the lean nanoGPT one, bench/fsdp2_cpu.py),
# batch, sequence, dtype, ranks (one intra-op thread each), backend (Gloo over loopback) and
# strategy (FULL_SHARD, forward and backward prefetch), alternated --repeats times so that a slow
# stretch of the machine touches both. fsdp.cpp's side is fsdp-bench; FSDP2's is
# bench/fsdp2_cpu.py; both started by fsdp-run. Writes every JSON record and a Markdown table of
# tokens/s and absolute peak resident memory per rank (VmHWM, the libraries and Python included),
# with the ratios, into OUT.
#
# Both sides should run on the same LibTorch (Debian sid's 2.14.1, whose python3-torch and
# python3-transformers FSDP2 needs): inside the sid chroot, which starts in the repository's root,
# with fsdp.cpp built there (about 25 minutes on 2 cores; the run, 3 repeats, about 8 more):
#   FSDP_CHROOT_SUITE=sid scripts/chroot.sh bash -c \
#     'cmake -S . -B build-sid -G Ninja -DCMAKE_BUILD_TYPE=Release &&
#      cmake --build build-sid --target fsdp-bench fsdp-run &&
#      bench/vs_fsdp2.sh --bin build-sid/bin --out bench/results/vs-fsdp2-DATE --repeats 3 --steps 4'
# Debian's torch has no libuv (USE_LIBUV=0 is set here for its TCPStore).
#
# --lora R: LoRA instead, as PEFT defines it (rank R, alpha 2R, every linear layer, the base
# frozen) on Llama 3.2 1B's shape (fsdp-bench --model llama-1b --lora R against fsdp2_cpu.py
# --impl llama --lora R: Hugging Face's LlamaForCausalLM in PEFT's get_peft_model, built on the
# meta device, fully_shard with mixed requires_grad); PEFT's src/ must be on PYTHONPATH (Debian
# packages none: `fetch` huggingface/peft). The GPT-2 sides are not run then.
#
# --rate RATE (as root, on the host, not in the chroot): the same on NPROC emulated hosts of one
# rank each, joined by links of RATE each way (bench/netem.sh, which starts each host's ranks in
# the sid chroot); OUT must then lie inside the repository, which the chroot sees.
#
# Usage: bench/vs_fsdp2.sh [--bin build/bin] [--out DIR] [--repeats 2] [--steps 5]
#                          [--nproc 2] [--seq 512] [--batch 2] [--dtype fp32|bf16]
#                          [--allocator fsdp|glibc] [--rate RATE] [--lora R]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/bin OUT=bench/results/vs-fsdp2 REPEATS=2 STEPS=5 NPROC=2 SEQ=512 BATCH=2 DTYPE=fp32
ALLOCATOR=fsdp RATE="" LORA=0
while (($#)); do
  case $1 in
    --bin | --out | --repeats | --steps | --nproc | --seq | --batch | --dtype | --allocator | --rate | --lora)
      [[ $# -ge 2 ]] || { echo "vs_fsdp2.sh: $1 needs a value" >&2; exit 2; }
      declare "$(tr 'a-z-' 'A-Z_' <<<"${1#--}")=$2"
      shift 2
      ;;
    *) echo "vs_fsdp2.sh: unknown option '$1' (see the usage in $0)" >&2; exit 2 ;;
  esac
done
[[ $LORA =~ ^[0-9]+$ ]] || { echo "vs_fsdp2.sh: --lora: a rank (a positive integer), got '$LORA'" >&2; exit 2; }
if ((LORA > 0)); then
  [[ -z $RATE ]] || { echo "vs_fsdp2.sh: --lora runs on one host only (no --rate)" >&2; exit 2; }
  python3 -c 'import peft' 2>/dev/null ||
    { echo "vs_fsdp2.sh: --lora needs PEFT importable (its src/ on PYTHONPATH)" >&2; exit 2; }
fi
for opt in REPEATS STEPS NPROC SEQ BATCH; do
  [[ ${!opt} =~ ^[1-9][0-9]*$ ]] ||
    { echo "vs_fsdp2.sh: --$(tr 'A-Z' 'a-z' <<<"$opt"): a positive integer, got '${!opt}'" >&2; exit 2; }
done
[[ -x $BIN/fsdp-bench && -x $BIN/fsdp-run ]] || { echo "vs_fsdp2.sh: no fsdp-bench or fsdp-run in $BIN" >&2; exit 2; }
if [[ -z $RATE ]]; then
  python3 -c 'import torch, transformers' 2>/dev/null ||
    { echo "vs_fsdp2.sh: python3 here has no torch or transformers (run it in the sid chroot)" >&2; exit 2; }
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# A third FSDP2 side where jemalloc is installed (apt-get install libjemalloc2 in the chroot): the
# lean model with the heap a performance-minded user preloads. glibc's malloc gives the large
# tensors FSDP2 frees every step back to the kernel, and each step then faults in fresh pages
# (about 0.7 M a step here); fsdp.cpp's host allocator keeps them (bench/NOTES.md).
JEMALLOC=""
if [[ -z $RATE && -e /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 ]]; then
  JEMALLOC=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
else
  echo "vs_fsdp2.sh: no libjemalloc.so.2 (or --rate): FSDP2 runs with glibc's heap only"
fi
export USE_LIBUV=0 OMP_NUM_THREADS=1
source scripts/env.sh
{
  date -u
  lscpu | grep -E 'Model name|^CPU\(s\)' | sed 's/  */ /g'
  [[ -n $RATE ]] && echo "$NPROC emulated hosts x 1 rank, links $RATE each way (bench/netem.sh)"
} >"$OUT/machine.txt"
cat "$OUT/machine.txt"

# The same arguments for both sides, and each side's command: fsdp-run here, or netem.sh's hosts.
COMMON=(--seq "$SEQ" --batch "$BATCH" --steps "$STEPS" --dtype "$DTYPE")
OURS=(--model 124m "${COMMON[@]}" --strategies FULL_SHARD --variants prefetch --allocator "$ALLOCATOR")
if ((LORA > 0)); then
  OURS=(--model llama-1b --lora "$LORA" "${COMMON[@]}" --strategies FULL_SHARD --variants prefetch
        --allocator "$ALLOCATOR")
  COMMON+=(--model llama-1b --lora "$LORA")
fi
side() {  # NAME JSON [IMPL]: runs one side (FSDP2's with model IMPL), its output in OUT/NAME.log
  local name=$1 json=$2 theirs=("${COMMON[@]}" --impl "${3:-hf}")
  if [[ -n $RATE ]]; then
    local netem=(bench/netem.sh --hosts "$NPROC" --rate "$RATE" --chroot sid --bin "$BIN" --json "$json")
    if [[ $name == fsdp2* ]]; then "${netem[@]}" --fsdp2 -- "${theirs[@]}"; else "${netem[@]}" -- "${OURS[@]}"; fi
  elif [[ $name == fsdp2*jemalloc* ]]; then
    # jemalloc never handing pages back (MALLOC_CONF): Python's heap without a fresh page per
    # tensor; its default decay gave more faults than glibc's (1.6 M against 0.7 M a step).
    LD_PRELOAD=$JEMALLOC MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 \
      "$BIN/fsdp-run" --backend gloo --nproc-per-node "$NPROC" python3 bench/fsdp2_cpu.py "${theirs[@]}" --out "$json"
  elif [[ $name == fsdp2* ]]; then
    "$BIN/fsdp-run" --backend gloo --nproc-per-node "$NPROC" python3 bench/fsdp2_cpu.py "${theirs[@]}" --out "$json"
  else
    "$BIN/fsdp-run" --backend gloo --nproc-per-node "$NPROC" "$BIN/fsdp-bench" "${OURS[@]}" --json "$json"
  fi >"$OUT/$name.log" 2>&1 || { echo "vs_fsdp2.sh: $name failed:"; tail -n 20 "$OUT/$name.log"; exit 1; } >&2
}
for ((r = 1; r <= REPEATS; r++)); do
  side "fsdp-cpp-$r" "$OUT/fsdp-cpp-$r.json"
  if ((LORA > 0)); then
    side "fsdp2-llama-$r" "$OUT/fsdp2-llama-$r.json" llama
    echo "repeat $r of $REPEATS done"
    continue
  fi
  side "fsdp2-hf-$r" "$OUT/fsdp2-hf-$r.json" hf
  side "fsdp2-nanogpt-$r" "$OUT/fsdp2-nanogpt-$r.json" nanogpt
  [[ -z $JEMALLOC ]] || side "fsdp2-nanogpt-jemalloc-$r" "$OUT/fsdp2-nanogpt-jemalloc-$r.json" nanogpt
  echo "repeat $r of $REPEATS done"
done
python3 bench/vs_fsdp2_table.py "$OUT" | tee "$OUT/table.md"
