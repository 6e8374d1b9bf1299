#!/usr/bin/env bash
# Speculative decoding in serving (BENCHMARKS.md, issue 12): `kestrel serve` on the (target, draft) benchmark
# pair (TinyLlama-1.1B-shape Q4_0 target, its 2-layer draft, perturbation 0.005), 2 threads, with and
# without `-md`, driven by `kestrel bench serve` with unique prompts (60 tokens, 128 generated) at 1, 4 and 8
# requests in flight. The two servers alternate ROUNDS times (default 2) so drift hits both alike.
# Extra arguments go to the speculative server (e.g. --spec-always, --draft-max 4).
# Models go to ${KESTREL_BENCH_DIR:-/tmp/kestrel-bench}.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${KESTREL_BENCH_DIR:-/tmp/kestrel-bench}
rounds=${ROUNDS:-2}
mkdir -p "$dir"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j 2 --target kestrel >/dev/null
target="$dir/pair-target.gguf" draft="$dir/pair-draft.gguf"
[ -f "$target" ] && [ -f "$draft" ] || ./build/kestrel make-model -o "$target" --preset tinyllama --type q4_0 \
  --draft-output "$draft" --draft-layers 2 --perturb 0.005
port=${KESTREL_BENCH_PORT:-8198}
url="http://127.0.0.1:$port"
source scripts/serve_control.sh
for round in $(seq 1 "$rounds"); do
  for mode in plain speculative; do
    echo "## round $round: $mode"
    if [ "$mode" = plain ]; then serve "$target"; else serve "$target" -md "$draft" --draft-max 3 "$@"; fi
    for c in 1 4 8; do
      ./build/kestrel bench serve --url "$url" --workload unique --requests $((c == 1 ? 3 : 2 * c)) --concurrency "$c" \
        --unique-tokens 60 --max-tokens 128 --seed "$c"
    done
    stop
  done
done
