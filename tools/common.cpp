#include "common.h"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "core/timer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {

void add_sampling_options(CLI::App* cmd, SamplingParams& sampling, int64_t& seed) {
  cmd->add_option("--temp", sampling.temperature, "Temperature (0: greedy)");
  cmd->add_option("--top-k", sampling.top_k, "Top-k (0: off)");
  cmd->add_option("--top-p", sampling.top_p, "Top-p (1: off)");
  cmd->add_option("--min-p", sampling.min_p, "Min-p (0: off)");
  cmd->add_option("--repeat-penalty", sampling.repeat_penalty, "Repetition penalty (1: off)");
  cmd->add_option("--repeat-last-n", sampling.penalty_last_n, "Tokens the penalties look back over (-1: all)");
  cmd->add_option("--presence-penalty", sampling.presence_penalty, "Presence penalty");
  cmd->add_option("--frequency-penalty", sampling.frequency_penalty, "Frequency penalty");
  cmd->add_option("-s,--seed", seed, "Random seed (-1: random)");
}

std::optional<std::string> chat_template_source(const Model& model, const std::string& file) {
  std::string source;
  if (!file.empty() && !read_text_file(file, source)) return std::nullopt;
  if (source.empty()) {
    auto from_model = model.file().get_string("tokenizer.chat_template");
    if (from_model.ok() && from_model->has_value()) source = **from_model;
  }
  if (source.empty()) {
    std::fprintf(stderr, "warning: the model has no chat template (tokenizer.chat_template); chat uses ChatML "
                         "(<|im_start|>role ... <|im_end|>); pass --chat-template-file for the model's own format\n");
    source = kChatMlTemplate;
  }
  return source;
}

void add_cache_type_options(CLI::App* cmd, KvTypes& types) {
  const auto parse = [](KvType& out) {
    return [&out](const std::vector<std::string>& values) {
      const std::optional<KvType> t = parse_kv_type(values.front());
      if (!t) throw CLI::ValidationError("unknown KV cache type '" + values.front() + "'");
      out = *t;
      return true;
    };
  };
  std::string names;
  for (KvType t : kAllKvTypes) names += std::string(names.empty() ? "" : ", ") + kv_type_name(t);
  cmd->add_option("--cache-type-k", parse(types.k), "KV cache type of keys (also -ctk): " + names + " (docs/kv_cache.md)")
      ->type_name("TYPE")
      ->default_str(kv_type_name(types.k));
  cmd->add_option("--cache-type-v", parse(types.v), "KV cache type of values (also -ctv; the same names)")
      ->type_name("TYPE")
      ->default_str(kv_type_name(types.v));
}

void add_speculative_options(CLI::App* cmd, std::string& draft_model, SpeculativeConfig& spec, bool serving) {
  cmd->add_option("--draft-model", draft_model, "Draft model for speculative decoding (same vocabulary; also -md)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--spec-ngram", spec.ngram, "Speculative decoding with n-gram drafts: the longest n-gram looked up (0: off)")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--draft-max,--draft", spec.draft_max, "Most tokens drafted per step")->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_option("--draft-min", spec.draft_min, "Fewer drafted than this: a plain step")->check(CLI::Range(0, 64))->capture_default_str();
  if (serving)
    cmd->add_option("--spec-max-batch", spec.max_batch, "Speculate only while at most this many sequences decode")
        ->check(CLI::Range(1, 1 << 16))->capture_default_str();
  if (serving)
    cmd->add_flag("!--spec-always", spec.measured,
                  "Speculate whenever at most --spec-max-batch sequences decode, without measuring whether it pays");
}

std::unique_ptr<Model> load_draft_model(const std::string& path, const Model& target, bool quiet) {
  auto draft = load_model(path, quiet);
  if (!draft) return nullptr;
  auto draft_vocab = Tokenizer::from_gguf(draft->file());
  auto target_vocab = Tokenizer::from_gguf(target.file());
  if (draft_vocab.ok() != target_vocab.ok() ||
      (draft_vocab.ok() && draft_vocab->vocab().tokens != target_vocab->vocab().tokens) ||
      draft->hparams().n_vocab != target.hparams().n_vocab) {
    std::fprintf(stderr, "error: the draft model %s does not have the target's vocabulary\n", path.c_str());
    return nullptr;
  }
  return draft;
}

Result<uint64_t> parse_byte_size(const std::string& text) {
  const auto bad = [&] { return Error{"'" + text + "' is not a size in bytes (e.g. 536870912, 512M, 2GiB)"}; };
  size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    return bad();
  }
  std::string unit = text.substr(end);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'I') unit.pop_back();  // KiB, MiB, ...
  if (unit == "B") unit.clear();
  static const std::string kUnits = "KMGT";
  double scale = 1;
  if (!unit.empty()) {
    const size_t i = unit.size() == 1 ? kUnits.find(unit[0]) : std::string::npos;
    if (i == std::string::npos) return bad();
    scale = std::pow(1024.0, static_cast<double>(i + 1));
  }
  const double bytes = value * scale;
  if (!(bytes >= 1) || bytes > 1e18) return bad();
  return static_cast<uint64_t>(bytes);
}

int default_threads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

std::function<void(double)> progress_bar(const std::string& label) {
  if (!isatty(STDERR_FILENO)) return {};
  return [label, last = -1](double fraction) mutable {
    const int percent = static_cast<int>(fraction * 100);
    if (percent == last) return;
    last = percent;
    const int filled = percent * 30 / 100;
    std::fprintf(stderr, "\r%s [%s%s] %3d%%", label.c_str(), std::string(filled, '#').c_str(),
                 std::string(30 - filled, ' ').c_str(), percent);
    if (percent >= 100) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

bool kv_types_fit(const Model& model, KvTypes types) {
  const std::string why = model.kv_spec(1, 16, types).check();
  if (!why.empty()) std::fprintf(stderr, "error: --cache-type: %s\n", why.c_str());
  return why.empty();
}

std::unique_ptr<Model> load_model(const std::string& path, bool quiet, const ProcessGroups* parallel) {
  Timer timer;
  auto model = Model::load(path, quiet ? std::function<void(double)>() : progress_bar("loading"), true, parallel);
  if (!model.ok()) {
    if (parallel && parallel->split()) parallel->world->abort("error: " + model.error(), 1);
    std::fprintf(stderr, "error: %s\n", model.error().c_str());
    return nullptr;
  }
  if (!quiet) std::fprintf(stderr, "load time: %.3f s\n", timer.elapsed_s());
  return std::move(model).value();
}

void add_parallel_options(CLI::App* cmd, ParallelArgs& p) {
  cmd->add_option("--tp", p.tp, "Tensor-parallel ranks per pipeline stage (heads, FFN channels and output rows split "
                                "over them); run under mpirun -np TP x EP x PP")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--pp", p.pp, "Pipeline stages (contiguous layer ranges, activations passed from stage to stage)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--ep", p.ep, "Expert-parallel ranks (mixtures of experts: each holds and runs a share of the experts)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--cp", p.cp, "Context-parallel ranks: a long prompt's positions split over them, K/V passed around a "
                                "ring; every rank keeps the whole KV cache and decodes")
      ->check(CLI::Range(1, 4096));
}

std::unique_ptr<Communicator> open_world() {
  auto world = launch_communicator();
  if (world.ok()) return std::move(world).value();
  std::fprintf(stderr, "error: %s\n", world.error().c_str());
  return nullptr;
}

void refuse_launch(Communicator& world, const std::string& why) {
  if (world.size() > 1) world.abort("error: " + why, 1);  // every rank alike
  std::fprintf(stderr, "error: %s\n", why.c_str());
}

namespace {
// MPI's world (or this process alone) once it holds `replicas` x the grid the flags ask for and can run what
// was asked; null after the refusal otherwise.
std::unique_ptr<Communicator> launch_world(const ParallelArgs& p, int replicas, bool speculative) {
  auto world = open_world();
  if (!world) return nullptr;
  const int size = world->size(), want = p.tp * p.ep * p.pp * p.cp;
  const std::string flags = "--tp " + std::to_string(p.tp) + " x --ep " + std::to_string(p.ep) + " x --pp " +
                            std::to_string(p.pp) + " x --cp " + std::to_string(p.cp);
  const int over_ranks = size > 1 ? replicas : 1;  // one process: its replicas run in it
  Status s = size == 1 && want > 1 ? Error{flags + " needs " + std::to_string(want) + " processes: run under mpirun -np " + std::to_string(want)}
                                   : check_data_parallel_grid(size, over_ranks, p.tp, p.pp, p.ep, p.cp);
  if (s.ok() && over_ranks > 1 && !world->threads_at_once())
    s = Error{"--dp over ranks needs an MPI library with MPI_THREAD_MULTIPLE"};
  if (s.ok() && size > 1 && speculative) s = Error{"speculative decoding does not run split over processes yet"};
  if (s.ok()) return world;
  refuse_launch(*world, s.error());
  return nullptr;
}
}  // namespace

std::unique_ptr<ProcessGroups> launch_processes(const ParallelArgs& p, bool speculative) {
  auto world = launch_world(p, 1, speculative);
  if (!world) return nullptr;
  return checked_layout(make_process_groups(std::move(world), p.tp, p.pp, p.ep, p.cp));
}

std::unique_ptr<DataParallelRanks> launch_replicas(const ParallelArgs& p, bool speculative, int dp) {
  auto world = launch_world(p, dp, speculative);
  if (!world) return nullptr;
  const int size = world->size();
  return checked_layout(make_data_parallel_ranks(std::move(world), size > 1 ? dp : 1, p.tp, p.pp, p.ep, p.cp));
}

bool read_text_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "error: cannot read '%s'\n", path.c_str());
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

}  // namespace kestrel::cli
