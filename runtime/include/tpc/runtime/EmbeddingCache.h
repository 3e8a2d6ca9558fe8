// The frequency-aware embedding cache's planning (docs/embedding-cache.md):
// which rows of a table a device cache of a few slots holds, ranked by how
// often the training data uses each id; per batch, the misses to fetch and
// the least frequent cached rows to write back, and each id's slot. Host
// logic only, with no data: the cache's transfers act on what it plans.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tpc::runtime {

class Backend;
class Buffer;

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
  /// The same for a rank's block of a table of `vocabulary` rows: only the
  /// ids in [firstRow, firstRow + rows) count, as rows of the block; every
  /// id must be within the vocabulary.
  static IdFrequencies countBlock(std::span<const int32_t> stream,
                                  int64_t vocabulary, int64_t firstRow,
                                  int64_t rows, int64_t batchTokens);
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
  /// Whether prepare(ids, keep) can cache every row of both batches at once
  /// (they use at most capacity() distinct rows).
  bool fits(std::span<const int32_t> ids,
            std::span<const int32_t> keep = {}) const;
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
  /// Descending: the lowest free slot is taken, from the back, in O(1)
  /// (a cache of millions of rows has millions free after its warm-up).
  std::vector<int64_t> freeSlots;
  /// One flag per row, all clear between calls: which rows a batch uses,
  /// without a table-sized allocation per batch.
  mutable std::vector<char> usedRows;
  int64_t lookupCount = 0, missCount = 0;
};

/// What a cache moved and how often a batch's lookups found their row.
struct CacheStats {
  int64_t lookups = 0, misses = 0;
  int64_t rowsFetched = 0, rowsWrittenBack = 0;
  /// Host to device and back, the rows' values and moments, for batches.
  uint64_t bytesFetched = 0, bytesWrittenBack = 0;
  /// Wall time preparing batches before their runs: planning, write-backs
  /// and fetches (what the step waits for).
  double seconds = 0;
  /// Of the fetched rows, those the lookahead gathered on the host while
  /// the step before ran, and the seconds that took (overlapped).
  int64_t rowsPrefetched = 0;
  double lookaheadSeconds = 0;
  /// Steps whose lookahead did not fit in the cache beside the running
  /// batch (their rows were fetched before they ran).
  int64_t lookaheadsSkipped = 0;
};

/// One rank's cache of a cached embedding table (Param.cache_rows): the
/// whole block of rows stays in the host arrays (the table and its AdamW
/// moments, ParamStore's), and `slots` of them live in three device
/// buffers, row-major [slots, rowElements], which the programs read and
/// update in place through the slot map (docs/embedding-cache.md).
///
/// Coherence: after a program wrote the cache (deviceWritten) the host is
/// behind for the cached rows until writeBack(); after the host arrays
/// change (hostChanged) the device rows are re-fetched before their next
/// use.
class CachedTable {
public:
  /// `host` are the three host arrays (value, exp_avg, exp_avg_sq) of
  /// blockRows x rowElements floats, which must outlive the cache.
  CachedTable(int64_t vocabulary, int64_t firstRow, int64_t blockRows,
              int64_t slots, int64_t rowElements);
  ~CachedTable();

  int64_t slots() const { return capacity; }
  int64_t blockRows() const { return rows; }
  int64_t firstRow() const { return first; }
  /// The whole table's rows (every rank's blocks).
  int64_t vocabulary() const { return vocab; }
  const CacheStats &stats() const { return counters; }

  /// Ranks the rows by the training data's frequencies: before the first
  /// batch. Throws std::invalid_argument when one batch of that data uses
  /// more distinct rows of the block than the cache holds. Without a
  /// ranking the rows rank by id.
  void rank(IdFrequencies frequencies);

  /// Makes every row of the block that `wholeIds` (a step's tokens on all
  /// ranks) uses cached: writes the victims back to `host`, fetches the
  /// misses, and updates the slot map. Throws std::invalid_argument for an
  /// id outside the vocabulary or a batch the cache cannot hold.
  void prepare(std::span<const int32_t> wholeIds,
               const std::array<float *, 3> &host, Backend &backend);
  /// The lookahead: plans the batch after the one prepared last while
  /// that one's program runs, and gathers its misses' rows from `host` into
  /// a staging buffer. It touches neither the device nor the rows cached
  /// (the running batch's are kept), so it may run on another thread than
  /// the program's. The next prepare() of the same ids applies it; of other
  /// ids (an evaluation in between), applies it and plans those. When the
  /// two batches' rows do not fit in the cache together, nothing is
  /// planned: the next prepare() fetches its rows itself.
  void planAhead(std::span<const int32_t> nextWholeIds,
                 const std::array<float *, 3> &host);
  /// Each row's slot, or -1 (the CacheMap input).
  const std::vector<int32_t> &slotMap() const { return map; }
  /// The slots of the rows the last prepared batch uses, by ascending row,
  /// then -1 up to `count` entries (the CacheRows input).
  std::vector<int32_t> batchSlots(int64_t count) const;

  /// The device array `which` (0 value, 1 exp_avg, 2 exp_avg_sq), its
  /// cached rows current.
  std::byte *data(size_t which, const std::array<float *, 3> &host,
                  Backend &backend);
  /// A program wrote the cache: the host is behind for its rows.
  void deviceWritten() { hostBehind = deviceValid; }
  /// Copies every cached row to `host` if the host is behind.
  void writeBack(const std::array<float *, 3> &host);
  /// The host arrays changed: the cached rows are fetched again.
  void hostChanged() { deviceValid = false; }

private:
  void allocate(Backend &backend);
  /// Copies every cached row between the host arrays and the device, one
  /// packed transfer per array.
  void copyCachedRows(bool toDevice, const std::array<float *, 3> &host);
  /// The batch's ids of this block (checked against the vocabulary).
  std::vector<int32_t> blockIds(std::span<const int32_t> wholeIds) const;
  /// Carries out a planned transfer: victims written back, misses fetched
  /// (from `staged`, rows x 3 arrays, when the lookahead gathered them),
  /// the map updated, and the batch's rows recorded.
  void apply(const CacheTransfer &transfer, const std::vector<int32_t> &ids,
             const std::array<float *, 3> &host,
             const std::vector<float> *staged);

  int64_t vocab, first, rows, capacity, rowElements;
  std::optional<CachePlanner> planner;
  std::vector<int32_t> map;
  std::vector<int64_t> batchRows; // the last batch's rows, ascending
  /// The lookahead's plan, not yet applied.
  struct Ahead {
    std::vector<int32_t> ids;
    CacheTransfer transfer;
    /// The misses' values, then their exp_avg, then their exp_avg_sq.
    std::vector<float> staged;
  };
  std::optional<Ahead> ahead;
  Backend *device = nullptr;
  std::array<std::unique_ptr<Buffer>, 3> buffers;
  bool deviceValid = false, hostBehind = false;
  CacheStats counters;
  /// Whole-cache copies (first use, after the host changed; checkpoints and
  /// exports), apart from the batches' traffic.
  uint64_t refillBytes = 0, flushBytes = 0;

public:
  uint64_t refilledBytes() const { return refillBytes; }
  uint64_t flushedBytes() const { return flushBytes; }
};

} // namespace tpc::runtime
