// Small UTF-8 helpers shared by the tokenizers and the streaming decoder.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kestrel::utf8 {

// Length of the UTF-8 sequence that starts with byte c (1 for invalid lead bytes, so callers always advance).
inline size_t sequence_length(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

inline std::string encode(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// Decodes the code point at s[pos] (advancing pos); invalid bytes decode as themselves, one at a time.
inline uint32_t decode(std::string_view s, size_t& pos) {
  const auto c = static_cast<unsigned char>(s[pos]);
  const size_t len = sequence_length(c);
  if (len == 1 || pos + len > s.size()) { ++pos; return c; }
  uint32_t cp = c & (0xFF >> (len + 1));
  for (size_t i = 1; i < len; ++i) {
    const auto cc = static_cast<unsigned char>(s[pos + i]);
    if ((cc & 0xC0) != 0x80) { ++pos; return c; }
    cp = (cp << 6) | (cc & 0x3F);
  }
  pos += len;
  return cp;
}

// Length of the longest prefix of s that is complete UTF-8 (a trailing partial sequence is excluded;
// invalid bytes count as complete so they are never held back forever).
inline size_t complete_prefix(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    const auto c = static_cast<unsigned char>(s[pos]);
    const size_t len = sequence_length(c);
    if (len == 1) { ++pos; continue; }
    if (pos + len > s.size()) {
      // Incomplete only if every byte present so far is a continuation byte.
      bool all_continuations = true;
      for (size_t i = pos + 1; i < s.size(); ++i)
        all_continuations &= (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80;
      return all_continuations ? pos : s.size();
    }
    pos += len;
  }
  return pos;
}

}  // namespace kestrel::utf8
