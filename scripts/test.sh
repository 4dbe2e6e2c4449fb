#!/usr/bin/env bash
# Every check, in the order CI runs them: this script *is* CI (.ci/run calls
# it). Installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
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

step "release build of the site (trunk: calculator, then router page + worker)"
scripts/build-site.sh

step "end-to-end tests in headless Chromium"
npm --prefix tests/e2e test
