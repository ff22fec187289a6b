#!/usr/bin/env bash
# fsdp-train end to end, under fsdp-run, on a small corpus cut from the bundled SOTU texts:
#  - a 2-rank FULL_SHARD run trains: validation loss at the end below the start, one metrics line
#    per step, checkpoints at steps 10 and 20;
#  - resume reproduces: from the step-10 checkpoint, new processes at world size 2 log bitwise the
#    same losses for steps 11-20 as the straight run; at world size 1 with the same global batch
#    (micro_batch_size doubled), within 1e-4;
#  - `sample` prints the prompt and its continuation, the same text twice for the same seed;
#  - fsdp-ckpt export writes a Hugging Face folder; `eval` of it and of the checkpoint give the
#    run's validation loss, `sample` from it the checkpoint's greedy text, a fine-tune from it starts there and train.export_dir
#    writes the tuned folder;
#  - model.init_from a consolidated checkpoint reproduces its validation loss (every rank reading,
#    or rank 0 alone with cpu_ram_efficient_loading);
#  - fsdp-ckpt: inspect verifies the checksums (and names a damaged shard), consolidate writes the
#    same bytes as FULL_STATE_DICT's model.safetensors and as consolidating a resharded copy;
#  - partial fine-tuning (train.freeze) from that folder: what trains counted, the checkpoint
#    without the frozen tensors, a bitwise resume, the export's frozen tensors as they came in;
#  - LoRA from that folder: PEFT's adapter folder out, a bitwise resume (refused onto a changed
#    base), eval of the checkpoint,
#    of the adapter read back (model.adapter) and of the merged export equal, training on from it;
#  - a bad key or value exits 2 naming the key; num_processes that disagrees with the world fails;
#    a fresh run refuses a folder holding checkpoints, and a resume refuses another model;
#  - failures named where the user looks (issue 19): a hung rank (SIGSTOP) is named after
#    train.process_group_timeout; a rank's unreadable shard is named in rank 0's error without
#    --log-dir; consolidate refuses an uncommitted checkpoint; a resume says what it found (the
#    newest committed step when `latest` is missing, or why there is none); an unwritable
#    checkpoint folder and tokens outside the vocabulary fail before the first step; a token file's
#    data line names it once and does not claim a cache;
#  - one owner per checkpoint folder (issue 28): a second run into a folder in use is refused, with
#    --resume or without, and the holder's checkpoints verify clean; consolidate into its own input
#    is refused; sample from another folder resolves the run's relative paths, applies overrides
#    and refuses one that changes the model.
# Usage: trainer_e2e.sh BUILD_BIN_DIR BACKEND PORT SOURCE_DIR
# Exits 77 (skipped) without the assets of scripts/fetch_assets.sh.
set -uo pipefail
BIN=$1 BACKEND=$2 PORT=$3 SRC=$4
if [[ ! -s $SRC/assets/gpt2/encoder.json || ! -d $SRC/assets/sotu ]]; then
  echo "skipped: assets/gpt2 or assets/sotu missing (run scripts/fetch_assets.sh)"
  exit 77
fi
WORK=$(mktemp -d /tmp/fsdp_trainer.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

mkdir -p "$WORK/corpus"
cp "$SRC"/assets/sotu/19[0-2]*.txt "$WORK/corpus/"
COMMON=(--data.dataset "$WORK/corpus" --data.tokenizer_dir "$SRC/assets/gpt2"
  --data.cache_dir "$WORK/cache" --data.seq_len 64 --data.val_split 0.1
  --model.n_layer 2 --model.n_embd 64 --model.n_head 4
  --optim.lr 3e-3 --optim.warmup_steps 5 --optim.max_steps 20
  --train.eval_every 10 --train.eval_batches 4 --train.log_every 1 --train.checkpoint_every 10)
# train NP ROOT ARGS...: rank 0's output on stdout.
train() {
  local np=$1 root=$2
  shift 2
  PORT=$((PORT + 1))
  timeout 300 "$BIN/fsdp-run" --nproc-per-node "$np" --backend "$BACKEND" --master-port "$PORT" \
    "$BIN/fsdp-train" "${COMMON[@]}" --train.checkpoint_dir "$root/ckpt" \
    --train.metrics_file "$root/metrics.jsonl" "$@"
}
# "step loss" pairs of steps 11-20 from a metrics file.
second_half() { grep -o '"step": [0-9]*, "loss": [^,]*' "$1" | tr -d '",' |
  awk '$2 > 10 { print $2, $4 }'; }

train 2 "$WORK/straight" --train.micro_batch_size 4 >"$WORK/straight.txt" 2>&1 ||
  fail "the straight run exited $?: $(tail -5 "$WORK/straight.txt")"
cat "$WORK/straight.txt"
read -r first last < <(sed -nE 's/^done: .*val loss ([0-9.]+) -> ([0-9.]+).*/\1 \2/p' "$WORK/straight.txt")
if [[ -n ${first:-} ]] && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }'; then
  echo "ok: validation loss fell from $first to $last"
else
  fail "validation loss did not fall by 0.5: '${first:-?}' -> '${last:-?}'"
fi
[[ $(grep -c '"loss"' "$WORK/straight/metrics.jsonl") == 20 ]] || fail "expected 20 metrics lines"
for s in 10 20; do
  [[ -e $WORK/straight/ckpt/step_000000$s/COMMITTED ]] || fail "no committed checkpoint at step $s"
done

# fsdp-ckpt on the straight run's checkpoints.
CK="$BIN/fsdp-ckpt"
"$CK" inspect "$WORK/straight/ckpt" >"$WORK/inspect.txt" 2>&1 || fail "inspect exited $?"
grep -q "checksums: all verified" "$WORK/inspect.txt" || fail "inspect: $(cat "$WORK/inspect.txt")"
"$CK" consolidate "$WORK/straight/ckpt" "$WORK/full.safetensors" >/dev/null || fail "consolidate exited $?"
"$CK" reshard "$WORK/straight/ckpt" "$WORK/resharded" --world-size 3 >/dev/null || fail "reshard exited $?"
"$CK" inspect "$WORK/resharded" | grep -q "saved by 3 ranks" || fail "the resharded copy is not for 3 ranks"
"$CK" consolidate "$WORK/resharded" "$WORK/full3.safetensors" >/dev/null || fail "consolidate (3) exited $?"
cmp -s "$WORK/full.safetensors" "$WORK/full3.safetensors" ||
  fail "consolidating the resharded copy gives other bytes"
if [[ -x /usr/bin/python3 ]]; then
  /usr/bin/python3 "$SRC/tests/safetensors_check.py" --require transformer.wte.weight \
    --require transformer.h.1.mlp.c_proj.weight "$WORK/full.safetensors" >/dev/null ||
    fail "the consolidated file fails tests/safetensors_check.py"
fi
cp -r "$WORK/straight/ckpt/step_00000020" "$WORK/damaged"
printf '\xff' | dd of="$WORK/damaged/shard_00001-of-00002.bin" bs=1 seek=5000 conv=notrunc 2>/dev/null
out=$("$CK" inspect "$WORK/damaged" 2>&1)
[[ $? == 1 && $out == *"DAMAGED"*"shard_00001-of-00002.bin"* ]] || fail "a damaged shard: $out"
((failures == 0)) && echo "ok: fsdp-ckpt inspect, consolidate, reshard"

# model.init_from: a fresh run from the consolidated step-20 model evaluates, before its first
# step, to the straight run's step-20 validation loss; read by every rank, or by rank 0 alone.
want=$(sed -nE 's/^eval  step    20 \| val loss ([0-9.]+).*/\1/p' "$WORK/straight.txt")
for ram_efficient in false true; do
  out=$(train 2 "$WORK/init_$ram_efficient" --train.micro_batch_size 4 --optim.max_steps 1 \
    --optim.warmup_steps 1 --train.checkpoint_every 0 --model.init_from "$WORK/full.safetensors" \
    --fsdp_config.fsdp_sync_module_states true \
    --fsdp_config.fsdp_cpu_ram_efficient_loading "$ram_efficient" 2>&1)
  got=$(sed -nE 's/^eval  step     0 \| val loss ([0-9.]+).*/\1/p' <<<"$out")
  [[ -n $want && $got == "$want" ]] && echo "ok: init_from (cpu_ram_efficient_loading $ram_efficient): val loss $got" ||
    fail "init_from (cpu_ram_efficient_loading $ram_efficient): val loss '$got', want '$want': $out"
done

# FULL_STATE_DICT: each checkpoint also holds the full model, byte for byte what consolidate writes.
train 2 "$WORK/full_sd" --train.micro_batch_size 4 --optim.max_steps 4 --optim.warmup_steps 2 --train.checkpoint_every 4 \
  --train.eval_every 0 --fsdp_config.fsdp_state_dict_type FULL_STATE_DICT >"$WORK/full_sd.txt" 2>&1 ||
  fail "the FULL_STATE_DICT run exited $?: $(tail -5 "$WORK/full_sd.txt")"
"$CK" consolidate "$WORK/full_sd/ckpt" "$WORK/full_sd.safetensors" >/dev/null
cmp -s "$WORK/full_sd/ckpt/step_00000004/model.safetensors" "$WORK/full_sd.safetensors" &&
  echo "ok: FULL_STATE_DICT wrote model.safetensors, identical to fsdp-ckpt consolidate" ||
  fail "FULL_STATE_DICT's model.safetensors differs from the consolidated checkpoint"

# Resume from step 10 at world size 2 (bitwise) and 1 (same global batch, within 1e-4).
for np in 2 1; do
  root="$WORK/resume_$np"
  mkdir -p "$root/ckpt"
  cp -r "$WORK/straight/ckpt/step_00000010" "$root/ckpt/"
  echo step_00000010 >"$root/ckpt/latest"
  train "$np" "$root" --train.micro_batch_size $((8 / np)) --resume >"$root.txt" 2>&1 ||
    fail "resume at world size $np exited $?: $(tail -5 "$root.txt")"
  grep -q "resumed from .*step 10" "$root.txt" || fail "world size $np did not resume from step 10"
  tol=0
  [[ $np == 1 ]] && tol=1e-4
  paste -d' ' <(second_half "$WORK/straight/metrics.jsonl") <(second_half "$root/metrics.jsonl") |
    awk -v np="$np" -v tol="$tol" '
      { d = $2 - $4; if (d < 0) d = -d; if (d > max) max = d; if ($1 != $3) bad = 1; n++ }
      END {
        if (n != 10 || bad) { printf "FAIL: world size %s: %d steps to compare\n", np, n; exit 1 }
        if (max > tol) { printf "FAIL: world size %s: losses differ by %g > %g\n", np, max, tol; exit 1 }
        printf "ok: resumed at world size %s, losses of steps 11-20 within %g of the straight run\n", np, max
      }' || failures=$((failures + 1))
done

# Sampling from the last checkpoint, alone (one rank), twice.
for i in 1 2; do
  "$BIN/fsdp-train" sample --checkpoint "$WORK/straight/ckpt" --prompt "The Congress" \
    --max-new-tokens 12 --seed 7 >"$WORK/sample$i.txt" 2>&1 || fail "sample exited $?"
done
grep -q "^The Congress" "$WORK/sample1.txt" || fail "the sample does not start with the prompt: $(cat "$WORK/sample1.txt")"
cmp -s "$WORK/sample1.txt" "$WORK/sample2.txt" || fail "two samples with the same seed differ"
((failures == 0)) && echo "ok: sample: $(grep -A1 '^--- sample' "$WORK/sample1.txt" | tr '\n' ' ')"
# The text after a sample's header line.
sample_text() { sed -n '/^--- sample/,$p' "$1" | sed 1d; }

# A Hugging Face folder out and back in: fsdp-ckpt export writes one; `eval` of it at 2 ranks gives
# the straight run's step-20 validation loss, as `eval` of the checkpoint does; `sample` from it
# continues the prompt as the checkpoint did (greedy: the folder's generation_config.json asks for
# that, as transformers' default does); a fine-tune from it (model.pretrained) starts there.
"$CK" export "$WORK/straight/ckpt" "$WORK/hf" >/dev/null || fail "fsdp-ckpt export exited $?"
for f in config.json generation_config.json model.safetensors vocab.json merges.txt tokenizer_config.json; do
  [[ -s $WORK/hf/$f ]] || fail "export wrote no $f"
done
evaluate() {  # evaluate ARGS...: the loss eval prints
  PORT=$((PORT + 1))
  timeout 120 "$BIN/fsdp-run" --nproc-per-node 2 --backend "$BACKEND" --master-port "$PORT" \
    "$BIN/fsdp-train" eval "${COMMON[@]}" --train.micro_batch_size 4 "$@" 2>&1 |
    sed -nE 's/^eval: loss ([0-9.]+).*/\1/p' | awk '{ printf "%.4f", $1 }'
}
from_ckpt=$(evaluate --checkpoint "$WORK/straight/ckpt")
from_hf=$(evaluate --model.pretrained "$WORK/hf")
[[ -n $want && $from_ckpt == "$want" && $from_hf == "$want" ]] &&
  echo "ok: eval of the checkpoint and of the exported folder: $from_hf" ||
  fail "eval: checkpoint '$from_ckpt', folder '$from_hf', want the step-20 val loss '$want'"
"$BIN/fsdp-train" sample --model.pretrained "$WORK/hf" --prompt "The Congress" \
  --max-new-tokens 12 --seed 7 >"$WORK/sample_hf.txt" 2>&1 || fail "sample from the folder exited $?"
"$BIN/fsdp-train" sample --checkpoint "$WORK/straight/ckpt" --prompt "The Congress" \
  --max-new-tokens 12 --temperature 0 >"$WORK/sample_greedy.txt" 2>&1 || fail "greedy sample exited $?"
# A temperature so small that the logits over it overflow samples the argmax (issue 61).
"$BIN/fsdp-train" sample --checkpoint "$WORK/straight/ckpt" --prompt "The Congress" \
  --max-new-tokens 12 --temperature 1e-300 --seed 7 >"$WORK/sample_cold.txt" 2>&1 ||
  fail "sample at temperature 1e-300 exited $?: $(tail -n 3 "$WORK/sample_cold.txt")"
[[ $(sample_text "$WORK/sample_cold.txt") == "$(sample_text "$WORK/sample_greedy.txt")" ]] ||
  fail "sample at temperature 1e-300 differs from the greedy one: $(cat "$WORK/sample_cold.txt")"
grep -q "^sample: greedy" "$WORK/sample_hf.txt" &&
  [[ -n $(sample_text "$WORK/sample_hf.txt") &&
     $(sample_text "$WORK/sample_hf.txt") == "$(sample_text "$WORK/sample_greedy.txt")" ]] ||
  fail "sample from the folder differs from the checkpoint's greedy one: $(cat "$WORK/sample_hf.txt" "$WORK/sample_greedy.txt")"
out=$(train 2 "$WORK/finetune" --train.micro_batch_size 4 --optim.max_steps 1 \
  --optim.warmup_steps 1 --train.checkpoint_every 1 --model.pretrained "$WORK/hf" \
  --train.export_dir "$WORK/hf_tuned" 2>&1)
got=$(sed -nE 's/^eval  step     0 \| val loss ([0-9.]+).*/\1/p' <<<"$out")
[[ $got == "$want" ]] && echo "ok: model.pretrained fine-tune starts at val loss $got" ||
  fail "model.pretrained: val loss '$got' before the first step, want '$want': $out"
cmp -s "$WORK/hf/config.json" "$WORK/hf_tuned/config.json" && [[ -s $WORK/hf_tuned/model.safetensors ]] &&
  echo "ok: train.export_dir wrote the fine-tuned folder, config.json as it came in" ||
  fail "train.export_dir: $(ls "$WORK/hf_tuned" 2>&1)"

# Partial fine-tuning (train.freeze) from the exported folder: the token table and the first block
# frozen. The log says how many train; the checkpoint holds only those (its metadata names the
# frozen ones); a resume at step 2 logs bitwise the straight run's steps 3-4 (the frozen values
# read again from the folder); the exported folder holds the frozen tensors byte for byte as they
# came in and the others changed; eval of that folder equals eval of its checkpoint.
FREEZE=(--model.pretrained "$WORK/hf" --train.freeze "transformer.wte.weight,transformer.h.0.*"
  --train.micro_batch_size 4 --optim.warmup_steps 1 --train.checkpoint_every 2)
out=$(train 2 "$WORK/frozen" "${FREEZE[@]}" --optim.max_steps 4 --train.export_dir "$WORK/hf_frozen" 2>&1)
[[ $out == *"parameters ("*" of them train)"* ]] || fail "train.freeze: no count of what trains: $out"
grep -q '"frozen_params": \[$' "$WORK/frozen/ckpt/step_00000004/metadata.json" &&
  grep -q '"name": "transformer.h.0.attn.c_attn.weight"' "$WORK/frozen/ckpt/step_00000004/metadata.json" ||
  fail "train.freeze: the checkpoint's metadata lists no frozen parameters"
mv "$WORK/frozen/metrics.jsonl" "$WORK/frozen_straight.jsonl"
rm -rf "$WORK/frozen/ckpt/step_00000004"
echo step_00000002 >"$WORK/frozen/ckpt/latest"
train 2 "$WORK/frozen" "${FREEZE[@]}" --optim.max_steps 4 --train.resume auto >/dev/null 2>&1 ||
  fail "train.freeze: the resume exited $?"
steps() { grep -o '"step": [0-9]*, "loss": [^,]*' "$1" | tr -d '",' | awk '$2 > 2 { print $2, $4 }'; }
[[ -n $(steps "$WORK/frozen/metrics.jsonl") &&
   $(steps "$WORK/frozen/metrics.jsonl") == "$(steps "$WORK/frozen_straight.jsonl")" ]] &&
  echo "ok: train.freeze: the resume logs the straight run's losses" ||
  fail "train.freeze: resumed $(steps "$WORK/frozen/metrics.jsonl"), straight $(steps "$WORK/frozen_straight.jsonl")"
/usr/bin/python3 - "$WORK/hf/model.safetensors" "$WORK/hf_frozen/model.safetensors" <<'PY' ||
import json, struct, sys
def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]]
            for k, v in header.items() if k != "__metadata__"}
before, after = tensors(sys.argv[1]), tensors(sys.argv[2])
frozen = lambda k: k == "transformer.wte.weight" or k.startswith("transformer.h.0.")
assert before.keys() == after.keys(), (sorted(before), sorted(after))
bad = [k for k in before if frozen(k) != (before[k] == after[k])]
assert not bad, "frozen tensors changed, or trained ones did not: %s" % bad
PY
  fail "train.freeze: the exported folder's tensors"
# (COMMON's warmup of 5 steps would not fit the checkpoint's 4: the schedule as it was trained.)
frozen_ckpt=$(evaluate --checkpoint "$WORK/frozen/ckpt" --optim.max_steps 4 --optim.warmup_steps 1)
frozen_hf=$(evaluate --model.pretrained "$WORK/hf_frozen")
[[ -n $frozen_ckpt && $frozen_ckpt == "$frozen_hf" ]] &&
  echo "ok: train.freeze: eval of the checkpoint and of its export: $frozen_hf" ||
  fail "train.freeze: eval of the checkpoint '$frozen_ckpt', of the export '$frozen_hf'"
# LoRA from the exported folder (adapters on c_attn and c_fc, ln_f trained in full): the export
# is PEFT's adapter folder; a resume logs the straight run's losses bitwise; eval of the
# checkpoint, of the base with the adapter (model.adapter) and of the merged export (fsdp-ckpt
# export --merge) agree; a run continuing from the adapter starts where the checkpoint ended.
LORA=(--model.pretrained "$WORK/hf" --lora.target_modules c_attn,c_fc --lora.r 4 --lora.alpha 8
  --lora.modules_to_save ln_f --train.micro_batch_size 4 --optim.warmup_steps 1
  --train.checkpoint_every 2)
out=$(train 2 "$WORK/lora" "${LORA[@]}" --optim.max_steps 4 --train.export_dir "$WORK/lora_out" 2>&1)
[[ $out == *" of them train)"* && -s $WORK/lora_out/adapter_config.json &&
   -s $WORK/lora_out/adapter_model.safetensors ]] &&
  grep -q '"peft_type": "LORA"' "$WORK/lora_out/adapter_config.json" &&
  grep -q 'base_model.model.transformer.h.0.attn.c_attn.lora_A.weight' "$WORK/lora_out/adapter_model.safetensors" ||
  fail "lora: no PEFT adapter folder: $(ls "$WORK/lora_out" 2>&1) $out"
mv "$WORK/lora/metrics.jsonl" "$WORK/lora_straight.jsonl"
rm -rf "$WORK/lora/ckpt/step_00000004"
echo step_00000002 >"$WORK/lora/ckpt/latest"
train 2 "$WORK/lora" "${LORA[@]}" --optim.max_steps 4 --train.resume auto >/dev/null 2>&1 ||
  fail "lora: the resume exited $?"
[[ -n $(steps "$WORK/lora/metrics.jsonl") &&
   $(steps "$WORK/lora/metrics.jsonl") == "$(steps "$WORK/lora_straight.jsonl")" ]] &&
  echo "ok: lora: the resume logs the straight run's losses" ||
  fail "lora: resumed $(steps "$WORK/lora/metrics.jsonl"), straight $(steps "$WORK/lora_straight.jsonl")"
cp -r "$WORK/hf" "$WORK/hf_changed"  # the same shapes, one byte of the last tensor changed
/usr/bin/python3 -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[-1] ^= 0xFF; open(p, "wb").write(b)' \
  "$WORK/hf_changed/model.safetensors"
out=$(train 2 "$WORK/lora" "${LORA[@]}" --model.pretrained "$WORK/hf_changed" --optim.max_steps 6 \
  --train.resume auto 2>&1)
[[ $? != 0 && $out == *"frozen weights of another fingerprint"* ]] &&
  echo "ok: lora: a resume onto changed base weights is refused" ||
  fail "lora: a resume onto changed base weights: $out"
"$CK" export "$WORK/lora/ckpt" "$WORK/lora_merged" --merge >/dev/null || fail "export --merge exited $?"
lora_ckpt=$(evaluate --checkpoint "$WORK/lora/ckpt" --optim.max_steps 4 --optim.warmup_steps 1)
lora_adapter=$(evaluate --model.pretrained "$WORK/hf" --model.adapter "$WORK/lora_out")
lora_merged=$(evaluate --model.pretrained "$WORK/lora_merged")
[[ -n $lora_ckpt && $lora_ckpt == "$lora_adapter" && $lora_ckpt == "$lora_merged" ]] &&
  echo "ok: lora: eval of the checkpoint, the adapter and the merged model: $lora_ckpt" ||
  fail "lora: eval of the checkpoint '$lora_ckpt', the adapter '$lora_adapter', merged '$lora_merged'"
out=$(train 2 "$WORK/lora_more" --model.pretrained "$WORK/hf" --model.adapter "$WORK/lora_out" \
  --train.micro_batch_size 4 --optim.max_steps 1 --optim.warmup_steps 1 --train.checkpoint_every 0 2>&1)
got=$(sed -nE 's/^eval  step     0 \| val loss ([0-9.]+).*/\1/p' <<<"$out" | awk '{ printf "%.4f", $1 }')
[[ -n $got && $got == "$lora_ckpt" ]] && echo "ok: lora: training continues from the adapter at $got" ||
  fail "lora: a run from the adapter starts at '$got', the checkpoint ended at '$lora_ckpt': $out"
out=$("$BIN/fsdp-train" "${COMMON[@]}" --model.pretrained "$WORK/hf" --lora.target_modules q_proj \
  --train.checkpoint_dir "$WORK/lora_bad" 2>&1)
[[ $? != 0 && $out == *"lora.target_modules"*"q_proj"*"matches no linear layer"*"c_attn"* ]] ||
  fail "lora: a target that matches nothing: $out"

out=$("$BIN/fsdp-train" "${COMMON[@]}" --train.freeze "transformer.nothing.*" \
  --model.pretrained "$WORK/hf" --train.checkpoint_dir "$WORK/frozen_bad" 2>&1)
[[ $? != 0 && $out == *"train.freeze"*"matches no parameter"*"transformer.wte.weight"* ]] ||
  fail "train.freeze matching nothing: $out"
out=$("$BIN/fsdp-train" "${COMMON[@]}" --train.freeze "transformer.h.0.*" \
  --train.checkpoint_dir "$WORK/frozen_bad" 2>&1)
[[ $? == 2 && $out == *"train.freeze"*"model.pretrained"* ]] || fail "train.freeze from scratch: $out"

# Bad input.
out=$("$BIN/fsdp-train" --optim.lrr 1 2>&1)
rc=$?
[[ $rc == 2 && $out == *"--optim.lrr"*"did you mean"*"optim.lr"* ]] || fail "unknown key: exit $rc: $out"
out=$("$BIN/fsdp-train" "${COMMON[@]}" --num_processes 3 2>&1)
rc=$?
[[ $rc == 1 && $out == *"num_processes"*"3"* ]] || fail "num_processes 3 with 1 rank: exit $rc: $out"

# A fresh run never writes over another run's checkpoints; a resume refuses another model.
out=$(train 1 "$WORK/straight" 2>&1)
[[ $? != 0 && $out == *"train.checkpoint_dir"*"already holds a run"* ]] ||
  fail "a fresh run into a used checkpoint folder: $out"
out=$(train 1 "$WORK/straight" --resume --model.norm_eps 1e-6 2>&1)
[[ $? != 0 && $out == *"holds another model; what differs (the checkpoint's value, then this run's):"*"model.norm_eps: 1e-05 and 1e-06"* &&
  $out != *"fsdp_config:"* ]] || fail "resuming another model: $out"

# --- failures named where the user looks --------------------------------------------------------

# The pid of rank R of the job whose environment has FSDP_E2E_TAG=TAG (RANK under Gloo,
# OMPI_COMM_WORLD_RANK under MPI); empty while it has not started.
rank_pid() {
  local e env
  for e in /proc/[0-9]*/environ; do
    [[ $(cat "${e%/environ}/comm" 2>/dev/null) == fsdp-train ]] || continue
    env=$(tr '\0' '\n' <"$e" 2>/dev/null)
    grep -qx "FSDP_E2E_TAG=$1" <<<"$env" && grep -Eqx "(RANK|OMPI_COMM_WORLD_RANK)=$2" <<<"$env" &&
      { e=${e#/proc/}; echo "${e%/environ}"; return; }
  done
}

# A hung rank: rank 1 is stopped (kill -STOP) in the middle of training, with the default
# BACKWARD_PRE prefetch and a 2 s train.process_group_timeout. Rank 0's error, the one fsdp-run
# shows, names the collective and rank 1: as the rank that did not issue it, or, when the stop
# caught rank 1 inside a collective it had issued, as stopped.
hung=$WORK/hung
PORT=$((PORT + 1))
FSDP_E2E_TAG=$hung timeout 120 "$BIN/fsdp-run" --nproc-per-node 2 --backend "$BACKEND" \
  --master-port "$PORT" "$BIN/fsdp-train" "${COMMON[@]}" --train.checkpoint_dir "$hung/ckpt" \
  --train.metrics_file "$hung.jsonl" --optim.max_steps 5000 --train.eval_every 0 \
  --train.checkpoint_every 0 --train.process_group_timeout 2 >"$hung.txt" 2>&1 &
job=$!
stopped=""
for _ in $(seq 600); do  # until rank 0 has logged three steps (at most 60 s)
  [[ -s $hung.jsonl && $(grep -c '"loss"' "$hung.jsonl") -ge 3 ]] && stopped=$(rank_pid "$hung" 1)
  [[ -n $stopped ]] && break
  sleep 0.1
done
[[ -n $stopped ]] && kill -STOP "$stopped"
wait "$job"
rc=$?
[[ -n $stopped && $(cat "/proc/$stopped/comm" 2>/dev/null) == fsdp-train ]] && kill -KILL "$stopped"
out=$(tr -d '\0' <"$hung.txt") # without bash's warning on a NUL byte in the log
if [[ -z $stopped ]]; then
  fail "hung rank: rank 1 of the job was not found: $(tail -5 "$hung.txt")"
elif [[ $rc == 0 || $rc == 124 ]]; then
  fail "hung rank: the job exited $rc: $(tail -5 "$hung.txt")"
elif ! grep -Eq "fsdp-train \(rank 0\): .*timed out after 2000 ms waiting for .*; ranks that issued this collective \(#[0-9]+\): (0; rank 1 last issued #[0-9]+ .*; rank 1 \(pid [0-9]+\) is stopped|0, 1; rank 1 \(pid [0-9]+\) is stopped)" <<<"$out"; then
  fail "hung rank: rank 0's error does not name rank 1: $(grep -m1 'rank 0)' <<<"$out")"
else
  echo "ok: hung rank named: $(grep -m1 -o 'ranks that issued this collective.*is stopped' <<<"$out")"
fi

# A rank's own error reaches the user: rank 1's shard file is missing; fsdp-run, without
# --log-dir, shows rank 0's error, which must name rank 1's file.
mkdir -p "$WORK/no_shard/ckpt"
cp -r "$WORK/straight/ckpt/step_00000020" "$WORK/no_shard/ckpt/"
echo step_00000020 >"$WORK/no_shard/ckpt/latest"
rm "$WORK/no_shard/ckpt/step_00000020/shard_00001-of-00002.bin"
out=$(train 2 "$WORK/no_shard" --train.micro_batch_size 4 --optim.max_steps 30 --resume 2>&1)
[[ $? != 0 && $out == *"fsdp-train (rank 0): loading the checkpoint failed on rank 1: "*"shard_00001-of-00002.bin' is missing"* ]] &&
  echo "ok: rank 1's missing shard is named in rank 0's error" ||
  fail "rank 1's missing shard: $(tail -4 <<<"$out")"

# fsdp-ckpt consolidate refuses a checkpoint whose save did not finish, as every reader does.
cp -r "$WORK/straight/ckpt/step_00000010" "$WORK/uncommitted"
rm "$WORK/uncommitted/COMMITTED"
out=$("$CK" consolidate "$WORK/uncommitted" "$WORK/uncommitted.safetensors" 2>&1)
[[ $? == 1 && $out == *"has no COMMITTED marker"* && ! -e $WORK/uncommitted.safetensors ]] &&
  echo "ok: consolidate refuses an uncommitted checkpoint" || fail "consolidate, uncommitted: $out"

# Resume that finds nothing says so; `latest` missing: the newest committed step folder, named.
mkdir -p "$WORK/no_latest/ckpt"
cp -r "$WORK/straight/ckpt/step_00000010" "$WORK/straight/ckpt/step_00000020" "$WORK/no_latest/ckpt/"
cp -r "$WORK/uncommitted" "$WORK/no_latest/ckpt/step_00000030"
out=$(train 2 "$WORK/no_latest" --train.micro_batch_size 4 --optim.max_steps 21 --resume 2>&1)
[[ $? == 0 && $out == *"has no \`latest\` pointer; using its newest committed step folder, step_00000020 (of 2 committed)"* &&
  $out == *"resumed from $WORK/no_latest/ckpt/step_00000020 at step 20"* ]] &&
  echo "ok: resume without latest uses the newest committed step folder, and says so" ||
  fail "resume without latest: $(tail -6 <<<"$out")"
ONE=(--optim.max_steps 2 --optim.warmup_steps 1 --train.eval_every 0 --train.micro_batch_size 2)
out=$(train 1 "$WORK/nothing" "${ONE[@]}" --resume 2>&1)
[[ $? == 0 && $out == *"train.resume: no checkpoint under '$WORK/nothing/ckpt' (it was empty or did not exist); starting a fresh run"* ]] &&
  echo "ok: resume that finds nothing says so" || fail "resume finding nothing: $(head -4 <<<"$out")"

# Fail before the first step: a checkpoint folder that cannot be made (a file is in the way, which
# stops root too), and a token file with two tokens outside the vocabulary.
mkdir -p "$WORK/blocked"
touch "$WORK/blocked/file"
out=$(timeout 300 "$BIN/fsdp-train" "${COMMON[@]}" "${ONE[@]}" --train.checkpoint_dir "$WORK/blocked/file/ckpt" \
  --train.metrics_file "$WORK/blocked/metrics.jsonl" 2>&1)
[[ $? != 0 && $out == *"train.checkpoint_dir: cannot create the checkpoint folder '$WORK/blocked/file/ckpt'"* &&
  ! -s $WORK/blocked/metrics.jsonl ]] &&
  echo "ok: an unwritable checkpoint folder fails before the first step" ||
  fail "unwritable checkpoint folder: $(tail -3 <<<"$out")"
# write_bin PATH N BAD...: an llm.c token file of N tokens below 50257, with 60000 at each BAD.
write_bin() {
  python3 - "$@" <<'PY'
import random, struct, sys
path, n, bad = sys.argv[1], int(sys.argv[2]), [int(b) for b in sys.argv[3:]]
random.seed(5)
tokens = [random.randrange(50257) for _ in range(n)]
for b in bad:
    tokens[b] = 60000
with open(path, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *tokens))
PY
}
mkdir -p "$WORK/oov" "$WORK/bin"
write_bin "$WORK/oov/data.bin" 3000 1700 2900
out=$(timeout 300 "$BIN/fsdp-train" "${COMMON[@]}" "${ONE[@]}" --data.dataset "$WORK/oov/data.bin" \
  --train.checkpoint_every 0 --train.metrics_file "$WORK/oov/metrics.jsonl" 2>&1)
[[ $? != 0 && $out == *"data: token file $WORK/oov/data.bin: token 60000 at position 1700 is outside the vocabulary of 50257"* &&
  ! -s $WORK/oov/metrics.jsonl ]] &&
  echo "ok: tokens outside the vocabulary fail before the first step" ||
  fail "tokens outside the vocabulary: $(tail -3 <<<"$out")"
# A good token file named data.bin: its data line names it once and claims no cache. With
# optim.fused false, where the straight run's AdamW was fused (the CPU's default).
write_bin "$WORK/bin/data.bin" 3000
out=$(timeout 300 "$BIN/fsdp-train" "${COMMON[@]}" "${ONE[@]}" --data.dataset "$WORK/bin/data.bin" \
  --train.checkpoint_dir "$WORK/bin/ckpt" --optim.fused false 2>&1)
line=$(grep -m1 '^data: ' <<<"$out")
[[ $line == "data: token file(s) '$WORK/bin/data.bin': "*", read in place" && $line != *"data: data:"* &&
  $line != *"from the cache"* ]] && echo "ok: $line" || fail "the data line of a token file: '$line'"
[[ $out == *"; AdamW op by op; "* ]] && grep -q "; AdamW fused; " "$WORK/straight.txt" &&
  echo "ok: optim.fused false steps op by op, the default fused" ||
  fail "optim.fused: $(grep -m1 '^model: ' <<<"$out") / $(grep -m1 '^model: ' "$WORK/straight.txt")"

# One owner per checkpoint folder (issue 28), in the MPI run only (rank 0's lock does not depend on
# the backend). Run A is stopped (SIGSTOP) right after its first checkpoint, still holding its
# folder; run B into the same folder, and run C with --resume, are refused naming the folder and
# A's host and PID. A then finishes, and every checkpoint it wrote verifies clean. And fsdp-ckpt
# consolidate into its own input is refused, the checkpoint unchanged byte for byte.
if [[ $BACKEND == mpi ]]; then
  own=$WORK/owned
  "$BIN/fsdp-train" "${COMMON[@]}" "${ONE[@]}" --optim.max_steps 12 --train.checkpoint_every 4 \
    --train.checkpoint_dir "$own/ckpt" --train.metrics_file "$own.jsonl" >"$own.txt" 2>&1 &
  a=$!
  for _ in $(seq 600); do # until A's first checkpoint is committed (at most 60 s)
    [[ -s $own/ckpt/latest ]] && break
    sleep 0.1
  done
  kill -STOP "$a"
  holder="'$own/ckpt' is in use by another run (host and PID: $(hostname) $a)"
  for resume in "" --resume; do
    out=$(timeout 120 "$BIN/fsdp-train" "${COMMON[@]}" "${ONE[@]}" --train.checkpoint_dir "$own/ckpt" \
      --train.metrics_file "$own.b.jsonl" $resume 2>&1)
    [[ $? != 0 && $out == *"train.checkpoint_dir: $holder"* && ! -e $own.b.jsonl ]] &&
      echo "ok: a second run${resume:+ with $resume} into a folder in use is refused, naming the holder" ||
      fail "a second run${resume:+ with $resume} into a folder in use: $(tail -3 <<<"$out")"
  done
  kill -CONT "$a"
  wait "$a" || fail "run A exited $?: $(tail -3 "$own.txt")"
  steps=("$own"/ckpt/step_*)
  clean=0
  for step in "${steps[@]}"; do
    "$CK" inspect "$step" 2>&1 | grep -q "checksums: all verified" && clean=$((clean + 1))
  done
  ((${#steps[@]} == 3 && clean == 3)) && echo "ok: the holder's 3 checkpoints verify clean" ||
    fail "the holder's checkpoints: $clean of ${#steps[@]} verify (expected 3 of 3)"
  before=$(cd "$own/ckpt" && find . -type f -exec md5sum {} + | sort)
  out=$("$CK" consolidate "$own/ckpt" "$own/ckpt/step_00000012/metadata.json" 2>&1)
  rc=$?
  after=$(cd "$own/ckpt" && find . -type f -exec md5sum {} + | sort)
  [[ $rc != 0 && $out == *"lies inside the checkpoint it reads; nothing was written"* && $before == "$after" ]] &&
    echo "ok: consolidate into its own input is refused, the checkpoint unchanged" ||
    fail "consolidate into its own input: $out"

  # sample and eval from any folder: a run started in here/ saves its tokenizer path relative
  # (tok); from elsewhere/, sample of its checkpoint resolves it against here/, applies --KEY VALUE
  # on top (and says so), and refuses an override that changes the model.
  mkdir -p "$WORK/here" "$WORK/elsewhere"
  ln -s "$SRC/assets/gpt2" "$WORK/here/tok"
  (cd "$WORK/here" && timeout 120 "$BIN/fsdp-train" "${COMMON[@]}" "${ONE[@]}" --data.tokenizer_dir tok \
    --train.checkpoint_dir ckpt >run.txt 2>&1) || fail "the run in here/ exited $?: $(tail -3 "$WORK/here/run.txt")"
  out=$(cd "$WORK/elsewhere" && timeout 120 "$BIN/fsdp-train" sample --checkpoint "$WORK/here/ckpt" \
    --prompt "The Congress" --max-new-tokens 4 --train.micro_batch_size 3 2>&1)
  [[ $? == 0 && $out == *"sample: on the checkpoint's config: train.micro_batch_size = 3"* && $out == *$'\nThe Congress'* ]] &&
    echo "ok: sample from another folder resolves the run's relative paths and applies overrides" ||
    fail "sample from another folder: $(tail -3 <<<"$out")"
  out=$(cd "$WORK/elsewhere" && timeout 120 "$BIN/fsdp-train" sample --checkpoint "$WORK/here/ckpt" \
    --model.n_layer 3 2>&1)
  [[ $? != 0 && $out == *"--model.n_layer: the checkpoint '$WORK/here/ckpt/step_00000002' holds a model this override would change"* ]] &&
    echo "ok: sample refuses an override that changes the checkpoint's model" ||
    fail "sample with --model.n_layer 3: $(tail -3 <<<"$out")"

  # Too little data for one batch is named by the user's file, not the cache's.
  printf 'Fellow citizens' >"$WORK/tiny.txt"
  out=$(timeout 120 "$BIN/fsdp-train" "${COMMON[@]}" "${ONE[@]}" --data.dataset "$WORK/tiny.txt" \
    --train.checkpoint_every 0 2>&1)
  [[ $? != 0 && $out == *"data.dataset '$WORK/tiny.txt': TrainLoader: "*"holds 0 windows"* ]] &&
    echo "ok: too little data is named by the user's file" || fail "too little data: $(tail -2 <<<"$out")"
  # With data.val_dataset the data line reports where validation comes from.
  val=$(ls "$WORK"/corpus/*.txt | head -1)
  out=$(timeout 120 "$BIN/fsdp-train" "${COMMON[@]}" "${ONE[@]}" --data.val_dataset "$val" \
    --train.checkpoint_every 0 2>&1)
  [[ $? == 0 && $(grep -m1 '^data: ' <<<"$out") == *" validation from data.val_dataset '$val', "* ]] &&
    echo "ok: the data line names data.val_dataset" || fail "data line with data.val_dataset: $(grep -m1 '^data: ' <<<"$out")"
fi

# fp16 (issue 27), over Gloo only (the MPI run checks the rest; the parity tests check fp16's
# reductions on both backends). With LibTorch 2.x: a 2-rank run with the loss scaler trains as the
# fp32 run does (validation loss falls by 0.5 and ends within 0.05 of it), the scale grows every 4
# good steps, and a resume from step 10 gives bitwise the same losses and loss scales for steps
# 11-20 (the scaler's state is in the checkpoint). With LibTorch 1.13: an error that says why.
# "step loss loss_scale" of steps 11-20.
scaled_half() { grep -o '"step": [0-9]*, "loss": [^,]*,.*"loss_scale": [^,]*' "$1" |
  sed -E 's/"step": ([0-9]+), "loss": ([^,]+),.*"loss_scale": ([^,]+)/\1 \2 \3/' |
  awk '$1 > 10'; }
if [[ $BACKEND == gloo ]]; then
  FP16=(--mixed_precision fp16 --grad_scaler.growth_interval 4 --train.micro_batch_size 4)
  if "$BIN/fsdp-train" --print-config "${COMMON[@]}" "${FP16[@]}" >"$WORK/fp16_check.txt" 2>&1; then
    train 2 "$WORK/fp16" "${FP16[@]}" >"$WORK/fp16.txt" 2>&1 ||
      fail "the fp16 run exited $?: $(tail -5 "$WORK/fp16.txt")"
    read -r first16 last16 < <(sed -nE 's/^done: .*val loss ([0-9.]+) -> ([0-9.]+).*/\1 \2/p' "$WORK/fp16.txt")
    if [[ -n ${first16:-} && -n ${last:-} ]] &&
      awk -v a="$first16" -v b="$last16" -v f="$last" 'BEGIN { d = b - f; if (d < 0) d = -d;
        exit !(b < a - 0.5 && d < 0.05) }'; then
      echo "ok: fp16 validation loss fell from $first16 to $last16 (fp32: $last)"
    else
      fail "fp16 validation loss '${first16:-?}' -> '${last16:-?}', fp32's ended at '${last:-?}'"
    fi
    scales=$(grep -o '"loss_scale": [0-9.e+]*' "$WORK/fp16/metrics.jsonl" | sort -u | wc -l)
    ((scales >= 3)) && echo "ok: fp16 loss scale took $scales values" ||
      fail "fp16: the loss scale took $scales values in 20 steps (growth every 4 good steps)"
    root="$WORK/fp16_resume"
    mkdir -p "$root/ckpt"
    cp -r "$WORK/fp16/ckpt/step_00000010" "$root/ckpt/"
    echo step_00000010 >"$root/ckpt/latest"
    train 2 "$root" "${FP16[@]}" --resume >"$root.txt" 2>&1 ||
      fail "the fp16 resume exited $?: $(tail -5 "$root.txt")"
    a=$(scaled_half "$WORK/fp16/metrics.jsonl") b=$(scaled_half "$root/metrics.jsonl")
    [[ -n $a && $(wc -l <<<"$a") == 10 && $a == "$b" ]] &&
      echo "ok: fp16 resume: steps 11-20 give bitwise the same losses and loss scales" ||
      fail "fp16 resume: steps 11-20 differ: straight '$a', resumed '$b'"
  else
    grep -q "fp16 on the CPU needs LibTorch 2.x" "$WORK/fp16_check.txt" &&
      echo "ok: fp16 on the CPU with this LibTorch is refused, naming why" ||
      fail "fp16 check: $(cat "$WORK/fp16_check.txt")"
  fi
fi

exit $((failures > 0))
