#include "tpc/runtime/EmbeddingCache.h"

#include "tpc/runtime/Backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <numeric>
#include <stdexcept>

namespace tpc::runtime {

namespace {
[[noreturn]] void fail(const std::string &message) {
  throw std::invalid_argument(message);
}

/// The distinct rows of `keep` then `ids`, in first-use order, marking
/// each in `used` (one entry per row, all zero before).
std::vector<int64_t> distinctRows(std::span<const int32_t> ids,
                                  std::span<const int32_t> keep,
                                  std::vector<char> &used) {
  std::vector<int64_t> rows;
  for (std::span<const int32_t> batch : {keep, ids})
    for (int32_t id : batch)
      if (!used[size_t(id)]) {
        used[size_t(id)] = 1;
        rows.push_back(id);
      }
  return rows;
}

/// Rows `rows[i]` of a host array of `width`-float rows, packed in order
/// into `packed`; and back.
void packRows(const float *array, std::span<const int64_t> rows, int64_t width,
              float *packed) {
  for (size_t i = 0; i < rows.size(); ++i)
    std::copy_n(array + rows[i] * width, width, packed + int64_t(i) * width);
}
void unpackRows(const float *packed, std::span<const int64_t> rows,
                int64_t width, float *array) {
  for (size_t i = 0; i < rows.size(); ++i)
    std::copy_n(packed + int64_t(i) * width, width, array + rows[i] * width);
}
} // namespace

IdFrequencies IdFrequencies::count(std::span<const int32_t> stream,
                                   int64_t rows, int64_t batchTokens) {
  return countBlock(stream, rows, 0, rows, batchTokens);
}

IdFrequencies IdFrequencies::countBlock(std::span<const int32_t> stream,
                                        int64_t vocabulary, int64_t firstRow,
                                        int64_t rows, int64_t batchTokens) {
  if (rows < 1 || firstRow < 0 || firstRow + rows > vocabulary)
    fail("an embedding block needs rows within the table's " +
         std::to_string(vocabulary) + "; got " + std::to_string(rows) +
         " from row " + std::to_string(firstRow));
  if (batchTokens < 1)
    fail("a batch needs tokens; got " + std::to_string(batchTokens));
  std::vector<int64_t> counts(size_t(rows), 0), lastWindow(size_t(rows), -1);
  // The windows the training steps read (Training.cpp's batchOffset): the
  // last token of the stream is only ever a target.
  const int64_t windows =
      stream.empty() ? 0 : (int64_t(stream.size()) - 1) / batchTokens;
  IdFrequencies result;
  for (int64_t w = 0; w < windows; ++w) {
    int64_t distinct = 0;
    for (int64_t i = w * batchTokens; i < (w + 1) * batchTokens; ++i) {
      const int64_t token = stream[size_t(i)];
      if (token < 0 || token >= vocabulary)
        fail("token " + std::to_string(i) + " is id " + std::to_string(token) +
             ", outside the embedding's " + std::to_string(vocabulary) +
             " rows");
      const int64_t id = token - firstRow;
      if (id < 0 || id >= rows)
        continue;
      ++counts[size_t(id)];
      if (lastWindow[size_t(id)] != w) {
        lastWindow[size_t(id)] = w;
        ++distinct;
      }
    }
    result.maxDistinct = std::max(result.maxDistinct, distinct);
  }
  result.order_.resize(size_t(rows));
  std::iota(result.order_.begin(), result.order_.end(), int64_t(0));
  std::sort(result.order_.begin(), result.order_.end(),
            [&](int64_t a, int64_t b) {
              return counts[size_t(a)] != counts[size_t(b)]
                         ? counts[size_t(a)] > counts[size_t(b)]
                         : a < b;
            });
  result.rank_.resize(size_t(rows));
  for (size_t r = 0; r < result.order_.size(); ++r)
    result.rank_[size_t(result.order_[r])] = int64_t(r);
  return result;
}

IdFrequencies IdFrequencies::fromOrder(std::vector<int64_t> order,
                                       int64_t maxDistinctPerBatch) {
  IdFrequencies result;
  result.rank_.assign(order.size(), -1);
  for (size_t r = 0; r < order.size(); ++r) {
    const int64_t row = order[r];
    if (row < 0 || row >= int64_t(order.size()) ||
        result.rank_[size_t(row)] >= 0)
      fail("an embedding ranking must list each of its " +
           std::to_string(order.size()) + " rows once; position " +
           std::to_string(r) + " holds " + std::to_string(row));
    result.rank_[size_t(row)] = int64_t(r);
  }
  if (maxDistinctPerBatch < 0 || maxDistinctPerBatch > int64_t(order.size()))
    fail("an embedding ranking's distinct rows per batch (" +
         std::to_string(maxDistinctPerBatch) + ") must be within its " +
         std::to_string(order.size()) + " rows");
  result.order_ = std::move(order);
  result.maxDistinct = maxDistinctPerBatch;
  return result;
}

CachePlanner::CachePlanner(IdFrequencies frequencies, int64_t capacity,
                           double warmupRatio)
    : freq(std::move(frequencies)), warmupRatio(warmupRatio) {
  const int64_t rows = freq.rows();
  if (capacity < 1 || capacity > rows)
    fail("an embedding cache of " + std::to_string(capacity) +
         " rows: it must hold 1 to the table's " + std::to_string(rows));
  if (!(warmupRatio >= 0 && warmupRatio <= 1))
    fail("the embedding cache's warm-up ratio must be within [0, 1]");
  if (capacity < freq.maxDistinctPerBatch())
    fail("an embedding cache of " + std::to_string(capacity) +
         " rows is too small: a batch of the training data uses " +
         std::to_string(freq.maxDistinctPerBatch()) + " distinct rows");
  slotOfRow.assign(size_t(rows), -1);
  rowInSlot.assign(size_t(capacity), -1);
  freeSlots.resize(size_t(capacity));
  std::iota(freeSlots.rbegin(), freeSlots.rend(), int64_t(0));
  usedRows.assign(size_t(rows), 0);
}

CacheTransfer CachePlanner::warmUp() {
  if (int64_t(freeSlots.size()) != capacity())
    throw std::logic_error("the embedding cache warms up only when empty");
  const auto count = std::min<int64_t>(
      capacity(), int64_t(std::ceil(warmupRatio * double(capacity()))));
  CacheTransfer transfer;
  for (int64_t s = 0; s < count; ++s) {
    const int64_t row = freq.order()[size_t(s)];
    rowInSlot[size_t(s)] = row;
    slotOfRow[size_t(row)] = s;
    transfer.fetchRows.push_back(row);
    transfer.fetchSlots.push_back(s);
  }
  freeSlots.resize(freeSlots.size() - size_t(count)); // slots 0..count-1
  return transfer;
}

void CachePlanner::checkIds(std::span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= freq.rows())
      fail("id " + std::to_string(ids[i]) + " at position " +
           std::to_string(i) + " is outside the embedding's " +
           std::to_string(freq.rows()) + " rows");
}

CacheTransfer CachePlanner::prepare(std::span<const int32_t> ids,
                                    std::span<const int32_t> keep) {
  checkIds(ids);
  checkIds(keep);
  // Rows this batch or the running one use (the latter may not be evicted
  // while it is updated), and this batch's misses, most frequent first.
  std::vector<char> &used = usedRows;
  const std::vector<int64_t> rowsUsed = distinctRows(ids, keep, used);
  // Every flag clear again on the way out, thrown or not.
  struct ClearFlags {
    std::vector<char> &flags;
    const std::vector<int64_t> &rows;
    ~ClearFlags() {
      for (int64_t row : rows)
        flags[size_t(row)] = 0;
    }
  } clearUsed{used, rowsUsed};
  const int64_t distinct = int64_t(rowsUsed.size());
  std::vector<int64_t> missing;
  for (int64_t row : rowsUsed)
    if (slotOfRow[size_t(row)] < 0)
      missing.push_back(row);
  lookupCount += int64_t(ids.size());
  for (int32_t id : ids)
    missCount += slotOfRow[size_t(id)] < 0;
  std::sort(missing.begin(), missing.end(),
            [&](int64_t a, int64_t b) { return freq.rank(a) < freq.rank(b); });
  CacheTransfer transfer;
  const int64_t shortfall = int64_t(missing.size()) - int64_t(freeSlots.size());
  if (shortfall > 0) {
    // The least frequent cached rows that neither batch uses.
    std::vector<int64_t> candidates;
    for (int64_t row : rowInSlot)
      if (row >= 0 && !used[size_t(row)])
        candidates.push_back(row);
    if (int64_t(candidates.size()) < shortfall)
      fail("a batch needs " + std::to_string(distinct) +
           " distinct embedding rows cached at once (with the batch still "
           "running); the cache holds " +
           std::to_string(capacity()));
    std::partial_sort(
        candidates.begin(), candidates.begin() + shortfall, candidates.end(),
        [&](int64_t a, int64_t b) { return freq.rank(a) > freq.rank(b); });
    candidates.resize(size_t(shortfall));
    std::sort(candidates.begin(), candidates.end(), [&](int64_t a, int64_t b) {
      return slotOfRow[size_t(a)] < slotOfRow[size_t(b)];
    });
    for (int64_t row : candidates) {
      const int64_t slot = slotOfRow[size_t(row)];
      transfer.evictRows.push_back(row);
      transfer.evictSlots.push_back(slot);
      slotOfRow[size_t(row)] = -1;
      rowInSlot[size_t(slot)] = -1;
      freeSlots.push_back(slot);
    }
    std::sort(freeSlots.begin(), freeSlots.end(), std::greater<int64_t>());
  }
  for (int64_t row : missing) {
    const int64_t slot = freeSlots.back();
    freeSlots.pop_back();
    rowInSlot[size_t(slot)] = row;
    slotOfRow[size_t(row)] = slot;
    transfer.fetchRows.push_back(row);
    transfer.fetchSlots.push_back(slot);
  }
  return transfer;
}

bool CachePlanner::fits(std::span<const int32_t> ids,
                        std::span<const int32_t> keep) const {
  checkIds(ids);
  checkIds(keep);
  const std::vector<int64_t> rows = distinctRows(ids, keep, usedRows);
  for (int64_t row : rows)
    usedRows[size_t(row)] = 0;
  return int64_t(rows.size()) <= capacity();
}

std::vector<int32_t> CachePlanner::slotsOf(std::span<const int32_t> ids) const {
  checkIds(ids);
  std::vector<int32_t> slots;
  slots.reserve(ids.size());
  for (int32_t id : ids) {
    const int64_t slot = slotOfRow[size_t(id)];
    if (slot < 0)
      throw std::logic_error("embedding row " + std::to_string(id) +
                             " is not cached: prepare its batch first");
    slots.push_back(int32_t(slot));
  }
  return slots;
}

//===----------------------------------------------------------------------===//
// CachedTable
//===----------------------------------------------------------------------===//

CachedTable::CachedTable(int64_t vocabulary, int64_t firstRow,
                         int64_t blockRows, int64_t slots, int64_t rowElements)
    : vocab(vocabulary), first(firstRow), rows(blockRows), capacity(slots),
      rowElements(rowElements), map(size_t(blockRows), -1) {
  if (rows < 1 || capacity < 1 || capacity > rows || rowElements < 1 ||
      first < 0 || first + rows > vocab)
    fail("an embedding cache of " + std::to_string(slots) +
         " rows over a block of " + std::to_string(blockRows) +
         " rows from row " + std::to_string(firstRow) + " of " +
         std::to_string(vocabulary) + " is inconsistent");
}

CachedTable::~CachedTable() = default;

void CachedTable::rank(IdFrequencies frequencies) {
  if (planner && planner->lookups() != 0)
    throw std::logic_error("an embedding cache is ranked before its first "
                           "batch");
  if (frequencies.rows() != rows)
    fail("an embedding ranking of " + std::to_string(frequencies.rows()) +
         " rows for a block of " + std::to_string(rows));
  planner.emplace(std::move(frequencies), capacity);
  std::fill(map.begin(), map.end(), -1);
  const CacheTransfer warm = planner->warmUp();
  for (size_t i = 0; i < warm.fetchRows.size(); ++i)
    map[size_t(warm.fetchRows[i])] = int32_t(warm.fetchSlots[i]);
  // The warm rows are fetched with every cached row on first use.
  deviceValid = false;
}

void CachedTable::allocate(Backend &backend) {
  if (device == &backend)
    return;
  if (device)
    throw std::logic_error("an embedding cache on two devices at once ('" +
                           std::string(device->name()) + "' and '" +
                           std::string(backend.name()) + "')");
  device = &backend;
  const uint64_t bytes = uint64_t(capacity * rowElements) * sizeof(float);
  for (auto &buffer : buffers)
    buffer = backend.allocate(bytes);
  deviceValid = false;
}

void CachedTable::copyCachedRows(bool toDevice,
                                 const std::array<float *, 3> &host) {
  std::vector<int64_t> rowsHeld, slots;
  for (int64_t row = 0; row < rows; ++row)
    if (map[size_t(row)] >= 0) {
      rowsHeld.push_back(row);
      slots.push_back(map[size_t(row)]);
    }
  if (rowsHeld.empty())
    return;
  const uint64_t bytes = uint64_t(rowElements) * sizeof(float);
  const size_t width = size_t(rowElements);
  std::vector<float> packed(rowsHeld.size() * width);
  for (size_t k = 0; k < 3; ++k) {
    if (toDevice) {
      packRows(host[k], rowsHeld, rowElements, packed.data());
      device->uploadRows(buffers[k]->data(), bytes, slots, packed.data());
    } else {
      device->downloadRows(packed.data(), buffers[k]->data(), bytes, slots);
      unpackRows(packed.data(), rowsHeld, rowElements, host[k]);
    }
  }
  (toDevice ? refillBytes : flushBytes) += 3 * rowsHeld.size() * bytes;
}

std::vector<int32_t>
CachedTable::blockIds(std::span<const int32_t> wholeIds) const {
  std::vector<int32_t> ids;
  ids.reserve(wholeIds.size());
  for (size_t i = 0; i < wholeIds.size(); ++i) {
    const int64_t id = wholeIds[i];
    if (id < 0 || id >= vocab)
      fail("token " + std::to_string(i) + " of the batch is id " +
           std::to_string(id) + ", outside the embedding's " +
           std::to_string(vocab) + " rows");
    if (id >= first && id < first + rows)
      ids.push_back(int32_t(id - first));
  }
  return ids;
}

void CachedTable::apply(const CacheTransfer &transfer,
                        const std::vector<int32_t> &ids,
                        const std::array<float *, 3> &host,
                        const std::vector<float> *staged) {
  const uint64_t bytes = uint64_t(rowElements) * sizeof(float);
  const size_t width = size_t(rowElements);
  // Victims first (their slots take the misses), each array in one packed
  // transfer; the host copy of a row is current unless a program wrote the
  // cache since it was fetched.
  const size_t victims = transfer.evictRows.size();
  if (victims && deviceValid && hostBehind) {
    std::vector<float> packed(victims * width);
    for (size_t k = 0; k < 3; ++k) {
      device->downloadRows(packed.data(), buffers[k]->data(), bytes,
                           transfer.evictSlots);
      unpackRows(packed.data(), transfer.evictRows, rowElements, host[k]);
    }
    counters.rowsWrittenBack += int64_t(victims);
    counters.bytesWrittenBack += 3 * victims * bytes;
  }
  for (int64_t row : transfer.evictRows)
    map[size_t(row)] = -1;
  // The misses, each array in one packed transfer: the lookahead's copies
  // (the host's values then, which nothing changed since: the rows were
  // not cached), else gathered from the host now.
  const size_t misses = transfer.fetchRows.size();
  if (misses && deviceValid) {
    std::vector<float> packed;
    if (!staged || staged->size() != 3 * misses * width) {
      packed.resize(3 * misses * width);
      for (size_t k = 0; k < 3; ++k)
        packRows(host[k], transfer.fetchRows, rowElements,
                 packed.data() + k * misses * width);
      staged = &packed;
    } else {
      counters.rowsPrefetched += int64_t(misses);
    }
    for (size_t k = 0; k < 3; ++k)
      device->uploadRows(buffers[k]->data(), bytes, transfer.fetchSlots,
                         staged->data() + k * misses * width);
    counters.rowsFetched += int64_t(misses);
    counters.bytesFetched += 3 * misses * bytes;
  }
  for (size_t i = 0; i < misses; ++i)
    map[size_t(transfer.fetchRows[i])] = int32_t(transfer.fetchSlots[i]);
  batchRows.assign(ids.begin(), ids.end());
  std::sort(batchRows.begin(), batchRows.end());
  batchRows.erase(std::unique(batchRows.begin(), batchRows.end()),
                  batchRows.end());
  counters.lookups = planner->lookups();
  counters.misses = planner->misses();
}

void CachedTable::prepare(std::span<const int32_t> wholeIds,
                          const std::array<float *, 3> &host,
                          Backend &backend) {
  const auto start = std::chrono::steady_clock::now();
  allocate(backend);
  if (!planner) {
    // Unranked: rows by id.
    std::vector<int64_t> order(static_cast<size_t>(rows));
    std::iota(order.begin(), order.end(), int64_t(0));
    rank(IdFrequencies::fromOrder(std::move(order), 0));
  }
  std::vector<int32_t> ids = blockIds(wholeIds);
  bool planned = false;
  if (ahead) {
    // The lookahead's plan goes through whatever comes: its rows are
    // cached, and the planner already counts them so.
    Ahead next = std::move(*ahead);
    ahead.reset();
    planned = next.ids == ids;
    apply(next.transfer, next.ids, host, &next.staged);
  }
  if (!planned)
    apply(planner->prepare(ids), ids, host, nullptr);
  counters.seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
}

void CachedTable::planAhead(std::span<const int32_t> nextWholeIds,
                            const std::array<float *, 3> &host) {
  if (!planner || ahead)
    return; // nothing prepared yet, or already planned
  const auto start = std::chrono::steady_clock::now();
  Ahead next;
  next.ids = blockIds(nextWholeIds);
  // The running batch's rows stay: its program is updating them.
  std::vector<int32_t> running(batchRows.begin(), batchRows.end());
  if (!planner->fits(next.ids, running)) {
    ++counters.lookaheadsSkipped;
    return;
  }
  next.transfer = planner->prepare(next.ids, running);
  // Packed per array: the values of every miss, then its exp_avg, then
  // its exp_avg_sq (what apply() uploads).
  const size_t misses = next.transfer.fetchRows.size();
  next.staged.resize(3 * misses * size_t(rowElements));
  for (size_t k = 0; k < 3; ++k)
    packRows(host[k], next.transfer.fetchRows, rowElements,
             next.staged.data() + k * misses * size_t(rowElements));
  ahead = std::move(next);
  counters.lookaheadSeconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
}

std::vector<int32_t> CachedTable::batchSlots(int64_t count) const {
  if (int64_t(batchRows.size()) > count)
    fail("a batch uses " + std::to_string(batchRows.size()) +
         " rows of an embedding block; the step lists at most " +
         std::to_string(count));
  std::vector<int32_t> slots(size_t(count), -1);
  for (size_t i = 0; i < batchRows.size(); ++i)
    slots[i] = map[size_t(batchRows[i])];
  return slots;
}

std::byte *CachedTable::data(size_t which, const std::array<float *, 3> &host,
                             Backend &backend) {
  allocate(backend);
  if (!deviceValid) {
    // Every cached row from the host (the host is current: whoever
    // changed it wrote the cache back first), counted apart from the
    // batches' traffic.
    copyCachedRows(/*toDevice=*/true, host);
    deviceValid = true;
    hostBehind = false;
  }
  return buffers[which]->data();
}

void CachedTable::writeBack(const std::array<float *, 3> &host) {
  if (!deviceValid || !hostBehind)
    return;
  copyCachedRows(/*toDevice=*/false, host);
  hostBehind = false;
}

} // namespace tpc::runtime
