//===- tpc-import.cpp - HF config.json -> tp dialect ----------------------===//
//
//   tpc-import config.json --batch 8 --seq 256 -o model.mlir
//
// Every error is one line on stderr and exit code 1; the output file is
// written atomically, so a failed run leaves nothing behind.
//
//===----------------------------------------------------------------------===//

#include "mlir/IR/MLIRContext.h"
#include "tpc/Support/InputFiles.h"
#include "transformer/TransformerImporter.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

/// tpc-import's own options: --help shows only these, not the hundreds the
/// LLVM libraries register.
static cl::OptionCategory importCategory("tpc-import options");

static cl::opt<std::string> configPath(cl::Positional, cl::Required,
                                       cl::desc("<config.json>"),
                                       cl::cat(importCategory));
static cl::opt<int64_t> batch("batch", cl::Required,
                              cl::desc("Sequences per step"),
                              cl::cat(importCategory));
static cl::opt<int64_t> seq("seq", cl::Required,
                            cl::desc("Tokens per sequence"),
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
      argc, argv, "tpc-import: HuggingFace config.json -> tp dialect\n");

  if (llvm::Error error = tpc::checkOutputFile(outputPath, "-o"))
    return fail(llvm::toString(std::move(error)));
  // HF config.json files are a few kilobytes.
  auto buffer = tpc::readBoundedInput(configPath, 16 << 20, "config.json");
  if (!buffer)
    return fail(llvm::toString(buffer.takeError()));
  // HF's from_pretrained reads generation_config.json beside config.json:
  // its eos_token_id is what generate() stops at.
  std::unique_ptr<llvm::MemoryBuffer> generation;
  llvm::SmallString<256> generationPath(llvm::sys::path::parent_path(
      configPath == "-" ? llvm::StringRef() : llvm::StringRef(configPath)));
  llvm::sys::path::append(generationPath, "generation_config.json");
  if (configPath != "-" && llvm::sys::fs::exists(generationPath)) {
    auto read =
        tpc::readBoundedInput(generationPath, 16 << 20, "generation config");
    if (!read)
      return fail(llvm::toString(read.takeError()));
    generation = std::move(*read);
  }
  auto config = tpc::frontend::parseTransformerConfig(
      (*buffer)->getBuffer(),
      generation ? std::optional(generation->getBuffer()) : std::nullopt);
  if (!config)
    return fail(configPath + ": " + llvm::toString(config.takeError()));

  mlir::MLIRContext context;
  auto module =
      tpc::frontend::importTransformer(context, *config, batch, seq, kvCache);
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
