#include "quant/w8a8.h"

#include <algorithm>
#include <cmath>

#include "core/fp16.h"

namespace kestrel {

std::vector<float> smoothing_factors(std::span<const float> act_max, std::span<const std::vector<float>* const> ws,
                                     float alpha, std::span<const int64_t> tie) {
  const size_t n_in = act_max.size();
  const auto key = [&](size_t j) { return tie.empty() ? j : static_cast<size_t>(tie[j]); };
  size_t n_keys = n_in;
  if (!tie.empty()) n_keys = static_cast<size_t>(*std::max_element(tie.begin(), tie.end())) + 1;
  std::vector<float> a_max(n_keys, 0.0f), w_max(n_keys, 0.0f);  // [keys] pooled ranges
  for (size_t j = 0; j < n_in; ++j) a_max[key(j)] = std::max(a_max[key(j)], act_max[j]);
  for (const std::vector<float>* w : ws)
    for (size_t i = 0; i < w->size(); ++i) w_max[key(i % n_in)] = std::max(w_max[key(i % n_in)], std::fabs((*w)[i]));
  std::vector<float> s(n_in, 1.0f);
  for (size_t j = 0; j < n_in; ++j) {
    const float a = a_max[key(j)], m = w_max[key(j)];
    if (a <= 0.0f || m <= 0.0f) continue;
    const double f = std::pow(static_cast<double>(a), alpha) / std::pow(static_cast<double>(m), 1.0 - alpha);
    s[j] = static_cast<float>(std::clamp(f, 1e-5, 1e5));
  }
  return s;
}

std::vector<int32_t> outlier_channels(std::span<const float> act_max, float ratio, size_t max_count) {
  if (act_max.empty()) return {};
  std::vector<float> sorted(act_max.begin(), act_max.end());
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
  const float threshold = ratio * sorted[sorted.size() / 2];
  std::vector<int32_t> out;
  for (size_t j = 0; j < act_max.size(); ++j)
    if (act_max[j] > 0.0f && act_max[j] >= threshold) out.push_back(static_cast<int32_t>(j));
  if (out.size() > max_count) {
    std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(max_count), out.end(),
                      [&](int32_t a, int32_t b) { return act_max[static_cast<size_t>(a)] > act_max[static_cast<size_t>(b)]; });
    out.resize(max_count);
    std::sort(out.begin(), out.end());
  }
  return out;
}

float static_input_scale(std::span<const float> act_max, std::span<const int32_t> outliers) {
  float amax = 0.0f;
  size_t next = 0;  // outliers ascending
  for (size_t j = 0; j < act_max.size(); ++j) {
    if (next < outliers.size() && static_cast<size_t>(outliers[next]) == j) {
      ++next;
      continue;
    }
    amax = std::max(amax, act_max[j]);
  }
  return amax / 127.0f;
}

float quantize_int8_row(const float* w, size_t n, std::span<const int32_t> outliers, int8_t* q, uint16_t* outlier_weight) {
  float amax = 0.0f;
  size_t next = 0;  // outliers ascending
  for (size_t i = 0; i < n; ++i) {
    if (next < outliers.size() && static_cast<size_t>(outliers[next]) == i) {
      outlier_weight[next++] = fp32_to_fp16(w[i]);
      continue;
    }
    amax = std::max(amax, std::fabs(w[i]));
  }
  const float scale = amax / 127.0f, inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
  for (size_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(w[i] * inverse), -127.0f, 127.0f));
  for (const int32_t c : outliers) q[c] = 0;
  return scale;
}

}  // namespace kestrel
