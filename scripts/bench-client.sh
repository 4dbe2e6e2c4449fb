#!/usr/bin/env bash
# The client boundary against a real serving engine, for the record: the
# serving run's trace replayed (openai-replay) against this workbench's
# OpenAI-compatible endpoint (openai-serve) and against llama.cpp's
# OpenAI-compatible server (llama-cpp-python's, from PyPI) on Q4_0, Q4_1
# and Q8_0 copies of the same weights (made by llama.cpp's own
# llama_model_quantize, as the peer bench makes them), flash attention on, every core, in one run,
# endpoints alternating at each rate. Writes reports/client.json.
#
# Dev-only, like scripts/bench-peers.sh: pip compiles llama.cpp for the
# peer (about 7 minutes on 2 cores), so it is never part of
# scripts/test.sh. Everything it installs goes under target/peers.
#   scripts/bench-client.sh [openai-replay flags, e.g. --rates 1,2 --duration 20]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh

PEERS=target/peers
LLAMA_CPP_PYTHON=0.3.16
mkdir -p "$PEERS/models" reports
if ! "$PEERS/venv/bin/python" -c "import llama_cpp, llama_cpp.server; assert llama_cpp.__version__ == '$LLAMA_CPP_PYTHON'" 2>/dev/null; then
  echo "bench-client: installing llama-cpp-python[server]==$LLAMA_CPP_PYTHON (compiles llama.cpp)"
  python3 -m venv "$PEERS/venv"
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$PEERS/venv/bin/pip" install -q "llama-cpp-python[server]==$LLAMA_CPP_PYTHON"
fi
# The peer bench's quantizer (llama.cpp's llama_model_quantize from
# node-llama-cpp's prebuilt libllama): the same Q4_0 and Q8_0 copies.
NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --prefix tests/peers --omit=optional --no-audit --no-fund --loglevel=error
SOURCE=assets/SmolLM2-135M-Instruct.Q4_1.gguf
for quant in Q4_0 Q8_0; do
  copy="$PEERS/models/SmolLM2-135M-Instruct.$quant.gguf"
  [ -f "$copy" ] || python3 tests/peers/quantize.py "$SOURCE" "$copy" "$quant"
done
cargo build --release -q -p gateway

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
threads=$(nproc)
target/release/openai-serve --precision int8 --port 18080 --model-name smollm2 >"$PEERS/openai-serve.log" 2>&1 &
pids+=($!)
urls=(--url http://127.0.0.1:18080)
port=18081
for model in "$PEERS/models/SmolLM2-135M-Instruct.Q4_0.gguf" "$SOURCE" "$PEERS/models/SmolLM2-135M-Instruct.Q8_0.gguf"; do
  # One request at a time is this server's design; interrupt_requests off
  # lets a request wait its turn instead of cutting off the one streaming.
  "$PEERS/venv/bin/python" -m llama_cpp.server --model "$model" --n_ctx 8192 --n_threads "$threads" --n_threads_batch "$threads" \
    --flash_attn true --interrupt_requests false --host 127.0.0.1 --port $port >"$PEERS/llama-server-$port.log" 2>&1 &
  pids+=($!)
  urls+=(--url http://127.0.0.1:$port)
  port=$((port + 1))
done
for url in $(printf '%s\n' "${urls[@]}" | grep http); do
  for _ in $(seq 120); do curl -sf "$url/v1/models" >/dev/null && break; sleep 0.5; done
done
echo "bench-client: idle servers wait on their sockets; the replay runs one endpoint at a time"
target/release/openai-replay "${urls[@]}" --out reports/client.json "$@"
