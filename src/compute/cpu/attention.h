// Paged attention with the kernels of a chosen ISA level: ops::attention_paged (compute/ops.h, the contract)
// runs this with detected_isa(); tests and benchmarks hold each level against the reference.
#pragma once
#include "compute/cpu/isa.h"
#include "compute/ops.h"

namespace kestrel {

// As ops::attention_paged, with the page kernels of `isa` (a level this CPU runs).
void attention_paged_on(Isa isa, ThreadPool& pool, const float* q, const KvLayerView& kv, const AttentionRows& rows,
                        float* out, int n_tok, int n_heads, float scale, const ops::KvWrite* write = nullptr);

}  // namespace kestrel
