// kestrel chat: an interactive conversation in the terminal. Each turn renders the whole conversation with
// the model's chat template; the tokens it shares with what the KV cache already holds (the earlier turns)
// are kept, so only the new turn is computed. The reply streams as it is sampled. /clear starts over,
// /exit (or end of input) leaves; Ctrl-C stops a reply, and at the prompt leaves.
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <random>

#include "common.h"
#include "engine/generator.h"
#include "tokenizer/chat_prompt.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_interrupt(int) { g_interrupted = 1; }

struct ChatArgs {
  std::string model, chat_template_file, system_prompt;
  int n_predict = -1;  // most tokens per reply (-1: until the context is full)
  int threads = default_threads();
  int ctx = 0;
  int64_t seed = -1;
  SamplingParams sampling;
  KvTypes kv_types = KvType::F16;
  bool ignore_eos = false;
};

// One line of input without its newline; nullopt at end of input or when Ctrl-C interrupts the read.
std::optional<std::string> read_line() {
  std::string line;
  for (;;) {
    char c;
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n == 1) {
      if (c == '\n') return line;
      line += c;
      continue;
    }
    if (n < 0 && errno == EINTR && !g_interrupted) continue;
    if (n == 0 && !line.empty()) return line;
    return std::nullopt;
  }
}

// The length of the common prefix of a and b.
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

int run_chat(ChatArgs& a) {
  if (auto st = a.sampling.validate(); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.error().c_str());
    return 1;
  }
  auto model = load_model(a.model);
  if (!model || !kv_types_fit(*model, a.kv_types)) return 1;
  auto vocab = Tokenizer::from_gguf(model->file());
  if (!vocab.ok() || !vocab->has_vocab()) {
    std::fprintf(stderr, "error: %s\n", vocab.ok() ? "the model has no tokenizer vocabulary" : vocab.error().c_str());
    return 1;
  }
  const Tokenizer tok(std::move(vocab).value());
  const auto source = chat_template_source(*model, a.chat_template_file);
  if (!source) return 1;
  auto tmpl = ChatTemplate::parse(*source);
  if (!tmpl.ok()) {
    std::fprintf(stderr, "error: the chat template is not supported: %s\n", tmpl.error().c_str());
    return 1;
  }
  const Vocab& v = tok.vocab();
  const std::string bos = v.bos >= 0 ? tok.token_to_piece(v.bos, true) : "", eos = v.eos >= 0 ? tok.token_to_piece(v.eos, true) : "";
  std::vector<int32_t> end_tokens;
  for (int32_t id : {v.eos, v.eot})
    if (id >= 0 && !a.ignore_eos) end_tokens.push_back(id);

  GeneratorConfig config;
  config.n_ctx = a.ctx > 0 ? a.ctx : std::min(model->hparams().n_ctx_train, 4096);
  config.kv_types = a.kv_types;
  ThreadPool pool(a.threads);
  Generator gen(*model, pool, config);
  a.sampling.seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed) : std::random_device{}();

  // Ctrl-C interrupts (no SA_RESTART): a reply stops at the next token, a read at the prompt returns.
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);

  const bool interactive = ::isatty(STDIN_FILENO);
  if (interactive)
    std::fprintf(stderr, "kestrel chat: %d tokens of context. /clear starts over, /exit leaves; Ctrl-C stops a reply.\n",
                 config.n_ctx);
  std::vector<ChatMessage> messages;
  if (!a.system_prompt.empty()) messages.push_back({"system", a.system_prompt});
  const size_t n_fixed = messages.size();
  for (;;) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    g_interrupted = 0;
    const std::optional<std::string> line = read_line();
    if (!line) break;  // end of input, or Ctrl-C at the prompt
    if (line->empty()) continue;
    if (*line == "/exit" || *line == "/quit") break;
    if (*line == "/clear") {
      messages.resize(n_fixed);
      gen.reset();
      std::fprintf(stderr, "[conversation cleared]\n");
      continue;
    }
    messages.push_back({"user", *line});
    auto text = tmpl->render(messages, true, bos, eos);
    const auto prompt = text.ok() ? encode_chat_prompt(tok, *text, static_cast<size_t>(config.n_ctx)) : std::nullopt;
    if (!prompt || prompt->size() >= static_cast<size_t>(config.n_ctx)) {
      std::fprintf(stderr, "error: %s\n", !text.ok() ? text.error().c_str() : "the conversation fills the context; /clear to start over");
      messages.pop_back();
      continue;
    }
    // Keep the KV of the tokens the cache already holds; at least the last prompt token is run again, for
    // the logits of the reply's first token.
    const size_t reused = std::min(common_prefix(gen.history(), *prompt), prompt->size() - 1);
    gen.truncate(static_cast<int32_t>(reused));
    const std::vector<int32_t> turn(prompt->begin() + static_cast<std::ptrdiff_t>(reused), prompt->end());
    Sampler sampler(a.sampling);
    StreamDecoder decoder(tok);
    std::string reply;
    const auto on_token = [&](int32_t token) {
      const std::string piece = decoder.push(token);
      reply += piece;
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return !g_interrupted;
    };
    const int32_t room = config.n_ctx - static_cast<int32_t>(prompt->size());
    auto stats = gen.generate(turn, a.n_predict > 0 ? std::min(a.n_predict, room) : room, sampler, end_tokens, on_token);
    reply += decoder.flush();
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (!stats.ok()) {
      std::fprintf(stderr, "error: %s\n", stats.error().c_str());
      messages.pop_back();
      continue;
    }
    if (g_interrupted) std::fprintf(stderr, "[interrupted]\n");
    messages.push_back({"assistant", reply});
    const GenerationStats& s = *stats;
    std::fprintf(stderr, "[prompt: %zu tokens, %zu reused from the cache, %d computed in %.3f s; reply: %d tokens, %.1f tokens/s]\n",
                 prompt->size(), reused, s.n_prompt, s.prompt_s, s.n_generated,
                 s.generate_s > 0 && s.n_generated > 1 ? (s.n_generated - 1) / s.generate_s : 0.0);
  }
  if (g_interrupted) std::fputs("\n", stdout);
  return 0;
}

}  // namespace

void add_chat(CLI::App& app, Action& run) {
  auto args = std::make_shared<ChatArgs>();
  args->sampling.temperature = 0.8f;
  CLI::App* cmd = app.add_subcommand("chat", "Chat with the model in the terminal (its chat template; /clear, /exit, Ctrl-C)");
  cmd->add_option("-m,--model", args->model, "GGUF model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--chat-template-file", args->chat_template_file, "Jinja chat template to use instead of the model's")
      ->check(CLI::ExistingFile);
  cmd->add_option("--system-prompt", args->system_prompt, "System message that starts the conversation (also -sys)");
  cmd->add_option("-n,--n-predict", args->n_predict, "Most tokens per reply (-1: until the context is full)")
      ->check(CLI::Range(-1, 1 << 20));
  cmd->add_option("-t,--threads", args->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_option("-c,--ctx-size", args->ctx, "Context size in tokens (0: the model's, at most 4096)")->check(CLI::Range(0, 1 << 20));
  add_sampling_options(cmd, args->sampling, args->seed);
  add_cache_type_options(cmd, args->kv_types);
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Keep a reply going past end-of-turn tokens (until -n or Ctrl-C)");
  cmd->callback([&run, args] { run = [args] { return run_chat(*args); }; });
}

}  // namespace kestrel::cli
