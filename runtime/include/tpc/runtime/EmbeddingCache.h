// The frequency-aware embedding cache's planning (docs/embedding-cache.md):
// which rows of a table a device cache of a few slots holds, ranked by how
// often the training data uses each id; per batch, the misses to fetch and
// the least frequent cached rows to write back, and each id's slot. Host
// logic only, with no data: the cache's transfers act on what it plans.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tpc::runtime {

/// How often each row of a table is used by the training data, as a
/// ranking: rank 0 the most frequent row.
class IdFrequencies {
public:
  /// Counts the ids of `stream` (rows [0, rows)) in windows of
  /// `batchTokens` as the training steps cut it, and the most distinct rows
  /// one window uses. Throws std::invalid_argument naming the first id out
  /// of range.
  static IdFrequencies count(std::span<const int32_t> stream, int64_t rows,
                             int64_t batchTokens);
  /// A ranking read back (checkpoints): `order` must list every row once.
  static IdFrequencies fromOrder(std::vector<int64_t> order,
                                 int64_t maxDistinctPerBatch);

  int64_t rows() const { return int64_t(order_.size()); }
  /// Rows by descending count; ties by ascending row.
  const std::vector<int64_t> &order() const { return order_; }
  /// Position of `row` in order().
  int64_t rank(int64_t row) const { return rank_[size_t(row)]; }
  /// The most distinct rows one batch window of the counted stream uses.
  int64_t maxDistinctPerBatch() const { return maxDistinct; }

private:
  std::vector<int64_t> order_, rank_;
  int64_t maxDistinct = 0;
};

/// Rows to move for one batch: victims written back from their slots first,
/// then misses fetched into slots (the victims' and the free ones).
struct CacheTransfer {
  std::vector<int64_t> evictRows, evictSlots;
  std::vector<int64_t> fetchRows, fetchSlots;
};

/// The slots of a device cache of `capacity` rows over a table ranked by
/// `frequencies`. Deterministic: every rank planning the same batches in
/// the same order holds the same rows in the same slots.
class CachePlanner {
public:
  /// Throws std::invalid_argument for a capacity outside [1, rows], a
  /// warm-up ratio outside [0, 1], or a capacity below the most distinct
  /// rows a batch of the counted data uses.
  CachePlanner(IdFrequencies frequencies, int64_t capacity,
               double warmupRatio = 0.7);

  int64_t capacity() const { return int64_t(rowInSlot.size()); }
  const IdFrequencies &frequencies() const { return freq; }
  /// The warm-up: slot s holds row warm[s] (the most frequent rows), the
  /// rest are free. What the cache fetches before the first batch.
  CacheTransfer warmUp();

  /// Plans `ids`' batch: its distinct rows all cached afterwards, the
  /// victims the least frequent cached rows that neither this batch nor
  /// the `keep` batch (the one still running, under lookahead) uses.
  /// Throws std::invalid_argument when those rows exceed the capacity or an
  /// id is out of range.
  CacheTransfer prepare(std::span<const int32_t> ids,
                        std::span<const int32_t> keep = {});
  /// Each id's slot (after prepare() of its batch).
  std::vector<int32_t> slotsOf(std::span<const int32_t> ids) const;
  /// The slot holding `row`, or -1.
  int64_t slotOf(int64_t row) const { return slotOfRow[size_t(row)]; }
  /// The row in `slot`, or -1 while it is free.
  int64_t rowIn(int64_t slot) const { return rowInSlot[size_t(slot)]; }

  /// Ids looked up (with repeats) and those whose row was not cached.
  int64_t lookups() const { return lookupCount; }
  int64_t misses() const { return missCount; }

private:
  void checkIds(std::span<const int32_t> ids) const;

  IdFrequencies freq;
  double warmupRatio;
  std::vector<int64_t> slotOfRow, rowInSlot;
  std::vector<int64_t> freeSlots; // ascending, taken from the front
  int64_t lookupCount = 0, missCount = 0;
};

} // namespace tpc::runtime
