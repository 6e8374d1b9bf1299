// Helpers shared by the tests: where ../shared is, reading files, temporary paths, running the CLI.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <cstdint>
#include <fstream>
#include <numeric>
#include <sstream>
#include <random>
#include <string>
#include <vector>

#include "sample/sampler.h"

namespace kestrel::test {

// KESTREL_SHARED, else ../shared next to the repository; empty when absent.
inline std::string shared_dir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("KESTREL_SHARED"); env && fs::is_directory(env)) return env;
  const fs::path guess = fs::path(KESTREL_SOURCE_DIR).parent_path() / "shared";
  return fs::is_directory(guess) ? guess.string() : std::string();
}

#define KESTREL_REQUIRE_SHARED(dir)                                                          \
  const std::string dir = ::kestrel::test::shared_dir();                                     \
  if (dir.empty()) GTEST_SKIP() << "../shared not found (set KESTREL_SHARED); skipping"

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh path in the temporary directory, removed by the caller or left for the OS.
inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("kestrel-test-" + std::to_string(::getpid()) + "-" + name)).string();
}

// n values drawn from N(0, scale^2), seeded.
inline std::vector<float> gaussian_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Sampling at `temperature` with top-p the only filter (top-k and min-p off): 1 leaves the distribution whole.
inline SamplingParams top_p_sampling(float temperature, float top_p = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = top_p;
  p.min_p = 0;
  return p;
}

// n consecutive token ids from `first` (toy prompts whose runs never repeat).
inline std::vector<int32_t> iota_tokens(int32_t n, int32_t first = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Built with AddressSanitizer (the sanitizer run of CI): the slowest multi-process tests check a
// representative subset there, every code path but fewer models, to keep CI short.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitizerBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif
#else
inline constexpr bool kSanitizerBuild = false;
#endif

// A shell command running `program` as n processes under Open MPI's mpirun: as root too (Open MPI refuses
// root without its two variables), over shared memory, oversubscribing this machine's cores, without leak
// checks in the ranks (Open MPI's own allocations outlive main); `timeout` turns a hang into status 124.
// stderr is merged into stdout, or dropped.
// mpirun_launcher is the part before the program (without the variables, which it exports in the
// environment instead: a script's launcher is a word list).
inline std::string mpirun_launcher(int n, int timeout_s = 120) {
  return "timeout " + std::to_string(timeout_s) + " mpirun --oversubscribe --bind-to none --mca btl self,vader --mca "
         "btl_vader_single_copy_mechanism none -x ASAN_OPTIONS=detect_leaks=0 -np " + std::to_string(n);
}
inline constexpr const char* kMpiAsRoot = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1";
inline std::string mpirun_command(int n, const std::string& program, bool keep_stderr = true) {
  return std::string(kMpiAsRoot) + " " + mpirun_launcher(n) + " " + program + (keep_stderr ? " 2>&1" : " 2>/dev/null");
}

// Runs a shell command, returning its exit status and stdout.
inline int run_command(const std::string& command, std::string& output) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return -1;
  char buf[4096];
  size_t n;
  output.clear();
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) output.append(buf, n);
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace kestrel::test
