#!/usr/bin/env bash
# Files kestrel writes, scored by llama.cpp: `kestrel quantize` MODEL to each scheme, then the perplexity of
# TEXT by `kestrel perplexity` and by llama.cpp's `llama-perplexity` (same context, one chunk per batch) on
# the same file. Equal figures mean llama.cpp reads kestrel's blocks as kestrel does.
# Usage: LLAMA_PERPLEXITY=/path/to/llama-perplexity bash scripts/llama_compat.sh MODEL TEXT [CTX=256] SCHEME...
#   e.g. ... scripts/llama_compat.sh outlier.gguf eval.txt 256 Q4_1 Q5_0 Q5_1 Q5_K_M Q3_K_M Q2_K
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1 text=$2 ctx=${3:-256}
shift $(($# < 3 ? $# : 3))
llama=${LLAMA_PERPLEXITY:?set LLAMA_PERPLEXITY to a llama-perplexity binary}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j 2 --target kestrel >/dev/null
echo "| file (kestrel quantize $(basename "$model")) | kestrel PPL | llama.cpp PPL |"
echo "| --- | ---: | ---: |"
for scheme in "$@"; do
  out="$work/$scheme.gguf"
  ./build/kestrel quantize "$model" "$out" "$scheme" >/dev/null 2>&1
  ours=$(./build/kestrel perplexity -m "$out" -f "$text" -c "$ctx" -ctk f32 -ctv f32 2>&1 |
    sed -n 's/Final estimate: PPL = \([0-9.]*\).*/\1/p')
  theirs=$("$llama" -m "$out" -f "$text" -c "$ctx" -b "$ctx" -t 2 2>&1 | sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p')
  echo "| $scheme | $ours | ${theirs:-refused} |"
done
