// A rank's parameters and their AdamW moments: its blocks of each
// parameter, on the host with a copy on the device when the backend's memory
// is not the host's, shared by every program; block migration (relayout)
// and gathering whole parameters.
#pragma once

#include "tpc/runtime/Backend.h"
#include "tpc/runtime/Blocks.h"
#include "tpc/runtime/EmbeddingCache.h"
#include "tpc/runtime/Plan.h"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tpc::runtime {

class GridComm;

/// This rank's block of a parameter: per dim the offset and size, from the
/// parameter's split axes and the rank's grid coordinates (all zeros: one
/// rank, or the first rank of every group).
struct ParamBlock {
  std::vector<int64_t> globalShape, offset, shape;
};
ParamBlock paramBlock(const LoadedPlan &plan, const plan::Param &param,
                      const std::vector<int64_t> &coords);
using SplitAxes = flatbuffers::Vector<flatbuffers::Offset<plan::Axes>>;
/// The block at grid coordinates `coords` (empty: the first) of any tensor
/// of shape `globalShape` split as `split` (null or empty: whole): a
/// parameter's or a program input's.
ParamBlock blockOf(const LoadedPlan &plan, std::vector<int64_t> globalShape,
                   const SplitAxes *split, const std::vector<int64_t> &coords);

/// Where one stored block of a parameter lies: in the rank's storage (a
/// row-major region starting at element `base`) and in the whole parameter.
/// A parameter without rebalance dims is one block, its rank's even share.
/// One with a rebalance dim stores the blocks the rank computes as one
/// region (the array its kernels see, in held order), then its parked blocks
/// as another.
struct StoredBlock {
  int64_t base = 0;
  std::vector<int64_t> regionShape, regionOffset;
  std::vector<int64_t> globalOffset, shape;
  int64_t point = -1, id = -1; // the rebalance point and block id, if any
};
/// Whether the rank at `coords` holds `param`: every rank does, except in a
/// pipelined plan, where the ranks of its stage under stage cut `cut` do
/// (Param.stage, Param.cut_stages); empty coords (a one-rank or whole store)
/// hold everything.
bool holdsParam(const LoadedPlan &plan, const plan::Param &param,
                const std::vector<int64_t> &coords, int64_t cut);
/// A rank's blocks of `param` under `assignment` (its blocks and stage
/// cut); none where it does not hold it.
std::vector<StoredBlock> storedBlocks(const LoadedPlan &plan,
                                      const plan::Param &param,
                                      const std::vector<int64_t> &coords,
                                      const BlockAssignment &assignment);
/// `block`'s values in a rank's `storage`, row-major in block.shape; and
/// back.
std::vector<float> readStoredBlock(const float *storage,
                                   const StoredBlock &block);
void writeStoredBlock(const float *values, const StoredBlock &block,
                      float *storage);

/// What moving to another block assignment cost this rank.
struct RelayoutCost {
  int64_t blocksSent = 0, blocksReceived = 0;
  double bytesSent = 0, bytesReceived = 0;
  double seconds = 0;
};

/// The plan's parameters as f32 host arrays, in plan order, and AdamW's
/// moments for each (zeros until a train step writes them): this rank's
/// blocks, laid out by storedBlocks. A parameter with rebalance dims is
/// allocated for its point's capacity.
///
/// Programs on a backend whose memory the host cannot address run on
/// device copies (deviceData). The two sides stay coherent without their
/// users' help: every accessor returns current host values (downloading
/// after a device run wrote them), and a mutable access makes the host
/// side the newer one, uploaded before the next device run.
class ParamStore {
public:
  enum class State { Value, ExpAvg, ExpAvgSq };

  /// Sharding-independent deterministic initialisation (Init.h).
  /// With `coords`, only this rank's blocks of each split parameter; every
  /// rebalance point starts evenly split.
  static ParamStore initialise(const LoadedPlan &plan,
                               const std::vector<int64_t> &coords = {});
  /// Loads every parameter by its HF name from a safetensors file
  /// (f32/f16/bf16), keeping this rank's blocks. Throws std::runtime_error
  /// if one is missing or its shape differs; tensors the plan does not use
  /// are ignored.
  static ParamStore fromSafetensors(const LoadedPlan &plan,
                                    const std::string &path,
                                    const std::vector<int64_t> &coords = {});

  /// The whole parameters (and moments, if any) from every rank's blocks,
  /// on every rank: collective over `comm`'s grid, not counted as step
  /// traffic. The result is a one-rank store.
  ParamStore gathered(const LoadedPlan &plan, GridComm &comm) const;
  /// Replaces this rank's blocks of parameter `index` (or of a moment) with
  /// theirs in `whole`, the whole parameter-shaped array.
  void setFromWhole(const LoadedPlan &plan, size_t index, State state,
                    const std::vector<float> &whole);

  /// Moves to the block assignment `next` (validated; the same on every
  /// rank): blocks that change hands go with their weights and moments
  /// straight to their new rank, blocks that change between computed and
  /// parked move within the rank's storage; under another stage cut, the
  /// parameters of the layers that change stage go with their moments from
  /// each rank of the old stage to the rank at the same place in the new
  /// one (a relayout changes the blocks or the cut, not both). Collective
  /// over the ranks that send or receive; every rank must call it.
  RelayoutCost relayout(const LoadedPlan &plan, const BlockAssignment &next,
                        GridComm *comm);
  const BlockAssignment &blocks() const { return assignment; }
  const std::vector<int64_t> &coords() const { return coords_; }
  /// Changes with every relayout: runners recompute their shapes then.
  uint64_t layoutVersion() const { return version; }

  std::vector<float> &operator[](size_t index) {
    hostWillChange(index);
    return values[index];
  }
  const std::vector<float> &operator[](size_t index) const {
    syncHost();
    return values[index];
  }
  std::vector<float> &expAvg(size_t index);
  std::vector<float> &expAvgSq(size_t index);
  const std::vector<float> &expAvg(size_t index) const;
  const std::vector<float> &expAvgSq(size_t index) const;
  std::vector<float> &state(size_t index, State which);
  bool hasMoments() const { return !moments1.empty(); }
  size_t size() const { return values.size(); }
  uint64_t bytes() const;

  /// Parameter `index`'s `which` array on `backend` (not host-visible; one
  /// backend per store), uploaded first if the host holds newer values.
  std::byte *deviceData(Backend &backend, size_t index, State which);
  /// A device run may have written parameters or moments: the host arrays
  /// are refreshed before they are next read.
  void markDeviceWritten();

  /// The cache of cached embedding table `index` (Param.cache_rows), or
  /// null for any other parameter. Its host side is this store's arrays.
  CachedTable *cachedTable(size_t index) const {
    return index < caches.size() ? caches[index].get() : nullptr;
  }
  /// Ranks cached table `index`'s rows (CachedTable::rank).
  void rankCachedRows(size_t index, IdFrequencies frequencies);
  /// Makes the rows of cached table `index` that a step's whole batch of
  /// token ids uses cached on `backend` (CachedTable::prepare).
  void prepareCache(size_t index, std::span<const int32_t> wholeIds,
                    Backend &backend);
  /// Cached table `index`'s `which` array on `backend`: the cache the
  /// programs read and update.
  std::byte *cacheData(Backend &backend, size_t index, State which);
  /// Cached table `index`'s host arrays (value, exp_avg, exp_avg_sq), its
  /// moments allocated: what CachedTable::planAhead reads, taken before a
  /// run so that the lookahead's thread touches no store.
  std::array<float *, 3> cacheHost(size_t index) const;

private:
  /// Storage for every parameter, zero, sized for this rank.
  static ParamStore allocate(const LoadedPlan &plan,
                             const std::vector<int64_t> &coords);

  /// The host array without syncing (moments allocated on first use).
  std::vector<float> &hostArray(size_t index, State which) const;
  /// Cached table `index`'s cache; a logic error for another parameter.
  CachedTable &requireCache(size_t index) const;
  /// relayout() to another stage cut.
  RelayoutCost moveStages(const LoadedPlan &plan, int64_t cut, GridComm *comm);
  /// Downloads what a device run wrote, if the host is behind.
  void syncHost() const;
  /// Before the host arrays may be written: sync, then the device copies
  /// are behind.
  void hostWillChange();
  /// The same when only parameter `index`'s arrays will change: of the
  /// embedding caches only its own is written back and refetched.
  void hostWillChange(size_t index);

  /// Device copies of the arrays, per parameter and State.
  struct DeviceCopies {
    Backend *backend = nullptr;
    std::vector<std::array<std::unique_ptr<Buffer>, 3>> buffers;
    /// Whether each buffer holds the host array's values.
    std::vector<std::array<bool, 3>> current;
    /// Whether the host arrays hold the newest values.
    bool hostCurrent = true;
  };

  mutable std::vector<std::vector<float>> values;
  // Allocated on first use: inference never pays for them.
  mutable std::vector<std::vector<float>> moments1, moments2;
  std::unique_ptr<DeviceCopies> device;
  /// Per parameter: its embedding cache, if it is a cached table.
  std::vector<std::unique_ptr<CachedTable>> caches;
  BlockAssignment assignment;
  std::vector<int64_t> coords_;
  uint64_t version = 0;
};

/// Calls `write` with whole parameters on the first rank only: `params`
/// itself when `comm` is null or has one rank, else the store gathered from
/// every rank (collective over `comm`: every rank must call this).
void writeWholeParams(const LoadedPlan &plan, const ParamStore &params,
                      GridComm *comm,
                      const std::function<void(const ParamStore &)> &write);

} // namespace tpc::runtime
