//===- DlrmImporter.h - DLRM config.json -> tp dialect ----------*- C++ -*-===//
//
// A DLRM (Naumov et al. 2019, as TorchRec's DLRM model builds it): a dense
// MLP over the dense features, sum-pooled embedding bags of the sparse
// features, their pairwise dot products, and an over MLP to one logit,
// trained with binary cross-entropy. The sparse features' tables are one
// concatenated parameter (TorchRec's fused EmbeddingBagCollection), table t's
// rows after those of tables 0..t-1, so that every table shares one lookup,
// one embedding cache and one row split over ranks.
//
//===----------------------------------------------------------------------===//

#ifndef TPC_FRONTENDS_DLRM_DLRMIMPORTER_H
#define TPC_FRONTENDS_DLRM_DLRMIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include <string>
#include <vector>

namespace tpc::frontend {

/// The most sparse features a DLRM may have (Criteo has 26): each is an op
/// chain of the interaction, so the count bounds the module's size.
constexpr int64_t kMaxSparseFeatures = 1024;

/// A DLRM's config.json (model_type "dlrm"), in TorchRec's DLRM names:
///
///   dense_in_features           dense features per sample (Criteo: 13)
///   embedding_dim               every table's row width
///   num_embeddings_per_feature  rows of each sparse feature's table
///   dense_arch_layer_sizes      the dense MLP's widths, the last
///                               embedding_dim (ReLU after each layer)
///   over_arch_layer_sizes       the over MLP's widths, the last 1 (ReLU
///                               after each layer but the last)
///   bag_size                    ids per sparse feature per sample (a
///                               multi-hot bag, sum-pooled; default 1)
///   initializer_range           the tables' init std (default 0.01)
struct DlrmConfig {
  int64_t denseFeatures;
  int64_t embeddingDim;
  std::vector<int64_t> tableRows;
  std::vector<int64_t> denseLayers;
  std::vector<int64_t> overLayers;
  int64_t bagSize;
  double initializerRange;
  /// The config.json text, kept for export.
  std::string json;

  int64_t numTables() const { return int64_t(tableRows.size()); }
  /// Rows of the concatenated table.
  int64_t totalRows() const;
  /// The first row of table `table` in the concatenated table.
  int64_t rowOffset(int64_t table) const;
};

/// Whether a parsed config.json is a DLRM's (model_type "dlrm").
bool isDlrmConfig(const llvm::json::Object &config);

/// Parses and validates a DLRM config.json; errors are one line and name the
/// field.
llvm::Expected<DlrmConfig> parseDlrmConfig(llvm::StringRef json);

/// Emits the DLRM's tp module for steps of `batch` samples:
/// @forward(params..., tokens, dense) -> logits [batch, 1, 1] and
/// @loss(params..., tokens, targets, dense) -> the mean binary
/// cross-entropy. `tokens` (i32 [batch, tables * bag_size]) are each
/// sample's ids into the concatenated table, feature by feature (table t's
/// ids offset by rowOffset(t)); `targets` (i32 [batch, 1]) the 0/1 labels;
/// `dense` (f32 [batch, 1, dense_in_features]) the dense features.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importDlrm(mlir::MLIRContext &context, const DlrmConfig &config, int64_t batch);

} // namespace tpc::frontend

#endif // TPC_FRONTENDS_DLRM_DLRMIMPORTER_H
