//===- ModelImporter.h - any supported config.json -> tp dialect -*- C++
//-*-===//
//
// The one entry point of the importers: reads a config.json and imports the
// model its model_type names (gpt2, llama: TransformerImporter; dlrm:
// DlrmImporter).
//
//===----------------------------------------------------------------------===//

#ifndef TPC_FRONTENDS_MODELIMPORTER_H
#define TPC_FRONTENDS_MODELIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"
#include <optional>

namespace tpc::frontend {

/// The step a model is imported for. A transformer needs `seq` (tokens per
/// sequence) and may have `kvCache` (generation programs); a DLRM takes
/// neither (each of its `batch` samples is one row).
struct ImportShape {
  int64_t batch = 0;
  std::optional<int64_t> seq;
  int64_t kvCache = 0;
};

/// Reads `configPath` (a config.json, at most 16 MiB; "-": standard input)
/// and imports its model for `shape`. Errors are one line naming the file
/// and field, or the flag.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importModel(mlir::MLIRContext &context, llvm::StringRef configPath,
            const ImportShape &shape);

} // namespace tpc::frontend

#endif // TPC_FRONTENDS_MODELIMPORTER_H
