// Large, long-lived buffers (packed weights, KV pages) that each decode step streams end to end: aligned
// to 2 MiB and marked for transparent huge pages, so streaming them takes 512x fewer TLB entries. Where
// the kernel gives no huge pages the memory is simply 2 MiB-aligned.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace kestrel {

// n bytes, zeroed; 64-byte aligned (2 MiB aligned and huge-page advised from 2 MiB up).
std::shared_ptr<uint8_t[]> allocate_large_buffer(size_t n);

}  // namespace kestrel
