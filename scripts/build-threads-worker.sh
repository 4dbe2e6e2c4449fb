#!/usr/bin/env bash
# Builds the router worker's threads variant into pkg/router/threads/: wasm
# threads (shared memory, atomics) and relaxed-SIMD fused multiply–add. The
# page picks it when it is cross-origin isolated and the browser validates
# relaxed SIMD; otherwise it runs the single-thread SIMD128 worker Trunk builds.
#
# Not through Trunk: Trunk builds one variant of a binary per page, and this
# one needs the nightly toolchain and `-Z build-std` (the standard library
# rebuilt with atomics), with its own target directory under target/ so the
# two variants do not evict each other's artefacts.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
out=pkg/router/threads
# The memory is shared (imported, so helpers can be given it) and may grow to
# 4 GiB, the most wasm32 can address: a larger user-picked checkpoint is then
# limited by the browser, not by this build. The TLS exports let wasm-bindgen
# give each helper thread its own thread-locals and stack.
link="--shared-memory --import-memory --max-memory=4294967296 --export=__wasm_init_tls --export=__tls_size --export=__tls_align --export=__tls_base"
RUSTFLAGS="-C target-feature=+atomics,+bulk-memory,+mutable-globals,+simd128,+relaxed-simd $(printf -- '-C link-arg=%s ' $link)" \
  cargo +nightly build -q --release -Z build-std=std,panic_abort --target wasm32-unknown-unknown \
  --target-dir target/threads -p router-worker --bin router_worker
rm -rf "$out" && mkdir -p "$out"
wasm-bindgen --target no-modules --no-typescript --out-dir "$out" target/threads/wasm32-unknown-unknown/release/router_worker.wasm
# The same loader shim Trunk writes for the single-thread worker, and the
# helper threads' script.
printf 'importScripts("./router_worker.js");wasm_bindgen({ module_or_path: "./router_worker_bg.wasm" });' > "$out/router_worker_loader.js"
cp crates/router-worker/js/router_helper.js "$out/"
