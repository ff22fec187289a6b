#!/usr/bin/env bash
# Instruction fine-tuning end to end, under fsdp-run, from the Hugging Face folder of
# tests/data/hf/sft (scripts/hf_fixtures.sh --only sft):
#  - the first step's loss equals transformers' over the same rows (reference.json: labels -100
#    off the targets, position ids restarting per packed example), within 1e-5 relative, at world
#    size 1 with gradient accumulation and at world size 2 with and without it: the step's rows
#    are all of the data set, so the loss is the mean over every target whichever rank and
#    micro-batch holds it, the normalisation a single process over the global batch has;
#  - the same through the logits whole (train.fused_loss false; the default fuses the head and
#    the cross entropy), without packing (one example a row, padded), and with data.train_on all (every token, a different loss: the flag
#    is honoured);
#  - a 2-rank run of several steps lowers the loss, exports a folder, and `sample --chat` of the
#    export answers through the chat template (with a chat template in the fixture).
# Usage: sft_e2e.sh BUILD_BIN_DIR BACKEND PORT SOURCE_DIR
set -uo pipefail
BIN=$1 BACKEND=$2 PORT=$3 SRC=$4
FIX=$SRC/tests/data/hf/sft
WORK=$(mktemp -d /tmp/fsdp_sft.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

COMMON=(--model.pretrained "$FIX/model" --model.attention explicit
  --data.val_split 0 --data.cache_dir "$WORK/cache" --optim.max_steps 1 --optim.warmup_steps 0
  --train.log_every 1 --train.eval_every 0 --train.checkpoint_every 0 --train.num_threads 1)

# first_loss NAME NP MICRO ACCUM ARGS...: the first step's loss from the metrics file.
first_loss() {
  local name=$1 np=$2 micro=$3 accum=$4
  shift 4
  PORT=$((PORT + 1))
  local out
  out=$(timeout 300 "$BIN/fsdp-run" --nproc-per-node "$np" --backend "$BACKEND" \
    --master-port "$PORT" "$BIN/fsdp-train" "${COMMON[@]}" --train.micro_batch_size "$micro" \
    --train.gradient_accumulation_steps "$accum" --train.metrics_file "$WORK/$name.jsonl" "$@" 2>&1)
  if [[ $? != 0 ]]; then
    echo "$out" | tail -20
    fail "$name: fsdp-train failed"
    return
  fi
  echo "$out" | grep -E "^data:" | sed "s/^/  $name: /"
  python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["loss"])' \
    "$WORK/$name.jsonl"
}

# check NAME GOT WANT: within 1e-5 relative.
check() {
  if python3 -c 'import sys; g, w = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(g - w) > 1e-5 * abs(w))' "$2" "$3"; then
    echo "ok: $1: loss $2, transformers $3"
  else
    fail "$1: loss $2, transformers $3 (more than 1e-5 relative apart)"
  fi
}

ref() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cases"][sys.argv[2]][sys.argv[3]])' "$FIX/reference.json" "$1" "$2"; }
rows() { python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["cases"][sys.argv[2]]["rows"]))' "$FIX/reference.json" "$1"; }

for data in prompt_completion messages; do
  [[ -f $FIX/$data.jsonl ]] || continue
  n=$(rows "$data")
  packed=$(ref "$data" loss_packed)
  padded=$(ref "$data" loss_padded)
  D=(--data.dataset "$FIX/$data.jsonl" --data.seq_len "$(ref "$data" seq_len)")
  check "$data np1 accum2" "$(first_loss "$data-1" 1 $((n / 2)) 2 "${D[@]}" | tail -1)" "$packed"
  check "$data np2 accum2" "$(first_loss "$data-2a" 2 $((n / 4)) 2 "${D[@]}" | tail -1)" "$packed"
  check "$data np2" "$(first_loss "$data-2" 2 $((n / 2)) 1 "${D[@]}" | tail -1)" "$packed"
  check "$data np2 accum2 unfused loss" "$(first_loss "$data-2f" 2 $((n / 4)) 2 "${D[@]}" \
    --train.fused_loss false | tail -1)" "$packed"
  # One example a row: as many rows as examples.
  examples=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["cases"][sys.argv[2]]["examples"]))' "$FIX/reference.json" "$data")
  check "$data np2 unpacked" "$(first_loss "$data-pad" 2 $((examples / 2)) 1 "${D[@]}" --data.packing false | tail -1)" "$padded"
  all=$(first_loss "$data-all" 2 $((n / 2)) 1 "${D[@]}" --data.train_on all | tail -1)
  python3 -c 'import sys; sys.exit(abs(float(sys.argv[1]) - float(sys.argv[2])) < 1e-3)' "$all" "$packed" ||
    fail "$data: data.train_on all gave $all, the answers-only loss $packed"
done

# Tool-calling conversations (the tool offered, a call, its result, the answer): one step at 2
# ranks with accumulation, every row in it.
if [[ -f $FIX/messages_tools.jsonl ]]; then
  n=$(rows messages_tools)
  D=(--data.dataset "$FIX/messages_tools.jsonl" --data.seq_len "$(ref messages_tools seq_len)")
  check "messages_tools np2 accum2" "$(first_loss tools-2a 2 $((n / 4)) 2 "${D[@]}" | tail -1)" \
    "$(ref messages_tools loss_packed)"
fi

# A short SFT run of the conversations: 6 steps straight, and 3 then resumed for 3 at 2 ranks,
# bitwise the same (the packed rows' order is a loader state like the windows'); then the export
# answers `sample --chat` through the template, stopping at the EOS ids of its
# generation_config.json (the fixture's EOS and <|eot_id|>, as Llama 3.2 Instruct's lists them).
RUN=(--data.dataset "$FIX/messages.jsonl" --data.seq_len 256 --data.val_split 0.25
  --train.micro_batch_size 2 --optim.max_steps 6 --optim.warmup_steps 1 --optim.lr 3e-3
  --train.eval_every 3 --train.eval_batches 1 --train.checkpoint_every 3)
run() {
  PORT=$((PORT + 1))
  timeout 300 "$BIN/fsdp-run" --nproc-per-node 2 --backend "$BACKEND" --master-port "$PORT" \
    "$BIN/fsdp-train" "${COMMON[@]}" "${RUN[@]}" "$@" 2>&1
}
out=$(run --train.checkpoint_dir "$WORK/straight/ckpt" --train.export_dir "$WORK/tuned" \
  --train.metrics_file "$WORK/straight/metrics.jsonl") ||
  fail "the straight SFT run: $(tail -5 <<<"$out")"
grep -q "^eval .*val loss" <<<"$out" || fail "the SFT run evaluated nothing"
mkdir -p "$WORK/resumed/ckpt"
cp -r "$WORK/straight/ckpt/step_00000003" "$WORK/resumed/ckpt/"
echo step_00000003 >"$WORK/resumed/ckpt/latest"
out=$(run --train.checkpoint_dir "$WORK/resumed/ckpt" --train.resume auto \
  --train.metrics_file "$WORK/resumed/metrics.jsonl") || fail "the resumed SFT run: $(tail -5 <<<"$out")"
# The training records (eval records carry val_loss only).
steps() { python3 -c 'import json,sys; [print(j["step"], repr(j["loss"])) for j in map(json.loads, open(sys.argv[1])) if j["step"] > 3 and "loss" in j]' "$1"; }
if [[ -n $(steps "$WORK/straight/metrics.jsonl") &&
  $(steps "$WORK/straight/metrics.jsonl") == "$(steps "$WORK/resumed/metrics.jsonl")" ]]; then
  echo "ok: SFT resumed at step 3 logs steps 4-6 bitwise as the straight run"
else
  fail "resumed SFT differs: $(steps "$WORK/straight/metrics.jsonl") against $(steps "$WORK/resumed/metrics.jsonl")"
fi
out=$("$BIN/fsdp-train" sample --model.pretrained "$WORK/tuned" --chat "Who spoke?" \
  --temperature 0 --max-new-tokens 8 2>&1)
[[ $? == 0 && $out == *"<|start_header_id|>assistant<|end_header_id|>"* &&
  $out == *"stopping at EOS 2002, 2005 ("*"/tuned/generation_config.json)"* ]] ||
  fail "sample --chat (the fixture's EOS 2002 and <|eot_id|> 2005 expected): $out"

# Without a generation_config.json the template's end of turn still stops generation, and the log
# says so.
cp -r "$WORK/tuned" "$WORK/bare" && rm "$WORK/bare/generation_config.json"
out=$("$BIN/fsdp-train" sample --model.pretrained "$WORK/bare" --chat "Who spoke?" \
  --temperature 0 --max-new-tokens 8 2>&1)
[[ $? == 0 && $out == *"stopping at the chat template's end of turn <|eot_id|> (2005) too"* ]] ||
  fail "sample --chat without generation_config.json: $out"

# Bad input: a conversation file whose line 2 is not JSON is refused by file and line.
printf '%s\n%s\n' '{"prompt": "a", "completion": "b"}' '{"prompt": "a", ' >"$WORK/bad.jsonl"
out=$("$BIN/fsdp-train" "${COMMON[@]}" --data.dataset "$WORK/bad.jsonl" --data.seq_len 64 2>&1)
[[ $? != 0 && $out == *"data.dataset: '$WORK/bad.jsonl' line 2: not JSON"* ]] ||
  fail "a bad line: $out"

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "all passed"
