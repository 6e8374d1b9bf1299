#include "tokenizer/vocab.h"

namespace kestrel {

Result<Vocab> load_vocab(const GgufFile& f) {
  Vocab v;
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model.ok()) return Error{model.error()};
  if (!model.value() || *model.value() == "none" || *model.value() == "no_vocab") return v;
  const std::string& name = *model.value();
  if (name == "llama") {
    v.type = VocabType::Spm;
    v.add_bos = true;
    v.add_space_prefix = true;
  } else if (name == "gpt2") {
    v.type = VocabType::Bpe;
  } else {
    return Error{"tokenizer model '" + name + "' is not supported (supported: llama (SentencePiece), gpt2 (BPE))"};
  }
  auto pre = f.get_string("tokenizer.ggml.pre");
  if (!pre.ok()) return Error{pre.error()};
  v.pre = pre.value().value_or("default");

  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  if (!tokens || !tokens->is_array() || tokens->array_type != GgufValueType::STRING || tokens->strings.empty())
    return Error{"tokenizer.ggml.tokens must be a non-empty array of strings"};
  v.tokens = tokens->strings;
  const size_t n = v.tokens.size();
  v.scores.assign(n, 0.f);
  v.types.assign(n, TokenType::Normal);
  if (const GgufValue* s = f.find("tokenizer.ggml.scores")) {
    if (!s->is_array() || s->array_type == GgufValueType::STRING || s->numbers.size() != n)
      return Error{"tokenizer.ggml.scores must be " + std::to_string(n) + " numbers, got " + s->to_display_string(2)};
    for (size_t i = 0; i < n; ++i) v.scores[i] = static_cast<float>(s->numbers[i]);
  }
  if (const GgufValue* t = f.find("tokenizer.ggml.token_type")) {
    if (!t->is_array() || t->array_type == GgufValueType::STRING || t->numbers.size() != n)
      return Error{"tokenizer.ggml.token_type must be " + std::to_string(n) + " integers"};
    for (size_t i = 0; i < n; ++i) {
      const double x = t->numbers[i];
      if (!(x >= 0 && x <= 6)) return Error{"tokenizer.ggml.token_type[" + std::to_string(i) + "] is out of range 0..6"};
      v.types[i] = static_cast<TokenType>(static_cast<int32_t>(x));
    }
  }
  for (size_t i = 0; i < n; ++i) v.token_to_id.emplace(v.tokens[i], static_cast<int32_t>(i));
  if (v.type == VocabType::Bpe) {
    const GgufValue* merges = f.find("tokenizer.ggml.merges");
    if (!merges || !merges->is_array() || merges->array_type != GgufValueType::STRING)
      return Error{"BPE tokenizer needs tokenizer.ggml.merges (array of strings)"};
    for (size_t i = 0; i < merges->strings.size(); ++i) {
      const std::string& m = merges->strings[i];
      const size_t space = m.find(' ', 1);
      if (space == std::string::npos || space + 1 >= m.size())
        return Error{"tokenizer.ggml.merges[" + std::to_string(i) + "] = \"" + m + "\" is not \"left right\""};
      v.merge_rank.emplace(m, static_cast<int32_t>(i));
    }
  }

  auto read_id = [&](const char* key, int32_t& out) -> Status {
    auto id = f.get_int(key);
    if (!id.ok()) return Error{id.error()};
    if (!id.value()) return {};
    const int64_t x = *id.value();
    if (x == 0xFFFFFFFFll || x == -1) { out = -1; return {}; }  // "none"
    if (x < 0 || x >= static_cast<int64_t>(n))
      return Error{std::string(key) + " = " + std::to_string(x) + " is outside the vocabulary of " + std::to_string(n)};
    out = static_cast<int32_t>(x);
    return {};
  };
  KESTREL_TRY(read_id("tokenizer.ggml.bos_token_id", v.bos));
  KESTREL_TRY(read_id("tokenizer.ggml.eos_token_id", v.eos));
  KESTREL_TRY(read_id("tokenizer.ggml.unknown_token_id", v.unk));
  KESTREL_TRY(read_id("tokenizer.ggml.eot_token_id", v.eot));
  auto flag = [&](const char* key, bool& out) -> Status {
    auto b = f.get_bool(key);
    if (!b.ok()) return Error{b.error()};
    if (b.value()) out = *b.value();
    return {};
  };
  KESTREL_TRY(flag("tokenizer.ggml.add_bos_token", v.add_bos));
  KESTREL_TRY(flag("tokenizer.ggml.add_eos_token", v.add_eos));
  KESTREL_TRY(flag("tokenizer.ggml.add_space_prefix", v.add_space_prefix));
  if (v.add_bos && v.bos < 0) v.add_bos = false;
  return v;
}

}  // namespace kestrel
