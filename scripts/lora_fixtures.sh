#!/usr/bin/env bash
# (Re)makes tests/data/hf/lora/: PEFT's LoRA goldens on the tiny model fixtures (adapter folders,
# loss, gradients, logits, greedy tokens, merged weights; tests/hf/make_lora_fixtures.py). PEFT is
# not packaged in Debian: its source (huggingface/peft's src/, pure Python) must be at PEFT_SRC
# (default build/peft/src, a git-ignored folder), on PYTHONPATH inside the sid chroot beside
# Debian's transformers 5.12 and torch 2.14 (scripts/chroot.sh, as scripts/hf_fixtures.sh uses it).
# The files are committed; CI does not run this. Needs root (or sudo).
# Usage: scripts/lora_fixtures.sh [family ...]
set -euo pipefail
cd "$(dirname "$0")/.."
PEFT_SRC=${PEFT_SRC:-build/peft/src}
PY_PACKAGES=(python3-transformers python3-torch python3-safetensors python3-accelerate
  python3-huggingface-hub python3-psutil python3-yaml python3-tqdm python3-packaging)

if [[ "${1:-}" != "--inside" ]]; then
  [[ -f $PEFT_SRC/peft/__init__.py ]] || {
    echo "lora_fixtures: no PEFT source at $PEFT_SRC (huggingface/peft's src/)" >&2
    exit 1
  }
  FSDP_CHROOT_SUITE=sid scripts/chroot.sh env PEFT_SRC="$PEFT_SRC" scripts/lora_fixtures.sh --inside "$@"
  exit 0
fi
shift
missing=()
for p in "${PY_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get -o Acquire::Check-Valid-Until=false update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
export PYTHONPATH=$PWD/$PEFT_SRC PYTHONHASHSEED=0 OMP_NUM_THREADS=1
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 HF_HOME=/tmp/lora_fixtures_home
python3 -c 'import peft, transformers, torch; print("peft", peft.__version__, "transformers", transformers.__version__, "torch", torch.__version__)'
python3 tests/hf/make_lora_fixtures.py "$@"
