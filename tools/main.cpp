// kestrel: run and inspect large language models.
#include <cstdio>

#include "common.h"

int main(int argc, char** argv) {
  CLI::App app{"kestrel — run and serve large language models"};
  app.require_subcommand(1);
  kestrel::cli::Action run;
  kestrel::cli::add_generate(app, run);
  kestrel::cli::add_info(app, run);
  kestrel::cli::add_tokenize(app, run);
  kestrel::cli::add_logits(app, run);
  kestrel::cli::add_make_model(app, run);
  kestrel::cli::add_bench(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return run ? run() : 1;
}
