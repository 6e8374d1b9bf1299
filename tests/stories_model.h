// stories260K (../shared) with its tokenizer, for the engine and server tests.
#pragma once
#include <memory>

#include "model/model.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::test {

// Loads it into model and tokenizer; records a test failure when ../shared has it but it does not load.
inline void load_stories(const std::string& shared, std::unique_ptr<Model>& model, std::unique_ptr<Tokenizer>& tokenizer) {
  auto loaded = Model::load(shared + "/models/stories260K/stories260K.gguf");
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  model = std::move(loaded).value();
  auto vocab = Tokenizer::from_gguf(model->file());
  ASSERT_TRUE(vocab.ok()) << vocab.error();
  tokenizer = std::make_unique<Tokenizer>(std::move(vocab).value());
}

}  // namespace kestrel::test
