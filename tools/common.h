// Pieces the `kestrel` subcommands share: model loading with a progress bar, thread defaults, file reads.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "dist/data_parallel_ranks.h"
#include "model/model.h"
#include "quant/importance_matrix.h"
#include "sample/sampler.h"
#include "spec/spec_config.h"

namespace kestrel::cli {

// Each subcommand registers itself and sets `run` to the action to perform when chosen.
using Action = std::function<int()>;
void add_generate(CLI::App& app, Action& run);
void add_info(CLI::App& app, Action& run);
void add_tokenize(CLI::App& app, Action& run);
void add_logits(CLI::App& app, Action& run);
void add_make_model(CLI::App& app, Action& run);
void add_bench(CLI::App& app, Action& run);
void add_serve(CLI::App& app, Action& run);
void add_perplexity(CLI::App& app, Action& run);
void add_quantize(CLI::App& app, Action& run);
void add_prune(CLI::App& app, Action& run);
void add_embed(CLI::App& app, Action& run);
void add_chat(CLI::App& app, Action& run);
// `kestrel bench serve`, a subcommand of bench.
CLI::App* add_bench_serve(CLI::App& bench, Action& run);

int default_threads();
// Sampling flags as llama.cpp's: --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n,
// --presence-penalty, --frequency-penalty, -s/--seed (-1: random).
void add_sampling_options(CLI::App* cmd, SamplingParams& sampling, int64_t& seed);
// The chat template's source: `file` (--chat-template-file) if given, else the model's own
// (tokenizer.chat_template), else ChatML with a warning. nullopt when the file cannot be read (printed).
std::optional<std::string> chat_template_source(const Model& model, const std::string& file);
// -ctk/--cache-type-k and -ctv/--cache-type-v, llama.cpp's flags and type names (compute/kv_quant.h).
void add_cache_type_options(CLI::App* cmd, KvTypes& types);
// Whether the model's K/V rows can be stored as `types`; prints why not.
bool kv_types_fit(const Model& model, KvTypes types);
// Speculative decoding: --draft-model (-md), --spec-ngram, --draft-max/--draft, --draft-min, and in
// serving --spec-max-batch.
void add_speculative_options(CLI::App* cmd, std::string& draft_model, SpeculativeConfig& spec, bool serving);
// Loads the draft model and checks that its tokenizer vocabulary is the target's; prints the error and
// returns null otherwise.
std::unique_ptr<Model> load_draft_model(const std::string& path, const Model& target, bool quiet = false);
// Loads a model, drawing a progress bar on stderr when it is a terminal; prints the error and returns null.
// Split over several processes, loads this rank's share, and a failure ends every rank.
std::unique_ptr<Model> load_model(const std::string& path, bool quiet = false, const ProcessGroups* parallel = nullptr);
// --tp T --ep E --pp P: the model split over T x E x P processes of `mpirun -np T*E*P`, or --cp C: long
// prompts split by position over C processes (dist/process_groups.h).
struct ParallelArgs {
  int tp = 1, pp = 1, ep = 1, cp = 1;
};
void add_parallel_options(CLI::App* cmd, ParallelArgs& p);
// The processes for --tp / --pp: MPI's world when launched by mpirun (its size must be tp x pp), else one
// local process (tp x ep x pp x cp must be 1). Prints the error and returns null, or ends every rank with a message;
// so does speculative (a draft model or n-gram drafts asked for) over more than one process.
std::unique_ptr<ProcessGroups> launch_processes(const ParallelArgs& p, bool speculative);
// serve: the same with --dp replicas. Under mpirun with dp > 1 the job holds dp replicas of tp x ep x pp x cp
// ranks each (dist/data_parallel_ranks.h); otherwise one replica (the dp replicas, if any, in this process).
std::unique_ptr<DataParallelRanks> launch_replicas(const ParallelArgs& p, bool speculative, int dp);
// The pieces of the two above, for launchers of other layouts (serve's prefill/decode roles): MPI's world or
// this process alone (null after printing why not); a refusal that prints "error: why" and, under mpirun,
// ends every rank alike; the value of a layout the checks before it made certain (null after its error).
std::unique_ptr<Communicator> open_world();
void refuse_launch(Communicator& world, const std::string& why);
template <typename T>
std::unique_ptr<T> checked_layout(Result<T> layout) {
  if (!layout.ok()) {
    std::fprintf(stderr, "error: %s\n", layout.error().c_str());
    return nullptr;
  }
  return std::make_unique<T>(std::move(layout).value());
}
// A progress callback that draws "label [#####     ] 42%" on a terminal, and nothing otherwise.
std::function<void(double)> progress_bar(const std::string& label);
// A byte count such as 536870912, 512M, 512MiB, 1.5G or 2GB (K, M, G, T: powers of 1024); error otherwise.
Result<uint64_t> parse_byte_size(const std::string& text);
// Reads a whole file; false with a message on stderr when it cannot.
bool read_text_file(const std::string& path, std::string& out);
// A calibration text in whole chunks of ctx tokens, each starting with BOS where the model adds one (a text
// shorter than one chunk is one chunk), at most max_chunks (0: all). Empty on error (printed).
std::vector<std::vector<int32_t>> calibration_chunks(const Model& model, const std::string& text_file, int ctx, int max_chunks);
// An importance matrix file (llama-imatrix's, or --imatrix-out's), shaped to the model file's tensors; false
// with a message on stderr when it cannot be read or does not fit.
bool load_imatrix(const std::string& imatrix_path, const std::string& model_path, ImportanceMatrix& importance);

}  // namespace kestrel::cli
