//===- TransformerImporter.cpp - HF config.json -> tp dialect -------------===//

#include "transformer/TransformerImporter.h"

#include "ConfigReader.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Verifier.h"
#include "tpc/Dialect/TP/IR/TPOps.h"
#include "tpc/Support/InputFiles.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include <cmath>

using namespace mlir;
using namespace tpc::frontend;
using llvm::formatv;

//===----------------------------------------------------------------------===//
// config.json
//===----------------------------------------------------------------------===//

using tpc::frontend::configError;
using tpc::frontend::ConfigReader;

static void readGPT2(ConfigReader &reader, TransformerConfig &config) {
  config.vocabSize = reader.positiveInt("vocab_size", std::nullopt);
  config.hiddenSize = reader.positiveInt("n_embd", std::nullopt);
  config.numLayers = reader.positiveInt("n_layer", std::nullopt);
  config.numHeads = reader.positiveInt("n_head", std::nullopt);
  config.numKeyValueHeads = config.numHeads;
  config.intermediateSize =
      reader.positiveInt("n_inner", 4 * config.hiddenSize);
  config.maxPositions = reader.positiveInt(
      "n_positions", reader.positiveInt("n_ctx", std::optional<int64_t>(1024)));
  config.normEpsilon = reader.positiveNumber("layer_norm_epsilon", 1e-5);
  config.initializerRange = reader.positiveNumber("initializer_range", 0.02);
  config.tieWordEmbeddings = reader.boolean("tie_word_embeddings", true);
  config.scaleAttnWeights = reader.boolean("scale_attn_weights", true);
  config.attentionBias = config.mlpBias = true;
  config.ropeTheta = 0.0;
  std::optional<llvm::StringRef> activation =
      reader.string("activation_function");
  if (activation && *activation != "gelu_new" &&
      *activation != "gelu_pytorch_tanh")
    reader.fail(formatv("unsupported 'activation_function' \"{0}\" (tpc "
                        "implements gelu_new, the tanh form)",
                        *activation));
  if (reader.boolean("scale_attn_by_inverse_layer_idx", false))
    reader.fail("unsupported 'scale_attn_by_inverse_layer_idx': true");
  if (reader.boolean("add_cross_attention", false))
    reader.fail("unsupported 'add_cross_attention': true");
  if (!reader.failed() && config.hiddenSize % config.numHeads != 0)
    reader.fail(formatv("'n_head' ({0}) does not divide 'n_embd' ({1})",
                        config.numHeads, config.hiddenSize));
  config.headDim = config.hiddenSize / config.numHeads;
}

static void readLlama(ConfigReader &reader, TransformerConfig &config) {
  config.vocabSize = reader.positiveInt("vocab_size", std::nullopt);
  config.hiddenSize = reader.positiveInt("hidden_size", std::nullopt);
  config.numLayers = reader.positiveInt("num_hidden_layers", std::nullopt);
  config.numHeads = reader.positiveInt("num_attention_heads", std::nullopt);
  config.numKeyValueHeads =
      reader.positiveInt("num_key_value_heads", config.numHeads);
  config.intermediateSize =
      reader.positiveInt("intermediate_size", std::nullopt);
  config.maxPositions = reader.positiveInt("max_position_embeddings", 2048);
  config.normEpsilon = reader.positiveNumber("rms_norm_eps", 1e-6);
  config.ropeTheta = reader.positiveNumber("rope_theta", 10000.0);
  config.initializerRange = reader.positiveNumber("initializer_range", 0.02);
  config.tieWordEmbeddings = reader.boolean("tie_word_embeddings", false);
  config.attentionBias = reader.boolean("attention_bias", false);
  config.mlpBias = reader.boolean("mlp_bias", false);
  config.scaleAttnWeights = true;
  std::optional<llvm::StringRef> activation = reader.string("hidden_act");
  if (activation && *activation != "silu")
    reader.fail(formatv(
        "unsupported 'hidden_act' \"{0}\" (LLaMA's MLP is SwiGLU: silu)",
        *activation));
  if (reader.has("rope_scaling"))
    reader.fail("unsupported 'rope_scaling' (only plain RoPE is implemented)");
  if (reader.failed())
    return;
  if (config.numHeads % config.numKeyValueHeads != 0)
    reader.fail(formatv("'num_key_value_heads' ({0}) does not divide "
                        "'num_attention_heads' ({1})",
                        config.numKeyValueHeads, config.numHeads));
  if (reader.has("head_dim")) {
    config.headDim = reader.positiveInt("head_dim", std::nullopt);
  } else if (config.hiddenSize % config.numHeads != 0) {
    reader.fail(formatv("'num_attention_heads' ({0}) does not divide "
                        "'hidden_size' ({1})",
                        config.numHeads, config.hiddenSize));
  } else {
    config.headDim = config.hiddenSize / config.numHeads;
  }
  if (!reader.failed() && config.headDim % 2 != 0)
    reader.fail(formatv("head dimension {0} must be even for rotary "
                        "embeddings",
                        config.headDim));
}

namespace {
/// A tensor the model will have: what it is, what its sizes are, and the
/// sizes as factors (so that checking the product cannot overflow).
struct SizedTensor {
  StringRef what;
  StringRef dims;
  SmallVector<int64_t> factors;
};
} // namespace

/// Fails, naming the first tensor that does not fit, when one has more than
/// kMaxTensorElements elements.
static llvm::Error checkSizes(ArrayRef<SizedTensor> tensors) {
  for (const SizedTensor &tensor : tensors)
    if (failed(tp::checkedNumElements(tensor.factors)))
      return configError(formatv(
          "{0} ({1} = {2:$[ x ]}) would have more than 2^40 = {3} "
          "elements, the size limit of one tensor",
          tensor.what, tensor.dims,
          llvm::make_range(tensor.factors.begin(), tensor.factors.end()),
          tp::kMaxTensorElements));
  return llvm::Error::success();
}

llvm::Expected<TransformerConfig> tpc::frontend::parseTransformerConfig(
    llvm::StringRef json, std::optional<llvm::StringRef> generationJson) {
  llvm::Expected<llvm::json::Value> parsed = parseConfigObject(json);
  if (!parsed)
    return parsed.takeError();
  ConfigReader reader(*parsed->getAsObject());
  TransformerConfig config{};
  config.json = json.str();
  std::optional<llvm::StringRef> modelType = reader.string("model_type");
  if (reader.failed())
    return reader.takeError();
  if (!modelType)
    return configError("missing field 'model_type'");
  if (*modelType == "gpt2") {
    config.kind = ModelKind::GPT2;
    readGPT2(reader, config);
  } else if (*modelType == "llama") {
    config.kind = ModelKind::Llama;
    readLlama(reader, config);
  } else {
    return configError(formatv("unsupported 'model_type' \"{0}\" (tpc "
                               "imports gpt2, llama and dlrm)",
                               *modelType));
  }
  std::optional<std::vector<int64_t>> eos = reader.tokenIds("eos_token_id");
  if (reader.failed())
    return reader.takeError();
  bool gpt2 = config.kind == ModelKind::GPT2;
  // What generate() stops at: generation_config.json wins over config.json,
  // and the config classes' defaults fill in (GPT2Config: 50256,
  // LlamaConfig: 2).
  if (generationJson) {
    llvm::Expected<llvm::json::Value> parsed =
        parseConfigObject(*generationJson);
    if (!parsed)
      return configError("generation_config.json: " +
                         llvm::toString(parsed.takeError()));
    ConfigReader generation(*parsed->getAsObject());
    std::optional<std::vector<int64_t>> ids =
        generation.tokenIds("eos_token_id");
    if (generation.failed())
      return configError("generation_config.json: " +
                         llvm::toString(generation.takeError()));
    if (ids)
      eos = ids;
  }
  if (!eos)
    eos = std::vector<int64_t>{gpt2 ? 50256 : 2};
  for (int64_t id : *eos)
    if (id < config.vocabSize && !llvm::is_contained(config.eosTokenIds, id))
      config.eosTokenIds.push_back(id);
  if (config.numLayers > kMaxLayers)
    return configError(formatv("'{0}' ({1}) is more than the limit of {2} "
                               "layers",
                               gpt2 ? "n_layer" : "num_hidden_layers",
                               config.numLayers, kMaxLayers));
  const int64_t h = config.hiddenSize;
  SmallVector<SizedTensor> weights = {
      {"the token embedding", "vocabulary x hidden", {config.vocabSize, h}},
      {"the position embedding",
       "positions x hidden",
       {config.maxPositions, h}},
      {"the query weight",
       "heads x head dim x hidden",
       {config.numHeads, config.headDim, h}},
      {"the MLP weight", "intermediate x hidden", {config.intermediateSize, h}},
  };
  if (gpt2)
    weights.push_back(
        {"the fused QKV weight", "3 x hidden x hidden", {3, h, h}});
  if (llvm::Error error = checkSizes(weights))
    return error;
  return config;
}

llvm::Expected<TransformerConfig>
tpc::frontend::readTransformerConfig(llvm::StringRef configPath) {
  auto buffer =
      tpc::readBoundedInput(configPath, kMaxConfigBytes, "config.json");
  if (!buffer)
    return buffer.takeError();
  return readTransformerConfig(configPath, (*buffer)->getBuffer());
}

llvm::Expected<TransformerConfig>
tpc::frontend::readTransformerConfig(llvm::StringRef configPath,
                                     llvm::StringRef configText) {
  // HF's from_pretrained reads generation_config.json beside config.json:
  // its eos_token_id is what generate() stops at.
  std::unique_ptr<llvm::MemoryBuffer> generation;
  llvm::SmallString<256> generationPath(llvm::sys::path::parent_path(
      configPath == "-" ? llvm::StringRef() : configPath));
  llvm::sys::path::append(generationPath, "generation_config.json");
  if (configPath != "-" && llvm::sys::fs::exists(generationPath)) {
    auto read = tpc::readBoundedInput(generationPath, kMaxConfigBytes,
                                      "generation config");
    if (!read)
      return read.takeError();
    generation = std::move(*read);
  }
  auto config = parseTransformerConfig(
      configText,
      generation ? std::optional((*generation).getBuffer()) : std::nullopt);
  if (!config)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   configPath + ": " +
                                       llvm::toString(config.takeError()));
  return config;
}

//===----------------------------------------------------------------------===//
// Module emission
//===----------------------------------------------------------------------===//

namespace {
enum class Init { Normal, Zeros, Ones };

struct ParamSpec {
  std::string name;
  SmallVector<int64_t> shape;
  Init init;
  double stddev;
  /// The shape in HF checkpoints when the IR views the parameter in another
  /// shape with the same row-major layout (empty: the same shape).
  SmallVector<int64_t> hfShape;
};

/// What a function of the model computes.
enum class FunctionRole {
  /// The logits of whole sequences.
  Forward,
  /// The mean cross-entropy against targets.
  Loss,
  /// The logits of a generation step's tokens at given positions, whose keys
  /// and values it writes into KV caches (arguments it returns updated) and
  /// whose attention reads them.
  Generate,
};

/// Emits one function of a transformer. Parameters are requested by name as
/// the body is built; each becomes a block argument.
class ModelEmitter {
public:
  ModelEmitter(MLIRContext &context, const TransformerConfig &config,
               int64_t batch)
      : b(&context), config(config), batch(batch), f32(b.getF32Type()) {}

  /// Builds func.func `name` over `tokens` tokens per sequence; a Generate
  /// function keeps caches of `cacheLength` positions.
  func::FuncOp build(ModuleOp module, StringRef name, FunctionRole role,
                     int64_t tokens, int64_t cacheLength = 0);

private:
  // Types and parameters.
  RankedTensorType tensor(ArrayRef<int64_t> shape, Type element = {}) {
    return RankedTensorType::get(shape, element ? element : f32);
  }
  Value param(const std::string &name, ArrayRef<int64_t> shape, Init init,
              double stddev = 0.0, ArrayRef<int64_t> hfShape = {});
  Value weight(const std::string &name, ArrayRef<int64_t> shape, double stddev,
               ArrayRef<int64_t> hfShape = {}) {
    return param(name, shape, Init::Normal, stddev, hfShape);
  }

  // Ops; the tp ops infer their result types.
  void setLoc(const std::string &name) {
    b.setInsertionPointToEnd(body);
    loc = NameLoc::get(b.getStringAttr(name));
  }
  ArrayRef<int64_t> shape(Value v) {
    return cast<RankedTensorType>(v.getType()).getShape();
  }
  Value matmul(Value lhs, Value rhs, bool transposeRhs);
  Value linear(Value x, const std::string &prefix, int64_t in, int64_t out,
               bool bias, double stddev);
  Value add(Value lhs, Value rhs) {
    return tp::AddOp::create(b, loc, lhs, rhs);
  }
  Value mul(Value lhs, Value rhs) {
    return tp::MulOp::create(b, loc, lhs, rhs);
  }
  Value reshape(Value v, ArrayRef<int64_t> newShape) {
    return tp::ReshapeOp::create(b, loc, tensor(newShape), v);
  }
  Value transpose(Value v, ArrayRef<int64_t> perm) {
    return tp::TransposeOp::create(b, loc, v, b.getDenseI64ArrayAttr(perm));
  }
  Value slice(Value v, ArrayRef<int64_t> offsets, ArrayRef<int64_t> sizes) {
    return tp::SliceOp::create(b, loc, tensor(sizes), v,
                               b.getDenseI64ArrayAttr(offsets));
  }
  Value attention(Value q, Value k, Value v, const std::string &layer);
  /// In a Generate function: `x` (keys or values) written into a new cache
  /// argument `name`, whose updated value the function returns.
  Value cached(Value x, const std::string &name);
  /// Tags every op emitted after `start` (null: from the beginning) with
  /// `tp.layer`, the unit that activation recomputation works on.
  void markLayer(int64_t layer, Operation *start);
  Operation *lastOp() { return body->empty() ? nullptr : &body->back(); }

  // Model bodies.
  Value gpt2(Value tokens);
  Value llama(Value tokens);

  OpBuilder b;
  const TransformerConfig &config;
  int64_t batch, seq = 0, cacheLength = 0;
  Type f32;
  Block *body = nullptr;
  /// A Generate function's positions argument (null otherwise), its caches
  /// (argument, name) and their updated values.
  Value positions;
  SmallVector<std::pair<BlockArgument, std::string>> caches;
  SmallVector<Value> cacheUpdates;
  Location loc = UnknownLoc::get(b.getContext());
  SmallVector<ParamSpec> params;
  llvm::StringMap<unsigned> paramIndex;
};
} // namespace

Value ModelEmitter::param(const std::string &name, ArrayRef<int64_t> shape,
                          Init init, double stddev, ArrayRef<int64_t> hfShape) {
  auto it = paramIndex.find(name);
  if (it != paramIndex.end())
    return body->getArgument(it->second);
  paramIndex[name] = params.size();
  params.push_back({name, SmallVector<int64_t>(shape), init, stddev,
                    SmallVector<int64_t>(hfShape)});
  return body->insertArgument(params.size() - 1, tensor(shape),
                              NameLoc::get(b.getStringAttr(name)));
}

Value ModelEmitter::matmul(Value lhs, Value rhs, bool transposeRhs) {
  return tp::MatmulOp::create(b, loc, lhs, rhs,
                              /*transpose_lhs=*/false, transposeRhs,
                              llvm::APFloat(1.0), /*precision=*/nullptr);
}

/// x * W (+ bias). GPT-2's Conv1D stores W as [in, out]; LLaMA's nn.Linear
/// as [out, in], used with transpose_rhs.
Value ModelEmitter::linear(Value x, const std::string &prefix, int64_t in,
                           int64_t out, bool bias, double stddev) {
  bool conv1d = config.kind == ModelKind::GPT2;
  Value w = conv1d ? weight(prefix + ".weight", {in, out}, stddev)
                   : weight(prefix + ".weight", {out, in}, stddev);
  Value y = matmul(x, w, /*transposeRhs=*/!conv1d);
  if (bias)
    y = add(y, param(prefix + ".bias", {out}, Init::Zeros));
  return y;
}

Value ModelEmitter::cached(Value x, const std::string &name) {
  SmallVector<int64_t> cacheShape(shape(x));
  cacheShape[cacheShape.size() - 2] = cacheLength;
  BlockArgument cache = body->addArgument(
      tensor(cacheShape), NameLoc::get(b.getStringAttr(name + ".cache")));
  caches.push_back({cache, name});
  Value updated = tp::CacheWriteOp::create(b, loc, cache, x, positions);
  cacheUpdates.push_back(updated);
  return updated;
}

/// Causal attention on q [..., Sq, d] against k, v [..., S, d] whose batch
/// dims broadcast against q's (grouped-query heads). In a Generate function
/// k and v join the layer's caches and q attends to every cached position
/// up to its own.
Value ModelEmitter::attention(Value q, Value k, Value v,
                              const std::string &layer) {
  const double alpha =
      config.scaleAttnWeights ? 1.0 / std::sqrt(double(config.headDim)) : 1.0;
  if (positions) {
    Value keys = cached(k, layer + ".key"),
          values = cached(v, layer + ".value");
    return tp::AttentionOp::create(
               b, loc, q, keys, values, b.getF64FloatAttr(alpha),
               /*causal=*/nullptr, /*precision=*/nullptr, positions)
        .getResult();
  }
  Value scores = matmul(q, k, /*transposeRhs=*/true);
  if (config.scaleAttnWeights)
    scores = tp::ScaleOp::create(b, loc, scores, b.getF64FloatAttr(alpha));
  auto probs = tp::SoftmaxOp::create(b, loc, scores);
  probs.setCausal(true);
  return matmul(probs, v, /*transposeRhs=*/false);
}

void ModelEmitter::markLayer(int64_t layer, Operation *start) {
  auto it = start ? std::next(start->getIterator()) : body->begin();
  for (Operation &op : llvm::make_range(it, body->end()))
    op.setAttr(tp::TPDialect::LayerAttrHelper::getNameStr(),
               b.getI64IntegerAttr(layer));
}

Value ModelEmitter::gpt2(Value tokens) {
  const int64_t h = config.hiddenSize, nh = config.numHeads, d = config.headDim,
                inner = config.intermediateSize;
  const double std = config.initializerRange;
  // GPT-2 scales residual projections by 1/sqrt(2 * n_layer) at init.
  const double projStd = std / std::sqrt(2.0 * config.numLayers);
  setLoc("transformer.embed");
  Value wte = weight("transformer.wte.weight", {config.vocabSize, h}, std);
  Value wpe = weight("transformer.wpe.weight", {config.maxPositions, h}, std);
  Value x = tp::EmbeddingOp::create(b, loc, wte, tokens, Value());
  // A generation step's tokens sit at their positions; a sequence's at 0..S.
  x = add(x, positions ? Value(tp::EmbeddingOp::create(b, loc, wpe, positions,
                                                       Value()))
                       : slice(wpe, {0, 0}, {seq, h}));
  for (int64_t layer = 0; layer < config.numLayers; ++layer) {
    Operation *layerStart = lastOp();
    std::string p = "transformer.h." + std::to_string(layer);
    auto layerNorm = [&](Value in, const std::string &name) -> Value {
      return tp::LayerNormOp::create(b, loc, in,
                                     param(name + ".weight", {h}, Init::Ones),
                                     param(name + ".bias", {h}, Init::Zeros),
                                     b.getF64FloatAttr(config.normEpsilon));
    };
    setLoc(p + ".attn");
    // c_attn's [h, 3h] weight is viewed as [h, 3, h] (and its bias as
    // [3, h]), the same bytes, so that q, k and v are slices along an unsplit
    // dimension and the heads a whole dimension that tensor parallelism can
    // split (Megatron splits the fused QKV by heads).
    Value attnIn = layerNorm(x, p + ".ln_1");
    Value qkvWeight =
        weight(p + ".attn.c_attn.weight", {h, 3, h}, std, {h, 3 * h});
    Value qkvBias = param(p + ".attn.c_attn.bias", {3, h}, Init::Zeros,
                          /*stddev=*/0.0, {3 * h});
    auto head = [&](int64_t which) {
      Value w = reshape(slice(qkvWeight, {0, which, 0}, {h, 1, h}), {h, h});
      Value bias = reshape(slice(qkvBias, {which, 0}, {1, h}), {h});
      Value part = reshape(add(matmul(attnIn, w, /*transposeRhs=*/false), bias),
                           {batch, seq, nh, d});
      return transpose(part, {0, 2, 1, 3});
    };
    Value ctx = attention(head(0), head(1), head(2), p);
    ctx = reshape(transpose(ctx, {0, 2, 1, 3}), {batch, seq, h});
    x = add(x, linear(ctx, p + ".attn.c_proj", h, h, true, projStd));
    setLoc(p + ".mlp");
    Value up =
        linear(layerNorm(x, p + ".ln_2"), p + ".mlp.c_fc", h, inner, true, std);
    Value act = tp::GeluOp::create(b, loc, up);
    x = add(x, linear(act, p + ".mlp.c_proj", inner, h, true, projStd));
    markLayer(layer, layerStart);
  }
  setLoc("transformer.ln_f");
  x = tp::LayerNormOp::create(b, loc, x,
                              param("transformer.ln_f.weight", {h}, Init::Ones),
                              param("transformer.ln_f.bias", {h}, Init::Zeros),
                              b.getF64FloatAttr(config.normEpsilon));
  setLoc("lm_head");
  Value head = config.tieWordEmbeddings
                   ? wte
                   : weight("lm_head.weight", {config.vocabSize, h}, std);
  return matmul(x, head, /*transposeRhs=*/true);
}

Value ModelEmitter::llama(Value tokens) {
  const int64_t h = config.hiddenSize, nh = config.numHeads,
                nkv = config.numKeyValueHeads, group = nh / nkv,
                d = config.headDim, inner = config.intermediateSize;
  const double std = config.initializerRange;
  setLoc("model.embed_tokens");
  Value embed = weight("model.embed_tokens.weight", {config.vocabSize, h}, std);
  Value x = tp::EmbeddingOp::create(b, loc, embed, tokens, Value());
  auto rmsNorm = [&](Value in, const std::string &name) -> Value {
    return tp::RmsNormOp::create(b, loc, in, param(name, {h}, Init::Ones),
                                 b.getF64FloatAttr(config.normEpsilon));
  };
  for (int64_t layer = 0; layer < config.numLayers; ++layer) {
    Operation *layerStart = lastOp();
    std::string p = "model.layers." + std::to_string(layer);
    setLoc(p + ".self_attn");
    Value hidden = rmsNorm(x, p + ".input_layernorm.weight");
    // Heads as [B, kv_heads, group, S, d]: query head j * group + r shares
    // key/value head j, as in HF's repeat_kv.
    auto heads = [&](const std::string &proj, int64_t count, int64_t perKv,
                     bool rotate) -> Value {
      Value y = linear(hidden, p + ".self_attn." + proj, h, count * d,
                       config.attentionBias, std);
      y = transpose(reshape(y, {batch, seq, nkv, perKv, d}), {0, 2, 3, 1, 4});
      if (!rotate)
        return y;
      return tp::RotaryOp::create(b, loc, y,
                                  b.getF64FloatAttr(config.ropeTheta),
                                  /*inverse=*/nullptr, positions);
    };
    Value q = heads("q_proj", nh, group, true);
    Value k = heads("k_proj", nkv, 1, true);
    Value v = heads("v_proj", nkv, 1, false);
    Value ctx = attention(q, k, v, p);
    ctx = reshape(transpose(ctx, {0, 3, 1, 2, 4}), {batch, seq, nh * d});
    x = add(x, linear(ctx, p + ".self_attn.o_proj", nh * d, h,
                      config.attentionBias, std));
    setLoc(p + ".mlp");
    hidden = rmsNorm(x, p + ".post_attention_layernorm.weight");
    Value gate =
        linear(hidden, p + ".mlp.gate_proj", h, inner, config.mlpBias, std);
    Value up =
        linear(hidden, p + ".mlp.up_proj", h, inner, config.mlpBias, std);
    Value act = mul(tp::SiluOp::create(b, loc, gate), up);
    x = add(x,
            linear(act, p + ".mlp.down_proj", inner, h, config.mlpBias, std));
    markLayer(layer, layerStart);
  }
  setLoc("model.norm");
  x = rmsNorm(x, "model.norm.weight");
  setLoc("lm_head");
  Value head = config.tieWordEmbeddings
                   ? embed
                   : weight("lm_head.weight", {config.vocabSize, h}, std);
  return matmul(x, head, /*transposeRhs=*/true);
}

func::FuncOp ModelEmitter::build(ModuleOp module, StringRef name,
                                 FunctionRole role, int64_t tokenCount,
                                 int64_t cacheLength) {
  params.clear();
  paramIndex.clear();
  caches.clear();
  cacheUpdates.clear();
  positions = nullptr;
  seq = tokenCount;
  this->cacheLength = cacheLength;
  const bool withLoss = role == FunctionRole::Loss;
  b.setInsertionPointToEnd(module.getBody());
  auto func = func::FuncOp::create(b, loc, name, b.getFunctionType({}, {}));
  body = func.addEntryBlock();
  Type i32 = b.getI32Type();
  Value tokens = body->addArgument(tensor({batch, seq}, i32),
                                   NameLoc::get(b.getStringAttr("tokens")));
  Value targets;
  if (withLoss)
    targets = body->addArgument(tensor({batch, seq}, i32),
                                NameLoc::get(b.getStringAttr("targets")));
  if (role == FunctionRole::Generate)
    positions = body->addArgument(tensor({batch, seq}, i32),
                                  NameLoc::get(b.getStringAttr("positions")));
  Value result = config.kind == ModelKind::GPT2 ? gpt2(tokens) : llama(tokens);
  if (withLoss) {
    setLoc("loss");
    result = tp::CrossEntropyOp::create(b, loc, result, targets);
  }
  b.setInsertionPointToEnd(body);
  SmallVector<Value> results = {result};
  llvm::append_range(results, cacheUpdates);
  func::ReturnOp::create(b, loc, results);
  func.setFunctionType(b.getFunctionType(body->getArgumentTypes(),
                                         ValueRange(results).getTypes()));
  // All attributes at once: each setArgAttr call builds a new array of every
  // argument's attributes, which the context keeps, so a call per argument
  // grows memory with the square of the layers.
  auto named = [&](StringRef name, Attribute value) {
    return b.getNamedAttr(name, value);
  };
  SmallVector<DictionaryAttr> resultAttrs(results.size());
  resultAttrs[0] =
      b.getDictionaryAttr(named(tp::TPDialect::OutputAttrHelper::getNameStr(),
                                b.getStringAttr(withLoss ? "loss" : "logits")));
  SmallVector<SmallVector<NamedAttribute>> argAttrs(body->getNumArguments());
  for (auto [idx, cache] : llvm::enumerate(caches)) {
    argAttrs[cache.first.getArgNumber()].push_back(
        named(tp::TPDialect::CacheAttrHelper::getNameStr(),
              b.getStringAttr(cache.second)));
    resultAttrs[idx + 1] = b.getDictionaryAttr(
        named(tp::TPDialect::UpdatesAttrHelper::getNameStr(),
              b.getI64IntegerAttr(cache.first.getArgNumber())));
  }

  // Argument attributes: HF name and initialisation for parameters, the
  // role for data inputs.
  for (auto [idx, spec] : llvm::enumerate(params)) {
    SmallVector<NamedAttribute> &attrs = argAttrs[idx];
    attrs.push_back(named(tp::TPDialect::ParamAttrHelper::getNameStr(),
                          b.getStringAttr(spec.name)));
    StringRef init = spec.init == Init::Normal  ? "normal"
                     : spec.init == Init::Zeros ? "zeros"
                                                : "ones";
    attrs.push_back(named(tp::TPDialect::InitAttrHelper::getNameStr(),
                          b.getStringAttr(init)));
    if (spec.init == Init::Normal)
      attrs.push_back(named(tp::TPDialect::InitStdAttrHelper::getNameStr(),
                            b.getF64FloatAttr(spec.stddev)));
    if (!spec.hfShape.empty())
      attrs.push_back(named(tp::TPDialect::HfShapeAttrHelper::getNameStr(),
                            b.getDenseI64ArrayAttr(spec.hfShape)));
  }
  auto input = [&](size_t idx, StringRef role) {
    argAttrs[idx].push_back(named(tp::TPDialect::InputAttrHelper::getNameStr(),
                                  b.getStringAttr(role)));
  };
  input(params.size(), "tokens");
  if (withLoss)
    input(params.size() + 1, "targets");
  if (positions)
    input(params.size() + 1, "positions");
  SmallVector<DictionaryAttr> argDicts;
  for (SmallVector<NamedAttribute> &attrs : argAttrs)
    argDicts.push_back(b.getDictionaryAttr(attrs));
  func.setAllArgAttrs(argDicts);
  func.setAllResultAttrs(resultAttrs);
  return func;
}

llvm::Expected<OwningOpRef<ModuleOp>>
tpc::frontend::importTransformer(MLIRContext &context,
                                 const TransformerConfig &config, int64_t batch,
                                 int64_t seq, int64_t kvCache) {
  if (batch <= 0)
    return configError(formatv("--batch must be positive, got {0}", batch));
  if (seq <= 0)
    return configError(formatv("--seq must be positive, got {0}", seq));
  if (kvCache < 0)
    return configError(
        formatv("--kv-cache must be 0 or positive, got {0}", kvCache));
  for (auto [flag, length] : {std::pair<const char *, int64_t>{"--seq", seq},
                              {"--kv-cache", kvCache}})
    if (length > config.maxPositions)
      return configError(formatv("{0} {1} exceeds the model's {2} positions "
                                 "('{3}')",
                                 flag, length, config.maxPositions,
                                 config.kind == ModelKind::GPT2
                                     ? "n_positions"
                                     : "max_position_embeddings"));
  const int64_t h = config.hiddenSize;
  if (llvm::Error error = checkSizes({
          {"the activations", "--batch x --seq x hidden", {batch, seq, h}},
          {"a KV cache",
           "--batch x --kv-cache x hidden",
           {batch, std::max<int64_t>(kvCache, 1), h}},
          {"the MLP activations",
           "--batch x --seq x intermediate",
           {batch, seq, config.intermediateSize}},
          {"the attention scores",
           "--batch x heads x --seq x --seq",
           {batch, config.numHeads, seq, seq}},
          {"the logits",
           "--batch x --seq x vocabulary",
           {batch, seq, config.vocabSize}},
      }))
    return error;
  context.loadDialect<tp::TPDialect, func::FuncDialect>();
  OpBuilder b(&context);
  OwningOpRef<ModuleOp> module = ModuleOp::create(b.getUnknownLoc());
  Builder attrs(&context);
  (*module)->setAttr(
      tp::TPDialect::ModelTypeAttrHelper::getNameStr(),
      attrs.getStringAttr(config.kind == ModelKind::GPT2 ? "gpt2" : "llama"));
  (*module)->setAttr(tp::TPDialect::HfConfigAttrHelper::getNameStr(),
                     attrs.getStringAttr(config.json));
  (*module)->setAttr(tp::TPDialect::EosTokenIdsAttrHelper::getNameStr(),
                     attrs.getDenseI64ArrayAttr(config.eosTokenIds));
  // The head counts, under their config names, so that a scheme that splits
  // heads over ranks names the one the grid does not divide.
  SmallVector<NamedAttribute> headCounts;
  auto addCount = [&](StringRef field, int64_t count) {
    headCounts.push_back(
        attrs.getNamedAttr(field, attrs.getI64IntegerAttr(count)));
  };
  if (config.kind == ModelKind::GPT2) {
    addCount("n_head", config.numHeads);
  } else {
    addCount("num_attention_heads", config.numHeads);
    addCount("num_key_value_heads", config.numKeyValueHeads);
  }
  (*module)->setAttr(tp::TPDialect::HeadCountsAttrHelper::getNameStr(),
                     attrs.getDictionaryAttr(headCounts));
  ModelEmitter emitter(context, config, batch);
  emitter.build(*module, "forward", FunctionRole::Forward, seq);
  emitter.build(*module, "loss", FunctionRole::Loss, seq);
  if (kvCache > 0) {
    // Generation: the prompt in chunks of --seq tokens, then one token at a
    // time, both against caches of kvCache positions.
    emitter.build(*module, "prefill", FunctionRole::Generate,
                  std::min(seq, kvCache), kvCache);
    emitter.build(*module, "decode", FunctionRole::Generate, 1, kvCache);
  }
  if (failed(verify(*module)))
    return configError("internal error: the emitted module does not verify");
  return module;
}
