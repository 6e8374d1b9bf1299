#!/usr/bin/env bash
# The CPU-kernel benchmarks of BENCHMARKS.md: llama-bench-style pp512/tg128 on random-weight models of
# TinyLlama-1.1B shape (F16, Q8_0, Q4_0, Q4_K_M), batched decode of 8 sequences at context 512, and decode at
# context 128 vs 4096 with F16 and BF16 KV pages (the two depths decoded token by token in turn, so their
# ratio does not compare two spells of this shared machine). 2 threads. Models go to ${KESTREL_BENCH_DIR:-/tmp/kestrel-bench}.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${KESTREL_BENCH_DIR:-/tmp/kestrel-bench}
mkdir -p "$dir"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j 2 --target kestrel >/dev/null
for type in f16 q8_0 q4_0 q4_k_m; do
  [ -f "$dir/tinyllama-$type.gguf" ] || ./build/kestrel make-model -o "$dir/tinyllama-$type.gguf" --preset tinyllama --type "$type"
done
m() { echo "$dir/tinyllama-$1.gguf"; }
./build/kestrel bench -m "$(m f16),$(m q8_0),$(m q4_0),$(m q4_k_m)" -p 512 -n 128 -r 3 -t 2
./build/kestrel bench -m "$(m q4_0),$(m q8_0)" -p 0 -n 64 -d 512 --seqs 8 -r 2 -t 2 --no-bandwidth
for cache in f16 bf16; do
  echo "KV cache: $cache"
  ./build/kestrel bench -m "$(m q4_0)" -p 0 -n 64 -d 128,4096 -r 3 -t 2 --no-bandwidth --interleave-depths --cache-type-k "$cache"
done
