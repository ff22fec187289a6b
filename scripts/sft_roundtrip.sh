#!/usr/bin/env bash
# The live instruction fine-tuning round trip, run by hand (CI runs test_sft, sft_e2e and
# test_chat_template instead, which need no Python): transformers (Debian sid's, in the chroot of
# scripts/chroot.sh) makes a tiny model folder per chat family with its published chat template
# (Llama 3.2, Qwen2.5, Qwen3, SmolLM2, Mistral, Phi-3.5, Phi-4-mini, Gemma 3); fsdp-train
# fine-tunes each on the bundled conversations on 2 ranks, loss on the answers, packed, and exports
# it; `fsdp-train sample --chat` of the export must print exactly what transformers'
# generate(apply_chat_template(add_generation_prompt=True)) gives, greedy, and for Llama 3.2, Qwen2.5
# and Qwen3 `sample --chat-file` of the question with a tool offered what
# generate(apply_chat_template(tools=...)) gives. Results:
# build/sft-roundtrip/report.json. Needs root (the chroot), scripts/setup.sh's build and the assets.
# Usage: scripts/sft_roundtrip.sh
set -euo pipefail
cd "$(dirname "$0")/.."
W=$PWD/build/sft-roundtrip
rm -rf "$W"
mkdir -p "$W/out"
SID=(env FSDP_CHROOT_SUITE=sid scripts/chroot.sh)
QUESTION="How did President Lincoln open the 1862 State of the Union address?"  # sft_roundtrip.py
"${SID[@]}" python3 tests/hf/sft_roundtrip.py make "$W"
for m in llama3.2 qwen2.5 qwen3 smollm2 mistral phi3.5 phi4-mini gemma3; do
  train_on=assistant
  [[ $m == qwen3 ]] && train_on=last_assistant  # its template rewrites earlier turns
  build/bin/fsdp-run --nproc-per-node 2 build/bin/fsdp-train --model.pretrained "$W/in/$m" \
    --data.dataset "$W/in/$m/chat.jsonl" --data.train_on "$train_on" --data.seq_len 256 \
    --data.truncate true \
    --data.cache_dir "$W/cache" --train.micro_batch_size 2 --optim.max_steps 10 \
    --optim.warmup_steps 2 --optim.lr 1e-3 --train.eval_every 5 --train.checkpoint_every 10 \
    --train.checkpoint_dir "$W/ckpt/$m" --train.export_dir "$W/out/$m" \
    >"$W/$m.train.log" 2>&1 || { tail -5 "$W/$m.train.log"; exit 1; }
  grep -E "^data|^done" "$W/$m.train.log"
  build/bin/fsdp-train sample --model.pretrained "$W/out/$m" --chat "$QUESTION" --temperature 0 \
    >"$W/out/$m.sample.txt" 2>&1 || { cat "$W/out/$m.sample.txt"; exit 1; }
  # The same question with a tool offered (sft_roundtrip.py's TOOLS), where the template shows tools.
  if [[ -f "$W/in/$m/ask_tools.jsonl" ]]; then
    # Its prompt (the tool's schema and instructions) passes the folder's context, data.seq_len
    # for a RoPE model without model.n_positions: generate() reads the whole prompt, so must we.
    build/bin/fsdp-train sample --model.pretrained "$W/out/$m" --chat-file "$W/in/$m/ask_tools.jsonl" \
      --model.n_positions 1024 --temperature 0 >"$W/out/$m.tools.sample.txt" 2>&1 ||
      { cat "$W/out/$m.tools.sample.txt"; exit 1; }
  fi
done
"${SID[@]}" python3 tests/hf/sft_roundtrip.py check "$W"
