#include "quant/importance_quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "quant/block_pack.h"
#include "quant/quantize.h"
#include "quant/sparse24.h"

namespace kestrel {
namespace {

// Round half away from zero, inline (std::nearbyint is a library call without SSE4.1 in the baseline ISA,
// and the searches below round every weight for every candidate).
inline float round_half_away(float v) { return static_cast<float>(static_cast<int>(v + (v >= 0.0f ? 0.5f : -0.5f))); }

// Weights of one block: w, or all ones where w is null or sums to zero over the block.
const float* block_weights(const float* w, int n, float* ones) {
  double sum = 0;
  if (w)
    for (int i = 0; i < n; ++i) sum += w[i];
  if (sum > 0) return w;
  std::fill_n(ones, n, 1.0f);
  return ones;
}

// The scale d of x[n] ~ d * q, q = round(x / d) clamped to [qmin, qmax], with the least weighted error:
// candidates put the value of largest magnitude at qmin + t for t in [-span, span] (2 * steps + 1 of
// them); for each candidate's codes the weighted least-squares scale is taken.
float search_symmetric(const float* x, const float* w, int n, int qmin, int qmax, float span, int steps) {
  float vmax = 0, amax = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), vmax = x[i];
  if (amax == 0) return 0.0f;
  double best = std::numeric_limits<double>::infinity();
  float best_d = vmax / static_cast<float>(qmin);
  for (int k = -steps; k <= steps; ++k) {
    const float d = vmax / (static_cast<float>(qmin) + span * static_cast<float>(k) / static_cast<float>(steps));
    const float id = 1.0f / d;
    float sxq = 0, sqq = 0;  // float sums of at most 256 terms: ample for choosing a scale
    for (int i = 0; i < n; ++i) {
      const float q = std::clamp(round_half_away(x[i] * id), static_cast<float>(qmin), static_cast<float>(qmax));
      sxq += w[i] * x[i] * q;
      sqq += w[i] * q * q;
    }
    if (sqq <= 0) continue;
    const double error = -sxq * sxq / sqq;  // sum w x^2 - (sum w x q)^2 / sum w q^2, less the constant
    if (error < best) best = error, best_d = sxq / sqq;
  }
  return best_d;
}

// Whether the format's offset may take either sign (Q4_1, Q5_1: w = d q + m) or is stored as -min with
// min >= 0 (the K-quants).
enum class Offset { NonPositive, Free };

// scale >= 0 and min of x[n] ~ scale * q - min, q in [0, nmax], with the least weighted error: candidates
// spread the range [lo, max(x)] (lo = min(x), and at most 0 for Offset::NonPositive) over nmax + t steps for
// t in [-span, span]; for each candidate's codes the weighted least-squares scale and offset are taken
// (the offset kept <= 0 for Offset::NonPositive).
void search_asymmetric(const float* x, const float* w, int n, int nmax, float span, int steps, float& scale,
                       float& min, Offset offset = Offset::NonPositive) {
  float lo = offset == Offset::Free ? x[0] : 0.0f, hi = x[0];
  for (int i = 0; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  scale = (hi - lo) / static_cast<float>(nmax);
  min = -lo;
  if (hi <= lo) return;
  double best = std::numeric_limits<double>::infinity();
  for (int k = -steps; k <= steps; ++k) {
    const float iscale = (static_cast<float>(nmax) + span * static_cast<float>(k) / static_cast<float>(steps)) / (hi - lo);
    double s0 = 0, s1 = 0, s2 = 0, sx = 0, sxq = 0;
    float q[kQK];
    for (int i = 0; i < n; ++i) {
      q[i] = std::clamp(round_half_away(iscale * (x[i] - lo)), 0.0f, static_cast<float>(nmax));
      s0 += w[i], s1 += w[i] * q[i], s2 += static_cast<double>(w[i]) * q[i] * q[i];
      sx += static_cast<double>(w[i]) * x[i], sxq += static_cast<double>(w[i]) * x[i] * q[i];
    }
    const double det = s0 * s2 - s1 * s1;
    if (det <= 0 || s2 <= 0) continue;
    double s = (s0 * sxq - s1 * sx) / det, b = (s2 * sx - s1 * sxq) / det;
    if (b > 0 && offset == Offset::NonPositive) b = 0, s = sxq / s2;  // the format's offset is -min with min >= 0
    if (s <= 0) continue;
    double error = 0;
    for (int i = 0; i < n; ++i) {
      const double e = s * q[i] + b - x[i];
      error += w[i] * e * e;
    }
    if (error < best) best = error, scale = static_cast<float>(s), min = static_cast<float>(-b);
  }
}

}  // namespace

void quantize_row_weighted(DType type, const float* x, void* row, size_t n, const float* weights) {
  float ones[kQK_K];
  const auto weights_at = [&](size_t offset, int len) { return block_weights(weights ? weights + offset : nullptr, len, ones); };
  switch (type) {
    case DType::Q8_0:
      for (size_t i = 0; i < n / kQK; ++i) {
        const float* xb = x + i * kQK;
        pack_q8_0(xb, search_symmetric(xb, weights_at(i * kQK, kQK), kQK, -127, 127, 4.0f, 8), static_cast<BlockQ8_0*>(row)[i]);
      }
      break;
    case DType::Q4_0:
      for (size_t i = 0; i < n / kQK; ++i) {
        const float* xb = x + i * kQK;
        pack_q4_0(xb, search_symmetric(xb, weights_at(i * kQK, kQK), kQK, -8, 7, 1.5f, 15), static_cast<BlockQ4_0*>(row)[i]);
      }
      break;
    case DType::Q5_0:
      for (size_t i = 0; i < n / kQK; ++i) {
        const float* xb = x + i * kQK;
        pack_q5_0(xb, search_symmetric(xb, weights_at(i * kQK, kQK), kQK, -16, 15, 2.0f, 16), static_cast<BlockQ5_0*>(row)[i]);
      }
      break;
    case DType::Q4_1:
    case DType::Q5_1: {
      const int nmax = type == DType::Q4_1 ? 15 : 31;
      for (size_t i = 0; i < n / kQK; ++i) {
        const float* xb = x + i * kQK;
        float scale, min;
        search_asymmetric(xb, weights_at(i * kQK, kQK), kQK, nmax, 1.5f, 15, scale, min, Offset::Free);
        if (type == DType::Q4_1) pack_q4_1(xb, scale, -min, static_cast<BlockQ4_1*>(row)[i]);
        else pack_q5_1(xb, scale, -min, static_cast<BlockQ5_1*>(row)[i]);
      }
      break;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      const int nmax = type == DType::Q4_K ? 15 : 31;
      for (size_t i = 0; i < n / kQK_K; ++i) {
        float scales[8], mins[8];
        for (int j = 0; j < 8; ++j) {
          const size_t at = i * kQK_K + static_cast<size_t>(j) * 32;
          search_asymmetric(x + at, weights_at(at, 32), 32, nmax, 1.5f, 15, scales[j], mins[j]);
        }
        if (type == DType::Q4_K) pack_q4_k(x + i * kQK_K, scales, mins, static_cast<BlockQ4_K*>(row)[i]);
        else pack_q5_k(x + i * kQK_K, scales, mins, static_cast<BlockQ5_K*>(row)[i]);
      }
      break;
    }
    case DType::Q2_K:
      for (size_t i = 0; i < n / kQK_K; ++i) {
        float scales[16], mins[16];
        for (int j = 0; j < 16; ++j) {
          const size_t at = i * kQK_K + static_cast<size_t>(j) * 16;
          search_asymmetric(x + at, weights_at(at, 16), 16, 3, 1.0f, 10, scales[j], mins[j]);
        }
        pack_q2_k(x + i * kQK_K, scales, mins, static_cast<BlockQ2_K*>(row)[i]);
      }
      break;
    case DType::Q3_K:
      for (size_t i = 0; i < n / kQK_K; ++i) {
        float scales[16];
        for (int j = 0; j < 16; ++j) {
          const size_t at = i * kQK_K + static_cast<size_t>(j) * 16;
          scales[j] = search_symmetric(x + at, weights_at(at, 16), 16, -4, 3, 1.0f, 10);
        }
        pack_q3_k(x + i * kQK_K, scales, static_cast<BlockQ3_K*>(row)[i]);
      }
      break;
    case DType::Q6_K:
      for (size_t i = 0; i < n / kQK_K; ++i) {
        float scales[16];
        for (int j = 0; j < 16; ++j) {
          const size_t at = i * kQK_K + static_cast<size_t>(j) * 16;
          scales[j] = search_symmetric(x + at, weights_at(at, 16), 16, -32, 31, 3.0f, 12);
        }
        pack_q6_k(x + i * kQK_K, scales, static_cast<BlockQ6_K*>(row)[i]);
      }
      break;
    case DType::S24_F16:
    case DType::S24_Q8:
    case DType::S24_Q4: quantize_sparse24_row(type, x, row, n, weights); break;
    default: quantize_row(type, x, row, n); break;
  }
}

void fit_group_weighted(DType type, const float* x, const float* weights, float* fitted) {
  float ones[kQK];
  const float* w = block_weights(weights, kQK, ones);
  const auto symmetric = [&](int first, int n, int qmin, int qmax, float d) {
    const float id = d ? 1.0f / d : 0.0f;
    for (int i = first; i < first + n; ++i)
      fitted[i] = d * std::clamp(round_half_away(x[i] * id), static_cast<float>(qmin), static_cast<float>(qmax));
  };
  switch (type) {
    case DType::Q8_0: {
      BlockQ8_0 b;
      pack_q8_0(x, search_symmetric(x, w, kQK, -127, 127, 4.0f, 8), b);
      dequantize_row(type, &b, fitted, kQK);
      break;
    }
    case DType::Q4_0: {
      BlockQ4_0 b;
      pack_q4_0(x, search_symmetric(x, w, kQK, -8, 7, 1.5f, 15), b);
      dequantize_row(type, &b, fitted, kQK);
      break;
    }
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q5_0: {
      // The 32-blocks: the block the row gets, decoded.
      uint8_t block[32];
      quantize_row_weighted(type, x, block, kQK, w);
      dequantize_row(type, block, fitted, kQK);
      break;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      const float nmax = type == DType::Q4_K ? 15.0f : 31.0f;
      float scale, min;
      search_asymmetric(x, w, kQK, static_cast<int>(nmax), 1.5f, 15, scale, min);
      const float id = scale ? 1.0f / scale : 0.0f;
      for (int i = 0; i < kQK; ++i) fitted[i] = scale * std::clamp(round_half_away((x[i] + min) * id), 0.0f, nmax) - min;
      break;
    }
    case DType::Q2_K:
      for (int half = 0; half < 2; ++half) {
        float scale, min;
        search_asymmetric(x + half * 16, w + half * 16, 16, 3, 1.0f, 10, scale, min);
        const float id = scale ? 1.0f / scale : 0.0f;
        for (int i = half * 16; i < half * 16 + 16; ++i)
          fitted[i] = scale * std::clamp(round_half_away((x[i] + min) * id), 0.0f, 3.0f) - min;
      }
      break;
    case DType::Q3_K:
      for (int half = 0; half < 2; ++half) symmetric(half * 16, 16, -4, 3, search_symmetric(x + half * 16, w + half * 16, 16, -4, 3, 1.0f, 10));
      break;
    case DType::Q6_K:
      for (int half = 0; half < 2; ++half) symmetric(half * 16, 16, -32, 31, search_symmetric(x + half * 16, w + half * 16, 16, -32, 31, 3.0f, 12));
      break;
    default: std::copy_n(x, kQK, fitted); break;
  }
}

}  // namespace kestrel
