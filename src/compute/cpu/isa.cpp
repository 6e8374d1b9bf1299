#include "compute/cpu/isa.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace kestrel {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Neon: return "neon";
  }
  return "?";
}

bool isa_includes(Isa isa, Isa level) {
  if (level == Isa::Scalar || isa == level) return true;
  return isa == Isa::Avx512 && level == Isa::Avx2;
}

namespace {
#if defined(__x86_64__) && defined(KESTREL_HAVE_X86_KERNELS)
// CPUID feature bits plus the OS's consent (XCR0) to save the wider registers on context switches.
Isa hardware_isa() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return Isa::Scalar;
  const bool fma = ecx & (1u << 12), osxsave = ecx & (1u << 27), f16c = ecx & (1u << 29);
  if (!osxsave || !fma || !f16c) return Isa::Scalar;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool os_ymm = (xcr0_lo & 0x6u) == 0x6u, os_zmm = (xcr0_lo & 0xE6u) == 0xE6u;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return Isa::Scalar;
  const bool avx2 = ebx & (1u << 5), avx512f = ebx & (1u << 16), avx512bw = ebx & (1u << 30),
             avx512vl = ebx & (1u << 31), avx512vnni = ecx & (1u << 11);
  if (os_zmm && avx2 && avx512f && avx512bw && avx512vl && avx512vnni) return Isa::Avx512;
  if (os_ymm && avx2) return Isa::Avx2;
  return Isa::Scalar;
}
#elif defined(__aarch64__) && defined(__linux__) && defined(KESTREL_HAVE_NEON_KERNELS)
// The kernel's hardware capability bits (AT_HWCAP: asimd 1 << 1, fphp/asimdhp 1 << 9 / 1 << 10,
// asimddp 1 << 20).
Isa hardware_isa() {
  const unsigned long hw = getauxval(AT_HWCAP);
  const bool asimd = hw & (1ul << 1), fp16 = (hw & (1ul << 9)) && (hw & (1ul << 10)), dotprod = hw & (1ul << 20);
  return asimd && fp16 && dotprod ? Isa::Neon : Isa::Scalar;
}
#else
Isa hardware_isa() { return Isa::Scalar; }
#endif
}  // namespace

namespace {
// Whether this CPU is at the Avx512 level and CPUID leaf 7, subleaf `subleaf`, sets `bit` of register `reg`
// (0: eax, 1: ebx, 2: ecx, 3: edx).
bool avx512_extension(unsigned subleaf, int reg, unsigned bit) {
#if defined(__x86_64__) && defined(KESTREL_HAVE_X86_KERNELS)
  unsigned r[4];
  if (hardware_isa() < Isa::Avx512 || !__get_cpuid_count(7, subleaf, &r[0], &r[1], &r[2], &r[3])) return false;
  return (r[reg] & (1u << bit)) != 0;
#else
  (void)subleaf, (void)reg, (void)bit;
  return false;
#endif
}
}  // namespace

bool cpu_has_avx512_bf16() {
  static const bool has = avx512_extension(1, 0, 5);  // AVX512_BF16
  return has && detected_isa() == Isa::Avx512;
}

bool cpu_has_avx512_vbmi() {
  static const bool has = avx512_extension(0, 2, 1);  // AVX512_VBMI
  return has && detected_isa() == Isa::Avx512;
}

bool cpu_has_i8mm() {
#if defined(__aarch64__) && defined(__linux__) && defined(KESTREL_HAVE_NEON_KERNELS)
  static const bool has = (getauxval(AT_HWCAP2) & (1ul << 13)) != 0;  // HWCAP2_I8MM
  return has && detected_isa() == Isa::Neon;
#else
  return false;
#endif
}

const char* prefetch_target_name(PrefetchTarget target) { return target == PrefetchTarget::L2 ? "l2" : "l1"; }

PrefetchTarget prefetch_target() {
  static const PrefetchTarget target = [] {
    if (const char* forced = std::getenv("KESTREL_PREFETCH")) {
      for (PrefetchTarget candidate : {PrefetchTarget::L1, PrefetchTarget::L2})
        if (std::strcmp(forced, prefetch_target_name(candidate)) == 0) return candidate;
    }
#if defined(__x86_64__)
    unsigned max_leaf, vendor[3];  // CPUID leaf 0: the vendor string in ebx, edx, ecx
    if (__get_cpuid(0, &max_leaf, &vendor[0], &vendor[2], &vendor[1]) && std::memcmp(vendor, "GenuineIntel", 12) == 0)
      return PrefetchTarget::L2;
#endif
    return PrefetchTarget::L1;
  }();
  return target;
}

const bool prefetch_into_l2 = prefetch_target() == PrefetchTarget::L2;

std::vector<Isa> runnable_isas() {
  const Isa hw = hardware_isa();
  if (hw == Isa::Neon) return {Isa::Scalar, Isa::Neon};
  std::vector<Isa> out;
  for (int i = 0; i <= static_cast<int>(hw); ++i) out.push_back(static_cast<Isa>(i));
  return out;
}

Isa detected_isa() {
  static const Isa isa = [] {
    const Isa hw = hardware_isa();
    if (const char* forced = std::getenv("KESTREL_ISA")) {
      for (Isa candidate : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon})
        if (std::strcmp(forced, isa_name(candidate)) == 0 && isa_includes(hw, candidate)) return candidate;
    }
    return hw;
  }();
  return isa;
}

}  // namespace kestrel
