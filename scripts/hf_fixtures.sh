#!/usr/bin/env bash
# (Re)makes every Hugging Face fixture under tests/data/hf/: tokenizers of five families
# (GPT-2 byte-level, Llama 3, Qwen2, Llama 2 SentencePiece-style BPE, Metaspace) and of every
# other pipeline kind fsdp.cpp reads (SmolLM2's Digits, an o200k Split, NFKC/NFD/NFKD with
# Lowercase, Strip and regex Replace, Whitespace, WhitespaceSplit, Punctuation, Split behaviours,
# RobertaProcessing, Metaspace's prepend schemes) trained on the bundled corpus (assets/sotu), and
# tiny random GPT-2 / Llama / Qwen2 / Mistral checkpoints, each with a reference.json of what the
# real `tokenizers` and `transformers` compute on them. The files are committed: CI compares our
# C++ tokenizer and checkpoint loading against them without Python. CI does not run this; run it
# by hand after changing tests/hf/make_fixtures.py, and commit the result.
#
# It works inside a Debian sid chroot (scripts/chroot.sh, FSDP_CHROOT_SUITE=sid), the only place
# these machines get transformers 5.x, tokenizers and torch from (Debian's python3-* packages;
# PyPI is out of reach). The chroot is made once (a few minutes) and cached; the python packages
# are installed in it here when missing.
# Needs root (or sudo) and the corpus (scripts/fetch_assets.sh).
# Usage: scripts/hf_fixtures.sh [make_fixtures.py options, e.g. --only tokenizers]
set -euo pipefail
cd "$(dirname "$0")/.."

PY_PACKAGES=(python3-transformers python3-tokenizers python3-torch python3-safetensors python3-numpy)

if [[ "${1:-}" != "--inside" ]]; then
  [[ -n "$(ls assets/sotu/*.txt 2>/dev/null)" ]] || {
    echo "hf_fixtures: assets/sotu/*.txt missing: run scripts/fetch_assets.sh first" >&2
    exit 1
  }
  start=$SECONDS
  FSDP_CHROOT_SUITE=sid scripts/chroot.sh scripts/hf_fixtures.sh --inside "$@"
  echo "hf_fixtures: done in $((SECONDS - start)) s; written:"
  find tests/data/hf -type f | sort | xargs ls -l | awk '{ printf "  %9d  %s\n", $5, $NF }'
  du -sh tests/data/hf
  exit 0
fi
shift

# Inside the sid root.
missing=()
for p in "${PY_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "hf_fixtures: installing ${missing[*]}"
  # The sid mirror may be a dated snapshot whose Release files have expired.
  apt-get -o Acquire::Check-Valid-Until=false update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "hf_fixtures: Debian packages used:"
dpkg-query -W -f='  ${Package} ${Version}\n' "${PY_PACKAGES[@]}" python3
# One thread and a fixed hash seed: the same files on every run.
export PYTHONHASHSEED=0 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 HF_HOME=/tmp/hf_fixtures_home
python3 tests/hf/make_fixtures.py "$@"
