#!/usr/bin/env bash
# Racing writers and interrupted tools at the command line (issue 45; docs/hardening.md):
#  - two `fsdp-ckpt consolidate` into one output, started together: each exits 0 or 1, one that
#    fails says the output appeared while it wrote, and the output is one source's whole content
#    (the only succeeding one's when one failed); no temporary is left;
#    and once more with the first writer held after making its temporary, so that the second
#    certainly finishes first: the first is told and the output is the second's;
#  - a checkpoint root whose `.fsdp-lock` is a symbolic link: the run is refused naming the link,
#    and the link's target keeps its content;
#  - a config.json edited to 20 million tokens over weights of 384 rows is refused naming the
#    field and the tensor, and 100,000 layers by flags are refused as more than the host holds,
#    both before anything is built;
#  - consolidate, reshard and export into a live checkpoint root (`C/step_00000025`, `C/x`) are
#    refused, and nothing appears there;
#  - SIGINT during consolidate, reshard and export (stopped right after making their temporary,
#    through the FSDP_TEST_STOP_AFTER_TEMPORARY seam) leaves nothing behind, and a temporary left
#    by a writer killed with -9 is removed by the next writer of that output;
#  - a resume whose planned step a saving run removed meanwhile resumes from the newest one.
# Usage: hostile_tools.sh BUILD_BIN_DIR SOURCE_DIR PORT. Exits 77 (skipped) without the assets.
set -uo pipefail
BIN=$1 SRC=$2 PORT=$3
if [[ ! -s $SRC/assets/gpt2/encoder.json || ! -d $SRC/assets/sotu ]]; then
  echo "skipped: assets/gpt2 or assets/sotu missing (run scripts/fetch_assets.sh)"
  exit 77
fi
W=$(mktemp -d /tmp/fsdp_hostile.XXXXXX)
trap 'rm -rf "$W"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
temporaries() { find "$W" -name '*.tmp-*' | sort; }
# stopped PID: waits until PID stops itself (the FSDP_TEST_STOP_AFTER_TEMPORARY seam), up to 10 s.
stopped() {
  for _ in $(seq 100); do
    [[ $(ps -o stat= -p "$1" 2>/dev/null) == T* ]] && return 0
    sleep 0.1
  done
  return 1
}

mkdir -p "$W/corpus"
cp "$SRC"/assets/sotu/190*.txt "$W/corpus/"
# run ARGS...: fsdp-train on one rank, 2 steps of the corpus; SMALL: a tiny GPT-2.
run() {
  timeout 120 "$BIN/fsdp-run" --nproc-per-node 1 --master-port "$PORT" "$BIN/fsdp-train" \
    --data.dataset "$W/corpus" --data.cache_dir "$W/cache" --data.seq_len 32 --optim.max_steps 2 --optim.warmup_steps 1 \
    --train.micro_batch_size 2 --train.eval_every 0 --train.log_every 1 --train.checkpoint_every 1 \
    "$@"
}
SMALL=(--data.tokenizer_dir "$SRC/assets/gpt2" --model.n_layer 1 --model.n_embd 32 --model.n_head 2)
run "${SMALL[@]}" --train.checkpoint_dir "$W/C" >"$W/train.txt" 2>&1 || fail "the run exited $?: $(tail -3 "$W/train.txt")"
C=$W/C
S1=$C/step_00000001 S2=$C/step_00000002
CK=$BIN/fsdp-ckpt
"$CK" consolidate "$S1" "$W/ref1.st" >/dev/null && "$CK" consolidate "$S2" "$W/ref2.st" >/dev/null ||
  fail "consolidating each step alone failed"

# Two consolidates into one output, three times.
for try in 1 2 3; do
  rm -f "$W/one.st"
  "$CK" consolidate "$S1" "$W/one.st" >"$W/c1.txt" 2>&1 &
  p1=$!
  "$CK" consolidate "$S2" "$W/one.st" >"$W/c2.txt" 2>&1 &
  p2=$!
  wait $p1
  r1=$?
  wait $p2
  r2=$?
  for r in 1 2; do
    rc=$((r == 1 ? r1 : r2))
    ((rc == 0 || rc == 1)) || fail "try $try: consolidate $r exited $rc: $(cat "$W/c$r.txt")"
    ((rc == 0)) || grep -q "appeared while it was being written" "$W/c$r.txt" ||
      fail "try $try: consolidate $r failed without saying the output appeared: $(cat "$W/c$r.txt")"
  done
  if ((r1 == 0 && r2 != 0)); then
    cmp -s "$W/one.st" "$W/ref1.st" || fail "try $try: step 1's consolidate succeeded alone, the file is not step 1's"
  elif ((r2 == 0 && r1 != 0)); then
    cmp -s "$W/one.st" "$W/ref2.st" || fail "try $try: step 2's consolidate succeeded alone, the file is not step 2's"
  else
    cmp -s "$W/one.st" "$W/ref1.st" || cmp -s "$W/one.st" "$W/ref2.st" ||
      fail "try $try: the output is neither step's whole content"
  fi
  [[ -z $(temporaries) ]] || fail "try $try: temporaries left: $(temporaries)"
  echo "ok: two consolidates into one output (try $try: exits $r1 and $r2)"
done

# The same race made certain: the first writer stops after making its temporary, the second
# writes the output meanwhile; the first, continued, is told and leaves the second's file.
rm -f "$W/one.st"
FSDP_TEST_STOP_AFTER_TEMPORARY=1 "$CK" consolidate "$S1" "$W/one.st" >"$W/c1.txt" 2>&1 &
p1=$!
if stopped $p1; then
  "$CK" consolidate "$S2" "$W/one.st" >/dev/null 2>&1 || fail "the second writer failed"
  kill -CONT $p1
  wait $p1
  r1=$?
  ((r1 == 1)) && grep -q "appeared while it was being written" "$W/c1.txt" ||
    fail "the first writer exited $r1: $(cat "$W/c1.txt")"
  cmp -s "$W/one.st" "$W/ref2.st" && [[ -z $(temporaries) ]] &&
    echo "ok: a writer whose output appeared meanwhile is told, and leaves it whole" ||
    fail "the output is not the second writer's, or temporaries are left: $(temporaries)"
else
  fail "consolidate never reached its temporary"
  kill -9 $p1
fi

# A lock file that is a symbolic link.
mkdir -p "$W/L"
echo "precious data" >"$W/precious"
ln -s "$W/precious" "$W/L/.fsdp-lock"
PORT=$((PORT + 1))
if out=$(run "${SMALL[@]}" --train.checkpoint_dir "$W/L" 2>&1); then
  fail "a run took a lock file that is a symbolic link"
else
  grep -q "\.fsdp-lock' is a symbolic link" <<<"$out" && echo "ok: a lock-file link is refused" ||
    fail "the refusal does not name the link: $(tail -3 <<<"$out")"
fi
[[ $(cat "$W/precious") == "precious data" ]] || fail "the link's target was written: $(cat "$W/precious")"

# Sizes the host cannot hold, refused before anything is built: a config.json edited over weights
# of another size (named by its field and the tensor), and flags asking for 100,000 layers.
cp -r "$SRC/tests/data/hf/models/llama" "$W/big"
sed -i 's/"vocab_size": 384/"vocab_size": 20000000/' "$W/big/config.json"
PORT=$((PORT + 1))
start=$SECONDS
out=$(run --model.pretrained "$W/big" --data.tokenizer_dir "$SRC/tests/data/hf/tokenizers/llama3" \
  --train.checkpoint_dir "$W/big_ckpt" 2>&1) && fail "a config.json of 20 million tokens over 384 rows trained"
grep -q "vocab_size: vocab_size and hidden_size (model.vocab_size, model.dim) give model.embed_tokens.weight the shape \[20000000, 64\]" <<<"$out" &&
  echo "ok: a config.json that contradicts its weights is refused in $((SECONDS - start)) s" ||
  fail "the refusal does not name the field and the tensor: $(tail -3 <<<"$out")"
PORT=$((PORT + 1))
out=$(run --data.tokenizer_dir "$SRC/assets/gpt2" --model.n_layer 100000 --model.n_embd 256 \
  --model.n_head 4 --train.checkpoint_dir "$W/huge_ckpt" 2>&1) &&
  fail "100,000 layers trained"
grep -q "parameters (fp32, with gradients and AdamW's state) need at least" <<<"$out" &&
  echo "ok: a model the host cannot hold is refused before it is built" ||
  fail "100,000 layers: $(tail -3 <<<"$out")"

# Outputs inside a live checkpoint root.
for cmd in "reshard $S1 $C/step_00000025 --world-size 1" "consolidate $S1 $C/x.st" "export $S1 $C/hf"; do
  read -r -a args <<<"$cmd"
  if out=$("$CK" "${args[@]}" 2>&1); then
    fail "fsdp-ckpt $cmd wrote into the root"
  else
    grep -q "lies inside the checkpoint root '$C'" <<<"$out" ||
      fail "fsdp-ckpt $cmd: the refusal does not name the root: $out"
  fi
done
[[ ! -e $C/step_00000025 && ! -e $C/x.st && ! -e $C/hf ]] || fail "something appeared in the root"
echo "ok: consolidate, reshard and export into a checkpoint root are refused"

# SIGINT mid-write, each tool; then a writer killed with -9, and the next one.
for cmd in "consolidate $S1 $W/int.st" "reshard $S1 $W/int_resharded --world-size 2" "export $S1 $W/int_hf"; do
  read -r -a args <<<"$cmd"
  FSDP_TEST_STOP_AFTER_TEMPORARY=1 "$CK" "${args[@]}" >/dev/null 2>&1 &
  pid=$!
  if ! stopped $pid; then
    fail "fsdp-ckpt $cmd never reached its temporary"
    kill -9 $pid
    continue
  fi
  [[ -n $(temporaries) ]] || fail "fsdp-ckpt $cmd: no temporary while stopped"
  kill -INT $pid
  kill -CONT $pid
  wait $pid
  rc=$?
  ((rc == 130)) || fail "fsdp-ckpt $cmd: exit $rc after SIGINT, want 130"
  [[ -z $(temporaries) && ! -e $W/int.st && ! -e $W/int_resharded && ! -e $W/int_hf ]] &&
    echo "ok: SIGINT during fsdp-ckpt ${args[0]} leaves nothing behind" ||
    fail "fsdp-ckpt $cmd left: $(temporaries) $(ls -d "$W"/int* 2>/dev/null)"
done
FSDP_TEST_STOP_AFTER_TEMPORARY=1 "$CK" reshard "$S1" "$W/killed" --world-size 2 >/dev/null 2>&1 &
pid=$!
if stopped $pid; then
  kill -9 $pid
  wait $pid 2>/dev/null
  [[ -n $(temporaries) ]] || fail "reshard killed with -9 left no temporary to test with"
  "$CK" reshard "$S1" "$W/killed" --world-size 2 >/dev/null || fail "the reshard after a killed one failed"
  [[ -z $(temporaries) ]] && echo "ok: the next reshard removed the killed one's temporary" ||
    fail "the killed reshard's temporary is still there: $(temporaries)"
else
  fail "reshard never reached its temporary"
  kill -9 $pid
fi

# A resume beside a run that keeps only its newest step: the planned step is removed while this
# run tokenizes its data (held there through the seam, at its first cache file), so the load finds
# it gone and resumes from the newest one instead of saying "not a checkpoint folder".
FSDP_TEST_STOP_AFTER_TEMPORARY=1 "$BIN/fsdp-train" --data.dataset "$W/corpus" \
  --data.cache_dir "$W/cache2" --data.seq_len 32 --optim.max_steps 2 --optim.warmup_steps 1 \
  --train.micro_batch_size 2 --train.eval_every 0 --train.checkpoint_every 0 "${SMALL[@]}" \
  --train.checkpoint_dir "$C" --train.resume auto >"$W/resume.txt" 2>&1 &
pid=$!
if stopped $pid; then
  cp -r "$S2" "$C/step_00000003"
  echo step_00000003 >"$C/latest"
  rm -rf "$S2"
  for _ in $(seq 600); do  # continued at each temporary it makes, for at most 2 minutes
    kill -0 $pid 2>/dev/null || break
    kill -CONT $pid 2>/dev/null
    sleep 0.2
  done
  kill -9 $pid 2>/dev/null
  wait $pid
  rc=$?
  ((rc == 0)) && grep -q "was removed before it could be read" "$W/resume.txt" &&
    grep -q "resumed from $C/step_00000003" "$W/resume.txt" &&
    echo "ok: a resume whose step was removed meanwhile takes the newest one" ||
    fail "resume beside an owner: exit $rc: $(tail -4 "$W/resume.txt")"
else
  fail "the resuming run never reached its cache's temporary"
  kill -9 $pid
fi

((failures == 0)) && echo "hostile_tools: all checks passed" && exit 0
echo "hostile_tools: $failures check(s) failed"
exit 1
