// Encoding one block from chosen scales: the codes are the nearest levels under the given (sub-block)
// scales, after the scales themselves are stored as the format stores them (fp16, or 6- / 8-bit
// sub-block scales under a super-block scale). Round-to-nearest quantization (quant/quantize.h) and the
// importance-weighted search (quant/importance_quantize.h) differ only in how they choose the scales.
#pragma once
#include "quant/blocks.h"

namespace kestrel {

// x[32] ~ d * q, q = round(x / d) in [-127, 127].
void pack_q8_0(const float* x, float d, BlockQ8_0& b);
// x[32] ~ d * (q - 8), q = floor(x / d + 8.5) in [0, 15] (d may be negative: the value of largest magnitude
// maps to q = 0 when d = that value / -8).
void pack_q4_0(const float* x, float d, BlockQ4_0& b);
// x[32] ~ d * q + m, q = round((x - m) / d) in [0, 15] (d >= 0).
void pack_q4_1(const float* x, float d, float m, BlockQ4_1& b);
// x[32] ~ d * (q - 16), q = floor(x / d + 16.5) in [0, 31] (d may be negative, as for Q4_0).
void pack_q5_0(const float* x, float d, BlockQ5_0& b);
// x[32] ~ d * q + m, q = round((x - m) / d) in [0, 31] (d >= 0).
void pack_q5_1(const float* x, float d, float m, BlockQ5_1& b);
// x[256] ~ scales[j] * q - mins[j] per sub-block j of 32 (scales, mins >= 0), q in [0, 15]; the 8 scales
// and mins are stored as 6-bit multiples of d = max scale / 63 and dmin = max min / 63.
void pack_q4_k(const float* x, const float* scales, const float* mins, BlockQ4_K& b);
// The same for Q5_K, q in [0, 31].
void pack_q5_k(const float* x, const float* scales, const float* mins, BlockQ5_K& b);
// x[256] ~ scales[j] * q - mins[j] per sub-block j of 16 (scales, mins >= 0), q in [0, 3]; the 16 scales and
// mins are stored as 4-bit multiples of d = max scale / 15 and dmin = max min / 15.
void pack_q2_k(const float* x, const float* scales, const float* mins, BlockQ2_K& b);
// x[256] ~ scales[j] * q per sub-block j of 16, q in [-4, 3]; the 16 scales are stored as 6-bit multiples
// (-32 .. 31) of d = (the scale of largest magnitude) / -32.
void pack_q3_k(const float* x, const float* scales, BlockQ3_K& b);
// x[256] ~ scales[j] * q per sub-block j of 16, q in [-32, 31]; the 16 scales are stored as int8
// multiples of d = (the scale of largest magnitude) / -128.
void pack_q6_k(const float* x, const float* scales, BlockQ6_K& b);

}  // namespace kestrel
