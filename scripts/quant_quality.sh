#!/usr/bin/env bash
# Weight-quantization quality per type and method (docs/quantization.md, issue 14). From an F32/F16/BF16
# model: a calibration text and a disjoint evaluation text, both the model's own samples at temperature 1
# (prompt "Once upon a time"; calibration seeds 7001.., evaluation seeds 9001..), base log-probabilities
# of the unquantized model, then for every "TYPE METHOD [FLAGS...]" entry: `kestrel quantize`, bits per
# converted weight, file size, perplexity, mean / 99th-percentile KL divergence against the base and
# top-1 agreement (`kestrel perplexity --kl-divergence`).
# Usage: scripts/quant_quality.sh MODEL [SAMPLES=24] [TOKENS=250] [CTX=256] [ENTRIES...]
#   e.g. scripts/quant_quality.sh model-f32.gguf 24 250 256 "Q4_0 rtn --pure" "Q4_0 gptq --pure"
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1 samples=${2:-24} tokens=${3:-250} ctx=${4:-256}
shift $(($# < 4 ? $# : 4))
entries=("$@")
[ ${#entries[@]} -gt 0 ] || entries=("Q8_0 rtn" "Q6_K rtn" "Q4_K_M rtn" "Q4_K_M imatrix" "Q4_K_M gptq" \
  "Q4_0 rtn --pure" "Q4_0 imatrix --pure" "Q4_0 gptq --pure" "Q4_0 gptq --pure --gptq-act-order")
work=${KESTREL_QUANT_WORK:-$(mktemp -d)}
[ -n "${KESTREL_QUANT_WORK:-}" ] || trap 'rm -rf "$work"' EXIT
# shellcheck source=scripts/quality_common.sh
source scripts/quality_common.sh
echo "| type | method | bits/weight | file MiB | PPL | mean KLD | 99% KLD | same top-1 |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for entry in "${entries[@]}"; do
  read -r type method flags <<<"$entry"
  out_file="$work/q.gguf"
  calib=()
  [ "$method" = rtn ] && [[ "$flags" != *--outlier-threshold* && "$flags" != *--static-scales* ]] ||
    calib=(--calib "$work/calib.txt" -c "$ctx")
  # shellcheck disable=SC2086
  report=$(./build/kestrel quantize "$model" "$out_file" "$type" --method "$method" "${calib[@]}" $flags 2>/dev/null | tail -n 1)
  echo "| $type${flags:+ $flags} | $method | $(echo "$report" | sed -n 's/.* \([0-9.]*\) bits per converted weight.*/\1/p') |" \
    "$(quality_cells "$out_file")"
done
