#!/usr/bin/env bash
# Instruction fine-tuning end to end, under fsdp-run, from the Hugging Face folder of
# tests/data/hf/sft (scripts/hf_fixtures.sh --only sft):
#  - the first step's loss equals transformers' over the same rows (reference.json: labels -100
#    off the targets, position ids restarting per packed example), within 1e-5 relative, at world
#    size 1 with gradient accumulation and at world size 2 with and without it: the step's rows
#    are all of the data set, so the loss is the mean over every target whichever rank and
#    micro-batch holds it, the normalisation a single process over the global batch has;
#  - the same without packing (one example a row, padded) and with data.train_on all (every token,
#    a different loss: the flag is honoured);
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
  # One example a row: as many rows as examples.
  examples=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["cases"][sys.argv[2]]["examples"]))' "$FIX/reference.json" "$data")
  check "$data np2 unpacked" "$(first_loss "$data-pad" 2 $((examples / 2)) 1 "${D[@]}" --data.packing false | tail -1)" "$padded"
  all=$(first_loss "$data-all" 2 $((n / 2)) 1 "${D[@]}" --data.train_on all | tail -1)
  python3 -c 'import sys; sys.exit(abs(float(sys.argv[1]) - float(sys.argv[2])) < 1e-3)' "$all" "$packed" ||
    fail "$data: data.train_on all gave $all, the answers-only loss $packed"
done

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
