// kestrel generate: stream a completion of a prompt.
#include <cstdio>
#include <random>

#include "common.h"
#include "core/timer.h"
#include "engine/generator.h"
#include "engine/speculative_generator.h"
#include "sample/json_schema_grammar.h"
#include "server/grammar_cache.h"
#include "tokenizer/chat_prompt.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

struct GenerateArgs {
  std::string model, prompt, prompt_file;
  int n_predict = 128;
  int threads = default_threads();
  int ctx = 0;
  int block_size = 16;
  int ubatch = 512;
  int64_t seed = -1;
  ParallelArgs parallel;
  bool ignore_eos = false;
  bool no_display_prompt = false;
  SamplingParams sampling;
  KvTypes kv_types = KvType::F16;
  std::string draft_model;  // speculative decoding with a draft model
  SpeculativeConfig spec;
  std::string grammar, grammar_file;  // GBNF the output must follow
  std::string json_schema, json_schema_file;  // or JSON the output must follow
  bool chat = false;                 // the prompt is a user message, rendered by the chat template
  std::string chat_template_file, system_prompt;
};

// The speculation summary: drafted and kept tokens, by draft position, and target forwards per token.
void print_spec_stats(const SpecStats& s, int64_t target_forwards, int32_t n_generated) {
  std::fprintf(stderr, "speculation: %lld drafted, %lld accepted (%.1f%%), %.2f tokens per verifying forward, "
               "%.2f tokens per target forward\n",
               static_cast<long long>(s.drafted), static_cast<long long>(s.accepted), 100.0 * s.acceptance_rate(),
               s.mean_accepted_length(), target_forwards > 0 ? static_cast<double>(n_generated - 1) / target_forwards : 0.0);
  std::string by_position;
  for (size_t i = 0; i < s.drafted_at.size() && i < 16; ++i)
    by_position += " " + std::to_string(i + 1) + ":" +
                   std::to_string(static_cast<int>(100.0 * s.accepted_at[i] / std::max<int64_t>(1, s.drafted_at[i]))) + "%";
  if (!by_position.empty()) std::fprintf(stderr, "acceptance by draft position:%s\n", by_position.c_str());
}

int run_generate(GenerateArgs& a) {
  a.chat = a.chat || !a.chat_template_file.empty() || !a.system_prompt.empty();
  if (!a.prompt_file.empty() && !read_text_file(a.prompt_file, a.prompt)) return 1;
  if (!a.grammar_file.empty() && !read_text_file(a.grammar_file, a.grammar)) return 1;
  if (!a.json_schema_file.empty() && !read_text_file(a.json_schema_file, a.json_schema)) return 1;
  if (!a.json_schema.empty()) {
    const auto schema = nlohmann::ordered_json::parse(a.json_schema, nullptr, false);  // keeps the property order
    auto grammar = schema.is_discarded() ? Result<std::string>(Error{"the JSON schema is not JSON"}) : json_schema_to_grammar(schema);
    if (!grammar.ok()) {
      std::fprintf(stderr, "error: %s\n", grammar.error().c_str());
      return 1;
    }
    a.grammar = std::move(grammar).value();
  }
  if (auto st = a.sampling.validate(); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.error().c_str());
    return 1;
  }
  // Split over processes: every rank runs this same loop on the same logits (whole on each) with the same
  // seed, so they sample the same tokens and make the same collective calls; rank 0 prints.
  const auto groups = launch_processes(a.parallel, !a.draft_model.empty() || a.spec.ngram > 0);
  if (!groups) return 1;
  Communicator& world = *groups->world;
  const bool printing = world.rank() == 0;
  a.sampling.seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed) : std::random_device{}();
  world.broadcast(&a.sampling.seed, sizeof a.sampling.seed, 0);
  groups->reset_stats();
  auto model = load_model(a.model, !printing, groups.get());
  if (!model || !kv_types_fit(*model, a.kv_types)) return 1;
  auto tokenizer = Tokenizer::from_gguf(model->file());
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "error: %s\n", tokenizer.error().c_str());
    return 1;
  }
  if (!tokenizer->has_vocab()) {
    std::fprintf(stderr, "error: the model has no tokenizer vocabulary\n");
    return 1;
  }
  if (!a.grammar.empty()) {
    auto grammar = GrammarCache(tokenizer.value()).get(a.grammar);
    if (!grammar.ok()) {
      std::fprintf(stderr, "error: %s\n", grammar.error().c_str());
      return 1;
    }
    a.sampling.grammar = std::move(grammar).value();
  }
  if (a.chat) {  // the prompt as the user's turn (after the system prompt), ready for the assistant's reply
    const auto source = chat_template_source(*model, a.chat_template_file);
    if (!source) return 1;
    auto tmpl = ChatTemplate::parse(*source);
    std::vector<ChatMessage> messages;
    if (!a.system_prompt.empty()) messages.push_back({"system", a.system_prompt});
    messages.push_back({"user", a.prompt});
    const Vocab& v = tokenizer->vocab();
    auto text = tmpl.ok() ? tmpl->render(messages, true, v.bos >= 0 ? tokenizer->token_to_piece(v.bos, true) : "",
                                         v.eos >= 0 ? tokenizer->token_to_piece(v.eos, true) : "")
                          : Result<std::string>(Error{"the chat template is not supported: " + tmpl.error()});
    if (!text.ok()) {
      std::fprintf(stderr, "error: %s\n", text.error().c_str());
      return 1;
    }
    a.prompt = std::move(text).value();
  }
  const std::vector<int32_t> prompt = a.chat ? encode_chat_prompt(*tokenizer, a.prompt, SIZE_MAX).value_or(std::vector<int32_t>())
                                             : tokenizer->encode(a.prompt, true, true);
  if (prompt.empty()) {
    std::fprintf(stderr, "error: the prompt is empty\n");
    return 1;
  }
  GeneratorConfig config;
  config.n_ctx = a.ctx > 0 ? a.ctx : std::min(model->hparams().n_ctx_train, 4096);
  config.block_size = a.block_size;
  config.n_ubatch = a.ubatch;
  config.kv_types = a.kv_types;
  ThreadPool pool(a.threads);
  std::unique_ptr<Model> draft;
  if (!a.draft_model.empty()) {
    draft = load_draft_model(a.draft_model, *model);
    if (!draft) return 1;
  }
  const bool speculative = draft || a.spec.ngram > 0;
  std::unique_ptr<Generator> plain;
  std::unique_ptr<SpeculativeGenerator> spec;
  if (!speculative) {
    plain = std::make_unique<Generator>(*model, pool, config);
  } else {
    auto created = SpeculativeGenerator::create(*model, draft.get(), pool, config, a.spec);
    if (!created.ok()) {
      std::fprintf(stderr, "error: %s\n", created.error().c_str());
      return 1;
    }
    spec = std::move(created).value();
  }
  Sampler sampler(a.sampling);

  if (!a.no_display_prompt && printing) {
    std::fputs(a.prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  StreamDecoder decoder(*tokenizer);
  std::vector<int32_t> end_tokens;
  if (!a.ignore_eos)
    for (int32_t id : {tokenizer->vocab().eos, tokenizer->vocab().eot})
      if (id >= 0) end_tokens.push_back(id);
  const auto on_token = [&](int32_t token) {
    if (!printing) return true;
    const std::string text = decoder.push(token);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  auto stats = spec ? spec->generate(prompt, a.n_predict, sampler, end_tokens, on_token)
                    : plain->generate(prompt, a.n_predict, sampler, end_tokens, on_token);
  if (groups->split()) {  // every rank's own traffic (stderr): rank 0's alone misses what flows past it
    const CommStats c = groups->stats();
    std::fprintf(stderr, "rank %d of %d (%s): sent %.3f MB in %llu messages, %.3f s inside them\n", world.rank(), world.size(),
                 groups->describe().c_str(), static_cast<double>(c.bytes) / 1e6, static_cast<unsigned long long>(c.messages),
                 c.seconds);
  }
  if (!printing) return stats.ok() ? 0 : 1;
  const std::string rest = decoder.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  if (!stats.ok()) {
    std::fprintf(stderr, "error: %s\n", stats.error().c_str());
    return 1;
  }
  const GenerationStats& s = stats.value();
  std::fprintf(stderr, "prompt: %d tokens in %.3f s (%.2f tokens/s)\n", s.n_prompt, s.prompt_s,
               s.prompt_s > 0 ? s.n_prompt / s.prompt_s : 0.0);
  std::fprintf(stderr, "generation: %d tokens in %.3f s (%.2f tokens/s)\n", s.n_generated, s.generate_s,
               s.generate_s > 0 ? (s.n_generated > 1 ? (s.n_generated - 1) / s.generate_s : s.n_generated / s.generate_s)
                                : 0.0);
  if (spec) print_spec_stats(spec->stats(), spec->target_forwards(), s.n_generated);
  return 0;
}

}  // namespace

void add_generate(CLI::App& app, Action& run) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt, streaming it as it is produced");
  cmd->add_option("-m,--model", args->model, "GGUF model file")->required()->check(CLI::ExistingFile);
  auto* p = cmd->add_option("-p,--prompt", args->prompt, "Prompt text");
  auto* f = cmd->add_option("-f,--file", args->prompt_file, "Read the prompt from a file")->check(CLI::ExistingFile);
  p->excludes(f);
  cmd->add_option("-n,--n-predict", args->n_predict, "Tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("-t,--threads", args->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("-c,--ctx-size", args->ctx, "Context size in tokens (0: the model's, at most 4096)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-b,--batch-size", args->ubatch, "Tokens per forward pass during prefill")->check(CLI::Range(1, 8192));
  cmd->add_option("--block-size", args->block_size, "KV cache page size in tokens")->check(CLI::Range(1, 1024));
  add_sampling_options(cmd, args->sampling, args->seed);
  add_parallel_options(cmd, args->parallel);
  auto* g = cmd->add_option("--grammar", args->grammar, "GBNF grammar the output must follow (start rule: root)");
  g->excludes(cmd->add_option("--grammar-file", args->grammar_file, "Read the GBNF grammar from a file")
                  ->check(CLI::ExistingFile));
  auto* j = cmd->add_option("-j,--json-schema", args->json_schema, "JSON Schema the output must follow (as JSON text)");
  j->excludes(cmd->add_option("--json-schema-file", args->json_schema_file, "Read the JSON Schema from a file")
                  ->check(CLI::ExistingFile));
  for (CLI::Option* o : {g, cmd->get_option("--grammar-file")}) {
    o->excludes(j);
    o->excludes(cmd->get_option("--json-schema-file"));
  }
  cmd->add_flag("--chat", args->chat, "Treat the prompt as a user message: render it with the model's chat template");
  cmd->add_option("--chat-template-file", args->chat_template_file, "Jinja chat template to use instead of the model's "
                  "(implies --chat)")->check(CLI::ExistingFile);
  cmd->add_option("--system-prompt", args->system_prompt, "System message before the prompt (implies --chat; also -sys)");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Keep generating past end-of-sequence tokens");
  add_cache_type_options(cmd, args->kv_types);
  add_speculative_options(cmd, args->draft_model, args->spec, false);
  cmd->add_flag("--no-display-prompt", args->no_display_prompt, "Do not echo the prompt");
  cmd->callback([&run, args] { run = [args] { return run_generate(*args); }; });
}

}  // namespace kestrel::cli
