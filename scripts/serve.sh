#!/usr/bin/env bash
# Installs what is needed, builds the workbench in release mode into pkg/,
# and serves it on localhost. PORT=9000 scripts/serve.sh picks another port.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
PORT="${PORT:-8080}"
scripts/build-site.sh
echo
echo "Calculator: http://127.0.0.1:$PORT/   widget: http://127.0.0.1:$PORT/?embed=kv   router page: http://127.0.0.1:$PORT/router/"
echo
exec node tools/static-server.mjs pkg "$PORT"
