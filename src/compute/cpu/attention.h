// Paged attention with the kernels of a chosen ISA level: ops::attention_paged (compute/ops.h, the contract)
// runs this with detected_isa(); tests and benchmarks hold each level against the reference.
#pragma once
#include "compute/cpu/isa.h"
#include "compute/ops.h"

namespace kestrel {

// As ops::attention_paged, with the page kernels of `isa` (a level this CPU runs).
void attention_paged_on(Isa isa, ThreadPool& pool, const float* q, const KvLayerView& kv, const AttentionRows& rows,
                        float* out, int n_tok, int n_heads, float scale, const ops::KvWrite* write = nullptr);

// Whether a page kernel of `isa` takes this layout; where none does, attention runs the generic path (an
// online softmax over runs of rows decoded through the view).
bool attention_has_page_kernel(const KvLayerView& kv, Isa isa);

// Key parts per (token, KV head) the page kernels split a call's keys into (1: none). Decode over long
// contexts has fewer items than threads want (one KV head on two threads), so each item's keys go in parts
// of at least 512 keys that threads take separately (as flash decoding does) and the parts' outputs
// merge by their softmax states.
int attention_key_parts(const AttentionRows& rows, int n_kv_heads, int n_threads);

}  // namespace kestrel
