#!/usr/bin/env bash
# Issue 26's measurements in one command (as root): GPT-2 124M on emulated networks
# (bench/netem.sh), each cell measured by fsdp-bench next to the time model's prediction, then
# the tables and the plot (bench/netem_table.py) in OUT. About 55 minutes on 2 cores per repeat
# (52 on 2026-11-27).
#
# Usage: bench/netem_grid.sh [--out bench/results/netem-DATE] [--bin build/bin] [--steps 3]
#                            [--seq 256] [--repeats 1] [--cells REGEX]
# --cells: only the cells whose name matches (e.g. 'mpi'); the tables cover every JSON in OUT.
# --repeats: fsdp-bench's; each repeat runs every strategy and variant of a file again after
# measuring the compute alone again. The medians are what the table compares: on a 2-core VM
# one run of a cell is 10-20% off another (bench/NOTES.md, "Emulated networks").
# The cells (strategies x {plain, prefetch} in each), over Gloo unless said:
#   1 host x 2 and x 4 ranks (loopback)  fp32, bf16  NO_SHARD, SHARD_GRAD_OP, FULL_SHARD
#   2 hosts x 1 rank at 1, 3, 10 Gbit    fp32, bf16  NO_SHARD, SHARD_GRAD_OP, FULL_SHARD
#   2 hosts x 2 ranks at 1, 3, 10 Gbit   fp32, bf16  NO_SHARD, SHARD_GRAD_OP, FULL_SHARD,
#                                                    HYBRID_SHARD
#   2 hosts x 1 rank at 1, 10 Gbit       fp32        NO_SHARD, FULL_SHARD over MPI
#   2 hosts x 1 rank at 1 Gbit           fp32        FULL_SHARD over MPI without its progress
#                                                    thread
# HYBRID_SHARD is FULL_SHARD on one host and NO_SHARD with one rank per host: not measured there.
# The files follow the order the grid grew in (a *-sgo file: SHARD_GRAD_OP, added to a
# configuration measured before), so that a run with --cells can complete an earlier grid.
# A cell that fails stops the grid with its log; what finished stays in OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=bench/results/netem-$(date +%F) BIN=build/bin STEPS=3 SEQ=256 CELLS=. REPEATS=1
while (($#)); do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --seq) SEQ=$2; shift 2 ;;
    --cells) CELLS=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    *) echo "netem_grid.sh: unknown option $1 (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
{ lscpu | grep -E '^Model name'; nproc; uname -r; } >"$OUT/machine.txt"

# cell NAME HOSTS RANKS_PER_HOST RATE DTYPE STRATEGIES [BACKEND [FSDP_MPI_PROGRESS]]
cell() {
  local name=$1 hosts=$2 per=$3 rate=$4 dtype=$5 strategies=$6 backend=${7:-gloo} progress=${8:-1}
  [[ $name =~ $CELLS ]] || return 0
  local label="$hosts x $per, $rate, $backend"
  [[ $backend == mpi && $progress == 0 ]] && label+=", no progress thread"
  echo "netem_grid: $name ($label, $dtype: $strategies)"
  local start=$SECONDS
  FSDP_MPI_PROGRESS=$progress bench/netem.sh --hosts "$hosts" --ranks-per-host "$per" \
    --rate "$rate" --backend "$backend" --bin "$BIN" --json "$OUT/$name.json" -- --model 124m \
    --seq "$SEQ" --batch 1 --steps "$STEPS" --repeats "$REPEATS" --dtype "$dtype" \
    --strategies "$strategies" --variants plain,prefetch --label "$label" >"$OUT/$name.log" 2>&1 ||
    { echo "netem_grid: $name failed; its log:"; tail -30 "$OUT/$name.log"; exit 1; }
  echo "netem_grid: $name: $((SECONDS - start)) s"
}

cell h1x2-fp32 1 2 10gbit fp32 NO_SHARD,SHARD_GRAD_OP,FULL_SHARD
cell h1x4-fp32 1 4 10gbit fp32 NO_SHARD,SHARD_GRAD_OP,FULL_SHARD
for rate in 1gbit 3gbit 10gbit; do
  cell "h2x1-$rate-fp32" 2 1 "$rate" fp32 NO_SHARD,SHARD_GRAD_OP,FULL_SHARD
done
for rate in 1gbit 10gbit; do
  cell "h2x2-$rate-fp32" 2 2 "$rate" fp32 NO_SHARD,FULL_SHARD,HYBRID_SHARD
done
cell h2x2-1gbit-fp32-sgo 2 2 1gbit fp32 SHARD_GRAD_OP
cell h2x2-10gbit-fp32-sgo 2 2 10gbit fp32 SHARD_GRAD_OP
cell h2x2-3gbit-fp32 2 2 3gbit fp32 NO_SHARD,SHARD_GRAD_OP,FULL_SHARD,HYBRID_SHARD
cell h2x2-1gbit-bf16 2 2 1gbit bf16 NO_SHARD,FULL_SHARD,HYBRID_SHARD
cell h2x2-1gbit-bf16-sgo 2 2 1gbit bf16 SHARD_GRAD_OP
for rate in 3gbit 10gbit; do
  cell "h2x2-$rate-bf16" 2 2 "$rate" bf16 NO_SHARD,SHARD_GRAD_OP,FULL_SHARD,HYBRID_SHARD
done
for rate in 1gbit 10gbit; do
  cell "h2x1-$rate-bf16" 2 1 "$rate" bf16 NO_SHARD,FULL_SHARD
  cell "h2x1-$rate-bf16-sgo" 2 1 "$rate" bf16 SHARD_GRAD_OP
done
cell h2x1-3gbit-bf16 2 1 3gbit bf16 NO_SHARD,SHARD_GRAD_OP,FULL_SHARD
cell h1x2-bf16 1 2 10gbit bf16 NO_SHARD,SHARD_GRAD_OP,FULL_SHARD
cell h1x4-bf16 1 4 10gbit bf16 NO_SHARD,SHARD_GRAD_OP,FULL_SHARD
for rate in 1gbit 10gbit; do
  cell "h2x1-$rate-fp32-mpi" 2 1 "$rate" fp32 NO_SHARD,FULL_SHARD mpi
done
cell h2x1-1gbit-fp32-mpi-noprogress 2 1 1gbit fp32 FULL_SHARD mpi 0
/usr/bin/python3 bench/netem_table.py "$OUT"  # Debian's: python3-matplotlib for the plot
