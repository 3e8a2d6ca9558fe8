// libFuzzer target: safetensors files (weights, checkpoints) are untrusted
// input. The reader either rejects a file with one line or accepts it, and
// then every tensor it lists reads back within the file.

#include "FuzzFile.h"
#include "tpc/runtime/Safetensors.h"

#include <cstdlib>
#include <optional>
#include <stdexcept>

using namespace tpc::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static tpc::fuzz::ScratchFile scratch("tpc-fuzz.safetensors");
  const std::string &path = scratch.write(data, size);
  std::optional<SafetensorsFile> file;
  try {
    file.emplace(SafetensorsFile::open(path));
  } catch (const std::runtime_error &) {
    return 0;
  }
  for (const TensorInfo &info : file->tensors()) {
    // Every accepted tensor's bytes match its dtype and shape exactly.
    if (file->bytes(info).size() != info.numElements() * dtypeSize(info.dtype))
      std::abort();
    try {
      if (info.dtype == DType::F32 || info.dtype == DType::F16 ||
          info.dtype == DType::BF16) {
        if (file->readAsF32(info.name).size() != info.numElements())
          std::abort();
      } else if (info.dtype == DType::I32 || info.dtype == DType::I64) {
        if (file->readAsI64(info.name).size() != info.numElements())
          std::abort();
      }
    } catch (const std::runtime_error &) {
      // A refusal (e.g. too large to widen) is a clean answer.
    }
  }
  return 0;
}
