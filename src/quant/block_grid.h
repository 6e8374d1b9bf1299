// The grid of one quantized block: once a block's scales are stored, each of its elements may take the
// values step[i] * q + offset[i] for an integer code q in [0, levels - 1]. Quantizers that choose codes
// one element at a time under fixed scales (GPTQ, quant/gptq.h) read the grid from a block whose scales
// are stored, pick codes, and write them back; the block's scale bytes are left as they are.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "quant/blocks.h"

namespace kestrel {

// The code of the value nearest to x on the grid step * q + offset, q in [0, levels - 1] (0 where step is 0).
uint8_t grid_code(float step, float offset, int levels, float x);

struct BlockGrid {
  int n = 0;                // elements in the block (the type's block size)
  int levels = 0;           // codes 0 .. levels - 1
  float step[kQK_K] = {};   // [n]
  float offset[kQK_K] = {}; // [n]

  // The code of the grid value nearest to x at element i.
  uint8_t code(int i, float x) const { return grid_code(step[i], offset[i], levels, x); }
  float value(int i, uint8_t q) const { return step[i] * static_cast<float>(q) + offset[i]; }
};

// Whether the grid functions below handle `type` (the quantized block types kestrel writes).
bool has_block_grid(DType type);

// The number of codes of each element of `type` (has_block_grid(type)).
int grid_levels(DType type);

// The grid of one block of `type` from its stored scales.
BlockGrid block_grid(DType type, const void* block);

// Writes codes[n] (each < the grid's levels) into the block's code bits; its scales are unchanged.
void set_block_codes(DType type, void* block, const uint8_t* codes);

// codes[n] <- the block's codes (the inverse of set_block_codes): element i decodes to grid.value(i, codes[i]).
void block_codes(DType type, const void* block, uint8_t* codes);

}  // namespace kestrel
