#include "quant/block_grid.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/fp16.h"

namespace kestrel {

uint8_t grid_code(float step, float offset, int levels, float x) {
  if (step == 0.0f) return 0;
  const float q = std::nearbyint((x - offset) / step);
  return static_cast<uint8_t>(std::clamp(q, 0.0f, static_cast<float>(levels - 1)));
}

bool has_block_grid(DType type) {
  return type == DType::Q8_0 || type == DType::Q4_0 || type == DType::Q4_K || type == DType::Q6_K;
}

int grid_levels(DType type) {
  switch (type) {
    case DType::Q8_0: return 255;  // -127 .. 127, as the encoder writes
    case DType::Q6_K: return 64;
    default: return 16;
  }
}

BlockGrid block_grid(DType type, const void* block) {
  BlockGrid g;
  g.levels = grid_levels(type);
  // Sub-blocks of `len` elements sharing step and offset.
  const auto fill = [&g](int first, int len, float step, float offset) {
    std::fill_n(g.step + first, len, step);
    std::fill_n(g.offset + first, len, offset);
  };
  switch (type) {
    case DType::Q8_0: {
      const float d = fp16_to_fp32(static_cast<const BlockQ8_0*>(block)->d);
      g.n = kQK;
      fill(0, kQK, d, -127.0f * d);
      break;
    }
    case DType::Q4_0: {
      const float d = fp16_to_fp32(static_cast<const BlockQ4_0*>(block)->d);
      g.n = kQK;
      fill(0, kQK, d, -8.0f * d);
      break;
    }
    case DType::Q4_K: {
      const auto* b = static_cast<const BlockQ4_K*>(block);
      const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
      g.n = kQK_K;
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        q4_k_scale_min(j, b->scales, sc, m);
        fill(j * 32, 32, d * sc, -dmin * m);
      }
      break;
    }
    case DType::Q6_K: {
      const auto* b = static_cast<const BlockQ6_K*>(block);
      const float d = fp16_to_fp32(b->d);
      g.n = kQK_K;
      for (int j = 0; j < 16; ++j) fill(j * 16, 16, d * b->scales[j], -32.0f * d * b->scales[j]);
      break;
    }
    default: std::abort();  // has_block_grid(type) is the caller's contract
  }
  return g;
}

void set_block_codes(DType type, void* block, const uint8_t* q) {
  switch (type) {
    case DType::Q8_0: {
      auto* b = static_cast<BlockQ8_0*>(block);
      for (int j = 0; j < kQK; ++j) b->qs[j] = static_cast<int8_t>(static_cast<int>(q[j]) - 127);
      break;
    }
    case DType::Q4_0: {
      auto* b = static_cast<BlockQ4_0*>(block);
      for (int j = 0; j < kQK / 2; ++j) b->qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
      break;
    }
    case DType::Q4_K: {
      auto* b = static_cast<BlockQ4_K*>(block);
      for (int pair = 0; pair < 4; ++pair)
        for (int l = 0; l < 32; ++l)
          b->qs[pair * 32 + l] = static_cast<uint8_t>(q[pair * 64 + l] | (q[pair * 64 + 32 + l] << 4));
      break;
    }
    case DType::Q6_K: {
      auto* b = static_cast<BlockQ6_K*>(block);
      for (int half = 0; half < 2; ++half) {
        uint8_t* ql = b->ql + half * 64;
        uint8_t* qh = b->qh + half * 32;
        const uint8_t* qq = q + half * 128;
        for (int l = 0; l < 32; ++l) {
          const uint8_t q1 = qq[l], q2 = qq[l + 32], q3 = qq[l + 64], q4 = qq[l + 96];
          ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
          ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
          qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
        }
      }
      break;
    }
    default: std::abort();
  }
}

}  // namespace kestrel
