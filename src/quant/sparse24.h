// 2:4 semi-structured sparse weight formats (kestrel's own tensor types, core/dtype.h): in every group of 4
// consecutive inputs of a row at most 2 weights are non-zero, so a block of 64 inputs stores the 32 kept
// values in a dense block format plus 2 bits of position per kept value — about half the bytes of the dense
// type. Layout of one 64-input block:
//   kept: the 32 kept values, kept value j belonging to group j / 2 (inputs 4 (j / 2) .. 4 (j / 2) + 3):
//         S24_F16: 32 x fp16 (64 bytes); S24_Q8: one Q8_0 block (34 bytes); S24_Q4: one Q4_0 block (18 bytes)
//   idx:  8 bytes; bits 2 (j % 4) .. 2 (j % 4) + 1 of idx[j / 4] hold kept value j's position in its group
//         (0..3), and each group's two positions ascend.
// Block bytes: S24_F16 72, S24_Q8 42, S24_Q4 26 (dense: F16 128, Q8_0 68, Q4_0 36 per 64 inputs).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace kestrel {

constexpr int kS24Block = 64;  // inputs per 2:4 block
constexpr int kS24Kept = 32;   // kept values per block

inline bool is_sparse24(DType t) { return t == DType::S24_F16 || t == DType::S24_Q8 || t == DType::S24_Q4; }
// The dense type a 2:4 type stores its kept values in (F16, Q8_0, Q4_0).
DType sparse24_value_type(DType t);
// The 2:4 type whose kept values are of dense type `values` (F16, Q8_0, Q4_0), if there is one.
std::optional<DType> sparse24_type_for(DType values);

// Kept value j's position (0..3) in its group of 4, from a block's 8 index bytes.
inline int sparse24_position(const uint8_t* idx, int j) { return (idx[j / 4] >> (2 * (j % 4))) & 3; }

// out[n] <- a row of 2:4 blocks (n a multiple of 64); pruned inputs are 0.
void dequantize_sparse24_row(DType type, const void* row, float* out, size_t n);
// A row of 2:4 blocks <- in[n]: in each group of 4 the two weights of largest magnitude are kept (the
// first on ties), so a row that already is 2:4 sparse loses only the kept values' rounding, and any other
// row is pruned to 2:4 by magnitude first. importance [n] (optional) weights the kept values' rounding
// error, as quantize_row_weighted does for the dense types.
void quantize_sparse24_row(DType type, const float* in, void* row, size_t n, const float* importance = nullptr);

// Whether every group of 4 consecutive values of in[n] (n a multiple of 4) has at most 2 non-zeros.
bool is_2_4_sparse(const float* in, size_t n);

}  // namespace kestrel
