//===- tpc-import.cpp - config.json -> tp dialect -------------------------===//
//
//   tpc-import config.json --batch 8 --seq 256 -o model.mlir  (GPT-2, LLaMA)
//   tpc-import dlrm.json --batch 2048 -o dlrm.mlir            (DLRM)
//
// Every error is one line on stderr and exit code 1; the output file is
// written atomically, so a failed run leaves nothing behind.
//
//===----------------------------------------------------------------------===//

#include "ModelImporter.h"
#include "mlir/IR/MLIRContext.h"
#include "tpc/Support/InputFiles.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

/// tpc-import's own options: --help shows only these, not the hundreds the
/// LLVM libraries register.
static cl::OptionCategory importCategory("tpc-import options");

static cl::opt<std::string> configPath(cl::Positional, cl::Required,
                                       cl::desc("<config.json>"),
                                       cl::cat(importCategory));
static cl::opt<int64_t> batch("batch", cl::Required,
                              cl::desc("Sequences (a DLRM: samples) per step"),
                              cl::cat(importCategory));
static cl::opt<int64_t> seq("seq",
                            cl::desc("Tokens per sequence (transformers only)"),
                            cl::cat(importCategory));
static cl::opt<int64_t> kvCache(
    "kv-cache", cl::init(0),
    cl::desc("Also emit the generation programs @prefill (--seq tokens) and "
             "@decode (one token) with KV caches of this many positions "
             "(0: none)"),
    cl::cat(importCategory));
static cl::opt<std::string> outputPath("o", cl::init("-"),
                                       cl::desc("Output .mlir file"),
                                       cl::value_desc("filename"),
                                       cl::cat(importCategory));

static int fail(const llvm::Twine &message) {
  llvm::errs() << "tpc-import: error: " << message << "\n";
  return 1;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(importCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "tpc-import: config.json (HuggingFace GPT-2 or LLaMA, or a DLRM) -> tp "
      "dialect\n");

  if (llvm::Error error = tpc::checkOutputFile(outputPath, "-o"))
    return fail(llvm::toString(std::move(error)));
  tpc::frontend::ImportShape shape{batch, std::nullopt, kvCache};
  if (seq.getNumOccurrences())
    shape.seq = seq;
  mlir::MLIRContext context;
  auto module = tpc::frontend::importModel(context, configPath, shape);
  if (!module)
    return fail(llvm::toString(module.takeError()));

  if (llvm::Error error = llvm::writeToOutput(
          outputPath, [&](llvm::raw_ostream &os) -> llvm::Error {
            (**module)->print(os);
            return llvm::Error::success();
          }))
    return fail(outputPath + ": " + llvm::toString(std::move(error)));
  return 0;
}
