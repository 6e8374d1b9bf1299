// libFuzzer target: any byte string read as an importance matrix file (quant/importance_matrix.h) must
// parse or fail with a message; what parses must write out and parse again to the same entries.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "quant/importance_matrix.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto m = kestrel::parse_imatrix(std::span<const uint8_t>(data, size));
  if (!m.ok()) {
    if (m.error().empty()) std::abort();
    return 0;
  }
  auto again = kestrel::parse_imatrix(kestrel::serialize_imatrix(m.value(), 1, "fuzz"));
  if (!again.ok() || again->tensors.size() > m->tensors.size()) std::abort();
  return 0;
}
