#include "quant/fp8.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace kestrel {

namespace {

float decode(uint8_t code) {
  const int exponent = (code >> 3) & 0xF, mantissa = code & 7;
  float v = exponent == 0 ? std::ldexp(static_cast<float>(mantissa) / 8.0f, -6)
                          : std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  if ((code & 0x7F) == 0x7F) v = NAN;
  return code & 0x80 ? -v : v;
}

}  // namespace

float fp8_e4m3_to_float(uint8_t code) {
  static const std::array<float, 256> values = [] {  // every code's value: decoding rows is a lookup
    std::array<float, 256> v{};
    for (int c = 0; c < 256; ++c) v[static_cast<size_t>(c)] = decode(static_cast<uint8_t>(c));
    return v;
  }();
  return values[code];
}

uint8_t float_to_fp8_e4m3(float x) {
  // The 127 finite non-negative codes' values, ascending with the code.
  static const std::array<float, 127> values = [] {
    std::array<float, 127> v{};
    for (int c = 0; c < 127; ++c) v[static_cast<size_t>(c)] = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    return v;
  }();
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  if (!(a < kFp8E4M3Max)) return sign | 0x7E;
  const size_t above = static_cast<size_t>(std::upper_bound(values.begin(), values.end(), a) - values.begin());
  const size_t below = above - 1;  // values[0] = 0 <= a
  const float d_below = a - values[below], d_above = values[above] - a;
  const size_t code = d_below < d_above ? below : d_above < d_below ? above : (below % 2 == 0 ? below : above);
  return static_cast<uint8_t>(sign | code);
}

}  // namespace kestrel
