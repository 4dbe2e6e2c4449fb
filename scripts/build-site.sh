#!/usr/bin/env bash
# Builds the site into pkg/ in release mode: the calculator (index.html) at the
# root and the router page (router/index.html, with its worker and the bundled
# checkpoint) under pkg/router/. Two Trunk runs, because each page is its own
# bundle: the calculator and its widget never download the router's code.
# The router page is built second: Trunk replaces its whole dist folder;
# the threads worker goes into it last.
#
# --with-gemma also serves the on-request checkpoint (Gemma 3 270M, Gemma
# terms; fetched by scripts/fetch-assets.sh --gemma) at
# pkg/router/models/gemma-3-270m-q4_k_m.gguf. It is never in the page's first
# load: the page fetches it only when the user presses its button. Without
# the flag the manifest still lists it and the button says the site does
# not serve it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
WITH_GEMMA=0
for arg in "$@"; do
  case "$arg" in
    --with-gemma) WITH_GEMMA=1 ;;
    *) echo "build-site: unknown argument $arg (expected --with-gemma)" >&2; exit 2 ;;
  esac
done
[ -f assets/SmolLM2-135M-Instruct.Q4_1.gguf ] || scripts/fetch-assets.sh
if [ "$WITH_GEMMA" = 1 ]; then scripts/fetch-assets.sh --gemma; fi
trunk build --release
# Trunk does not hash the names of bundles it builds as "workers" (each page's
# boot.js starts its bundle, so that no inline script is needed); a digest of
# the bundles in boot.js's URLs keeps a browser's cache from pairing one
# build's glue with another's wasm.
bust() {
  local dir=$1; shift
  local id
  id=$(cd "$dir" && cat "$@" | sha256sum | cut -c1-16)
  sed -i "s/__BUILD__/$id/g" "$dir/boot.js" "$dir/index.html"
}
bust pkg workbench_bg.wasm workbench.js
trunk build router/index.html --release --dist pkg/router
bust pkg/router router-page_bg.wasm router-widget_bg.wasm router-page.js router-widget.js
# The router worker's threads variant, beside the single-thread one.
scripts/build-threads-worker.sh
if [ "$WITH_GEMMA" = 1 ]; then
  cp assets/gemma-3-270m-q4_k_m.gguf pkg/router/models/
  # Its trained head (trained on Gemma's hidden states) goes where Gemma goes.
  cp reports/head.gemma3-270m.json pkg/router/head.gemma3-270m.json
fi
# The measured routing-quality study (bench-decide --quality) and its head:
# the worker attaches the head after loading SmolLM2 (pinned by SHA-256 in
# models/manifest.json); the page's Quality card fetches the study only when asked.
# Its in-browser evaluation reads the OOD176 files (MIT) from router/data/.
cp reports/router-quality.cpu.json pkg/router/quality.json
# Gemma 3 270M's study ships with every site (measurements, not its
# weights): the Quality card compares the backbones side by side.
cp reports/router-quality.gemma3.cpu.json pkg/router/quality.gemma3.json
cp reports/head.smollm2-135m.json pkg/router/head.smollm2-135m.json
# The measured serving study (bench-decide --serve): the Serving card shows
# it on request; its own load runs read the same OOD176 prompts.
cp reports/router-serve.cpu.json pkg/router/serve.json
mkdir -p pkg/router/data
cp data/coderouterbench/ood176_tasks.jsonl data/coderouterbench/ood176_results_long.csv pkg/router/data/
# Last, once every file is in place: the service worker's file lists.
node tools/sw-files.mjs pkg
