// libFuzzer target: any byte string read as a step plan (engine/step_plan.h, what tensor-parallel followers
// receive) or as a prefill/decode message (engine/prefill_messages.h, what disaggregated ranks exchange) must
// decode or fail with an error; one that decodes must encode back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "engine/prefill_messages.h"
#include "engine/step_plan.h"

namespace {
template <typename Decoded, typename Encode>
void round_trip(const Decoded& decoded, Encode encode, const uint8_t* data, size_t size) {
  if (!decoded.ok()) {
    if (decoded.error().empty()) std::abort();
    return;
  }
  const std::vector<uint8_t> again = encode(decoded.value());
  if (again.size() != size || (size && std::memcmp(again.data(), data, size) != 0)) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  round_trip(kestrel::decode_step_plan({data, size}), kestrel::encode_step_plan, data, size);
  round_trip(kestrel::decode_prefill_message({data, size}), kestrel::encode_prefill_message, data, size);
  return 0;
}
