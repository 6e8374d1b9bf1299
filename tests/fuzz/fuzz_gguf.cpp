// libFuzzer target: any byte string given to the GGUF reader must parse or fail with an error, and a
// file that parses must describe only bytes inside it; a parsed file also goes through model binding
// and the tokenizer loader.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "io/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = kestrel::GgufFile::parse(kestrel::MappedFile::from_memory(data, size));
  if (!file.ok()) {
    if (file.error().empty()) std::abort();
    return 0;
  }
  for (const auto& t : file->tensors())
    if (t.data < data || t.data + t.n_bytes > data + size) std::abort();
  for (const auto& key : file->keys()) (void)file->find(key)->to_display_string();
  auto tokenizer = kestrel::Tokenizer::from_gguf(file.value());
  if (tokenizer.ok() && tokenizer->has_vocab()) {
    const auto ids = tokenizer->encode("Hello world <s> \xE2\x96\x81 123", true, true);
    (void)tokenizer->decode(ids);
  }
  (void)kestrel::Model::from_file(std::move(file).value());
  return 0;
}
