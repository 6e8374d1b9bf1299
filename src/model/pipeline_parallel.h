// Pipeline parallelism (issue 16, --pp P): each stage holds a contiguous range of the layers; the residual
// stream goes from stage to stage point to point, the last stage computes the logits and sends them to
// every stage. One batch whole would keep P - 1 of the P stages idle at any moment, so a batch of enough
// tokens (prefill chunks) runs as micro-batches: contiguous token ranges, in order, stage s running range
// m + 1 while stage s + 1 runs range m. A later range of a sequence attends over the earlier ranges' K/V,
// which the same stage has already stored. Decode steps (a token a sequence) stay whole: every micro-batch
// reads all of the stage's weights again, which only pays where the tokens make the weights' cost small.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace kestrel {

// Fewest tokens in a micro-batch, and most micro-batches per stage in one batch.
constexpr int kMicroBatchMinTokens = 32;
constexpr int kMicroBatchesPerStage = 8;

// The token ranges a batch of n_tok runs as over n_stages: cuts [n_micro + 1], cuts[0] = 0, cuts[n_micro] =
// n_tok, near-even ranges of at least kMicroBatchMinTokens (one range, {0, n_tok}, for one stage or a small
// batch). logits_rows must be in increasing order for more than one range (else one range).
std::vector<int> micro_batch_cuts(int n_tok, int n_stages, std::span<const int32_t> logits_rows);

}  // namespace kestrel
