#include "io/logprob_file.h"

#include <cstring>

namespace kestrel {
namespace {
constexpr char kMagic[8] = {'K', 'S', 'T', 'L', 'P', 'B', '0', '1'};
constexpr long kHeaderBytes = 8 + 3 * 4;
}  // namespace

LogProbFile::~LogProbFile() {
  if (file_) std::fclose(file_);
}

Result<std::unique_ptr<LogProbFile>> LogProbFile::create(const std::string& path, int32_t n_ctx, int32_t n_vocab,
                                                         const std::vector<std::vector<int32_t>>& chunks) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Error{"cannot create '" + path + "'"};
  std::unique_ptr<LogProbFile> out(new LogProbFile(f, path));
  out->n_ctx_ = n_ctx, out->n_vocab_ = n_vocab, out->chunks_ = chunks;
  const int32_t header[3] = {n_ctx, n_vocab, static_cast<int32_t>(chunks.size())};
  bool ok = std::fwrite(kMagic, 1, 8, f) == 8 && std::fwrite(header, 4, 3, f) == 3;
  for (const auto& c : chunks) ok = ok && c.size() == static_cast<size_t>(n_ctx) && std::fwrite(c.data(), 4, c.size(), f) == c.size();
  if (!ok) return Error{"failed writing '" + path + "'"};
  return out;
}

Result<std::unique_ptr<LogProbFile>> LogProbFile::open(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Error{"cannot read '" + path + "'"};
  return read(f, path);
}

Result<std::unique_ptr<LogProbFile>> LogProbFile::read(FILE* f, const std::string& name) {
  std::unique_ptr<LogProbFile> in(new LogProbFile(f, name));
  char magic[8];
  int32_t header[3];
  if (std::fread(magic, 1, 8, f) != 8 || std::memcmp(magic, kMagic, 8) != 0 || std::fread(header, 4, 3, f) != 3)
    return Error{"'" + name + "' is not a kestrel perplexity base file (written by --kl-divergence-base alone)"};
  const int32_t n_ctx = header[0], n_vocab = header[1], n_chunks = header[2];
  if (n_ctx < 4 || n_ctx > (1 << 24) || n_vocab < 1 || n_vocab > (1 << 24) || n_chunks < 1 || n_chunks > (1 << 20))
    return Error{"'" + name + "' has an impossible header (n_ctx " + std::to_string(n_ctx) + ", n_vocab " +
                 std::to_string(n_vocab) + ", " + std::to_string(n_chunks) + " chunks)"};
  in->n_ctx_ = n_ctx, in->n_vocab_ = n_vocab;
  if (std::fseek(f, 0, SEEK_END) != 0) return Error{"cannot seek in '" + name + "'"};
  const long size = std::ftell(f);
  const double expected = kHeaderBytes + 4.0 * n_chunks * n_ctx + 4.0 * n_chunks * in->n_scored() * static_cast<double>(n_vocab);
  if (static_cast<double>(size) != expected)
    return Error{"'" + name + "' has " + std::to_string(size) + " bytes; its header says " +
                 std::to_string(static_cast<long long>(expected)) + " (truncated or not a base file)"};
  if (std::fseek(f, kHeaderBytes, SEEK_SET) != 0) return Error{"cannot seek in '" + name + "'"};
  in->chunks_.resize(static_cast<size_t>(n_chunks));
  for (auto& c : in->chunks_) {
    c.resize(static_cast<size_t>(n_ctx));
    if (std::fread(c.data(), 4, c.size(), f) != c.size()) return Error{"'" + name + "' is truncated"};
    for (int32_t t : c)
      if (t < 0 || t >= n_vocab) return Error{"'" + name + "' holds token id " + std::to_string(t) + " outside its vocabulary"};
  }
  return in;
}

Status LogProbFile::write_rows(const std::vector<float>& rows) {
  if (rows.size() != static_cast<size_t>(n_scored()) * static_cast<size_t>(n_vocab_)) return Error{"write_rows: wrong row count"};
  if (std::fwrite(rows.data(), 4, rows.size(), file_) != rows.size()) return Error{"failed writing '" + name_ + "'"};
  return {};
}

Status LogProbFile::read_rows(std::vector<float>& rows) {
  rows.resize(static_cast<size_t>(n_scored()) * static_cast<size_t>(n_vocab_));
  if (std::fread(rows.data(), 4, rows.size(), file_) != rows.size()) return Error{"'" + name_ + "' is truncated"};
  for (float v : rows)
    if (!(v <= 0.0f)) return Error{"'" + name_ + "' holds a log-probability above 0 or NaN"};
  return {};
}

Status LogProbFile::close() {
  FILE* f = file_;
  file_ = nullptr;
  if (!f) return {};
  if (std::fclose(f) != 0) return Error{"failed writing '" + name_ + "'"};
  return {};
}

}  // namespace kestrel
