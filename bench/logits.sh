#!/usr/bin/env bash
# The logits' share of memory, fused (train.fused_loss, the default) against whole, per
# vocabulary: fsdp-bench's `prefetch` and `prefetch+unfused` variants of one model at GPT-2's
# (50,257), Llama 3's (128,256) and Qwen's (151,936) vocabularies, in one run each on the same
# ranks, and a Markdown table of the plan's logits share, the peaks of live tensors and of the
# resident set (above the process before the model was built) and tokens/s, fused beside whole.
#
# Usage: bench/logits.sh [--bin build/bin] [--out DIR] [--model 124m|llama|...] [--seq 512]
#                        [--batch 2] [--steps 2] [--nproc 2] [--dtype fp32|bf16]
#                        [--vocabs 50257,128256,151936]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/bin OUT=bench/results/logits MODEL=124m SEQ=512 BATCH=2 STEPS=2 NPROC=2 DTYPE=fp32
VOCABS=50257,128256,151936
while (($#)); do
  case $1 in
    --bin | --out | --model | --seq | --batch | --steps | --nproc | --dtype | --vocabs)
      [[ $# -ge 2 ]] || { echo "logits.sh: $1 needs a value" >&2; exit 2; }
      declare "$(tr 'a-z-' 'A-Z_' <<<"${1#--}")=$2"
      shift 2
      ;;
    *) echo "logits.sh: unknown option '$1' (see the usage in $0)" >&2; exit 2 ;;
  esac
done
[[ -x $BIN/fsdp-bench && -x $BIN/fsdp-run ]] || { echo "logits.sh: no fsdp-bench or fsdp-run in $BIN" >&2; exit 2; }
mkdir -p "$OUT"
export OMP_NUM_THREADS=1
source scripts/env.sh
{
  date -u
  lscpu | grep -E 'Model name|^CPU\(s\)' | sed 's/  */ /g'
} >"$OUT/machine.txt"
for vocab in ${VOCABS//,/ }; do
  "$BIN/fsdp-run" --backend gloo --nproc-per-node "$NPROC" "$BIN/fsdp-bench" --model "$MODEL" \
    --vocab "$vocab" --seq "$SEQ" --batch "$BATCH" --steps "$STEPS" --dtype "$DTYPE" \
    --strategies FULL_SHARD --variants prefetch,prefetch+unfused --json "$OUT/vocab-$vocab.json" \
    >"$OUT/vocab-$vocab.log" 2>&1 || { echo "logits.sh: vocabulary $vocab failed:"; tail -n 20 "$OUT/vocab-$vocab.log"; exit 1; } >&2
done
python3 - "$OUT" <<'PY' | tee "$OUT/table.md"
import glob, json, os, sys
MIB = 1024.0**2
rows = []
for path in glob.glob(os.path.join(sys.argv[1], "vocab-*.json")):
    records = {r["fused_loss"]: r for r in json.load(open(path))}
    rows.append((records[True]["vocab_size"], records[True], records[False]))
first = rows[0][1]
print(f"{first['model'].split(' (')[0]}, {first['dtype']}, {first['world_size']} ranks x "
      f"{first['threads_per_rank']} thread, batch {first['batch_per_rank']} x {first['seq']} "
      f"per rank, FULL_SHARD with prefetch; MiB per rank, fused / whole\n")
print("| vocabulary | logits in plan | plan total | live tensors (peak) | resident (peak) | saved (resident) | tokens/s |")
print("|---|---|---|---|---|---|---|")
for vocab, f, w in sorted(rows, key=lambda r: r[0]):
    pair = lambda get: f"{get(f) / MIB:.0f} / {get(w) / MIB:.0f}"
    print(f"| {vocab:,} | {pair(lambda r: r['plan']['logits_bytes'])} | "
          f"{pair(lambda r: r['plan']['total_bytes'])} | {pair(lambda r: r['peak_tensor_bytes'])} | "
          f"{pair(lambda r: r['peak_rss_bytes'])} | "
          f"{(w['peak_rss_bytes'] - f['peak_rss_bytes']) / MIB:.0f} | "
          f"{f['tokens_per_second']:.1f} / {w['tokens_per_second']:.1f} |")
PY
