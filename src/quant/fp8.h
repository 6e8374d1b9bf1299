// FP8 E4M3 (the OCP "e4m3fn" encoding): sign, 4 exponent bits (bias 7), 3 mantissa bits; subnormals at
// exponent 0, no infinities, S.1111.111 is NaN, largest finite 448. kestrel's FP8_E4M3 weight type
// (core/dtype.h) stores blocks of 32 codes with one F16 scale (quant/blocks.h: BlockFP8).
#pragma once
#include <cstdint>

namespace kestrel {

constexpr float kFp8E4M3Max = 448.0f;

float fp8_e4m3_to_float(uint8_t code);
// The nearest code (ties to an even mantissa), saturating at +-448; NaN gives +-448 too (never NaN).
uint8_t float_to_fp8_e4m3(float x);
// The code as F16 bits of value / 256, exactly (subnormals included): the F16 exponent field holds
// E4M3's, whose bias is 8 less. Vector kernels widen codes to floats with the F16 conversion this way.
inline uint16_t fp8_e4m3_to_fp16_scaled(uint8_t code) {
  return static_cast<uint16_t>(((code & 0x80u) << 8) | ((code & 0x7Fu) << 7));
}

}  // namespace kestrel
