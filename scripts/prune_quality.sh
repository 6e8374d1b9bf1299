#!/usr/bin/env bash
# Pruning quality per method and sparsity (docs/pruning.md, issue 15), on the texts and base of
# scripts/quality_common.sh: for every "METHOD FLAGS..." entry, `kestrel prune` (wanda calibrated on the
# calibration text), the fraction of zeros (structured: of the blocks' matrix weights removed), file size,
# perplexity, mean / 99th-percentile KL divergence against the unpruned model and top-1 agreement.
# Usage: scripts/prune_quality.sh MODEL [SAMPLES=24] [TOKENS=250] [CTX=256] [ENTRIES...]
#   e.g. scripts/prune_quality.sh model-f32.gguf 24 250 256 "magnitude --sparsity 0.5" "wanda --pattern 2:4"
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1 samples=${2:-24} tokens=${3:-250} ctx=${4:-256}
shift $(($# < 4 ? $# : 4))
entries=("$@")
[ ${#entries[@]} -gt 0 ] || entries=("magnitude --sparsity 0.3" "wanda --sparsity 0.3" "magnitude --sparsity 0.5" \
  "wanda --sparsity 0.5" "magnitude --sparsity 0.7" "wanda --sparsity 0.7" "magnitude --pattern 2:4" "wanda --pattern 2:4")
work=${KESTREL_QUANT_WORK:-$(mktemp -d)}
[ -n "${KESTREL_QUANT_WORK:-}" ] || trap 'rm -rf "$work"' EXIT
# shellcheck source=scripts/quality_common.sh
source scripts/quality_common.sh
echo "| method | pruning | zeros | file MiB | PPL | mean KLD | 99% KLD | same top-1 |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for entry in "${entries[@]}"; do
  read -r method flags <<<"$entry"
  out_file="$work/p.gguf"
  calib=()
  [ "$method" = magnitude ] || calib=(--calib "$work/calib.txt" -c "$ctx")
  # shellcheck disable=SC2086
  report=$(./build/kestrel prune "$model" "$out_file" --method "$method" "${calib[@]}" $flags 2>/dev/null | tail -n 1)
  echo "| $method | $flags | $(echo "$report" | sed -n 's/.* \([0-9.]*%\) of the [a-z]* matrices.*/\1/p') |" \
    "$(quality_cells "$out_file")"
done
