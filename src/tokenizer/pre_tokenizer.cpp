#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <map>

namespace kestrel {
namespace {

// The regex chains by family, as the reference tokenizers define them (a fact of each model's format).
const char* const kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const char* const kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct Family {
  std::vector<std::string> regexes;
  bool ignore_merges = false;
};

const std::map<std::string, Family>& families() {
  static const std::map<std::string, Family> table = [] {
    std::map<std::string, Family> t;
    const Family gpt2{{kGpt2}, false};
    for (const char* name : {"default", "gpt-2", "gpt2", "mpt", "olmo", "jais"}) t[name] = gpt2;
    const Family starcoder{{"\\p{N}", kGpt2}, false};
    for (const char* name : {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva"})
      t[name] = starcoder;
    t["falcon"] = {{"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"}, false};
    t["deepseek-llm"] = {{"[\\r\\n]",
                          "\\s?[A-Za-z\\x{b5}\\x{c0}-\\x{d6}\\x{d8}-\\x{f6}\\x{f8}-\\x{1ba}\\x{1bc}-\\x{1bf}\\x{1c4}-\\x{293}\\x{295}-\\x{2af}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37b}-\\x{37d}\\x{37f}\\x{386}\\x{388}-\\x{38a}\\x{38c}\\x{38e}-\\x{3a1}\\x{3a3}-\\x{3f5}\\x{3f7}-\\x{481}\\x{48a}-\\x{52f}\\x{531}-\\x{556}\\x{10a0}-\\x{10c5}\\x{13a0}-\\x{13f5}\\x{13f8}-\\x{13fd}\\x{1c90}-\\x{1cba}\\x{1cbd}-\\x{1cbf}\\x{1d00}-\\x{1d2b}\\x{1d6b}-\\x{1d77}\\x{1d79}-\\x{1d9a}\\x{1e00}-\\x{1f15}\\x{1f18}-\\x{1f1d}\\x{1f20}-\\x{1f45}\\x{1f48}-\\x{1f4d}\\x{1f50}-\\x{1f57}\\x{1f59}\\x{1f5b}\\x{1f5d}\\x{1f5f}-\\x{1f7d}\\x{1f80}-\\x{1fb4}\\x{1fb6}-\\x{1fbc}\\x{1fbe}\\x{1fc2}-\\x{1fc4}\\x{1fc6}-\\x{1fcc}\\x{1fd0}-\\x{1fd3}\\x{1fd6}-\\x{1fdb}\\x{1fe0}-\\x{1fec}\\x{1ff2}-\\x{1ff4}\\x{1ff6}-\\x{1ffc}\\x{2102}\\x{2107}\\x{210a}-\\x{2113}\\x{2115}\\x{2119}-\\x{211d}\\x{2124}\\x{2126}\\x{2128}\\x{212a}-\\x{212d}\\x{212f}-\\x{2134}\\x{2139}\\x{213c}-\\x{213f}\\x{2145}-\\x{2149}\\x{214e}\\x{2183}\\x{2184}\\x{2c00}-\\x{2c7b}\\x{2c7e}-\\x{2ce4}\\x{2ceb}-\\x{2cee}\\x{2cf2}\\x{2cf3}\\x{a640}-\\x{a66d}\\x{a680}-\\x{a69b}\\x{a722}-\\x{a76f}\\x{a771}-\\x{a787}\\x{a78b}-\\x{a78e}\\x{ab70}-\\x{abbf}\\x{fb00}-\\x{fb06}\\x{fb13}-\\x{fb17}\\x{ff21}-\\x{ff3a}\\x{ff41}-\\x{ff5a}\\x{10400}-\\x{1044f}\\x{104b0}-\\x{104d3}\\x{104d8}-\\x{104fb}\\x{10c80}-\\x{10cb2}\\x{10cc0}-\\x{10cf2}\\x{118a0}-\\x{118df}\\x{1e900}-\\x{1e943}]+",
                          "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", "[一-龥ࠀ-一가-퟿]+", "\\p{N}+"},
                         false};
    t["deepseek-coder"] = {{"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"}, false};
    const Family llama3{{kLlama3}, true};
    for (const char* name : {"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "dbrx", "smaug-bpe"})
      t[name] = llama3;
    const Family qwen2{{kQwen2}, false};
    for (const char* name : {"qwen2", "deepseek-r1-qwen", "megrez"}) t[name] = qwen2;
    return t;
  }();
  return table;
}

}  // namespace

Result<std::shared_ptr<PreTokenizer>> PreTokenizer::for_family(const std::string& family) {
  const auto& table = families();
  const auto it = table.find(family);
  if (it == table.end()) return Error{"pre-tokenizer family '" + family + "' (tokenizer.ggml.pre) is not supported"};
  std::shared_ptr<PreTokenizer> p(new PreTokenizer());
  p->ignore_merges_ = it->second.ignore_merges;
  for (const std::string& pattern : it->second.regexes) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
    if (!code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      return Error{"pre-tokenizer regex for '" + family + "' failed to compile at " + std::to_string(offset) + ": " +
                   reinterpret_cast<char*>(message)};
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // best effort; falls back to the interpreter
    p->compiled_.push_back(code);
  }
  return p;
}

PreTokenizer::~PreTokenizer() {
  for (void* code : compiled_) pcre2_code_free(static_cast<pcre2_code*>(code));
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string> pieces{std::string(text)};
  if (text.empty()) return {};
  for (void* raw : compiled_) {
    auto* code = static_cast<pcre2_code*>(raw);
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    std::vector<std::string> next;
    for (const std::string& piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t pos = 0, start = 0;
      while (start <= piece.size()) {
        // Invalid UTF-8 makes PCRE2 report an error: the rest of the piece is kept whole.
        // The first match validates the UTF-8 of the piece; later ones skip that O(n) check.
        const uint32_t options = start == 0 ? 0 : PCRE2_NO_UTF_CHECK;
        const int rc = pcre2_match(code, subject, piece.size(), start, options, md, nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t m_begin = ov[0], m_end = ov[1];
        if (m_end == m_begin) {  // empty match: step over one character
          start = m_end + 1;
          while (start < piece.size() && (static_cast<unsigned char>(piece[start]) & 0xC0) == 0x80) ++start;
          continue;
        }
        if (m_begin > pos) next.push_back(piece.substr(pos, m_begin - pos));
        next.push_back(piece.substr(m_begin, m_end - m_begin));
        pos = start = m_end;
      }
      if (pos < piece.size()) next.push_back(piece.substr(pos));
    }
    pcre2_match_data_free(md);
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace kestrel
