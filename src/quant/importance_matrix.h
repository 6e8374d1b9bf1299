// The importance matrix of a model: for every weight matrix, the mean square of each input channel's
// activations over a calibration text (model/calibration.h measures it), which importance-weighted
// quantization (quant/importance_quantize.h) weights each weight's error by. Also read from and written
// to llama.cpp's imatrix files, so importance measured by either tool serves the other.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace kestrel {

struct ImportanceMatrix {
  struct Entry {
    int64_t n_in = 0;
    int64_t n_slices = 1;                // experts (or heads) of a 3-D tensor, else 1
    std::vector<float> mean_square;      // [n_slices][n_in]
    std::vector<int64_t> tokens;         // [n_slices] how many rows each slice saw
    std::vector<float> max_abs;          // [n_slices][n_in] the largest |x_j| seen; empty where not measured
                                         // (llama.cpp's files do not carry it)
  };
  std::map<std::string, Entry> tensors;  // by tensor name; only matrices some token reached

  // The importance of slice `slice` of tensor `name` ([n_in]), or null when it has none (never reached,
  // e.g. token_embd, which is looked up, not multiplied).
  const float* find(const std::string& name, int64_t slice) const;
  // The largest |x_j| of slice `slice` of tensor `name` ([n_in]), or null when not measured.
  const float* find_max_abs(const std::string& name, int64_t slice) const;

  // Gives entries read from a file (one flat slice each) their tensors' row lengths: n_in = row_length[name],
  // n_slices = values / n_in. Entries for tensors not in the map are dropped (a file made for a model with
  // other tensors). Error: a tensor whose values do not split into its rows.
  Status fit_rows(const std::map<std::string, int64_t>& row_length);
};

// llama.cpp's imatrix file (as llama-imatrix writes it, little-endian): int32 entry count; per entry
// int32 name length, the name, int32 ncall, int32 value count, float values — each the mean square times
// ncall (readers divide by it); then int32 chunk count and int32 length + the calibration file's name.
// Entries with a slice no token reached are left out, as llama-imatrix does.
std::vector<uint8_t> serialize_imatrix(const ImportanceMatrix& m, int32_t chunks, const std::string& dataset);
Status write_imatrix_file(const ImportanceMatrix& m, int32_t chunks, const std::string& dataset, const std::string& path);

// Parses such a file: each entry as one slice of n_in = its value count, tokens = {ncall} (fit_rows gives
// entries their shape). Errors: truncated data, negative or implausible counts or lengths, ncall <= 0,
// non-finite or negative values, a name given twice.
Result<ImportanceMatrix> parse_imatrix(std::span<const uint8_t> bytes);
Result<ImportanceMatrix> read_imatrix_file(const std::string& path);

}  // namespace kestrel
