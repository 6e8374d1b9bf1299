// KV cache element types, and how one token's row of K or V (one KV head) is encoded in a page.
// Float types store elements. Quantized types store one code per value plus one fp16 scale per group of
// kv_group_size(dim) consecutive values (32, or the whole row when it is shorter); a value decodes as
// kv_code_value(type, code) * scale:
//   q8_0  int8 codes, scale = max|x| / 127 (llama.cpp's q8_0 rule)                        8.5 bits/value
//   q4_0  4-bit codes c - 8, scale = (the value of largest magnitude) / -8 (llama.cpp's q4_0)  4.5 bits
//   fp8   E4M3 codes (subnormals kept, 448 largest), scale = max|x| / 448                   8.5 bits
//   tq4   4-bit index into the 16-level Lloyd-Max codebook of a unit Gaussian, after the row is rotated
//         (kv_rotate: a randomized Hadamard transform makes each coordinate near-Gaussian); the scale is the
//         least-squares fit of the levels to the group, the best of a few starting scales   4.5 bits
//   tq3   the same with the 8-level codebook                                                3.5 bits
// Where codes and scales lie in a page is KvLayerView's business (compute/kv_layer_view.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kestrel {

enum class KvType { F32, F16, BF16, Q8_0, Q4_0, FP8, TQ4, TQ3 };
inline constexpr KvType kAllKvTypes[] = {KvType::F32,  KvType::F16, KvType::BF16, KvType::Q8_0,
                                         KvType::Q4_0, KvType::FP8, KvType::TQ4,  KvType::TQ3};

const char* kv_type_name(KvType t);
std::optional<KvType> parse_kv_type(std::string_view name);  // llama.cpp's names: f16, q8_0, ...; case-insensitive

inline bool kv_type_quantized(KvType t) { return t >= KvType::Q8_0; }
inline bool kv_type_rotated(KvType t) { return t == KvType::TQ4 || t == KvType::TQ3; }
// Bits per code (quantized) or per element (float types).
int kv_type_bits(KvType t);

constexpr int kKvGroup = 32;  // values per scale
// Values per scale for rows of dim values: 32, else 16 or 8 where they divide the row (latent attention's
// 64 + 16), else the whole row when it is shorter than 32 (0: no grouping fits; kv_row_check says so).
inline int kv_group_size(int dim) {
  for (int g = kKvGroup; g >= 8; g /= 2)
    if (dim % g == 0) return g;
  return dim < kKvGroup ? dim : 0;
}
// Empty when rows of `dim` values can be stored as t, else why not.
std::string kv_row_check(KvType t, int dim);
// Bytes of one row's codes (quantized types), and of the whole row in a page: elements, or codes and scales.
size_t kv_code_bytes(KvType t, int dim);
size_t kv_row_bytes(KvType t, int dim);

// The element types of K and of V. Converts from one type (both the same).
struct KvTypes {
  KvType k = KvType::F16;
  KvType v = KvType::F16;
  constexpr KvTypes() = default;
  constexpr KvTypes(KvType both) : k(both), v(both) {}  // NOLINT(google-explicit-constructor): a type is a pair
  constexpr KvTypes(KvType k_type, KvType v_type) : k(k_type), v(v_type) {}
  bool operator==(const KvTypes&) const = default;
  std::string name() const;  // "q8_0", or "q8_0/f16" when they differ
};

// Quantizes x[dim] (already rotated for tq types) into codes[dim] (one per value) and scales[dim / group]
// (fp16 bits). t must be quantized.
void kv_quantize_row(KvType t, const float* x, int dim, uint8_t* codes, uint16_t* scales);
// What one code stands for before its scale.
float kv_code_value(KvType t, uint8_t code);
// tq4's 16 and tq3's 8 levels (Lloyd-Max for N(0, 1), ascending; tq3's padded to 16 with its last level).
const float* kv_codebook(KvType t);
// E4M3 code of x (round to nearest even, saturating at +-448), and its value.
uint8_t fp8_e4m3_encode(float x);
float fp8_e4m3_decode(uint8_t code);

}  // namespace kestrel
