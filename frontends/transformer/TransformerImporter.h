//===- TransformerImporter.h - HF config.json -> tp dialect -----*- C++ -*-===//
//
// Builds the global-view tp module of a GPT-2 or LLaMA model from a
// HuggingFace-style config.json: @forward(params..., tokens) -> logits and
// @loss(params..., tokens, targets) -> mean cross-entropy. Parameters carry
// their HF checkpoint names and shapes (GPT-2's Conv1D [in, out] layout,
// LLaMA's nn.Linear [out, in] layout) and HF's initialisation.
//
//===----------------------------------------------------------------------===//

#ifndef TPC_FRONTENDS_TRANSFORMER_TRANSFORMERIMPORTER_H
#define TPC_FRONTENDS_TRANSFORMER_TRANSFORMERIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"
#include <optional>
#include <string>
#include <vector>

namespace tpc::frontend {

enum class ModelKind { GPT2, Llama };

/// The most layers a model may have (the largest published models have
/// fewer than 200): every layer is emitted as ops, so the count bounds the
/// module's memory. Tensor sizes are bounded by tp::kMaxTensorElements.
constexpr int64_t kMaxLayers = 1024;

/// The fields of config.json that shape the model, validated.
struct TransformerConfig {
  ModelKind kind;
  int64_t vocabSize;
  int64_t hiddenSize;
  int64_t numLayers;
  int64_t numHeads;
  int64_t numKeyValueHeads;
  int64_t headDim;
  int64_t intermediateSize;
  int64_t maxPositions;
  double normEpsilon;
  double ropeTheta; // LLaMA only
  double initializerRange;
  bool tieWordEmbeddings;
  bool attentionBias;    // LLaMA only (GPT-2 always has biases)
  bool mlpBias;          // LLaMA only
  bool scaleAttnWeights; // GPT-2 only
  /// The ids generation stops at, resolved as HuggingFace's generate()
  /// does: generation_config.json's eos_token_id, else config.json's, else
  /// the model type's default (GPT-2 50256, LLaMA 2); those outside the
  /// vocabulary are dropped (no step can produce them).
  std::vector<int64_t> eosTokenIds;
  /// The config.json text, kept for export.
  std::string json;
};

/// Parses and validates config.json and, when given, the model's
/// generation_config.json. Errors are one line and name the field.
llvm::Expected<TransformerConfig>
parseTransformerConfig(llvm::StringRef json,
                       std::optional<llvm::StringRef> generationJson = {});

/// Reads `configPath` (a config.json, at most 16 MiB; "-": standard input)
/// and the generation_config.json beside it when there is one, as
/// HuggingFace's from_pretrained does, and parses them. Errors are one line
/// naming the file.
llvm::Expected<TransformerConfig>
readTransformerConfig(llvm::StringRef configPath);
/// The same with config.json's text already read from `configPath`.
llvm::Expected<TransformerConfig>
readTransformerConfig(llvm::StringRef configPath, llvm::StringRef configText);

/// Emits the model's tp module for `batch` sequences of `seq` tokens:
/// @forward and @loss; with `kvCache` > 0 also the generation programs
/// @prefill (min(seq, kvCache) tokens) and @decode (one token) over KV caches
/// of `kvCache` positions.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importTransformer(mlir::MLIRContext &context, const TransformerConfig &config,
                  int64_t batch, int64_t seq, int64_t kvCache = 0);

} // namespace tpc::frontend

#endif // TPC_FRONTENDS_TRANSFORMER_TRANSFORMERIMPORTER_H
