#!/usr/bin/env bash
# Builds and runs every test: the release build, the ASan+UBSan build, the AArch64 build under qemu, and
# the fuzz targets for a bounded time. KESTREL_FUZZ_SECONDS (default 30) sets each fuzz target's run time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=${KESTREL_JOBS:-2}
fuzz_seconds=${KESTREL_FUZZ_SECONDS:-30}
shared=${KESTREL_SHARED:-$(cd .. && pwd)/shared}
stage() { echo "== $* (at $((SECONDS / 60))m$((SECONDS % 60))s)"; }

stage "release build and tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"

stage "the official openai npm client against kestrel serve"
if [ -d "$shared" ]; then
  bash tests/openai-client/run.sh "$PWD/build/kestrel" "$shared"
else
  echo "skipped: ../shared not found (set KESTREL_SHARED)"
fi

stage "sanitizer build (ASan + UBSan) and tests"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DKESTREL_SANITIZE=ON -DKESTREL_BENCH=OFF >/dev/null
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"

stage "aarch64 build (cross-compiled) and its kernel and model tests under qemu-aarch64"
bash scripts/test_aarch64.sh

stage "fuzz targets (libFuzzer, ${fuzz_seconds}s each)"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
  -DKESTREL_FUZZ=ON -DKESTREL_BENCH=OFF >/dev/null
cmake --build build-fuzz -j "$jobs" --target fuzz_gguf fuzz_tokenizer fuzz_chat_template fuzz_openai_request fuzz_logprob_file fuzz_imatrix fuzz_step_plan fuzz_grammar
mkdir -p build-fuzz/corpus-gguf build-fuzz/corpus-tokenizer build-fuzz/corpus-template build-fuzz/corpus-request \
  build-fuzz/corpus-logprob build-fuzz/corpus-imatrix build-fuzz/corpus-plan build-fuzz/corpus-grammar
./build/kestrel make-model -o build-fuzz/corpus-gguf/tiny.gguf --layers 1 --dim 64 --heads 4 --kv-heads 2 \
  --ffn 64 --vocab 300 >/dev/null 2>&1
if [ -d "$shared" ]; then
  cp -f "$shared"/tokenizer-tests/ggml-vocab-gpt-2.gguf build-fuzz/corpus-gguf/ 2>/dev/null || true
  export KESTREL_FUZZ_VOCABS="$shared/tokenizer-tests/ggml-vocab-llama-spm.gguf:$shared/tokenizer-tests/ggml-vocab-gpt-2.gguf:$shared/tokenizer-tests/ggml-vocab-deepseek-llm.gguf"
  cp -f "$shared"/tokenizer-tests/*.inp build-fuzz/corpus-tokenizer/ 2>/dev/null || true
  cp -f "$shared"/chat-templates/*.jinja build-fuzz/corpus-template/ 2>/dev/null || true
else
  export KESTREL_FUZZ_VOCABS="$PWD/build-fuzz/corpus-gguf/tiny.gguf"
fi
./build-fuzz/tests/fuzz_gguf -max_total_time="$fuzz_seconds" -max_len=65536 -rss_limit_mb=2048 \
  -print_final_stats=1 build-fuzz/corpus-gguf 2>&1 | tail -n 12
./build-fuzz/tests/fuzz_tokenizer -max_total_time="$fuzz_seconds" -max_len=4096 -rss_limit_mb=2048 \
  -print_final_stats=1 build-fuzz/corpus-tokenizer 2>&1 | tail -n 12
printf '%s' '{"prompt":"hi","max_tokens":5,"temperature":0.5,"stop":["a"],"logprobs":2,"n":2}' > build-fuzz/corpus-request/c.json
printf '%s' '{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":3}' > build-fuzz/corpus-request/chat.json
python3 -c 'import struct, sys; sys.stdout.buffer.write(b"KSTLPB01" + struct.pack("<3i", 4, 3, 1) + struct.pack("<4i", 0, 1, 2, 1) + struct.pack("<3f", -0.5, -1.5, -2.5))' \
  > build-fuzz/corpus-logprob/small.kpb
short_seconds=$(( fuzz_seconds / 2 > 0 ? fuzz_seconds / 2 : 1 ))
./build-fuzz/tests/fuzz_chat_template -max_total_time="$short_seconds" -max_len=8192 -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 build-fuzz/corpus-template 2>&1 | tail -n 12
./build-fuzz/tests/fuzz_openai_request -max_total_time="$short_seconds" -max_len=4096 -rss_limit_mb=2048 \
  -print_final_stats=1 build-fuzz/corpus-request 2>&1 | tail -n 12
./build-fuzz/tests/fuzz_logprob_file -max_total_time="$short_seconds" -max_len=4096 -rss_limit_mb=2048 \
  -print_final_stats=1 build-fuzz/corpus-logprob 2>&1 | tail -n 12
python3 -c 'import struct, sys; n = b"blk.0.attn_q.weight"; sys.stdout.buffer.write(struct.pack("<2i", 1, len(n)) + n + struct.pack("<2i", 2, 4) + struct.pack("<4f", 1, 2, 3, 4) + struct.pack("<2i", 2, 1) + b"c")' \
  > build-fuzz/corpus-imatrix/small.dat
./build-fuzz/tests/fuzz_imatrix -max_total_time="$short_seconds" -max_len=4096 -rss_limit_mb=2048 \
  -print_final_stats=1 build-fuzz/corpus-imatrix 2>&1 | tail -n 12
python3 -c 'import struct, sys; sys.stdout.buffer.write(b"KSP1" + struct.pack("<3i", 1, 0, 1) + struct.pack("<i", 1) + struct.pack("<q3i", 7, 0, 1, 3) + struct.pack("<3i", 5, 6, 7) + struct.pack("<2i", 1, 4) + struct.pack("<iq", 1, 9))' \
  > build-fuzz/corpus-plan/small.plan
python3 -c 'import struct, sys; sys.stdout.buffer.write(b"KPD1" + struct.pack("<Bq", 1, 7) + struct.pack("<i", 2) + b"ab" + struct.pack("<4i", 3, 5, 6, 7))' \
  > build-fuzz/corpus-plan/job.msg
./build-fuzz/tests/fuzz_step_plan -max_total_time="$short_seconds" -max_len=4096 -rss_limit_mb=2048 \
  -print_final_stats=1 build-fuzz/corpus-plan 2>&1 | tail -n 12
printf 'root ::= "{" ws ( [a-z]+ ":" ws num ( "," ws [a-z]+ ":" ws num )* )? "}"\nnum ::= "-"? [0-9]{1,4}\nws ::= [ \\t\\n]*\n\0{a: 12, b:-3}' \
  > build-fuzz/corpus-grammar/record.gbnf
printf 'root ::= (x | "\\u00e9" [^a-z]) ?\nx ::= . "\\x41"{2,3} ( "b" | [\\]\\-] )*\n\0\xc3\xa9Q' > build-fuzz/corpus-grammar/misc.gbnf
./build-fuzz/tests/fuzz_grammar -max_total_time="$short_seconds" -max_len=4096 -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 build-fuzz/corpus-grammar 2>&1 | tail -n 12
stage "all tests passed"
