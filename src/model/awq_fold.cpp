#include "model/awq_fold.h"

#include <algorithm>
#include <set>

#include "model/tensor_conversion.h"
#include "quant/quantize.h"

namespace kestrel {
namespace {

class Folder {
 public:
  Folder(const GgufFile& file, const HessianSet& hessians, const std::function<std::optional<DType>(const std::string&)>& target,
         const AwqOptions& options, ThreadPool& pool)
      : file_(file), hessians_(hessians), target_(target), options_(options), pool_(pool) {}

  // The tensor's current float contents (the file's until a fold changes them); null if it is absent.
  std::vector<float>* floats(const std::string& name) {
    if (auto it = fold_.tensors.find(name); it != fold_.tensors.end()) return &it->second;
    const TensorView* t = file_.find_tensor(name);
    if (!t) return nullptr;
    if (!is_float_type(t->type)) {
      error_ = "AWQ: tensor '" + name + "' is " + dtype_name(t->type) + ", not a float type";
      return nullptr;
    }
    std::vector<float>& v = fold_.tensors[name];
    v.resize(static_cast<size_t>(t->n_elements()));
    for (int64_t r = 0; r < t->n_rows(); ++r) dequantize_row(t->type, t->row(r), v.data() + r * t->ne[0], static_cast<size_t>(t->ne[0]));
    return &v;
  }

  // Searches the scales of the matrices `names` (2-D, sharing the input the first one's Hessian describes)
  // and applies them: columns multiplied by s, then undo(s) divides the producer of the input.
  void group(const std::string& label, const std::vector<std::string>& names, std::span<const int64_t> tie,
             const std::function<void(const std::vector<float>&)>& undo) {
    const HessianSet::Hessian* h = hessians_.find(names[0], 0);
    if (!h || !error_.empty()) return;
    std::vector<AwqMatrix> ms;
    std::vector<std::vector<float>*> data;
    for (const std::string& name : names) {
      const TensorView* t = file_.find_tensor(name);
      if (!t || t->n_dims != 2 || t->ne[0] != h->n_in) return;
      std::vector<float>* v = floats(name);
      if (!v) return;
      data.push_back(v);
      if (const auto type = target_(name)) ms.push_back({v->data(), t->ne[1], *type});
    }
    if (ms.empty()) return;
    const AwqScales found = awq_search(ms, h->n_in, h->h.data(), options_, pool_, tie);
    fold_.groups.push_back({label, found.alpha, found.error_before, found.error_after});
    if (found.alpha == 0) return;
    for (std::vector<float>* v : data)
      for (size_t i = 0; i < v->size(); ++i) (*v)[i] *= found.s[i % found.s.size()];
    std::shared_ptr<const std::vector<float>> blocks;
    if (h->n_in % 32 == 0) blocks = std::make_shared<const std::vector<float>>(awq_group_hessians(h->h.data(), h->n_in, found.s));
    for (const std::string& name : names) {
      changed_.insert(name);
      if (blocks) fold_.group_hessians[name] = blocks;
      ImportanceMatrix::Entry& e = fold_.importance.tensors[name];
      e.n_in = h->n_in;
      e.tokens = {h->tokens};
      e.mean_square.resize(static_cast<size_t>(h->n_in));
      for (int64_t j = 0; j < h->n_in; ++j)
        e.mean_square[static_cast<size_t>(j)] = std::max(h->h[static_cast<size_t>(j * h->n_in + j)], 0.0f) / (found.s[static_cast<size_t>(j)] * found.s[static_cast<size_t>(j)]);
    }
    undo(found.s);
  }

  // Divides rows of tensor `name` ([n_rows][n_cols] or a bias [n_rows]) by s[row].
  void divide_rows(const std::string& name, const std::vector<float>& s) {
    std::vector<float>* v = floats(name);
    if (!v) return;
    changed_.insert(name);
    const size_t n_cols = v->size() / s.size();
    for (size_t i = 0; i < v->size(); ++i) (*v)[i] /= s[i / n_cols];
  }

  void layer(int i, int64_t n_head, int64_t n_kv_head) {
    const std::string p = "blk." + std::to_string(i) + ".";
    // attn_output <- attn_v: output channel h*hd + d of the attention reads V channel g(h)*hd + d.
    if (const TensorView* o = file_.find_tensor(p + "attn_output.weight"); o && n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0) {
      const int64_t hd = o->ne[0] / n_head;
      const TensorView* v = file_.find_tensor(p + "attn_v.weight");
      if (v && v->n_dims == 2 && v->ne[1] == n_kv_head * hd && o->ne[0] == n_head * hd) {
        const std::vector<int64_t> tie = attention_output_tie(n_head, n_kv_head, hd);
        group(p + "attn_output", {p + "attn_output.weight"}, tie, [&](const std::vector<float>& s) {
          std::vector<float> sv(static_cast<size_t>(n_kv_head * hd));
          for (int64_t c = 0; c < o->ne[0]; ++c) sv[static_cast<size_t>(tie[static_cast<size_t>(c)])] = s[static_cast<size_t>(c)];
          divide_rows(p + "attn_v.weight", sv);
          if (file_.find_tensor(p + "attn_v.bias")) divide_rows(p + "attn_v.bias", sv);
        });
      }
    }
    if (file_.find_tensor(p + "ffn_up.weight"))
      group(p + "ffn_down", {p + "ffn_down.weight"}, {}, [&](const std::vector<float>& s) { divide_rows(p + "ffn_up.weight", s); });
    if (file_.find_tensor(p + "attn_norm.weight"))
      group(p + "attn_q/k/v", {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}, {},
            [&](const std::vector<float>& s) { divide_rows(p + "attn_norm.weight", s); });
    if (file_.find_tensor(p + "ffn_norm.weight") && file_.find_tensor(p + "ffn_gate.weight"))
      group(p + "ffn_gate/up", {p + "ffn_gate.weight", p + "ffn_up.weight"}, {},
            [&](const std::vector<float>& s) { divide_rows(p + "ffn_norm.weight", s); });
  }

  // The output matrix (not token_embd where it doubles as the output: the embedding reads it unscaled).
  void output() {
    if (file_.find_tensor("output.weight") && file_.find_tensor("output_norm.weight"))
      group("output", {"output.weight"}, {}, [&](const std::vector<float>& s) { divide_rows("output_norm.weight", s); });
  }

  // Only the tensors a fold changed (the search reads copies of the others).
  Result<AwqFold> finish() {
    if (!error_.empty()) return Error{error_};
    for (auto it = fold_.tensors.begin(); it != fold_.tensors.end();) it = changed_.count(it->first) ? std::next(it) : fold_.tensors.erase(it);
    return std::move(fold_);
  }

 private:
  const GgufFile& file_;
  const HessianSet& hessians_;
  const std::function<std::optional<DType>(const std::string&)>& target_;
  const AwqOptions& options_;
  ThreadPool& pool_;
  AwqFold fold_;
  std::set<std::string> changed_;
  std::string error_;
};

}  // namespace

Result<AwqFold> awq_fold(const GgufFile& file, const HessianSet& hessians,
                         const std::function<std::optional<DType>(const std::string&)>& target, const AwqOptions& options,
                         ThreadPool& pool) {
  Folder folder(file, hessians, target, options, pool);
  for (int il = 0; il < arch_metadata_int(file, "block_count"); ++il) {
    const int64_t n_head = arch_layer_int(file, "attention.head_count", il), n_kv_head = arch_layer_int(file, "attention.head_count_kv", il);
    folder.layer(il, n_head, n_kv_head ? n_kv_head : n_head);
  }
  folder.output();
  return folder.finish();
}

}  // namespace kestrel
