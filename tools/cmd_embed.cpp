// kestrel embed: sentence embeddings of texts (one per -p, or one per line of -f), pooled as the model's
// metadata says (or --pooling) and L2-normalised; printed one vector per line, or as OpenAI's JSON.
#include <chrono>
#include <cstdio>
#include <sstream>

#include "common.h"
#include "engine/embedder.h"
#include "server/embedding_response.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

struct EmbedArgs {
  std::string model, file, pooling, format = "text";
  std::vector<std::string> prompts;
  int threads = default_threads();
  int batch = 512;
  bool no_normalize = false;
};

int run_embed(const EmbedArgs& a) {
  std::vector<std::string> texts = a.prompts;
  if (!a.file.empty()) {
    std::string content;
    if (!read_text_file(a.file, content)) return 1;
    std::istringstream lines(content);
    for (std::string line; std::getline(lines, line);)
      if (!line.empty()) texts.push_back(line);
  }
  if (texts.empty()) {
    std::fprintf(stderr, "error: nothing to embed (give -p TEXT or -f FILE)\n");
    return 1;
  }
  auto model = load_model(a.model);
  if (!model) return 1;
  auto vocab = Tokenizer::from_gguf(model->file());
  if (!vocab.ok()) {
    std::fprintf(stderr, "error: %s\n", vocab.error().c_str());
    return 1;
  }
  const Tokenizer tok(std::move(vocab).value());
  std::vector<std::vector<int32_t>> inputs;
  int64_t n_tokens = 0;
  for (const std::string& t : texts) {
    inputs.push_back(tok.encode(t, true));
    n_tokens += static_cast<int64_t>(inputs.back().size());
  }
  EmbedderConfig config;
  config.pooling = a.pooling.empty() ? model_pooling(*model) : parse_pooling(a.pooling).value();
  config.normalize = !a.no_normalize;
  config.max_batch_tokens = a.batch;
  config.max_input_tokens = 1;
  for (const auto& in : inputs) config.max_input_tokens = std::max(config.max_input_tokens, static_cast<int32_t>(in.size()));
  ThreadPool pool(a.threads);
  Embedder embedder(*model, pool, config);
  const auto start = std::chrono::steady_clock::now();
  auto vectors = embedder.embed(inputs);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!vectors.ok()) {
    std::fprintf(stderr, "error: %s\n", vectors.error().c_str());
    return 1;
  }
  std::fprintf(stderr, "kestrel embed: %zu inputs, %lld tokens, %s pooling, %d dimensions; %.3f s, %.1f tokens/s\n",
               inputs.size(), static_cast<long long>(n_tokens), pooling_name(config.pooling), embedder.n_embd(), seconds,
               static_cast<double>(n_tokens) / seconds);
  if (a.format == "json") {
    std::printf("%s\n", embedding_response(*vectors, false, a.model, n_tokens).dump().c_str());
    return 0;
  }
  for (size_t i = 0; i < vectors->size(); ++i) {
    std::printf("embedding %zu:", i);
    for (float v : (*vectors)[i]) std::printf(" %.7g", v);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

void add_embed(CLI::App& app, Action& run) {
  auto args = std::make_shared<EmbedArgs>();
  CLI::App* cmd = app.add_subcommand("embed", "Sentence embeddings of texts (pooled, normalised hidden states)");
  cmd->add_option("-m,--model", args->model, "GGUF model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("-p,--prompt", args->prompts, "A text to embed (repeat for more)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("-f,--file", args->file, "A file of texts, one per line")->check(CLI::ExistingFile);
  cmd->add_option("--pooling", args->pooling, "mean, cls or last (default: the model's pooling_type, else last)")
      ->check(CLI::IsMember({"mean", "cls", "last"}));
  cmd->add_option("--output-format", args->format, "text (one line per vector) or json (OpenAI's embeddings list)")
      ->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  cmd->add_flag("--no-normalize", args->no_normalize, "Print the pooled vectors as they are (not unit length)");
  cmd->add_option("-t,--threads", args->threads, "Compute threads")->capture_default_str();
  cmd->add_option("-b,--batch-size", args->batch, "Most tokens per forward pass")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  cmd->callback([&run, args] { run = [args] { return run_embed(*args); }; });
}

}  // namespace kestrel::cli
