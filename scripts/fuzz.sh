#!/usr/bin/env bash
# Fuzzes every parser of untrusted input with libFuzzer (cargo-fuzz on the
# nightly toolchain; `scripts/setup.sh --with-fuzz` installs it), each target for a set
# time, starting from the committed seeds in fuzz/seeds/<target>/ (the
# growing corpus goes to target/fuzz-corpus/<target>/, not into git), and
# prints executions and crashes per target, also written to
# test-output/fuzz-summary.json. A crash stops its target and leaves the
# input in fuzz/artifacts/<target>/: each one becomes a regression test.
#
#   scripts/fuzz.sh [--seconds N] [--jobs J] [target ...]
#
# Defaults: 600 s per target, one target at a time, all targets. Not part of
# scripts/test.sh: it is a separate build (nightly, AddressSanitizer) and
# takes minutes per target by design.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=600
jobs=1
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -*) echo "fuzz: unknown option $1 (expected --seconds N, --jobs J, target names)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=(kv_query kv_config_import kv_gguf_header kv_metrics kv_vllm_log kv_lengths share_link router_fragment pool_file head_file gguf gguf_tokenizer)
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz: no target $t (targets: ${all[*]})" >&2; exit 2; }
done
command -v cargo-fuzz >/dev/null || { echo "fuzz: cargo-fuzz is not installed (scripts/setup.sh --with-fuzz)" >&2; exit 2; }
# Inputs large enough for the seeds: the GGUF seeds are small checkpoints (~65 KB).
max_len() {
  case "$1" in
    gguf|kv_gguf_header) echo 131072 ;;
    gguf_tokenizer|share_link|pool_file) echo 32768 ;;
    *) echo 8192 ;;
  esac
}
cargo +nightly fuzz build --fuzz-dir fuzz
mkdir -p test-output
run() {
  local t=$1
  local log="test-output/fuzz-$t.log"
  mkdir -p "target/fuzz-corpus/$t" "fuzz/artifacts/$t"
  local before
  before=$(find "fuzz/artifacts/$t" -type f ! -name 'slow-unit-*' | wc -l)
  local status=0
  # The GGUF target also starts from the committed malformed checkpoints.
  local extra=()
  [ "$t" = gguf ] && extra=(crates/router/tests/malformed)
  cargo +nightly fuzz run --fuzz-dir fuzz "$t" "target/fuzz-corpus/$t" "fuzz/seeds/$t" "${extra[@]}" -- \
    -max_total_time="$seconds" -max_len="$(max_len "$t")" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
    >"$log" 2>&1 || status=$?
  local execs
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo 0)
  # Crashes, leaks, timeouts and out-of-memory inputs count; slow units
  # (libFuzzer keeps inputs over 10 s) are reported apart: they are not failures.
  local crashes=$(( $(find "fuzz/artifacts/$t" -type f ! -name 'slow-unit-*' | wc -l) - before ))
  local slow
  slow=$(find "fuzz/artifacts/$t" -type f -name 'slow-unit-*' | wc -l)
  local corpus
  corpus=$(find "target/fuzz-corpus/$t" -type f | wc -l)
  printf '{"target":"%s","seconds":%s,"executions":%s,"crashes":%s,"slow_units":%s,"corpus":%s,"exit":%s}\n' "$t" "$seconds" "${execs:-0}" "$crashes" "$slow" "$corpus" "$status" >"test-output/fuzz-$t.json"
}
running=0
for t in "${targets[@]}"; do
  run "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait
printf '%-18s %8s %14s %8s %10s %8s\n' target seconds executions crashes slow-units corpus
total_crashes=0
for t in "${targets[@]}"; do
  line=$(cat "test-output/fuzz-$t.json")
  get() { echo "$line" | grep -o "\"$1\":[0-9]*" | cut -d: -f2; }
  printf '%-18s %8s %14s %8s %10s %8s\n' "$t" "$(get seconds)" "$(get executions)" "$(get crashes)" "$(get slow_units)" "$(get corpus)"
  total_crashes=$((total_crashes + $(get crashes)))
done
{ echo '['; for t in "${targets[@]}"; do cat "test-output/fuzz-$t.json"; done | paste -sd,; echo ']'; } > test-output/fuzz-summary.json
[ "$total_crashes" -eq 0 ] || { echo "fuzz: $total_crashes crash(es); inputs in fuzz/artifacts/" >&2; exit 1; }
