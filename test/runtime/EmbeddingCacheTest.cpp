// The embedding cache's planning (docs/embedding-cache.md): frequencies
// counted over the training windows, warm-up, misses and evictions, the
// lookahead's protection of the running batch, and, over a long random run,
// that applying the planned transfers to a host table and a device cache
// leaves the table exactly as updating it in place would; a rank's cache of
// its block on the CPU and staged-cpu backends (CachedTable).
#include "tpc/runtime/EmbeddingCache.h"

#include "tpc/runtime/Backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>

using namespace tpc::runtime;

namespace {
/// The message of the std::invalid_argument `run` throws, or "".
template <typename Run> std::string errorOf(Run run) {
  try {
    run();
  } catch (const std::invalid_argument &error) {
    return error.what();
  }
  return "";
}
} // namespace

TEST(IdFrequencies, CountsTheTrainingWindowsAndRanksByCount) {
  // Windows of 3 tokens: [0 1 1] and [2 2 2]; the last token (3) is only a
  // target, so row 3 counts as never used.
  const std::vector<int32_t> stream = {0, 1, 1, 2, 2, 2, 3};
  IdFrequencies freq = IdFrequencies::count(stream, 5, 3);
  EXPECT_EQ(freq.order(), (std::vector<int64_t>{2, 1, 0, 3, 4}));
  EXPECT_EQ(freq.rank(0), 2);
  EXPECT_EQ(freq.maxDistinctPerBatch(), 2);
  EXPECT_NE(errorOf([] {
              IdFrequencies::count(std::vector<int32_t>{0, 7, 1, 1}, 5, 3);
            }).find("token 1 is id 7, outside the embedding's 5 rows"),
            std::string::npos);
  EXPECT_NE(errorOf([] {
              IdFrequencies::fromOrder({0, 2, 2}, 1);
            }).find("each of its 3 rows once"),
            std::string::npos);
}

TEST(CachePlanner, RefusesCachesThatCannotServeABatch) {
  const std::vector<int32_t> stream = {0, 1, 2, 3, 0, 1, 2};
  auto make = [&](int64_t capacity, double warmup) {
    return [=] {
      CachePlanner(IdFrequencies::count(stream, 6, 3), capacity, warmup);
    };
  };
  EXPECT_NE(errorOf(make(0, 0.7)).find("must hold 1 to the table's 6"),
            std::string::npos);
  EXPECT_NE(errorOf(make(7, 0.7)).find("must hold 1 to the table's 6"),
            std::string::npos);
  EXPECT_NE(errorOf(make(2, 0.7)).find("uses 3 distinct rows"),
            std::string::npos);
  EXPECT_NE(errorOf(make(3, 1.5)).find("warm-up ratio"), std::string::npos);
  EXPECT_EQ(errorOf(make(3, 0.7)), "");
}

TEST(CachePlanner, FitsCountsBothBatchesDistinctRows) {
  const std::vector<int32_t> stream = {0, 1, 2, 3, 0, 1, 2};
  CachePlanner cache(IdFrequencies::count(stream, 6, 3), 4);
  EXPECT_TRUE(
      cache.fits(std::vector<int32_t>{0, 1, 1}, std::vector<int32_t>{2, 3, 0}));
  EXPECT_FALSE(
      cache.fits(std::vector<int32_t>{0, 1, 4}, std::vector<int32_t>{2, 3}));
}

TEST(CachePlanner, FetchesMissesAndEvictsTheLeastFrequentUnusedRows) {
  // Counts: row 0 x4, 1 x3, 2 x2, 3 x1, 4 and 5 never.
  const std::vector<int32_t> stream = {0, 0, 0, 0, 1, 1, 1, 2, 2, 3, 9};
  CachePlanner cache(IdFrequencies::count(stream, 10, 2), 4, 0.5);
  CacheTransfer warm = cache.warmUp();
  EXPECT_EQ(warm.fetchRows, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(warm.fetchSlots, (std::vector<int64_t>{0, 1}));

  // Two misses fill the free slots, most frequent first.
  CacheTransfer t = cache.prepare(std::vector<int32_t>{5, 2, 0, 5});
  EXPECT_TRUE(t.evictRows.empty());
  EXPECT_EQ(t.fetchRows, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(t.fetchSlots, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(cache.slotsOf(std::vector<int32_t>{5, 2, 0, 5}),
            (std::vector<int32_t>{3, 2, 0, 3}));
  EXPECT_EQ(cache.lookups(), 4);
  EXPECT_EQ(cache.misses(), 3);

  // Full: rows 3 and 4 push out the least frequent rows this batch does not
  // use (5, then 2); the running batch {1} stays whatever its rank.
  t = cache.prepare(std::vector<int32_t>{3, 4, 0}, std::vector<int32_t>{1});
  EXPECT_EQ(t.evictRows, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(t.evictSlots, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.fetchRows, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(t.fetchSlots, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(cache.rowIn(2), 3);
  EXPECT_EQ(cache.slotOf(5), -1);

  // Five distinct rows at once do not fit in four slots.
  EXPECT_NE(errorOf([&] {
              cache.prepare(std::vector<int32_t>{6, 7, 8},
                            std::vector<int32_t>{0, 1});
            }).find("needs 5 distinct embedding rows"),
            std::string::npos);
  EXPECT_NE(
      errorOf([&] { cache.prepare(std::vector<int32_t>{10}); }).find("id 10"),
      std::string::npos);
}

TEST(CachePlanner, TransfersKeepTheTableExactOverALongRun) {
  // Zipf-like ids over 500 rows, batches of 64, a cache of 80 rows with the
  // lookahead's protection of the batch before. Each step adds a distinct
  // value to the rows its batch uses: in the cache's slots for the cached
  // run, in the table itself for the reference. Evictions write back, so
  // after a final flush the tables are equal, element for element.
  const int64_t rows = 500, batch = 64, steps = 200, dim = 3;
  std::mt19937 random(7);
  std::vector<double> weights;
  for (int64_t r = 0; r < rows; ++r)
    weights.push_back(1.0 / std::pow(double(r + 1), 1.1));
  std::discrete_distribution<int32_t> zipf(weights.begin(), weights.end());
  std::vector<int32_t> stream(size_t(batch * steps + 1));
  for (int32_t &id : stream)
    id = zipf(random);
  CachePlanner cache(IdFrequencies::count(stream, rows, batch), 80);

  std::vector<float> table(size_t(rows * dim)), reference;
  for (size_t i = 0; i < table.size(); ++i)
    table[i] = float(i) * 0.25f;
  reference = table;
  std::vector<float> device(size_t(cache.capacity() * dim), -1.0f);
  auto apply = [&](const CacheTransfer &t) {
    for (size_t k = 0; k < t.evictRows.size(); ++k)
      for (int64_t d = 0; d < dim; ++d)
        table[size_t(t.evictRows[k] * dim + d)] =
            device[size_t(t.evictSlots[k] * dim + d)];
    for (size_t k = 0; k < t.fetchRows.size(); ++k)
      for (int64_t d = 0; d < dim; ++d)
        device[size_t(t.fetchSlots[k] * dim + d)] =
            table[size_t(t.fetchRows[k] * dim + d)];
  };
  apply(cache.warmUp());
  std::span<const int32_t> previous;
  int64_t fetched = 0;
  for (int64_t s = 0; s < steps; ++s) {
    std::span<const int32_t> ids(stream.data() + s * batch, size_t(batch));
    CacheTransfer t = cache.prepare(ids, previous);
    fetched += int64_t(t.fetchRows.size());
    apply(t);
    const std::vector<int32_t> slots = cache.slotsOf(ids);
    for (size_t i = 0; i < ids.size(); ++i)
      for (int64_t d = 0; d < dim; ++d) {
        const float delta = float(s + 1) * 0.5f + float(d);
        device[size_t(slots[i] * dim + d)] += delta;
        reference[size_t(ids[i] * dim + d)] += delta;
      }
    previous = ids;
  }
  for (int64_t slot = 0; slot < cache.capacity(); ++slot)
    if (cache.rowIn(slot) >= 0)
      for (int64_t d = 0; d < dim; ++d)
        table[size_t(cache.rowIn(slot) * dim + d)] =
            device[size_t(slot * dim + d)];
  EXPECT_EQ(table, reference);
  // The frequent rows stay: most lookups hit.
  EXPECT_LT(double(cache.misses()) / double(cache.lookups()), 0.25);
  EXPECT_LT(fetched, steps * batch / 4);
}

namespace {
/// A block's host arrays: value, exp_avg, exp_avg_sq of rows x dim floats,
/// each element distinct.
struct HostBlock {
  std::array<std::vector<float>, 3> arrays;
  HostBlock(int64_t rows, int64_t dim) {
    for (size_t k = 0; k < 3; ++k)
      for (int64_t i = 0; i < rows * dim; ++i)
        arrays[k].push_back(float(k * 1000 + i) * 0.5f);
  }
  std::array<float *, 3> pointers() {
    return {arrays[0].data(), arrays[1].data(), arrays[2].data()};
  }
};

/// The device array `which` of `cache`, on the host.
std::vector<float> deviceCopy(CachedTable &cache, size_t which, HostBlock &host,
                              Backend &backend, int64_t dim) {
  std::vector<float> out(size_t(cache.slots() * dim));
  backend.download(out.data(), cache.data(which, host.pointers(), backend),
                   out.size() * sizeof(float));
  return out;
}
} // namespace

// On the CPU, staged-cpu and, where this build has it and a GPU is usable,
// cuda (its packed row transfers); skipped otherwise.
class CachedTableOn : public ::testing::TestWithParam<const char *> {
protected:
  void SetUp() override {
    try {
      device = &deviceBackend(GetParam());
    } catch (const std::invalid_argument &why) {
      GTEST_SKIP() << why.what();
    }
  }
  Backend &backend() { return *device; }

private:
  Backend *device = nullptr;
};

// A rank's block (rows 10..19 of 30) cached in 4 slots: each batch's rows
// are cached and the map and row list say where; a "step" that adds to the
// cached rows on the device reaches the host through evictions and the
// final write-back, as updating the host table would.
TEST_P(CachedTableOn, CachesEachBatchAndWritesUpdatesBack) {
  Backend &device = backend();
  const int64_t dim = 3;
  CachedTable cache(/*vocabulary=*/30, /*firstRow=*/10, /*blockRows=*/10,
                    /*slots=*/4, dim);
  HostBlock host(10, dim), reference(10, dim);
  const std::vector<std::vector<int32_t>> batches = {
      {12, 3, 15, 12}, {11, 25, 19, 18}, {15, 16, 17, 10}, {12, 13}};
  for (const std::vector<int32_t> &batch : batches) {
    cache.prepare(batch, host.pointers(), device);
    std::vector<int64_t> used;
    for (int32_t id : batch)
      if (id >= 10 && id < 20)
        used.push_back(id - 10);
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    // The row list: the batch's block rows by ascending row, then -1.
    const std::vector<int32_t> listed = cache.batchSlots(6);
    for (size_t i = 0; i < 6; ++i)
      EXPECT_EQ(listed[i], i < used.size() ? cache.slotMap()[used[i]] : -1);
    // Every used row is cached, with its current values.
    for (size_t k = 0; k < 3; ++k) {
      std::vector<float> slots = deviceCopy(cache, k, host, device, dim);
      for (int64_t row : used) {
        const int32_t slot = cache.slotMap()[size_t(row)];
        ASSERT_GE(slot, 0);
        for (int64_t d = 0; d < dim; ++d) {
          EXPECT_EQ(slots[size_t(slot * dim + d)],
                    reference.arrays[k][size_t(row * dim + d)]);
          // The step: the device row moves, as does the reference's.
          slots[size_t(slot * dim + d)] += 1.0f + float(k);
          reference.arrays[k][size_t(row * dim + d)] += 1.0f + float(k);
        }
      }
      device.upload(cache.data(k, host.pointers(), device), slots.data(),
                    slots.size() * sizeof(float));
    }
    cache.deviceWritten();
  }
  cache.writeBack(host.pointers());
  EXPECT_EQ(host.arrays, reference.arrays);
  const CacheStats &stats = cache.stats();
  EXPECT_EQ(stats.lookups, 12); // the batches' ids in the block
  EXPECT_GT(stats.rowsWrittenBack, 0);
  EXPECT_EQ(stats.bytesFetched,
            uint64_t(stats.rowsFetched) * 3 * dim * sizeof(float));
  EXPECT_NE(errorOf([&] {
              cache.prepare(std::vector<int32_t>{30}, host.pointers(), device);
            }).find("outside the embedding's 30 rows"),
            std::string::npos);
}

// After the host arrays change (a checkpoint loaded), the cached rows are
// fetched again before their next use.
TEST_P(CachedTableOn, RefetchesAfterTheHostChanged) {
  Backend &device = backend();
  CachedTable cache(8, 0, 8, 2, 2);
  HostBlock host(8, 2);
  cache.prepare(std::vector<int32_t>{5}, host.pointers(), device);
  const int32_t slot = cache.slotMap()[5];
  host.arrays[0][10] = 42.0f; // row 5, column 0
  cache.hostChanged();
  EXPECT_EQ(deviceCopy(cache, 0, host, device, 2)[size_t(slot * 2)], 42.0f);
}

// The lookahead plans and gathers the next batch while the current one's
// program runs: the next prepare() of those ids only applies it; another
// batch in between (an evaluation) still finds its rows, with their values.
TEST_P(CachedTableOn, LookaheadFetchesTheNextBatchAhead) {
  Backend &device = backend();
  const int64_t dim = 2;
  CachedTable cache(12, 0, 12, 6, dim);
  HostBlock host(12, dim), reference(12, dim);
  auto step = [&](const std::vector<int32_t> &batch) {
    // What a train step does: every used row of the cache moves.
    std::vector<int32_t> rows = batch;
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    std::vector<float> slots = deviceCopy(cache, 0, host, device, dim);
    for (int32_t row : rows)
      for (int64_t d = 0; d < dim; ++d) {
        slots[size_t(cache.slotMap()[size_t(row)] * dim + d)] *= 1.5f;
        reference.arrays[0][size_t(row * dim + d)] *= 1.5f;
      }
    device.upload(cache.data(0, host.pointers(), device), slots.data(),
                  slots.size() * sizeof(float));
    cache.deviceWritten();
  };
  // Unranked, rows rank by id; the warm-up caches rows 0-4.
  const std::vector<int32_t> first = {0, 1, 2}, second = {5, 6, 7},
                             third = {8, 9, 0}, evaluation = {9, 10, 11, 1},
                             wide = {10, 11, 2, 3};
  cache.prepare(first, host.pointers(), device);
  cache.planAhead(second, host.pointers()); // while `first` runs
  step(first);
  cache.prepare(second, host.pointers(), device);
  EXPECT_EQ(cache.stats().rowsPrefetched, 3);
  cache.planAhead(third, host.pointers());
  step(second);
  // An evaluation between: the planned rows go in, then its own.
  cache.prepare(evaluation, host.pointers(), device);
  const std::vector<float> slots = deviceCopy(cache, 0, host, device, dim);
  for (int32_t row : evaluation)
    for (int64_t d = 0; d < dim; ++d)
      EXPECT_EQ(slots[size_t(cache.slotMap()[size_t(row)] * dim + d)],
                reference.arrays[0][size_t(row * dim + d)]);
  cache.prepare(third, host.pointers(), device);
  step(third);
  // With the running batch's 3 rows, 4 more do not fit in 6 slots: no
  // lookahead, the next prepare() fetches its rows itself.
  cache.planAhead(wide, host.pointers());
  EXPECT_EQ(cache.stats().lookaheadsSkipped, 1);
  cache.prepare(wide, host.pointers(), device);
  step(wide);
  cache.writeBack(host.pointers());
  EXPECT_EQ(host.arrays, reference.arrays);
}

INSTANTIATE_TEST_SUITE_P(Backends, CachedTableOn,
                         ::testing::Values("cpu", "staged-cpu", "cuda"));
