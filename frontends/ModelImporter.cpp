//===- ModelImporter.cpp - any supported config.json -> tp dialect --------===//

#include "ModelImporter.h"

#include "ConfigReader.h"
#include "dlrm/DlrmImporter.h"
#include "tpc/Support/InputFiles.h"
#include "transformer/TransformerImporter.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace mlir;
using namespace tpc::frontend;

llvm::Expected<OwningOpRef<ModuleOp>>
tpc::frontend::importModel(MLIRContext &context, llvm::StringRef configPath,
                           const ImportShape &shape) {
  auto buffer =
      tpc::readBoundedInput(configPath, kMaxConfigBytes, "config.json");
  if (!buffer)
    return buffer.takeError();
  llvm::StringRef text = (*buffer)->getBuffer();
  // Only the type is read here; each importer validates the whole file.
  bool dlrm = false;
  if (llvm::Expected<llvm::json::Value> parsed = tpc::parseJsonBounded(text)) {
    if (const llvm::json::Object *object = parsed->getAsObject())
      dlrm = isDlrmConfig(*object);
  } else {
    llvm::consumeError(parsed.takeError());
  }
  if (dlrm) {
    if (shape.seq)
      return configError("--seq: a DLRM has no sequence (each of the --batch "
                         "samples is one row); leave it out");
    if (shape.kvCache != 0)
      return configError("--kv-cache: a DLRM has no generation programs");
    llvm::Expected<DlrmConfig> config = parseDlrmConfig(text);
    if (!config)
      return configError(configPath + ": " +
                         llvm::toString(config.takeError()));
    return importDlrm(context, *config, shape.batch);
  }
  llvm::Expected<TransformerConfig> config =
      readTransformerConfig(configPath, text);
  if (!config)
    return config.takeError();
  if (!shape.seq)
    return configError("--seq is required: tokens per sequence of the "
                       "transformer's steps");
  return importTransformer(context, *config, shape.batch, *shape.seq,
                           shape.kvCache);
}
