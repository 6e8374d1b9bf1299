// Saved log-probabilities (`kestrel perplexity --kl-divergence-base`): the chunks a perplexity run scored and,
// per chunk, the log-softmax rows of its scored positions, so a later run under another configuration can
// measure its KL divergence from them.
//
// Format (little-endian): "KSTLPB01", int32 n_ctx, n_vocab, n_chunks, int32 tokens[n_chunks][n_ctx], then
// float32 rows[n_chunks][n_scored][n_vocab] with n_scored = n_ctx - n_ctx / 2 - 1. The file's size must
// be exactly what its header says.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace kestrel {

class LogProbFile {
 public:
  ~LogProbFile();
  // Writes the header and the chunks' tokens; rows follow with write_rows, chunk by chunk.
  static Result<std::unique_ptr<LogProbFile>> create(const std::string& path, int32_t n_ctx, int32_t n_vocab,
                                                     const std::vector<std::vector<int32_t>>& chunks);
  // Reads and checks the header and the tokens; rows follow with read_rows, chunk by chunk.
  static Result<std::unique_ptr<LogProbFile>> open(const std::string& path);
  // The same from an open stream (taken over; closed by the object).
  static Result<std::unique_ptr<LogProbFile>> read(FILE* stream, const std::string& name);

  int32_t n_ctx() const { return n_ctx_; }
  int32_t n_vocab() const { return n_vocab_; }
  int32_t n_scored() const { return n_ctx_ - n_ctx_ / 2 - 1; }
  const std::vector<std::vector<int32_t>>& chunks() const { return chunks_; }  // [n_chunks][n_ctx]

  // One chunk's rows: [n_scored, n_vocab].
  Status write_rows(const std::vector<float>& rows);
  Status read_rows(std::vector<float>& rows);
  Status close();  // flushes a written file

 private:
  LogProbFile(FILE* f, std::string name) : file_(f), name_(std::move(name)) {}
  FILE* file_;
  std::string name_;
  int32_t n_ctx_ = 0, n_vocab_ = 0;
  std::vector<std::vector<int32_t>> chunks_;
};

}  // namespace kestrel
