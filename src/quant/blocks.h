// Byte layouts of the quantized block formats that GGUF files use (facts of the format).
#pragma once
#include <cstdint>

namespace kestrel {

constexpr int kQK = 32;    // elements per Q4_0 / Q8_0 block
constexpr int kQK_K = 256;  // elements per K-quant super-block

// 32 weights: w = d * q, q in [-127, 127].
struct BlockQ8_0 {
  uint16_t d;      // fp16 scale
  int8_t qs[kQK];  // [32]
};
static_assert(sizeof(BlockQ8_0) == 34);

// 32 weights (kestrel's FP8_E4M3 type): w = d * e4m3(q), q an FP8 E4M3 code (quant/fp8.h); d = max|w| / 448.
struct BlockFP8 {
  uint16_t d;       // fp16 scale
  uint8_t qs[kQK];  // [32] E4M3 codes
};
static_assert(sizeof(BlockFP8) == 34);

// 32 weights: w = d * (q - 8), q in [0, 15]; element j in the low nibble of qs[j], element j+16 in the high.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];  // [16]
};
static_assert(sizeof(BlockQ4_0) == 18);

// 32 weights: w = d * q + m, q in [0, 15]; nibbles as in Q4_0.
struct BlockQ4_1 {
  uint16_t d;           // fp16 scale
  uint16_t m;           // fp16 min (the value of q = 0)
  uint8_t qs[kQK / 2];  // [16]
};
static_assert(sizeof(BlockQ4_1) == 20);

// 32 weights: w = d * (q - 16), q in [0, 31]: the low 4 bits as Q4_0's nibbles, bit 4 of element j in bit j
// of the little-endian 32-bit qh.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];  // [16]
};
static_assert(sizeof(BlockQ5_0) == 22);

// 32 weights: w = d * q + m, q in [0, 31], bits as in Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];  // [16]
};
static_assert(sizeof(BlockQ5_1) == 24);

// 256 weights in 16 sub-blocks of 16: w = d * (scales[j] & 0xF) * q - dmin * (scales[j] >> 4), q in [0, 3].
// Element e = 128 h + 32 k + l (h < 2, k < 4, l < 32) has q = (qs[32 h + l] >> 2 k) & 3.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // [16] 4-bit scale (low) and min (high) per sub-block
  uint8_t qs[kQK_K / 4];       // [64]
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

// 256 weights in 16 sub-blocks of 16: w = d * (sc[j] - 32) * (q - 4), q in [0, 7], sc 6-bit (q3_k_scale).
// Element e = 128 h + 32 k + l has the low 2 bits of q in (qs[32 h + l] >> 2 k) & 3 and bit 2 in bit 4 h + k
// of hmask[l].
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];  // [32]
  uint8_t qs[kQK_K / 4];     // [64]
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

// The 6-bit scale (0..63, the weight's factor is that minus 32) of sub-block j (0..15) of a Q3_K block: the low
// 4 bits in the low (j < 8) or high (j >= 8) nibble of scales[j % 8], the high 2 bits at bit 2 (j / 4) of
// scales[8 + j % 4].
static inline int q3_k_scale(int j, const uint8_t* scales) {
  const int low = j < 8 ? (scales[j] & 0xF) : (scales[j - 8] >> 4);
  return low | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

// 256 weights in 8 sub-blocks of 32: w = d * sc[j] * q - dmin * m[j], with 6-bit sc/m packed in scales[12]
// and 4-bit q. Sub-block pairs (2i, 2i+1) share 32 bytes of qs: low nibbles, then high nibbles.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];  // [128]
};
static_assert(sizeof(BlockQ4_K) == 144);

// 256 weights as Q4_K with 5-bit q in [0, 31]: the low 4 bits in qs as Q4_K's, bit 4 of element l of sub-block
// j in bit j of qh[l].
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];  // [32]
  uint8_t qs[kQK_K / 2];  // [128]
};
static_assert(sizeof(BlockQ5_K) == 176);

// 256 weights in 16 sub-blocks of 16: w = d * scales[j] * (q - 32), q 6 bits split into ql (low 4) and qh (high 2).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // [128]
  uint8_t qh[kQK_K / 4];      // [64]
  int8_t scales[kQK_K / 16];  // [16]
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K block. `static` so that each ISA-specific
// file gets its own copy compiled for its ISA (no cross-ISA merging of inline definitions).
static inline void q4_k_scale_min(int j, const uint8_t* q, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace kestrel
