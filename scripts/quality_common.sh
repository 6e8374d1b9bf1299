# Shared by scripts/quant_quality.sh and scripts/prune_quality.sh (sourced, not run): a calibration text and
# a disjoint evaluation text, both the model's own samples at temperature 1 (prompt "Once upon a time";
# calibration seeds 7001.., evaluation seeds 9001..), the unquantized model's log-probabilities, and the
# quality cells of one table row. Expects: model samples tokens ctx work (a directory).
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j 2 --target kestrel >/dev/null
sample() {  # FIRST_SEED -> text
  for s in $(seq "$1" $(($1 + samples - 1))); do
    ./build/kestrel generate -m "$model" -p "Once upon a time" -n "$tokens" --temp 1 -s "$s" -ctk f32 -ctv f32 2>/dev/null
    echo
  done
}
[ -s "$work/eval.txt" ] || sample 9001 >"$work/eval.txt"
[ -s "$work/calib.txt" ] || sample 7001 >"$work/calib.txt"
ppl() { ./build/kestrel perplexity -f "$work/eval.txt" -c "$ctx" -ctk f32 -ctv f32 "$@" 2>&1; }
base=$(ppl -m "$model" --kl-divergence-base "$work/base.lpb")
echo "model $(basename "$model"): evaluation $(wc -c <"$work/eval.txt") bytes, $(echo "$base" | grep -o '[0-9]* tokens scored'), chunks of $ctx;" \
  "calibration $(wc -c <"$work/calib.txt") bytes (disjoint seeds); base PPL $(echo "$base" | sed -n 's/Final estimate: PPL = \([0-9.]*\).*/\1/p')"
echo
# FILE -> "MiB | PPL | mean KLD | 99% KLD | same top-1 |" of that model against the base
quality_cells() {
  local out
  out=$(ppl -m "$1" --kl-divergence-base "$work/base.lpb" --kl-divergence)
  echo "$(awk -v b="$(stat -c %s "$1")" 'BEGIN {printf "%.3f", b / 1048576}') |" \
    "$(echo "$out" | sed -n 's/Final estimate: PPL = \([0-9.]*\).*/\1/p') |" \
    "$(echo "$out" | sed -n 's/Mean KLD: *\([0-9.e-]*\).*/\1/p') |" \
    "$(echo "$out" | sed -n 's/99.0% KLD: *\([0-9.e-]*\).*/\1/p') |" \
    "$(echo "$out" | sed -n 's/Same top p: *\([0-9.]*\).*/\1/p')% |"
}
