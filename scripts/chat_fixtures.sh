#!/usr/bin/env bash
# (Re)makes tests/data/chat/goldens.json: the chat templates of assets/chat_templates (from
# scripts/fetch_assets.sh) rendered by transformers' own render_jinja_template, inside the Debian
# sid chroot (scripts/chroot.sh, FSDP_CHROOT_SUITE=sid: transformers 5.x and jinja2 3.1 from
# Debian's packages). The file is committed: CI compares our engine with it without Python. Run it
# by hand after changing tests/data/chat/make_chat_fixtures.py or the pinned package, and commit.
# Needs root (or sudo). Usage: scripts/chat_fixtures.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PY_PACKAGES=(python3-transformers python3-jinja2)

if [[ "${1:-}" != "--inside" ]]; then
  scripts/fetch_assets.sh >/dev/null
  FSDP_CHROOT_SUITE=sid scripts/chroot.sh scripts/chat_fixtures.sh --inside
  exit 0
fi

missing=()
for p in "${PY_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "chat_fixtures: installing ${missing[*]}"
  apt-get -o Acquire::Check-Valid-Until=false update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
dpkg-query -W -f='  ${Package} ${Version}\n' "${PY_PACKAGES[@]}"
export PYTHONHASHSEED=0 HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 HF_HOME=/tmp/chat_fixtures_home
python3 tests/data/chat/make_chat_fixtures.py
