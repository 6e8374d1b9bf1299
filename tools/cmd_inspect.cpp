// kestrel info / tokenize / logits: look inside a model.
#include <cstdio>
#include <map>

#include "common.h"
#include "engine/generator.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

int run_info(const std::string& path) {
  auto file = GgufFile::open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "error: %s\n", file.error().c_str());
    return 1;
  }
  const GgufFile& f = file.value();
  std::printf("file: %s (GGUF v%u, %zu bytes, %zu metadata keys, %zu tensors)\n", path.c_str(), f.version(),
              f.file_size(), f.keys().size(), f.tensors().size());
  std::printf("\nmetadata:\n");
  for (const std::string& key : f.keys()) std::printf("  %-45s %s\n", key.c_str(), f.find(key)->to_display_string().c_str());
  std::printf("\ntensors:\n");
  std::map<std::string, std::pair<size_t, size_t>> by_type;  // type -> (count, bytes)
  size_t params = 0;
  for (const TensorView& t : f.tensors()) {
    std::printf("  %-36s %-6s %s\n", t.name.c_str(), dtype_name(t.type), t.shape_string().c_str());
    auto& entry = by_type[dtype_name(t.type)];
    ++entry.first;
    entry.second += t.n_bytes;
    params += static_cast<size_t>(t.n_elements());
  }
  std::printf("\nsummary: %.3f M parameters\n", params / 1e6);
  for (const auto& [type, entry] : by_type)
    std::printf("  %-6s %4zu tensors  %10.2f MiB\n", type.c_str(), entry.first, entry.second / 1048576.0);
  auto model = Model::from_file(std::move(file).value());
  if (!model.ok()) {
    std::printf("\nnot loadable: %s\n", model.error().c_str());
    return 1;
  }
  const HParams& hp = model.value()->hparams();
  std::printf("\narchitecture %s: n_embd %d, n_layers %d, n_heads %d, n_kv_heads %d, head_dim %d, n_ff %d, n_vocab %d, "
              "n_ctx_train %d, rope base %g, n_rot %d, experts %d (top %d)\n",
              hp.arch.c_str(), hp.n_embd, hp.n_layers, hp.n_heads, hp.n_kv_heads, hp.head_dim, hp.n_ff, hp.n_vocab,
              hp.n_ctx_train, hp.rope_freq_base, hp.n_rot, hp.n_expert, hp.n_expert_used);
  if (!hp.uniform_layers()) {  // the scalars above are the largest; list each layer's
    std::printf("per layer (heads/kv_heads/ffn):");
    for (int il = 0; il < hp.n_layers; ++il)
      std::printf(" %d/%d/%d", hp.layer(il).n_heads, hp.layer(il).n_kv_heads, hp.layer(il).n_ff);
    std::printf("\n");
  }
  std::printf("KV cache per token:");
  for (KvType t : kAllKvTypes)
    if (model.value()->kv_spec(1, 16, t).check().empty())
      std::printf(" %s %zu bytes%s", kv_type_name(t), model.value()->kv_spec(1, 16, t).bytes_per_token(), t == KvType::TQ3 ? "" : ",");
  std::printf(" (at the training context of %d tokens, f16: %.1f MiB)\n", hp.n_ctx_train,
              static_cast<double>(model.value()->kv_spec(1, 16, KvType::F16).bytes_per_token()) * hp.n_ctx_train / 1048576.0);
  return 0;
}

int run_tokenize(const std::string& path, std::string prompt, const std::string& file, bool no_bos,
                 bool parse_special, bool show_pieces) {
  if (!file.empty() && !read_text_file(file, prompt)) return 1;
  auto gguf = GgufFile::open(path);
  if (!gguf.ok()) {
    std::fprintf(stderr, "error: %s\n", gguf.error().c_str());
    return 1;
  }
  auto tokenizer = Tokenizer::from_gguf(gguf.value());
  if (!tokenizer.ok() || !tokenizer->has_vocab()) {
    std::fprintf(stderr, "error: %s\n", tokenizer.ok() ? "no tokenizer vocabulary in the file" : tokenizer.error().c_str());
    return 1;
  }
  const auto ids = tokenizer->encode(prompt, !no_bos, parse_special);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (show_pieces)
      std::printf("%6d -> '%s'\n", ids[i], tokenizer->token_to_piece(ids[i], true).c_str());
    else
      std::printf(i + 1 < ids.size() ? "%d " : "%d", ids[i]);
  }
  if (!show_pieces) std::printf("\n");
  return 0;
}

struct LogitsArgs {
  std::string model, prompt, prompt_file, output;
  int threads = default_threads();
  bool one_by_one = false;
  KvTypes kv_types = KvType::F32;
  ParallelArgs parallel;
};

int run_logits(LogitsArgs& a) {
  if (!a.prompt_file.empty() && !read_text_file(a.prompt_file, a.prompt)) return 1;
  const auto groups = launch_processes(a.parallel, false);  // every rank computes the same logits; rank 0 writes them
  if (!groups) return 1;
  auto model = load_model(a.model, true, groups.get());
  if (!model || !kv_types_fit(*model, a.kv_types)) return 1;
  auto tokenizer = Tokenizer::from_gguf(model->file());
  if (!tokenizer.ok() || !tokenizer->has_vocab()) {
    std::fprintf(stderr, "error: %s\n", tokenizer.ok() ? "no tokenizer vocabulary in the file" : tokenizer.error().c_str());
    return 1;
  }
  const std::vector<int32_t> tokens = tokenizer->encode(a.prompt, true, false);
  if (tokens.empty()) {
    std::fprintf(stderr, "error: the prompt gives no tokens\n");
    return 1;
  }
  const int32_t n_vocab = model->hparams().n_vocab, n = static_cast<int32_t>(tokens.size());
  ThreadPool pool(a.threads);
  GeneratorConfig config;
  config.n_ctx = n;
  config.kv_types = a.kv_types;
  Generator generator(*model, pool, config);
  std::vector<float> logits;  // [n_tokens, n_vocab]
  if (a.one_by_one) {
    for (int32_t t : tokens) {
      const int32_t one[1] = {t};
      auto row = generator.eval(one, false);
      if (!row.ok()) { std::fprintf(stderr, "error: %s\n", row.error().c_str()); return 1; }
      logits.insert(logits.end(), row->begin(), row->end());
    }
  } else {
    auto all = generator.eval(tokens, true);
    if (!all.ok()) { std::fprintf(stderr, "error: %s\n", all.error().c_str()); return 1; }
    logits = std::move(all).value();
  }
  if (groups->world->rank() != 0) return 0;
  FILE* out = std::fopen(a.output.c_str(), "wb");
  if (!out) {
    std::fprintf(stderr, "error: cannot create '%s'\n", a.output.c_str());
    return 1;
  }
  bool ok = std::fwrite(&n, 4, 1, out) == 1 && std::fwrite(&n_vocab, 4, 1, out) == 1 &&
            std::fwrite(tokens.data(), 4, tokens.size(), out) == tokens.size() &&
            std::fwrite(logits.data(), 4, logits.size(), out) == logits.size();
  ok = std::fclose(out) == 0 && ok;
  if (!ok) {
    std::fprintf(stderr, "error: failed writing '%s'\n", a.output.c_str());
    return 1;
  }
  std::fprintf(stderr, "wrote %d x %d logits to %s\n", n, n_vocab, a.output.c_str());
  return 0;
}

}  // namespace

void add_info(CLI::App& app, Action& run) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("info", "Print a model's metadata and tensor summary");
  cmd->add_option("-m,--model", *path, "GGUF file")->required()->check(CLI::ExistingFile);
  cmd->callback([&run, path] { run = [path] { return run_info(*path); }; });
}

void add_tokenize(CLI::App& app, Action& run) {
  struct Args {
    std::string model, prompt, file;
    bool no_bos = false, parse_special = false, pieces = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
  cmd->add_option("-m,--model", a->model, "GGUF file with a tokenizer")->required()->check(CLI::ExistingFile);
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "Text");
  cmd->add_option("-f,--file", a->file, "Read the text from a file")->check(CLI::ExistingFile)->excludes(p);
  cmd->add_flag("--no-bos", a->no_bos, "Do not add BOS/EOS even if the model asks for them");
  cmd->add_flag("--parse-special", a->parse_special, "Turn special-token text into special tokens");
  cmd->add_flag("--pieces", a->pieces, "Print each id with its text");
  cmd->callback([&run, a] {
    run = [a] { return run_tokenize(a->model, a->prompt, a->file, a->no_bos, a->parse_special, a->pieces); };
  });
}

void add_logits(CLI::App& app, Action& run) {
  auto a = std::make_shared<LogitsArgs>();
  CLI::App* cmd = app.add_subcommand("logits", "Write next-token logits for every position of a prompt");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required()->check(CLI::ExistingFile);
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "Prompt text (BOS added as the model's metadata says)");
  cmd->add_option("-f,--file", a->prompt_file, "Read the prompt from a file")->check(CLI::ExistingFile)->excludes(p);
  cmd->add_option("-o,--output", a->output, "Output file: int32 n_tokens, int32 n_vocab, int32 tokens[], "
                                            "float32 logits[n_tokens][n_vocab]")->required();
  cmd->add_option("-t,--threads", a->threads, "Threads")->check(CLI::Range(1, 1024));
  cmd->add_flag("--one-by-one", a->one_by_one, "Feed the tokens one at a time through the KV cache");
  add_cache_type_options(cmd, a->kv_types);  // f32 by default here
  add_parallel_options(cmd, a->parallel);
  cmd->callback([&run, a] { run = [a] { return run_logits(*a); }; });
}

}  // namespace kestrel::cli
