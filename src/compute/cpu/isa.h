// Instruction-set levels the CPU kernels are built for, detected at run time.
#pragma once
#include <string>
#include <vector>

namespace kestrel {

// Avx2: AVX2 + FMA + F16C. Avx512: AVX-512 F/BW/VL with VNNI (Zen 4, Ice Lake and later).
enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };

const char* isa_name(Isa isa);
// The best level this CPU runs (overridable with KESTREL_ISA=scalar|avx2|avx512 for testing).
Isa detected_isa();
// Every level this CPU can run, lowest first (tests hold each against the scalar reference).
std::vector<Isa> runnable_isas();
// AVX-512 BF16 dot products (vdpbf16ps), on top of the Avx512 level (Zen 4, Sapphire Rapids).
bool cpu_has_avx512_bf16();

}  // namespace kestrel
