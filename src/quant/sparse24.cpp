#include "quant/sparse24.h"

#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/importance_quantize.h"
#include "quant/quantize.h"

namespace kestrel {
namespace {

size_t block_bytes(DType type) { return dtype_traits(type).block_bytes; }
// Bytes of the kept values at the start of a block; the 8 index bytes follow.
size_t kept_bytes(DType type) { return block_bytes(type) - 8; }

// The two positions kept in group w[4]: the two of largest magnitude (the first on ties), ascending.
void keep_two(const float* w, int& p0, int& p1) {
  int a = 0, b = 1;  // a: the largest so far, b: the second
  if (std::fabs(w[1]) > std::fabs(w[0])) a = 1, b = 0;
  for (int i = 2; i < 4; ++i) {
    if (std::fabs(w[i]) > std::fabs(w[a])) b = a, a = i;
    else if (std::fabs(w[i]) > std::fabs(w[b])) b = i;
  }
  p0 = a < b ? a : b;
  p1 = a < b ? b : a;
}

}  // namespace

DType sparse24_value_type(DType t) {
  switch (t) {
    case DType::S24_Q8: return DType::Q8_0;
    case DType::S24_Q4: return DType::Q4_0;
    default: return DType::F16;
  }
}

std::optional<DType> sparse24_type_for(DType values) {
  switch (values) {
    case DType::F16: return DType::S24_F16;
    case DType::Q8_0: return DType::S24_Q8;
    case DType::Q4_0: return DType::S24_Q4;
    default: return std::nullopt;
  }
}

void dequantize_sparse24_row(DType type, const void* row, float* out, size_t n) {
  const auto* block = static_cast<const uint8_t*>(row);
  const DType values = sparse24_value_type(type);
  float kept[kS24Kept];
  for (size_t b = 0; b < n / kS24Block; ++b, block += block_bytes(type)) {
    dequantize_row(values, block, kept, kS24Kept);
    const uint8_t* idx = block + kept_bytes(type);
    float* y = out + b * kS24Block;
    std::memset(y, 0, kS24Block * sizeof(float));
    for (int j = 0; j < kS24Kept; ++j) y[4 * (j / 2) + sparse24_position(idx, j)] = kept[j];
  }
}

void quantize_sparse24_row(DType type, const float* in, void* row, size_t n, const float* importance) {
  auto* block = static_cast<uint8_t*>(row);
  const DType values = sparse24_value_type(type);
  float kept[kS24Kept], kept_importance[kS24Kept];
  for (size_t b = 0; b < n / kS24Block; ++b, block += block_bytes(type)) {
    const size_t at = b * kS24Block;
    uint8_t* idx = block + kept_bytes(type);
    std::memset(idx, 0, 8);
    for (int g = 0; g < kS24Block / 4; ++g) {
      int p[2];
      keep_two(in + at + 4 * g, p[0], p[1]);
      for (int s = 0; s < 2; ++s) {
        const int j = 2 * g + s;
        kept[j] = in[at + 4 * g + p[s]];
        if (importance) kept_importance[j] = importance[at + 4 * g + p[s]];
        idx[j / 4] = static_cast<uint8_t>(idx[j / 4] | p[s] << (2 * (j % 4)));
      }
    }
    if (importance) quantize_row_weighted(values, kept, block, kS24Kept, kept_importance);
    else quantize_row(values, kept, block, kS24Kept);
  }
}

bool is_2_4_sparse(const float* in, size_t n) {
  for (size_t g = 0; g + 4 <= n; g += 4) {
    int nonzero = 0;
    for (int i = 0; i < 4; ++i) nonzero += in[g + i] != 0.0f;
    if (nonzero > 2) return false;
  }
  return true;
}

}  // namespace kestrel
