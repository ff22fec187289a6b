#!/usr/bin/env bash
# The rendezvous store against hostile peers. Rank 0 of a two-rank Gloo job serves c10d's TCP store,
# as in a multi-node launch (torchrun's variables, no fsdp-run run folder). Before rank 1 joins,
# peers connect to the store's port: one sends random bytes, one a request whose key claims 2^62
# bytes, one a request cut off midway, and one connects and stays silent until the end. The store
# must drop them and keep serving: rank 1 then joins and the job trains to the end.
# In a sanitized build (SANITIZED=1) the 2^62-byte key is left out: c10d's store catches the
# std::bad_alloc its allocation throws, but AddressSanitizer's operator new aborts instead.
# Usage: tests/store_garbage.sh FSDP_DEMO [PORT [SANITIZED]]
set -uo pipefail
demo=$1
port=${2:-$((20000 + RANDOM % 20000))}
sanitized=${3:-0}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  for r in 0 1; do [[ -f $work/rank$r.log ]] && sed "s/^/rank $r: /" "$work/rank$r.log" | tail -20; done
  exit 1
}
export WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port
unset FSDP_RUN_DIR OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE

RANK=0 LOCAL_RANK=0 timeout 120 "$demo" --steps 10 >"$work/rank0.log" 2>&1 &
rank0=$!
for _ in $(seq 200); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done
(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || fail "the store never listened on port $port"

send() {  # send BYTES-FILE: one connection that writes the file and closes
  (exec 3<>"/dev/tcp/127.0.0.1/$port" && cat "$1" >&3) 2>/dev/null
}
head -c 65536 /dev/urandom >"$work/random"
printf '\x00\x00\x00\x00\x00\x00\x00\x00\x40' >"$work/huge_key"    # SET, key length 2^62
printf '\x01\x05\x00\x00\x00\x00\x00\x00\x00ab' >"$work/cut_short" # GET, 5-byte key, 2 sent
exec 4<>"/dev/tcp/127.0.0.1/$port"                                  # silent until the end
inputs=(random huge_key cut_short random)
((sanitized)) && inputs=(random cut_short random)
for f in "${inputs[@]}"; do send "$work/$f"; done
sleep 1
kill -0 "$rank0" 2>/dev/null || fail "rank 0 (the store) died from garbage on its port"

RANK=1 LOCAL_RANK=1 timeout 120 "$demo" --steps 10 >"$work/rank1.log" 2>&1 &
rank1=$!
wait "$rank0" || fail "rank 0 exited $?"
wait "$rank1" || fail "rank 1 exited $?"
exec 4>&-
grep -Eq "^step +10 " "$work/rank0.log" || fail "rank 0 did not train 10 steps"
echo "ok: the store survived these peers: ${inputs[*]}, and a silent one"
