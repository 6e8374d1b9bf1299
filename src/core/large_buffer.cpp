#include "core/large_buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

namespace kestrel {

std::shared_ptr<uint8_t[]> allocate_large_buffer(size_t n) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t align = n >= kHuge ? kHuge : 64;
  const size_t size = (n + align - 1) / align * align;
  void* p = std::aligned_alloc(align, size == 0 ? align : size);
  if (!p) throw std::bad_alloc();
#if defined(MADV_HUGEPAGE)
  if (align == kHuge) madvise(p, size, MADV_HUGEPAGE);  // advice only: failure leaves normal pages
#endif
  std::memset(p, 0, size);
  return std::shared_ptr<uint8_t[]>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

}  // namespace kestrel
