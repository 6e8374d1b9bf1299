// Instruction-set levels the CPU kernels are built for, detected at run time.
#pragma once
#include <string>
#include <vector>

namespace kestrel {

// x86-64: Avx2 = AVX2 + FMA + F16C; Avx512 = AVX-512 F/BW/VL with VNNI (Zen 4, Ice Lake and later), which
// includes Avx2. AArch64: Neon = Advanced SIMD with the dot-product extension (sdot; ARMv8.2-A and later:
// Apple M1+, Graviton 2+, Ampere, Cortex-A76+). Scalar runs everywhere.
enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2, Neon = 3 };

const char* isa_name(Isa isa);
// Whether a CPU at level `isa` runs kernels built for `level` (Scalar: always; Avx512 includes Avx2;
// levels of different architectures never include each other).
bool isa_includes(Isa isa, Isa level);
// The best level this CPU runs (overridable with KESTREL_ISA=scalar|avx2|avx512|neon for testing).
Isa detected_isa();
// Every level this CPU can run, lowest first (tests hold each against the scalar reference).
std::vector<Isa> runnable_isas();
// AVX-512 BF16 dot products (vdpbf16ps), on top of the Avx512 level (Zen 4, Sapphire Rapids).
bool cpu_has_avx512_bf16();
// AVX-512 VBMI byte permutes (vpmultishiftqb, vpermb), on top of the Avx512 level (Zen 4, Ice Lake and later;
// not Cascade Lake, whose AVX-512 has VNNI without VBMI).
bool cpu_has_avx512_vbmi();
// AArch64 8-bit integer matrix multiply (smmla, ARMv8.6-A i8mm), on top of the Neon level.
bool cpu_has_i8mm();

// Which cache the kernels' software prefetches of weights and KV pages fill (compute/cpu/prefetch.h):
// L1 (prefetcht0, what the kernels were tuned with on AMD Zen 4/5) or L2 only (prefetcht1). Intel server
// cores stream more bytes per core from memory with L2 (measured on a Sapphire Rapids-class Xeon, 2 threads:
// TinyLlama decode Q4_0 +6-16%, Q4_K_M 0-10%, F16 +3-8%, Q8_0 +2-7%, S24_Q8 +4-12%; BENCHMARKS.md), so Intel
// gets L2 and every other CPU L1. KESTREL_PREFETCH=l1|l2 overrides (for measuring); AArch64 always uses L1.
enum class PrefetchTarget { L1 = 0, L2 = 1 };
const char* prefetch_target_name(PrefetchTarget target);
PrefetchTarget prefetch_target();
// prefetch_target() == L2, set when the program starts, for prefetch_line: a plain load in the kernels (a
// function-local static there put a guard and a call into every kernel loop, and GCC then kept the loops'
// vector accumulators in memory around the call).
extern const bool prefetch_into_l2;

}  // namespace kestrel
