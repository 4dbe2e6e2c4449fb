#!/usr/bin/env bash
# The peer bench: our browser decide (threads build isolated, single-thread
# build not isolated) and native bench-decide, against wllama (llama.cpp in
# wasm) and native llama.cpp (node-llama-cpp's prebuilt binaries) on Q4_0,
# Q4_1 and Q8_0 copies of the same weights, at 1 thread and every core,
# flash attention on and off, in one run; prints every configuration
# and the ratios against each peer's best, and writes reports/peers.json.
# Not part of scripts/test.sh: it takes an hour or more (the peers are slow;
# 45 min here with wllama's flash attention at one setting).
#   scripts/bench-peers.sh [--lengths 15,256,1024] [--precisions f32,int8] [--iterations 3]
#     [--warmup 1] [--peer-iterations 2] [--peer-warmup 0] [--peer-quants Q4_0,Q4_1,Q8_0] [--peer-flash on,off]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
scripts/build-site.sh
# Only node-llama-cpp's CPU binaries for linux-x64 (its other platforms' and
# the CUDA/Vulkan builds are optional dependencies: hundreds of megabytes),
# and never a download or compile of llama.cpp by its postinstall.
NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --prefix tests/peers --omit=optional --no-audit --no-fund --loglevel=error
cargo build --release -q -p bench-cli
exec node tests/peers/peers.mjs "$@"
