// stories260K (../shared) with its tokenizer, for the engine and server tests.
#pragma once
#include <memory>

#include "model/model.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::test {

struct StoriesModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Loads it into `out`; records a test failure when ../shared has it but it does not load.
inline void load_stories(const std::string& shared, StoriesModel& out) {
  auto model = Model::load(shared + "/models/stories260K/stories260K.gguf");
  ASSERT_TRUE(model.ok()) << model.error();
  out.model = std::move(model).value();
  auto tokenizer = Tokenizer::from_gguf(out.model->file());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  out.tokenizer = std::make_unique<Tokenizer>(std::move(tokenizer).value());
}

}  // namespace kestrel::test
