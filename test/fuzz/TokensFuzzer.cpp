// libFuzzer target: token files are untrusted input. The reader either
// rejects a file with one line or returns exactly the ids the header counts,
// each within int32.

#include "FuzzFile.h"
#include "tpc/runtime/Tokens.h"

#include <cstdlib>
#include <stdexcept>

using namespace tpc::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static tpc::fuzz::ScratchFile scratch("tpc-fuzz.tokens");
  const std::string &path = scratch.write(data, size);
  std::vector<int32_t> tokens;
  try {
    tokens = readTokenFile(path);
  } catch (const std::runtime_error &) {
    return 0;
  }
  if (size != 16 + 4 * tokens.size())
    std::abort();
  for (int32_t id : tokens)
    if (id < 0)
      std::abort();
  // Cutting a batch either fits the stream or is refused.
  try {
    Batch batch = cutBatch(tokens, 1, 2, 3);
    if (batch.tokens.size() != 6 || batch.targets.size() != 6)
      std::abort();
  } catch (const std::runtime_error &) {
  }
  return 0;
}
