//===- Driver.cpp - the compiler as a library call ------------------------===//

#include "tpc/Driver/Driver.h"

#include "ModelImporter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "tpc/Dialect/TP/IR/TPDialect.h"
#include "tpc/Pipelines/Pipelines.h"
#include "tpc/Target/Plan/PlanEmitter.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace {
llvm::Error errorOf(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The dialects a tp module and the pipeline's output use (tpc-opt's).
DialectRegistry compilerDialects() {
  DialectRegistry registry;
  tp::registerTPDialect(registry);
  registry.insert<arith::ArithDialect, func::FuncDialect, scf::SCFDialect,
                  tensor::TensorDialect>();
  return registry;
}

/// Collects a context's diagnostics as lines: errors to fail with, the rest
/// (remarks, warnings) as the compile's report. Locations are kept only
/// when they name a file position, as tpc-opt prints them.
class DiagnosticLines {
public:
  explicit DiagnosticLines(MLIRContext &context)
      : handler(&context, [this](Diagnostic &diagnostic) {
          std::string line;
          llvm::raw_string_ostream os(line);
          if (auto file = dyn_cast<FileLineColLoc>(diagnostic.getLocation()))
            os << file.getFilename() << ":" << file.getLine() << ":"
               << file.getColumn() << ": ";
          if (diagnostic.getSeverity() == DiagnosticSeverity::Warning)
            os << "warning: ";
          os << diagnostic.str();
          (diagnostic.getSeverity() == DiagnosticSeverity::Error ? errors
                                                                 : remarks)
              .push_back(std::move(line));
          return success();
        }) {}

  llvm::Error failure(llvm::StringRef fallback) const {
    return errorOf(errors.empty() ? fallback : llvm::join(errors, "; "));
  }

  std::vector<std::string> errors, remarks;

private:
  ScopedDiagnosticHandler handler;
};
} // namespace

llvm::Expected<std::string> tpc::driver::importModel(llvm::StringRef configPath,
                                                     int64_t batch,
                                                     std::optional<int64_t> seq,
                                                     int64_t kvCache) {
  MLIRContext context;
  auto module =
      tpc::frontend::importModel(context, configPath, {batch, seq, kvCache});
  if (!module)
    return module.takeError();
  std::string text;
  llvm::raw_string_ostream os(text);
  (**module)->print(os);
  return text;
}

llvm::Expected<tpc::driver::CompiledPlan>
tpc::driver::compileToPlan(llvm::StringRef moduleText,
                           llvm::StringRef pipelineOptions) {
  tp::PipelineOptions options;
  std::string optionError;
  llvm::raw_string_ostream optionErrors(optionError);
  if (failed(options.parseFromString(pipelineOptions, optionErrors)))
    return errorOf("tp-pipeline options '" + pipelineOptions +
                   "': " + llvm::StringRef(optionError).trim());

  MLIRContext context(compilerDialects());
  DiagnosticLines diagnostics(context);
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(moduleText, ParserConfig(&context));
  if (!module)
    return diagnostics.failure("the module is not valid MLIR");
  PassManager pm(&context);
  if (failed(tp::buildPipeline(pm, options, [&](const llvm::Twine &message) {
        return emitError(UnknownLoc::get(&context), message);
      })))
    return diagnostics.failure("tp-pipeline's options do not fit together");
  if (failed(pm.run(*module)))
    return diagnostics.failure("tp-pipeline failed");
  CompiledPlan plan;
  llvm::raw_string_ostream os(plan.bytes);
  if (failed(tp::translateModuleToPlan(*module, os)))
    return diagnostics.failure("the plan emitter failed");
  plan.remarks = std::move(diagnostics.remarks);
  return plan;
}
