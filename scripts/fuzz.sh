#!/usr/bin/env bash
# The fuzz targets (fuzz/fuzz_*.cpp; docs/hardening.md) on libFuzzer, with AddressSanitizer and
# UndefinedBehaviorSanitizer: installs clang, builds the targets into build-fuzz/, then runs each
# from its seed corpus for a bounded time.
#   scripts/fuzz.sh [--time SECONDS] [TARGET...]    default: 60 s for each of every target
# A crash, a hang (one input running over 10 s), an allocation over 512 MiB or a broken property
# fails the target: its input is copied into fuzz/regressions/<target>/, which CTest replays from
# then on (fuzz_replay_<target>), and the script exits 1 after running the other targets.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=60
targets=()
while (($#)); do
  case $1 in
    --time)
      [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --time needs a number of seconds, got '${2:-}'" >&2; exit 2; }
      seconds=$2
      shift 2
      ;;
    -h | --help) sed -n '2,8p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=()
for f in fuzz/fuzz_*.cpp; do
  f=${f#fuzz/fuzz_}
  all+=("${f%.cpp}")
done
((${#targets[@]})) || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz.sh: no target '$t' (there are: ${all[*]})" >&2; exit 2; }
done

EXTRA_PACKAGES="clang libclang-rt-14-dev" scripts/setup.sh --no-build
scripts/fetch_assets.sh >/dev/null  # tokenizer_text fuzzes GPT-2's real vocabulary
source scripts/env.sh
build=build-fuzz
if [[ ! -f $build/build.ninja ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFSDP_FUZZ=ON -DFSDP_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$build" -j"$(nproc)"

failed=()
for t in "${targets[@]}"; do
  bin=$build/bin/fuzz_$t
  work=$build/corpus/$t crashes=$build/crashes/$t log=$build/fuzz_$t.log
  rm -rf "$crashes"
  mkdir -p "$work" "$crashes"
  # The JSON targets get a dictionary of JSON's tokens and bracket runs, and inputs up to 256 KiB:
  # enough to nest past any stack (100,000 levels crashed the parsers' error messages once).
  extra=()
  case $t in
    ckpt_metadata | safetensors | tokenizer_json) extra=(-dict=fuzz/dict/json.dict -max_len=262144) ;;
  esac
  # New inputs go to the scratch corpus in build-fuzz/; the seeds in fuzz/corpus stay as they are.
  if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 \
    -print_final_stats=1 "${extra[@]}" -artifact_prefix="$crashes/" "$work" "fuzz/corpus/$t" \
    >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz_$t: ${seconds}s, ${runs:-?} inputs, no failure"
  else
    failed+=("$t")
    mkdir -p "fuzz/regressions/$t"
    cp "$crashes"/* "fuzz/regressions/$t/" 2>/dev/null || true
    echo "fuzz_$t: FAILED; the input is in fuzz/regressions/$t/, the log in $log:"
    grep -m1 -B2 -A25 -E "ERROR: |fuzz property broken|terminate called" "$log" || tail -30 "$log"
  fi
done
((${#failed[@]} == 0)) || { echo "fuzz.sh: failed: ${failed[*]}"; exit 1; }
