#!/usr/bin/env bash
# bench/netem.sh, the emulated cluster, end to end (issue 26), with the tiny GPT-2:
#  - 2 hosts x 1 rank joined by a 200 Mbit/s link: fsdp-bench runs FULL_SHARD across them over
#    Gloo and writes its JSON; the step is bandwidth-bound (the tiny model's 3.3M parameters are
#    almost all its token table: about 14 MB reach each rank a step, about 0.6 s, against a few
#    tens of ms of compute, three times that in a sanitized build), and the time model's
#    prediction must lie within 20% of it. The model prices rings at the link's TCP rate (95% of
#    tc's); what it leaves out (TCP's slow start after an idle link; tbf's 10 ms bucket) put it at
#    0.98 of the measured on 2026-11-27 (1.02 sanitized). At 1 Gbit/s, where this ran before, a
#    sanitized build's compute left the collectives 0.55 of the step, and the bandwidth-bound
#    check failed; at 200 Mbit/s Gloo's own all-gather, before the backend's ring replaced it, got
#    0.81 (docs/plan.md "Where it is wrong");
#  - the same over MPI at 200 Mbit/s, where the step is nearly all collectives (at 1 Gbit/s the
#    collectives were 0.70 of the prediction, at the bandwidth-bound check's edge): 0.94 and 0.99
#    since the rings post their sends first, 0.72 to 0.85 before (the root's pieces ran one way
#    at half rate, docs/plan.md "Where it is wrong"); mpirun starting the other host's daemon
#    through `ip netns exec`, OpenMPI's TCP transport, where mpirun is Open MPI 4's; elsewhere (Open
#    MPI 5's launcher takes every namespace for one host) netem.sh must refuse --backend mpi,
#    saying why;
#  - `--comm`: the collectives alone (fsdp-bench-comm) across the same hosts, each with the share
#    of the link it got;
#  - nothing the script made is left: no namespace, and so no link, address or qdisc (they all
#    live in its namespaces), after those runs and after one interrupted halfway (SIGTERM, as
#    `timeout` and Ctrl-C stop it);
#  - bad options are refused before anything is made.
# Skipped (77) where network namespaces cannot be made (not root, or no CAP_SYS_ADMIN).
# Usage: netem_test.sh BUILD_BIN_DIR SOURCE_DIR
set -uo pipefail
BIN=$1 SRC=$2
NETEM=$SRC/bench/netem.sh
WORK=$(mktemp -d /tmp/fsdp_netem_test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "SKIPPED: needs ip and tc (Debian: iproute2)"
  exit 77
fi
probe=fsdp_probe_$$
if ! ip netns add "$probe" 2>"$WORK/err"; then
  echo "SKIPPED: cannot make network namespaces here ($(cat "$WORK/err")): needs root with CAP_SYS_ADMIN"
  exit 77
fi
ip netns del "$probe"

# check_prediction JSON BACKEND: the run's one record is bandwidth-bound, on the backend and
# hosts asked for, and predicted within 20%.
check_prediction() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
[r] = json.load(open(sys.argv[1]))
step, pred = r["median"]["step"], r["predicted"]["step"]
print(f"{r['backend']}: measured {step:.3f} s, predicted {pred:.3f} s ({pred / step:.3f}), "
      f"collectives predicted {r['predicted']['in_collectives']:.3f} s")
assert r["backend"] == sys.argv[2] and r["world_size"] == 2, r
assert r["links"]["ranks_per_host"] == 1, r
# Mostly bandwidth-bound (0.7: a sanitized build computes three times as long), or the check
# says little about the links.
assert r["predicted"]["in_collectives"] > 0.7 * pred, "not bandwidth-bound: the test proves little"
assert abs(pred / step - 1) <= 0.20, f"prediction off by more than 20%: {pred / step:.3f}"
EOF
}

expect_netem_error() {
  local what=$1 pattern=$2
  shift 2
  if "$NETEM" "$@" >"$WORK/out" 2>&1; then
    fail "$what: exited 0"
  elif ! grep -q -- "$pattern" "$WORK/out"; then
    fail "$what: output lacks '$pattern': $(cat "$WORK/out")"
  fi
}

# Namespaces of the netem.sh run whose process id is $1.
left_of() { ip netns list | grep -E "^fsdp_n(h[0-9]+|b)_$1( |\$)" || true; }

"$NETEM" --hosts 2 --ranks-per-host 1 --rate 200mbit --bin "$BIN" --json "$WORK/bench.json" -- \
  --model tiny --seq 64 --batch 1 --steps 3 --strategies FULL_SHARD --variants plain \
  >"$WORK/run.log" 2>&1 &
pid=$!
wait $pid || fail "netem.sh exited $?: $(tail -20 "$WORK/run.log")"
[[ -z $(left_of $pid) ]] || fail "left behind after a run: $(left_of $pid)"
check_prediction "$WORK/bench.json" gloo ||
  fail "the prediction: $(tail -8 "$WORK/run.log" | tr -d '\0')"

# The same over MPI (mpirun in host 0, the other host's daemon through `ip netns exec`).
mpi_version=$(mpirun --version 2>/dev/null | head -1)
if [[ $mpi_version =~ \(Open\ MPI\)\ 4\. ]]; then
  "$NETEM" --hosts 2 --ranks-per-host 1 --rate 200mbit --backend mpi --bin "$BIN" \
    --json "$WORK/mpi.json" -- --model tiny --seq 64 --batch 2 --steps 3 \
    --strategies FULL_SHARD --variants plain >"$WORK/mpi.log" 2>&1 &
  pid=$!
  wait $pid || fail "netem.sh --backend mpi exited $?: $(tail -20 "$WORK/mpi.log")"
  [[ -z $(left_of $pid) ]] || fail "left behind after an MPI run: $(left_of $pid)"
  check_prediction "$WORK/mpi.json" mpi ||
    fail "the MPI prediction: $(tail -8 "$WORK/mpi.log" | tr -d '\0')"
else
  echo "netem_test: the MPI run is not checked: netem.sh's MPI launch needs Open MPI 4's mpirun," \
    "this has '${mpi_version:-none}'"
  expect_netem_error "MPI without Open MPI 4" "needs" --backend mpi --bin "$BIN"
fi

"$NETEM" --hosts 2 --ranks-per-host 1 --rate 1gbit --comm --bin "$BIN" -- --elements 262144 \
  --repeats 2 >"$WORK/comm.log" 2>&1 &
pid=$!
wait $pid || fail "netem.sh --comm exited $?: $(tail -20 "$WORK/comm.log")"
[[ -z $(left_of $pid) ]] || fail "left behind after --comm: $(left_of $pid)"
for c in all_gather reduce_scatter all_reduce; do
  grep -Eq "$c +median +[0-9.]+ ms .* got +[0-9]+% of it" "$WORK/comm.log" ||
    fail "netem.sh --comm printed no $c row: $(cat "$WORK/comm.log")"
done

# Interrupted halfway: the run is stopped while its ranks train.
"$NETEM" --hosts 2 --ranks-per-host 1 --rate 200mbit --bin "$BIN" -- \
  --model tiny --seq 64 --batch 2 --steps 50 --strategies FULL_SHARD --variants plain \
  >"$WORK/killed.log" 2>&1 &
pid=$!
for _ in $(seq 100); do  # until its hosts exist and the ranks run
  [[ -n $(left_of $pid) ]] && pgrep -f "fsdp-bench --intra-gbit" >/dev/null && break
  sleep 0.1
done
[[ -n $(left_of $pid) ]] || fail "the interrupted run never made its namespaces: $(cat "$WORK/killed.log")"
sleep 2
kill -TERM $pid
wait $pid 2>/dev/null
[[ -z $(left_of $pid) ]] || fail "left behind after SIGTERM: $(left_of $pid)"

expect_netem_error "a bad rate" "--rate" --rate 10gb --bin "$BIN"
expect_netem_error "too many hosts" "--hosts" --hosts 12 --bin "$BIN"
expect_netem_error "an unknown option" "unknown option" --speed 1 --bin "$BIN"
expect_netem_error "a bad backend" "--backend: gloo or mpi" --backend nccl --bin "$BIN"
expect_netem_error "FSDP2 outside a chroot" "--fsdp2 runs PyTorch" --fsdp2 --bin "$BIN"
expect_netem_error "a chroot under MPI" "--chroot works with --backend gloo only" --chroot sid \
  --backend mpi --bin "$BIN"
expect_netem_error "--comm with --json" "--comm prints the collectives' times" --comm \
  --json "$WORK/x.json" --bin "$BIN"
expect_netem_error "a chroot not made" "--chroot no-such-suite: no such root" \
  --chroot no-such-suite --bin "$BIN"

((failures == 0)) && echo "netem_test: all passed"
exit $((failures > 0))
