#!/usr/bin/env bash
# Builds and runs every test: the release build, the ASan+UBSan build, and the fuzz targets for a bounded
# time. KESTREL_FUZZ_SECONDS (default 60) sets each fuzz target's run time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=${KESTREL_JOBS:-2}
fuzz_seconds=${KESTREL_FUZZ_SECONDS:-60}
shared=${KESTREL_SHARED:-$(cd .. && pwd)/shared}

echo "== release build and tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== sanitizer build (ASan + UBSan) and tests"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKESTREL_SANITIZE=ON -DKESTREL_BENCH=OFF >/dev/null
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"

echo "== fuzz targets (libFuzzer, ${fuzz_seconds}s each)"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKESTREL_FUZZ=ON \
  -DKESTREL_BENCH=OFF >/dev/null
cmake --build build-fuzz -j "$jobs" --target fuzz_gguf fuzz_tokenizer
mkdir -p build-fuzz/corpus-gguf build-fuzz/corpus-tokenizer
./build/kestrel make-model -o build-fuzz/corpus-gguf/tiny.gguf --layers 1 --dim 64 --heads 4 --kv-heads 2 \
  --ffn 64 --vocab 300 >/dev/null 2>&1
if [ -d "$shared" ]; then
  cp -f "$shared"/tokenizer-tests/ggml-vocab-gpt-2.gguf build-fuzz/corpus-gguf/ 2>/dev/null || true
  export KESTREL_FUZZ_VOCABS="$shared/tokenizer-tests/ggml-vocab-llama-spm.gguf:$shared/tokenizer-tests/ggml-vocab-gpt-2.gguf:$shared/tokenizer-tests/ggml-vocab-deepseek-llm.gguf"
  cp -f "$shared"/tokenizer-tests/*.inp build-fuzz/corpus-tokenizer/ 2>/dev/null || true
else
  export KESTREL_FUZZ_VOCABS="$PWD/build-fuzz/corpus-gguf/tiny.gguf"
fi
./build-fuzz/tests/fuzz_gguf -max_total_time="$fuzz_seconds" -max_len=65536 -rss_limit_mb=2048 \
  -print_final_stats=1 build-fuzz/corpus-gguf 2>&1 | tail -n 12
./build-fuzz/tests/fuzz_tokenizer -max_total_time="$fuzz_seconds" -max_len=4096 -rss_limit_mb=2048 \
  -print_final_stats=1 build-fuzz/corpus-tokenizer 2>&1 | tail -n 12
echo "== all tests passed"
