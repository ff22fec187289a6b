#!/usr/bin/env bash
# Two hosts on one machine: network namespaces joined by a veth pair, each running
# `fsdp-run --nnodes 2` with 2 ranks, training with HYBRID_SHARD (one shard group per host,
# replicated across hosts) over Gloo. The ranks run the hybrid parity test, which compares every
# loss and parameter with a single-process run, so passing means the two hosts trained the same
# model as one process.
#
# Usage: two_hosts.sh BUILD_BIN_DIR
# Exit 77 (CTest's skip code) when namespaces cannot be made, with the reason.
set -uo pipefail
BIN=$(cd "$1" && pwd)
H0=fsdp_h0_$$ H1=fsdp_h1_$$
IF0=fsdpv0_$$ IF1=fsdpv1_$$
IF0=${IF0:0:15} IF1=${IF1:0:15}  # interface names are at most 15 characters
ADDR0=10.213.0.1 ADDR1=10.213.0.2
PORT=$((29700 + $$ % 200))

cleanup() {
  ip netns pids "$H0" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns pids "$H1" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "$H0" 2>/dev/null
  ip netns del "$H1" 2>/dev/null
}
trap cleanup EXIT

if ! command -v ip >/dev/null; then
  echo "SKIP: 'ip' (iproute2) is not installed"
  exit 77
fi
if ! err=$(ip netns add "$H0" 2>&1); then
  echo "SKIP: cannot create network namespaces here (needs root with CAP_SYS_ADMIN): $err"
  exit 77
fi
set -e
ip netns add "$H1"
ip link add "$IF0" type veth peer name "$IF1"
ip link set "$IF0" netns "$H0"
ip link set "$IF1" netns "$H1"
ip -n "$H0" addr add "$ADDR0/24" dev "$IF0"
ip -n "$H1" addr add "$ADDR1/24" dev "$IF1"
for h in "$H0" "$H1"; do ip -n "$h" link set lo up; done
ip -n "$H0" link set "$IF0" up
ip -n "$H1" link set "$IF1" up
set +e

run_host() {  # node_rank namespace interface
  ip netns exec "$2" env GLOO_SOCKET_IFNAME="$3" FSDP_TEST_BACKEND=gloo OMP_NUM_THREADS=1 \
    "$BIN/fsdp-run" --nnodes 2 --node-rank "$1" --nproc-per-node 2 \
    --master-addr "$ADDR0" --master-port "$PORT" \
    "$BIN/test_parity" '--gtest_filter=Meshes/HybridParity.*/HYBRID_SHARD_shard2:Meshes/HybridParity.*/HYBRID_SHARD_shard0' \
    > "${TMPDIR:-/tmp}/fsdp_two_hosts_$$_$1.log" 2>&1
}
run_host 0 "$H0" "$IF0" &
pid0=$!
run_host 1 "$H1" "$IF1" &
pid1=$!
wait "$pid0"; rc0=$?
wait "$pid1"; rc1=$?
for k in 0 1; do
  echo "---- host $k (exit $([[ $k == 0 ]] && echo $rc0 || echo $rc1)) ----"
  tail -n 25 "${TMPDIR:-/tmp}/fsdp_two_hosts_$$_$k.log"
  rm -f "${TMPDIR:-/tmp}/fsdp_two_hosts_$$_$k.log"
done
if [[ $rc0 -ne 0 || $rc1 -ne 0 ]]; then
  echo "FAIL: two-host HYBRID_SHARD run (host 0 exit $rc0, host 1 exit $rc1)"
  exit 1
fi
echo "PASS: 2 hosts x 2 ranks, HYBRID_SHARD over Gloo, parity with one process"
