#include "model/structured_pruner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>

#include "model/arch.h"
#include "model/tensor_conversion.h"

namespace kestrel {
namespace {

std::string layer_tensor(int il, const char* role) { return "blk." + std::to_string(il) + "." + role; }

// Per input channel j of matrix t ([n_rows][n_in]): ms[j] * sum over rows of w[r][j]^2, the energy the
// channel sends through t (ms the input's mean square, or 1 without it).
std::vector<double> channel_energy(const TensorView& t, const float* ms, ThreadPool& pool) {
  const auto n_in = static_cast<size_t>(t.ne[0]);
  std::vector<std::vector<double>> partial(static_cast<size_t>(pool.n_threads()), std::vector<double>(n_in, 0.0));
  pool.parallel_for_dynamic(static_cast<size_t>(t.n_rows()), 4, [&](size_t begin, size_t end, int thread) {
    std::vector<float> row(n_in);  // [n_in]
    std::vector<double>& sum = partial[static_cast<size_t>(thread)];
    for (size_t r = begin; r < end; ++r) {
      SourceRows{t}.row(static_cast<int64_t>(r), row.data());
      for (size_t j = 0; j < n_in; ++j) sum[j] += static_cast<double>(row[j]) * row[j];
    }
  });
  std::vector<double> energy(n_in, 0.0);
  for (const auto& sum : partial)
    for (size_t j = 0; j < n_in; ++j) energy[j] += sum[j];
  if (ms)
    for (size_t j = 0; j < n_in; ++j) energy[j] *= std::max(ms[j], 0.0f);
  return energy;
}

// Indices [0, n) ordered by score, cheapest first (ties: lower index first).
std::vector<int> cheapest_first(const std::vector<double>& score) {
  std::vector<int> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[static_cast<size_t>(a)] < score[static_cast<size_t>(b)]; });
  return order;
}

// All of [0, n) but `dropped`, ascending.
std::vector<int> all_but(int n, const std::vector<int>& dropped) {
  std::vector<bool> gone(static_cast<size_t>(n), false);
  for (int i : dropped) gone[static_cast<size_t>(i)] = true;
  std::vector<int> kept;
  for (int i = 0; i < n; ++i)
    if (!gone[static_cast<size_t>(i)]) kept.push_back(i);
  return kept;
}

// FFN channels go in runs of the largest power of two up to 64 that divides the width into at least 8 runs
// (kept widths stay multiples of the block sizes quantized types need).
int ffn_run(int n_ff) {
  int run = 64;
  while (run > 1 && (n_ff % run != 0 || n_ff / run < 8)) run /= 2;
  return run;
}

// One layer's scores: per query head and per FFN channel (empty without a dense FFN).
struct LayerScores {
  std::vector<double> head, channel;
};

Result<LayerScores> score_layer(const GgufFile& file, const HParams& hp, int il, const ImportanceMatrix* importance, ThreadPool& pool) {
  const LayerShape& shape = hp.layer(il);
  LayerScores s;
  const std::string o_name = layer_tensor(il, "attn_output.weight");
  const TensorView* o = file.find_tensor(o_name);
  if (!o || o->n_dims != 2 || o->ne[0] != int64_t{shape.n_heads} * hp.head_dim)
    return Error{"structured pruning: '" + o_name + "' is missing or not [" + std::to_string(shape.n_heads * hp.head_dim) + ", n_embd]"};
  const std::vector<double> o_energy = channel_energy(*o, importance ? importance->find(o_name, 0) : nullptr, pool);
  s.head.assign(static_cast<size_t>(shape.n_heads), 0.0);
  for (size_t c = 0; c < o_energy.size(); ++c) s.head[c / static_cast<size_t>(hp.head_dim)] += o_energy[c];
  const std::string down_name = layer_tensor(il, "ffn_down.weight");
  if (const TensorView* down = file.find_tensor(down_name); down && file.find_tensor(layer_tensor(il, "ffn_gate.weight"))) {
    if (down->n_dims != 2 || down->ne[0] != shape.n_ff)
      return Error{"structured pruning: '" + down_name + "' is not [" + std::to_string(shape.n_ff) + ", n_embd]"};
    s.channel = channel_energy(*down, importance ? importance->find(down_name, 0) : nullptr, pool);
  }
  return s;
}

// Which of a layer's KV groups and heads go: units are whole groups (cheapest first).
std::vector<PruneUnit> group_units(const LayerScores& s, const LayerShape& shape, std::vector<int>& order) {
  const int per_group = shape.n_heads / shape.n_kv_heads;
  std::vector<double> group(static_cast<size_t>(shape.n_kv_heads), 0.0);
  for (int h = 0; h < shape.n_heads; ++h) group[static_cast<size_t>(h / per_group)] += s.head[static_cast<size_t>(h)];
  order = cheapest_first(group);
  std::vector<PruneUnit> units;
  for (int g : order) units.push_back({group[static_cast<size_t>(g)], 1});
  return units;
}

// Units that remove the k-th cheapest head of every kept group at once (GQA stays uniform); each group's
// heads cheapest first in `order` ([group][head]).
std::vector<PruneUnit> head_units(const LayerScores& s, const LayerShape& shape, const std::vector<int>& groups,
                                  std::vector<std::vector<int>>& order) {
  const int per_group = shape.n_heads / shape.n_kv_heads;
  order.clear();
  for (int g : groups) {
    std::vector<double> score(s.head.begin() + g * per_group, s.head.begin() + (g + 1) * per_group);
    std::vector<int> heads = cheapest_first(score);
    for (int& h : heads) h += g * per_group;
    order.push_back(heads);
  }
  std::vector<PruneUnit> units;
  for (int k = 0; k < per_group; ++k) {
    PruneUnit u{0.0, static_cast<int64_t>(groups.size())};
    for (const auto& heads : order) u.cost += s.head[static_cast<size_t>(heads[static_cast<size_t>(k)])];
    units.push_back(u);
  }
  return units;
}

// What a tensor keeps: rows (or, for `cols`, the elements of every row), original indices ascending.
struct Slice {
  bool cols = false;
  std::vector<int64_t> keep;
};

// Every element index of the kept units, each `width` wide.
std::vector<int64_t> expand(const std::vector<int>& units, int width) {
  std::vector<int64_t> index;
  for (int u : units)
    for (int i = 0; i < width; ++i) index.push_back(int64_t{u} * width + i);
  return index;
}

// The slice tensor `name` takes, or nullopt when it is written whole.
std::optional<Slice> slice_of(const std::string& name, const HParams& hp, const std::vector<LayerKeep>& keep) {
  int il = -1, used = 0;
  if (std::sscanf(name.c_str(), "blk.%d.%n", &il, &used) != 1 || il < 0 || il >= hp.n_layers || used == 0) return std::nullopt;
  const std::string role = name.substr(static_cast<size_t>(used));
  const LayerKeep& k = keep[static_cast<size_t>(il)];
  const LayerShape& shape = hp.layer(il);
  const bool heads = static_cast<int>(k.heads.size()) < shape.n_heads, kv = static_cast<int>(k.kv_heads.size()) < shape.n_kv_heads;
  const bool ffn = !k.ffn.empty() && static_cast<int>(k.ffn.size()) < shape.n_ff;
  if (heads && role == "attn_q.weight") return Slice{false, expand(k.heads, hp.head_dim)};
  if (heads && role == "attn_q.bias") return Slice{true, expand(k.heads, hp.head_dim)};
  if (heads && role == "attn_output.weight") return Slice{true, expand(k.heads, hp.head_dim_v)};
  if (kv && (role == "attn_k.weight" || role == "attn_v.weight")) return Slice{false, expand(k.kv_heads, hp.head_dim)};
  if (kv && (role == "attn_k.bias" || role == "attn_v.bias")) return Slice{true, expand(k.kv_heads, hp.head_dim)};
  if (ffn && (role == "ffn_gate.weight" || role == "ffn_up.weight")) return Slice{false, expand(k.ffn, 1)};
  if (ffn && role == "ffn_down.weight") return Slice{true, expand(k.ffn, 1)};
  return std::nullopt;
}

// t's kept float rows [rows][n_in] (dims: the sliced shape).
std::vector<float> sliced_rows(const TensorView& t, const Slice& slice, ThreadPool& pool) {
  const auto n_in = static_cast<size_t>(t.ne[0]);
  const size_t out_in = slice.cols ? slice.keep.size() : n_in;
  const size_t rows = slice.cols ? static_cast<size_t>(t.n_rows()) : slice.keep.size();
  std::vector<float> out(rows * out_in);
  pool.parallel_for_dynamic(rows, 4, [&](size_t begin, size_t end, int) {
    std::vector<float> row(n_in);  // [n_in] a source row
    for (size_t r = begin; r < end; ++r) {
      const int64_t src = slice.cols ? static_cast<int64_t>(r) : slice.keep[r];
      SourceRows{t}.row(src, row.data());
      float* dst = out.data() + r * out_in;
      if (slice.cols)
        for (size_t j = 0; j < out_in; ++j) dst[j] = row[static_cast<size_t>(slice.keep[j])];
      else
        std::copy(row.begin(), row.end(), dst);
    }
  });
  return out;
}

// The removed share of t's energy (sum of w^2), and of its output energy (w^2 weighted by the input's mean
// square ms, when given; else -1), into r.
void measure_removed(const TensorView& t, const Slice& slice, const float* ms, ThreadPool& pool, TensorPruneReport& r) {
  const auto n_in = static_cast<size_t>(t.ne[0]);
  std::vector<bool> kept(slice.cols ? n_in : static_cast<size_t>(t.n_rows()), false);
  for (int64_t i : slice.keep) kept[static_cast<size_t>(i)] = true;
  const auto n_threads = static_cast<size_t>(pool.n_threads());
  std::vector<double> gone(n_threads), all(n_threads), wgone(n_threads), wall(n_threads);
  pool.parallel_for_dynamic(static_cast<size_t>(t.n_rows()), 4, [&](size_t begin, size_t end, int thread) {
    std::vector<float> row(n_in);  // [n_in]
    const auto th = static_cast<size_t>(thread);
    for (size_t rr = begin; rr < end; ++rr) {
      SourceRows{t}.row(static_cast<int64_t>(rr), row.data());
      for (size_t j = 0; j < n_in; ++j) {
        const double e = static_cast<double>(row[j]) * row[j], we = ms ? e * ms[j] : 0.0;
        const bool removed = !(slice.cols ? kept[j] : kept[rr]);
        all[th] += e, wall[th] += we;
        if (removed) gone[th] += e, wgone[th] += we;
      }
    }
  });
  double g = 0, a = 0, wg = 0, wa = 0;
  for (size_t i = 0; i < n_threads; ++i) g += gone[i], a += all[i], wg += wgone[i], wa += wall[i];
  const double kept_elements = slice.cols ? static_cast<double>(slice.keep.size()) * static_cast<double>(t.n_rows())
                                          : static_cast<double>(slice.keep.size()) * static_cast<double>(n_in);
  r.sparsity = 1.0 - kept_elements / static_cast<double>(t.n_elements());
  r.rel_error = a > 0 ? std::sqrt(g / a) : 0.0;
  r.rel_output_error = ms ? (wa > 0 ? std::sqrt(wg / wa) : 0.0) : -1.0;
}

// The importance of the written file's matrices: attn_output's and ffn_down's inputs lose their removed
// channels.
ImportanceMatrix sliced_importance(const ImportanceMatrix& importance, const HParams& hp, const std::vector<LayerKeep>& keep) {
  ImportanceMatrix out = importance;
  for (auto& entry : out.tensors) {
    ImportanceMatrix::Entry& e = entry.second;  // (a lambda may not capture a structured binding in clang 14)
    const auto slice = slice_of(entry.first, hp, keep);
    if (!slice || !slice->cols || e.n_in < 2) continue;
    const auto pick = [&](std::vector<float>& v) {
      if (v.empty()) return;
      std::vector<float> kept;
      for (int64_t s = 0; s < e.n_slices; ++s)
        for (int64_t j : slice->keep) kept.push_back(v[static_cast<size_t>(s * e.n_in + j)]);
      v = std::move(kept);
    };
    pick(e.mean_square);
    pick(e.max_abs);
    e.n_in = static_cast<int64_t>(slice->keep.size());
  }
  return out;
}

// head_count, head_count_kv and feed_forward_length of the written file: one integer where every layer
// agrees, else an array per layer; the head size explicitly (its default, n_embd / head_count, would change).
void write_shape_metadata(GgufWriter& w, const GgufFile& in, const HParams& hp, const std::vector<LayerKeep>& keep) {
  const std::string p = hp.arch + ".";
  std::vector<int32_t> heads, kv_heads, ffn;
  for (int il = 0; il < hp.n_layers; ++il) {
    const LayerKeep& k = keep[static_cast<size_t>(il)];
    heads.push_back(static_cast<int32_t>(k.heads.size()));
    kv_heads.push_back(static_cast<int32_t>(k.kv_heads.size()));
    ffn.push_back(k.ffn.empty() ? hp.layer(il).n_ff : static_cast<int32_t>(k.ffn.size()));
  }
  const auto set = [&](const std::string& key, const std::vector<int32_t>& v) {
    if (std::adjacent_find(v.begin(), v.end(), std::not_equal_to<>()) == v.end()) w.set_u32(p + key, static_cast<uint32_t>(v[0]));
    else w.set_i32_array(p + key, v);
  };
  set("attention.head_count", heads);
  set("attention.head_count_kv", kv_heads);
  if (in.has(p + "feed_forward_length") || std::adjacent_find(ffn.begin(), ffn.end(), std::not_equal_to<>()) != ffn.end())
    set("feed_forward_length", ffn);
  if (!in.has(p + "attention.key_length")) w.set_u32(p + "attention.key_length", static_cast<uint32_t>(hp.head_dim));
  if (!in.has(p + "attention.value_length")) w.set_u32(p + "attention.value_length", static_cast<uint32_t>(hp.head_dim_v));
}

}  // namespace

Result<std::vector<LayerKeep>> plan_structured(const GgufFile& file, const HParams& hp, const StructuredSpec& spec,
                                               const ImportanceMatrix* importance, ThreadPool& pool) {
  if (hp.kv_lora_rank > 0) return Error{"structured pruning does not support latent attention (MLA) models"};
  std::vector<LayerScores> scores;
  for (int il = 0; il < hp.n_layers; ++il) {
    auto s = score_layer(file, hp, il, importance, pool);
    if (!s.ok()) return Error{s.error()};
    scores.push_back(std::move(s).value());
  }
  const auto n = static_cast<size_t>(hp.n_layers);
  std::vector<LayerKeep> keep(n);

  // KV groups (and, in multi-head attention where each group is one head, heads) first.
  std::vector<std::vector<PruneUnit>> units(n);
  std::vector<std::vector<int>> group_order(n);
  for (size_t il = 0; il < n; ++il) units[il] = group_units(scores[il], hp.layer(static_cast<int>(il)), group_order[il]);
  std::vector<int> removed = units_to_remove(units, spec.kv_heads, spec.budget);
  for (size_t il = 0; il < n; ++il) {
    const std::vector<int> dropped(group_order[il].begin(), group_order[il].begin() + removed[il]);
    keep[il].kv_heads = all_but(hp.layer(static_cast<int>(il)).n_kv_heads, dropped);
  }

  // Then query heads, the same number from every kept group.
  std::vector<std::vector<std::vector<int>>> head_order(n);
  for (size_t il = 0; il < n; ++il) {
    const LayerShape& shape = hp.layer(static_cast<int>(il));
    if (shape.n_heads == shape.n_kv_heads) {  // a head is its group: the heads' fraction removes groups
      std::vector<int> order;
      units[il] = group_units(scores[il], shape, order);
      std::erase_if(order, [&](int g) { return !std::binary_search(keep[il].kv_heads.begin(), keep[il].kv_heads.end(), g); });
      units[il].resize(order.size());
      for (size_t i = 0; i < order.size(); ++i) units[il][i] = {scores[il].head[static_cast<size_t>(order[i])], 1};
      head_order[il] = {order};
    } else {
      units[il] = head_units(scores[il], shape, keep[il].kv_heads, head_order[il]);
    }
  }
  removed = units_to_remove(units, spec.heads, spec.budget);
  for (size_t il = 0; il < n; ++il) {
    const LayerShape& shape = hp.layer(static_cast<int>(il));
    std::vector<int> dropped;
    if (shape.n_heads == shape.n_kv_heads) {
      dropped.assign(head_order[il][0].begin(), head_order[il][0].begin() + removed[il]);
      for (int g = 0; g < shape.n_kv_heads; ++g)
        if (!std::binary_search(keep[il].kv_heads.begin(), keep[il].kv_heads.end(), g)) dropped.push_back(g);
      keep[il].kv_heads = all_but(shape.n_kv_heads, dropped);
    } else {
      const int per_group = shape.n_heads / shape.n_kv_heads;
      for (int h = 0; h < shape.n_heads; ++h)
        if (!std::binary_search(keep[il].kv_heads.begin(), keep[il].kv_heads.end(), h / per_group)) dropped.push_back(h);
      for (const auto& heads : head_order[il]) dropped.insert(dropped.end(), heads.begin(), heads.begin() + removed[il]);
    }
    keep[il].heads = all_but(shape.n_heads, dropped);
  }

  // FFN channels, in runs.
  std::vector<std::vector<int>> channel_order(n);
  for (size_t il = 0; il < n; ++il) {
    units[il].clear();
    const std::vector<double>& channel = scores[il].channel;
    if (channel.empty()) continue;
    channel_order[il] = cheapest_first(channel);
    const auto run = static_cast<size_t>(ffn_run(static_cast<int>(channel.size())));
    for (size_t start = 0; start < channel.size(); start += run) {
      PruneUnit u{0.0, static_cast<int64_t>(run)};
      for (size_t j = start; j < start + run; ++j) u.cost += channel[static_cast<size_t>(channel_order[il][j])];
      units[il].push_back(u);
    }
  }
  removed = units_to_remove(units, spec.ffn, spec.budget);
  for (size_t il = 0; il < n; ++il) {
    if (scores[il].channel.empty()) continue;
    const auto run = ffn_run(static_cast<int>(scores[il].channel.size()));
    const std::vector<int> dropped(channel_order[il].begin(), channel_order[il].begin() + removed[il] * run);
    keep[il].ffn = all_but(static_cast<int>(scores[il].channel.size()), dropped);
  }
  return keep;
}

Result<PruneReport> write_structured(const PruneOptions& options, const GgufFile& in, const HParams& hp,
                                     const std::vector<LayerKeep>& keep, ThreadPool& pool,
                                     const std::function<void(double)>& progress) {
  const QuantModelFacts facts = quant_model_facts(in);
  const ImportanceMatrix* importance = options.importance;
  ImportanceMatrix written_importance;
  if (importance) written_importance = sliced_importance(*importance, hp, keep);

  PruneReport report;
  GgufWriter w;
  if (options.scheme) copy_metadata_for_quantized(in, w, options.scheme->file_type);
  else
    for (const std::string& key : in.keys()) w.set_value(key, *in.find(key));
  write_shape_metadata(w, in, hp, keep);
  w.set_string("kestrel.pruning.method", options.spec.method == PruneMethod::Wanda ? "wanda" : "magnitude");
  w.set_string("kestrel.pruning.pattern", "structured");
  w.set_string("kestrel.pruning.structured", to_string(*options.structured));

  std::vector<std::optional<Slice>> slices;
  for (const TensorView& t : in.tensors()) {
    std::optional<Slice> slice = slice_of(t.name, hp, keep);
    TensorView written = t;  // the written shape
    if (slice) (slice->cols ? written.ne[0] : written.ne[1]) = static_cast<int64_t>(slice->keep.size());
    TensorPruneReport r{t.name, t.shape_string(), t.type, t.type, t.n_bytes, t.n_bytes};
    r.pruned = slice.has_value();
    if (r.pruned) {
      if (!is_float_type(t.type))
        return Error{"tensor '" + t.name + "' is " + dtype_name(t.type) + ": prune a float (F32, F16, BF16) model, then quantize"};
      r.shape += " -> " + written.shape_string();
    }
    if (const auto to = pruned_tensor_type(options, written, r.pruned, facts)) r.to = *to;
    const std::vector<int64_t> dims(written.ne.begin(), written.ne.begin() + written.n_dims);
    r.bytes_out = w.tensor_bytes(w.add_tensor(t.name, r.to, dims));
    report.bytes_in += r.bytes_in;
    report.bytes_out += r.bytes_out;
    if (is_prunable_matrix(t.name, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims))) report.pruned_weights += t.n_elements();
    report.tensors.push_back(r);
    slices.push_back(std::move(slice));
  }

  return write_pruned_file(w, in, options, std::move(report), pool, progress, [&](size_t i, std::vector<uint8_t>& bytes, TensorPruneReport& r) {
    const TensorView& t = in.tensors()[i];
    const Slice& slice = *slices[i];
    const std::vector<float> rows = sliced_rows(t, slice, pool);
    TensorView kept = t;  // the kept rows as F32
    kept.type = DType::F32;
    (slice.cols ? kept.ne[0] : kept.ne[1]) = static_cast<int64_t>(slice.keep.size());
    kept.data = reinterpret_cast<const uint8_t*>(rows.data());
    kept.n_bytes = rows.size() * sizeof(float);
    convert_rows(SourceRows{kept}, r.to, bytes.data(), importance ? &written_importance : nullptr, pool);
    measure_removed(t, slice, importance ? importance->find(t.name, 0) : nullptr, pool, r);
    return int64_t{0};  // pruned_weights counts every block matrix, sliced or not (above)
  });
}

}  // namespace kestrel
