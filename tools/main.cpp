// kestrel: run and inspect large language models.
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "common.h"

int main(int argc, char** argv) {
  // Activation buffers live in each caller's ForwardWorkspace; the kernels' per-call scratch (quantized
  // inputs, a few MB in a prefill) would still be mapped and unmapped by glibc on every call: keep it on
  // the heap (about 2% of pp512).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  CLI::App app{"kestrel — run and serve large language models"};
  app.require_subcommand(1);
  // A flag given twice takes its last value, as in llama.cpp: wrappers such as scripts/run.sh pass defaults
  // that the user's own flags then override. (List options, e.g. bench's -p 128,512, keep every value.)
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  kestrel::cli::Action run;
  kestrel::cli::add_generate(app, run);
  kestrel::cli::add_info(app, run);
  kestrel::cli::add_tokenize(app, run);
  kestrel::cli::add_logits(app, run);
  kestrel::cli::add_make_model(app, run);
  kestrel::cli::add_bench(app, run);
  kestrel::cli::add_serve(app, run);
  kestrel::cli::add_perplexity(app, run);
  kestrel::cli::add_quantize(app, run);
  kestrel::cli::add_prune(app, run);
  kestrel::cli::add_embed(app, run);
  kestrel::cli::add_chat(app, run);
  // llama.cpp's multi-letter short flags, which CLI11 cannot declare.
  std::vector<std::string> args(argv + 1, argv + argc);
  for (std::string& a : args) {
    if (a == "-np") a = "--parallel";
    if (a == "-md") a = "--draft-model";
    if (a == "-ctk") a = "--cache-type-k";
    if (a == "-ctv") a = "--cache-type-v";
    if (a == "-sys") a = "--system-prompt";
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments in reverse order
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!run) return 1;
  try {
    return run();
  } catch (const std::exception& e) {  // a clear message for what the commands' own checks missed
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
