// One cache line prefetched, as an instruction the compiler must emit: on x86 into L1 (prefetcht0) or L2 only
// (prefetcht1) as isa.h's prefetch_target() says for this CPU (read from prefetch_into_l2, set at start-up),
// on AArch64 into L1 (prfm pldl1keep). GCC 12 silently deleted __builtin_prefetch from the AVX-512 32-input
// GEMM tiles (every Q4_0, Q8_0, Q4_1, Q5_0 and Q5_1 decode ran without software prefetch), so every kernel
// prefetches through this instead. Reads nothing and cannot fault, so any address, even past the end of a
// buffer, is fine.
#pragma once

#include "compute/cpu/isa.h"

namespace kestrel {

inline void prefetch_line(const void* address) {
#if defined(__x86_64__) || defined(__i386__)
  if (prefetch_into_l2)
    asm volatile("prefetcht1 (%0)" : : "r"(address));
  else
    asm volatile("prefetcht0 (%0)" : : "r"(address));
#elif defined(__aarch64__)
  asm volatile("prfm pldl1keep, [%0]" : : "r"(address));
#else
  __builtin_prefetch(address);
#endif
}

}  // namespace kestrel
