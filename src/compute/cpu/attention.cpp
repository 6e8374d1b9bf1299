// Paged causal attention with an online (streaming) softmax: for each (query token, head), walk the
// sequence's key blocks through its block table, score one block of keys, and fold it into a running
// max, running denominator and running weighted sum of values.
#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/cpu/dot.h"
#include "compute/ops.h"

namespace kestrel::ops {

void attention_paged(ThreadPool& pool, const float* q, const KvLayerView& kv, const AttentionRows& rows,
                     float* out, int n_tok, int n_heads, float scale) {
  const int k_dim = kv.k_dim, v_dim = kv.v_dim, bs = kv.block_size;
  const int group = n_heads / kv.n_kv_heads;  // query heads per KV head
  const DotFn dot = dot_kernel(DType::F32);
  pool.parallel_for(static_cast<size_t>(n_tok) * n_heads, 1, [&](size_t begin, size_t end, int) {
    std::vector<float> scores(static_cast<size_t>(bs));  // [block_size] scores of one key block
    std::vector<float> acc(static_cast<size_t>(v_dim));  // [v_dim] running sum of weighted values
    for (size_t item = begin; item < end; ++item) {
      const int t = static_cast<int>(item / n_heads), h = static_cast<int>(item % n_heads);
      const int kv_head = h / group;
      const float* qh = q + item * k_dim;
      const int32_t n_keys = rows.positions[t] + 1;
      const int32_t* table = rows.block_tables[t];
      float running_max = -INFINITY, denom = 0;
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int32_t start = 0; start < n_keys; start += bs) {
        const int n = std::min(bs, n_keys - start);
        const int32_t block = table[start / bs];
        const float* kb = kv.k + kv.k_index(block, kv_head, 0);  // [block_size, k_dim]
        const float* vb = kv.v + kv.v_index(block, kv_head, 0);  // [block_size, v_stride]
        float block_max = -INFINITY;
        for (int j = 0; j < n; ++j) {
          scores[j] = dot(kb + static_cast<size_t>(j) * k_dim, qh, static_cast<size_t>(k_dim)) * scale;
          block_max = std::max(block_max, scores[j]);
        }
        const float new_max = std::max(running_max, block_max);
        const float correction = std::exp(running_max - new_max);  // 0 on the first block
        denom *= correction;
        for (int d = 0; d < v_dim; ++d) acc[d] *= correction;
        for (int j = 0; j < n; ++j) {
          const float p = std::exp(scores[j] - new_max);
          denom += p;
          const float* vj = vb + static_cast<size_t>(j) * kv.v_stride;
          for (int d = 0; d < v_dim; ++d) acc[d] += p * vj[d];
        }
        running_max = new_max;
      }
      float* o = out + item * v_dim;
      const float inv = 1.0f / denom;
      for (int d = 0; d < v_dim; ++d) o[d] = acc[d] * inv;
    }
  });
}

}  // namespace kestrel::ops
