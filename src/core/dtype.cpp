#include "core/dtype.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>

namespace kestrel {
namespace {
constexpr std::array<DTypeTraits, 19> kTraits = {{
    {DType::F32, "F32", 1, 4},
    {DType::F16, "F16", 1, 2},
    {DType::Q4_0, "Q4_0", 32, 18},
    {DType::Q4_1, "Q4_1", 32, 20},
    {DType::Q5_0, "Q5_0", 32, 22},
    {DType::Q5_1, "Q5_1", 32, 24},
    {DType::Q8_0, "Q8_0", 32, 34},
    {DType::Q2_K, "Q2_K", 256, 84},
    {DType::Q3_K, "Q3_K", 256, 110},
    {DType::Q4_K, "Q4_K", 256, 144},
    {DType::Q5_K, "Q5_K", 256, 176},
    {DType::Q6_K, "Q6_K", 256, 210},
    {DType::I8, "I8", 1, 1},
    {DType::I32, "I32", 1, 4},
    {DType::BF16, "BF16", 1, 2},
    {DType::FP8_E4M3, "FP8_E4M3", 32, 34},
    {DType::S24_F16, "S24_F16", 64, 72},
    {DType::S24_Q8, "S24_Q8", 64, 42},
    {DType::S24_Q4, "S24_Q4", 64, 26},
}};
}  // namespace

std::optional<DTypeTraits> dtype_traits(uint32_t raw_type) {
  for (const auto& t : kTraits)
    if (static_cast<uint32_t>(t.type) == raw_type) return t;
  return std::nullopt;
}

const DTypeTraits& dtype_traits(DType type) {
  for (const auto& t : kTraits)
    if (t.type == type) return t;
  std::abort();  // every enumerator is in the table
}

const char* dtype_name(DType type) { return dtype_traits(type).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return (char)std::toupper(c); });
  for (const auto& t : kTraits)
    if (upper == t.name) return t.type;
  return std::nullopt;
}

}  // namespace kestrel
