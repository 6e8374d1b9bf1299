// kestrel perplexity: perplexity of a model over a text (llama-perplexity's method: chunks of -c tokens,
// the second half of each scored), and KL divergence against saved base log-probabilities, so that every
// lossy option (a KV cache type, a quantization) is gated by a number.
//
//   kestrel perplexity -m M -f TEXT [-c 512] --kl-divergence-base BASE     writes BASE (the log-probabilities)
//   kestrel perplexity -m M -f TEXT [-c 512] --kl-divergence-base BASE --kl-divergence [--cache-type-k ...]
//                                                                           compares with BASE
//
// BASE is io/logprob_file.h's format.
#include <cmath>
#include <cstdio>
#include <memory>

#include "common.h"
#include "core/timer.h"
#include "engine/perplexity.h"
#include "io/logprob_file.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

struct PerplexityArgs {
  std::string model, text_file, base_file;
  bool kl_divergence = false;
  int threads = default_threads();
  int ctx = 512, ubatch = 512, max_chunks = -1;
  KvTypes kv_types = KvType::F16;
};

int fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

int run_perplexity(const PerplexityArgs& a) {
  if (a.kl_divergence && a.base_file.empty()) return fail("--kl-divergence needs --kl-divergence-base FILE");
  auto model = load_model(a.model, true);
  if (!model || !kv_types_fit(*model, a.kv_types)) return 1;
  const int32_t n_vocab = model->hparams().n_vocab;

  // The chunks: from the text, or (KL divergence) the base file's own, so both runs score the same tokens.
  std::vector<std::vector<int32_t>> chunks;
  std::unique_ptr<LogProbFile> base;
  if (a.kl_divergence) {
    auto opened = LogProbFile::open(a.base_file);
    if (!opened.ok()) return fail(opened.error());
    base = std::move(opened).value();
    if (base->n_vocab() != n_vocab)
      return fail("the base file's vocabulary has " + std::to_string(base->n_vocab()) + " tokens, the model's " +
                  std::to_string(n_vocab));
    chunks = base->chunks();
  } else {
    if (a.text_file.empty()) return fail("-f FILE (the text) is required");
    std::string text;
    if (!read_text_file(a.text_file, text)) return 1;
    auto tokenizer = Tokenizer::from_gguf(model->file());
    if (!tokenizer.ok() || !tokenizer->has_vocab())
      return fail(tokenizer.ok() ? "the model has no tokenizer vocabulary" : tokenizer.error());
    const std::vector<int32_t> tokens = tokenizer->encode(text, true, false);
    const bool add_bos = !tokens.empty() && tokenizer->vocab().bos >= 0 && tokens[0] == tokenizer->vocab().bos;
    chunks = perplexity_chunks(tokens, a.ctx, add_bos ? tokenizer->vocab().bos : -1);
    if (chunks.empty())
      return fail("the text has " + std::to_string(tokens.size()) + " tokens, fewer than one chunk of -c " +
                  std::to_string(a.ctx));
  }
  if (a.max_chunks > 0 && static_cast<int>(chunks.size()) > a.max_chunks) chunks.resize(static_cast<size_t>(a.max_chunks));
  const auto n_ctx = static_cast<int32_t>(chunks[0].size());
  if (!a.kl_divergence && !a.base_file.empty()) {
    auto created = LogProbFile::create(a.base_file, n_ctx, n_vocab, chunks);
    if (!created.ok()) return fail(created.error());
    base = std::move(created).value();
  }

  ThreadPool pool(a.threads);
  GeneratorConfig config;
  config.n_ctx = n_ctx;
  config.n_ubatch = a.ubatch;
  config.kv_types = a.kv_types;
  Generator generator(*model, pool, config);
  std::fprintf(stderr, "perplexity: %zu chunks of %d tokens, %d scored per chunk, KV %s\n", chunks.size(), n_ctx,
               scored_per_chunk(n_ctx), a.kv_types.name().c_str());
  const auto progress = progress_bar("perplexity");
  PerplexityStats ppl, base_ppl;
  KlDivergenceStats kld;
  const int32_t first = first_scored_token(n_ctx), n_scored = scored_per_chunk(n_ctx);
  std::vector<float> base_rows(static_cast<size_t>(n_scored) * n_vocab);  // [n_scored, n_vocab]
  Timer timer;
  for (size_t c = 0; c < chunks.size(); ++c) {
    auto rows = score_chunk(generator, chunks[c]);  // [n_scored, n_vocab]
    if (!rows.ok()) return fail(rows.error());
    for (int32_t i = 0; i < n_scored; ++i)
      ppl.add(-rows.value()[static_cast<size_t>(i) * n_vocab + chunks[c][static_cast<size_t>(first + i)]]);
    if (a.kl_divergence) {
      if (Status s = base->read_rows(base_rows); !s.ok()) return fail(s.error());
      for (int32_t i = 0; i < n_scored; ++i) {
        const float* b = base_rows.data() + static_cast<size_t>(i) * n_vocab;
        base_ppl.add(-b[chunks[c][static_cast<size_t>(first + i)]]);
        kld.add(b, rows.value().data() + static_cast<size_t>(i) * n_vocab, n_vocab);
      }
    } else if (base) {
      if (Status s = base->write_rows(rows.value()); !s.ok()) return fail(s.error());
    }
    if (progress) progress(static_cast<double>(c + 1) / static_cast<double>(chunks.size()));
    else std::printf("[%zu]%.4f%s", c + 1, ppl.perplexity(), c + 1 == chunks.size() ? "\n" : ",");
    std::fflush(stdout);
  }
  if (base && !a.kl_divergence) {
    if (Status s = base->close(); !s.ok()) return fail(s.error());
  }
  std::printf("Final estimate: PPL = %.4f +/- %.5f (%lld tokens scored, %.1f tokens/s)\n", ppl.perplexity(),
              ppl.perplexity_error(), static_cast<long long>(ppl.count()),
              static_cast<double>(chunks.size()) * n_ctx / timer.elapsed_s());
  if (!a.kl_divergence && base) std::printf("base log-probabilities written to %s\n", a.base_file.c_str());
  if (a.kl_divergence) {
    std::printf("Mean PPL(base): %.4f\n", base_ppl.perplexity());
    std::printf("Mean ln(PPL/PPL(base)): %.6f\n", ppl.mean_nll() - base_ppl.mean_nll());
    std::printf("Mean KLD: %.6f +/- %.6f\n", kld.mean(), kld.mean_error());
    std::printf("99.0%% KLD: %.6f\n", kld.percentile(99));
    std::printf("Median KLD: %.6f\n", kld.percentile(50));
    std::printf("Maximum KLD: %.6f\n", kld.percentile(100));
    std::printf("Same top p: %.3f +/- %.3f %%\n", 100 * kld.top1_agreement(), 100 * kld.top1_error());
  }
  return 0;
}

}  // namespace

void add_perplexity(CLI::App& app, Action& run) {
  auto a = std::make_shared<PerplexityArgs>();
  CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity over a text, and KL divergence against saved base log-probabilities");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("-f,--file", a->text_file, "Text to score")->check(CLI::ExistingFile);
  cmd->add_option("-c,--ctx-size", a->ctx, "Tokens per chunk (the second half is scored)")->check(CLI::Range(4, 1 << 20))
      ->capture_default_str();
  cmd->add_option("-b,--batch-size", a->ubatch, "Tokens per forward")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  cmd->add_option("--chunks", a->max_chunks, "Score at most this many chunks (default: all)");
  cmd->add_option("-t,--threads", a->threads, "Compute threads")->capture_default_str();
  cmd->add_option("--kl-divergence-base", a->base_file,
                  "Alone: write the log-probabilities to this file; with --kl-divergence: compare against it");
  cmd->add_flag("--kl-divergence", a->kl_divergence, "Report KL divergence and top-1 agreement against the base file");
  add_cache_type_options(cmd, a->kv_types);
  cmd->callback([&run, a] { run = [a] { return run_perplexity(*a); }; });
}

}  // namespace kestrel::cli
