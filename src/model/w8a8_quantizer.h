// Writes a W8A8 model (`kestrel quantize IN OUT W8A8`): the layers' projection matrices as int8 rows with
// per-row scales, whose inputs the forward pass quantizes to int8 too (compute/ops.h, Int8Scales), with
//  - SmoothQuant (smooth_alpha >= 0): where a norm feeds the matrices (attn_norm -> q/k/v or the MLA down
//    projections; ffn_norm -> gate/up of dense layers), s_j = max|x_j|^a / max|W_j|^(1-a) divides the norm
//    weight and multiplies the matrices' column j (quant/w8a8.h), so the activation outliers that would
//    stretch every token's 8-bit scale move into the weights;
//  - LLM.int8's decomposition (outlier_threshold > 0): input channels whose calibrated max|x_j| (after
//    smoothing) reaches outlier_threshold times the median channel's are multiplied in float, their weight
//    columns kept in F16 (at most 1/32 of the channels: the largest);
//  - static activation scales (static_scales): one calibrated scale per matrix instead of one per token.
// Companion tensors per int8 matrix NAME.weight: NAME.weight_scale F32 [n_out], NAME.input_scale F32 [1]
// (static), NAME.outlier_channels I32 [k] and NAME.outlier_weight F16 [k, n_out] (outliers). The token
// embedding, the output matrix and MoE experts get Q8_0 (weight-only). general.file_type is 1024, a value of
// kestrel's (llama.cpp names none): these files are kestrel's, which llama.cpp does not run.
#pragma once
#include <functional>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/model_quantizer.h"

namespace kestrel {

// options.scheme is W8A8; options.importance (with max_abs, from collect_importance) is needed for
// smoothing, outliers and static scales. Errors as quantize_model's, and: calibration missing or without
// activation ranges.
Result<QuantizeReport> quantize_model_w8a8(const QuantizeOptions& options, ThreadPool& pool,
                                           const std::function<void(double)>& progress);

}  // namespace kestrel
