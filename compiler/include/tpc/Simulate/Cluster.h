//===- Cluster.h - a described cluster, for the step simulator --*- C++ -*-===//
//
// A cluster description (JSON, docs/simulator.md): one kind of device (peak
// FLOP/s per precision, memory, how close GEMMs of a size come to the peak,
// a fixed cost per kernel) and the network as levels, innermost first
// (ranks per node over NVLink, then nodes over InfiniBand), each with a
// per-rank bandwidth and a latency per message.
//
//===----------------------------------------------------------------------===//

#ifndef TPC_SIMULATE_CLUSTER_H
#define TPC_SIMULATE_CLUSTER_H

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace mlir::tp {

struct DeviceModel {
  std::string name;
  /// Peak FLOP/s of matrix products by operand precision.
  double peakF32 = 0, peakTF32 = 0, peakBF16 = 0;
  double memoryBytes = 0;
  /// Bytes/s the device's memory streams (elementwise and other kernels).
  double memoryBandwidth = 0;
  /// A product of F flops runs at peak * gemmMax * F / (F + halfFlops),
  /// halfFlops by operand precision (a GPU's bf16 tensor cores need larger
  /// products to fill than its f32 units).
  double gemmMax = 1;
  double halfFlopsF32 = 0, halfFlopsTF32 = 0, halfFlopsBF16 = 0;
  /// Fixed seconds per kernel (launch, dispatch).
  double opOverhead = 0;
  /// How many ranks sharing the device run at full speed at once (a CPU's
  /// cores, for ranks of one thread each): a rank gets at most 1 /
  /// min(cores, ranks on the device) of it however many others idle. 0:
  /// one (a GPU gives one rank all of it).
  int64_t cores = 0;
  /// Attention that materialises its score matrices (Megatron-LM before
  /// flash attention): bytes moved per score element by the forward's and
  /// by the backward's kernels besides the products (scores, softmax,
  /// dropout and their gradients); 0: one fused kernel, costed by its
  /// products alone.
  double scoreBytesForward = 0, scoreBytesBackward = 0;

  /// Seconds of a product of `flops` flops with operands in `precision`
  /// (null: f32; bf16; tf32).
  double productSeconds(double flops, TypeAttr precision) const;
  /// Seconds of a kernel that streams `bytes` bytes.
  double streamSeconds(double bytes) const;
};

struct NetworkLevel {
  std::string name;
  /// Consecutive ranks one group of this level spans (ranks per node); 0 on
  /// the outermost level: all of them.
  int64_t ranks = 0;
  /// Bytes/s one rank sends over this level's links, and seconds per
  /// message.
  double bandwidth = 0, latency = 0;
  /// Links one group of the inner level has to this level (one InfiniBand
  /// port per node); 0: one per rank. With fewer links than the groups
  /// crossing them at once, those share them (`bandwidth` is then one
  /// link's).
  int64_t links = 0;
};

struct ClusterModel {
  std::string name;
  DeviceModel device;
  /// Devices the cluster has; 0: one per rank, however many. With more ranks
  /// than devices, consecutive ranks share one evenly (MPI processes on one
  /// CPU).
  int64_t devices = 0;
  /// Innermost first; the last spans every rank.
  SmallVector<NetworkLevel> levels;

  /// Ranks on the busiest device (ranks are placed in order, consecutive
  /// ones sharing a device): 1 with a device per rank.
  int64_t ranksPerDevice(int64_t worldRanks) const;
  /// What one of `worldRanks` ranks gets of its device: all of it, or with
  /// several ranks to a device their share of its FLOP/s, memory bandwidth
  /// and memory.
  DeviceModel deviceFor(int64_t worldRanks) const;

  /// The innermost level one of whose groups holds every rank of `ranks`
  /// (global ranks, placed in order: rank r on node r / ranks-per-node).
  const NetworkLevel &levelOf(ArrayRef<int64_t> ranks) const;
  /// Seconds of an exchange of `ringSteps` messages sending `bytes` bytes
  /// in all over the level that connects `ranks`.
  double exchangeSeconds(ArrayRef<int64_t> ranks, int64_t ringSteps,
                         double bytes) const;

  /// Fails unless each level's group size divides `worldRanks` (or spans
  /// them all): the description is of a machine this grid fills.
  llvm::Error checkWorld(int64_t worldRanks, llvm::StringRef path) const;
};

/// Reads a cluster description; the error names the file and the field in
/// one line.
llvm::Expected<ClusterModel> parseCluster(llvm::StringRef text,
                                          llvm::StringRef path);
llvm::Expected<ClusterModel> loadCluster(llvm::StringRef path);

} // namespace mlir::tp

#endif // TPC_SIMULATE_CLUSTER_H
