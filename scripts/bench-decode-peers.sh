#!/usr/bin/env bash
# The decode peer bench, natively: our engine's decode (router-generate
# --decode-speed, int8 and f32, at 1 thread and every core) against native
# llama.cpp (node-llama-cpp's prebuilt binaries) on Q4_0, Q4_1 and Q8_0
# copies of the same weights, every thread count and flash attention on and
# off, in alternating rounds; prints each row with the ratio to llama.cpp's
# best configuration at the same thread count and writes
# reports/decode-peers.json. Dev-only, not part of scripts/test.sh (about
# 10 minutes with two rounds on a 2-vCPU machine).
#   scripts/bench-decode-peers.sh [--rounds 2] [--precisions int8,f32] [--quants Q4_0,Q4_1,Q8_0]
#     [--flash on,off] [--contexts 256,1024] [--batches 1,4,8,16] [--batch-context 256] [--steps 32]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
# Only node-llama-cpp's CPU binaries for linux-x64, never a download or a
# compile of llama.cpp by its postinstall (as scripts/bench-peers.sh).
NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --prefix tests/peers --omit=optional --no-audit --no-fund --loglevel=error
cargo build --release -q -p bench-cli
exec node tests/peers/decode-peers.mjs "$@"
