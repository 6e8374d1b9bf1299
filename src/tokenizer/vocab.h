// A tokenizer vocabulary read from GGUF "tokenizer.*" metadata, validated (lengths agree, special ids in
// range, merges well-formed).
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "io/gguf.h"

namespace kestrel {

enum class VocabType { None, Spm, Bpe };
enum class TokenType : int32_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

struct Vocab {
  VocabType type = VocabType::None;
  std::string pre;  // tokenizer.ggml.pre family ("default", "gpt-2", "llama-bpe", ...)
  std::vector<std::string> tokens;  // [n_vocab] token text as stored
  std::vector<float> scores;        // [n_vocab] SPM merge scores (0 when absent)
  std::vector<TokenType> types;     // [n_vocab]
  std::unordered_map<std::string, int32_t> token_to_id;
  std::unordered_map<std::string, int32_t> merge_rank;  // "left right" -> rank (BPE)
  int32_t bos = -1, eos = -1, unk = -1, eot = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t find(const std::string& text) const {
    const auto it = token_to_id.find(text);
    return it == token_to_id.end() ? -1 : it->second;
  }
  bool is_end_of_generation(int32_t id) const { return id >= 0 && (id == eos || id == eot); }
};

Result<Vocab> load_vocab(const GgufFile& file);

}  // namespace kestrel
