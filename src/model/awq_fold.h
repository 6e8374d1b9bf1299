// AWQ on a whole model file (quant/awq.h): for each layer of a Llama-style model, the scales of four
// groups of matrices are searched on the calibration Hessians and folded where the float model is
// unchanged by them:
//   attn_output (input divided through attn_v's rows: the attention output is linear in V; with grouped
//     KV heads the heads of a group share scales),
//   ffn_down (input divided through ffn_up's rows: silu(gate) * up is linear in up),
//   attn_q, attn_k, attn_v (input divided through attn_norm's weight),
//   ffn_gate, ffn_up (input divided through ffn_norm's weight; dense FFNs only),
// and the output matrix (input divided through output_norm's weight; not a tied token_embd).
// Groups whose tensors are missing (other architectures, experts) are left alone. Rounding is the
// importance-weighted search (quant/importance_quantize.h) with the scaled inputs' importance, in the
// search as in the file. The output: new float contents for the tensors that changed, to be quantized
// (or, for norms and biases, written) instead of the file's.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/gguf.h"
#include "model/calibration.h"
#include "quant/awq.h"

namespace kestrel {

struct AwqGroupReport {
  std::string matrices;  // e.g. "blk.3.attn_q/k/v"
  double alpha = 0, error_before = 0, error_after = 0;
};

struct AwqFold {
  std::map<std::string, std::vector<float>> tensors;  // by name: [n_elements] in the tensor's layout
  ImportanceMatrix importance;  // of every scaled matrix's scaled inputs, H_jj / s_j^2, for its rounding
  // By scaled matrix: its scaled inputs' Hessian on groups of 32 (awq_group_hessians), for the clip
  // search of its rounding (awq_clip_quantize_row); shared by the matrices of a group.
  std::map<std::string, std::shared_ptr<const std::vector<float>>> group_hessians;
  std::vector<AwqGroupReport> groups;
};

// target(name): the type the tensor will be quantized to, nullopt if it stays as it is.
// Error: a tensor of a group is not F32, F16 or BF16.
Result<AwqFold> awq_fold(const GgufFile& file, const HessianSet& hessians,
                         const std::function<std::optional<DType>(const std::string&)>& target, const AwqOptions& options,
                         ThreadPool& pool);

}  // namespace kestrel
