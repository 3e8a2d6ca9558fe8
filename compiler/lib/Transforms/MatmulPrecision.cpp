//===- MatmulPrecision.cpp - operand precision of matrix products ---------===//

#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Transforms/Passes.h"

namespace mlir::tp {
#define GEN_PASS_DEF_TPMATMULPRECISION
#include "tpc/Transforms/Passes.h.inc"
} // namespace mlir::tp

using namespace mlir;
using namespace mlir::tp;

namespace {

struct TPMatmulPrecision
    : public tp::impl::TPMatmulPrecisionBase<TPMatmulPrecision> {
  using Base::Base;

  void runOnOperation() override {
    Builder b(&getContext());
    TypeAttr type;
    switch (precision) {
    case MatmulPrecision::F32:
      break;
    case MatmulPrecision::TF32:
      type = TypeAttr::get(b.getTF32Type());
      break;
    case MatmulPrecision::BF16:
      type = TypeAttr::get(b.getBF16Type());
      break;
    }
    getOperation().walk(
        [&](MatrixProductOpInterface op) { op.setOperandPrecision(type); });
  }
};

} // namespace
