#!/usr/bin/env bash
# The serving benchmarks of BENCHMARKS.md (issue 4): `kestrel serve` on the random-weight TinyLlama-1.1B-shape
# Q4_0 model, 2 threads, 8192 KV tokens, driven by `kestrel bench serve` with llama-server's reference
# workloads: shared prefix (32 requests, 8 in flight, 400 + 15 prompt tokens, 64 generated), unique prompts
# (16 requests, 8 in flight, 60 prompt tokens, 128 generated), one request at a time; then the shared-prefix
# workload and one with mixed output lengths (16 in flight, 16-128 tokens) under static, dynamic and
# continuous batching. Models go to ${KESTREL_BENCH_DIR:-/tmp/kestrel-bench}.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${KESTREL_BENCH_DIR:-/tmp/kestrel-bench}
mkdir -p "$dir"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j 2 --target kestrel >/dev/null
model="$dir/tinyllama-q4_0.gguf"
[ -f "$model" ] || ./build/kestrel make-model -o "$model" --preset tinyllama --type q4_0
port=${KESTREL_BENCH_PORT:-8197}
url="http://127.0.0.1:$port"

source scripts/serve_control.sh
bench() { ./build/kestrel bench serve --url "$url" "$@"; }
shared_prefix=(--workload shared-prefix --requests 32 --concurrency 8 --prefix-tokens 400 --unique-tokens 15 --max-tokens 64)
mixed=(--workload shared-prefix --requests 48 --concurrency 16 --prefix-tokens 400 --unique-tokens 15 --min-tokens 16 --max-tokens 128)

echo "## continuous batching (default): unique prompts, then one request at a time"
serve "$model"
bench --workload unique --requests 16 --concurrency 8 --unique-tokens 60 --max-tokens 128 --seed 2
bench --workload unique --requests 4 --concurrency 1 --unique-tokens 60 --max-tokens 64 --seed 3
stop
for policy in continuous static dynamic; do
  echo "## $policy batching (batches of 8 for static and dynamic)"
  serve "$model" --batch-policy "$policy" --static-batch 8 --batch-wait-ms 100
  bench "${shared_prefix[@]}" --seed 1
  bench "${mixed[@]}" --seed 4
  stop
done
