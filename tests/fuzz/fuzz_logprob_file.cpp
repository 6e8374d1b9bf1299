// libFuzzer target: any byte string read as a perplexity base file (io/logprob_file.h) must load or fail
// with an error; a file that loads must give every chunk's rows and then refuse to read past its end.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "io/logprob_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  FILE* f = fmemopen(const_cast<uint8_t*>(data), size, "rb");
  if (!f) return 0;
  auto file = kestrel::LogProbFile::read(f, "fuzz input");
  if (!file.ok()) {
    if (file.error().empty()) std::abort();
    return 0;
  }
  std::vector<float> rows;
  for (size_t c = 0; c < file.value()->chunks().size(); ++c)
    if (!file.value()->read_rows(rows).ok()) return 0;  // a NaN or positive value is refused
  if (file.value()->read_rows(rows).ok()) std::abort();  // nothing after the last chunk
  return 0;
}
