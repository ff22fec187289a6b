#!/usr/bin/env bash
# fsdp-bench and fsdp-plan as a user runs them:
#  - fsdp-bench on a tiny GPT-2 at world size 2, two strategies x three variants (plain, prefetch,
#    prefetch with CPU offload), two timed steps each repeated twice: every JSON record holds four
#    timed steps, offloaded shards where asked (host_shard_bytes), communication equal to the
#    plan's theory, live tensor memory within 15 % of the plan, and at most one large block mapped
#    after the warm-up step (the host allocator's cache serves the steps; the warm-up may have
#    given back one block it needs again; not in a sanitized build, where the allocator caches
#    nothing so that AddressSanitizer sees every block); given links, each repeat measures the
#    compute alone again and predicts from it (one prediction per repeat, the median shown; none
#    for offload, which the time model does not describe);
#    with the ranks' training threads on one CPU and their collectives' threads on another
#    (--compute-cpus, --comm-cpus), every thread is on one of the two, and the compute CPU's idle
#    time a step is recorded;
#  - fsdp-bench with the head and loss fused (the default) and whole (`unfused`) at another
#    vocabulary (--vocab): the records say which, the plan's logits share is smaller fused, and
#    the FLOPs a token and the MFU follow bench/README.md's formula, counted here from the shapes;
#    with --profile each run's extra step is written as a table of operators (no trace where the
#    LibTorch has no Kineto, as Debian's 1.13, which the output says);
#  - bench/netem_table.py joins the recorded partial re-run with the grid it completes, with the
#    CPU columns, and still reads records from before them; pinned records show the compute
#    CPUs' idle time;
#  - bench/vs_fsdp2_table.py reads the fsdp-bench and FSDP2 records of the recorded comparisons
#    (Hugging Face's FSDP2 alone, and beside the nanoGPT one);
#  - fsdp-bench-adamw on a tiny shard (an odd size, two threads): it prints every row, and the
#    op-by-op AdamW ends exactly where torch's does;
#  - fsdp-bench-comm over Gloo at world size 2, two of each collective in flight under 1 ms of
#    compute: a row for each of the three, with the link's share where a rate is given; a buffer
#    the world does not divide is refused;
#  - bad arguments to any of them exit non-zero naming the option, before any rank starts; every
#    numeric flag of every tool (fsdp-ckpt, fsdp-train sample, fsdp-run too) refuses trailing text
#    and numbers past its range;
#  - every tool prints its usage for --help and -h and exits 0.
# Usage: tools_smoke.sh BUILD_BIN_DIR [SANITIZED (1 or 0)]
set -uo pipefail
BIN=$1
export FSDP_SMOKE_SANITIZED=${2:-0}
WORK=$(mktemp -d /tmp/fsdp_tools.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect_error WHAT PATTERN CMD...: CMD exits non-zero and its stderr matches PATTERN.
expect_error() {
  local what=$1 pattern=$2
  shift 2
  if "$@" >"$WORK/out" 2>"$WORK/err"; then
    fail "$what: exited 0"
  elif ! grep -q -- "$pattern" "$WORK/err"; then
    fail "$what: stderr lacks '$pattern': $(cat "$WORK/err")"
  fi
}

# The first and last CPU this process may use (the same one where it has one): the ranks' training
# threads on the first, the threads that move their collectives on the last.
read -r CPU_COMPUTE CPU_COMM < <(python3 -c 'import os; c = sorted(os.sched_getaffinity(0)); print(c[0], c[-1])')
"$BIN/fsdp-run" --backend mpi --nproc-per-node 2 "$BIN/fsdp-bench" --model tiny --seq 48 \
  --steps 2 --repeats 2 --strategies NO_SHARD,FULL_SHARD --variants plain,prefetch,prefetch+offload \
  --intra-gbit 8.6 --inter-gbit 10 --intra-cpu-gbit 14 --compute-cpus "$CPU_COMPUTE" --comm-cpus "$CPU_COMM" \
  --json "$WORK/bench.json" >"$WORK/bench.log" 2>&1 || fail "fsdp-bench: $(tail -5 "$WORK/bench.log")"
grep -q '^| FULL_SHARD | prefetch |' "$WORK/bench.log" || fail "fsdp-bench printed no table row"
python3 - "$WORK/bench.json" "$CPU_COMPUTE" "$CPU_COMM" <<'PY' || fail "fsdp-bench JSON"
import json, os, sys
sanitized = os.environ["FSDP_SMOKE_SANITIZED"] == "1"
records = json.load(open(sys.argv[1]))
assert len(records) == 6, len(records)
for r in records:
    name = r["strategy"] + " " + r["variant"]
    # The training thread on its CPU; the MPI progress thread and OpenMPI's own on the other;
    # none left on both.
    cpus = r["cpus"]
    assert (cpus["compute"], cpus["comm"]) == (sys.argv[2], sys.argv[3]), (name, cpus)
    assert cpus["threads_on_compute"] >= 1 and cpus["threads_on_comm"] >= 2, (name, cpus)
    if sys.argv[2] != sys.argv[3]:
        assert cpus["threads_on_compute"] + cpus["threads_on_comm"] == cpus["threads"], (name, cpus)
    # The compute CPU's idle time a step: read (10 ms ticks) and no longer than the step.
    assert 0 <= cpus["compute_idle_seconds"] <= r["median"]["step"] + 0.02, (name, cpus, r["median"])
    assert (r["host_shard_bytes"] > 0) == ("offload" in r["variant"]), name
    assert r["timed_steps"] == 4 and len(r["step_seconds"]) == 4, name
    assert r["comm_bytes_per_step"] == r["plan"]["comm_bytes_per_step"], name
    ratio = r["peak_tensor_bytes"] / r["plan"]["total_bytes"]
    assert 0.85 <= ratio <= 1.15, (name, ratio)
    assert sanitized or r["fresh_blocks"] <= 1, (name, r["fresh_blocks"])
    assert r["allocator"] == "fsdp", name
    assert r["peak_rss_absolute_bytes"] >= r["peak_rss_bytes"] > 0, name
    if "offload" in r["variant"]:
        assert "predicted" not in r, name
        continue
    steps, alone = r["predicted_steps"], r["compute_alone_seconds"]
    assert len(steps) == 2 and len(alone) == 2 and min(alone) > 0, (name, steps, alone)
    assert alone[0] != alone[1], (name, "the first repeat's compute alone reused", alone)
    assert r["predicted"]["step"] in steps, (name, r["predicted"], steps)
    # The CPU each step and each compute alone took; the collectives' core-seconds counted, but
    # no CPU bound: pinned, the collectives have a CPU of their own.
    profiles = r["compute_alone_profiles"]
    assert r["median"]["cpu"] > 0 and len(profiles) == 2, (name, r["median"], profiles)
    assert all(p["cpu"] > 0 and p["forward"] > 0 for p in profiles), (name, profiles)
    assert r["links"]["cores_per_rank"] == 0 and r["predicted"]["cpu_bound"] == 0, (name, r)
    assert r["predicted"]["comm_cpu"] > 0, (name, r["predicted"])
PY

# bench/netem_table.py: the recorded re-runs (a copy: the script writes its table beside them)
# The fused head and loss against the logits whole, at a vocabulary of 2,000 and 384 rows a step
# (at a few dozen the fused head's fp32 weight gradient outweighs the logits), with an MFU: the
# tiny GPT-2 (2 layers, width 64, 2 heads, 48 positions) makes 6 x (every parameter but the
# position table) + 12 x layers x width x sequence FLOPs a token.
mkdir -p "$WORK/profile"
"$BIN/fsdp-run" --backend gloo --nproc-per-node 2 "$BIN/fsdp-bench" --model tiny --seq 48 --batch 8 \
  --steps 1 --strategies FULL_SHARD --variants prefetch,prefetch+unfused --vocab 2000 --peak-tflops 0.5 \
  --profile "$WORK/profile" --json "$WORK/logits.json" >"$WORK/logits.log" 2>&1 || fail "fsdp-bench --vocab: $(tail -5 "$WORK/logits.log")"
python3 - "$WORK/logits.json" <<'PY' || fail "fsdp-bench fused and whole: $(cat "$WORK/logits.log")"
import json, sys
fused, whole = json.load(open(sys.argv[1]))
assert (fused["fused_loss"], whole["fused_loss"]) == (True, False), (fused["variant"], whole["variant"])
assert fused["vocab_size"] == whole["vocab_size"] == 2000
assert 0 < fused["plan"]["logits_bytes"] < whole["plan"]["logits_bytes"], (fused["plan"], whole["plan"])
V, h, L, T = 2000, 64, 2, 48
block = 2 * 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + (h * 4 * h + 4 * h) + (4 * h * h + h)
matmul = V * h + L * block + 2 * h  # the tied table once, the blocks, ln_f; not the positions
assert fused["parameters"] == matmul + T * h, (fused["parameters"], matmul + T * h)
expected = 6 * matmul + 12 * L * h * T
assert abs(fused["flops_per_token"] - expected) < 1e-6 * expected, (fused["flops_per_token"], expected)
for r in (fused, whole):
    mfu = r["flops_per_token"] * r["tokens_per_second"] / r["world_size"] / 0.5e12
    assert abs(r["mfu"] - mfu) < 1e-5 * mfu, (r["mfu"], mfu)  # both printed to 6 digits
PY
grep -q '^| FULL_SHARD | prefetch+unfused | [0-9.]* | [0-9.]* % | ' "$WORK/logits.log" ||
  fail "fsdp-bench printed no MFU row: $(grep -A4 'TFLOP/s per rank' "$WORK/logits.log")"
for v in prefetch prefetch_unfused; do
  p="$WORK/profile/gpt2-tiny__vocabulary_2000_-FULL_SHARD-$v-b8.md"
  [[ -f $p ]] || fail "fsdp-bench --profile wrote no $p: $(ls "$WORK/profile"; grep profile "$WORK/logits.log")"
  grep -q '^step: [0-9.]* ms wall; CPU operators' "$p" && grep -q '^| aten::[a-z_]* | operator | [0-9]* | ' "$p" ||
    fail "fsdp-bench --profile table: $(head -12 "$p")"
done
grep -q "^profile: $WORK/profile/.*\.md (\(trace .*\.trace\.json\|no trace: .*\))" "$WORK/logits.log" ||
  fail "fsdp-bench --profile printed no path: $(grep profile "$WORK/logits.log")"
expect_error "bench --profile not a folder" "--profile: '$WORK/none' is not a folder" \
  "$BIN/fsdp-bench" --profile "$WORK/none"

# joined with the grid they complete, every cell once.
REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$WORK/netem" && cp "$REPO"/bench/results/netem-cpu-more-2026-11-27/*.json "$WORK/netem/"
python3 "$REPO/bench/netem_table.py" "$WORK/netem" "$REPO/bench/results/netem-cpu-2026-11-27" \
  >"$WORK/netem.md" 2>&1 || fail "netem_table.py: $(cat "$WORK/netem.md")"
grep -q ' of 118 cells predicted within 15%' "$WORK/netem.md" ||
  fail "netem_table.py did not join the grids: $(tail -3 "$WORK/netem.md")"
# Every row with the CPU its collectives took, measured and predicted, and the CPU bound.
grep -Ec '^\| 2 x 2 \| 10gbit \| gloo \| fp32 \| FULL_SHARD \| prefetch( \| [0-9.-]+){6} \| - \| -( \| [0-9.]+){3} \| ' \
  "$WORK/netem.md" | grep -qx 1 || fail "netem_table.py: no CPU columns: $(grep -m3 '2 x 2' "$WORK/netem.md")"
# Records from before the CPU was recorded still make a table, with '-' there.
mkdir -p "$WORK/old" && cp "$REPO"/bench/results/netem-more-2026-11-26/*.json "$WORK/old/"
python3 "$REPO/bench/netem_table.py" "$WORK/old" >"$WORK/old.md" 2>&1 &&
  grep -q '| - | - | - |' "$WORK/old.md" || fail "netem_table.py on older records: $(tail -3 "$WORK/old.md")"
# Pinned records with the compute CPUs' idle time: it and its share of the collectives in the row.
mkdir -p "$WORK/pinned" && cp "$REPO"/bench/results/overlap-pinned-2026-11-27-idle/*.json "$WORK/pinned/"
python3 "$REPO/bench/netem_table.py" "$WORK/pinned" >"$WORK/pinned.md" 2>&1 &&
  grep -Eq '^\| 2 x 1 \| 10gbit \| mpi \| fp32 \| FULL_SHARD \| prefetch( \| -?[0-9.]+){8} \| ' "$WORK/pinned.md" ||
  fail "netem_table.py: no compute CPUs' idle column: $(grep -m3 '2 x 1' "$WORK/pinned.md")"

# bench/vs_fsdp2.sh's table, from the run recorded in the repository (the JSON fields it reads),
# and its refusal of an unknown option.
python3 "$REPO/bench/vs_fsdp2_table.py" "$REPO/bench/results/vs-fsdp2-2026-11-26" >"$WORK/vs.md" ||
  fail "vs_fsdp2_table.py: $(cat "$WORK/vs.md")"
grep -q '^| fsdp.cpp / FSDP2 Hugging Face GPT2LMHeadModel | ' "$WORK/vs.md" ||
  fail "vs_fsdp2_table.py printed no ratio row"
python3 "$REPO/bench/vs_fsdp2_table.py" "$REPO/bench/results/vs-fsdp2-lean-2026-11-28" >"$WORK/lean.md" ||
  fail "vs_fsdp2_table.py (both FSDP2 models): $(cat "$WORK/lean.md")"
grep -q '^| fsdp.cpp / FSDP2 nanoGPT | ' "$WORK/lean.md" && grep -q "fsdp.cpp's fused head and loss" "$WORK/lean.md" ||
  fail "vs_fsdp2_table.py: no nanoGPT row or no loss named: $(cat "$WORK/lean.md")"
expect_error "vs_fsdp2 unknown option" "unknown option '--rpeats'" "$REPO/bench/vs_fsdp2.sh" --rpeats 2
expect_error "vs_fsdp2 --repeats" "--repeats: a positive integer, got 'two'" "$REPO/bench/vs_fsdp2.sh" --repeats two

"$BIN/fsdp-bench-adamw" --n 1003 --threads 2 --steps 2 --warmup 1 >"$WORK/adamw.log" 2>&1 ||
  fail "fsdp-bench-adamw: $(tail -5 "$WORK/adamw.log")"
grep -q '^fused vs torch: ' "$WORK/adamw.log" || fail "fsdp-bench-adamw printed no ratio"
grep -Eq '^fsdp op by op \(kReference\) +[0-9.]+ +[0-9.]+x +0$' "$WORK/adamw.log" ||
  fail "fsdp-bench-adamw: op-by-op AdamW not equal to torch's: $(cat "$WORK/adamw.log")"
expect_error "bench-adamw --n 0" "--n: 0 is out of range" "$BIN/fsdp-bench-adamw" --n 0
expect_error "bench-adamw --threads" "--threads: 'two' is not an integer" "$BIN/fsdp-bench-adamw" --threads two
expect_error "bench-adamw unknown option" "unknown option --stesp" "$BIN/fsdp-bench-adamw" --stesp 3

"$BIN/fsdp-run" --backend gloo --nproc-per-node 2 "$BIN/fsdp-bench-comm" --elements 1002 \
  --repeats 2 --link-gbit 1 --in-flight 2 --busy-ms 1 >"$WORK/comm.log" 2>&1 ||
  fail "fsdp-bench-comm: $(tail -5 "$WORK/comm.log")"
grep -q ', 2 in flight, 1 ms busy$' "$WORK/comm.log" ||
  fail "fsdp-bench-comm did not take --in-flight and --busy-ms: $(cat "$WORK/comm.log")"
for c in all_gather reduce_scatter all_reduce; do
  grep -Eq "$c +median +[0-9.]+ ms .* got +[0-9]+% of it" "$WORK/comm.log" ||
    fail "fsdp-bench-comm printed no $c row: $(cat "$WORK/comm.log")"
done
expect_error "bench-comm --elements 7 over 2" "--elements 7 is not a multiple of the world size 2" \
  "$BIN/fsdp-run" --backend gloo --nproc-per-node 2 "$BIN/fsdp-bench-comm" --elements 7
expect_error "bench-comm unknown option" "unknown option --elems" "$BIN/fsdp-bench-comm" --elems 3
expect_error "bench-comm --in-flight 0" "--in-flight: 0 is out of range" "$BIN/fsdp-bench-comm" --in-flight 0
expect_error "bench-comm --busy-ms" "--busy-ms: -1 is out of range" "$BIN/fsdp-bench-comm" --busy-ms -1

expect_error "bench --steps 0" "--steps: 0 is out of range \[1, " "$BIN/fsdp-bench" --steps 0
expect_error "bench --allocator" "--allocator: fsdp or glibc" "$BIN/fsdp-bench" --allocator tc
expect_error "bench --model" "--model: 124m, large, xl, tiny, llama, llama-1b or llama-7b; got xxl" "$BIN/fsdp-bench" --model xxl
expect_error "bench --vocab" "--vocab: 1 is out of range" "$BIN/fsdp-bench" --vocab 1
expect_error "bench --layers" "--layers: 0 is out of range" "$BIN/fsdp-bench" --layers 0
expect_error "bench --lora" "--lora: 0 is out of range" "$BIN/fsdp-bench" --lora 0
expect_error "bench --peak-tflops" "--peak-tflops: 'x' is not a number" "$BIN/fsdp-bench" --peak-tflops x
expect_error "bench --compute-cpus alone" "--compute-cpus and --comm-cpus go together" \
  "$BIN/fsdp-bench" --compute-cpus 0
expect_error "bench --comm-cpus list" "--comm-cpus: 'x' is not an integer" \
  "$BIN/fsdp-bench" --compute-cpus 0 --comm-cpus 0-x
expect_error "bench --compute-cpus absent" "--compute-cpus 1023: cannot run a thread there" \
  "$BIN/fsdp-bench" --compute-cpus 1023 --comm-cpus 0
expect_error "bench --device" "--device: cpu or cuda; got gpu" "$BIN/fsdp-bench" --device gpu
expect_error "bench --variants" "joined by '+'; got prefetch+offlaod" "$BIN/fsdp-bench" --variants prefetch+offlaod
expect_error "bench --root-chunks" "--root-chunks: '2.5' is not an integer" "$BIN/fsdp-bench" --root-chunks 2.5
expect_error "bench whole+onepiece" "whole turns the split off" "$BIN/fsdp-bench" --variants prefetch+whole+onepiece
expect_error "bench unknown option" "unknown option --stpes" "$BIN/fsdp-bench" --stpes 3
expect_error "bench missing value" "missing value after --seq" "$BIN/fsdp-bench" --seq
expect_error "bench strategy" "FULL" "$BIN/fsdp-bench" --strategies FULL
expect_error "plan without num_processes" "num_processes is not set" "$BIN/fsdp-plan"
expect_error "plan machines" "must be a multiple of num_machines" "$BIN/fsdp-plan" \
  --num_processes 3 --num_machines 2
expect_error "plan bad key" "no_such_key" "$BIN/fsdp-plan" --num_processes 2 --no_such_key 1
expect_error "plan --gpu-memory on cpu" "config trains on the cpu (train.device)" \
  "$BIN/fsdp-plan" --num_processes 2 --gpu-memory 80
expect_error "plan --gpu-memory 0" "--gpu-memory: 0 is out of range" \
  "$BIN/fsdp-plan" --num_processes 2 --device cuda --gpu-memory 0
expect_error "plan --gpu-memory missing" "--gpu-memory: missing value" \
  "$BIN/fsdp-plan" --num_processes 2 --device cuda --gpu-memory

expect_error "plan --profile and --tflops" "give --profile or --tflops, not both" \
  "$BIN/fsdp-plan" --num_processes 2 --profile 1 --tflops 1
expect_error "plan --backend" "--backend: gloo, mpi or nccl, got 'ucx'" \
  "$BIN/fsdp-plan" --num_processes 2 --tflops 1 --backend ucx
expect_error "plan --progress" "--progress: on or off, got 'maybe'" \
  "$BIN/fsdp-plan" --num_processes 2 --tflops 1 --progress maybe
expect_error "plan --inter-gbit 0" "--inter-gbit: 0 is out of range" \
  "$BIN/fsdp-plan" --num_processes 2 --tflops 1 --inter-gbit 0
expect_error "plan --cores-per-rank" "--cores-per-rank: -1 is out of range" \
  "$BIN/fsdp-plan" --num_processes 2 --tflops 1 --cores-per-rank -1
expect_error "plan --inter-cpu-gbit" "--inter-cpu-gbit: 'x' is not a number" \
  "$BIN/fsdp-plan" --num_processes 2 --tflops 1 --inter-cpu-gbit x
expect_error "bench --intra-cpu-gbit" "--intra-cpu-gbit: 'fast' is not a number" \
  "$BIN/fsdp-bench" --intra-cpu-gbit fast
expect_error "bench one link" "needs both --intra-gbit and --inter-gbit" \
  "$BIN/fsdp-bench" --intra-gbit 10

# The time model (docs/plan.md, "Step time"): from a rate, and from compute measured here, a step
# time for the configured strategy and one per strategy beside its memory.
"$BIN/fsdp-plan" --num_processes 4 --num_machines 2 --tflops 0.05 --inter-gbit 1 \
  >"$WORK/plan" 2>&1 || fail "fsdp-plan --tflops: $(cat "$WORK/plan")"
grep -q '^time per optimizer step (compute: 0.05 TFLOP/s' "$WORK/plan" &&
  grep -Eq '^  step +[0-9.]+ s$' "$WORK/plan" &&
  grep -Eq '^HYBRID_SHARD( +[0-9.]+){4} +yes( +[0-9.]+){3}$' "$WORK/plan" ||
  fail "fsdp-plan --tflops: no step time: $(cat "$WORK/plan")"
"$BIN/fsdp-plan" --num_processes 2 --profile 1 >"$WORK/plan" 2>&1 ||
  fail "fsdp-plan --profile: $(cat "$WORK/plan")"
grep -q 'compute: measured here, one rank, median of 1 steps' "$WORK/plan" ||
  fail "fsdp-plan --profile: no measured step time: $(cat "$WORK/plan")"
# The CPU bound: on the CPU by default (this machine's cores over the host's ranks), with the
# collectives' core-seconds; asked for no cores, or on a GPU, none.
grep -Eq '^  CPU bound: collectives take [0-9.]+ core-seconds a rank \(a core moves 14 Gbit/s within a host, 8.7 between hosts\), [0-9.]+ cores a rank: step >= [0-9.]+ s' "$WORK/plan" ||
  fail "fsdp-plan: no CPU bound by default: $(cat "$WORK/plan")"
"$BIN/fsdp-plan" --num_processes 4 --num_machines 2 --tflops 0.05 --inter-gbit 1 \
  --cores-per-rank 0 >"$WORK/plan" 2>&1 || fail "fsdp-plan --cores-per-rank 0: $(cat "$WORK/plan")"
! grep -q 'CPU bound' "$WORK/plan" || fail "fsdp-plan --cores-per-rank 0: a CPU bound: $(cat "$WORK/plan")"
"$BIN/fsdp-plan" --num_processes 2 --device cuda --gpu-memory 80 --tflops 400 >"$WORK/plan" 2>&1 ||
  fail "fsdp-plan --device cuda --tflops: $(cat "$WORK/plan")"
! grep -q 'CPU bound' "$WORK/plan" || fail "fsdp-plan on a GPU: a CPU bound: $(cat "$WORK/plan")"
# Collectives that move only while waited on (MPI without its progress thread) hide nothing.
"$BIN/fsdp-plan" --num_processes 2 --tflops 0.05 --backend mpi --progress off >"$WORK/plan" 2>&1 ||
  fail "fsdp-plan --progress off: $(cat "$WORK/plan")"
grep -q 'collectives move only when waited on' "$WORK/plan" ||
  fail "fsdp-plan --progress off: not said: $(cat "$WORK/plan")"
exposed=$(awk '/^  exposed communication/ {print $3}' "$WORK/plan")
in_collectives=$(awk '/^  in collectives/ {print $3}' "$WORK/plan")
[[ -n $exposed && $exposed == "$in_collectives" ]] ||
  fail "fsdp-plan --progress off: exposed $exposed, not every collective ($in_collectives)"

# A GPU job is planned from any machine: the device part against the GPU's memory (given, or
# the visible GPU's), the offloaded model state against host memory.
plan_gpu() {
  "$BIN/fsdp-plan" --num_processes 2 --device cuda "$@" >"$WORK/plan" 2>&1 ||
    fail "fsdp-plan --device cuda $*: $(cat "$WORK/plan")"
}
plan_gpu --gpu-memory 80
grep -q 'a GPU: 81920 MiB, from --gpu-memory' "$WORK/plan" || fail "plan: no GPU budget: $(cat "$WORK/plan")"
grep -Eq '^FULL_SHARD( +[0-9.]+){5} +yes$' "$WORK/plan" || fail "plan: no on_gpu column: $(cat "$WORK/plan")"
plan_gpu --gpu-memory 0.01 --fsdp_config.fsdp_offload_params true
grep -Eq '^FULL_SHARD( +[0-9.]+){5} +no$' "$WORK/plan" || fail "plan: 10 MiB GPU fits: $(cat "$WORK/plan")"
plan_gpu
grep -Eq 'a GPU: (not known, none is visible here|[0-9]+ MiB, from cuda:0 here)' "$WORK/plan" ||
  fail "plan: GPU budget neither given nor found: $(cat "$WORK/plan")"

# Every numeric flag of every tool goes through one checked parser with a range (util/number_flag.h):
# trailing text is an error, not dropped, and a number past the range is an error, not wrapped.
# Each exits 2 naming the flag before doing any work (reshard writes nothing).
for bad in 3abc 99999999999; do
  expect_error "ckpt reshard --world-size $bad" "fsdp-ckpt: --world-size: .*$bad" \
    "$BIN/fsdp-ckpt" reshard "$WORK/no-checkpoint" "$WORK/resharded" --world-size "$bad"
  expect_error "ckpt reshard --world-size=$bad" "fsdp-ckpt: --world-size: .*$bad" \
    "$BIN/fsdp-ckpt" reshard "$WORK/no-checkpoint" "$WORK/resharded" "--world-size=$bad"
  [[ ! -e $WORK/resharded ]] || fail "reshard --world-size $bad wrote $WORK/resharded"
  expect_error "demo --nproc $bad" "--nproc: .*$bad" "$BIN/fsdp-demo" --nproc "$bad"
  expect_error "demo --steps $bad" "--steps: .*$bad" "$BIN/fsdp-demo" --steps "$bad"
  expect_error "bench --seq $bad" "--seq: .*$bad" "$BIN/fsdp-bench" --seq "$bad"
  expect_error "bench --nproc $bad" "--nproc: .*$bad" "$BIN/fsdp-bench" --nproc "$bad"
  expect_error "bench-adamw --steps $bad" "--steps: .*$bad" "$BIN/fsdp-bench-adamw" --steps "$bad"
  expect_error "bench-comm --repeats $bad" "--repeats: .*$bad" "$BIN/fsdp-bench-comm" --repeats "$bad"
  expect_error "train sample --top-k $bad" "--top-k: .*$bad" "$BIN/fsdp-train" sample --top-k "$bad"
  expect_error "run --nproc-per-node $bad" "--nproc-per-node: .*$bad" \
    "$BIN/fsdp-run" --nproc-per-node "$bad" true
done
"$BIN/fsdp-ckpt" reshard "$WORK/no-checkpoint" "$WORK/resharded" --world-size 3abc >/dev/null 2>&1
[[ $? == 2 ]] || fail "fsdp-ckpt reshard --world-size 3abc: exit code not 2 (a usage error)"

# Every tool prints its usage for --help and -h, exits 0, and starts nothing.
for tool in fsdp-bench fsdp-bench-adamw fsdp-bench-comm fsdp-demo fsdp-plan fsdp-ckpt fsdp-run \
  fsdp-train; do
  for flag in --help -h; do
    out=$(timeout 20 "$BIN/$tool" "$flag" 2>&1)
    rc=$?
    ((rc == 0)) && grep -qi "usage" <<<"$out" || fail "$tool $flag: exit $rc, no usage: $(head -2 <<<"$out")"
  done
done
echo "ok: every tool prints its usage for --help and -h"

if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "tools smoke: all checks passed"
