//===- TPDialect.cpp - tp dialect -----------------------------------------===//

#include "tpc/Dialect/TP/IR/TPDialect.h"

#include "mlir/IR/DialectRegistry.h"
#include "tpc/Dialect/TP/IR/TPAttrs.h"
#include "tpc/Dialect/TP/IR/TPOps.h"

using namespace mlir;
using namespace mlir::tp;

#include "tpc/Dialect/TP/IR/TPDialect.cpp.inc"

void TPDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "tpc/Dialect/TP/IR/TPOps.cpp.inc"
      >();
  registerAttributes();
}

//===----------------------------------------------------------------------===//
// Discardable attributes
//===----------------------------------------------------------------------===//

namespace {
/// Where a discardable tp attribute may appear.
enum class Placement { Argument, Result, Operation, Module };

struct DiscardableAttrSpec {
  StringRef name;
  Placement placement;
  bool (*isValid)(Attribute);
  const char *expected;
};

template <typename AttrT> bool isA(Attribute attr) { return isa<AttrT>(attr); }
/// Per dimension a point symbol or unit.
bool isDimPoints(Attribute attr) {
  auto array = dyn_cast<ArrayAttr>(attr);
  return array && llvm::all_of(array, [](Attribute dim) {
           return isa<FlatSymbolRefAttr, UnitAttr>(dim);
         });
}
/// Per result an isDimPoints array.
bool isResultDimPoints(Attribute attr) {
  auto array = dyn_cast<ArrayAttr>(attr);
  return array && llvm::all_of(array, isDimPoints);
}
bool isI64(Attribute attr) {
  auto integer = dyn_cast<IntegerAttr>(attr);
  return integer && integer.getType().isSignlessInteger(64);
}

/// tp.embedding_cache: the rank's rows of the table and the cached share.
bool isEmbeddingCache(Attribute attr) {
  auto dict = dyn_cast<DictionaryAttr>(attr);
  return dict && dict.size() == 2 && isI64(dict.get("rows")) &&
         isa_and_nonnull<FloatAttr>(dict.get("ratio"));
}

/// Every discardable attribute of the dialect (TPBase.td) with its place and
/// kind; names come from the generated helpers.
ArrayRef<DiscardableAttrSpec> discardableAttrSpecs() {
  using D = TPDialect;
  static const DiscardableAttrSpec specs[] = {
      {D::ParamAttrHelper::getNameStr(), Placement::Argument, isA<StringAttr>,
       "a string"},
      {D::InitAttrHelper::getNameStr(), Placement::Argument, isA<StringAttr>,
       "a string"},
      {D::InitStdAttrHelper::getNameStr(), Placement::Argument, isA<FloatAttr>,
       "a float"},
      {D::HfShapeAttrHelper::getNameStr(), Placement::Argument,
       isA<DenseI64ArrayAttr>, "an array<i64>"},
      {D::StateAttrHelper::getNameStr(), Placement::Argument, isA<StringAttr>,
       "a string"},
      {D::InputAttrHelper::getNameStr(), Placement::Argument, isA<StringAttr>,
       "a string"},
      {D::CacheAttrHelper::getNameStr(), Placement::Argument, isA<StringAttr>,
       "a string"},
      {D::LayoutAttrHelper::getNameStr(), Placement::Argument, isA<DistAttr>,
       "a #tp.dist layout"},
      {D::EmbeddingCacheAttrHelper::getNameStr(), Placement::Argument,
       isEmbeddingCache, "a dictionary {rows = i64, ratio = f64}"},
      {D::CacheOfAttrHelper::getNameStr(), Placement::Argument, isA<StringAttr>,
       "a string"},
      {D::OutputAttrHelper::getNameStr(), Placement::Result, isA<StringAttr>,
       "a string"},
      {D::GradOfAttrHelper::getNameStr(), Placement::Result, isA<StringAttr>,
       "a string"},
      {D::UpdatesAttrHelper::getNameStr(), Placement::Result, isI64, "an i64"},
      {D::LayerAttrHelper::getNameStr(), Placement::Operation, isI64, "an i64"},
      {D::RecomputedAttrHelper::getNameStr(), Placement::Operation,
       isA<UnitAttr>, "a unit attribute"},
      {D::BackwardAttrHelper::getNameStr(), Placement::Operation, isA<UnitAttr>,
       "a unit attribute"},
      {D::StageAttrHelper::getNameStr(), Placement::Operation, isI64, "an i64"},
      {D::MicrobatchAttrHelper::getNameStr(), Placement::Operation, isI64,
       "an i64"},
      {D::ScheduleAttrHelper::getNameStr(), Placement::Operation,
       isA<StringAttr>, "a string"},
      {D::CutsAttrHelper::getNameStr(), Placement::Operation,
       isA<DenseI64ArrayAttr>, "an array<i64>"},
      {D::VocabAxesAttrHelper::getNameStr(), Placement::Operation,
       isA<DenseI64ArrayAttr>, "an array<i64>"},
      {D::FeatureAxesAttrHelper::getNameStr(), Placement::Operation,
       isA<DenseI64ArrayAttr>, "an array<i64>"},
      {D::RingReducedAttrHelper::getNameStr(), Placement::Operation,
       isA<DenseI64ArrayAttr>, "an array<i64>"},
      {D::BufferOffsetsAttrHelper::getNameStr(), Placement::Operation,
       isA<DenseI64ArrayAttr>, "an array<i64>"},
      {D::ArenaBytesAttrHelper::getNameStr(), Placement::Operation, isI64,
       "an i64"},
      {D::RebalanceDimsAttrHelper::getNameStr(), Placement::Argument,
       isDimPoints, "an array of point symbols or unit, one per dimension"},
      {D::RebalanceDimsAttrHelper::getNameStr(), Placement::Operation,
       isResultDimPoints,
       "an array per result of point symbols or unit, one per dimension"},
      {D::ModelTypeAttrHelper::getNameStr(), Placement::Module, isA<StringAttr>,
       "a string"},
      {D::HfConfigAttrHelper::getNameStr(), Placement::Module, isA<StringAttr>,
       "a string"},
      {D::HeadCountsAttrHelper::getNameStr(), Placement::Module,
       isA<DictionaryAttr>, "a dictionary"},
      {D::EosTokenIdsAttrHelper::getNameStr(), Placement::Module,
       isA<DenseI64ArrayAttr>, "an array<i64>"},
      {D::PipelineAttrHelper::getNameStr(), Placement::Module,
       isA<DictionaryAttr>, "a dictionary"},
  };
  return specs;
}

const char *placementName(Placement placement) {
  switch (placement) {
  case Placement::Argument:
    return "a function argument";
  case Placement::Result:
    return "a function result";
  case Placement::Operation:
    return "an operation";
  case Placement::Module:
    return "the module";
  }
  llvm_unreachable("unknown placement");
}

/// Checks that `attr` is a known tp attribute, in its place, of its kind.
LogicalResult verifyDiscardableAttr(Operation *op, NamedAttribute attr,
                                    Placement placement) {
  // A name may have one spec per placement.
  const DiscardableAttrSpec *misplaced = nullptr;
  for (const DiscardableAttrSpec &spec : discardableAttrSpecs()) {
    if (attr.getName() != spec.name)
      continue;
    if (spec.placement != placement) {
      misplaced = &spec;
      continue;
    }
    if (!spec.isValid(attr.getValue()))
      return op->emitOpError() << "'" << spec.name << "' must be "
                               << spec.expected << ", got " << attr.getValue();
    return success();
  }
  if (misplaced)
    return op->emitOpError() << "'" << misplaced->name << "' belongs on "
                             << placementName(misplaced->placement)
                             << ", not on " << placementName(placement);
  return op->emitOpError() << "unknown tp attribute '"
                           << attr.getName().getValue() << "'";
}
} // namespace

LogicalResult TPDialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attr) {
  return verifyDiscardableAttr(
      op, attr, isa<ModuleOp>(op) ? Placement::Module : Placement::Operation);
}

LogicalResult TPDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                  unsigned,
                                                  NamedAttribute attr) {
  return verifyDiscardableAttr(op, attr, Placement::Argument);
}

LogicalResult TPDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                     unsigned,
                                                     NamedAttribute attr) {
  return verifyDiscardableAttr(op, attr, Placement::Result);
}

namespace {
/// func.func signatures may carry #tp.dist layouts too; check them against
/// their grids like any tp op's types.
struct FuncDistLayoutChecker
    : public SymbolUserOpInterface::ExternalModel<FuncDistLayoutChecker,
                                                  func::FuncOp> {
  LogicalResult verifySymbolUses(Operation *op,
                                 SymbolTableCollection &symbolTables) const {
    return verifyDistLayouts(op, symbolTables);
  }
};
} // namespace

bool mlir::tp::isGenerationFunction(func::FuncOp func) {
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
    if (func.getArgAttr(i, TPDialect::CacheAttrHelper::getNameStr()))
      return true;
  return false;
}

std::optional<int64_t> mlir::tp::layerOf(Operation *op) {
  if (auto attr = op->getAttrOfType<IntegerAttr>(
          TPDialect::LayerAttrHelper::getNameStr()))
    return attr.getInt();
  return std::nullopt;
}

namespace {
/// What collectives between pipeline stages write (addStageExchangeEffects).
struct StageExchangeResource
    : public SideEffects::Resource::Base<StageExchangeResource> {
  StringRef getName() final { return "tp.stage_exchange"; }
};
} // namespace

void mlir::tp::addStageExchangeEffects(
    Operation *op, ArrayRef<int64_t> gridAxes,
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>
        &effects) {
  if (!llvm::is_contained(gridAxes, kPipelineStageAxis))
    return;
  auto module = op->getParentOfType<ModuleOp>();
  auto record = module ? module->getAttrOfType<DictionaryAttr>(
                             TPDialect::PipelineAttrHelper::getNameStr())
                       : DictionaryAttr();
  auto stages = record ? record.getAs<IntegerAttr>("stages") : IntegerAttr();
  if (stages && stages.getInt() > 1)
    effects.emplace_back(MemoryEffects::Write::get(),
                         StageExchangeResource::get());
}

void mlir::tp::registerTPDialect(DialectRegistry &registry) {
  registry.insert<TPDialect, func::FuncDialect>();
  registry.addExtension(+[](MLIRContext *ctx, func::FuncDialect *) {
    func::FuncOp::attachInterface<FuncDistLayoutChecker>(*ctx);
  });
}
