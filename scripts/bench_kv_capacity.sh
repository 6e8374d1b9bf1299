#!/usr/bin/env bash
# KV capacity per KV type (BENCHMARKS.md, issue 13): `kestrel serve` with the same --kv-memory (default 2MiB)
# for each type, filled by `kestrel bench serve` (48 unique 100-token prompts, 60 tokens each, all in
# flight), on a small model with 64-wide heads (4 layers, 2 KV heads: 2 KiB of f16 KV per token). Prints
# per type the bytes per token and the most sequences the server ran at once, and the ratio to f16.
# Usage: scripts/bench_kv_capacity.sh [TYPES...] (default: f16 q8_0 fp8 q4_0 tq4 tq3).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${KESTREL_BENCH_DIR:-/tmp/kestrel-bench}
memory=${KV_MEMORY:-2MiB}
mkdir -p "$dir"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j 2 --target kestrel >/dev/null
model="$dir/kv-capacity.gguf"
[ -f "$model" ] || ./build/kestrel make-model -o "$model" --arch llama --type q8_0 --dim 256 --layers 4 --heads 4 \
  --kv-heads 2 --ffn 512 --vocab 1000 --ctx 2048 --seed 7 >/dev/null
port=${KESTREL_BENCH_PORT:-8197}
url="http://127.0.0.1:$port"
trap 'kill ${server:-} 2>/dev/null || true' EXIT
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(f16 q8_0 fp8 q4_0 tq4 tq3)
echo "| KV type | bytes per token | sequences at once | vs f16 | preemptions |"
echo "| --- | ---: | ---: | ---: | ---: |"
base=""
for type in "${types[@]}"; do
  ./build/kestrel serve -m "$model" --port "$port" -t 2 --kv-memory "$memory" --parallel 64 -ctk "$type" -ctv "$type" \
    >/dev/null 2>&1 &
  server=$!
  for _ in $(seq 1 300); do curl -sf "$url/ready" >/dev/null 2>&1 && break; sleep 0.1; done
  report=$(./build/kestrel bench serve --url "$url" --workload unique --requests 48 --concurrency 48 \
    --unique-tokens 100 --max-tokens 60 --vocab 1000 -o json)
  bytes=$(curl -sf "$url/metrics" | awk '$1 == "kestrel_kv_bytes_per_token" {print $2}')
  kill -TERM "$server"; wait "$server" || true
  peak=$(echo "$report" | sed -n 's/.*"peak_running": \([0-9.]*\).*/\1/p')
  preempted=$(echo "$report" | sed -n 's/.*"preemptions": \([0-9.]*\).*/\1/p')
  [ -n "$base" ] || base=$peak
  echo "| $type | $bytes | ${peak%.*} | $(awk -v p="$peak" -v b="$base" 'BEGIN {printf "%.2fx", p / b}') | ${preempted%.*} |"
done
