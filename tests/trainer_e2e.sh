#!/usr/bin/env bash
# fsdp-train end to end, under fsdp-run, on a small corpus cut from the bundled SOTU texts:
#  - a 2-rank FULL_SHARD run trains: validation loss at the end below the start, one metrics line
#    per step, checkpoints at steps 10 and 20;
#  - resume reproduces: from the step-10 checkpoint, new processes at world size 2 log bitwise the
#    same losses for steps 11-20 as the straight run; at world size 1 with the same global batch
#    (micro_batch_size doubled), within 1e-4;
#  - `sample` prints the prompt and its continuation, the same text twice for the same seed;
#  - model.init_from a consolidated checkpoint reproduces its validation loss (every rank reading,
#    or rank 0 alone with cpu_ram_efficient_loading);
#  - fsdp-ckpt: inspect verifies the checksums (and names a damaged shard), consolidate writes the
#    same bytes as FULL_STATE_DICT's model.safetensors and as consolidating a resharded copy;
#  - a bad key or value exits 2 naming the key; num_processes that disagrees with the world fails;
#    a fresh run refuses a folder holding checkpoints, and a resume refuses another model.
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
((failures == 0)) && echo "ok: sample: $(sed -n 2p "$WORK/sample1.txt")"

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
[[ $? != 0 && $out == *"holds another model"* ]] || fail "resuming another model: $out"

exit $((failures > 0))
