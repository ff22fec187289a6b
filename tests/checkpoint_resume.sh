#!/usr/bin/env bash
# Resume in new processes (tests/ckpt_child.cpp under fsdp-run):
#  - 20 steps straight == 10 steps, save, new processes, load, 10 steps: bitwise-identical losses
#    at the same world size (2);
#  - resumed at another world size (4 -> 2, 2 -> 3, 3 -> 1, 1 -> 4): losses within 2e-5 of the
#    straight run (fp32; only the order of summation across ranks differs);
#  - a rank SIGKILLed in the middle of a save: the job fails naming the rank, the previous
#    checkpoint stays `latest`, and the next run resumes from it.
# Usage: checkpoint_resume.sh BUILD_BIN_DIR BACKEND PORT
set -uo pipefail
BIN=$1 BACKEND=$2 PORT=$3
WORK=$(mktemp -d /tmp/fsdp_resume.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# run NP ARGS...: rank 0's output on stdout.
run() {
  local np=$1
  shift
  PORT=$((PORT + 1))
  timeout 120 "$BIN/fsdp-run" --nproc-per-node "$np" --backend "$BACKEND" --master-port "$PORT" \
    "$BIN/ckpt_child" "$@"
}
# Lines "step S loss HEX DECIMAL" of steps 10-19.
second_half() { grep -E '^step (1[0-9]) loss' "$1"; }

run 2 --root "$WORK/straight" --steps 20 >"$WORK/straight.txt" || fail "straight run exited $?"
[[ $(grep -c '^step' "$WORK/straight.txt") == 20 ]] || fail "the straight run did not print 20 steps"

# Same world size: bitwise.
run 2 --root "$WORK/same" --steps 10 --save-every 10 >/dev/null || fail "first half exited $?"
run 2 --root "$WORK/same" --steps 20 --resume >"$WORK/same.txt" || fail "second half exited $?"
grep -q "resumed from step 10" "$WORK/same.txt" || fail "the second half did not resume from step 10"
if diff <(second_half "$WORK/straight.txt" | cut -d' ' -f1-4) \
        <(second_half "$WORK/same.txt" | cut -d' ' -f1-4); then
  echo "ok: resumed at world size 2, losses of steps 10-19 bitwise identical"
else
  fail "resumed losses differ from the straight run"
fi

# Another world size: within a tolerance.
for pair in "4 2" "2 3" "3 1" "1 4"; do
  read -r from to <<<"$pair"
  root="$WORK/reshard_${from}_${to}"
  run "$from" --root "$root" --steps 10 --save-every 10 >/dev/null || fail "save at $from exited $?"
  run "$to" --root "$root" --steps 20 --resume >"$root.txt" || fail "resume at $to exited $?"
  grep -q "resumed from step 10" "$root.txt" || fail "$from -> $to did not resume from step 10"
  paste -d' ' <(second_half "$WORK/straight.txt") <(second_half "$root.txt") | awk -v from="$from" -v to="$to" '
    { d = $5 - $10; if (d < 0) d = -d; if (d > max) max = d; n++ }
    END {
      if (n != 10) { printf "FAIL: %s -> %s: %d steps to compare\n", from, to, n; exit 1 }
      if (max > 2e-5) { printf "FAIL: %s -> %s: losses differ by %g > 2e-5\n", from, to, max; exit 1 }
      printf "ok: saved at world size %s, resumed at %s: losses within %g of the straight run\n", from, to, max
    }' || failures=$((failures + 1))
done

# A rank killed while writing its shard of the step-15 checkpoint (latest is step 10).
out=$(run 2 --root "$WORK/same" --steps 20 --resume --save-every 5 --kill-rank 1 \
  --kill-at shard_partial 2>&1)
rc=$?
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "a rank killed mid-save: expected a failed job, got exit $rc"
# mpirun's own report names them; Open MPI 5's wraps that sentence over two lines.
grep -qE "rank 1 .*(SIGKILL|signal 9)" <<<"${out//$'\n'/ }" || fail "the launcher did not name rank 1 and SIGKILL: $out"
[[ $(cat "$WORK/same/latest") == step_00000010 ]] || fail "latest moved to $(cat "$WORK/same/latest")"
[[ ! -e $WORK/same/step_00000015/COMMITTED ]] || fail "the killed save was committed"
out=$(run 2 --root "$WORK/same" --steps 11 --resume 2>&1) || fail "resuming after the kill exited $?"
grep -q "resumed from step 10" <<<"$out" || fail "resuming after the kill: $out"
((failures == 0)) && echo "ok: a rank killed mid-save left step 10 as latest, and it loads"

exit $((failures > 0))
