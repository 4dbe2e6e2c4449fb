#!/usr/bin/env bash
# Every check, in the order CI runs them: this script *is* CI (.ci/run calls
# it). Installs what it needs first, the on-request Gemma 3 checkpoint too:
# its llama.cpp reference test and its browser test need it.
set -euo pipefail
cd "$(dirname "$0")/.."
# CI builds from nothing once: incremental compilation would only write
# caches nobody reads (a local run keeps cargo's default).
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi
# Each step's header says how long the run has taken so far, and the last
# line sums up the steps: CI's log keeps only its tail, and its 90 minutes
# are this project's tightest budget.
started=$SECONDS
steps=()
step() {
  local now=$((SECONDS - started))
  [ ${#steps[@]} -gt 0 ] && steps[-1]+=" $((now - last)) s"
  last=$now
  steps+=("${1%% (*}:")
  printf '\n\033[1m== %s\033[0m (at %dm%02ds)\n' "$*" $((now / 60)) $((now % 60))
}
summary() {
  step done >/dev/null
  local IFS='|'
  printf '\ntest.sh, seconds a step: %s (%d s in all)\n' "${steps[*]::${#steps[@]}-1}" $((SECONDS - started))
}
trap summary EXIT

step "setup (tools and assets; seconds where they are installed already)"
scripts/setup.sh --with-gemma
source scripts/env.sh

step "format"
cargo fmt --all -- --check

step "tool tests (the static server the e2e tests and benches use)"
(cd tools && node --test)

step "clippy native"
cargo clippy --workspace --all-targets -- -D warnings

step "clippy wasm32 (std::time::Instant banned)"
CLIPPY_CONF_DIR=scripts/clippy_wasm cargo clippy --target wasm32-unknown-unknown -p workbench -p kv -p router -p serving -p bench -p wire -p router-worker --all-targets -- -D warnings

# The page and the worker have no native tests (their tests run in the
# browser below); excluding them keeps Leptos and web-sys out of this
# build. Clippy above still lints them natively.
step "native tests (unit, property, CLI, router against llama.cpp, bench-decide)"
cargo test --workspace --exclude workbench --exclude router-worker

# In the release profile: the profile the single-thread worker ships in,
# so the site build below reuses this build's candle and tokenizers
# instead of compiling them for wasm32 a second time.
step "wasm tests in headless Chromium (page bindings; the router core)"
cargo test --release --target wasm32-unknown-unknown -p workbench --test web
cargo test --release --target wasm32-unknown-unknown -p router --test wasm
# The router core again with relaxed SIMD, as the threads build compiles
# it (without its atomics, which need nightly): its two integer kernels
# are checked against each other and the definition at their largest sums.
# A build variant of its own (about 3 minutes on 2 cores): the page runs
# these kernels by default, and nothing else tests them exactly.
RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd" CARGO_TARGET_DIR=target/relaxed \
  cargo test --release --target wasm32-unknown-unknown -p router --test wasm

step "release build of the site (trunk: calculator, then router page + worker; Gemma served on request)"
scripts/build-site.sh --with-gemma

step "end-to-end tests in headless Chromium"
npm --prefix tests/e2e test
