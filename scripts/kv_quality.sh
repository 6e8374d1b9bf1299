#!/usr/bin/env bash
# KV-cache quality per KV type (docs/kv_cache.md, issue 13): an evaluation text of the model's own samples
# (F32 KV, temperature 1, seeds 9001.., prompt "Once upon a time"), base log-probabilities with F16 KV,
# then for every KV type its bytes per token, perplexity, mean / 99th-percentile KL divergence against
# the base and top-1 agreement (`kestrel perplexity --kl-divergence`).
# Usage: scripts/kv_quality.sh MODEL [SAMPLES=24] [TOKENS=250] [CTX=256] [TYPES...]
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1 samples=${2:-24} tokens=${3:-250} ctx=${4:-256}
shift $(($# < 4 ? $# : 4))
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(f32 bf16 q8_0 fp8 q4_0 tq4 tq3 "q8_0 q4_0" "q8_0 tq4" "tq4 q4_0")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j 2 --target kestrel >/dev/null
for s in $(seq 9001 $((9000 + samples))); do
  ./build/kestrel generate -m "$model" -p "Once upon a time" -n "$tokens" --temp 1 -s "$s" -ctk f32 -ctv f32 2>/dev/null
  echo
done >"$work/eval.txt"
ppl() { ./build/kestrel perplexity -m "$model" -f "$work/eval.txt" -c "$ctx" "$@" 2>&1; }
base=$(ppl --kl-divergence-base "$work/base.lpb")
echo "model $(basename "$model"): $(wc -c <"$work/eval.txt") bytes of text, $(echo "$base" | grep -o '[0-9]* tokens scored'), chunks of $ctx; base: F16 KV, PPL $(echo "$base" | sed -n 's/Final estimate: PPL = \([0-9.]*\).*/\1/p')"
echo
echo "| K / V | bytes per token | vs f16 | PPL | mean KLD | 99% KLD | same top-1 |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
f16_bytes=$(./build/kestrel info -m "$model" 2>/dev/null | sed -n 's/.* f16 \([0-9]*\) bytes.*/\1/p')
for entry in "${types[@]}"; do
  read -r k v <<<"$entry"
  v=${v:-$k}
  out=$(ppl --kl-divergence-base "$work/base.lpb" --kl-divergence -ctk "$k" -ctv "$v")
  bytes=$(./build/kestrel info -m "$model" 2>/dev/null | sed -n "s/.* $k \([0-9]*\) bytes.*/\1/p")
  vbytes=$(./build/kestrel info -m "$model" 2>/dev/null | sed -n "s/.* $v \([0-9]*\) bytes.*/\1/p")
  total=$(((bytes + vbytes) / 2))
  echo "| $k / $v | $total | $(awk -v a="$f16_bytes" -v b="$total" 'BEGIN {printf "%.2fx", a / b}') |" \
    "$(echo "$out" | sed -n 's/Final estimate: PPL = \([0-9.]*\).*/\1/p') |" \
    "$(echo "$out" | sed -n 's/Mean KLD: *\([0-9.e-]*\).*/\1/p') |" \
    "$(echo "$out" | sed -n 's/99.0% KLD: *\([0-9.e-]*\).*/\1/p') |" \
    "$(echo "$out" | sed -n 's/Same top p: *\([0-9.]*\).*/\1/p')% |"
done
