#include "model/arch.h"

namespace kestrel {
namespace {
const ArchTraits* const kRegistry[] = {&kArchLlama, &kArchQwen2, &kArchQwen3, &kArchQwen3Moe, &kArchDeepseek2};
}

const ArchTraits* find_arch(std::string_view name) {
  for (const ArchTraits* a : kRegistry)
    if (name == a->name) return a;
  return nullptr;
}

std::vector<std::string> supported_arch_names() {
  std::vector<std::string> names;
  for (const ArchTraits* a : kRegistry) names.emplace_back(a->name);
  return names;
}

}  // namespace kestrel
