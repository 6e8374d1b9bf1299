#!/usr/bin/env bash
# Decode speed when the CPU is shared (BENCHMARKS.md, "Speed under CPU contention"): tg128 of the
# TinyLlama-shape Q4_0 model with 2 threads (a) alone, (b) beside a second identical `kestrel bench`
# process, (c) beside a busy-loop process pinned to core 0, (d) with -t 4 on the machine's cores.
# Prints each case's tok/s and its ratio to (a). KESTREL_BIN picks the binary (default: build/kestrel,
# built here); models go to ${KESTREL_BENCH_DIR:-/tmp/kestrel-bench}; KESTREL_REPS sets -r (default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${KESTREL_BENCH_DIR:-/tmp/kestrel-bench}
reps=${KESTREL_REPS:-5}
mkdir -p "$dir"
kestrel=${KESTREL_BIN:-}
if [ -z "$kestrel" ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j 2 --target kestrel >/dev/null
  kestrel=./build/kestrel
fi
model="$dir/tinyllama-q4_0.gguf"
[ -f "$model" ] || "$kestrel" make-model -o "$model" --preset tinyllama --type q4_0 >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"; [ -n "${busy:-}" ] && kill "$busy" 2>/dev/null || true' EXIT

tg() {  # tg THREADS OUTFILE: tg128 tok/s of one bench process
  "$kestrel" bench -m "$model" -p 0 -n 128 -r "$reps" -t "$1" --no-bandwidth -o json > "$2"
}
rate() { python3 -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))[0]["avg_ts"])' "$1"; }

cat "$model" > /dev/null  # the weights in the page cache before the first case
tg 2 "$out/a.json"
tg 2 "$out/b1.json" & first=$!
tg 2 "$out/b2.json"
wait "$first"
taskset -c 0 bash -c 'while :; do :; done' & busy=$!
tg 2 "$out/c.json"
kill "$busy"; busy=
tg 4 "$out/d.json"

a=$(rate "$out/a.json")
printf '| case | tg128 tok/s | of (a) | target |\n| --- | ---: | ---: | ---: |\n'
row() { python3 -c 'import sys; a=float(sys.argv[1]); x=float(sys.argv[3]); print("| %s | %.2f | %.2f | %s |" % (sys.argv[2], x, x / a, sys.argv[4]))' "$a" "$@"; }
row "(a) alone, -t 2" "$a" "-"
row "(b) beside a second bench, process 1" "$(rate "$out/b1.json")" ">= 0.40"
row "(b) beside a second bench, process 2" "$(rate "$out/b2.json")" ">= 0.40"
row "(c) beside a busy loop on core 0" "$(rate "$out/c.json")" ">= 0.45"
row "(d) -t 4 on $(nproc) cores" "$(rate "$out/d.json")" ">= 0.85"
