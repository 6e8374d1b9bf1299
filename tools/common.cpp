#include "common.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/timer.h"

namespace kestrel::cli {

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

std::unique_ptr<Model> load_model(const std::string& path, bool quiet) {
  Timer timer;
  auto model = Model::load(path, quiet ? std::function<void(double)>() : progress_bar("loading"));
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.error().c_str());
    return nullptr;
  }
  if (!quiet) std::fprintf(stderr, "load time: %.3f s\n", timer.elapsed_s());
  return std::move(model).value();
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
