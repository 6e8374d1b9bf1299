#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <queue>

#include "core/utf8.h"

namespace kestrel {
namespace {

const std::string kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0, hit;
  while ((hit = s.find(from, pos)) != std::string::npos) {
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// Greedy pair merging shared by SentencePiece and BPE. Symbols start as the UTF-8 characters of `text` and
// live in a linked list; priority(left, right) gives a mergeable adjacent pair's priority (higher merges
// first, ties to the leftmost pair) or nullopt. Returns the final pieces as (offset, length) in order.
std::vector<std::pair<size_t, size_t>> merge_pairs(
    const std::string& text, const std::function<std::optional<double>(std::string_view, std::string_view)>& priority) {
  struct Symbol {
    int prev, next;
    size_t offset, length;  // byte range in text; length 0 once merged into its left neighbour
  };
  std::vector<Symbol> symbols;
  for (size_t off = 0; off < text.size();) {
    const size_t len = std::min(utf8::sequence_length(static_cast<unsigned char>(text[off])), text.size() - off);
    const int i = static_cast<int>(symbols.size());
    symbols.push_back({i - 1, i + 1, off, len});
    off += len;
  }
  if (symbols.empty()) return {};
  symbols.back().next = -1;

  struct Pair {
    int left, right;
    double priority;
    size_t length;  // combined length when queued; a mismatch later means the pair is stale
  };
  auto lower = [](const Pair& a, const Pair& b) {
    return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
  };
  std::priority_queue<Pair, std::vector<Pair>, decltype(lower)> queue(lower);
  const std::string_view view(text);
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    if (const auto p = priority(view.substr(l.offset, l.length), view.substr(r.offset, r.length)))
      queue.push({left, right, *p, l.length + r.length});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Symbol& l = symbols[static_cast<size_t>(p.left)];
    Symbol& r = symbols[static_cast<size_t>(p.right)];
    if (l.length == 0 || r.length == 0 || l.length + r.length != p.length) continue;  // stale
    l.length += r.length;
    r.length = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = p.left;
    try_add(l.prev, p.left);
    try_add(p.left, l.next);
  }
  std::vector<std::pair<size_t, size_t>> pieces;
  for (int i = 0; i != -1; i = symbols[static_cast<size_t>(i)].next)
    pieces.emplace_back(symbols[static_cast<size_t>(i)].offset, symbols[static_cast<size_t>(i)].length);
  return pieces;
}

}  // namespace

Result<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
  auto vocab = load_vocab(file);
  if (!vocab.ok()) return Error{vocab.error()};
  return from_vocab(std::move(vocab).value());
}

Result<Tokenizer> Tokenizer::from_vocab(Vocab vocab) {
  Tokenizer t;
  t.vocab_ = std::move(vocab);
  const Vocab& v = t.vocab_;
  if (v.type == VocabType::Bpe) {
    auto pre = PreTokenizer::for_family(v.pre);
    if (!pre.ok()) return Error{pre.error()};
    t.pre_ = pre.value();
  }
  for (int32_t id = 0; id < v.n_tokens(); ++id) {
    t.max_token_bytes_ = std::max(t.max_token_bytes_, v.tokens[static_cast<size_t>(id)].size());
    const TokenType type = v.types[static_cast<size_t>(id)];
    if ((type == TokenType::Control || type == TokenType::UserDefined || type == TokenType::Unknown) &&
        !v.tokens[static_cast<size_t>(id)].empty())
      t.special_by_length_.push_back(id);
  }
  std::stable_sort(t.special_by_length_.begin(), t.special_by_length_.end(), [&](int32_t a, int32_t b) {
    return v.tokens[static_cast<size_t>(a)].size() > v.tokens[static_cast<size_t>(b)].size();
  });
  // GPT-2's byte alphabet: printable bytes map to themselves, the rest to U+0100 onwards in byte order.
  t.byte_to_unicode_.resize(256);
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
    t.byte_to_unicode_[static_cast<size_t>(b)] = utf8::encode(cp);
    t.unicode_to_byte_[cp] = static_cast<uint8_t>(b);
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    t.spm_byte_tokens_[b] = v.find(name);
  }
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  return *encode(text, add_special, parse_special, SIZE_MAX);
}

std::optional<std::vector<int32_t>> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special,
                                                      size_t max_tokens) const {
  std::vector<int32_t> out;
  if (!has_vocab()) return out;
  // Every token stands for at most max_token_bytes_ bytes of the text (plus the BOS/EOS and SentencePiece's
  // leading space), so a longer text needs more tokens than allowed.
  if (max_tokens < SIZE_MAX / 2 && text.size() / max_token_bytes_ > max_tokens + 2) return std::nullopt;
  if (add_special && vocab_.add_bos) out.push_back(vocab_.bos);

  // Partition the text into raw fragments and special tokens, longest special text first.
  struct Fragment {
    int32_t token;  // -1 for raw text
    std::string text;
  };
  std::vector<Fragment> fragments{{-1, std::string(text)}};
  for (int32_t id : special_by_length_) {
    const TokenType type = vocab_.types[static_cast<size_t>(id)];
    if (!parse_special && type != TokenType::UserDefined) continue;
    const std::string& special = vocab_.tokens[static_cast<size_t>(id)];
    std::vector<Fragment> next;
    for (auto& f : fragments) {
      if (f.token >= 0) { next.push_back(std::move(f)); continue; }
      size_t pos = 0, hit;
      while ((hit = f.text.find(special, pos)) != std::string::npos) {
        if (hit > pos) next.push_back({-1, f.text.substr(pos, hit - pos)});
        next.push_back({id, {}});
        pos = hit + special.size();
      }
      if (pos < f.text.size()) next.push_back({-1, f.text.substr(pos)});
    }
    fragments = std::move(next);
  }
  bool prev_special = true;
  for (const auto& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
    } else if (!f.text.empty()) {
      encode_text(f.text, prev_special, out, max_tokens);
      prev_special = false;
    }
    if (out.size() > max_tokens) return std::nullopt;
  }
  if (add_special && vocab_.add_eos && vocab_.eos >= 0) out.push_back(vocab_.eos);
  if (out.size() > max_tokens) return std::nullopt;
  return out;
}

void Tokenizer::encode_text(const std::string& text, bool after_special, std::vector<int32_t>& out,
                            size_t max_tokens) const {
  if (vocab_.type == VocabType::Spm) {
    std::string s = (vocab_.add_space_prefix && after_special) ? " " + text : text;
    replace_all(s, " ", kSpmSpace);
    encode_spm(s, out);
  } else {
    for (const std::string& word : pre_->split(text)) {
      std::string mapped;
      for (unsigned char c : word) mapped += byte_to_unicode_[c];
      encode_bpe_word(mapped, out);
      if (out.size() > max_tokens) return;
    }
  }
}

// SentencePiece BPE: merge the adjacent pair whose concatenation is the highest-scoring vocabulary entry.
// Leftover characters that are not tokens fall back to their bytes.
void Tokenizer::encode_spm(const std::string& text, std::vector<int32_t>& out) const {
  const auto pieces = merge_pairs(text, [&](std::string_view left, std::string_view right) -> std::optional<double> {
    const int32_t id = vocab_.find(std::string(left) + std::string(right));
    if (id < 0) return std::nullopt;
    return vocab_.scores[static_cast<size_t>(id)];
  });
  for (const auto& [offset, length] : pieces) {
    const int32_t id = vocab_.find(text.substr(offset, length));
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (size_t k = 0; k < length; ++k) {
      const int32_t byte_id = spm_byte_tokens_[static_cast<unsigned char>(text[offset + k])];
      if (byte_id >= 0) out.push_back(byte_id);
      else if (vocab_.unk >= 0) out.push_back(vocab_.unk);
    }
  }
}

// Byte-level BPE on one pre-tokenized word (already in the byte alphabet): merge the pair with the lowest
// merge rank.
void Tokenizer::encode_bpe_word(const std::string& word, std::vector<int32_t>& out) const {
  if (pre_->ignore_merges()) {
    const int32_t id = vocab_.find(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const auto pieces = merge_pairs(word, [&](std::string_view left, std::string_view right) -> std::optional<double> {
    const auto it = vocab_.merge_rank.find(std::string(left) + " " + std::string(right));
    if (it == vocab_.merge_rank.end()) return std::nullopt;
    return -static_cast<double>(it->second);
  });
  for (const auto& [offset, length] : pieces) {
    const int32_t id = vocab_.find(word.substr(offset, length));
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (size_t k = 0; k < length; ++k) {  // no token for the merged piece: fall back to single characters
      const int32_t single = vocab_.find(std::string(1, word[offset + k]));
      if (single >= 0) out.push_back(single);
    }
  }
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_.n_tokens()) return {};
  const std::string& text = vocab_.tokens[static_cast<size_t>(id)];
  switch (vocab_.types[static_cast<size_t>(id)]) {
    case TokenType::Control:
      return render_special ? text : std::string();
    case TokenType::Unknown:
      return vocab_.type == VocabType::Spm ? "\xE2\x96\x85" : text;  // "▅"
    case TokenType::Byte:
      if (text.size() == 6 && text.rfind("<0x", 0) == 0 && text[5] == '>') {
        char* end = nullptr;
        const std::string hex = text.substr(3, 2);
        const long byte = std::strtol(hex.c_str(), &end, 16);
        if (end == hex.c_str() + 2) return std::string(1, static_cast<char>(byte));
      }
      break;
    case TokenType::UserDefined:
      return text;
    default:
      break;
  }
  if (vocab_.type == VocabType::Spm) {
    std::string s = text;
    replace_all(s, kSpmSpace, " ");
    return s;
  }
  std::string bytes;  // BPE: map the alphabet back to bytes
  for (size_t pos = 0; pos < text.size();) {
    const uint32_t cp = utf8::decode(text, pos);
    const auto it = unicode_to_byte_.find(cp);
    if (it != unicode_to_byte_.end()) bytes += static_cast<char>(it->second);
    else bytes += utf8::encode(cp);
  }
  return bytes;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece = token_to_piece(ids[i], render_special);
    // SentencePiece adds a space in front of the text; drop it when decoding from the start.
    const bool at_start = out.empty() && (i == 0 || (i == 1 && ids[0] == vocab_.bos));
    if (vocab_.type == VocabType::Spm && vocab_.add_space_prefix && at_start && !piece.empty() && piece[0] == ' ')
      piece.erase(0, 1);
    out += piece;
  }
  return out;
}

}  // namespace kestrel
