// kestrel bench: prompt-processing and generation throughput like llama-bench (-p, -n, -t, -r, -o md|json,
// -d depth), plus batched decode of N sequences, rows measured in turn (depths, or models: their ratios
// free of this shared machine's drift), and decode's fraction of the memory-bandwidth ceiling, from the
// weight bytes one token reads and a read-bandwidth figure measured by the same command.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "bench_speculative.h"
#include "common.h"
#include "compute/cpu/isa.h"
#include "core/timer.h"
#include "engine/model_runner.h"
#include "kv/kv_manager.h"
#include "model/key_centers.h"

namespace kestrel::cli {
namespace {

struct BenchArgs {
  std::vector<std::string> models;
  std::vector<int> n_prompt{512};
  std::vector<int> n_gen{128};
  std::vector<int> depths{0};
  std::vector<int> seqs;  // batched decode: this many sequences decode together
  int threads = default_threads();
  int repetitions = 5;
  int block_size = 16;
  int ubatch = 512;
  std::string output = "md";
  KvTypes kv_types = KvType::F16;
  bool measure_bandwidth = true;
  ParallelArgs parallel;
  bool interleave_depths = false;  // decode rows of different depths measured token by token in turn
  bool interleave_models = false;  // the -m models' rows measured in turn (decode token by token)
  std::string draft_model;          // speculative decoding rows (with --spec-ngram)
  SpecBenchArgs spec;
};

// Several sequences sharing one KV page pool; each step runs one forward over all of them.
class BenchSequences {
 public:
  // key_centers: measure_key_centers(model, pool), used when kv_types.k is quantized.
  BenchSequences(const Model& model, ThreadPool& pool, int n_seqs, int n_ctx, int block_size, KvTypes kv_types,
                 const std::vector<float>& key_centers)
      : pages_(n_seqs * ((n_ctx + block_size - 1) / block_size), block_size, false),
        kv_(model.kv_spec(pages_.pool().n_blocks(), block_size, kv_types)),
        runner_(model, pool, kv_),
        n_past_(static_cast<size_t>(n_seqs), 0) {
    center_keys(kv_, key_centers);
  }

  // Appends tokens[s] to sequence s for every s, in one forward (micro-batched by ubatch); logits of the
  // last token of each sequence, and of each micro-batch's last token (a forward always makes some).
  void step(const std::vector<std::vector<int32_t>>& tokens, int ubatch) {
    StepPlan plan;
    int n_planned = 0;
    const auto flush = [&] {
      if (!plan.empty()) runner_.run(plan);
      plan = StepPlan{};
      n_planned = 0;
    };
    for (size_t s = 0; s < tokens.size(); ++s) {
      const auto seq = static_cast<int64_t>(s);
      const int32_t n = static_cast<int32_t>(tokens[s].size());
      pages_.allocate(seq, n_past_[s], n_past_[s] + n, plan.copies);  // sized for every sequence's context
      for (int32_t i = 0; i < n;) {
        const int32_t take = std::min(n - i, ubatch - n_planned);
        ScheduledChunk& c = plan.chunks.emplace_back();
        c.seq_id = seq;
        c.start = n_past_[s];
        c.tokens.assign(tokens[s].begin() + i, tokens[s].begin() + i + take);
        c.pages = pages_.pages(seq);
        c.n_logits = 1;
        n_past_[s] += take;
        i += take;
        n_planned += take;
        if (n_planned >= ubatch) flush();
      }
    }
    flush();
  }

 private:
  KvManager pages_;
  KvStorage kv_;
  ModelRunner runner_;
  std::vector<int32_t> n_past_;
};

// Read bandwidth of a streaming sum over a buffer much larger than the caches, with the pool's threads.
// Each thread sums four interleaved streams of its share (more loads in flight than a single stream,
// as the decode kernels have), and the best of several passes counts. The buffer is kept between
// measurements, so probing right before and after each repetition costs only the passes.
class BandwidthProbe {
 public:
  BandwidthProbe() : buffer_(size_t{1} << 28, 1.0f) {}

  double measure_gbs(ThreadPool& pool) {
    const size_t n = buffer_.size();
    std::vector<double> partial(static_cast<size_t>(pool.n_threads()));
    double best = 0;
    for (int rep = 0; rep < 5; ++rep) {
      Timer timer;
      pool.parallel_for(n, 1 << 16, [&](size_t begin, size_t end, int t) {
        const size_t quarter = (end - begin) / 4;
        const float* s0 = buffer_.data() + begin;
        const float* s1 = s0 + quarter;
        const float* s2 = s1 + quarter;
        const float* s3 = s2 + quarter;
        float acc[4][16] = {};
        for (size_t i = 0; i + 16 <= quarter; i += 16)
          for (int k = 0; k < 16; ++k) {
            acc[0][k] += s0[i + k];
            acc[1][k] += s1[i + k];
            acc[2][k] += s2[i + k];
            acc[3][k] += s3[i + k];
          }
        double sum = 0;
        for (auto& row : acc) sum += std::accumulate(row, row + 16, 0.0);
        partial[static_cast<size_t>(t)] += sum;  // a thread may run several chunks
      });
      best = std::max(best, static_cast<double>(n * sizeof(float)) / timer.elapsed_s() / 1e9);
    }
    if (std::accumulate(partial.begin(), partial.end(), 0.0) < 0) std::printf(" ");  // keep the sums live
    return best;
  }

 private:
  std::vector<float> buffer_;  // [2^28] 1 GiB of floats
};

struct Row {
  std::string test;
  int n_prompt = 0, n_gen = 0, depth = 0, n_seqs = 1;
  std::vector<double> samples_ts;
  std::vector<double> ratios_to_first;  // per repetition, measured in turn with other models: t/s over the first's
  std::vector<double> bandwidth_gbs;      // per repetition: mean of the passes right before and after it
  std::vector<double> ceiling_fractions;  // per repetition: decode's weight bytes per second / bandwidth
  double avg_ts() const { return mean(samples_ts); }
  static double mean(const std::vector<double>& v) {
    return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  }
  double stddev_ts() const {
    if (samples_ts.size() < 2) return 0;
    const double m = avg_ts();
    double s = 0;
    for (double x : samples_ts) s += (x - m) * (x - m);
    return std::sqrt(s / (samples_ts.size() - 1));
  }
};

std::vector<int32_t> random_tokens(std::mt19937& rng, int n, int n_vocab) {
  std::uniform_int_distribution<int32_t> dist(3, n_vocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = dist(rng);
  return t;
}

// One model and its rows.
struct ModelRows {
  std::string path;
  std::unique_ptr<Model> model;
  std::vector<float> key_centers;  // measure_key_centers(model) where keys are quantized, measured once
  size_t file_bytes = 0, params = 0;
  double bytes_per_token = 0;  // weight bytes one decode step reads
  std::vector<Row> rows;
};

// The model at path with its rows (pp, then tg per depth, each followed by its batched rows); nullptr after
// printing why not.
std::unique_ptr<ModelRows> load_rows(const std::string& path, const BenchArgs& a, ThreadPool& pool,
                                     const ProcessGroups* groups) {
  auto m = std::make_unique<ModelRows>();
  m->path = path;
  m->model = load_model(path, true, groups);
  if (!m->model || !kv_types_fit(*m->model, a.kv_types)) return nullptr;
  if (kv_type_quantized(a.kv_types.k)) m->key_centers = measure_key_centers(*m->model, pool);
  for (const TensorView& t : m->model->file().tensors()) {
    m->file_bytes += t.n_bytes;
    m->params += static_cast<size_t>(t.n_elements());
  }
  m->bytes_per_token = static_cast<double>(m->model->weight_bytes_per_token());
  for (int np : a.n_prompt)
    if (np > 0) m->rows.push_back({"pp" + std::to_string(np), np, 0, 0, 1, {}, {}, {}, {}});
  for (int ng : a.n_gen)
    if (ng > 0)
      for (int d : a.depths) {
        m->rows.push_back({"tg" + std::to_string(ng) + (d ? "@d" + std::to_string(d) : ""), 0, ng, d, 1, {}, {}, {}, {}});
        for (int s : a.seqs)
          m->rows.push_back({"tg" + std::to_string(ng) + "x" + std::to_string(s) + (d ? "@d" + std::to_string(d) : ""), 0,
                             ng, d, s, {}, {}, {}, {}});
      }
  return m;
}

// A decode row (one sequence) and the model it runs on.
struct DecodeRow {
  ModelRows* model;
  Row* row;
};

// Decode rows of the same n_gen (one sequence each; different depths, or models) measured together: each
// repetition fills one sequence per row, then generates token by token, stepping the rows' sequences in
// turn, so every row sees the same spells of this shared machine and their ratio (what context costs, or
// one model against another) is not a comparison across minutes. The first repetition warms up.
void measure_decode_in_turn(const std::vector<DecodeRow>& rows, ThreadPool& pool, const BenchArgs& a, std::mt19937& rng) {
  for (int rep = 0; rep <= a.repetitions; ++rep) {
    std::vector<std::unique_ptr<BenchSequences>> seqs;  // [rows]
    for (const DecodeRow& r : rows) {
      const Model& model = *r.model->model;
      seqs.push_back(std::make_unique<BenchSequences>(model, pool, 1, r.row->depth + r.row->n_gen + 1, a.block_size,
                                                      a.kv_types, r.model->key_centers));
      if (r.row->depth > 0) seqs.back()->step({random_tokens(rng, r.row->depth, model.hparams().n_vocab)}, a.ubatch);
    }
    std::vector<double> seconds(rows.size(), 0.0);  // [rows] decode time this repetition
    for (int i = 0; i < rows[0].row->n_gen; ++i)
      for (size_t r = 0; r < rows.size(); ++r) {
        const std::vector<std::vector<int32_t>> next{random_tokens(rng, 1, rows[r].model->model->hparams().n_vocab)};
        Timer timer;
        seqs[r]->step(next, a.ubatch);
        seconds[r] += timer.elapsed_s();
      }
    if (rep > 0)
      for (size_t r = 0; r < rows.size(); ++r) rows[r].row->samples_ts.push_back(rows[r].row->n_gen / seconds[r]);
  }
}

// Decode rows measured in turn, grouped: rows of one n_gen and one sequence, across the models when
// interleave_models and across the depths when interleave_depths (a group of one row is left alone).
void measure_decode_groups(std::vector<std::unique_ptr<ModelRows>>& models, ThreadPool& pool, const BenchArgs& a,
                           std::mt19937& rng) {
  if (!a.interleave_models && !a.interleave_depths) return;
  for (int ng : a.n_gen)
    for (int d : a.depths) {
      if (a.interleave_depths && d != a.depths.front()) continue;  // one group for all depths
      std::vector<DecodeRow> group;
      for (auto& m : models)
        for (Row& row : m->rows)
          if (row.n_prompt == 0 && row.n_gen == ng && row.n_seqs == 1 && (a.interleave_depths || row.depth == d) &&
              row.samples_ts.empty())
            group.push_back({m.get(), &row});
      if (group.size() > 1) measure_decode_in_turn(group, pool, a, rng);
    }
}

// Row::ratios_to_first of every row of models[1..] (measured in turn with models[0]): per repetition, its t/s
// over models[0]'s row of the same test.
void set_ratios_to_first(std::vector<std::unique_ptr<ModelRows>>& models) {
  for (size_t m = 1; m < models.size(); ++m)
    for (Row& row : models[m]->rows)
      for (const Row& base : models[0]->rows)
        if (base.test == row.test)
          for (size_t i = 0; i < std::min(base.samples_ts.size(), row.samples_ts.size()); ++i)
            row.ratios_to_first.push_back(row.samples_ts[i] / base.samples_ts[i]);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The md table of each model's rows against the first's (models measured in turn).
void print_ratios_to_first(const std::vector<std::unique_ptr<ModelRows>>& models) {
  std::printf("\n| test | model | t/s over %s's, median | per repetition |\n| --- | --- | ---: | --- |\n", models[0]->path.c_str());
  for (size_t i = 1; i < models.size(); ++i)
    for (const Row& row : models[i]->rows) {
      std::string each;
      for (double r : row.ratios_to_first) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%s%.2f", each.empty() ? "" : ", ", r);
        each += buf;
      }
      std::printf("| %s | %s | %.3fx | %s |\n", row.test.c_str(), models[i]->path.c_str(), median(row.ratios_to_first), each.c_str());
    }
}

// Speculative decoding: greedy generation of each -n length with and without it, on each model; a table
// of its own in md, rows "spec-tg<n>" in json.
int measure_speculative(const BenchArgs& a, ThreadPool& pool, nlohmann::json& json_rows) {
  std::unique_ptr<Model> draft;
  if (!a.draft_model.empty() && !(draft = load_model(a.draft_model, true))) return 1;
  const std::string drafter = draft ? "draft " + a.draft_model : "n-gram " + std::to_string(a.spec.spec.ngram);
  if (a.output == "md") {
    std::printf("\n| model | drafter | K | test | plain t/s | speculative t/s | ratio | acceptance | tokens per target forward |\n");
    std::printf("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
  }
  for (const std::string& path : a.models) {
    auto model = load_model(path, true);
    if (!model || !kv_types_fit(*model, a.kv_types)) return 1;
    for (int ng : a.n_gen) {
      if (ng <= 0) continue;
      SpecBenchArgs s = a.spec;
      s.n_gen = ng;
      s.repetitions = a.repetitions;
      s.block_size = a.block_size;
      s.kv_types = a.kv_types;
      auto r = bench_speculative(*model, draft.get(), pool, s);
      if (!r.ok()) {
        std::fprintf(stderr, "error: %s\n", r.error().c_str());
        return 1;
      }
      const double plain = Row::mean(r->plain_ts), spec = Row::mean(r->spec_ts);
      const std::string test = "tg" + std::to_string(ng) + " (prompt " + std::to_string(r->n_prompt) + ")";
      if (a.output == "md")
        std::printf("| %s | %s | %d | %s | %.2f | %.2f | %.2fx | %.1f%% | %.2f |\n", path.c_str(), drafter.c_str(),
                    s.spec.draft_max, test.c_str(), plain, spec, spec / plain, 100.0 * r->acceptance, r->tokens_per_forward);
      json_rows.push_back({{"model_filename", path},
                           {"test", "spec-tg" + std::to_string(ng)},
                           {"drafter", drafter},
                           {"draft_max", s.spec.draft_max},
                           {"n_prompt", r->n_prompt},
                           {"n_gen", ng},
                           {"plain_samples_ts", r->plain_ts},
                           {"samples_ts", r->spec_ts},
                           {"avg_ts", spec},
                           {"speedup", spec / plain},
                           {"acceptance", r->acceptance},
                           {"tokens_per_target_forward", r->tokens_per_forward}});
    }
  }
  return 0;
}

// Measures rows one repetition at a time: the options, the pool, the token stream every row draws from, and
// the bandwidth probe (made on the first decode row that measures bandwidth).
struct RowMeasurer {
  const BenchArgs& a;
  ThreadPool& pool;
  std::mt19937& rng;
  std::unique_ptr<BandwidthProbe> probe;

  void repetition(const ModelRows& m, Row& row, int rep);
  void rest(std::vector<std::unique_ptr<ModelRows>>& models);
};

// One repetition of a row (rep 0 warms up and records nothing).
void RowMeasurer::repetition(const ModelRows& m, Row& row, int rep) {
  // This machine's bandwidth drifts within seconds: each decode repetition's ceiling is the mean of
  // passes right before and right after it, and the row's fraction the mean of the repetitions'.
  const bool with_bandwidth = a.measure_bandwidth && row.n_gen > 0;
  if (with_bandwidth && !probe) probe = std::make_unique<BandwidthProbe>();
  const Model& model = *m.model;
  const int n_vocab = model.hparams().n_vocab;
  const int n_ctx = row.depth + std::max(row.n_prompt, row.n_gen) + 1;
  BenchSequences seqs(model, pool, row.n_seqs, n_ctx, a.block_size, a.kv_types, m.key_centers);
  if (row.depth > 0) {
    std::vector<std::vector<int32_t>> fill;
    for (int s = 0; s < row.n_seqs; ++s) fill.push_back(random_tokens(rng, row.depth, n_vocab));
    seqs.step(fill, a.ubatch);
  }
  const bool probed = with_bandwidth && rep > 0;
  const double bandwidth_before = probed ? probe->measure_gbs(pool) : 0;
  Timer timer;
  if (row.n_prompt > 0) {
    seqs.step({random_tokens(rng, row.n_prompt, n_vocab)}, a.ubatch);
  } else {
    for (int i = 0; i < row.n_gen; ++i) {
      std::vector<std::vector<int32_t>> next;
      for (int s = 0; s < row.n_seqs; ++s) next.push_back(random_tokens(rng, 1, n_vocab));
      seqs.step(next, a.ubatch);
    }
  }
  const double seconds = timer.elapsed_s();
  if (rep == 0) return;
  const double ts = (row.n_prompt + row.n_gen * row.n_seqs) / seconds;
  row.samples_ts.push_back(ts);
  if (!probed) return;
  const double bandwidth = (bandwidth_before + probe->measure_gbs(pool)) / 2;
  row.bandwidth_gbs.push_back(bandwidth);
  // Decode reads every weight once per step, whatever the number of sequences.
  row.ceiling_fractions.push_back(m.bytes_per_token * ts / row.n_seqs / (bandwidth * 1e9));
}

// Every row of models not measured in turn by measure_decode_groups. Models measured side by side
// (interleave_models) take their repetitions in turn, so each sees the same spells of this shared machine;
// one model runs each row's repetitions back to back, as llama-bench does.
void RowMeasurer::rest(std::vector<std::unique_ptr<ModelRows>>& models) {
  std::vector<std::pair<const ModelRows*, Row*>> rest;
  for (auto& m : models)
    for (Row& row : m->rows)
      if (row.samples_ts.empty()) rest.emplace_back(m.get(), &row);
  if (models.size() == 1) {
    for (auto& [m, row] : rest)
      for (int rep = 0; rep <= a.repetitions; ++rep) repetition(*m, *row, rep);
    return;
  }
  for (int rep = 0; rep <= a.repetitions; ++rep)
    for (auto& [m, row] : rest) repetition(*m, *row, rep);
}

// The rows of m in the table (md, on the printing rank) and in json_rows (with their ratios to the first
// model's when measured in turn); kernels names the ISA and the split.
void report_rows(const ModelRows& m, const BenchArgs& a, const ProcessGroups& groups, const std::string& kernels,
                 bool printing, nlohmann::json& json_rows) {
  for (const Row& row : m.rows) {
    const double bandwidth = Row::mean(row.bandwidth_gbs), fraction = Row::mean(row.ceiling_fractions);
    if (a.output == "md" && printing) {
      std::printf("| %s | %.2f MiB | %.2f B | %d | %s | %s | %.2f ± %.2f | %s | %s |\n", m.path.c_str(),
                  m.file_bytes / 1048576.0, m.params / 1e9, a.threads, kernels.c_str(), row.test.c_str(), row.avg_ts(),
                  row.stddev_ts(), bandwidth > 0 ? std::to_string(static_cast<int>(std::lround(bandwidth))).c_str() : "",
                  fraction > 0 ? (std::to_string(static_cast<int>(std::lround(fraction * 100))) + "%").c_str() : "");
      std::fflush(stdout);
    }
    json_rows.push_back({{"model_filename", m.path},
                         {"model_size", m.file_bytes},
                         {"model_n_params", m.params},
                         {"n_threads", a.threads},
                         {"n_tp", groups.tp()},
                         {"n_pp", groups.pp()},
                         {"kernels", kernels},
                         {"test", row.test},
                         {"n_prompt", row.n_prompt},
                         {"n_gen", row.n_gen},
                         {"n_depth", row.depth},
                         {"n_seqs", row.n_seqs},
                         {"avg_ts", row.avg_ts()},
                         {"stddev_ts", row.stddev_ts()},
                         {"samples_ts", row.samples_ts},
                         {"weight_bytes_per_token", m.bytes_per_token},
                         {"bandwidth_gbs", bandwidth},
                         {"bandwidth_fraction", fraction},
                         {"bandwidth_fraction_samples", row.ceiling_fractions}});
    if (!row.ratios_to_first.empty()) {
      json_rows.back()["ratio_to_first_samples"] = row.ratios_to_first;
      json_rows.back()["ratio_to_first"] = median(row.ratios_to_first);
    }
  }
}

int run_bench(BenchArgs& a) {
  // Split over processes: every rank runs the same rows on the same (seeded) tokens, so their messages pair
  // up; rank 0 times and prints. The ranks' bandwidth probes would compete, so none runs.
  const auto groups = launch_processes(a.parallel, !a.draft_model.empty() || a.spec.spec.ngram > 0);
  if (!groups) return 1;
  const bool printing = groups->world->rank() == 0;
  if (groups->split()) a.measure_bandwidth = false;
  ThreadPool pool(a.threads);
  nlohmann::json json_rows = nlohmann::json::array();
  // the kernel path in use (KESTREL_ISA forces one), and how the model is split ("tp2", "pp2", "tp2 pp2")
  std::string split;
  if (groups->tp() > 1) split += " tp" + std::to_string(groups->tp());
  if (groups->pp() > 1) split += " pp" + std::to_string(groups->pp());
  const std::string kernels = std::string(isa_name(detected_isa())) + split;
  if (a.output == "md" && printing) {
    std::printf("| model | size | params | threads | kernels | test | t/s | read GB/s around the test | decode %% of bandwidth ceiling |\n");
    std::printf("| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |\n");
  }
  std::mt19937 rng(1234);
  RowMeasurer measurer{a, pool, rng, nullptr};
  if (!a.interleave_models) {
    for (const std::string& path : a.models) {  // one model in memory at a time
      std::vector<std::unique_ptr<ModelRows>> one;
      one.push_back(load_rows(path, a, pool, groups.get()));
      if (!one[0]) return 1;
      measure_decode_groups(one, pool, a, rng);
      measurer.rest(one);
      report_rows(*one[0], a, *groups, kernels, printing, json_rows);
    }
  } else {
    std::vector<std::unique_ptr<ModelRows>> models;
    for (const std::string& path : a.models) {
      models.push_back(load_rows(path, a, pool, groups.get()));
      if (!models.back()) return 1;
    }
    measure_decode_groups(models, pool, a, rng);
    measurer.rest(models);
    set_ratios_to_first(models);
    for (const auto& m : models) report_rows(*m, a, *groups, kernels, printing, json_rows);
    if (a.output == "md" && printing && models.size() > 1) print_ratios_to_first(models);
  }
  if (!a.draft_model.empty() || a.spec.spec.ngram > 0)
    if (int rc = measure_speculative(a, pool, json_rows); rc != 0) return rc;
  if (a.output == "json" && printing) std::printf("%s\n", json_rows.dump(2).c_str());
  return 0;
}

}  // namespace

void add_bench(CLI::App& app, Action& run) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prompt processing and generation speed (like llama-bench)");
  cmd->add_option("-m,--model", a->models, "GGUF model file(s) (required unless a subcommand is given)")
      ->check(CLI::ExistingFile)->delimiter(',')->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("-p,--n-prompt", a->n_prompt, "Prompt lengths (0: none)")->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("-n,--n-gen", a->n_gen, "Generated tokens (0: none)")->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("-d,--n-depth", a->depths, "Tokens already in the context before generating")->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--seqs", a->seqs, "Also decode this many sequences together (batched decode)")->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("-t,--threads", a->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("-r,--repetitions", a->repetitions, "Repetitions of each test")->check(CLI::Range(1, 1000));
  cmd->add_option("-b,--batch-size", a->ubatch, "Tokens per forward during prefill")->check(CLI::Range(1, 8192));
  cmd->add_option("-o,--output", a->output, "Output format: md or json")->check(CLI::IsMember({"md", "json"}));
  cmd->add_flag("!--no-bandwidth", a->measure_bandwidth, "Skip the memory-bandwidth measurement");
  add_parallel_options(cmd, a->parallel);
  cmd->add_flag("--interleave-depths", a->interleave_depths,
                "Measure the decode rows of the -d depths token by token in turn (their ratio free of drift)");
  cmd->add_flag("--interleave-models", a->interleave_models,
                "Load every -m model and measure them in turn: decode token by token, the other rows repetition by "
                "repetition; prints each model's t/s over the first's per repetition (ratios free of drift)");
  add_cache_type_options(cmd, a->kv_types);
  add_speculative_options(cmd, a->draft_model, a->spec.spec, false);  // also measure speculative decoding
  cmd->add_option("--spec-prompt", a->spec.prompt, "Prompt of the speculative rows (greedy generation)");
  CLI::App* serve = add_bench_serve(*cmd, run);
  cmd->require_subcommand(0, 1);
  cmd->callback([&run, a, serve] {
    if (serve->parsed()) return;  // `kestrel bench serve` set its own action
    if (a->models.empty()) throw CLI::RequiredError("--model");
    run = [a] { return run_bench(*a); };
  });
}

}  // namespace kestrel::cli
