// Structured pruning's choices: which whole units of a layer to remove (a KV group, one query head of
// every KV group, a run of FFN channels) under a budget. Each layer offers its units in the order it would
// remove them (cheapest first), each with a cost (the output energy it carries, model/structured_pruner.h)
// and a size (heads or channels); the budget removes a fraction of the total size, either the same
// fraction of every layer or over the whole model, cheapest units first wherever they are. Across layers a
// unit's cost counts as its share of its layer's total: raw output energies are not comparable between
// depths (the residual stream they add to grows), shares are (a layer whose importance sits in a few units
// loses more of the others). On stories260K the shares' global budget matched the per-layer one, and the
// raw energies' was twice as far from the model (mean KL divergence, docs/pruning.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace kestrel {

enum class PruneBudget { PerLayer, Global };

struct StructuredSpec {
  double heads = 0;     // fraction of the query heads removed, the same number from every KV group (GQA stays
                        // uniform); counted among the heads left after `kv_heads`
  double kv_heads = 0;  // fraction of the KV heads removed, each with the query heads that read it
  double ffn = 0;       // fraction of the dense FFN channels removed (in runs of up to 64 channels)
  PruneBudget budget = PruneBudget::PerLayer;
  bool empty() const { return heads == 0 && kv_heads == 0 && ffn == 0; }
};

// Parses "heads=H,kv=K,ffn=F,budget=layer|global" (any subset, in any order; fractions in [0, 1)).
// Errors name the bad item.
Result<StructuredSpec> parse_structured_spec(const std::string& text);
// The same form, for metadata and reports.
std::string to_string(const StructuredSpec& spec);

struct PruneUnit {
  double cost = 0;  // what removing it loses; non-decreasing along a layer's list
  int64_t size = 1;
};

// How many of each layer's units to remove (a prefix of its list), so that the removed sizes come as close
// as the units allow to `fraction` of all sizes: of each layer's (PerLayer) or of the model's (Global,
// cheapest first across layers by share of the layer's cost per size). The last unit of a layer is never removed. fraction in [0, 1).
std::vector<int> units_to_remove(const std::vector<std::vector<PruneUnit>>& layers, double fraction, PruneBudget budget);

}  // namespace kestrel
