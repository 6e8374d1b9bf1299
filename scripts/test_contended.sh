#!/usr/bin/env bash
# Issue 10's acceptance run: scripts/test.sh N times in a row (default 3) while a 2-thread `kestrel bench`
# (tg128 of the TinyLlama-shape Q4_0 model, over and over) runs beside it, so no test may rely on a quiet
# machine. Stops at the first failing run. Models go to ${KESTREL_BENCH_DIR:-/tmp/kestrel-bench}.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
dir=${KESTREL_BENCH_DIR:-/tmp/kestrel-bench}
mkdir -p "$dir"
bash scripts/setup.sh >/dev/null
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j 2 --target kestrel >/dev/null
cp build/kestrel "$dir/kestrel-beside"  # the tests rebuild build/; the load keeps its own copy
model="$dir/tinyllama-q4_0.gguf"
[ -f "$model" ] || "$dir/kestrel-beside" make-model -o "$model" --preset tinyllama --type q4_0 >/dev/null
( while :; do "$dir/kestrel-beside" bench -m "$model" -p 0 -n 128 -r 5 -t 2 --no-bandwidth >/dev/null 2>&1; done ) &
load=$!
trap 'kill $load 2>/dev/null || true; pkill -f "$dir/kestrel-beside" 2>/dev/null || true' EXIT
for run in $(seq 1 "$runs"); do
  start=$(date +%s)
  echo "== run $run of $runs (beside a 2-thread kestrel bench)"
  bash scripts/test.sh > "$dir/test-run-$run.log" 2>&1 || { echo "run $run failed: $dir/test-run-$run.log"; tail -n 30 "$dir/test-run-$run.log"; exit 1; }
  echo "run $run passed in $(( $(date +%s) - start )) s ($(grep -E '^[0-9]+% tests passed' "$dir/test-run-$run.log" | tr '\n' ' '))"
done
