// Prefill/decode disaggregation (`mpirun -np P+1 kestrel serve --prefill-ranks P --decode-ranks 1`, and with
// each role split by tensor parallelism, `mpirun -np P+T ... --prefill-ranks P --tp T`): prefill ranks compute
// prompts and send the KV pages to the decode side. Served greedy text equals one process's `kestrel
// generate` (float and quantized KV pages, alone and concurrent, from the prefill side's prefix cache too),
// logprobs equal a one-process server's, clients leaving during prefill or generation free KV on both
// sides, a killed prefill rank ends the job, and what cannot run is refused with a message.
#include <gtest/gtest.h>

#include <string>

#include "test_support.h"

namespace kestrel {
namespace {

#if KESTREL_HAVE_MPI
using test::kMpiAsRoot;

std::string serve_env(int n_processes, const std::string& serve_args) {
  return std::string(kMpiAsRoot) + " KESTREL_LAUNCHER='" + test::mpirun_launcher(n_processes, 300) + "' SERVE_ARGS='" +
         serve_args + "' ";
}

TEST(Disaggregation, ServeAnswersWhatOneProcessGenerates) {
  KESTREL_REQUIRE_SHARED(shared);
  const std::string stories = shared + "/models/stories260K/stories260K.gguf";
  const std::string script = std::string(KESTREL_SOURCE_DIR) + "/tests/scripts/serve_equals_generate.sh";
  struct Case {
    int prefill_ranks;
    int tp;  // ranks per role group: the decode group and each prefill group split the model over tp ranks
    const char* kv;
  };
  for (const Case& c : {Case{1, 1, ""}, Case{1, 1, " -ctk q8_0 -ctv q8_0"}, Case{2, 1, ""}, Case{2, 2, ""},
                        Case{4, 2, " -ctk q8_0 -ctv q8_0"}}) {
    if (test::kSanitizerBuild && ((c.prefill_ranks == 2 && c.tp == 1) || c.prefill_ranks == 4)) continue;  // the same paths
    SCOPED_TRACE(std::to_string(c.prefill_ranks) + " tp " + std::to_string(c.tp) + c.kv);
    const std::string env = serve_env(c.prefill_ranks + c.tp, "--prefill-ranks " + std::to_string(c.prefill_ranks) +
                                                                  " --tp " + std::to_string(c.tp) + " -t 1");
    std::string out;
    EXPECT_EQ(test::run_command(env + "bash " + script + " " + KESTREL_BINARY + " " + stories + c.kv + " 2>&1", out), 0) << out;
    EXPECT_NE(out.find("serve equals generate on 6 prompts"), std::string::npos) << out;
    EXPECT_NE(out.find("kestrel_pd_prefill_ranks " + std::to_string(c.prefill_ranks)), std::string::npos) << out;
    EXPECT_NE(out.find("kestrel_pd_group_ranks " + std::to_string(c.tp)), std::string::npos) << out;
    EXPECT_NE(out.find("kestrel_pd_kv_transfer_pages_total"), std::string::npos) << out;
    if (c.tp > 1) {
      EXPECT_NE(out.find("kestrel_tensor_parallel_ranks " + std::to_string(c.tp)), std::string::npos) << out;
    }
    // the second round of the same prompts finds them in a prefill group's prefix cache (labelled by its leader)
    EXPECT_NE(out.find("kestrel_pd_prefill_cache_hit_tokens_total{rank=\"" + std::to_string(c.tp) + "\"}"),
              std::string::npos) << out;
    EXPECT_EQ(out.find("kestrel_prefix_cache_hit_tokens_total 0\n"), std::string::npos) << out;
  }
}

TEST(Disaggregation, LogprobsMatchOneProcessAndLeavingClientsFreeKvOnBothSides) {
  KESTREL_REQUIRE_SHARED(shared);
  // A model whose 3000-token prompt takes seconds to prefill, so a client can leave in the middle.
  const std::string slow = test::temp_path("pd-slow.gguf");
  std::string out;
  ASSERT_EQ(test::run_command(std::string(KESTREL_BINARY) + " make-model -o " + slow +
                                  " --dim 512 --layers 8 --heads 8 --kv-heads 8 --ffn 1536 --vocab 1000 --ctx 8192 2>&1",
                              out),
            0)
      << out;
  const std::string script = std::string(KESTREL_SOURCE_DIR) + "/tests/scripts/serve_disaggregated.sh";
  // 1 + 1 whole models, and 2 + 2 with each role split by --tp 2 (pages in two shares, imported by both
  // decode ranks).
  for (const char* layout : {"-np 2|--prefill-ranks 1 --decode-ranks 1", "-np 4|--prefill-ranks 2 --decode-ranks 2 --tp 2"}) {
    SCOPED_TRACE(layout);
    const std::string l = layout;
    const int n = l[4] - '0';
    const int status = test::run_command(serve_env(n, l.substr(l.find('|') + 1)) + "bash " + script + " " + KESTREL_BINARY +
                                             " " + shared + "/models/stories260K/stories260K.gguf " + slow + " 2>&1",
                                         out);
    EXPECT_EQ(status, 0) << out;
    EXPECT_NE(out.find("the same tokens and top-5 logprobs as one process"), std::string::npos) << out;
    EXPECT_NE(out.find("freed KV on both sides"), std::string::npos) << out;
  }
  std::remove(slow.c_str());
}

TEST(Disaggregation, KillingThePrefillRankEndsTheJob) {
  KESTREL_REQUIRE_SHARED(shared);
  const std::string script = std::string(KESTREL_SOURCE_DIR) + "/tests/scripts/serve_rank_killed.sh";
  // 1 + 1, and 2 + 2 over --tp 2 (the rank killed is the second prefill group rank, which follows its leader)
  for (int tp : {1, 2}) {
    SCOPED_TRACE(tp);
    std::string out;
    ASSERT_EQ(test::run_command(serve_env(2 * tp, "--prefill-ranks " + std::to_string(tp) + " --tp " + std::to_string(tp) +
                                                     " -t 1") +
                                    "bash " + script + " " + KESTREL_BINARY + " " + shared +
                                    "/models/stories260K/stories260K.gguf 2>&1",
                                out),
              0)
        << out;
    EXPECT_NE(out.find("ended rc="), std::string::npos) << out;
    EXPECT_EQ(out.find("ended rc=0"), std::string::npos) << out;
  }
}

TEST(Disaggregation, WhatCannotRunIsRefusedWithAMessage) {
  KESTREL_REQUIRE_SHARED(shared);
  const std::string serve = std::string(KESTREL_BINARY) + " serve -m " + shared + "/models/stories260K/stories260K.gguf -t 1 ";
  auto expect_refused = [&](int n, const std::string& flags, const std::string& message) {
    SCOPED_TRACE(flags);
    std::string out;
    const int status = n > 1 ? test::run_command(test::mpirun_command(n, serve + flags), out)
                             : test::run_command(serve + flags + " 2>&1", out);
    EXPECT_NE(status, 0);
    EXPECT_NE(status, 124) << out;
    EXPECT_NE(out.find(message), std::string::npos) << out;
  };
  expect_refused(1, "--prefill-ranks 1", "needs 2 processes: run under mpirun -np 2");
  expect_refused(3, "--prefill-ranks 1", "needs 2 processes, but it was launched as 3");
  expect_refused(3, "--prefill-ranks 1 --decode-ranks 2", "--decode-ranks 2: one decode group for now");
  expect_refused(3, "--prefill-ranks 1 --tp 2", "--prefill-ranks 1 is not a multiple of --tp 2");
  expect_refused(4, "--prefill-ranks 2 --pp 2", "does not combine with --pp, --ep or --cp yet");
  expect_refused(2, "--prefill-ranks 1 --spec-ngram 3", "speculative decoding does not run with prefill/decode disaggregation");
}
#endif

}  // namespace
}  // namespace kestrel
