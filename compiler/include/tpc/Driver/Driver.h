//===- Driver.h - the compiler as a library call ----------------*- C++ -*-===//
//
// What tpc-import and tpc-opt ... -o model.tpplan do, as calls that return
// their result or a one-line error: the Python package compiles in-process
// through them.
//
//===----------------------------------------------------------------------===//

#ifndef TPC_DRIVER_DRIVER_H
#define TPC_DRIVER_DRIVER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tpc::driver {

/// A config.json (a HuggingFace GPT-2 or LLaMA's, with the
/// generation_config.json beside it, or a DLRM's) as the tp dialect's
/// textual IR: tpc-import's output for `batch` sequences of `seq` tokens
/// (a DLRM: `batch` samples, no `seq`), with KV-cache programs when
/// `kvCache` > 0.
llvm::Expected<std::string> importModel(llvm::StringRef configPath,
                                        int64_t batch,
                                        std::optional<int64_t> seq,
                                        int64_t kvCache = 0);

/// A compiled plan and what the pipeline reported while compiling it (the
/// communication per rank of each program, mode=auto's choice), one line
/// each.
struct CompiledPlan {
  std::string bytes;
  std::vector<std::string> remarks;
};

/// Parses `moduleText` (a tp module, as importModel returns), runs
/// tp-pipeline with `pipelineOptions` (its textual options, e.g. "mode=1d
/// grid=2 precision=bf16") and serialises the result as a plan. The error
/// joins every error the pipeline reported.
llvm::Expected<CompiledPlan> compileToPlan(llvm::StringRef moduleText,
                                           llvm::StringRef pipelineOptions);

} // namespace tpc::driver

#endif // TPC_DRIVER_DRIVER_H
