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
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "tpc/Dialect/TP/IR/TPDialect.h"
#include "tpc/Pipelines/Pipelines.h"
#include "tpc/Support/InputFiles.h"
#include "tpc/Target/Plan/PlanEmitter.h"
#include "tpc/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

/// Builds the requested pass pipeline once before reading the input, so that
/// an option error is one line naming the option: MlirOptMain would add an
/// empty located error after the option parser's own message.
static LogicalResult checkPassPipeline(DialectRegistry &registry,
                                       const MlirOptMainConfig &config) {
  // Building the pipeline dumps it when asked: leave that to MlirOptMain.
  if (config.shouldDumpPassPipeline())
    return success();
  MLIRContext context(registry);
  ScopedDiagnosticHandler handler(&context, [](Diagnostic &diagnostic) {
    std::string message = diagnostic.str();
    if (!message.empty())
      llvm::errs() << "tpc-opt: error: " << message << "\n";
    return success();
  });
  PassManager pm(&context);
  return config.setupPassPipeline(pm);
}

/// Runs the requested passes like mlir-opt on `inputFilename`, printing the
/// result to `os`.
static LogicalResult runPasses(StringRef inputFilename,
                               const MlirOptMainConfig &config,
                               DialectRegistry &registry, raw_ostream &os) {
  if (failed(checkPassPipeline(registry, config)))
    return failure();
  std::string errorMessage;
  std::unique_ptr<llvm::MemoryBuffer> input =
      openInputFile(inputFilename, &errorMessage);
  if (!input) {
    llvm::errs() << "tpc-opt: error: " << errorMessage << "\n";
    return failure();
  }
  return MlirOptMain(os, std::move(input), registry, config);
}

/// Replaces `outputFilename` with what `write` produces, through a temporary
/// file renamed over it: a failure leaves an existing file as it was.
static LogicalResult
writeAtomically(StringRef outputFilename,
                llvm::function_ref<LogicalResult(raw_ostream &)> write) {
  if (llvm::Error error = llvm::writeToOutput(
          outputFilename, [&](llvm::raw_ostream &os) -> llvm::Error {
            if (failed(write(os)))
              return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                             "not written");
            return llvm::Error::success();
          })) {
    llvm::errs() << "tpc-opt: error: " << outputFilename << ": "
                 << llvm::toString(std::move(error)) << "\n";
    return failure();
  }
  return success();
}

/// Runs the requested passes like mlir-opt, then writes the result as a
/// plan, atomically.
static LogicalResult emitPlan(StringRef inputFilename, StringRef outputFilename,
                              DialectRegistry &registry) {
  MlirOptMainConfig config = MlirOptMainConfig::createFromCLOptions();
  if (!config.inputSplitMarker().empty()) {
    llvm::errs() << "tpc-opt: error: -split-input-file cannot write a plan\n";
    return failure();
  }
  // Bytecode keeps every location exact for the emitter's diagnostics.
  config.emitBytecode(true);
  std::string bytecode;
  llvm::raw_string_ostream bytecodeStream(bytecode);
  if (failed(runPasses(inputFilename, config, registry, bytecodeStream)))
    return failure();

  MLIRContext context(registry);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(bytecode, ParserConfig(&context));
  if (!module)
    return failure();
  return writeAtomically(outputFilename, [&](raw_ostream &os) {
    return tp::translateModuleToPlan(*module, os);
  });
}

/// Like MlirOptMain, but the output file is written only once the passes
/// succeeded, and atomically: MlirOptMain would truncate it up front and
/// delete it on failure, losing a user's file (even the input itself).
static LogicalResult emitText(int argc, char **argv, StringRef inputFilename,
                              StringRef outputFilename,
                              DialectRegistry &registry) {
  MlirOptMainConfig config = MlirOptMainConfig::createFromCLOptions();
  if (config.shouldShowDialects() || config.shouldListPasses())
    return MlirOptMain(argc, argv, inputFilename, outputFilename, registry);
  if (outputFilename == "-")
    return runPasses(inputFilename, config, registry, llvm::outs());
  std::string text;
  llvm::raw_string_ostream textStream(text);
  if (failed(runPasses(inputFilename, config, registry, textStream)))
    return failure();
  return writeAtomically(outputFilename, [&](raw_ostream &os) {
    os << text;
    return success();
  });
}

int main(int argc, char **argv) {
  // The LLVM libraries register hundreds of options of their own (AMDGPU,
  // ARM, profiling) before main: --help shows only what is registered from
  // here on, MLIR's driver options and the passes.
  static llvm::cl::OptionCategory driverCategory("tpc-opt");
  llvm::cl::HideUnrelatedOptions(driverCategory);
  registerTransformsPasses();
  tp::registerTPCPasses();
  tp::registerPipelines();

  DialectRegistry registry;
  tp::registerTPDialect(registry);
  registry.insert<arith::ArithDialect, func::FuncDialect, scf::SCFDialect,
                  tensor::TensorDialect>();

  // An error on a module or function op is one line (with its source line),
  // not a dump of the whole op: --mlir-print-op-on-diagnostic brings that
  // back.
  registerMLIRContextCLOptions();
  auto &options = llvm::cl::getRegisteredOptions();
  if (auto *printOp = static_cast<llvm::cl::opt<bool> *>(
          options.lookup("mlir-print-op-on-diagnostic")))
    printOp->setInitialValue(false);

  auto [inputFilename, outputFilename] = registerAndParseCLIOptions(
      argc, argv, "tpc optimizer driver: tp dialect passes and pipelines\n",
      registry);
  // A compile may take minutes: an output it cannot write fails first.
  if (llvm::Error error = tpc::checkOutputFile(outputFilename, "-o")) {
    llvm::errs() << "tpc-opt: error: " << llvm::toString(std::move(error))
                 << "\n";
    return 1;
  }
  if (StringRef(outputFilename).ends_with(".tpplan"))
    return asMainReturnCode(emitPlan(inputFilename, outputFilename, registry));
  return asMainReturnCode(
      emitText(argc, argv, inputFilename, outputFilename, registry));
}
