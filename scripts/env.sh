# Sourced by the scripts: puts the project's npm build tools (wasm-opt from
# binaryen 132) ahead of Debian's old ones, and points the wasm test runner
# at Debian's ChromeDriver.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$ROOT/tools/node_modules/.bin:$HOME/.cargo/bin:$PATH"
export CHROMEDRIVER="${CHROMEDRIVER:-/usr/bin/chromedriver}"
