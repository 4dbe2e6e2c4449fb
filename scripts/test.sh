#!/usr/bin/env bash
# Every check, in the order CI runs them: this script *is* CI (.ci/run calls
# it). Installs what it needs first, the on-request Gemma 3 checkpoint too:
# its llama.cpp reference test and its browser test need it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --with-gemma
source scripts/env.sh
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "format"
cargo fmt --all -- --check

step "clippy (native)"
cargo clippy --workspace --all-targets -- -D warnings

step "clippy (wasm32, std::time::Instant banned)"
CLIPPY_CONF_DIR=scripts/clippy_wasm cargo clippy --target wasm32-unknown-unknown -p workbench -p kv -p router -p bench -p wire -p router-worker --all-targets -- -D warnings

step "native tests (unit, property, CLI, router against llama.cpp, bench-decide)"
cargo test --workspace

step "wasm tests in headless Chromium (page bindings; the router core)"
cargo test --target wasm32-unknown-unknown -p workbench --test web
cargo test --target wasm32-unknown-unknown -p router --test wasm

step "release build of the site (trunk: calculator, then router page + worker; Gemma served on request)"
scripts/build-site.sh --with-gemma

step "end-to-end tests in headless Chromium"
npm --prefix tests/e2e test
