// Text <-> token ids for the vocabularies GGUF files carry: SentencePiece-style (byte fallback, "▁" for
// spaces, score-ordered merges) and byte-level BPE (pre-tokenizer regexes, rank-ordered merges).
#pragma once
#include <memory>
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

  // The bytes a token stands for. Control tokens give "" unless render_special.
  std::string token_to_piece(int32_t id, bool render_special = false) const;
  // Concatenated pieces (SentencePiece: without the leading space added at encode time).
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

 private:
  void encode_text(const std::string& text, bool first_fragment, std::vector<int32_t>& out) const;
  void encode_spm(const std::string& text, std::vector<int32_t>& out) const;
  void encode_bpe_word(const std::string& word, std::vector<int32_t>& out) const;

  Vocab vocab_;
  std::shared_ptr<PreTokenizer> pre_;
  std::vector<int32_t> special_by_length_;  // control / user-defined / unknown tokens, longest text first
  std::vector<std::string> byte_to_unicode_;  // [256] byte-level BPE alphabet
  std::unordered_map<uint32_t, uint8_t> unicode_to_byte_;
  int32_t spm_byte_tokens_[256];  // "<0xNN>" ids, -1 when absent
};

}  // namespace kestrel
