#!/usr/bin/env bash
# The AArch64 build, proven on this x86-64 machine: cross-compiled with g++-aarch64-linux-gnu against
# Debian's arm64 libraries (multiarch), then the kernel, model and reference-logit tests run under
# qemu-aarch64 (which emulates a CPU with NEON, dotprod, fp16 and i8mm, so every NEON kernel and the
# scalar path both run). Speed under emulation means nothing; this shows correctness only.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${KESTREL_JOBS:-2}
shared=${KESTREL_SHARED:-$(cd .. && pwd)/shared}
# No MPI here: the host's Open MPI is x86-64 only (the multi-process tests run in the native builds).
cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" -DCMAKE_BUILD_TYPE=Release \
  -DKESTREL_BENCH=OFF -DKESTREL_MPI=OFF >/dev/null
cmake --build build-aarch64 -j "$jobs" --target kestrel kestrel_portable_tests
# Kernels on every runnable level (scalar and NEON), the thread pool (weak memory ordering), GGUF and
# quantization formats, model loading, every architecture's generated model, llama.cpp's reference logits
# and the stories260K greedy text through the library and the command line on every level.
filter='Kernels.*:ThreadPool.*:Quantize.*:Gguf.*:ModelLoad.*:Archs/*:ReferenceLogits.*:StoriesGreedy.*:Generator.*'
KESTREL_SHARED="$shared" qemu-aarch64 build-aarch64/tests/kestrel_portable_tests --gtest_filter="$filter" --gtest_brief=1
echo "== aarch64 (qemu) tests passed"
