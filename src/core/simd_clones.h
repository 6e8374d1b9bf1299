// KESTREL_SIMD_CLONES: compiles a plain loop function once per x86-64 level (x86-64-v4: AVX-512,
// x86-64-v3: AVX2 + FMA, and the baseline) and lets the loader pick the clone the CPU runs, for offline code
// (the quantizers' linear algebra) whose loops the compiler vectorises by itself. The model's kernels use
// explicit per-ISA files instead (compute/cpu/, with KESTREL_ISA). Empty where clones are unavailable or
// unsafe: other architectures, clang, and sanitizer builds (ifunc resolvers run before the sanitizer).
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_UNDEFINED__)
#define KESTREL_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KESTREL_SIMD_CLONES
#endif
