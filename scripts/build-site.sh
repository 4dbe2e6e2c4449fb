#!/usr/bin/env bash
# Builds the site into pkg/ in release mode: the calculator (index.html) at the
# root and the router page (router/index.html, with its worker and the bundled
# checkpoint) under pkg/router/. Two Trunk runs, because each page is its own
# bundle: the calculator and its widget never download the router's code.
# The router page is built second: Trunk replaces its whole dist folder;
# the threads worker goes into it last.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
[ -f assets/SmolLM2-135M-Instruct.Q4_1.gguf ] || scripts/fetch-assets.sh
trunk build --release
trunk build router/index.html --release --dist pkg/router
# The router worker's threads variant, beside the single-thread one.
scripts/build-threads-worker.sh
