//===- tpc-opt.cpp - tpc's mlir-opt-style driver --------------------------===//
//
// Runs any tp pass (or pipeline) alone on .mlir text, so that every stage of
// the compiler is lit-testable. When the output file ends in .tpplan, the
// result is serialised as a plan for tp-run instead of printed:
//
//   tpc-opt model.mlir --tp-pipeline -o model.tpplan
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "tpc/Dialect/TP/IR/TPDialect.h"
#include "tpc/Pipelines/Pipelines.h"
#include "tpc/Target/Plan/PlanEmitter.h"
#include "tpc/Transforms/Passes.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

/// Runs the requested passes like mlir-opt, then writes the result as a
/// plan, atomically: a failed run leaves no file behind.
static LogicalResult emitPlan(StringRef inputFilename, StringRef outputFilename,
                              DialectRegistry &registry) {
  MlirOptMainConfig config = MlirOptMainConfig::createFromCLOptions();
  if (!config.inputSplitMarker().empty()) {
    llvm::errs() << "tpc-opt: error: -split-input-file cannot write a plan\n";
    return failure();
  }
  // Bytecode keeps every location exact for the emitter's diagnostics.
  config.emitBytecode(true);
  std::string errorMessage;
  std::unique_ptr<llvm::MemoryBuffer> input =
      openInputFile(inputFilename, &errorMessage);
  if (!input) {
    llvm::errs() << "tpc-opt: error: " << errorMessage << "\n";
    return failure();
  }
  std::string bytecode;
  llvm::raw_string_ostream bytecodeStream(bytecode);
  if (failed(MlirOptMain(bytecodeStream, std::move(input), registry, config)))
    return failure();

  MLIRContext context(registry);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(bytecode, ParserConfig(&context));
  if (!module)
    return failure();
  if (llvm::Error error = llvm::writeToOutput(
          outputFilename, [&](llvm::raw_ostream &os) -> llvm::Error {
            if (failed(tp::translateModuleToPlan(*module, os)))
              return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                             "plan emission failed");
            return llvm::Error::success();
          })) {
    llvm::errs() << "tpc-opt: error: " << outputFilename << ": "
                 << llvm::toString(std::move(error)) << "\n";
    return failure();
  }
  return success();
}

/// MlirOptMain writing `outputFilename` atomically. Left to itself it
/// truncates the output before the passes run and deletes it when they fail,
/// which destroys a user's file (or the input itself, for `x.mlir -o
/// x.mlir`). Here it writes a temporary file beside the output, renamed over
/// it only on success; a failure leaves the old file as it was.
static LogicalResult runIntoFile(int argc, char **argv, StringRef inputFilename,
                                 StringRef outputFilename,
                                 DialectRegistry &registry) {
  // Standard output, /dev/null or a pipe: nothing to keep, nothing to
  // replace (renaming over a device node would be worse than truncating it).
  llvm::sys::fs::file_status status;
  if (outputFilename == "-" ||
      (!llvm::sys::fs::status(outputFilename, status) &&
       status.type() != llvm::sys::fs::file_type::regular_file))
    return MlirOptMain(argc, argv, inputFilename, outputFilename, registry);
  SmallString<128> temporary;
  int fd = -1;
  if (std::error_code error = llvm::sys::fs::createUniqueFile(
          outputFilename + ".tmp-%%%%%%", fd, temporary)) {
    llvm::errs() << "tpc-opt: error: " << outputFilename
                 << ": cannot create a file beside it: " << error.message()
                 << "\n";
    return failure();
  }
  llvm::sys::Process::SafelyCloseFileDescriptor(fd);
  if (failed(MlirOptMain(argc, argv, inputFilename, temporary, registry))) {
    llvm::sys::fs::remove(temporary);
    return failure();
  }
  if (std::error_code error =
          llvm::sys::fs::rename(temporary, outputFilename)) {
    llvm::sys::fs::remove(temporary);
    llvm::errs() << "tpc-opt: error: " << outputFilename
                 << ": cannot write: " << error.message() << "\n";
    return failure();
  }
  return success();
}

int main(int argc, char **argv) {
  registerTransformsPasses();
  tp::registerTPCPasses();
  tp::registerPipelines();

  DialectRegistry registry;
  tp::registerTPDialect(registry);
  registry.insert<arith::ArithDialect, func::FuncDialect, scf::SCFDialect,
                  tensor::TensorDialect>();

  auto [inputFilename, outputFilename] = registerAndParseCLIOptions(
      argc, argv, "tpc optimizer driver: tp dialect passes and pipelines\n",
      registry);
  if (StringRef(outputFilename).ends_with(".tpplan"))
    return asMainReturnCode(emitPlan(inputFilename, outputFilename, registry));
  return asMainReturnCode(
      runIntoFile(argc, argv, inputFilename, outputFilename, registry));
}
