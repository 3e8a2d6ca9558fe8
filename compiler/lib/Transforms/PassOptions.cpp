//===- PassOptions.cpp - typed options of the tpc passes ------------------===//

#include "tpc/Transforms/PassOptions.h"

#include "llvm/ADT/StringExtras.h"

using namespace mlir::tp;

int64_t GridShape::numRanks() const {
  int64_t ranks = 1;
  for (int64_t size : sizes)
    ranks *= size;
  return ranks;
}

std::string GridShape::str() const {
  std::string text;
  llvm::raw_string_ostream(text) << *this;
  return text;
}

llvm::raw_ostream &mlir::tp::operator<<(llvm::raw_ostream &os,
                                        const GridShape &shape) {
  llvm::interleave(shape.sizes, os, "x");
  return os;
}

llvm::StringRef mlir::tp::stringifyParallelMode(ParallelMode mode) {
  switch (mode) {
  case ParallelMode::None:
    return "none";
  case ParallelMode::OneD:
    return "1d";
  case ParallelMode::TwoD:
    return "2d";
  case ParallelMode::TwoHalfD:
    return "2.5d";
  case ParallelMode::ThreeD:
    return "3d";
  case ParallelMode::Auto:
    return "auto";
  }
  llvm_unreachable("unknown ParallelMode");
}

llvm::LogicalResult mlir::tp::verifyShardOptions(
    llvm::StringRef passName, ParallelMode mode, const GridShape &grid,
    bool seqParallel, int64_t dataParallel, bool shardOptimizer,
    llvm::function_ref<llvm::LogicalResult(const llvm::Twine &)> emitError) {
  if (dataParallel < 1)
    return emitError(passName + ": dp=" + llvm::Twine(dataParallel) +
                     " is not a positive number of data-parallel replicas");
  if (dataParallel > GridShape::kMaxRanks / grid.numRanks())
    return emitError(passName + ": dp=" + llvm::Twine(dataParallel) +
                     " times the grid's ranks is more than " +
                     llvm::Twine(GridShape::kMaxRanks) + " ranks");
  if (shardOptimizer && dataParallel == 1)
    return emitError(passName + ": shard-optimizer=true shards over the "
                                "data-parallel axis; it needs dp=N with N > 1");
  switch (mode) {
  case ParallelMode::None:
    if (!grid.empty())
      return emitError(passName + ": grid=" + grid.str() +
                       " needs a mode, e.g. mode=1d");
    if (seqParallel)
      return emitError(passName +
                       ": seq-parallel=true needs a mode, e.g. mode=1d");
    if (dataParallel > 1)
      return emitError(passName + ": dp=" + llvm::Twine(dataParallel) +
                       " needs a mode, e.g. mode=1d (grid=1 for data "
                       "parallelism alone)");
    return llvm::success();
  case ParallelMode::OneD:
    if (grid.sizes.size() > 1)
      return emitError(
          passName + ": mode=1d needs a one-axis grid, got grid=" + grid.str());
    return llvm::success();
  case ParallelMode::TwoD:
  case ParallelMode::TwoHalfD: {
    bool twoD = mode == ParallelMode::TwoD;
    llvm::StringRef name = stringifyParallelMode(mode),
                    shape =
                        twoD ? "QxQ, e.g. grid=2x2" : "QxQxD, e.g. grid=2x2x2";
    if (grid.sizes.size() != (twoD ? 2u : 3u))
      return emitError(passName + ": mode=" + name + " needs a grid " + shape +
                       ", got " +
                       (grid.empty() ? "none" : "grid=" + grid.str()));
    if (grid.sizes[0] != grid.sizes[1])
      return emitError(passName + ": mode=" + name +
                       " needs as many rows as columns (" + shape +
                       "), got grid=" + grid.str());
    if (seqParallel)
      return emitError(passName +
                       ": seq-parallel=true is for mode=1d; mode=" + name +
                       " already splits activations over the whole grid");
    return llvm::success();
  }
  case ParallelMode::ThreeD:
    if (grid.sizes.size() != 3 || grid.sizes[0] != grid.sizes[1] ||
        grid.sizes[1] != grid.sizes[2])
      return emitError(passName +
                       ": mode=3d needs a cube grid QxQxQ, e.g. grid=2x2x2, "
                       "got " +
                       (grid.empty() ? "none" : "grid=" + grid.str()));
    if (seqParallel)
      return emitError(passName +
                       ": seq-parallel=true is for mode=1d; mode=3d already "
                       "splits activations over the whole grid");
    return llvm::success();
  case ParallelMode::Auto:
    return emitError(passName + ": mode=auto is tp-pipeline's: it compiles "
                                "each scheme and picks one by simulation");
  }
  llvm_unreachable("unknown ParallelMode");
}

bool llvm::cl::parser<GridShape>::parse(Option &option, StringRef argName,
                                        StringRef arg, GridShape &value) {
  auto reject = [&](const Twine &why) {
    return option.error("'" + arg + "' is not a grid shape like 4, 2x2 or " +
                            "2x2x2: " + why,
                        argName);
  };
  GridShape shape;
  int64_t ranks = 1;
  for (StringRef part : llvm::split(arg, 'x')) {
    int64_t size;
    if (part.getAsInteger(10, size) || size < 1)
      return reject("'" + part + "' is not a positive integer");
    if (shape.sizes.size() == GridShape::kMaxAxes)
      return reject("more than " + Twine(GridShape::kMaxAxes) + " axes");
    // Checked before multiplying, so that the product cannot overflow.
    if (size > GridShape::kMaxRanks / ranks)
      return reject("more than " + Twine(GridShape::kMaxRanks) + " ranks");
    ranks *= size;
    shape.sizes.push_back(size);
  }
  value = std::move(shape);
  return false;
}

void llvm::cl::parser<GridShape>::printOptionDiff(
    const Option &option, const GridShape &value,
    const OptionValue<GridShape> & /*defaultValue*/, size_t globalWidth) const {
  printOptionName(option, globalWidth);
  outs() << "= " << value << "\n";
}

void llvm::cl::parser<GridShape>::anchor() {}
