//===- DlrmImporter.cpp - DLRM config.json -> tp dialect ------------------===//

#include "dlrm/DlrmImporter.h"

#include "ConfigReader.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Verifier.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Support/InputFiles.h"
#include "llvm/Support/FormatVariadic.h"
#include <cmath>
#include <limits>
#include <numeric>

using namespace mlir;
using namespace tpc::frontend;
using llvm::formatv;

int64_t DlrmConfig::totalRows() const {
  return std::accumulate(tableRows.begin(), tableRows.end(), int64_t(0));
}

int64_t DlrmConfig::rowOffset(int64_t table) const {
  return std::accumulate(tableRows.begin(), tableRows.begin() + table,
                         int64_t(0));
}

bool tpc::frontend::isDlrmConfig(const llvm::json::Object &config) {
  std::optional<llvm::StringRef> type = config.getString("model_type");
  return type && *type == "dlrm";
}

llvm::Expected<DlrmConfig>
tpc::frontend::parseDlrmConfig(llvm::StringRef json) {
  llvm::Expected<llvm::json::Value> parsed = parseConfigObject(json);
  if (!parsed)
    return parsed.takeError();
  const llvm::json::Object &object = *parsed->getAsObject();
  if (!isDlrmConfig(object))
    return configError("'model_type' must be \"dlrm\"");
  ConfigReader reader(object);
  DlrmConfig config;
  config.json = json.str();
  config.denseFeatures = reader.positiveInt("dense_in_features", std::nullopt);
  config.embeddingDim = reader.positiveInt("embedding_dim", std::nullopt);
  config.tableRows = reader.positiveIntList("num_embeddings_per_feature");
  config.denseLayers = reader.positiveIntList("dense_arch_layer_sizes");
  config.overLayers = reader.positiveIntList("over_arch_layer_sizes");
  config.bagSize = reader.positiveInt("bag_size", 1);
  config.initializerRange = reader.positiveNumber("initializer_range", 0.01);
  // TorchRec's names for what tpc does not implement.
  for (llvm::StringRef unsupported :
       {"interaction_type", "pooling", "embedding_dims"})
    if (reader.has(unsupported))
      reader.fail(formatv("unsupported field '{0}' (tpc's DLRM has one "
                          "embedding_dim, sum pooling and the dot "
                          "interaction)",
                          unsupported));
  if (reader.failed())
    return reader.takeError();
  if (config.numTables() > kMaxSparseFeatures)
    return configError(formatv("'num_embeddings_per_feature' lists {0} "
                               "tables, more than the limit of {1}",
                               config.numTables(), kMaxSparseFeatures));
  if (config.denseLayers.back() != config.embeddingDim)
    return configError(formatv("the last of 'dense_arch_layer_sizes' ({0}) "
                               "must be 'embedding_dim' ({1}): the dense "
                               "features join the interaction as one more "
                               "embedding",
                               config.denseLayers.back(), config.embeddingDim));
  if (config.overLayers.back() != 1)
    return configError(formatv("the last of 'over_arch_layer_sizes' ({0}) "
                               "must be 1, the click logit",
                               config.overLayers.back()));
  // Each size is at most 2^40 and there are at most kMaxSparseFeatures, so
  // the sum cannot overflow.
  const int64_t rows = config.totalRows();
  if (rows > std::numeric_limits<int32_t>::max())
    return configError(formatv("the tables of 'num_embeddings_per_feature' "
                               "have {0} rows together, more than the i32 "
                               "ids of the concatenated table reach ({1})",
                               rows, std::numeric_limits<int32_t>::max()));
  if (failed(mlir::tp::checkedNumElements({rows, config.embeddingDim})))
    return configError(formatv("the concatenated table ({0} x {1}) would have "
                               "more than 2^40 elements, the size limit of "
                               "one tensor",
                               rows, config.embeddingDim));
  return config;
}

namespace {
/// Emits @forward or @loss of a DLRM. Parameters are requested by name as
/// the body is built; each becomes a block argument.
class DlrmEmitter {
public:
  DlrmEmitter(MLIRContext &context, const DlrmConfig &config, int64_t batch)
      : b(&context), config(config), batch(batch), f32(b.getF32Type()) {}

  func::FuncOp build(ModuleOp module, StringRef name, bool withLoss);

private:
  struct ParamSpec {
    std::string name;
    bool zeros;
    double stddev;
  };

  RankedTensorType tensor(ArrayRef<int64_t> shape, Type element = {}) {
    return RankedTensorType::get(shape, element ? element : f32);
  }
  ArrayRef<int64_t> shape(Value v) {
    return cast<RankedTensorType>(v.getType()).getShape();
  }
  void setLoc(StringRef name) { loc = NameLoc::get(b.getStringAttr(name)); }
  Value param(const std::string &name, ArrayRef<int64_t> shape, bool zeros,
              double stddev) {
    params.push_back({name, zeros, stddev});
    return body->insertArgument(params.size() - 1, tensor(shape),
                                NameLoc::get(b.getStringAttr(name)));
  }
  /// `input` placed at `offsets` in a zero tensor of shape `into`: with
  /// tp.add, the concatenation (exact: the rest adds zeros), whose gradient
  /// is a slice.
  Value place(Value input, ArrayRef<int64_t> into, ArrayRef<int64_t> offsets) {
    return tp::PadOp::create(b, loc, tensor(into), input,
                             b.getDenseI64ArrayAttr(offsets));
  }
  Value add(Value lhs, Value rhs) {
    return tp::AddOp::create(b, loc, lhs, rhs);
  }
  /// nn.Linear layers ([out, in] weights, used with transpose_rhs), ReLU
  /// after each but the last when `lastLinear`; each a layer.
  Value mlp(Value x, StringRef prefix, ArrayRef<int64_t> widths,
            bool lastLinear);
  Operation *lastOp() { return body->empty() ? nullptr : &body->back(); }
  /// Tags the ops emitted after `start` (null: from the beginning) with the
  /// next `tp.layer`: the unit of recomputation and of pipeline stages.
  void markLayer(Operation *start) {
    auto it = start ? std::next(start->getIterator()) : body->begin();
    for (Operation &op : llvm::make_range(it, body->end()))
      op.setAttr(tp::TPDialect::LayerAttrHelper::getNameStr(),
                 b.getI64IntegerAttr(nextLayer));
    ++nextLayer;
  }

  OpBuilder b;
  const DlrmConfig &config;
  int64_t batch;
  Type f32;
  Block *body = nullptr;
  Location loc = UnknownLoc::get(b.getContext());
  SmallVector<ParamSpec> params;
  int64_t nextLayer = 0;
};
} // namespace

Value DlrmEmitter::mlp(Value x, StringRef prefix, ArrayRef<int64_t> widths,
                       bool lastLinear) {
  for (auto [layer, out] : llvm::enumerate(widths)) {
    Operation *start = lastOp();
    const int64_t in = shape(x).back();
    std::string name = (prefix + "." + std::to_string(layer)).str();
    setLoc(name);
    // nn.Linear's default init draws U(-1/sqrt(in), 1/sqrt(in)): this std.
    Value w =
        param(name + ".weight", {out, in}, false, 1.0 / std::sqrt(3.0 * in));
    Value bias = param(name + ".bias", {out}, true, 0.0);
    x = add(tp::MatmulOp::create(b, loc, x, w, /*transpose_lhs=*/false,
                                 /*transpose_rhs=*/true, llvm::APFloat(1.0),
                                 /*precision=*/nullptr),
            bias);
    if (!lastLinear || layer + 1 < widths.size())
      x = tp::ReluOp::create(b, loc, x);
    markLayer(start);
  }
  return x;
}

func::FuncOp DlrmEmitter::build(ModuleOp module, StringRef name,
                                bool withLoss) {
  params.clear();
  nextLayer = 0;
  const int64_t tables = config.numTables(), bag = config.bagSize,
                dim = config.embeddingDim, features = tables + 1,
                pairs = features * (features - 1) / 2;
  b.setInsertionPointToEnd(module.getBody());
  auto func = func::FuncOp::create(b, loc, name, b.getFunctionType({}, {}));
  body = func.addEntryBlock();
  Type i32 = b.getI32Type();
  Value ids = body->addArgument(tensor({batch, tables * bag}, i32),
                                NameLoc::get(b.getStringAttr("tokens")));
  Value labels;
  if (withLoss)
    labels = body->addArgument(tensor({batch, 1}, i32),
                               NameLoc::get(b.getStringAttr("targets")));
  // [batch, 1, features]: one position per sample, as every activation.
  Value dense = body->addArgument(tensor({batch, 1, config.denseFeatures}),
                                  NameLoc::get(b.getStringAttr("dense")));
  b.setInsertionPointToEnd(body);

  Value bottom = mlp(dense, "dense_arch", config.denseLayers,
                     /*lastLinear=*/false); // [B, 1, D]

  // The sparse features and the interaction: one layer.
  Operation *sparseStart = lastOp();
  setLoc("sparse_arch");
  Value table = param("sparse_arch.embedding.weight", {config.totalRows(), dim},
                      false, config.initializerRange);
  Value rows = tp::EmbeddingOp::create(b, loc, table, ids, Value());
  Value pooled;
  if (bag == 1) {
    pooled = rows; // [B, T, D]
  } else {
    Value bags =
        tp::ReshapeOp::create(b, loc, tensor({batch, tables, bag, dim}), rows);
    pooled = tp::ReduceSumOp::create(b, loc, bags, b.getDenseI64ArrayAttr({2}));
  }

  // The dot interaction: Z = [bottom; pooled] ([B, F, D]), Z Z^T, and its
  // strictly upper triangle row by row (TorchRec's triu_indices(F, F, 1)
  // order), after the dense output.
  setLoc("interaction");
  Value z = add(place(bottom, {batch, features, dim}, {0, 0, 0}),
                place(pooled, {batch, features, dim}, {0, 1, 0}));
  Value gram = tp::MatmulOp::create(b, loc, z, z, /*transpose_lhs=*/false,
                                    /*transpose_rhs=*/true, llvm::APFloat(1.0),
                                    /*precision=*/nullptr);
  Value joined = place(bottom, {batch, 1, dim + pairs}, {0, 0, 0});
  int64_t column = dim;
  for (int64_t row = 0; row + 1 < features; ++row) {
    const int64_t count = features - 1 - row;
    Value part = tp::SliceOp::create(b, loc, tensor({batch, 1, count}), gram,
                                     b.getDenseI64ArrayAttr({0, row, row + 1}));
    joined = add(joined, place(part, {batch, 1, dim + pairs}, {0, 0, column}));
    column += count;
  }
  markLayer(sparseStart);

  Value logits = mlp(joined, "over_arch", config.overLayers,
                     /*lastLinear=*/true); // [B, 1, 1]
  Value result = logits;
  if (withLoss) {
    // Binary cross-entropy as the two-class cross-entropy of logits [0, z]:
    // log(1 + e^z) - y z, BCEWithLogits exactly.
    setLoc("loss");
    Value twoClass = place(logits, {batch, 1, 2}, {0, 0, 1});
    result = tp::CrossEntropyOp::create(b, loc, twoClass, labels);
  }
  func::ReturnOp::create(b, loc, result);
  func.setFunctionType(
      b.getFunctionType(body->getArgumentTypes(), result.getType()));

  auto named = [&](StringRef name, Attribute value) {
    return b.getNamedAttr(name, value);
  };
  SmallVector<DictionaryAttr> argDicts;
  for (const ParamSpec &spec : params) {
    SmallVector<NamedAttribute> attrs = {
        named(tp::TPDialect::ParamAttrHelper::getNameStr(),
              b.getStringAttr(spec.name)),
        named(tp::TPDialect::InitAttrHelper::getNameStr(),
              b.getStringAttr(spec.zeros ? "zeros" : "normal"))};
    if (!spec.zeros)
      attrs.push_back(named(tp::TPDialect::InitStdAttrHelper::getNameStr(),
                            b.getF64FloatAttr(spec.stddev)));
    argDicts.push_back(b.getDictionaryAttr(attrs));
  }
  auto input = [&](StringRef role) {
    argDicts.push_back(b.getDictionaryAttr(named(
        tp::TPDialect::InputAttrHelper::getNameStr(), b.getStringAttr(role))));
  };
  input("tokens");
  if (withLoss)
    input("targets");
  input("dense");
  func.setAllArgAttrs(argDicts);
  SmallVector<DictionaryAttr> resultAttrs = {b.getDictionaryAttr(
      named(tp::TPDialect::OutputAttrHelper::getNameStr(),
            b.getStringAttr(withLoss ? "loss" : "logits")))};
  func.setAllResultAttrs(resultAttrs);
  return func;
}

llvm::Expected<OwningOpRef<ModuleOp>>
tpc::frontend::importDlrm(MLIRContext &context, const DlrmConfig &config,
                          int64_t batch) {
  if (batch <= 0)
    return configError(formatv("--batch must be positive, got {0}", batch));
  const int64_t features = config.numTables() + 1;
  const int64_t widest = std::max(
      *llvm::max_element(config.denseLayers),
      std::max(*llvm::max_element(config.overLayers), config.denseFeatures));
  for (auto [what, factors] :
       {std::pair<const char *, SmallVector<int64_t>>{
            "the looked-up rows (--batch x ids per sample x embedding_dim)",
            {batch, config.numTables() * config.bagSize, config.embeddingDim}},
        {"the interaction (--batch x features x features)",
         {batch, features, features}},
        {"the MLP activations (--batch x the widest layer)", {batch, widest}}})
    if (failed(mlir::tp::checkedNumElements(factors)))
      return configError(formatv("{0} would have more than 2^40 elements, "
                                 "the size limit of one tensor",
                                 what));
  context.loadDialect<tp::TPDialect, func::FuncDialect>();
  OpBuilder b(&context);
  OwningOpRef<ModuleOp> module = ModuleOp::create(b.getUnknownLoc());
  (*module)->setAttr(tp::TPDialect::ModelTypeAttrHelper::getNameStr(),
                     b.getStringAttr("dlrm"));
  (*module)->setAttr(tp::TPDialect::HfConfigAttrHelper::getNameStr(),
                     b.getStringAttr(config.json));
  DlrmEmitter emitter(context, config, batch);
  emitter.build(*module, "forward", /*withLoss=*/false);
  emitter.build(*module, "loss", /*withLoss=*/true);
  if (failed(verify(*module)))
    return configError("internal error: the emitted module does not verify");
  return module;
}
