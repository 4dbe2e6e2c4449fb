#!/usr/bin/env bash
# The peer bench (issue 5): our browser decide, wllama (llama.cpp in wasm) on
# the same GGUF and texts, our native bench-decide and the GEMM probes, in one
# run; prints the side-by-side table and writes reports/peers.json.
# Not part of scripts/test.sh: it takes tens of minutes (the peer is slow).
#   scripts/bench-peers.sh [--iterations 5] [--warmup 1] [--peer-iterations 3] [--peer-warmup 1]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
scripts/build-site.sh
npm ci --prefix tests/peers --no-audit --no-fund --loglevel=error
cargo build --release -q -p bench-cli
exec node tests/peers/peers.mjs "$@"
