#!/usr/bin/env bash
# The pruning speed figures of BENCHMARKS.md (issue 15), 2 threads, on random-weight models of TinyLlama-1.1B
# shape (`make-model --fan-in-init`): dense against 2:4 with F16, 8-bit and 4-bit values, and against
# structured pruning (25% of the query heads and of the FFN channels, written as a smaller dense model).
# Each pair runs in `kestrel bench --interleave-models`: decode token by token in turn, prefill repetition
# by repetition, so the ratio per repetition compares the same spells of this shared machine. On a VM the
# memory one process is given can stream some 10% faster or slower than another's (the same model loaded
# twice in one process decodes 0.96-1.09x itself), so decode runs in RUNS processes and the median of
# their medians is the figure. KESTREL_ISA=avx2 (or neon, scalar) measures another kernel path. Models go
# to ${KESTREL_BENCH_DIR:-/tmp/kestrel-bench} on first use (about 8 GB).
# Usage: scripts/bench_pruning.sh [RUNS=3] [REPETITIONS=5] [GENERATED=64] [PROMPT=512]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
reps=${2:-5}
n_gen=${3:-64}
n_prompt=${4:-512}
dir=${KESTREL_BENCH_DIR:-/tmp/kestrel-bench}
mkdir -p "$dir"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j 2 --target kestrel >/dev/null
m() { echo "$dir/tinyllama-fan-$1.gguf"; }
for type in f16 s24_f16 q8_0 s24_q8 q4_0 s24_q4; do
  [ -f "$(m "$type")" ] || ./build/kestrel make-model -o "$(m "$type")" --preset tinyllama --type "$type" --fan-in-init
done
for type in f16 q8_0; do
  [ -f "$(m "structured-$type")" ] || ./build/kestrel prune "$(m f16)" "$(m "structured-$type")" \
    --structured heads=0.25,ffn=0.25 --type "$type" -t 2 >/dev/null
done
for pair in "f16 s24_f16" "q8_0 s24_q8" "q4_0 s24_q4" "f16 structured-f16" "q8_0 structured-q8_0"; do
  read -r dense pruned <<<"$pair"
  echo "== $dense -> $pruned"
  medians=()
  for run in $(seq "$runs"); do
    line=$(./build/kestrel bench -m "$(m "$dense"),$(m "$pruned")" -p 0 -n "$n_gen" -r "$reps" -t 2 --no-bandwidth \
      --interleave-models | grep "^| tg")
    echo "$line"
    medians+=("$(echo "$line" | awk -F'|' '{gsub(/[ x]/, "", $4); print $4}')")
  done
  printf '%s\n' "${medians[@]}" | sort -g | awk '{v[NR] = $1} END {m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
    printf "decode: median of the %d runs %.3fx\n", NR, m}'
  [ "$n_prompt" -gt 0 ] || continue
  ./build/kestrel bench -m "$(m "$dense"),$(m "$pruned")" -p "$n_prompt" -n 0 -r 3 -t 2 --no-bandwidth \
    --interleave-models | grep "^| pp"
done
