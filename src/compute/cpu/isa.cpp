#include "compute/cpu/isa.h"

#include <cstdlib>
#include <cstring>

namespace kestrel {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

namespace {
Isa hardware_isa() {
#if defined(__x86_64__) && defined(KESTREL_HAVE_X86_KERNELS)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    return Isa::Avx2;
#endif
  return Isa::Scalar;
}
}  // namespace

std::vector<Isa> runnable_isas() {
  std::vector<Isa> out;
  const Isa hw = hardware_isa();
  for (int i = 0; i <= static_cast<int>(hw); ++i) out.push_back(static_cast<Isa>(i));
  return out;
}

Isa detected_isa() {
  static const Isa isa = [] {
    const Isa hw = hardware_isa();
    if (const char* forced = std::getenv("KESTREL_ISA")) {
      for (Isa candidate : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
        if (std::strcmp(forced, isa_name(candidate)) == 0 && candidate <= hw) return candidate;
    }
    return hw;
  }();
  return isa;
}

}  // namespace kestrel
