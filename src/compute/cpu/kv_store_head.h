// One (token, KV head) row of kv_store, for the attention pass that stores its own heads' rows.
#pragma once
#include "compute/ops.h"

namespace kestrel::ops {

// Writes token t's K/V rows of KV head h into their slot. scratch: [kv.k_dim] floats (for the rotated K).
void kv_store_head(const KvLayerView& kv, const AttentionRows& rows, const KvWrite& w, int t, int h, float* scratch);

}  // namespace kestrel::ops
