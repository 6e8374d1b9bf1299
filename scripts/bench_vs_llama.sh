#!/usr/bin/env bash
# Side by side with llama.cpp on the same GGUF files, alternating the two engines per file so drift on a
# shared machine hits both alike. Prints one markdown row per file: pp and tg of each, and the ratios.
#   LLAMA_BENCH=/path/to/llama-bench bash scripts/bench_vs_llama.sh [-t 2] [-p 512] [-n 128] [-r 2] FILE...
# KESTREL_BIN (default build/kestrel) and KESTREL_ISA pass through (e.g. KESTREL_ISA=avx2 on an AVX-512
# machine, against a llama.cpp built with -DGGML_AVX512=OFF).
set -euo pipefail
threads=2 prompt=512 gen=128 reps=2
while getopts "t:p:n:r:" opt; do
  case $opt in t) threads=$OPTARG ;; p) prompt=$OPTARG ;; n) gen=$OPTARG ;; r) reps=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
: "${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}"
kestrel=${KESTREL_BIN:-$(dirname "$0")/../build/kestrel}
# Column $3 (by its header, e.g. t/s) of test $2's row (pp512 / tg128) in llama-bench's or kestrel's table.
column() {
  awk -F'|' -v test="$2" -v name="$3" '
    NR == 1 { for (i = 1; i <= NF; ++i) { h = $i; gsub(/^ +| +$/, "", h); if (h == name) col = i } }
    { t = $0 } t ~ "\\| *" test " *\\|" { v = $col; gsub(/^ +| +$/, "", v); print v; exit }' <<<"$1"
}
rate() { column "$1" "$2" "t/s" | awk '{print $1}'; }
echo "| file | kernels | pp$prompt llama.cpp | pp$prompt kestrel | ratio | tg$gen llama.cpp | tg$gen kestrel | ratio | kestrel tg % of ceiling |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for file in "$@"; do
  llama=$("$LLAMA_BENCH" -m "$file" -t "$threads" -p "$prompt" -n "$gen" -r "$reps" 2>/dev/null)
  ours=$("$kestrel" bench -m "$file" -t "$threads" -p "$prompt" -n "$gen" -r "$reps" 2>/dev/null)
  lp=$(rate "$llama" "pp$prompt") lt=$(rate "$llama" "tg$gen") kp=$(rate "$ours" "pp$prompt") kt=$(rate "$ours" "tg$gen")
  isa=$(column "$ours" "tg$gen" kernels)
  ceiling=$(column "$ours" "tg$gen" "decode % of bandwidth ceiling")
  printf "| %s | %s | %s | %s | %.2fx | %s | %s | %.2fx | %s |\n" "$(basename "$file")" "$isa" "$lp" "$kp" \
    "$(echo "$kp / $lp" | bc -l)" "$lt" "$kt" "$(echo "$kt / $lt" | bc -l)" "$ceiling"
done
