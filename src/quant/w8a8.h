// W8A8 quantization of weight matrices (what compute/ops.h's Int8Scales runs): symmetric int8 per output
// row, with SmoothQuant's migration of activation outliers into the weights and LLM.int8's outlier channels
// kept in F16. Calibration (model/calibration.h) supplies each input channel's largest |x_j|.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kestrel {

// SmoothQuant's per-input-channel factors for matrices sharing one input x [*, n_in]:
// s_j = max|x_j|^alpha / max|W_j|^(1 - alpha), max|W_j| over every row of every matrix (each [n_out_i][n_in]).
// Dividing x_j by s_j (folded into what produces x: a norm weight, or a producer matrix's row) and
// multiplying column j of each matrix by it leaves the products unchanged and moves the activation's
// range into the weights. tie (optional, [n_in]): channels with the same key must share one factor (the
// attention output's heads that read one KV head's V row); their ranges pool by maximum. s_j = 1 where
// either maximum is 0; factors are clamped to [1e-5, 1e5].
std::vector<float> smoothing_factors(std::span<const float> act_max, std::span<const std::vector<float>* const> ws,
                                     float alpha, std::span<const int64_t> tie = {});

// The input channels LLM.int8 computes in float (ascending): those whose max|x_j| reaches `ratio` times the
// median channel's, at most max_count of them (the largest). A ratio relative to the layer's own typical
// range, not LLM.int8's absolute 6.0, so it means the same in a model whose activations run larger.
std::vector<int32_t> outlier_channels(std::span<const float> act_max, float ratio, size_t max_count);

// The static activation scale: the largest max|x_j| over the channels that are not outliers, / 127.
float static_input_scale(std::span<const float> act_max, std::span<const int32_t> outliers);

// One weight row w[n] as int8: q[i] * scale ~ w[i], scale = max|w_i| / 127 over the non-outlier columns
// (returned); outlier columns are 0 in q and kept in outlier_weight[k] (F16 bits).
float quantize_int8_row(const float* w, size_t n, std::span<const int32_t> outliers, int8_t* q, uint16_t* outlier_weight);

}  // namespace kestrel
