#include "compute/kv_quant.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/fp16.h"

namespace kestrel {
namespace {

// Lloyd-Max quantizers of a unit Gaussian (the fixed points of Lloyd's iteration; checked by a test).
constexpr float kTq4Levels[16] = {-2.7325896f, -2.0690172f, -1.6180464f, -1.2562312f, -0.9423405f, -0.6567591f,
                                  -0.3880483f, -0.1283950f, 0.1283950f,  0.3880483f,  0.6567591f,  0.9423405f,
                                  1.2562312f,  1.6180464f,  2.0690172f,  2.7325896f};
constexpr float kTq3Levels[16] = {-2.1519457f, -1.3439093f, -0.7560053f, -0.2450942f, 0.2450942f, 0.7560053f,
                                  1.3439093f,  2.1519457f,  2.1519457f,  2.1519457f,  2.1519457f, 2.1519457f,
                                  2.1519457f,  2.1519457f,  2.1519457f,  2.1519457f};

// Rotated types try scales rms * [kScaleLow, kScaleHigh] in kScaleCandidates steps: a group of 32 (or 8)
// values is not a Gaussian, and the best fit of the codebook to it cuts the error by a fifth to a third.
constexpr int kScaleCandidates = 12;
constexpr float kScaleLow = 0.6f, kScaleHigh = 1.5f;
constexpr int kRefits = 2;  // then levels reassigned at the best fit's scale and the scale refitted

// Index of the level nearest x among n ascending levels.
uint8_t nearest_level(const float* levels, int n, float x) {
  int lo = 0;
  for (int step = n / 2; step > 0; step /= 2)  // the last level below the midpoint to its successor
    if (lo + step < n && x > 0.5f * (levels[lo + step - 1] + levels[lo + step])) lo += step;
  return static_cast<uint8_t>(lo);
}

float max_abs(const float* x, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

void quantize_group(KvType t, const float* x, int g, uint8_t* codes, uint16_t* scale) {
  switch (t) {
    case KvType::Q8_0: {
      const float d = max_abs(x, g) / 127.0f;
      *scale = fp32_to_fp16(d);
      const float inv = d > 0.0f ? 1.0f / d : 0.0f;
      for (int i = 0; i < g; ++i) codes[i] = static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(x[i] * inv)));
      return;
    }
    case KvType::Q4_0: {  // d = (signed value of largest magnitude) / -8, codes round(x / d) + 8 in [0, 15]
      float amax = 0.0f, max = 0.0f;
      for (int i = 0; i < g; ++i)
        if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
      const float d = max / -8.0f;
      *scale = fp32_to_fp16(d);
      const float inv = d != 0.0f ? 1.0f / d : 0.0f;
      for (int i = 0; i < g; ++i)
        codes[i] = static_cast<uint8_t>(std::min(15, static_cast<int>(x[i] * inv + 8.5f)));
      return;
    }
    case KvType::FP8: {
      const float d = max_abs(x, g) / 448.0f;
      *scale = fp32_to_fp16(d * 256.0f);  // codes read as fp16 bits are value / 256
      const float inv = d > 0.0f ? 1.0f / d : 0.0f;
      for (int i = 0; i < g; ++i) codes[i] = fp8_e4m3_encode(x[i] * inv);
      return;
    }
    case KvType::TQ4:
    case KvType::TQ3: {  // the best of kScaleCandidates fits, each assigning levels and refitting the scale
      const int n_levels = t == KvType::TQ4 ? 16 : 8;
      const float* levels = kv_codebook(t);
      double sum_sq = 0.0;
      for (int i = 0; i < g; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
      const float rms = static_cast<float>(std::sqrt(sum_sq / g));
      if (rms == 0.0f) {
        std::fill_n(codes, g, nearest_level(levels, n_levels, 0.0f));
        *scale = 0;
        return;
      }
      uint8_t trial[kKvGroup];
      double best_error = 1e300;
      float best_scale = 0.0f;
      for (int c = 0; c < kScaleCandidates + kRefits; ++c) {  // the candidates, then refits of the best
        const float inv = c < kScaleCandidates
                              ? 1.0f / (rms * (kScaleLow + (kScaleHigh - kScaleLow) * c / (kScaleCandidates - 1)))
                              : 1.0f / best_scale;
        double xc = 0.0, cc = 0.0;
        for (int i = 0; i < g; ++i) {
          trial[i] = nearest_level(levels, n_levels, x[i] * inv);
          xc += static_cast<double>(x[i]) * levels[trial[i]];
          cc += static_cast<double>(levels[trial[i]]) * levels[trial[i]];
        }
        // Least-squares scale for these levels; the error is then sum x^2 - xc^2 / cc.
        const double error = sum_sq - xc * xc / cc;
        if (error < best_error && xc > 0.0) {
          best_error = error;
          best_scale = static_cast<float>(xc / cc);
          std::copy_n(trial, g, codes);
        }
      }
      *scale = fp32_to_fp16(best_scale);
      return;
    }
    default: return;
  }
}

}  // namespace

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::F32: return "f32";
    case KvType::F16: return "f16";
    case KvType::BF16: return "bf16";
    case KvType::Q8_0: return "q8_0";
    case KvType::Q4_0: return "q4_0";
    case KvType::FP8: return "fp8";
    case KvType::TQ4: return "tq4";
    case KvType::TQ3: return "tq3";
  }
  return "?";
}

std::optional<KvType> parse_kv_type(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (KvType t : kAllKvTypes)
    if (lower == kv_type_name(t)) return t;
  return std::nullopt;
}

int kv_type_bits(KvType t) {
  switch (t) {
    case KvType::F32: return 32;
    case KvType::F16:
    case KvType::BF16: return 16;
    case KvType::Q8_0:
    case KvType::FP8: return 8;
    case KvType::Q4_0:
    case KvType::TQ4: return 4;
    case KvType::TQ3: return 3;
  }
  return 0;
}

std::string kv_row_check(KvType t, int dim) {
  if (!kv_type_quantized(t) || dim <= 0) return {};
  const int g = kv_group_size(dim);
  const int need = t == KvType::TQ3 ? 8 : kv_type_bits(t) == 4 ? 2 : 1;
  if (g == 0 || dim % g != 0 || g % need != 0)
    return std::string(kv_type_name(t)) + " KV needs rows of a multiple of 8 values (or fewer than 32, a multiple of " +
           std::to_string(need) + "); this model's are " + std::to_string(dim);
  return {};
}

size_t kv_code_bytes(KvType t, int dim) { return static_cast<size_t>(dim) * kv_type_bits(t) / 8; }

size_t kv_row_bytes(KvType t, int dim) {
  if (!kv_type_quantized(t)) return static_cast<size_t>(dim) * kv_type_bits(t) / 8;
  return kv_code_bytes(t, dim) + 2 * static_cast<size_t>(dim / kv_group_size(dim));
}

std::string KvTypes::name() const {
  return k == v ? kv_type_name(k) : std::string(kv_type_name(k)) + "/" + kv_type_name(v);
}

void kv_quantize_row(KvType t, const float* x, int dim, uint8_t* codes, uint16_t* scales) {
  const int g = kv_group_size(dim);
  for (int i = 0; i < dim; i += g) quantize_group(t, x + i, g, codes + i, scales + i / g);
}

float kv_code_value(KvType t, uint8_t code) {
  switch (t) {
    case KvType::Q8_0: return static_cast<float>(static_cast<int8_t>(code));
    case KvType::Q4_0: return static_cast<float>(code) - 8.0f;
    case KvType::FP8: return fp8_e4m3_decode(code) * (1.0f / 256.0f);
    case KvType::TQ4:
    case KvType::TQ3: return kv_codebook(t)[code & 15];
    default: return 0.0f;
  }
}

const float* kv_codebook(KvType t) { return t == KvType::TQ3 ? kTq3Levels : kTq4Levels; }

uint8_t fp8_e4m3_encode(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  float a = std::fabs(x);
  if (!(a == a)) return sign | 0x7E;  // NaN: the largest finite, never produced by finite rows
  if (a >= 448.0f) return sign | 0x7E;
  if (a < 0.015625f) {  // below 2^-6: subnormal steps of 2^-9 (8 rounds up into the smallest normal)
    const int m = static_cast<int>(std::nearbyint(a * 512.0f));
    return static_cast<uint8_t>(sign | m);
  }
  int e = 0;
  const float frac = std::frexp(a, &e);  // a = frac * 2^e, frac in [0.5, 1)
  int m = static_cast<int>(std::nearbyint((frac * 2.0f - 1.0f) * 8.0f));
  int biased = e - 1 + 7;
  if (m == 8) m = 0, ++biased;
  if (biased > 15 || (biased == 15 && m > 6)) return sign | 0x7E;
  return static_cast<uint8_t>(sign | (biased << 3) | m);
}

float fp8_e4m3_decode(uint8_t code) {
  const int e = (code >> 3) & 15, m = code & 7;
  const float a = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return code & 0x80 ? -a : a;
}

}  // namespace kestrel
