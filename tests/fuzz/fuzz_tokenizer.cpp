// libFuzzer target: arbitrary text through the SentencePiece and BPE tokenizers (vocabularies from
// KESTREL_FUZZ_VOCABS, a colon-separated list of GGUF files), then streaming decode.
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace {
std::vector<std::unique_ptr<kestrel::Tokenizer>>& tokenizers() {
  static std::vector<std::unique_ptr<kestrel::Tokenizer>> list = [] {
    std::vector<std::unique_ptr<kestrel::Tokenizer>> out;
    const char* env = std::getenv("KESTREL_FUZZ_VOCABS");
    std::stringstream paths(env ? env : "");
    std::string path;
    while (std::getline(paths, path, ':')) {
      auto file = kestrel::GgufFile::open(path);
      if (!file.ok()) continue;
      auto t = kestrel::Tokenizer::from_gguf(file.value());
      if (t.ok()) out.push_back(std::make_unique<kestrel::Tokenizer>(std::move(t).value()));
    }
    if (out.empty()) std::abort();  // misconfigured run: no vocabulary to fuzz
    return out;
  }();
  return list;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const auto& t : tokenizers()) {
    const auto ids = t->encode(text, true, size % 2 == 0);
    kestrel::StreamDecoder decoder(*t);
    for (int32_t id : ids) {
      if (id < 0 || id >= t->vocab().n_tokens()) std::abort();
      (void)decoder.push(id);
    }
    (void)decoder.flush();
  }
  return 0;
}
