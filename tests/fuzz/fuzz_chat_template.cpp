// libFuzzer target: any bytes as a chat template must parse and render, or fail with an error message;
// never crash, hang or exhaust memory (the renderer bounds nesting, steps and output size).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  auto t = kestrel::ChatTemplate::parse(source);
  if (!t.ok()) {
    if (t.error().empty()) std::abort();
    return 0;
  }
  const std::vector<kestrel::ChatMessage> messages = {{"system", "sys"}, {"user", "hi"}, {"assistant", "yo"}, {"user", "q"}};
  auto r = t->render(messages, true, "<s>", "</s>");
  if (!r.ok() && r.error().empty()) std::abort();
  return 0;
}
