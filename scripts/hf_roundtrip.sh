#!/usr/bin/env bash
# The live Hugging Face round trip, run by hand (CI runs the fixture tests instead, which need no
# Python): transformers (Debian sid's, in the chroot of scripts/chroot.sh) makes a tiny model folder
# of every family fsdp.cpp imports (gpt2; llama with GQA, untied, theta 5e5, llama3 RoPE scaling,
# bf16 in several shards; llama tied; llama with linear scaling; qwen2; mistral; smollm2 (a tied
# llama with the Digits + ByteLevel tokenizer); qwen3 with q/k
# norms, bf16; smollm3 with a NoPE layer and attention biases; phi3 with longrope; phi4-mini with
# longrope and partial rotary, tied, bf16, the o200k-style tokenizer; gemma3 with a sliding window shorter than the sequence)
# with a tokenizer
# trained on the bundled corpus; fsdp-train fine-tunes each for 20 steps on 2 ranks from the folder
# (model.pretrained) and writes the result as a folder (train.export_dir); `fsdp-train eval` scores
# it on a fixed held-out batch; then transformers loads every exported folder (from_pretrained, no
# missing or unexpected keys, the same model_type, the same tokenizer ids), its loss must equal ours within 1e-5
# relative, and `fsdp-train sample --temperature 0` of it gives generate()'s text. Results:
# build/hf-roundtrip/report.json. Needs root (the chroot), scripts/setup.sh's
# build and the assets. Usage: scripts/hf_roundtrip.sh
set -euo pipefail
cd "$(dirname "$0")/.."
W=$PWD/build/hf-roundtrip
rm -rf "$W"
mkdir -p "$W/out"
SID=(env FSDP_CHROOT_SUITE=sid scripts/chroot.sh)
PROMPT="Fellow citizens of the Senate"  # tests/hf/roundtrip.py PROMPT
"${SID[@]}" bash -c 'python3 -c "import transformers" 2>/dev/null ||
  apt-get install -y -q python3-transformers python3-tokenizers python3-torch python3-safetensors >/dev/null'
"${SID[@]}" python3 tests/hf/roundtrip.py make "$W"
for m in gpt2 llama llama-tied llama-linear qwen2 mistral smollm2 qwen3 smollm3 phi3 phi4-mini gemma3; do
  build/bin/fsdp-run --nproc-per-node 2 build/bin/fsdp-train --model.pretrained "$W/in/$m" \
    --data.seq_len 64 --data.cache_dir "$W/cache" --train.micro_batch_size 4 \
    --optim.max_steps 20 --optim.warmup_steps 2 --optim.lr 1e-3 --train.eval_every 10 \
    --train.checkpoint_every 20 --train.checkpoint_dir "$W/ckpt/$m" --train.export_dir "$W/out/$m" \
    >"$W/$m.train.log" 2>&1 || { tail -5 "$W/$m.train.log"; exit 1; }
  grep -E "^done|^eval" "$W/$m.train.log" | tail -2
  build/bin/fsdp-train eval --model.pretrained "$W/out/$m" --data.dataset "$W/in/$m/batch.bin" \
    --data.val_dataset "$W/in/$m/batch.bin" --data.seq_len 64 --data.cache_dir "$W/cache" \
    --train.micro_batch_size 4 --train.eval_batches 2 2>&1 | grep '^eval:' | tee "$W/out/$m.ours.txt"
  build/bin/fsdp-train sample --model.pretrained "$W/out/$m" --prompt "$PROMPT" --temperature 0 \
    --max-new-tokens 12 >"$W/out/$m.sample.txt" 2>&1 || { cat "$W/out/$m.sample.txt"; exit 1; }
done
"${SID[@]}" python3 tests/hf/roundtrip.py check "$W"
