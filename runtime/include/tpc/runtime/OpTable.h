// One description per plan op kind: its arity, the dtypes of its operands,
// where its results may live, and the checks of its shapes and attributes.
// The plan loader checks every step against this table and the executor
// binds every step's tensors by it, so an op kind's rules are written once;
// each backend then supplies one kernel per kind (Backend.h), and a backend
// missing one fails when it is created, not on the step that needs it.
#pragma once

#include "tpc/runtime/Plan.h"

#include <array>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpc::runtime {

/// Transfers' tags lie in [0, kMaxTransferTag] (MPI guarantees 32767).
inline constexpr int64_t kMaxTransferTag = 32767;

/// The most operands (AdamW: 7) and results (LayerNormGrad, AdamW: 3) of any
/// kind; executors bind steps on the stack with these bounds.
inline constexpr size_t kMaxStepOperands = 8;
inline constexpr size_t kMaxStepResults = 3;

/// The dtype and local shape of one step operand or result.
struct TensorType {
  plan::DType dtype;
  std::vector<int64_t> shape;
};

/// Where a kind's results may live besides the arena.
enum class ResultPlacement {
  Arena,         // results are arena activations
  AliasOperand,  // a view: the result may share its operand's storage
  UpdateInPlace, // result i may be operand OpInfo::updatedOperand[i] itself
};

/// The context of one step's checks: the step, the types of its operands
/// and results (arity and dtypes already checked), and the plan and program
/// around it. Every failure is a PlanError naming the step.
class StepCheck {
public:
  StepCheck(const plan::Plan &plan, const plan::Program &program,
            const plan::Step &step, std::string where,
            std::span<const TensorType> operands,
            std::span<const TensorType> results)
      : plan(plan), program(program), step(step), where(std::move(where)),
        operands(operands), results(results) {}

  [[noreturn]] void fail(const std::string &message) const;

  /// The step's integer attributes; absent is empty.
  std::span<const int64_t> ints() const;
  void requireShape(const TensorType &type, const std::vector<int64_t> &shape,
                    const char *name) const;
  void requireScalar(const TensorType &type, const char *name) const {
    requireShape(type, {}, name);
  }
  void requireRank(const TensorType &type, size_t rank, const char *name) const;
  /// A finite value representable as f32 and > 0.
  void requirePositive(double value, const char *name) const;
  void requireFiniteF32(double value, const char *name) const;
  /// The step's ints as distinct grid axes (empty allowed when
  /// `allowNone`); returns the product of their sizes.
  int64_t gridAxes(bool allowNone, const char *what) const;

  const plan::Plan &plan;
  const plan::Program &program;
  const plan::Step &step;
  const std::string where;
  const std::span<const TensorType> operands;
  const std::span<const TensorType> results;
};

/// How a kind's kernel uses the grid communicator (Dispatch::comm): a
/// backend whose device cannot reach the other ranks runs such steps staged
/// through the host (Backend::runsNatively).
enum class GridUse : uint8_t {
  None,                   // purely local
  Placement,              // reads only its place in the group (a local split, a
                          // ring step's slice or insert): moves no data
  PlacementWhenAxesNamed, // reads its place in the group when the step
                          // names grid axes: vocabulary-parallel embeddings
                          // and their gradients (each rank its rows)
  WhenAxesNamed,          // exchanges data when the step names grid axes:
                          // vocabulary-parallel losses, feature-split norms
  Always,                 // exchanges data: collectives and ring shifts
};

/// Ring shifts: a start's result is still being received when the start
/// returns, and is complete at the wait step that names it as operand 0.
enum class AsyncRole : uint8_t { None, Starts, Waits };

struct OpInfo {
  plan::OpKind kind;
  /// The most operands; the last `optionalOperands` of them may be absent
  /// (attention's and rotary's positions).
  uint8_t numOperands;
  uint8_t numResults;
  /// The dtype of each operand. F32 stands for a float tensor: f32, or
  /// from plan 1.10 bf16 (mixed precision); the other dtypes (token ids,
  /// step counters) are exact and must be program inputs. Results are
  /// float tensors.
  std::array<plan::DType, kMaxStepOperands> operandDTypes;
  ResultPlacement placement;
  /// For UpdateInPlace: the operand each result may overwrite.
  std::array<uint8_t, kMaxStepResults> updatedOperand;
  /// Checks shapes and attributes beyond arity and dtypes.
  void (*check)(const StepCheck &);
  GridUse grid = GridUse::None;
  AsyncRole async = AsyncRole::None;
  /// Whether Step.precision may round the operands of its products.
  bool mixedPrecision = false;
  uint8_t optionalOperands = 0;
  /// The last `optionalResults` results may be absent (a Linear without
  /// GELU has no preactivation).
  uint8_t optionalResults = 0;
  /// Float operands and results by bit (bit i: operand or result i), as
  /// the tp dialect's MixedPrecisionOpInterface states them. Every kernel
  /// computes in f32 and rounds each result once into its dtype.
  /// `storedOperands` are read at whatever float type they have (a norm's
  /// gain, an embedding table); `f32Operands` and `f32Results` must be f32
  /// (optimizer state, statistics, scalars); the remaining float operands
  /// are activations and share one dtype.
  uint8_t storedOperands = 0;
  uint8_t f32Operands = 0;
  uint8_t f32Results = 0;
  /// Whether result 0 has operand 0's dtype: kinds that move elements
  /// without arithmetic, collectives, in-place updates.
  bool resultHasOperandDType = false;
  /// Whether operand 0 may be an i32 block of token ids (1.12: a pipelined
  /// step slices each micro-batch's ids), its result then i32 too.
  bool movesIntegers = false;
  /// The plan format minor version that added the kind (0: before 1.10,
  /// whose kinds the loader does not date).
  uint8_t sinceMinor = 0;
};

/// Whether `dtype` is a float type a plan of minor version `minor` may
/// store tensors in (f32; bf16 from kPlanBf16Minor).
bool isFloatDType(plan::DType dtype, uint32_t minor);

/// The description of `kind`, or null if this runtime does not know it (a
/// plan from a newer compiler, or a corrupt file).
const OpInfo *findOpInfo(plan::OpKind kind);

/// Every kind this runtime executes, in enum order.
std::span<const OpInfo> opTable();

/// Whether `step` (of a kind the table knows) exchanges data with other
/// ranks or reads its place in the grid.
bool stepUsesGrid(const plan::Step &step);
/// Whether `step` exchanges data with other ranks (uses the grid for more
/// than its place in it).
bool stepExchanges(const plan::Step &step);
/// Whether `kind` starts or waits for a pipeline transfer between stages.
inline bool isPipelineTransfer(plan::OpKind kind) {
  return kind == plan::OpKind::SendStart || kind == plan::OpKind::SendWait ||
         kind == plan::OpKind::RecvStart || kind == plan::OpKind::RecvWait;
}

/// One backend's kernels by op kind, filled from the list beside the
/// backend's kernels and checked against opTable(): a kind the loader
/// accepts with no kernel is an error naming it when the list is built (and
/// in the backend's unit test, which needs no device), never a crash when a
/// step runs.
template <typename Kernel> class KernelRegistry {
public:
  explicit KernelRegistry(std::string backend) : backend(std::move(backend)) {}

  /// Throws std::logic_error for a kind given twice.
  void add(plan::OpKind kind, Kernel kernel) {
    Slot &slot = slots[size_t(kind)];
    if (slot.set)
      throw std::logic_error(backend + ": two kernels for " + opKindName(kind));
    slot = {kernel, true};
  }
  bool has(plan::OpKind kind) const { return slots[size_t(kind)].set; }
  const Kernel &operator[](plan::OpKind kind) const {
    return slots[size_t(kind)].kernel;
  }

  /// The kinds of opTable() that `required` (default: all) says this
  /// backend must run and that have no kernel.
  std::vector<plan::OpKind>
  missing(bool (*required)(const OpInfo &) = nullptr) const {
    std::vector<plan::OpKind> kinds;
    for (const OpInfo &info : opTable())
      if ((!required || required(info)) && !has(info.kind))
        kinds.push_back(info.kind);
    return kinds;
  }
  /// Throws std::logic_error naming every missing(required) kind.
  void checkComplete(bool (*required)(const OpInfo &) = nullptr) const {
    const std::vector<plan::OpKind> kinds = missing(required);
    if (kinds.empty())
      return;
    std::string names;
    for (plan::OpKind kind : kinds)
      names += (names.empty() ? "" : ", ") + std::string(opKindName(kind));
    throw std::logic_error("the " + backend + " backend has no kernel for " +
                           names);
  }

private:
  struct Slot {
    Kernel kernel{};
    bool set = false;
  };
  std::string backend;
  std::array<Slot, size_t(plan::OpKind::MAX) + 1> slots{};
};

} // namespace tpc::runtime
