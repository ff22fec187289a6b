#!/usr/bin/env bash
# Issue 26's overlap where the collectives have a core of their own (as root). On a 2-core machine
# running 2 ranks every core computes, and a collective running beside compute takes its core
# (the time model's contention): no schedule can hide it there. Here both ranks' training threads
# run on one CPU and the threads that move their collectives (Gloo's worker and transport loop,
# MPI's progress thread and OpenMPI's own) on another (fsdp-bench --compute-cpus, --comm-cpus),
# over bench/netem.sh's emulated hosts, and the time model predicts with contention 0 and no CPU
# bound (--cores-per-rank 0: compute and collectives do not share cores). The compute
# alone is measured the same way (both ranks' training threads sharing their CPU), so a step takes
# about twice what it takes with a core each.
# Cells: GPT-2 124M fp32, sequence 256, batch 1, 2 hosts x 1 rank, FULL_SHARD without prefetch,
# with prefetch (the root's early gradients in pieces, 6 for this model), with prefetch and the
# early part in one piece (`prefetch+onepiece`, the schedule before 2026-11-27), and with prefetch
# but the root's gradients reduced whole (`prefetch+whole`); over Gloo at 1, 3 and 10 Gbit/s and
# over MPI at 3 and 10 Gbit/s. About 40 minutes with 3 repeats, 13 of them the 1 Gbit/s cell
# (where communication exceeds compute; --cells '10gbit|3gbit' leaves it out).
# Each record has the compute CPU's idle time a step (fsdp-bench: the time no training thread had
# work, the exposed communication read off the compute's own timeline). Then the table
# (bench/netem_table.py) in OUT.
#
# Usage: bench/overlap_pinned.sh [--out bench/results/overlap-pinned-DATE] [--bin build/bin]
#                                [--repeats 3] [--steps 3] [--compute-cpus 0] [--comm-cpus 1]
#                                [--cells REGEX] [--variants LIST (fsdp-bench's; the four above)]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=bench/results/overlap-pinned-$(date +%F) BIN=build/bin REPEATS=3 STEPS=3 COMPUTE=0 COMM=1
CELLS=. VARIANTS=plain,prefetch,prefetch+onepiece,prefetch+whole
while (($#)); do
  [[ $# -ge 2 ]] || { echo "overlap_pinned.sh: $1 needs a value (see the usage in $0)" >&2; exit 2; }
  case $1 in
    --out) OUT=$2 ;;
    --bin) BIN=$2 ;;
    --repeats) REPEATS=$2 ;;
    --steps) STEPS=$2 ;;
    --compute-cpus) COMPUTE=$2 ;;
    --comm-cpus) COMM=$2 ;;
    --cells) CELLS=$2 ;;
    --variants) VARIANTS=$2 ;;
    *) echo "overlap_pinned.sh: unknown option $1 (see the usage in $0)" >&2; exit 2 ;;
  esac
  shift 2
done
mkdir -p "$OUT"
{ lscpu | grep -E '^Model name'; nproc; uname -r; } >"$OUT/machine.txt"

# cell NAME RATE BACKEND
cell() {
  local name=$1 rate=$2 backend=$3
  [[ $name =~ $CELLS ]] || return 0
  local label="2 x 1, $rate, $backend, training threads on CPU $COMPUTE, collectives on CPU $COMM"
  echo "overlap_pinned: $name ($label)"
  local start=$SECONDS
  bench/netem.sh --hosts 2 --ranks-per-host 1 --rate "$rate" --backend "$backend" --bin "$BIN" \
    --json "$OUT/$name.json" -- --model 124m --seq 256 --batch 1 --steps "$STEPS" \
    --repeats "$REPEATS" --dtype fp32 --strategies FULL_SHARD \
    --variants "$VARIANTS" --compute-cpus "$COMPUTE" --comm-cpus "$COMM" \
    --contention 0 --cores-per-rank 0 --label "$label" >"$OUT/$name.log" 2>&1 ||
    { echo "overlap_pinned: $name failed; its log:"; tail -30 "$OUT/$name.log"; exit 1; }
  echo "overlap_pinned: $name: $((SECONDS - start)) s"
}

cell h2x1-10gbit-gloo 10gbit gloo
cell h2x1-3gbit-gloo 3gbit gloo
cell h2x1-1gbit-gloo 1gbit gloo
cell h2x1-3gbit-mpi 3gbit mpi
cell h2x1-10gbit-mpi 10gbit mpi
/usr/bin/python3 bench/netem_table.py "$OUT"
