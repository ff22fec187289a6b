#!/usr/bin/env bash
# The live PEFT round trip, run by hand (CI runs test_lora against PEFT's committed goldens
# instead, which needs no Python): fsdp-train LoRA-fine-tunes the tiny Llama fixture with a
# tokenizer (tests/data/hf/models/llama-generate) on 2 ranks, on the bundled corpus, all-linear, r 8,
# lm_head trained in full, and exports PEFT's adapter folder (train.export_dir) and the merged
# model (fsdp-ckpt export --merge); then PEFT itself (its source at PEFT_SRC, default
# build/peft/src, in the sid chroot of scripts/chroot.sh) loads the adapter onto the base with
# PeftModel.from_pretrained and must find no missing or unexpected key, give the logits
# fsdp.cpp's eval-time model gives (through the merged folder, which transformers loads alone) and
# greedy tokens equal to `fsdp-train sample --model.adapter`'s, and merge_and_unload must equal the
# merged export. Results: build/peft-roundtrip/report.json. Needs root (the chroot), the build and
# the assets. Usage: scripts/peft_roundtrip.sh
set -euo pipefail
cd "$(dirname "$0")/.."
W=$PWD/build/peft-roundtrip
BASE=$PWD/tests/data/hf/models/llama-generate
PEFT_SRC=${PEFT_SRC:-build/peft/src}
rm -rf "$W"
mkdir -p "$W"
PROMPT="The Congress shall"
build/bin/fsdp-run --nproc-per-node 2 build/bin/fsdp-train --model.pretrained "$BASE" \
  --data.dataset sotu --data.seq_len 64 --data.cache_dir "$W/cache" \
  --lora.target_modules all-linear --lora.r 8 --lora.alpha 16 --lora.modules_to_save lm_head \
  --train.micro_batch_size 2 --optim.max_steps 6 --optim.warmup_steps 1 --optim.lr 3e-3 \
  --train.eval_every 0 --train.checkpoint_every 6 --train.checkpoint_dir "$W/ckpt" \
  --train.export_dir "$W/adapter" >"$W/train.log" 2>&1 || { tail -5 "$W/train.log"; exit 1; }
grep -E "^model|^done" "$W/train.log"
build/bin/fsdp-ckpt export "$W/ckpt" "$W/merged" --merge --dtype fp32
build/bin/fsdp-train sample --model.pretrained "$BASE" --model.adapter "$W/adapter" \
  --prompt "$PROMPT" --max-new-tokens 12 --temperature 0 >"$W/sample.txt" 2>&1 ||
  { cat "$W/sample.txt"; exit 1; }
FSDP_CHROOT_SUITE=sid scripts/chroot.sh env PYTHONPATH="$PWD/$PEFT_SRC" HF_HUB_OFFLINE=1 \
  python3 tests/hf/peft_roundtrip.py "$BASE" "$W" "$PROMPT"
