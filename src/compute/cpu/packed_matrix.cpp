#include "compute/cpu/packed_matrix.h"

#include "compute/cpu/packed_sparse24.h"

#include <cstdlib>
#include <cstring>

#include "core/fp16.h"
#include "core/large_buffer.h"
#include "quant/block_grid.h"
#include "quant/blocks.h"

namespace kestrel {
namespace {

// Writes the nibble tile of 32 inputs for 16 rows: value(row, k) for k < 32.
template <typename F>
void write_nibble_tile(uint8_t* out, const F& value) {
  for (int i = 0; i < PackedMatrix::kRows; ++i)
    for (int g = 0; g < 4; ++g)
      for (int j = 0; j < 4; ++j)
        out[g * 64 + i * 4 + j] = static_cast<uint8_t>((value(i, 4 * g + j) & 0xF) | ((value(i, 4 * g + 16 + j) & 0xF) << 4));
}
int nibble_tile_value(const uint8_t* tile, int row, int k) {
  const uint8_t byte = tile[(k % 16) / 4 * 64 + row * 4 + k % 4];
  return k < 16 ? (byte & 0xF) : (byte >> 4);
}
// The crumb tile of 32 inputs for 16 rows: bits 2c of byte (v, row, j) = value(row, 16v + 4c + j) & 3.
template <typename F>
void write_crumb_tile(uint8_t* out, const F& value) {
  for (int v = 0; v < 2; ++v)
    for (int i = 0; i < PackedMatrix::kRows; ++i)
      for (int j = 0; j < 4; ++j) {
        uint8_t byte = 0;
        for (int c = 0; c < 4; ++c) byte |= static_cast<uint8_t>((value(i, 16 * v + 4 * c + j) & 3) << (2 * c));
        out[v * 64 + i * 4 + j] = byte;
      }
}
int crumb_tile_value(const uint8_t* tile, int row, int k) {
  return (tile[(k / 16) * 64 + row * 4 + k % 4] >> (2 * ((k % 16) / 4))) & 3;
}
// The quint tile of 32 inputs for 16 rows (5-bit values): for u < 4, byte (u, row, j) holds value(row,
// 4u + j) in bits 0-4 and bits 2-4 of value(row, 4u + 16 + j) in bits 5-7; byte (4, row, j) holds bits 0-1
// of value(row, 4u + 16 + j) at bits 2u, 2u + 1.
template <typename F>
void write_quint_tile(uint8_t* out, const F& value) {
  for (int i = 0; i < PackedMatrix::kRows; ++i)
    for (int j = 0; j < 4; ++j) {
      uint8_t low_pairs = 0;
      for (int u = 0; u < 4; ++u) {
        const int first = value(i, 4 * u + j) & 0x1F, second = value(i, 4 * u + 16 + j) & 0x1F;
        out[u * 64 + i * 4 + j] = static_cast<uint8_t>(first | ((second >> 2) << 5));
        low_pairs |= static_cast<uint8_t>((second & 3) << (2 * u));
      }
      out[256 + i * 4 + j] = low_pairs;
    }
}
int quint_tile_value(const uint8_t* tile, int row, int k) {
  const uint8_t byte = tile[(k % 16) / 4 * 64 + row * 4 + k % 4];
  if (k < 16) return byte & 0x1F;
  return ((byte >> 5) << 2) | ((tile[256 + row * 4 + k % 4] >> (2 * ((k % 16) / 4))) & 3);
}
// The sextet tile of 32 inputs for 16 rows (6-bit values): for u < 4, byte (u, row, j) holds value(row,
// 4u + j) in bits 0-5 and bits 4-5 of value(row, 4u + 16 + j) in bits 6-7; byte (4 + v, row, j) holds bits
// 0-3 of value(row, 8v + 16 + j) in its low nibble and of value(row, 8v + 20 + j) in its high one.
template <typename F>
void write_sextet_tile(uint8_t* out, const F& value) {
  for (int i = 0; i < PackedMatrix::kRows; ++i)
    for (int j = 0; j < 4; ++j) {
      for (int u = 0; u < 4; ++u) {
        const int first = value(i, 4 * u + j) & 0x3F, second = value(i, 4 * u + 16 + j) & 0x3F;
        out[u * 64 + i * 4 + j] = static_cast<uint8_t>(first | ((second >> 4) << 6));
      }
      for (int v = 0; v < 2; ++v)
        out[(4 + v) * 64 + i * 4 + j] = static_cast<uint8_t>((value(i, 8 * v + 16 + j) & 0xF) | ((value(i, 8 * v + 20 + j) & 0xF) << 4));
    }
}
int sextet_tile_value(const uint8_t* tile, int row, int k) {
  const uint8_t byte = tile[(k % 16) / 4 * 64 + row * 4 + k % 4];
  if (k < 16) return byte & 0x3F;
  const int u = (k - 16) / 4;
  const uint8_t low = tile[(4 + u / 2) * 64 + row * 4 + k % 4];
  return ((byte >> 6) << 4) | ((u % 2 ? low >> 4 : low) & 0xF);
}
// The triad tile of 32 inputs for 16 rows (3-bit values): for v < 3, byte (v, row, j) holds value(row,
// 8v + j) in bits 0-2 and value(row, 8v + 4 + j) in bits 3-5; bits 6-7 of bytes (0, row, j) and (1, row, j)
// hold bits 0-1 of value(row, 24 + j) and value(row, 28 + j), whose bit 2 is bit 7 and bit 6 of byte
// (2, row, j).
template <typename F>
void write_triad_tile(uint8_t* out, const F& value) {
  for (int i = 0; i < PackedMatrix::kRows; ++i)
    for (int j = 0; j < 4; ++j) {
      const int last[2] = {value(i, 24 + j) & 7, value(i, 28 + j) & 7};
      for (int v = 0; v < 3; ++v) {
        const int pair = (value(i, 8 * v + j) & 7) | ((value(i, 8 * v + 4 + j) & 7) << 3);
        const int top = v < 2 ? (last[v] & 3) << 6 : ((last[0] >> 2) << 7) | ((last[1] >> 2) << 6);
        out[v * 64 + i * 4 + j] = static_cast<uint8_t>(pair | top);
      }
    }
}
int triad_tile_value(const uint8_t* tile, int row, int k) {
  const int group = k / 4, at = row * 4 + k % 4;
  if (group < 6) return (tile[(group / 2) * 64 + at] >> (3 * (group % 2))) & 7;
  const int last = group - 6;  // 0 or 1
  return (tile[last * 64 + at] >> 6) | (((tile[128 + at] >> (7 - last)) & 1) << 2);
}

struct LayoutInfo {
  DType type;
  PackedLayout layout;
  int block_inputs;
  size_t block_bytes;
};
// The integer layouts of the quantized types (F16 / BF16 choose theirs by ISA).
constexpr LayoutInfo kIntegerLayouts[] = {
    {DType::Q4_0, PackedLayout::Q4_0x16, 32, 32 + 256},       {DType::Q8_0, PackedLayout::Q8_0x16, 32, 32 + 512},
    {DType::Q4_1, PackedLayout::Q4_1x16, 32, 64 + 256},       {DType::Q5_0, PackedLayout::Q5_0x16, 32, 32 + 256 + 64},
    {DType::Q5_1, PackedLayout::Q5_1x16, 32, 64 + 256 + 64},  {DType::Q4_K, PackedLayout::Q4_Kx16, 256, 2304},
    {DType::Q5_K, PackedLayout::Q5_Kx16, 256, 2304 + 512},    {DType::Q6_K, PackedLayout::Q6_Kx16, 256, 3360},
    {DType::Q2_K, PackedLayout::Q2_Kx16, 256, 64 + 256 + 8 * 128}, {DType::Q3_K, PackedLayout::Q3_Kx16, 256, 32 + 192 + 8 * 192},
    {DType::S24_Q8, PackedLayout::S24_Q8x16, 64, 672},        {DType::S24_Q4, PackedLayout::S24_Q4x16, 64, 416},
};
// The integer layout of a type, or null.
const LayoutInfo* integer_layout(DType type) {
  for (const LayoutInfo& l : kIntegerLayouts)
    if (l.type == type) return &l;
  return nullptr;
}
const LayoutInfo* integer_layout(PackedLayout layout) {
  for (const LayoutInfo& l : kIntegerLayouts)
    if (l.layout == layout) return &l;
  return nullptr;
}

bool is_float_weight(DType type) { return type == DType::F16 || type == DType::BF16 || type == DType::F32; }

}  // namespace

bool PackedMatrix::supports(DType type, int64_t n_in, int64_t n_out, Isa isa) {
  // AVX2 and AVX-512 have every layout's kernels; NEON the integer ones its table lists (the rest run the
  // row dots) and the float ones.
  const bool x86 = isa_includes(isa, Isa::Avx2);
  if (is_float_weight(type)) return n_in > 0 && n_out > 0 && (x86 || isa == Isa::Neon);  // any shape, zero-padded
  if (n_out % kRows != 0) return false;
  if (const LayoutInfo* l = integer_layout(type))
    return n_in % l->block_inputs == 0 && (x86 || (isa == Isa::Neon && packed_gemm_kernel_neon(l->layout) != nullptr));
  if (type == DType::S24_F16)
    return n_in % 64 == 0 && ((x86 && packed_gemm_f32_kernel_avx2(PackedLayout::S24_F16x16)) ||
                              (isa == Isa::Neon && packed_gemm_f32_kernel_neon(PackedLayout::S24_F16x16)));
  return false;
}

std::optional<PackedMatrix> PackedMatrix::pack(const WeightMatrix& w, Isa isa) {
  const bool avx512 = isa_includes(isa, Isa::Avx512);
  if (const LayoutInfo* l = integer_layout(w.type)) return pack(w, l->layout);
  if (w.type == DType::F16 || w.type == DType::BF16) {
    if (avx512 && cpu_has_avx512_bf16()) return pack(w, PackedLayout::BF16x16);
    return pack(w, w.type == DType::F16 ? PackedLayout::F16Fma16 : PackedLayout::BF16Fma16);
  }
  if (w.type == DType::F32) return pack(w, PackedLayout::F32Fma16);
  if (w.type == DType::S24_F16) return pack(w, PackedLayout::S24_F16x16);
  return std::nullopt;
}

std::optional<PackedMatrix> PackedMatrix::pack(const WeightMatrix& w, PackedLayout layout) {
  const bool float_weights = is_float_weight(w.type);
  if (float_weights ? w.n_in <= 0 || w.n_out <= 0 : w.n_out % kRows != 0) return std::nullopt;
  PackedMatrix p;
  p.n_in = float_weights ? (w.n_in + 31) / 32 * 32 : w.n_in;  // float weights: zeros up to whole blocks...
  p.n_out = float_weights ? (w.n_out + kRows - 1) / kRows * kRows : w.n_out;  // ...and whole row groups
  p.layout = layout;
  p.block_inputs = packed_block_inputs(layout);
  if (const LayoutInfo* l = integer_layout(layout)) {
    if (l->type != w.type) return std::nullopt;
    p.block_bytes = l->block_bytes;
  } else if (layout == PackedLayout::BF16x16 && (w.type == DType::F16 || w.type == DType::BF16)) {
    p.block_bytes = 1024;
  } else if ((layout == PackedLayout::F16Fma16 && w.type == DType::F16) || (layout == PackedLayout::BF16Fma16 && w.type == DType::BF16)) {
    p.block_bytes = 1024;
  } else if (layout == PackedLayout::F32Fma16 && w.type == DType::F32) {
    p.block_bytes = 2048;
  } else if (layout == PackedLayout::S24_F16x16 && w.type == DType::S24_F16) {
    p.block_bytes = 1152;
  } else {
    return std::nullopt;
  }
  if (p.n_in % p.block_inputs != 0) return std::nullopt;
  p.data = allocate_large_buffer(p.bytes());
  for (int64_t g = 0; g < p.n_groups(); ++g) {
    for (int64_t b = 0; b < p.n_blocks(); ++b) {
      uint8_t* out = p.data.get() + (static_cast<size_t>(g * p.n_blocks() + b)) * p.block_bytes;
      auto* halves = reinterpret_cast<uint16_t*>(out);
      alignas(4) uint8_t padded[kRows][32 * 4];  // float blocks reaching past w's rows or inputs, zero-filled
      auto row_block = [&](int i) -> const uint8_t* {  // the source bytes of this block in row i
        const int64_t row = g * kRows + i, first = b * p.block_inputs;
        const uint8_t* src = row < w.n_out ? w.row(row) + row_bytes(w.type, static_cast<size_t>(first)) : nullptr;
        if (src && first + p.block_inputs <= w.n_in) return src;
        std::memset(padded[i], 0, sizeof(padded[i]));
        if (src) std::memcpy(padded[i], src, row_bytes(w.type, static_cast<size_t>(w.n_in - first)));
        return padded[i];
      };
      switch (p.layout) {
        case PackedLayout::S24_Q8x16:
        case PackedLayout::S24_Q4x16:
        case PackedLayout::S24_F16x16: {
          const uint8_t* rows[kRows];
          for (int i = 0; i < kRows; ++i) rows[i] = row_block(i);
          pack_sparse24_block(p.layout, rows, out);
          break;
        }
        case PackedLayout::Q4_1x16:
        case PackedLayout::Q5_0x16:
        case PackedLayout::Q5_1x16: {
          // Blocks of 32 with fp16 d first (and fp16 m next for the min types), as in the file.
          const bool has_min = p.layout != PackedLayout::Q5_0x16;
          uint8_t codes[kRows][32];  // [row][input]
          for (int i = 0; i < kRows; ++i) {
            const auto* src = reinterpret_cast<const uint16_t*>(row_block(i));
            halves[i] = src[0];
            if (has_min) halves[16 + i] = src[1];
            block_codes(w.type, row_block(i), codes[i]);
          }
          uint8_t* tile = out + (has_min ? 64 : 32);
          const auto value = [&](int i, int k) { return codes[i][k]; };
          if (p.layout == PackedLayout::Q4_1x16) {
            write_nibble_tile(tile, value);
          } else {
            write_quint_tile(tile, value);
          }
          break;
        }
        case PackedLayout::Q5_Kx16: {
          uint8_t codes[kRows][256];  // [row][input]
          for (int i = 0; i < kRows; ++i) {
            const auto* blk = reinterpret_cast<const BlockQ5_K*>(row_block(i));
            halves[i] = blk->d;
            halves[16 + i] = blk->dmin;
            for (int k = 0; k < 12; ++k) out[64 + k * 16 + i] = blk->scales[k];
            block_codes(DType::Q5_K, blk, codes[i]);
          }
          for (int j = 0; j < 8; ++j) write_quint_tile(out + 256 + 320 * j, [&](int i, int k) { return codes[i][32 * j + k]; });
          break;
        }
        case PackedLayout::Q2_Kx16: {
          uint8_t codes[kRows][256];  // [row][input]
          for (int i = 0; i < kRows; ++i) {
            const auto* blk = reinterpret_cast<const BlockQ2_K*>(row_block(i));
            halves[i] = blk->d;
            halves[16 + i] = blk->dmin;
            for (int s = 0; s < 16; ++s) out[64 + s * 16 + i] = blk->scales[s];
            block_codes(DType::Q2_K, blk, codes[i]);
          }
          for (int j = 0; j < 8; ++j) write_crumb_tile(out + 320 + 128 * j, [&](int i, int k) { return codes[i][32 * j + k]; });
          break;
        }
        case PackedLayout::Q3_Kx16: {
          uint8_t codes[kRows][256];  // [row][input]
          for (int i = 0; i < kRows; ++i) {
            const auto* blk = reinterpret_cast<const BlockQ3_K*>(row_block(i));
            halves[i] = blk->d;
            for (int k = 0; k < 12; ++k) out[32 + k * 16 + i] = blk->scales[k];
            block_codes(DType::Q3_K, blk, codes[i]);
          }
          for (int j = 0; j < 8; ++j) write_triad_tile(out + 224 + 192 * j, [&](int i, int k) { return codes[i][32 * j + k]; });
          break;
        }
        case PackedLayout::Q4_0x16: {
          uint8_t codes[kRows][32];  // [row][input]
          for (int i = 0; i < kRows; ++i) {
            halves[i] = reinterpret_cast<const BlockQ4_0*>(row_block(i))->d;
            block_codes(DType::Q4_0, row_block(i), codes[i]);
          }
          write_nibble_tile(out + 32, [&](int i, int k) { return codes[i][k]; });
          break;
        }
        case PackedLayout::Q8_0x16:
          for (int i = 0; i < kRows; ++i) {
            const auto* blk = reinterpret_cast<const BlockQ8_0*>(row_block(i));
            halves[i] = blk->d;
            for (int grp = 0; grp < 8; ++grp)
              for (int j = 0; j < 4; ++j) out[32 + grp * 64 + i * 4 + j] = static_cast<uint8_t>(blk->qs[4 * grp + j] + 128);
          }
          break;
        case PackedLayout::Q4_Kx16: {
          uint8_t codes[kRows][256];  // [row][input]
          for (int i = 0; i < kRows; ++i) {
            const auto* blk = reinterpret_cast<const BlockQ4_K*>(row_block(i));
            halves[i] = blk->d;
            halves[16 + i] = blk->dmin;
            for (int k = 0; k < 12; ++k) out[64 + k * 16 + i] = blk->scales[k];
            block_codes(DType::Q4_K, blk, codes[i]);
          }
          for (int j = 0; j < 8; ++j) write_nibble_tile(out + 256 + 256 * j, [&](int i, int k) { return codes[i][32 * j + k]; });
          break;
        }
        case PackedLayout::BF16x16:
          for (int i = 0; i < kRows; ++i) {
            const auto* src = reinterpret_cast<const uint16_t*>(row_block(i));  // [32]
            for (int k = 0; k < 32; ++k) {
              const uint16_t bits = w.type == DType::BF16 ? src[k] : fp32_to_bf16(fp16_to_fp32(src[k]));
              std::memcpy(out + (k / 2) * 64 + i * 4 + (k % 2) * 2, &bits, 2);
            }
          }
          break;
        case PackedLayout::F16Fma16:
        case PackedLayout::BF16Fma16:
          for (int i = 0; i < kRows; ++i) {
            const auto* src = reinterpret_cast<const uint16_t*>(row_block(i));  // [32]
            for (int k = 0; k < 32; ++k) halves[k * kRows + i] = src[k];
          }
          break;
        case PackedLayout::F32Fma16:
          for (int i = 0; i < kRows; ++i)
            for (int k = 0; k < 32; ++k) std::memcpy(out + 4 * (k * kRows + i), row_block(i) + 4 * k, 4);
          break;
        case PackedLayout::Q6_Kx16: {
          uint8_t codes[kRows][256];  // [row][input]
          for (int i = 0; i < kRows; ++i) {
            const auto* blk = reinterpret_cast<const BlockQ6_K*>(row_block(i));
            halves[i] = blk->d;
            for (int s = 0; s < 16; ++s) out[32 + s * 16 + i] = static_cast<uint8_t>(blk->scales[s]);
            block_codes(DType::Q6_K, blk, codes[i]);
          }
          for (int j = 0; j < 8; ++j) write_sextet_tile(out + 288 + 384 * j, [&](int i, int k) { return codes[i][32 * j + k]; });
          break;
        }
      }
    }
  }
  return p;
}

void unpack_block_row(PackedLayout layout, const uint8_t* blk, int i, float* out) {
  const auto* halves = reinterpret_cast<const uint16_t*>(blk);
  switch (layout) {
    case PackedLayout::S24_Q8x16:
    case PackedLayout::S24_Q4x16:
    case PackedLayout::S24_F16x16: unpack_sparse24_block_row(layout, blk, i, out); break;
    case PackedLayout::BF16x16:
      for (int k = 0; k < 32; ++k) out[k] = bf16_to_fp32(halves[(k / 2) * 32 + i * 2 + k % 2]);
      break;
    case PackedLayout::F16Fma16:
      for (int k = 0; k < 32; ++k) out[k] = fp16_to_fp32(halves[k * 16 + i]);
      break;
    case PackedLayout::BF16Fma16:
      for (int k = 0; k < 32; ++k) out[k] = bf16_to_fp32(halves[k * 16 + i]);
      break;
    case PackedLayout::F32Fma16:
      for (int k = 0; k < 32; ++k) std::memcpy(out + k, blk + 4 * (k * 16 + i), 4);
      break;
    case PackedLayout::Q4_0x16:
      for (int k = 0; k < 32; ++k) out[k] = fp16_to_fp32(halves[i]) * (nibble_tile_value(blk + 32, i, k) - 8);
      break;
    case PackedLayout::Q8_0x16:
      for (int k = 0; k < 32; ++k) out[k] = fp16_to_fp32(halves[i]) * (blk[32 + k / 4 * 64 + i * 4 + k % 4] - 128);
      break;
    case PackedLayout::Q2_Kx16:
      for (int e = 0; e < 256; ++e) {
        const uint8_t sc = blk[64 + (e / 16) * 16 + i];
        out[e] = fp16_to_fp32(halves[i]) * (sc & 0xF) * crumb_tile_value(blk + 320 + 128 * (e / 32), i, e % 32) -
                 fp16_to_fp32(halves[16 + i]) * (sc >> 4);
      }
      break;
    case PackedLayout::Q3_Kx16: {
      uint8_t scales[12];  // row i's 6-bit scales, as in the file
      for (int k = 0; k < 12; ++k) scales[k] = blk[32 + k * 16 + i];
      for (int e = 0; e < 256; ++e) {
        const int q = triad_tile_value(blk + 224 + 192 * (e / 32), i, e % 32);
        out[e] = fp16_to_fp32(halves[i]) * static_cast<float>(q3_k_scale(e / 16, scales) - 32) * static_cast<float>(q - 4);
      }
      break;
    }
    case PackedLayout::Q4_1x16:
      for (int k = 0; k < 32; ++k) out[k] = fp16_to_fp32(halves[i]) * nibble_tile_value(blk + 64, i, k) + fp16_to_fp32(halves[16 + i]);
      break;
    case PackedLayout::Q5_0x16:
      for (int k = 0; k < 32; ++k) out[k] = fp16_to_fp32(halves[i]) * (quint_tile_value(blk + 32, i, k) - 16);
      break;
    case PackedLayout::Q5_1x16:
      for (int k = 0; k < 32; ++k)
        out[k] = fp16_to_fp32(halves[i]) * quint_tile_value(blk + 64, i, k) + fp16_to_fp32(halves[16 + i]);
      break;
    case PackedLayout::Q4_Kx16:
    case PackedLayout::Q5_Kx16: {
      uint8_t scales[12];  // row i's packed 6-bit scales and mins, as in the file
      for (int k = 0; k < 12; ++k) scales[k] = blk[64 + k * 16 + i];
      for (int e = 0; e < 256; ++e) {
        uint8_t sc = 0, m = 0;
        q4_k_scale_min(e / 32, scales, sc, m);
        const int q = layout == PackedLayout::Q4_Kx16 ? nibble_tile_value(blk + 256 + 256 * (e / 32), i, e % 32)
                                                      : quint_tile_value(blk + 256 + 320 * (e / 32), i, e % 32);
        out[e] = fp16_to_fp32(halves[i]) * sc * q - fp16_to_fp32(halves[16 + i]) * m;
      }
      break;
    }
    case PackedLayout::Q6_Kx16:
      for (int e = 0; e < 256; ++e) {
        const int q = sextet_tile_value(blk + 288 + 384 * (e / 32), i, e % 32);
        out[e] = fp16_to_fp32(halves[i]) * static_cast<int8_t>(blk[32 + (e / 16) * 16 + i]) * (q - 32);
      }
      break;
  }
}

PackedGemmF32Fn packed_gemm_f32_kernel(PackedLayout layout, Isa isa) {
  PackedGemmF32Fn fn = isa_includes(isa, Isa::Avx512) ? packed_gemm_f32_kernel_avx512(layout) : nullptr;
  if (!fn && isa_includes(isa, Isa::Avx2)) fn = packed_gemm_f32_kernel_avx2(layout);
  if (!fn && isa_includes(isa, Isa::Neon)) fn = packed_gemm_f32_kernel_neon(layout);
  return fn ? fn : packed_gemm_f32_reference(layout);
}

PackedGemmBf16Fn packed_gemm_bf16_kernel(Isa isa) {
  PackedGemmBf16Fn fn = isa_includes(isa, Isa::Avx512) && cpu_has_avx512_bf16() ? packed_gemm_bf16_kernel_avx512() : nullptr;
  return fn ? fn : packed_gemm_bf16_reference;
}

#if !defined(KESTREL_HAVE_NEON_KERNELS)
PackedGemmFn packed_gemm_kernel_neon(PackedLayout) { return nullptr; }
PackedGemmF32Fn packed_gemm_f32_kernel_neon(PackedLayout) { return nullptr; }
#endif
#if !defined(KESTREL_HAVE_X86_KERNELS)
PackedGemmBf16Fn packed_gemm_bf16_kernel_avx512() { return nullptr; }
PackedGemmFn packed_gemm_kernel_avx2(PackedLayout) { return nullptr; }
PackedGemmF32Fn packed_gemm_f32_kernel_avx2(PackedLayout) { return nullptr; }
PackedGemmF32Fn packed_gemm_f32_kernel_avx512(PackedLayout) { return nullptr; }
PackedGemmFn packed_gemm_kernel_avx512(PackedLayout) { return nullptr; }
PackedGemmFn packed_gemm_kernel_avx512vbmi(PackedLayout) { return nullptr; }
#endif

PackedGemmFn packed_gemm_kernel(PackedLayout layout, Isa isa) {
  PackedGemmFn fn = nullptr;
  if (isa_includes(isa, Isa::Avx512)) fn = cpu_has_avx512_vbmi() ? packed_gemm_kernel_avx512vbmi(layout) : nullptr;
  if (!fn && isa_includes(isa, Isa::Avx512)) fn = packed_gemm_kernel_avx512(layout);
  if (!fn && isa_includes(isa, Isa::Avx2)) fn = packed_gemm_kernel_avx2(layout);
  if (!fn && isa_includes(isa, Isa::Neon)) fn = packed_gemm_kernel_neon(layout);
  return fn ? fn : packed_gemm_reference(layout);
}

bool has_packed_layout(DType type, int64_t n_in, int64_t n_out) { return PackedMatrix::supports(type, n_in, n_out, detected_isa()); }

std::shared_ptr<const PackedMatrix> pack_for_kernels(const WeightMatrix& w) {
  if (!has_packed_layout(w.type, w.n_in, w.n_out)) return nullptr;
  std::optional<PackedMatrix> p = PackedMatrix::pack(w);
  return p ? std::make_shared<const PackedMatrix>(std::move(*p)) : nullptr;
}

}  // namespace kestrel
