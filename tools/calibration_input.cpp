// The calibration inputs `kestrel quantize` and `kestrel prune` share: a text cut into chunks of tokens,
// or an importance matrix file.
#include <cstdio>
#include <map>

#include "common.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {

std::vector<std::vector<int32_t>> calibration_chunks(const Model& model, const std::string& text_file, int ctx, int max_chunks) {
  std::string text;
  if (!read_text_file(text_file, text)) return {};
  auto tokenizer = Tokenizer::from_gguf(model.file());
  if (!tokenizer.ok() || !tokenizer->has_vocab()) {
    std::fprintf(stderr, "error: %s\n", tokenizer.ok() ? "the model has no tokenizer vocabulary" : tokenizer.error().c_str());
    return {};
  }
  const std::vector<int32_t> tokens = tokenizer->encode(text, true, false);
  const int32_t bos = !tokens.empty() && tokens[0] == tokenizer->vocab().bos ? tokens[0] : -1;
  std::vector<std::vector<int32_t>> chunks;
  const size_t n = static_cast<size_t>(ctx);
  for (size_t at = 0; at + n <= tokens.size() || (chunks.empty() && at < tokens.size()); at += n) {
    chunks.emplace_back(tokens.begin() + static_cast<std::ptrdiff_t>(at),
                        tokens.begin() + static_cast<std::ptrdiff_t>(std::min(at + n, tokens.size())));
    if (bos >= 0) chunks.back()[0] = bos;
    if (max_chunks > 0 && static_cast<int>(chunks.size()) == max_chunks) break;
  }
  if (chunks.empty()) std::fprintf(stderr, "error: the calibration text has no tokens\n");
  return chunks;
}

bool load_imatrix(const std::string& imatrix_path, const std::string& model_path, ImportanceMatrix& importance) {
  auto read = read_imatrix_file(imatrix_path);
  auto file = GgufFile::open(model_path);
  if (!read.ok() || !file.ok()) {
    std::fprintf(stderr, "error: %s\n", read.ok() ? file.error().c_str() : read.error().c_str());
    return false;
  }
  std::map<std::string, int64_t> rows;
  for (const TensorView& t : file->tensors()) rows[t.name] = t.ne[0];
  importance = std::move(read).value();
  if (Status fit = importance.fit_rows(rows); !fit.ok()) {
    std::fprintf(stderr, "error: %s: %s\n", imatrix_path.c_str(), fit.error().c_str());
    return false;
  }
  std::fprintf(stderr, "importance matrix: %zu tensors from %s\n", importance.tensors.size(), imatrix_path.c_str());
  return true;
}

}  // namespace kestrel::cli
