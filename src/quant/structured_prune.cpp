#include "quant/structured_prune.h"

#include <cstdio>
#include <cstdlib>
#include <queue>
#include <sstream>

namespace kestrel {
namespace {

// Removes the cheapest next units (by cost per size) of `layers` (those in `which`) while the removed size stays nearest the
// target: a unit goes when removing it brings the total closer (ties remove).
void remove_cheapest(const std::vector<std::vector<PruneUnit>>& layers, const std::vector<size_t>& which, double target,
                     std::vector<int>& removed) {
  using Next = std::pair<double, size_t>;  // (cost per size of the layer's next unit, layer)
  std::priority_queue<Next, std::vector<Next>, std::greater<>> next;
  const auto offer = [&](size_t il) {
    const size_t k = static_cast<size_t>(removed[il]);
    if (k + 1 < layers[il].size()) next.push({layers[il][k].cost / static_cast<double>(layers[il][k].size), il});
  };
  for (size_t il : which) offer(il);
  double done = 0;
  while (!next.empty()) {
    const size_t il = next.top().second;
    next.pop();
    const auto size = static_cast<double>(layers[il][static_cast<size_t>(removed[il])].size);
    if (2.0 * done + size > 2.0 * target) continue;  // overshoots by more than it would fall short
    done += size;
    ++removed[il];
    offer(il);
  }
}

}  // namespace

Result<StructuredSpec> parse_structured_spec(const std::string& text) {
  StructuredSpec spec;
  std::stringstream items(text);
  std::string item;
  bool any = false;
  while (std::getline(items, item, ',')) {
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (key == "budget") {
      if (value == "layer") spec.budget = PruneBudget::PerLayer;
      else if (value == "global") spec.budget = PruneBudget::Global;
      else return Error{"--structured: budget is 'layer' or 'global', not '" + value + "'"};
      continue;
    }
    double* field = key == "heads" ? &spec.heads : key == "kv" ? &spec.kv_heads : key == "ffn" ? &spec.ffn : nullptr;
    if (!field) return Error{"--structured: unknown item '" + item + "' (heads=H, kv=K, ffn=F, budget=layer|global)"};
    char* end = nullptr;
    const double f = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(f >= 0.0 && f < 1.0))
      return Error{"--structured: " + key + " takes a fraction in [0, 1), not '" + value + "'"};
    *field = f;
    any = any || f > 0;
  }
  if (!any) return Error{"--structured: nothing to remove (give heads=, kv= or ffn= above 0)"};
  return spec;
}

std::string to_string(const StructuredSpec& spec) {
  char text[128];
  std::snprintf(text, sizeof text, "heads=%g,kv=%g,ffn=%g,budget=%s", spec.heads, spec.kv_heads, spec.ffn,
                spec.budget == PruneBudget::Global ? "global" : "layer");
  return text;
}

std::vector<int> units_to_remove(const std::vector<std::vector<PruneUnit>>& layers, double fraction, PruneBudget budget) {
  std::vector<int> removed(layers.size(), 0);
  if (fraction <= 0) return removed;
  const auto total = [&](size_t il) {
    double size = 0;
    for (const PruneUnit& u : layers[il]) size += static_cast<double>(u.size);
    return size;
  };
  if (budget == PruneBudget::PerLayer) {
    for (size_t il = 0; il < layers.size(); ++il) remove_cheapest(layers, {il}, fraction * total(il), removed);
  } else {  // costs as shares of their layer's total
    std::vector<std::vector<PruneUnit>> shares = layers;
    std::vector<size_t> all(layers.size());
    double size = 0;
    for (size_t il = 0; il < layers.size(); ++il) {
      double cost = 0;
      for (const PruneUnit& u : layers[il]) cost += u.cost;
      for (PruneUnit& u : shares[il]) u.cost = cost > 0 ? u.cost / cost : 0.0;
      all[il] = il, size += total(il);
    }
    remove_cheapest(shares, all, fraction * size, removed);
  }
  return removed;
}

}  // namespace kestrel
