// Small UTF-8 helpers shared by the tokenizers, the streaming decoder and the grammar compilers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kestrel::utf8 {

// sequence_length and decode read a sequence by its lead byte alone, as the tokenizers split text into
// characters (llama.cpp's rule too, so text with over-long forms or surrogates tokenizes the same); what
// must be well-formed (streamed output, grammar literals) goes through scan_sequence below instead.
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

// The sequence starting at s[i] under Unicode's well-formedness rules (Table 3-7: no over-long forms,
// surrogates or code points past U+10FFFF): `length` the bytes its lead byte announces (0 for a byte that
// cannot start one), `valid` how many of them, from the lead byte on, are in range before the first that
// is not (or the end of s). Well-formed exactly when length > 0 and valid == length.
struct SequenceScan {
  size_t length = 0, valid = 0;
  bool well_formed() const { return length > 0 && valid == length; }
};
inline SequenceScan scan_sequence(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return {1, 1};
  // The sequence's length and the range its second byte must be in.
  size_t len = 0;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c == 0xE0) len = 3, lo = 0xA0;
  else if (c == 0xED) len = 3, hi = 0x9F;
  else if (c >= 0xE1 && c <= 0xEF) len = 3;
  else if (c == 0xF0) len = 4, lo = 0x90;
  else if (c == 0xF4) len = 4, hi = 0x8F;
  else if (c >= 0xF1 && c <= 0xF3) len = 4;
  if (len == 0) return {};
  size_t k = 1;
  while (k < len && i + k < s.size()) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    ++k;
  }
  return {len, k};
}

// Whether all of s is well-formed UTF-8.
inline bool well_formed(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const SequenceScan seq = scan_sequence(s, i);
    if (!seq.well_formed()) return false;
    i += seq.length;
  }
  return true;
}

// Takes the decidable front of `pending` as well-formed UTF-8: well-formed sequences pass unchanged, each
// maximal ill-formed subpart becomes one U+FFFD (Unicode's "substitution of maximal subparts"), and a
// trailing sequence that may still complete stays in pending, unless `final`. The result does not depend on
// how the bytes were split across calls, so streamed text equals the text decoded in one go.
inline std::string take_well_formed(std::string& pending, bool final) {
  static const char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  const size_t n = pending.size();
  size_t i = 0;
  while (i < n) {
    const SequenceScan seq = scan_sequence(pending, i);
    if (seq.well_formed()) {
      out.append(pending, i, seq.length);
    } else if (seq.length > 0 && i + seq.valid == n && !final) {
      break;  // may still complete
    } else {
      out += kReplacement;
    }
    i += seq.length > 0 ? seq.valid : 1;
  }
  pending.erase(0, i);
  return out;
}

}  // namespace kestrel::utf8
