#!/usr/bin/env bash
# Prompt and generation tokens/s of `kestrel generate` (2 threads) on stories260K and on random-weight
# models of TinyLlama-1.1B shape in Q8_0 and Q4_0, each run twice. Models are written to
# ${KESTREL_BENCH_DIR:-/tmp/kestrel-bench} on first use (about 1.8 GB).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${KESTREL_BENCH_DIR:-/tmp/kestrel-bench}
shared=${KESTREL_SHARED:-$(cd .. && pwd)/shared}
mkdir -p "$dir"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j 2 --target kestrel >/dev/null
for type in q8_0 q4_0; do
  [ -f "$dir/tinyllama-$type.gguf" ] || ./build/kestrel make-model -o "$dir/tinyllama-$type.gguf" --preset tinyllama --type "$type"
done
models=("$dir/tinyllama-q8_0.gguf" "$dir/tinyllama-q4_0.gguf")
[ -f "$shared/models/stories260K/stories260K.gguf" ] && models=("$shared/models/stories260K/stories260K.gguf" "${models[@]}")
for model in "${models[@]}"; do
  for run in 1 2; do
    echo "== $(basename "$model") run $run"
    ./build/kestrel generate -m "$model" -f bench/prompt.txt -n 64 -t 2 --temp 0 --ignore-eos --no-display-prompt \
      2>&1 >/dev/null | grep -E "^(prompt|generation):"
  done
done
