// Quantization formats: FP8 E4M3 codes, the block formats' round-trip error, their bit layouts as GGUF lays
// them out, block codes on the grid, and the half-precision conversions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/fp16.h"
#include "quant/block_grid.h"
#include "quant/blocks.h"
#include "quant/fp8.h"
#include "quant/quantize.h"
#include "block_test_support.h"
#include "test_support.h"

namespace kestrel {
namespace {

using test::kBlockTypes;
using test::quantized;

using test::gaussian_vector;

// FP8 E4M3: every finite code decodes and encodes back to itself; encoding picks the nearest code (ties to
// an even mantissa) and saturates at 448; the F16 widening the vector kernels use is exact.
TEST(Quantize, Fp8E4M3Codes) {
  EXPECT_EQ(fp8_e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // the smallest normal
  EXPECT_EQ(fp8_e4m3_to_float(0xC0), -2.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7F)));
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    const auto code = static_cast<uint8_t>(c);
    EXPECT_EQ(float_to_fp8_e4m3(fp8_e4m3_to_float(code)), code) << c;
    EXPECT_EQ(fp16_to_fp32(fp8_e4m3_to_fp16_scaled(code)) * 256.0f, fp8_e4m3_to_float(code)) << c;
  }
  EXPECT_EQ(float_to_fp8_e4m3(1000.0f), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(-1e30f), 0xFE);
  EXPECT_EQ(float_to_fp8_e4m3(1.0625f), 0x38);  // halfway between 1 (even) and 1.125
  EXPECT_EQ(float_to_fp8_e4m3(1.1875f), 0x3A);  // halfway between 1.125 and 1.25 (even)
  EXPECT_EQ(float_to_fp8_e4m3(1e-4f), 0x00);    // below half the smallest subnormal
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-500.0f, 500.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = d(rng) * std::ldexp(1.0f, -static_cast<int>(rng() % 14));
    const float got = fp8_e4m3_to_float(float_to_fp8_e4m3(x));
    for (int c = 0; c < 255; ++c) {
      if ((c & 0x7F) == 0x7F) continue;
      ASSERT_LE(std::fabs(got - std::clamp(x, -448.0f, 448.0f)),
                std::fabs(fp8_e4m3_to_float(static_cast<uint8_t>(c)) - std::clamp(x, -448.0f, 448.0f)))
          << x << " code " << c;
    }
  }
}

TEST(Quantize, RoundTripErrorWithinFormatBounds) {
  const size_t n = 4096;
  const auto x = gaussian_vector(n, 5, 1.0f);
  // Relative RMS error bounds for Gaussian data, generous versions of the formats' typical figures.
  const std::pair<DType, double> bounds[] = {{DType::F32, 0},      {DType::F16, 1e-3},  {DType::BF16, 5e-3},
                                             {DType::Q8_0, 0.01},  {DType::Q4_0, 0.15}, {DType::Q4_1, 0.15},
                                             {DType::Q5_0, 0.08},  {DType::Q5_1, 0.08}, {DType::Q4_K, 0.12},
                                             {DType::Q5_K, 0.07},  {DType::Q6_K, 0.04}, {DType::FP8_E4M3, 0.035},
                                             {DType::Q3_K, 0.25},  {DType::Q2_K, 0.45}};
  for (const auto& [type, bound] : bounds) {
    const auto bytes = quantized(type, x, n);
    std::vector<float> y(n);
    dequantize_row(type, bytes.data(), y.data(), n);
    double err = 0, ref = 0;
    for (size_t i = 0; i < n; ++i) {
      err += (x[i] - y[i]) * (x[i] - y[i]);
      ref += x[i] * x[i];
    }
    EXPECT_LE(std::sqrt(err / ref), bound) << dtype_name(type);
    if (type != DType::F32) {
      EXPECT_GT(std::sqrt(err / ref), 0.0) << dtype_name(type) << " should be lossy";
    }
  }
}

// The bit layouts of the 5-bit and min formats, built by hand as GGUF lays them out (ggml's block_q4_1,
// block_q5_0, block_q5_1 and block_q5_K), decode to the values the format defines.
TEST(Quantize, BlockFormatsDecodeAsGgufLaysThemOut) {
  std::vector<float> y(256);
  {
    BlockQ4_1 b{fp32_to_fp16(0.5f), fp32_to_fp16(-1.0f), {}};
    b.qs[0] = 0x3A;  // element 0: 10, element 16: 3
    dequantize_row(DType::Q4_1, &b, y.data(), 32);
    EXPECT_EQ(y[0], 0.5f * 10 - 1.0f);
    EXPECT_EQ(y[16], 0.5f * 3 - 1.0f);
    EXPECT_EQ(y[1], -1.0f);
  }
  {
    BlockQ5_0 b{fp32_to_fp16(0.25f), {0x01, 0x00, 0x01, 0x80}, {}};  // bits 0, 16 and 31 of qh
    b.qs[0] = 0x21;                                                  // element 0: 1 | 16, element 16: 2 | 16
    b.qs[15] = 0x70;                                                 // element 15: 0, element 31: 7 | 16
    dequantize_row(DType::Q5_0, &b, y.data(), 32);
    EXPECT_EQ(y[0], 0.25f * (17 - 16));
    EXPECT_EQ(y[16], 0.25f * (18 - 16));
    EXPECT_EQ(y[15], 0.25f * (0 - 16));
    EXPECT_EQ(y[31], 0.25f * (23 - 16));
    EXPECT_EQ(y[1], 0.25f * -16);
  }
  {
    BlockQ5_1 b{fp32_to_fp16(2.0f), fp32_to_fp16(0.5f), {0x00, 0x02, 0x00, 0x00}, {}};  // bit 9 of qh
    b.qs[9] = 0x0F;
    dequantize_row(DType::Q5_1, &b, y.data(), 32);
    EXPECT_EQ(y[9], 2.0f * 31 + 0.5f);
    EXPECT_EQ(y[25], 0.5f);
  }
  {
    BlockQ5_K b{};
    b.d = fp32_to_fp16(1.0f);
    b.dmin = fp32_to_fp16(0.5f);
    b.scales[1] = 3;       // sub-block 1: scale 3 (low 6 bits of byte 1)
    b.scales[5] = 2;       // ... min 2 (low 6 bits of byte 5)
    b.scales[8 + 1] = 0x45;  // sub-block 5: scale 5 | (top bits of byte 1) << 4, min 4 | ...
    b.qs[7] = 0x90;        // sub-blocks 0 and 1 share qs[0..31]: element 7 of sub-block 1 is 9
    b.qh[7] = 0x22;        // bit 4 for element 7 of sub-blocks 1 and 5
    b.qs[64 + 7] = 0x60;   // sub-blocks 4 and 5 share qs[64..95]: element 7 of sub-block 5 is 6
    dequantize_row(DType::Q5_K, &b, y.data(), 256);
    EXPECT_EQ(y[32 + 7], 1.0f * 3 * (9 + 16) - 0.5f * 2);
    EXPECT_EQ(y[160 + 7], 1.0f * 5 * (6 + 16) - 0.5f * 4);
    EXPECT_EQ(y[32 + 8], -0.5f * 2);
  }
}

// Q2_K and Q3_K as ggml's dequantize_row_q2_K / q3_K read them: element 128 h + 32 k + l in bits 2 k of
// qs[32 h + l]; Q3_K's bit 2 in bit 4 h + k of hmask[l] and its 6-bit scales split over 12 bytes.
TEST(Quantize, TwoAndThreeBitKQuantsDecodeAsGgufLaysThemOut) {
  std::vector<float> y(256);
  {
    BlockQ2_K b{};
    b.d = fp32_to_fp16(0.5f);
    b.dmin = fp32_to_fp16(0.25f);
    b.scales[5] = 0x37;         // sub-block 5 (elements 80..95): scale 7, min 3
    b.qs[16 + 3] = 0x04 << 2;   // h = 0, l = 19, k = 2: element 64 + 19 = 83 gets q = 1 ... (bits 4..5 = 01)
    b.qs[32 + 0] = 0xC0;        // h = 1, l = 0, k = 3: element 128 + 96 = 224 gets q = 3
    b.scales[14] = 0x12;        // sub-block 14 (224..239): scale 2, min 1
    dequantize_row(DType::Q2_K, &b, y.data(), 256);
    EXPECT_EQ(y[83], 0.5f * 7 * 1 - 0.25f * 3);
    EXPECT_EQ(y[84], -0.25f * 3);
    EXPECT_EQ(y[224], 0.5f * 2 * 3 - 0.25f * 1);
  }
  {
    BlockQ3_K b{};
    b.d = fp32_to_fp16(0.5f);
    // sub-block 9 (elements 144..159): low 4 bits in the high nibble of scales[1], top 2 at bits 4..5 of
    // scales[9]: code 0x25 = 37, factor 5
    b.scales[1] = 0x50;
    b.scales[9] = 0x20;
    b.qs[32 + 17] = 0x02 << 2;  // h = 1, k = 1, l = 17: element 128 + 32 + 17 = 177 ... low bits 2
    b.hmask[17] = 1 << 5;       // ... and bit 2 set (bit 4 h + k = 5): q = 6
    dequantize_row(DType::Q3_K, &b, y.data(), 256);
    // element 177 is in sub-block 11 (176..191): low 4 bits in the high nibble of scales[3] (0), top bits at
    // 4..5 of scales[11] (0): factor -32
    EXPECT_EQ(y[177], 0.5f * -32 * (6 - 4));
    EXPECT_EQ(y[150], 0.5f * 5 * (0 - 4));  // sub-block 9, q = 0 (no high bit)
  }
}

// Codes written by set_block_codes read back unchanged, and dequantize to their grid values.
TEST(Quantize, BlockCodesRoundTripOnTheGrid) {
  std::mt19937 rng(9);
  for (DType type : kBlockTypes) {
    if (!has_block_grid(type)) continue;  // the 2:4 types: a Q8_0 / Q4_0 block and positions
    SCOPED_TRACE(dtype_name(type));
    const auto& traits = dtype_traits(type);
    const auto x = gaussian_vector(traits.block_elems, 17);
    std::vector<uint8_t> block(traits.block_bytes);
    quantize_row(type, x.data(), block.data(), traits.block_elems);
    const BlockGrid grid = block_grid(type, block.data());
    std::vector<uint8_t> codes(traits.block_elems), back(traits.block_elems);
    for (auto& c : codes) c = static_cast<uint8_t>(rng() % static_cast<uint32_t>(grid.levels));
    set_block_codes(type, block.data(), codes.data());
    block_codes(type, block.data(), back.data());
    EXPECT_EQ(back, codes);
    std::vector<float> y(traits.block_elems);
    dequantize_row(type, block.data(), y.data(), traits.block_elems);
    for (uint32_t i = 0; i < traits.block_elems; ++i)
      EXPECT_NEAR(y[i], grid.value(static_cast<int>(i), codes[i]), 1e-6f * (1 + std::fabs(y[i]))) << i;
  }
}

TEST(Quantize, HalfPrecisionConversions) {
  for (float f : {0.f, -0.f, 1.f, -2.5f, 65504.f, 6.1035156e-05f, 5.9604645e-08f, 3.14159f}) {
    EXPECT_NEAR(fp16_to_fp32(fp32_to_fp16(f)), f, std::fabs(f) * 1e-3 + 1e-7);
    EXPECT_NEAR(bf16_to_fp32(fp32_to_bf16(f)), f, std::fabs(f) * 8e-3);
  }
  EXPECT_TRUE(std::isinf(fp16_to_fp32(fp32_to_fp16(1e6f))));
  // Every fp16 value survives fp16 -> fp32 -> fp16 exactly (NaNs stay NaN).
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_fp16(f), h) << h;
  }
}

}  // namespace
}  // namespace kestrel
