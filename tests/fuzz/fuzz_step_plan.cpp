// libFuzzer target: any byte string read as a step plan (engine/step_plan.h, what tensor-parallel followers
// receive) must decode or fail with an error; a plan that decodes must encode back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "engine/step_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto plan = kestrel::decode_step_plan({data, size});
  if (!plan.ok()) {
    if (plan.error().empty()) std::abort();
    return 0;
  }
  const std::vector<uint8_t> again = kestrel::encode_step_plan(plan.value());
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
  return 0;
}
