// libFuzzer target: plan files are untrusted input. Whatever bytes arrive,
// the loader either rejects them with a one-line error or accepts a plan on
// which every program then runs to the end (or stops with an exception)
// without a memory error or undefined behaviour: "a plan that passes the
// loader never crashes the executor". ASan and UBSan watch both halves.

#include "tpc/runtime/Executor.h"
#include "tpc/runtime/Plan.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <vector>

using namespace tpc::runtime;

namespace {
/// Programs whose buffers exceed this are only loaded, not run: a fuzzed
/// plan may legitimately ask for more memory than a fuzzing process has.
constexpr uint64_t kRunLimitBytes = uint64_t(64) << 20;

void runEveryProgram(const LoadedPlan &plan) {
  uint64_t paramBytes = 0;
  for (const tpc::plan::Param *param : *plan.plan().params())
    paramBytes += 3 * sizeof(float) *
                  uint64_t(checkedElementCount(param->shape(), "param"));
  if (paramBytes > kRunLimitBytes)
    return;
  ParamStore params = ParamStore::initialise(plan);
  for (const tpc::plan::Program *program : *plan.plan().programs()) {
    if (program->arena_bytes() > kRunLimitBytes)
      continue;
    try {
      ProgramRunner runner(plan, program->name()->str(), params);
      if (runner.hasInput(tpc::plan::InputKind::Tokens)) {
        std::vector<int64_t> shape = runner.tokensShape();
        std::vector<int32_t> zeros(size_t(shape[0] * shape[1]), 0);
        runner.setInput(tpc::plan::InputKind::Tokens, zeros);
        if (runner.hasInput(tpc::plan::InputKind::Targets))
          runner.setInput(tpc::plan::InputKind::Targets, zeros);
      }
      runner.setStep(1);
      runner.setHyperparameters({1e-3f, 1e-4f, 1.0f, 10.0f, 1.0f});
      runner.run();
    } catch (const std::exception &) {
      // A clean refusal at run time is fine; a crash is not.
    }
  }
}

/// Loads (and, if accepted, runs) one candidate plan.
void loadAndRun(const uint8_t *data, size_t size) {
  std::optional<LoadedPlan> plan;
  try {
    plan.emplace(LoadedPlan::fromBytes(data, size, 1, "fuzz.tpplan"));
  } catch (const PlanError &) {
    return;
  }
  runEveryProgram(*plan);
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // The input as it is (a mutation almost always breaks the content
  // checksum), then resealed, so that the checks behind the checksum and the
  // executor see every mutation too.
  loadAndRun(data, size);
  std::vector<uint64_t> aligned((size + 7) / 8, 0);
  if (size > 0)
    std::memcpy(aligned.data(), data, size);
  std::span<uint8_t> copy(reinterpret_cast<uint8_t *>(aligned.data()), size);
  if (sealPlan(copy))
    loadAndRun(copy.data(), size);
  return 0;
}
