#!/usr/bin/env bash
# An emulated cluster on one machine (issue 26): each "host" is a network namespace with its own
# loopback, joined to the others through a bridge (in a namespace of its own) by a veth pair
# shaped with tc at both ends: RATE in each direction (tbf), and DELAY one way between hosts (netem,
# where the kernel has sch_netem; without it a non-zero --delay is an error that says so). Ranks on
# one host talk over that host's loopback, unshaped, as on a real node. fsdp-bench then runs
# across the hosts, over Gloo (TCP; `fsdp-run --nnodes HOSTS` in every host) or over MPI
# (OpenMPI's TCP transport; mpirun in host 0 starting the others through `ip netns exec`), and
# host 0 prints its table.
#
# Usage (as root): bench/netem.sh [--hosts 2] [--ranks-per-host 1] [--rate 10gbit] [--delay 0]
#                                 [--backend gloo|mpi] [--bin build/bin] [--json FILE]
#                                 [--chroot SUITE] [--fsdp2 | --comm] -- [fsdp-bench arguments]
#   e.g. bench/netem.sh --rate 1gbit -- --model tiny --strategies FULL_SHARD
# --chroot SUITE: every host runs its ranks inside scripts/chroot.sh's root of that Debian suite
# (sid: LibTorch 2.14.1, with --bin build-sid/bin built there). --fsdp2 (Gloo, with --chroot sid):
# PyTorch FSDP2 instead of fsdp-bench, bench/fsdp2_cpu.py with the arguments after --, --json
# its --out (bench/vs_fsdp2.sh --rate runs both sides so). --comm: the collectives alone,
# fsdp-bench-comm with the arguments after -- and --link-gbit the link's TCP rate (below), which
# prints what share of it each collective got.
# RATE: a number with kbit, mbit or gbit; DELAY: 0 or a number with us or ms. Under MPI,
# FSDP_MPI_PROGRESS (default 1: the backend's progress thread) is passed to the ranks; the mpirun
# options are Open MPI 4's (Debian 12's 4.1, where this was run).
# fsdp-bench also predicts each step with the time model (fsdp/plan/step_time.h): the script
# gives it the link it made (--inter-gbit: RATE times 0.95, what TCP carries of an Ethernet
# link's bytes, 1448 of every 1514) and this machine's defaults for the rest (--intra-gbit 8.6,
# --intra-us 30, --comm-cpu-gbit 8.6 and --contention 1.5, fitted on one host; the CPU bound's
# --intra-cpu-gbit 14 and --inter-cpu-gbit 8.7, measured: docs/plan.md) and, since every emulated
# host shares this machine, --cores-per-rank: this machine's CPUs over all the ranks; arguments
# after -- win.
# Everything it makes (namespaces, links, addresses in 10.214.0.0/24) is named after this
# process's id and removed at exit, also when a run fails or is interrupted.
set -uo pipefail
HOSTS=2 PER_HOST=1 RATE=10gbit DELAY=0 BIN=build/bin JSON="" BACKEND=gloo CHROOT="" FSDP2=0
EXE=fsdp-bench
while (($#)); do
  case $1 in
    --hosts) HOSTS=$2; shift 2 ;;
    --ranks-per-host) PER_HOST=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --delay) DELAY=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    --json) JSON=$2; shift 2 ;;
    --backend) BACKEND=$2; shift 2 ;;
    --chroot) CHROOT=$2; shift 2 ;;
    --fsdp2) FSDP2=1; shift ;;
    --comm) EXE=fsdp-bench-comm; shift ;;
    --) shift; break ;;
    *) echo "netem.sh: unknown option $1 (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
done
USER_ARGS=("$@")
[[ $BACKEND == gloo || $BACKEND == mpi ]] ||
  { echo "netem.sh: --backend: gloo or mpi, got '$BACKEND'" >&2; exit 2; }
[[ $FSDP2 == 0 || ($BACKEND == gloo && -n $CHROOT) ]] ||
  { echo "netem.sh: --fsdp2 runs PyTorch over Gloo in a chroot that has it: give --chroot sid, not --backend mpi" >&2; exit 2; }
[[ $EXE == fsdp-bench || ($FSDP2 == 0 && -z $JSON) ]] ||
  { echo "netem.sh: --comm prints the collectives' times: without --fsdp2 or --json" >&2; exit 2; }
[[ -z $CHROOT || $BACKEND == gloo ]] ||
  { echo "netem.sh: --chroot works with --backend gloo only (mpirun starts the other hosts' ranks itself)" >&2; exit 2; }
REPO=$(cd "$(dirname "$0")/.." && pwd)
# Made beforehand: inside a host's namespace scripts/chroot.sh has no network to make one.
[[ -z $CHROOT || -d ${FSDP_CHROOT_DIR:-/var/cache/fsdp/$CHROOT} ]] ||
  { echo "netem.sh: --chroot $CHROOT: no such root; make it first: FSDP_CHROOT_SUITE=$CHROOT scripts/chroot.sh true" >&2; exit 2; }
[[ $HOSTS =~ ^[1-9]$ ]] || { echo "netem.sh: --hosts: 1 to 9, got '$HOSTS'" >&2; exit 2; }
[[ $PER_HOST =~ ^[1-9][0-9]*$ ]] || { echo "netem.sh: --ranks-per-host: a positive integer, got '$PER_HOST'" >&2; exit 2; }
BIN=$(cd "$BIN" && pwd) || exit 2
for exe in fsdp-run "$EXE"; do
  [[ -x $BIN/$exe ]] || { echo "netem.sh: no $BIN/$exe (build first)" >&2; exit 2; }
done
command -v ip >/dev/null && command -v tc >/dev/null ||
  { echo "netem.sh: needs ip and tc (iproute2)" >&2; exit 2; }
# tbf's bucket holds 10 ms of traffic (at least 64 KiB), so that the kernel's timer granularity
# does not cap the rate.
if [[ $RATE =~ ^([0-9]+)(kbit|mbit|gbit)$ ]]; then
  case ${BASH_REMATCH[2]} in kbit) scale=1000 ;; mbit) scale=1000000 ;; gbit) scale=1000000000 ;; esac
  RATE_BPS=$((BASH_REMATCH[1] * scale))
  BURST=$((RATE_BPS / 8 / 100))
  ((BURST < 65536)) && BURST=65536
else
  echo "netem.sh: --rate: a whole number with kbit, mbit or gbit (10gbit), got '$RATE'" >&2
  exit 2
fi
[[ $DELAY == 0 || $DELAY =~ ^[0-9]+(us|ms)$ ]] ||
  { echo "netem.sh: --delay: 0, or a whole number with us or ms (500us), got '$DELAY'" >&2; exit 2; }

# The rate in Gbit/s that TCP gets out of the link.
INTER_GBIT=$(awk -v b="$RATE_BPS" 'BEGIN { printf "%.6g", b * 0.95 / 1e9 }')
DELAY_US=0
[[ $DELAY =~ ^([0-9]+)us$ ]] && DELAY_US=${BASH_REMATCH[1]}
[[ $DELAY =~ ^([0-9]+)ms$ ]] && DELAY_US=$((BASH_REMATCH[1] * 1000))
CORES_PER_RANK=$(awk -v c="$(nproc)" -v r=$((HOSTS * PER_HOST)) 'BEGIN { printf "%.6g", c / r }')
BENCH_ARGS=(--intra-gbit 8.6 --intra-us 30 --comm-cpu-gbit 8.6 --contention 1.5 --inter-gbit "$INTER_GBIT"
  --inter-us "$((DELAY_US + 50))" --intra-cpu-gbit 14 --inter-cpu-gbit 8.7
  --cores-per-rank "$CORES_PER_RANK" "${USER_ARGS[@]}")
[[ $EXE == fsdp-bench-comm ]] && BENCH_ARGS=(--link-gbit "$INTER_GBIT" "${USER_ARGS[@]}")

TAG=$$
BR=fsdp_nb_$TAG
host_ns() { echo "fsdp_nh$1_$TAG"; }
host_if() { local n="fh$1_$TAG"; echo "${n:0:15}"; }  # interface names: at most 15 characters
br_if() { local n="fb$1_$TAG"; echo "${n:0:15}"; }
addr() { echo "10.214.0.$(($1 + 1))"; }
PORT=$((29000 + TAG % 500))
LOGS=$(mktemp -d /tmp/fsdp_netem.XXXXXX)

cleanup() {
  set +e # a host the set-up never made is not an error here
  for ((h = 0; h < HOSTS; h++)); do
    ip netns pids "$(host_ns "$h")" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$(host_ns "$h")" 2>/dev/null
  done
  ip netns del "$BR" 2>/dev/null # takes the bridge and the veth ends in it along
  rm -rf "$LOGS"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shape NAMESPACE DEVICE DELAY: tbf at RATE, under netem's delay when DELAY is not 0.
shape() {
  if [[ $3 == 0 ]]; then
    tc -n "$1" qdisc add dev "$2" root tbf rate "$RATE" burst "$BURST" latency 100ms
  else
    tc -n "$1" qdisc add dev "$2" root handle 1: netem delay "$3" limit 100000 &&
      tc -n "$1" qdisc add dev "$2" parent 1:1 handle 10: tbf rate "$RATE" burst "$BURST" latency 100ms
  fi
}

if ! err=$(ip netns add "$BR" 2>&1); then
  echo "netem.sh: cannot create network namespaces (needs root with CAP_SYS_ADMIN): $err" >&2
  exit 2
fi
if [[ $DELAY != 0 ]] && ! tc -n "$BR" qdisc add dev lo root netem delay 1us 2>/dev/null; then
  echo "netem.sh: --delay $DELAY needs the kernel's sch_netem, which this one ($(uname -r)) lacks" >&2
  exit 2
fi
set -e
ip -n "$BR" link add br0 type bridge
ip -n "$BR" link set br0 up
for ((h = 0; h < HOSTS; h++)); do
  ns=$(host_ns "$h") hi=$(host_if "$h") bi=$(br_if "$h")
  ip netns add "$ns"
  ip link add "$hi" type veth peer name "$bi"
  ip link set "$hi" netns "$ns"
  ip link set "$bi" netns "$BR"
  ip -n "$BR" link set "$bi" master br0 up
  ip -n "$ns" addr add "$(addr "$h")/24" dev "$hi"
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "$hi" up
  # Each direction at RATE; the delay, where asked, on the way out of the host only (one way).
  shape "$ns" "$hi" "$DELAY"
  shape "$BR" "$bi" 0
done
set +e

echo "netem: $HOSTS hosts x $PER_HOST ranks over $BACKEND, links $RATE each way, $DELAY one way between hosts"

# Gloo: fsdp-run in every host, meeting at host 0's address; with --chroot, inside that root.
# Each host runs fsdp-bench, or with --fsdp2 FSDP2's script (Debian's torch: no libuv).
run_gloo() {
  pids=()
  local inside=() cmd
  [[ -n $CHROOT ]] && inside=(env FSDP_CHROOT_SUITE="$CHROOT" "$REPO/scripts/chroot.sh")
  for ((h = 0; h < HOSTS; h++)); do
    if ((FSDP2)); then
      cmd=(env USE_LIBUV=0 python3 "$REPO/bench/fsdp2_cpu.py" "${USER_ARGS[@]}")
      [[ $h == 0 && -n $JSON ]] && cmd+=(--out "$JSON")
    else
      cmd=("$BIN/$EXE" "${BENCH_ARGS[@]}")
      [[ $h == 0 && -n $JSON ]] && cmd+=(--json "$JSON")
    fi
    ip netns exec "$(host_ns "$h")" "${inside[@]}" env GLOO_SOCKET_IFNAME="$(host_if "$h")" \
      OMP_NUM_THREADS=1 "$BIN/fsdp-run" --backend gloo --nnodes "$HOSTS" --node-rank "$h" \
      --nproc-per-node "$PER_HOST" --master-addr "$(addr 0)" --master-port "$PORT" \
      "${cmd[@]}" >"$LOGS/host$h.txt" 2>&1 &
    pids+=($!)
  done
  rc=0
  for ((h = 0; h < HOSTS; h++)); do
    wait "${pids[$h]}" || { echo "netem.sh: host $h exited $?; its last lines:"; tail -15 "$LOGS/host$h.txt"; rc=1; }
  done
  cat "$LOGS/host0.txt"
  return $rc
}

# MPI: mpirun in host 0 starts each other host's daemon through a launch agent that enters that
# host's namespace (in place of ssh). Only the TCP transport, on the hosts' addresses: the
# shared-memory one would join ranks of different hosts through /dev/shm, past the links.
# No binding (--bind-to none): each "host" looks to mpirun like a node of its own, and with 2
# ranks or fewer a node's ranks are bound to its cores from the first, so every host's rank went
# to core 0 of this one machine (until 2026-11-27: the MPI cells' compute alone took 3.8 s
# where Gloo's took 2.0, and the progress threads shared that core with both ranks' compute).
run_mpi() {
  command -v mpirun >/dev/null || { echo "netem.sh: --backend mpi needs mpirun (OpenMPI)" >&2; return 2; }
  local version
  version=$(mpirun --version 2>/dev/null | head -1)
  if [[ ! $version =~ \(Open\ MPI\)\ 4\. ]]; then
    echo "netem.sh: --backend mpi needs Open MPI 4's mpirun; this is '$version', whose launcher" \
      "(PRRTE) takes every namespace for the same host and joins their ranks past the links" >&2
    return 2
  fi
  local agent=$LOGS/agent.sh hosts=() h
  {
    echo '#!/bin/sh'
    echo 'host=$1; shift'
    echo 'case $host in'
    for ((h = 0; h < HOSTS; h++)); do echo "  $(addr "$h")) ns=$(host_ns "$h") ;;"; done
    echo '  *) echo "netem agent: unknown host $host" >&2; exit 1 ;;'
    echo 'esac'
    echo 'exec ip netns exec "$ns" sh -c "$*"'
  } >"$agent"
  chmod +x "$agent"
  for ((h = 0; h < HOSTS; h++)); do hosts+=("$(addr "$h"):$PER_HOST"); done
  local json=()
  [[ -n $JSON ]] && json=(--json "$JSON")
  local hostlist env=(-x OMP_NUM_THREADS=1 -x PATH -x FSDP_MPI_PROGRESS)
  hostlist=$(IFS=,; echo "${hosts[*]}")
  local var
  for var in LD_LIBRARY_PATH ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS; do
    [[ -n ${!var:-} ]] && env+=(-x "$var")  # mpirun passes on only what it is told to
  done
  # In the background: a signal to this script then stops it at once (bash runs traps only
  # between commands), and the clean-up kills what runs in the namespaces.
  ip netns exec "$(host_ns 0)" mpirun --allow-run-as-root --oversubscribe \
    -np $((HOSTS * PER_HOST)) --host "$hostlist" --bind-to none --mca plm_rsh_agent "$agent" \
    --mca btl tcp,self --mca btl_tcp_if_include 10.214.0.0/24 \
    --mca oob_tcp_if_include 10.214.0.0/24 "${env[@]}" \
    "$BIN/$EXE" "${BENCH_ARGS[@]}" "${json[@]}" &
  wait $!
}

if [[ $BACKEND == mpi ]]; then
  export FSDP_MPI_PROGRESS=${FSDP_MPI_PROGRESS:-1}
  run_mpi
else
  run_gloo
fi
