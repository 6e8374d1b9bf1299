// Text <-> token ids for the vocabularies GGUF files carry: SentencePiece-style (byte fallback, "▁" for
// spaces, score-ordered merges) and byte-level BPE (pre-tokenizer regexes, rank-ordered merges).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/gguf.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/vocab.h"

namespace kestrel {

class Tokenizer {
 public:
  static Result<Tokenizer> from_gguf(const GgufFile& file);
  static Result<Tokenizer> from_vocab(Vocab vocab);

  const Vocab& vocab() const { return vocab_; }
  bool has_vocab() const { return vocab_.type != VocabType::None; }

  // add_special: BOS/EOS as the metadata asks. parse_special: text such as "<s>" or "<|im_start|>" becomes
  // the control token; otherwise it is tokenized as plain text. User-defined tokens always match.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special = false) const;
  // The same, but gives up (nullopt) as soon as the text is known to need more than max_tokens tokens: a text
  // longer than (max_tokens + 2) x the longest token's bytes is refused before any work, and encoding stops
  // at the first fragment or word past the limit. Bounds the memory a hostile prompt can cost.
  std::optional<std::vector<int32_t>> encode(std::string_view text, bool add_special, bool parse_special,
                                             size_t max_tokens) const;

  // The bytes a token stands for. Control tokens give "" unless render_special.
  std::string token_to_piece(int32_t id, bool render_special = false) const;
  // Concatenated pieces (SentencePiece: without the leading space added at encode time).
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

 private:
  // Appends the tokens of one raw fragment; stops after a word once out holds more than max_tokens.
  void encode_text(const std::string& text, bool first_fragment, std::vector<int32_t>& out, size_t max_tokens) const;
  void encode_spm(const std::string& text, std::vector<int32_t>& out) const;
  void encode_bpe_word(const std::string& word, std::vector<int32_t>& out) const;

  Vocab vocab_;
  std::shared_ptr<PreTokenizer> pre_;
  std::vector<int32_t> special_by_length_;  // control / user-defined / unknown tokens, longest text first
  std::vector<std::string> byte_to_unicode_;  // [256] byte-level BPE alphabet
  std::unordered_map<uint32_t, uint8_t> unicode_to_byte_;
  int32_t spm_byte_tokens_[256];
  size_t max_token_bytes_ = 1;  // the longest token's text: no token stands for more bytes of input  // "<0xNN>" ids, -1 when absent
};

}  // namespace kestrel
