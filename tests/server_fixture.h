// The HTTP server on stories260K, started on a free port, for the server tests.
#pragma once
#include <httplib.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "engine/embedder.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "stories_model.h"
#include "test_support.h"
#include "tokenizer/chat_template.h"

namespace kestrel {

using json = nlohmann::json;

class ServerTest : public ::testing::Test {
 protected:
  // tweak: changes to the server's configuration (limits, CORS) before it starts.
  void start(size_t max_pending = 64, const std::string& api_key = "",
             const std::function<void(ServerConfig&)>& tweak = {}) {
    const std::string shared = test::shared_dir();
    if (shared.empty()) GTEST_SKIP() << "../shared not found (set KESTREL_SHARED); skipping";
    test::load_stories(shared, model_, tokenizer_);
    if (HasFatalFailure()) return;
    auto tmpl = ChatTemplate::parse(test::read_file(shared + "/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
    ASSERT_TRUE(tmpl.ok()) << tmpl.error();
    template_ = std::make_unique<ChatTemplate>(std::move(tmpl).value());
    EngineConfig config;
    config.n_blocks = 256;
    engine_ = std::make_unique<Engine>(*model_, pool_, config);
    EmbedderConfig embedding;
    embedding.max_input_tokens = 256;
    embedder_ = std::make_unique<Embedder>(*model_, pool_, embedding);
    loop_ = std::make_unique<EngineLoop>(
        *engine_, max_pending, [this](const std::vector<StepOutput>&, const EngineStats& s) { metrics_.engine_stats(s); },
        embedder_.get());
    loop_->start();
    ServerConfig sc;
    sc.port = 0;
    sc.api_key = api_key;
    sc.max_body_bytes = 64 * 1024;
    if (tweak) tweak(sc);
    server_ = std::make_unique<HttpServer>(
        *loop_, *tokenizer_,
        [this](const std::vector<ChatMessage>& m, const nlohmann::ordered_json& tools) {
          return template_->render(m, true, "", "", tools);
        },
        metrics_, sc,
        engine_->max_seq_len());
    server_->serve_embeddings(loop_.get(), model_->hparams().n_embd, embedding.max_input_tokens);
    ASSERT_TRUE(server_->start().ok());
    server_->set_ready(true);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(60, 0);
  }
  void TearDown() override {
    if (server_) server_->stop();
    if (loop_) loop_->stop(false);
  }
  httplib::Result post(const std::string& path, const std::string& body, const httplib::Headers& headers = {}) {
    return client_->Post(path.c_str(), headers, body, "application/json");
  }
  void expect_error(const std::string& path, const std::string& body, int status, const std::string& param = "") {
    auto r = post(path, body);
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->status, status) << body << " -> " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"]["type"].is_string());
    if (!param.empty()) {
      EXPECT_EQ(j["error"]["param"], param) << r->body;
    }
  }
  // Waits until the engine holds no blocks and no requests: up to 120 s, generous for a machine busy with
  // other work; on failure it reports what it last saw.
  bool wait_idle() {
    EngineStats s;
    for (int i = 0; i < 12000; ++i) {
      s = loop_->stats();
      if (loop_->n_pending() == 0 && s.kv_blocks_used == 0 && s.n_running == 0 && s.n_waiting == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "engine not idle after 120 s: " << loop_->n_pending() << " requests pending, " << s.n_running
                  << " running, " << s.n_waiting << " waiting, " << s.kv_blocks_used << " KV blocks in use";
    return false;
  }

  ThreadPool pool_{2};
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Embedder> embedder_;
  std::unique_ptr<EngineLoop> loop_;
  Metrics metrics_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace kestrel
