//===- PlanEmitter.cpp - tp module -> flatbuffers plan --------------------===//

#include "tpc/Target/Plan/PlanEmitter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "llvm/Support/Endian.h"

#include "llvm/Support/xxhash.h"
#include <functional>

#include "tpc/plan/plan_generated.h"

using namespace mlir;
using namespace mlir::tp;
namespace fb = tpc::plan;

namespace {
class PlanEmitter {
public:
  explicit PlanEmitter(ModuleOp module) : module(module) {}
  LogicalResult emit(llvm::raw_ostream &os);

private:
  FailureOr<fb::DType> dtypeOf(Operation *where, Type type);
  FailureOr<uint32_t> paramIndex(func::FuncOp func, unsigned argIdx);
  LogicalResult emitProgram(func::FuncOp func);

  /// Per dim of `value`, the index of the rebalance point whose blocks it
  /// holds (tp.rebalance_dims), or -1; empty when it holds none.
  FailureOr<SmallVector<int32_t>> rebalanceDimsOf(Value value);

  /// A parameter as the plan records it, built once every program has been
  /// seen: a program that cannot move blocks (@gradients) sees the even
  /// split, one that can sees the capacity, and the plan needs both.
  struct ParamInfo {
    std::string name;
    fb::DType dtype;
    SmallVector<int64_t> globalShape;
    fb::Init init;
    double initStd;
    Attribute layout;
    SmallVector<SmallVector<int64_t>> splitAxes;
    std::optional<SmallVector<int64_t>> hfShape;
    SmallVector<int32_t> rebalanceDims;
    int32_t stage = -1; // the pipeline stage holding it; -1: every rank
    /// With stage cuts: the stage holding it under each cut.
    SmallVector<int32_t> cutStages;
    /// A cached embedding table: the cache's rows and the share asked for.
    int64_t cacheRows = 0;
    double cacheRatio = 0;
  };
  flatbuffers::Offset<fb::Param> buildParam(const ParamInfo &param);
  /// The plan's Pipeline table from the module's tp.pipeline record, or
  /// null without one.
  FailureOr<flatbuffers::Offset<fb::Pipeline>> buildPipeline();

  ModuleOp module;
  flatbuffers::FlatBufferBuilder builder{1 << 16};
  std::vector<ParamInfo> params;
  llvm::StringMap<uint32_t> paramByName;
  /// KV caches by name, in first-use order: their dtype and local shape.
  struct CacheInfo {
    std::string name;
    fb::DType dtype;
    SmallVector<int64_t> shape;
  };
  std::vector<CacheInfo> caches;
  llvm::StringMap<uint32_t> cacheByName;
  SmallVector<RebalancePointOp> points;
  llvm::StringMap<int32_t> pointByName;
  std::vector<flatbuffers::Offset<fb::Program>> programs;
};

/// Per-program tensor table: each SSA value gets one entry.
struct TensorTable {
  struct Entry {
    fb::DType dtype;
    SmallVector<int64_t> shape;
    fb::Storage storage;
    uint64_t offset;
    uint32_t index;
    SmallVector<int32_t> rebalanceDims;
  };
  std::vector<Entry> entries;
  DenseMap<Value, uint32_t> ids;
};
} // namespace

FailureOr<fb::DType> PlanEmitter::dtypeOf(Operation *where, Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return where->emitError()
           << "plan: " << type << " is not a statically shaped tensor";
  if (tensor.getEncoding())
    return where->emitError()
           << "plan: " << type
           << " still carries a layout; partition the module first";
  Type element = tensor.getElementType();
  if (element.isF32())
    return fb::DType::F32;
  if (element.isF16())
    return fb::DType::F16;
  if (element.isBF16())
    return fb::DType::BF16;
  if (element.isInteger(32))
    return fb::DType::I32;
  if (element.isInteger(64))
    return fb::DType::I64;
  return where->emitError() << "plan: unsupported element type " << element;
}

FailureOr<SmallVector<int32_t>> PlanEmitter::rebalanceDimsOf(Value value) {
  StringRef name = TPDialect::RebalanceDimsAttrHelper::getNameStr();
  ArrayAttr dims;
  Operation *where;
  if (auto argument = dyn_cast<BlockArgument>(value)) {
    auto func = cast<func::FuncOp>(argument.getOwner()->getParentOp());
    dims = func.getArgAttrOfType<ArrayAttr>(argument.getArgNumber(), name);
    where = func;
  } else {
    auto result = cast<OpResult>(value);
    where = result.getOwner();
    if (auto perResult = where->getAttrOfType<ArrayAttr>(name))
      dims = dyn_cast<ArrayAttr>(perResult[result.getResultNumber()]);
  }
  SmallVector<int32_t> indices;
  if (!dims)
    return indices;
  // The dialect verified one entry per dim, each a point name or unit.
  for (Attribute dim : dims) {
    auto point = dyn_cast<FlatSymbolRefAttr>(dim);
    if (!point) {
      indices.push_back(-1);
      continue;
    }
    auto it = pointByName.find(point.getValue());
    if (it == pointByName.end())
      return where->emitOpError()
             << "plan: " << point << " is no tp.rebalance_point";
    indices.push_back(it->second);
  }
  return indices;
}

FailureOr<uint32_t> PlanEmitter::paramIndex(func::FuncOp func,
                                            unsigned argIdx) {
  auto name = func.getArgAttrOfType<StringAttr>(
      argIdx, TPDialect::ParamAttrHelper::getNameStr());
  auto type = cast<RankedTensorType>(func.getArgumentTypes()[argIdx]);
  FailureOr<SmallVector<int32_t>> rebalanceDims =
      rebalanceDimsOf(func.getArgument(argIdx));
  if (failed(rebalanceDims))
    return failure();
  auto layout = func.getArgAttrOfType<DistAttr>(
      argIdx, TPDialect::LayoutAttrHelper::getNameStr());
  GridOp grid;
  if (layout) {
    grid = SymbolTable::lookupNearestSymbolFrom<GridOp>(func, layout.getGrid());
    if (!grid)
      return func.emitError()
             << "plan: parameter '" << name.getValue() << "' is laid out on "
             << layout.getGrid() << ", which is no tp.grid";
  }
  // The whole parameter: a dim split evenly holds its rank's share of the
  // shards; a rebalanced one capacity blocks of the point's extent.
  SmallVector<int64_t> globalShape(type.getShape());
  // A cached table's argument is its cache: the block has `rows` rows.
  int64_t cacheRows = 0;
  double cacheRatio = 0;
  if (auto cache = func.getArgAttrOfType<DictionaryAttr>(
          argIdx, TPDialect::EmbeddingCacheAttrHelper::getNameStr())) {
    cacheRows = globalShape[0];
    globalShape[0] = cache.getAs<IntegerAttr>("rows").getInt();
    cacheRatio = cache.getAs<FloatAttr>("ratio").getValueAsDouble();
  }
  for (int64_t d = 0; d < int64_t(globalShape.size()); ++d) {
    if (!rebalanceDims->empty() && (*rebalanceDims)[d] >= 0) {
      RebalancePointOp point = points[(*rebalanceDims)[d]];
      globalShape[d] =
          globalShape[d] / int64_t(point.getCapacity()) * point.getBlocks();
      continue;
    }
    if (layout)
      for (int64_t axis : layout.getSplitAxes(d))
        globalShape[d] *= grid.getShape()[axis];
  }
  if (auto it = paramByName.find(name.getValue()); it != paramByName.end()) {
    ParamInfo &known = params[it->second];
    if (known.globalShape != globalShape || known.cacheRows != cacheRows ||
        known.layout !=
            func.getArgAttr(argIdx, TPDialect::LayoutAttrHelper::getNameStr()))
      return func.emitOpError()
             << "plan: parameter '" << name.getValue() << "' has shape " << type
             << " here but a different shape elsewhere";
    if (!rebalanceDims->empty()) {
      if (!known.rebalanceDims.empty() && known.rebalanceDims != *rebalanceDims)
        return func.emitOpError()
               << "plan: parameter '" << name.getValue()
               << "' holds other rebalance points here than elsewhere";
      known.rebalanceDims = *rebalanceDims;
    }
    return it->second;
  }
  FailureOr<fb::DType> dtype = dtypeOf(func, type);
  if (failed(dtype))
    return failure();
  ParamInfo param{
      name.str(),
      *dtype,
      globalShape,
      fb::Init::Normal,
      0.0,
      func.getArgAttr(argIdx, TPDialect::LayoutAttrHelper::getNameStr()),
      {},
      std::nullopt,
      *rebalanceDims,
      /*stage=*/-1,
      /*cutStages=*/{},
      cacheRows,
      cacheRatio};
  auto initAttr = func.getArgAttrOfType<StringAttr>(
      argIdx, TPDialect::InitAttrHelper::getNameStr());
  StringRef initName = initAttr ? initAttr.getValue() : "";
  if (initName == "zeros") {
    param.init = fb::Init::Zeros;
  } else if (initName == "ones") {
    param.init = fb::Init::Ones;
  } else if (initName == "normal") {
    auto std = func.getArgAttrOfType<FloatAttr>(
        argIdx, TPDialect::InitStdAttrHelper::getNameStr());
    if (!std)
      return func.emitOpError() << "plan: parameter '" << name.getValue()
                                << "' has a normal init without tp.init_std";
    param.initStd = std.getValueAsDouble();
  } else {
    return func.emitOpError() << "plan: parameter '" << name.getValue()
                              << "' needs tp.init = \"normal\", \"zeros\" or "
                                 "\"ones\"";
  }
  // A parameter split across ranks keeps its global shape here and its
  // layout, from which each rank loads its own block.
  if (layout)
    for (int64_t d = 0; d < int64_t(globalShape.size()); ++d)
      param.splitAxes.emplace_back(layout.getSplitAxes(d));
  // A parameter the program views in another shape than its checkpoints
  // (GPT-2's fused QKV as [h, 3, h]) keeps the file's shape for loading.
  if (auto attr = func.getArgAttrOfType<DenseI64ArrayAttr>(
          argIdx, TPDialect::HfShapeAttrHelper::getNameStr())) {
    int64_t fileCount = 1, count = 1;
    for (int64_t d : attr.asArrayRef())
      fileCount *= d;
    for (int64_t d : globalShape)
      count *= d;
    if (fileCount != count)
      return func.emitOpError()
             << "plan: parameter '" << name.getValue() << "' has tp.hf_shape "
             << attr << " with another element count than its shape";
    param.hfShape.emplace(attr.asArrayRef());
  }
  uint32_t index = params.size();
  params.push_back(std::move(param));
  paramByName[name.getValue()] = index;
  return index;
}

flatbuffers::Offset<fb::Param> PlanEmitter::buildParam(const ParamInfo &param) {
  std::vector<flatbuffers::Offset<fb::Axes>> split;
  for (ArrayRef<int64_t> axes : param.splitAxes)
    split.push_back(fb::CreateAxes(builder, builder.CreateVector(axes.vec())));
  auto name = builder.CreateString(param.name);
  auto shape =
      builder.CreateVector(param.globalShape.data(), param.globalShape.size());
  auto splitVec = split.empty() ? 0 : builder.CreateVector(split);
  auto hfShape = param.hfShape ? builder.CreateVector(param.hfShape->data(),
                                                      param.hfShape->size())
                               : 0;
  auto rebalanceDims = param.rebalanceDims.empty()
                           ? 0
                           : builder.CreateVector(param.rebalanceDims.data(),
                                                  param.rebalanceDims.size());
  auto cutStages =
      param.cutStages.size() > 1
          ? builder.CreateVector(param.cutStages.data(), param.cutStages.size())
          : 0;
  return fb::CreateParam(builder, name, param.dtype, shape, param.init,
                         param.initStd, splitVec, hfShape, rebalanceDims,
                         param.stage, cutStages, param.cacheRows,
                         param.cacheRatio);
}

FailureOr<flatbuffers::Offset<fb::Pipeline>> PlanEmitter::buildPipeline() {
  auto record = module->getAttrOfType<DictionaryAttr>(
      TPDialect::PipelineAttrHelper::getNameStr());
  if (!record)
    return flatbuffers::Offset<fb::Pipeline>();
  auto integer = [&](StringRef key) -> std::optional<int64_t> {
    if (auto value = record.getAs<IntegerAttr>(key))
      return value.getInt();
    return std::nullopt;
  };
  auto schedule = record.getAs<StringAttr>("schedule");
  auto layers = record.getAs<DenseI64ArrayAttr>("layers");
  std::optional<int64_t> stages = integer("stages"),
                         microbatches = integer("microbatches"),
                         chunks = integer("chunks");
  if (!schedule || !layers || !stages || !microbatches || !chunks)
    return module.emitError()
           << "plan: tp.pipeline needs schedule, stages, microbatches, chunks "
              "and layers";
  auto seconds = record.getAs<DenseF64ArrayAttr>("layer_seconds");
  std::vector<flatbuffers::Offset<fb::StageCut>> cuts;
  if (auto list = record.getAs<ArrayAttr>("cuts"))
    for (Attribute cut : list) {
      auto groups = dyn_cast<DenseI64ArrayAttr>(cut);
      if (!groups)
        return module.emitError()
               << "plan: tp.pipeline's cuts must be arrays of layer counts";
      cuts.push_back(fb::CreateStageCut(
          builder,
          builder.CreateVector(groups.asArrayRef().data(), groups.size())));
    }
  return fb::CreatePipeline(
      builder, kPipelineStageAxis, *stages, *microbatches, *chunks,
      builder.CreateString(schedule.getValue().str()),
      builder.CreateVector(layers.asArrayRef().data(), layers.size()),
      seconds
          ? builder.CreateVector(seconds.asArrayRef().data(), seconds.size())
          : 0,
      cuts.empty() ? 0 : builder.CreateVector(cuts));
}

/// The plan kind that runs `op`: the enumerator of the name the op's
/// PlanOpInterface gives (the dialect names kinds without depending on the
/// plan schema; see TPInterfaces.td).
/// The checksum's placeholder while the plan is built: the checksum is
/// defined over the file with these eight bytes zero.
static const fb::Checksum kUnsealed(0);

/// Writes the plan's content checksum (plan.fbs, Plan.content_checksum):
/// XXH3-64 of the finished buffer, whose checksum bytes are still zero. The
/// runtime recomputes it with libxxhash's XXH3_64bits, the same function.
static void sealChecksum(uint8_t *buffer, size_t size) {
  const auto *checksum = fb::GetPlan(buffer)->content_checksum();
  uint8_t *field =
      buffer + (reinterpret_cast<const uint8_t *>(checksum) - buffer);
  uint64_t sum = llvm::xxh3_64bits(llvm::ArrayRef<uint8_t>(buffer, size));
  llvm::support::endian::write64le(field, sum);
}

namespace {
/// What one op puts in its plan step besides kind, operands and results.
struct StepFields {
  std::optional<SmallVector<int64_t>> ints;
  SmallVector<std::function<void(fb::StepBuilder &)>> setters;
};
} // namespace

/// The setter `table` lists for `name`, or null.
template <typename Setter, size_t N>
static const Setter *findSetter(const std::pair<StringRef, Setter> (&table)[N],
                                StringRef name) {
  for (const auto &[key, setter] : table)
    if (key == name)
      return &setter;
  return nullptr;
}

/// Maps an op's attributes to the plan step's fields of the same name (the
/// plan schema names its fields after the ops' attributes), so no op is
/// listed here: an op's integer array (permutation, offsets, dims, grid
/// axes, vocabulary axes) becomes the step's `ints`, and every other
/// attribute must have a field, or emission fails instead of silently
/// dropping it.
static FailureOr<StepFields> stepFieldsOf(Operation &op) {
  StepFields fields;
  auto setInts = [&](NamedAttribute attr) -> LogicalResult {
    auto array = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!array || fields.ints)
      return op.emitOpError() << "plan: a step holds one integer array; '"
                              << attr.getName().getValue() << "' is another";
    fields.ints.emplace(array.asArrayRef());
    return success();
  };
  using Setter = void (fb::StepBuilder::*)(double);
  static const std::pair<StringRef, Setter> doubles[] = {
      {"epsilon", &fb::StepBuilder::add_epsilon},
      {"factor", &fb::StepBuilder::add_factor},
      {"theta", &fb::StepBuilder::add_theta},
      {"alpha", &fb::StepBuilder::add_alpha},
      {"value", &fb::StepBuilder::add_value},
      {"beta1", &fb::StepBuilder::add_beta1},
      {"beta2", &fb::StepBuilder::add_beta2},
      {"weight_decay", &fb::StepBuilder::add_weight_decay}};
  using FlagSetter = void (fb::StepBuilder::*)(bool);
  static const std::pair<StringRef, FlagSetter> flags[] = {
      {"transpose_lhs", &fb::StepBuilder::add_transpose_lhs},
      {"transpose_rhs", &fb::StepBuilder::add_transpose_rhs},
      {"causal", &fb::StepBuilder::add_causal},
      {"inverse", &fb::StepBuilder::add_inverse},
      {"gelu", &fb::StepBuilder::add_gelu}};
  using DimSetter = void (fb::StepBuilder::*)(int64_t);
  static const std::pair<StringRef, DimSetter> dims[] = {
      {"dim", &fb::StepBuilder::add_dim},
      {"source_dim", &fb::StepBuilder::add_dim},
      {"target_dim", &fb::StepBuilder::add_target_dim},
      {"ring_step", &fb::StepBuilder::add_ring_step},
      {"chunk", &fb::StepBuilder::add_chunk},
      {"peer", &fb::StepBuilder::add_peer},
      {"tag", &fb::StepBuilder::add_tag}};

  // Sets the field when the step is built (after its vectors).
  auto defer = [&](auto set, auto v) {
    fields.setters.push_back([=](fb::StepBuilder &step) { (step.*set)(v); });
  };
  for (NamedAttribute attr : op.getAttrs()) {
    StringRef name = attr.getName().getValue();
    Attribute value = attr.getValue();
    // Not for the runtime: the memory plan (read above), the layer,
    // recomputation and ring-reduction marks, and a collective's grid (the
    // plan records the grid once).
    if (name == TPDialect::BufferOffsetsAttrHelper::getNameStr() ||
        name == TPDialect::LayerAttrHelper::getNameStr() ||
        name == TPDialect::RecomputedAttrHelper::getNameStr() ||
        name == TPDialect::BackwardAttrHelper::getNameStr() ||
        name == TPDialect::RingReducedAttrHelper::getNameStr() ||
        name == TPDialect::RebalanceDimsAttrHelper::getNameStr() ||
        name == "grid")
      continue;
    // A transfer's one grid axis goes where collectives keep theirs.
    if (name == "grid_axis") {
      auto axis = dyn_cast<IntegerAttr>(value);
      if (!axis || fields.ints)
        return op.emitOpError()
               << "plan: 'grid_axis' must be an integer, the step's only one";
      fields.ints.emplace(ArrayRef<int64_t>{axis.getInt()});
      continue;
    }
    if (name == "permutation" || name == "offsets" || name == "dims" ||
        name == "grid_axes" ||
        name == TPDialect::VocabAxesAttrHelper::getNameStr() ||
        name == TPDialect::FeatureAxesAttrHelper::getNameStr()) {
      if (failed(setInts(attr)))
        return failure();
      continue;
    }
    if (const Setter *set = findSetter(doubles, name)) {
      auto number = dyn_cast<FloatAttr>(value);
      if (!number)
        return op.emitOpError() << "plan: '" << name << "' must be a float";
      defer(*set, number.getValueAsDouble());
      continue;
    }
    if (const FlagSetter *set = findSetter(flags, name)) {
      auto flag = dyn_cast<BoolAttr>(value);
      defer(*set, isa<UnitAttr>(value) || (flag && flag.getValue()));
      continue;
    }
    if (const DimSetter *set = findSetter(dims, name)) {
      auto integer = dyn_cast<IntegerAttr>(value);
      if (!integer)
        return op.emitOpError() << "plan: '" << name << "' must be an integer";
      defer(*set, integer.getInt());
      continue;
    }
    if (name == "precision") {
      auto type = dyn_cast<TypeAttr>(value);
      if (type && type.getValue().isBF16())
        defer(&fb::StepBuilder::add_precision, fb::Precision::BF16);
      else if (type && isa<FloatTF32Type>(type.getValue()))
        defer(&fb::StepBuilder::add_precision, fb::Precision::TF32);
      else
        return op.emitOpError() << "plan: precision must be bf16 or tf32";
      continue;
    }
    return op.emitOpError()
           << "plan: attribute '" << name << "' has no field in a plan step";
  }
  return fields;
}

static FailureOr<fb::OpKind> opKindOf(Operation *op) {
  static const llvm::StringMap<fb::OpKind> kindsByName = [] {
    llvm::StringMap<fb::OpKind> kinds;
    for (fb::OpKind kind : fb::EnumValuesOpKind())
      kinds[fb::EnumNameOpKind(kind)] = kind;
    return kinds;
  }();
  auto planOp = dyn_cast<PlanOpInterface>(op);
  if (!planOp || planOp.getPlanOpKind().empty())
    return op->emitOpError() << "has no runtime kernel in the plan format";
  auto it = kindsByName.find(planOp.getPlanOpKind());
  if (it == kindsByName.end())
    return op->emitOpError() << "plan: op kind '" << planOp.getPlanOpKind()
                             << "' is not in the plan format";
  return it->second;
}

static std::string locationString(Location loc) {
  std::string text;
  llvm::raw_string_ostream os(text);
  if (auto name = dyn_cast<NameLoc>(loc))
    os << name.getName().getValue();
  else if (auto file = dyn_cast<FileLineColLoc>(loc))
    os << file.getFilename().getValue() << ":" << file.getLine() << ":"
       << file.getColumn();
  return text;
}

LogicalResult PlanEmitter::emitProgram(func::FuncOp func) {
  // A pipeline stage's program (tp-pipeline-stages' @<name>_stage<s>) keeps
  // the name every stage shares and says which stage runs it.
  // Of a stage cut's own program, @<name>_stage<s>_cut<c> (c its first cut).
  std::string programName = func.getSymName().str();
  int32_t stage = -1;
  SmallVector<int64_t> cuts = {0};
  if (auto list = func->getAttrOfType<DenseI64ArrayAttr>(
          TPDialect::CutsAttrHelper::getNameStr()))
    cuts.assign(list.asArrayRef().begin(), list.asArrayRef().end());
  if (cuts.empty() || llvm::any_of(cuts, [](int64_t c) { return c < 0; }))
    return func.emitOpError() << "plan: tp.cuts must list cut indices";
  if (auto stageAttr = func->getAttrOfType<IntegerAttr>(
          TPDialect::StageAttrHelper::getNameStr())) {
    stage = int32_t(stageAttr.getInt());
    if (cuts.front() != 0) {
      std::string cutSuffix = "_cut" + std::to_string(cuts.front());
      if (!StringRef(programName).ends_with(cutSuffix))
        return func.emitOpError()
               << "plan: the program of cut " << cuts.front()
               << " must be named '<name>_stage<s>" << cutSuffix << "'";
      programName.resize(programName.size() - cutSuffix.size());
    }
    std::string suffix = "_stage" + std::to_string(stage);
    if (!StringRef(programName).ends_with(suffix))
      return func.emitOpError()
             << "plan: the program of stage " << stage << " must be named '<"
             << "name>" << suffix << "'";
    programName.resize(programName.size() - suffix.size());
  }
  auto arenaAttr = func->getAttrOfType<IntegerAttr>(
      TPDialect::ArenaBytesAttrHelper::getNameStr());
  if (!arenaAttr)
    return func.emitOpError()
           << "plan: run tp-plan-memory before emitting a plan";
  if (!func.getBody().hasOneBlock())
    return func.emitOpError() << "plan: expected a single block";
  Block &block = func.getBody().front();
  TensorTable table;
  auto add = [&](Value value, Operation *where, fb::Storage storage,
                 uint64_t offset, uint32_t index) -> LogicalResult {
    FailureOr<fb::DType> dtype = dtypeOf(where, value.getType());
    FailureOr<SmallVector<int32_t>> rebalanceDims = rebalanceDimsOf(value);
    if (failed(dtype) || failed(rebalanceDims))
      return failure();
    table.ids[value] = table.entries.size();
    table.entries.push_back(
        {*dtype,
         SmallVector<int64_t>(
             cast<RankedTensorType>(value.getType()).getShape()),
         storage, offset, index, std::move(*rebalanceDims)});
    return success();
  };

  // Arguments: parameters and data inputs.
  std::vector<flatbuffers::Offset<fb::Input>> inputs;
  for (BlockArgument arg : block.getArguments()) {
    unsigned idx = arg.getArgNumber();
    if (func.getArgAttr(idx, TPDialect::ParamAttrHelper::getNameStr())) {
      // A parameter, or one of its AdamW moments.
      auto state = func.getArgAttrOfType<StringAttr>(
          idx, TPDialect::StateAttrHelper::getNameStr());
      fb::Storage storage = fb::Storage::Param;
      if (state && state.getValue() == "exp_avg")
        storage = fb::Storage::ExpAvg;
      else if (state && state.getValue() == "exp_avg_sq")
        storage = fb::Storage::ExpAvgSq;
      else if (state)
        return func.emitOpError()
               << "plan: unknown optimizer state '" << state.getValue() << "'";
      FailureOr<uint32_t> param = paramIndex(func, idx);
      if (failed(param) || failed(add(arg, func, storage, 0, *param)))
        return failure();
      // A stage's arguments are the parameters it holds and updates.
      if (stage >= 0)
        for (int64_t cut : cuts) {
          SmallVector<int32_t> &owners = params[*param].cutStages;
          if (owners.size() <= size_t(cut))
            owners.resize(cut + 1, -1);
          int32_t &owner = owners[cut];
          if (owner >= 0 && owner != stage)
            return func.emitOpError()
                   << "plan: parameter '" << params[*param].name
                   << "' is held by stages " << owner << " and " << stage
                   << (cut ? " under cut " + std::to_string(cut) : "");
          owner = stage;
          if (cut == 0)
            params[*param].stage = stage;
        }
      continue;
    }
    if (auto cache = func.getArgAttrOfType<StringAttr>(
            idx, TPDialect::CacheAttrHelper::getNameStr())) {
      // One cache per name, shared by every program that names it.
      auto type = cast<RankedTensorType>(arg.getType());
      FailureOr<fb::DType> dtype = dtypeOf(func, type);
      if (failed(dtype))
        return failure();
      auto [it, inserted] =
          cacheByName.try_emplace(cache.getValue(), caches.size());
      if (inserted)
        caches.push_back(
            {cache.str(), *dtype, SmallVector<int64_t>(type.getShape())});
      else if (caches[it->second].shape != type.getShape() ||
               caches[it->second].dtype != *dtype)
        return func.emitOpError()
               << "plan: KV cache '" << cache.getValue() << "' is " << type
               << " here but another type elsewhere";
      if (failed(add(arg, func, fb::Storage::Cache, 0, it->second)))
        return failure();
      continue;
    }
    auto role = func.getArgAttrOfType<StringAttr>(
        idx, TPDialect::InputAttrHelper::getNameStr());
    fb::InputKind kind;
    if (role && role.getValue() == "tokens")
      kind = fb::InputKind::Tokens;
    else if (role && role.getValue() == "targets")
      kind = fb::InputKind::Targets;
    else if (role && role.getValue() == "step")
      kind = fb::InputKind::Step;
    else if (role && role.getValue() == "hyperparameters")
      kind = fb::InputKind::Hyperparameters;
    else if (role && role.getValue() == "positions")
      kind = fb::InputKind::Positions;
    else if (role && role.getValue() == "cache_map")
      kind = fb::InputKind::CacheMap;
    else if (role && role.getValue() == "cache_rows")
      kind = fb::InputKind::CacheRows;
    else if (role && role.getValue() == "dense")
      kind = fb::InputKind::Dense;
    else
      return func.emitOpError()
             << "plan: argument #" << idx
             << " needs tp.param, tp.cache or tp.input = \"tokens\" | "
                "\"targets\" | \"positions\" | \"step\" | "
                "\"hyperparameters\" | \"cache_map\" | \"cache_rows\" | "
                "\"dense\"";
    // A cache's inputs name their table, a parameter seen before them.
    uint32_t cachedParam = 0;
    if (kind == fb::InputKind::CacheMap || kind == fb::InputKind::CacheRows) {
      auto tableName = func.getArgAttrOfType<StringAttr>(
          idx, TPDialect::CacheOfAttrHelper::getNameStr());
      auto it = tableName ? paramByName.find(tableName.getValue())
                          : paramByName.end();
      if (it == paramByName.end() || params[it->second].cacheRows == 0)
        return func.emitOpError()
               << "plan: argument #" << idx
               << " needs tp.cache_of naming a cached table before it";
      cachedParam = it->second;
    }
    uint32_t inputIdx = inputs.size();
    if (failed(add(arg, func, fb::Storage::Input, 0, inputIdx)))
      return failure();
    // Tokens and targets split over the grid (a batch split): each rank is
    // fed its block.
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Axes>>>
        split = 0;
    if (auto layout = func.getArgAttrOfType<DistAttr>(
            idx, TPDialect::LayoutAttrHelper::getNameStr())) {
      std::vector<flatbuffers::Offset<fb::Axes>> axes;
      for (int64_t d = 0; d < int64_t(layout.getSplit().size()); ++d)
        axes.push_back(fb::CreateAxes(
            builder, builder.CreateVector(layout.getSplitAxes(d).vec())));
      split = builder.CreateVector(axes);
    }
    inputs.push_back(
        fb::CreateInput(builder, kind, table.ids[arg], split, cachedParam));
  }

  // Steps.
  std::vector<flatbuffers::Offset<fb::Step>> steps;
  for (Operation &op : block.without_terminator()) {
    FailureOr<fb::OpKind> kind = opKindOf(&op);
    if (failed(kind))
      return failure();
    auto offsets = op.getAttrOfType<DenseI64ArrayAttr>(
        TPDialect::BufferOffsetsAttrHelper::getNameStr());
    if (!offsets || offsets.size() != int64_t(op.getNumResults()))
      return op.emitOpError()
             << "plan: missing tp.buffer_offsets; run tp-plan-memory";
    std::vector<uint32_t> operands, results;
    for (Value operand : op.getOperands())
      operands.push_back(table.ids.at(operand));
    for (auto [result, offset] :
         llvm::zip_equal(op.getResults(), offsets.asArrayRef())) {
      LogicalResult added = success();
      if (offset >= 0) {
        added = add(result, &op, fb::Storage::Arena, offset, 0);
      } else {
        // A view of a parameter or input (same storage, new shape), or an
        // update of a parameter or moment in place.
        auto alias = dyn_cast<StorageAliasOpInterface>(op);
        std::optional<unsigned> operand =
            alias ? alias.getStorageOperand(result.getResultNumber())
                  : std::nullopt;
        if (!operand)
          return op.emitOpError()
                 << "plan: only a view or an in-place update may alias";
        Value aliased = op.getOperand(*operand);
        const TensorTable::Entry source = table.entries[table.ids.at(aliased)];
        added = add(result, &op, source.storage, source.offset, source.index);
      }
      if (failed(added))
        return failure();
      results.push_back(table.ids[result]);
    }

    FailureOr<StepFields> fields = stepFieldsOf(op);
    if (failed(fields))
      return failure();
    auto operandsVec = builder.CreateVector(operands);
    auto resultsVec = builder.CreateVector(results);
    flatbuffers::Offset<flatbuffers::Vector<int64_t>> ints;
    if (fields->ints)
      ints = builder.CreateVector(fields->ints->data(), fields->ints->size());
    auto location = builder.CreateString(locationString(op.getLoc()));
    fb::StepBuilder step(builder);
    step.add_kind(*kind);
    step.add_operands(operandsVec);
    step.add_results(resultsVec);
    if (!ints.IsNull())
      step.add_ints(ints);
    step.add_location(location);
    for (auto &set : fields->setters)
      set(step);
    steps.push_back(step.Finish());
  }

  std::vector<uint32_t> results;
  for (Value result : block.getTerminator()->getOperands())
    results.push_back(table.ids.at(result));

  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  for (const TensorTable::Entry &entry : table.entries) {
    auto shape = builder.CreateVector(entry.shape.data(), entry.shape.size());
    auto rebalanceDims = entry.rebalanceDims.empty()
                             ? 0
                             : builder.CreateVector(entry.rebalanceDims.data(),
                                                    entry.rebalanceDims.size());
    tensors.push_back(fb::CreateTensor(builder, entry.dtype, shape,
                                       entry.storage, entry.offset, entry.index,
                                       rebalanceDims));
  }
  std::vector<flatbuffers::Offset<flatbuffers::String>> resultNames;
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    std::string name = "result" + std::to_string(i);
    if (auto output = func.getResultAttrOfType<StringAttr>(
            i, TPDialect::OutputAttrHelper::getNameStr()))
      name = output.str();
    else if (auto grad = func.getResultAttrOfType<StringAttr>(
                 i, TPDialect::GradOfAttrHelper::getNameStr()))
      name = grad.str();
    else if (func.getResultAttr(i, TPDialect::UpdatesAttrHelper::getNameStr()))
      name = "update";
    resultNames.push_back(builder.CreateString(name));
  }
  programs.push_back(fb::CreateProgram(
      builder, builder.CreateString(programName), builder.CreateVector(tensors),
      builder.CreateVector(inputs), builder.CreateVector(steps),
      builder.CreateVector(results), arenaAttr.getInt(),
      builder.CreateVector(resultNames), stage,
      cuts.size() == 1 && cuts.front() == 0
          ? 0
          : builder.CreateVector(
                std::vector<uint32_t>(cuts.begin(), cuts.end()))));
  return success();
}

LogicalResult PlanEmitter::emit(llvm::raw_ostream &os) {
  // The per-rank program's grid, as tp-partition recorded it.
  // The per-rank program: no value carries a layout any more.
  WalkResult global = module.walk([](Operation *op) {
    auto hasLayout = [](TypeRange types) {
      return llvm::any_of(types,
                          [](Type type) { return bool(getDistLayout(type)); });
    };
    auto func = dyn_cast<func::FuncOp>(op);
    bool global = hasLayout(op->getResultTypes()) ||
                  (func && hasLayout(func.getArgumentTypes()));
    return global ? WalkResult::interrupt() : WalkResult::advance();
  });
  if (global.wasInterrupted())
    return module.emitError()
           << "plan: run tp-partition before emitting a plan";
  // A module no memory planner ran on (one line, not every function's
  // signature as the per-function check would print).
  if (llvm::none_of(module.getOps<func::FuncOp>(), [](func::FuncOp func) {
        return func->hasAttr(TPDialect::ArenaBytesAttrHelper::getNameStr());
      }))
    return module.emitError()
           << "plan: run tp-plan-memory before emitting a plan: no function "
              "has planned memory (tp-explain, and tp-pipeline with "
              "compile-choice=false, leave the module uncompiled: write "
              ".mlir)";
  // Rebalance points, in module order: tensors and parameters name them by
  // index.
  for (RebalancePointOp point : module.getOps<RebalancePointOp>()) {
    pointByName[point.getSymName()] = points.size();
    points.push_back(point);
  }
  // The grid the program runs on (none: one rank).
  auto grids = llvm::to_vector(module.getOps<GridOp>());
  if (grids.size() > 1)
    return grids[1].emitOpError() << "plan: a plan runs on one grid";
  std::vector<int64_t> grid = {1};
  if (!grids.empty())
    grid = grids.front().getShape().vec();
  for (auto func : module.getOps<func::FuncOp>())
    if (!func.isExternal() && failed(emitProgram(func)))
      return failure();
  if (programs.empty())
    return module.emitError() << "plan: the module has no function to emit";

  auto stringAttr = [&](StringRef name) {
    auto attr = module->getAttrOfType<StringAttr>(name);
    return builder.CreateString(attr ? attr.getValue().str() : "");
  };
  auto modelType = stringAttr(TPDialect::ModelTypeAttrHelper::getNameStr());
  auto hfConfig = stringAttr(TPDialect::HfConfigAttrHelper::getNameStr());
  flatbuffers::Offset<flatbuffers::Vector<int64_t>> eosTokenIds;
  if (auto ids = module->getAttrOfType<DenseI64ArrayAttr>(
          TPDialect::EosTokenIdsAttrHelper::getNameStr()))
    eosTokenIds = builder.CreateVector(ids.asArrayRef().data(), ids.size());
  FailureOr<flatbuffers::Offset<fb::Pipeline>> pipeline = buildPipeline();
  if (failed(pipeline))
    return failure();
  std::vector<flatbuffers::Offset<fb::Param>> paramTable;
  for (const ParamInfo &param : params)
    paramTable.push_back(buildParam(param));
  std::vector<flatbuffers::Offset<fb::RebalancePoint>> pointTable;
  for (RebalancePointOp point : points)
    pointTable.push_back(fb::CreateRebalancePoint(
        builder, builder.CreateString(point.getSymName().str()),
        point.getAxis(), point.getBlocks(), point.getCapacity()));
  std::vector<flatbuffers::Offset<fb::Cache>> cacheTable;
  for (const CacheInfo &cache : caches)
    cacheTable.push_back(fb::CreateCache(
        builder, builder.CreateString(cache.name), cache.dtype,
        builder.CreateVector(cache.shape.data(), cache.shape.size())));
  auto plan = fb::CreatePlan(
      builder, kPlanVersionMajor, kPlanVersionMinor,
      builder.CreateString("tpc-opt"), builder.CreateVector(grid), modelType,
      hfConfig, builder.CreateVector(paramTable),
      builder.CreateVector(programs), &kUnsealed,
      pointTable.empty() ? 0 : builder.CreateVector(pointTable),
      cacheTable.empty() ? 0 : builder.CreateVector(cacheTable), eosTokenIds,
      *pipeline);
  fb::FinishPlanBuffer(builder, plan);
  sealChecksum(builder.GetBufferPointer(), builder.GetSize());
  os.write(reinterpret_cast<const char *>(builder.GetBufferPointer()),
           builder.GetSize());
  return success();
}

LogicalResult mlir::tp::translateModuleToPlan(ModuleOp module,
                                              llvm::raw_ostream &os) {
  return PlanEmitter(module).emit(os);
}
