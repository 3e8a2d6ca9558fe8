// The MPI backend on real ranks: run under mpirun with 2 or 4 ranks (ctest
// registers comm-np2 and comm-np4), or alone for the world without MPI
// (comm-np1). Tests for another world size skip themselves. Expected values
// come from rank ids and hand-written group tables, not from the groups the
// code under test computes.
//
// All ranks must issue the same collectives in the same order, so checks
// before a collective use EXPECT (never ASSERT, which would return early on
// one rank and leave the others waiting); ctest's timeout catches a hang.

#include "tpc/runtime/Comm.h"
#include "tpc/runtime/DType.h"
#include "tpc/runtime/SanitizerDefaults.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <sstream>

using namespace tpc::runtime;

TPC_ASAN_DEFAULT_OPTIONS(":detect_leaks=0") // an MPI program

namespace {

Comm &world() { return Comm::world(); }

/// The world ranks of `comm` in its rank order, asked of MPI itself.
std::vector<int> membersByMpi(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::vector<int> ranks(static_cast<size_t>(size));
  int mine = world().rank();
  MPI_Allgather(&mine, 1, MPI_INT, ranks.data(), 1, MPI_INT, comm);
  return ranks;
}

std::string errorOf(const std::vector<int64_t> &shape) {
  try {
    GridComm grid(shape);
  } catch (const std::runtime_error &error) {
    return error.what();
  }
  return "(no error)";
}

TEST(CommWorld, LaunchDecidesMpi) {
  const char *launched = std::getenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(world().usesMpi(), launched != nullptr);
  EXPECT_EQ(world().size(), launched ? std::atoi(launched) : 1);
  EXPECT_GE(world().rank(), 0);
  EXPECT_LT(world().rank(), world().size());
  EXPECT_EQ(&Comm::world(), &world());
}

TEST(CommWorld, AllSucceeded) {
  EXPECT_TRUE(world().allSucceeded(true));
  // Only the last rank says no: everyone hears it.
  EXPECT_EQ(world().allSucceeded(world().rank() != world().size() - 1), false);
}

// A failure on one rank stops every rank together: that rank sees its own
// error, the others AnotherRankFailed; when all succeed nothing is thrown.
TEST(CommWorld, RunTogether) {
  int ran = 0;
  EXPECT_NO_THROW(runTogether(world(), [&] { ++ran; }));
  EXPECT_EQ(ran, 1);
  const bool failing = world().rank() == world().size() - 1;
  auto failOnLastRank = [&] {
    if (failing)
      throw std::invalid_argument("bad flag on the last rank");
  };
  if (failing)
    EXPECT_THROW(runTogether(world(), failOnLastRank), std::invalid_argument);
  else
    EXPECT_THROW(runTogether(world(), failOnLastRank), AnotherRankFailed);
}

TEST(GridCommErrors, GridSizeMustEqualWorldSize) {
  const int n = world().size();
  EXPECT_EQ(errorOf({n + 1}), "the plan's grid [" + std::to_string(n + 1) +
                                  "] has " + std::to_string(n + 1) +
                                  " ranks, but " + std::to_string(n) +
                                  (n == 1 ? " is" : " are") + " running");
  if (n == 2)
    EXPECT_EQ(errorOf({2, 2}),
              "the plan's grid [2,2] has 4 ranks, but 2 are running");
  if (n == 4)
    EXPECT_EQ(errorOf({2}), "the plan's grid [2] has 2 ranks, but 4 are "
                            "running");
  if (n == 1)
    EXPECT_EQ(errorOf({2, 2}),
              "the plan's grid [2,2] has 4 ranks, but 1 is running");
  EXPECT_EQ(errorOf({0, n}),
            "the grid [0," + std::to_string(n) + "] has an axis of size 0");
}

TEST(GridCommErrors, BadAxesAndSizes) {
  GridComm grid({world().size()});
  EXPECT_THROW(grid.group({1}), std::invalid_argument);
  EXPECT_THROW(grid.group({-1}), std::invalid_argument);
  EXPECT_THROW(grid.group({0, 0}), std::invalid_argument);
  const size_t n = size_t(world().size());
  std::vector<float> in(3), out(3 * n + 1);
  EXPECT_THROW(grid.allGather({0}, in, out), std::invalid_argument);
  EXPECT_THROW(grid.reduceScatterSum({0}, out, in), std::invalid_argument);
  EXPECT_THROW(grid.allToAll({0}, in, out), std::invalid_argument);
  EXPECT_THROW(grid.broadcast({0}, in, int(n)), std::invalid_argument);
  EXPECT_TRUE(grid.stats().empty()); // rejected calls are not counted
}

// ---- 1D grid over the whole world ([2] under -np 2, [1] without MPI) ----

TEST(Grid1D, CoordsGroupsAndCollectives) {
  const int n = world().size(), r = world().rank();
  GridComm grid({n});
  EXPECT_EQ(grid.coords(), std::vector<int64_t>{r});
  EXPECT_EQ(grid.shape(), std::vector<int64_t>{n});

  const CommGroup &all = grid.group({0});
  std::vector<int> everyone(static_cast<size_t>(n));
  std::iota(everyone.begin(), everyone.end(), 0);
  EXPECT_EQ(all.worldRanks, everyone);
  EXPECT_EQ(all.rank, r);
  EXPECT_EQ(all.size, n);
  const CommGroup &self = grid.group({});
  EXPECT_EQ(self.worldRanks, std::vector<int>{r});
  EXPECT_EQ(self.size, 1);
  if (world().usesMpi()) {
    EXPECT_EQ(membersByMpi(all.comm), everyone);
    EXPECT_EQ(membersByMpi(self.comm), std::vector<int>{r});
  } else {
    EXPECT_EQ(all.comm, MPI_COMM_NULL);
  }
  // Created once.
  EXPECT_EQ(&grid.group({0}), &all);
  EXPECT_EQ(grid.group({0}).comm, all.comm);

  // all-reduce: element i is the sum over ranks of (rank + 1) * (i + 1).
  std::vector<float> data = {1.f * (r + 1), 2.f * (r + 1), 3.f * (r + 1)};
  grid.allReduceSum({0}, data);
  const float ranksum = float(n * (n + 1) / 2);
  EXPECT_EQ(data, (std::vector<float>{ranksum, 2 * ranksum, 3 * ranksum}));

  // all-gather: 2 floats per rank.
  std::vector<float> mine = {float(10 * r), float(10 * r + 1)};
  std::vector<float> gathered(size_t(2 * n), -1.f), expected;
  for (int q = 0; q < n; ++q)
    expected.insert(expected.end(), {float(10 * q), float(10 * q + 1)});
  grid.allGather({0}, mine, gathered);
  EXPECT_EQ(gathered, expected);

  // reduce-scatter: input element j on rank q is q * 100 + j.
  std::vector<float> full(size_t(2 * n)), slice(2, -1.f);
  for (size_t j = 0; j < full.size(); ++j)
    full[j] = float(r * 100 + int(j));
  grid.reduceScatterSum({0}, full, slice);
  const float base = float(100 * n * (n - 1) / 2);
  EXPECT_EQ(slice, (std::vector<float>{base + float(n * 2 * r),
                                       base + float(n * (2 * r + 1))}));

  // broadcast from the last rank.
  std::vector<float> value = {float(r), float(-r)};
  grid.broadcast({0}, value, n - 1);
  EXPECT_EQ(value, (std::vector<float>{float(n - 1), float(1 - n)}));

  // all-to-all: block j of rank q holds 1000 q + j.
  const size_t blocks = static_cast<size_t>(n);
  std::vector<float> send(blocks), received(blocks, -1.f),
      expectedBlocks(blocks);
  for (int j = 0; j < n; ++j) {
    send[size_t(j)] = float(1000 * r + j);
    expectedBlocks[size_t(j)] = float(1000 * j + r);
  }
  grid.allToAll({0}, send, received);
  EXPECT_EQ(received, expectedBlocks);
}

// bf16 collectives (mixed precision): bf16 on the wire, sums in f32 in
// group rank order with one rounding, so every rank gets the same bits and
// a value that bf16 cannot hold is rounded once, not per partial sum. Bytes
// count 2 per element.
TEST(Grid1D, Bf16Collectives) {
  const int n = world().size(), r = world().rank();
  GridComm grid({n});
  auto toBf16 = [](std::vector<float> values) {
    std::vector<uint16_t> bits(values.size());
    narrowToBf16(values.data(), bits.data(), int64_t(values.size()));
    return bits;
  };
  auto toF32 = [](const std::vector<uint16_t> &bits) {
    std::vector<float> values(bits.size());
    widenBf16(bits.data(), values.data(), int64_t(bits.size()));
    return values;
  };
  // all-reduce of 7 elements (not a multiple of the group): element i on
  // rank q is 1 + 2^-8 (i + 1) + q; bf16 holds 1 + 2^-7 k exactly, so each
  // rank's term is already rounded, and the sum in f32 rounds once.
  std::vector<float> mine(7), want(7);
  for (size_t i = 0; i < mine.size(); ++i) {
    mine[i] = 1.0f + std::ldexp(float(i + 1), -7) + float(r);
    float sum = 0.0f;
    for (int q = 0; q < n; ++q)
      sum +=
          bf16ToF32(f32ToBF16(1.0f + std::ldexp(float(i + 1), -7) + float(q)));
    want[i] = bf16ToF32(f32ToBF16(sum));
  }
  // Element 6: 256 on rank 0, 0.75 on the others. Rounded once the sum is
  // 256 + 0.75 (n - 1) to bf16's step of 2 (258 on 4 ranks); rounded after
  // each addition it would stay 256.
  mine[6] = r == 0 ? 256.0f : 0.75f;
  want[6] = bf16ToF32(f32ToBF16(256.0f + 0.75f * float(n - 1)));
  std::vector<uint16_t> data = toBf16(mine);
  grid.allReduceSum({0}, std::span<uint16_t>(data));
  EXPECT_EQ(toF32(data), want);

  // all-gather and all-to-all move bits.
  std::vector<uint16_t> part = toBf16({float(r) + 0.5f, -float(r)}),
                        gathered(size_t(2 * n));
  grid.allGather({0}, std::span<const uint16_t>(part),
                 std::span<uint16_t>(gathered));
  for (int q = 0; q < n; ++q) {
    EXPECT_EQ(bf16ToF32(gathered[size_t(2 * q)]), float(q) + 0.5f);
    EXPECT_EQ(bf16ToF32(gathered[size_t(2 * q + 1)]), -float(q));
  }
  std::vector<float> blocks(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j)
    blocks[size_t(j)] = float(16 * r + j);
  std::vector<uint16_t> send = toBf16(blocks), received(static_cast<size_t>(n));
  grid.allToAll({0}, std::span<const uint16_t>(send),
                std::span<uint16_t>(received));
  for (int j = 0; j < n; ++j)
    EXPECT_EQ(bf16ToF32(received[size_t(j)]), float(16 * j + r));

  // reduce-scatter: block j of rank q is (q + 1) * 0.25 + j; rank r keeps
  // block r's sum.
  std::vector<float> full(size_t(3 * n));
  for (size_t k = 0; k < full.size(); ++k)
    full[k] = float(r + 1) * 0.25f + float(k / 3);
  std::vector<uint16_t> in = toBf16(full), out(3);
  grid.reduceScatterSum({0}, std::span<const uint16_t>(in),
                        std::span<uint16_t>(out));
  const float expected = 0.25f * float(n * (n + 1) / 2) + float(n * r);
  for (uint16_t bits : out)
    EXPECT_EQ(bf16ToF32(bits), bf16ToF32(f32ToBF16(expected)));

  // Ring shift of a bf16 block.
  std::vector<uint16_t> block = toBf16({float(r), float(r) + 0.5f}), from(2);
  grid.startShift({0}, std::span<const uint16_t>(block),
                  std::span<uint16_t>(from));
  grid.finishShift(from.data());
  const int previous = (r + n - 1) % n;
  EXPECT_EQ(toF32(from),
            (std::vector<float>{float(previous), float(previous) + 0.5f}));

  auto stats = grid.stats();
  const double f = double(n - 1) / n;
  EXPECT_DOUBLE_EQ(stats["all_reduce"].bytes, 2 * f * 7 * 2);
  EXPECT_DOUBLE_EQ(stats["all_gather"].bytes, f * 2 * n * 2);
  EXPECT_DOUBLE_EQ(stats["all_to_all"].bytes, f * n * 2);
  EXPECT_DOUBLE_EQ(stats["reduce_scatter"].bytes, f * 3 * n * 2);
  EXPECT_DOUBLE_EQ(stats["ring_shift"].bytes, n == 1 ? 0.0 : 2 * 2);
}

TEST(Grid1D, Accounting) {
  const int n = world().size();
  GridComm grid({n});
  std::vector<float> buffer(size_t(12 * n));
  grid.allReduceSum({0}, std::span(buffer).first(10)); // 40 bytes
  grid.allGather({0}, std::span(buffer).first(3),
                 std::span(buffer).subspan(3, size_t(3 * n))); // 12n bytes
  grid.reduceScatterSum({0}, std::span(buffer).first(size_t(4 * n)),
                        std::span(buffer).last(4)); // 16n bytes
  grid.allToAll({0}, std::span(buffer).first(size_t(2 * n)),
                std::span(buffer).last(size_t(2 * n))); // 8n bytes
  grid.broadcast({0}, std::span(buffer).first(5), 0);   // 20 bytes
  grid.broadcast({0}, std::span(buffer).first(5), 0);
  grid.allReduceSum({}, std::span(buffer).first(7)); // one rank: 0 bytes
  auto stats = grid.stats();
  ASSERT_EQ(stats.size(), 5u);
  const double f = double(n - 1) / n;
  EXPECT_EQ(stats["all_reduce"].calls, 2);
  EXPECT_DOUBLE_EQ(stats["all_reduce"].bytes, 2 * f * 40);
  EXPECT_EQ(stats["all_gather"].calls, 1);
  EXPECT_DOUBLE_EQ(stats["all_gather"].bytes, f * 12 * n);
  EXPECT_EQ(stats["reduce_scatter"].calls, 1);
  EXPECT_DOUBLE_EQ(stats["reduce_scatter"].bytes, f * 16 * n);
  EXPECT_EQ(stats["all_to_all"].calls, 1);
  EXPECT_DOUBLE_EQ(stats["all_to_all"].bytes, f * 8 * n);
  EXPECT_EQ(stats["broadcast"].calls, 2);
  EXPECT_DOUBLE_EQ(stats["broadcast"].bytes, 2 * f * 20);
  if (n == 2) { // the same numbers, by hand
    EXPECT_DOUBLE_EQ(stats["all_reduce"].bytes, 40);
    EXPECT_DOUBLE_EQ(stats["all_gather"].bytes, 12);
    EXPECT_DOUBLE_EQ(stats["reduce_scatter"].bytes, 16);
    EXPECT_DOUBLE_EQ(stats["all_to_all"].bytes, 8);
    EXPECT_DOUBLE_EQ(stats["broadcast"].bytes, 20);
  }
  if (n == 1)
    for (const auto &[kind, s] : stats)
      EXPECT_EQ(s.bytes, 0.0) << kind;
  grid.resetStats();
  EXPECT_TRUE(grid.stats().empty());
}

// Ring shifts: every rank receives rank r-1's block; two shifts may be in
// flight at once and complete in any order; each counts its block's bytes.
TEST(Grid1D, RingShift) {
  const int n = world().size(), r = world().rank();
  GridComm grid({n});
  std::vector<float> a(5), b(3), fromA(5), fromB(3);
  for (size_t k = 0; k < a.size(); ++k)
    a[k] = float(100 * r + int(k));
  for (size_t k = 0; k < b.size(); ++k)
    b[k] = float(-100 * r - int(k));
  grid.startShift({0}, a, fromA);
  EXPECT_THROW(grid.startShift({0}, a, fromA), std::invalid_argument);
  grid.startShift({0}, b, fromB);
  grid.finishShift(fromB.data());
  grid.finishShift(fromA.data());
  EXPECT_THROW(grid.finishShift(fromA.data()), std::invalid_argument);
  const int previous = (r + n - 1) % n;
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_EQ(fromA[k], float(100 * previous + int(k))) << k;
  for (size_t k = 0; k < b.size(); ++k)
    EXPECT_EQ(fromB[k], float(-100 * previous - int(k))) << k;
  EXPECT_THROW(grid.startShift({0}, a, fromB), std::invalid_argument);
  auto stats = grid.stats();
  EXPECT_EQ(stats["ring_shift"].calls, 2); // rejected starts do not count
  EXPECT_DOUBLE_EQ(stats["ring_shift"].bytes, n == 1 ? 0.0 : 4.0 * (5 + 3));
}

// Pipeline transfers: each rank sends two tagged buffers to the next
// coordinate and receives the previous one's, posting the receives in the
// other tag order and waiting in yet another; tags, not posting order,
// match them. Only sends count, their bytes.
TEST(Grid1D, PipelineTransfers) {
  const int n = world().size(), r = world().rank();
  GridComm grid({n});
  std::vector<float> first(4), second(2), intoFirst(4, -1.f),
      intoSecond(2, -1.f);
  for (size_t k = 0; k < first.size(); ++k)
    first[k] = float(10 * r + int(k));
  for (size_t k = 0; k < second.size(); ++k)
    second[k] = float(-10 * r - int(k));
  auto bytes = [](std::vector<float> &v) {
    return std::as_writable_bytes(std::span(v));
  };
  if (n == 1) { // no other coordinate to talk to
    EXPECT_THROW(grid.startSend(0, 0, 1, std::as_bytes(std::span(first))),
                 std::invalid_argument);
    EXPECT_THROW(grid.finishTransfer(first.data()), std::invalid_argument);
    EXPECT_TRUE(grid.stats().empty());
    return;
  }
  const int next = (r + 1) % n, previous = (r + n - 1) % n;
  EXPECT_THROW(grid.startSend(0, r, 1, std::as_bytes(std::span(first))),
               std::invalid_argument); // itself
  EXPECT_THROW(grid.startSend(0, n, 1, std::as_bytes(std::span(first))),
               std::invalid_argument); // outside the axis
  grid.startReceive(0, previous, 7, bytes(intoSecond));
  grid.startReceive(0, previous, 3, bytes(intoFirst));
  EXPECT_THROW(grid.startReceive(0, previous, 3, bytes(intoFirst)),
               std::invalid_argument); // already in flight
  grid.startSend(0, next, 3, std::as_bytes(std::span(first)));
  grid.startSend(0, next, 7, std::as_bytes(std::span(second)));
  grid.finishTransfer(intoFirst.data());
  grid.finishTransfer(second.data());
  grid.finishTransfer(intoSecond.data());
  grid.finishTransfer(first.data());
  EXPECT_THROW(grid.finishTransfer(first.data()), std::invalid_argument);
  for (size_t k = 0; k < first.size(); ++k)
    EXPECT_EQ(intoFirst[k], float(10 * previous + int(k))) << k;
  for (size_t k = 0; k < second.size(); ++k)
    EXPECT_EQ(intoSecond[k], float(-10 * previous - int(k))) << k;
  auto stats = grid.stats();
  EXPECT_EQ(stats["send"].calls, 2);
  EXPECT_DOUBLE_EQ(stats["send"].bytes, 4.0 * (4 + 2));
}

TEST(Grid1D, InPlace) {
  const int n = world().size(), r = world().rank();
  GridComm grid({n});
  const size_t blocks = static_cast<size_t>(n);
  std::vector<float> buffer(blocks, -1.f), expected(blocks);
  std::iota(expected.begin(), expected.end(), 0.f);
  buffer[size_t(r)] = float(r);
  grid.allGather({0}, std::span(buffer).subspan(size_t(r), 1), buffer);
  EXPECT_EQ(buffer, expected);
  for (int j = 0; j < n; ++j)
    buffer[size_t(j)] = float(10 * r + j);
  grid.allToAll({0}, buffer, buffer);
  for (int j = 0; j < n; ++j)
    expected[size_t(j)] = float(10 * j + r);
  EXPECT_EQ(buffer, expected);
}

// ---- 2x2 grid (-np 4) ----

class Grid2x2 : public testing::Test {
protected:
  void SetUp() override {
    if (world().size() != 4)
      GTEST_SKIP() << "needs 4 ranks (mpirun -np 4)";
  }
  int r = world().rank();
  int row = r / 2, col = r % 2;
};

struct Expected {
  std::vector<int> axes;
  std::vector<int> members; // world ranks in group order
  int rank;
};

/// Hand-written: rank = 2 * row + col on [2, 2].
std::vector<Expected> expectedGroups(int row, int col) {
  const int r = 2 * row + col;
  return {
      {{0}, {col, 2 + col}, row},            // a column: same col
      {{1}, {2 * row, 2 * row + 1}, col},    // a row: same row
      {{0, 1}, {0, 1, 2, 3}, r},             // everyone, row-major
      {{1, 0}, {0, 2, 1, 3}, 2 * col + row}, // everyone, column-major
      {{}, {r}, 0},                          // alone
  };
}

TEST_F(Grid2x2, CoordsAndGroups) {
  GridComm grid({2, 2});
  EXPECT_EQ(grid.coords(), (std::vector<int64_t>{row, col}));
  EXPECT_EQ(GridComm::rankOf({2, 2}, grid.coords()), r);
  for (const Expected &e : expectedGroups(row, col)) {
    const CommGroup &g = grid.group(e.axes);
    SCOPED_TRACE("axes of size " + std::to_string(e.axes.size()));
    EXPECT_EQ(g.axes, e.axes);
    EXPECT_EQ(g.worldRanks, e.members);
    EXPECT_EQ(g.rank, e.rank);
    EXPECT_EQ(g.size, int(e.members.size()));
    EXPECT_NE(g.comm, MPI_COMM_NULL);
    EXPECT_EQ(membersByMpi(g.comm), e.members);
  }
  // Each communicator is created once: later requests return the cached one.
  for (const Expected &e : expectedGroups(row, col)) {
    const CommGroup &first = grid.group(e.axes);
    const CommGroup &again = grid.group(e.axes);
    EXPECT_EQ(&first, &again);
    EXPECT_EQ(first.comm, again.comm);
  }
  // {0, 1} and {1, 0} are different (their rank orders differ).
  EXPECT_NE(grid.group({0, 1}).comm, grid.group({1, 0}).comm);
}

TEST_F(Grid2x2, Collectives) {
  GridComm grid({2, 2});
  // all-reduce over a column ({0}): ranks col and 2 + col.
  std::vector<float> data = {float(r), float(10 * r), 1.f};
  grid.allReduceSum({0}, data);
  const float colSum = float(col + (2 + col));
  EXPECT_EQ(data, (std::vector<float>{colSum, 10 * colSum, 2.f}));
  // over everyone.
  data = {float(r), 1.f};
  grid.allReduceSum({0, 1}, data);
  EXPECT_EQ(data, (std::vector<float>{6.f, 4.f}));
  // over nobody: unchanged.
  data = {float(r)};
  grid.allReduceSum({}, data);
  EXPECT_EQ(data, std::vector<float>{float(r)});

  // all-gather over a row ({1}), 2 floats each, in column order.
  std::vector<float> mine = {float(r), float(100 + r)};
  std::vector<float> out(4, -1.f);
  grid.allGather({1}, mine, out);
  const float a = float(2 * row), b = float(2 * row + 1);
  EXPECT_EQ(out, (std::vector<float>{a, 100 + a, b, 100 + b}));
  // over {1, 0}: column-major order 0, 2, 1, 3.
  std::vector<float> all(8, -1.f);
  grid.allGather({1, 0}, mine, all);
  EXPECT_EQ(all, (std::vector<float>{0, 100, 2, 102, 1, 101, 3, 103}));

  // reduce-scatter over everyone: input element j on rank q is (q + 1)(j + 1);
  // the sum over q is 10 (j + 1); rank r gets elements 2r and 2r + 1.
  std::vector<float> full(8), slice(2, -1.f);
  for (int j = 0; j < 8; ++j)
    full[size_t(j)] = float((r + 1) * (j + 1));
  grid.reduceScatterSum({0, 1}, full, slice);
  EXPECT_EQ(slice, (std::vector<float>{float(10 * (2 * r + 1)),
                                       float(10 * (2 * r + 2))}));
  // over a column: group rank = row; members col, 2 + col.
  std::vector<float> half(4), part(2, -1.f);
  for (int j = 0; j < 4; ++j)
    half[size_t(j)] = float(100 * r + j);
  grid.reduceScatterSum({0}, half, part);
  const float members = float(100 * (col + 2 + col));
  EXPECT_EQ(part, (std::vector<float>{members + float(2 * row) * 2,
                                      members + float(2 * row + 1) * 2}));

  // all-to-all over a row: block j goes to the rank in column j.
  std::vector<float> send = {float(10 * r), float(10 * r + 1)}, recv(2, -1.f);
  grid.allToAll({1}, send, recv);
  EXPECT_EQ(recv, (std::vector<float>{float(10 * (2 * row) + col),
                                      float(10 * (2 * row + 1) + col)}));

  // broadcast over a column from row 1, and over everyone from rank 2.
  std::vector<float> value = {float(r), 7.f};
  grid.broadcast({0}, value, 1);
  EXPECT_EQ(value, (std::vector<float>{float(2 + col), 7.f}));
  value = {float(r)};
  grid.broadcast({0, 1}, value, 2);
  EXPECT_EQ(value, std::vector<float>{2.f});
}

TEST_F(Grid2x2, Accounting) {
  GridComm grid({2, 2});
  std::vector<float> buffer(64);
  std::span<float> s(buffer);
  grid.allReduceSum({0, 1}, s.first(8));            // n 4: 2 * 3/4 * 32 = 48
  grid.allReduceSum({0}, s.first(5));               // n 2: 2 * 1/2 * 20 = 20
  grid.allReduceSum({}, s.first(4));                // n 1: 0
  grid.allGather({1}, s.first(3), s.subspan(8, 6)); // full 24: 12
  grid.allGather({0, 1}, s.first(2), s.subspan(16, 8));        // full 32: 24
  grid.reduceScatterSum({0, 1}, s.first(8), s.subspan(32, 2)); // 32: 24
  grid.allToAll({0, 1}, s.first(8), s.subspan(40, 8));         // 32: 24
  grid.broadcast({0}, s.first(6), 0);                          // 24: 12
  auto stats = grid.stats();
  ASSERT_EQ(stats.size(), 5u);
  EXPECT_EQ(stats["all_reduce"].calls, 3);
  EXPECT_DOUBLE_EQ(stats["all_reduce"].bytes, 68);
  EXPECT_EQ(stats["all_gather"].calls, 2);
  EXPECT_DOUBLE_EQ(stats["all_gather"].bytes, 36);
  EXPECT_EQ(stats["reduce_scatter"].calls, 1);
  EXPECT_DOUBLE_EQ(stats["reduce_scatter"].bytes, 24);
  EXPECT_EQ(stats["all_to_all"].calls, 1);
  EXPECT_DOUBLE_EQ(stats["all_to_all"].bytes, 24);
  EXPECT_EQ(stats["broadcast"].calls, 1);
  EXPECT_DOUBLE_EQ(stats["broadcast"].bytes, 12);
  grid.resetStats();
  EXPECT_TRUE(grid.stats().empty());
}

/// Ranks other than 0 print only their failures, tagged with the rank.
class FailurePrinter : public testing::EmptyTestEventListener {
public:
  explicit FailurePrinter(int rank) : rank(rank) {}
  void OnTestPartResult(const testing::TestPartResult &result) override {
    if (!result.failed())
      return;
    std::ostringstream line;
    line << "rank " << rank << ": "
         << (result.file_name() ? result.file_name() : "?") << ":"
         << result.line_number() << ": Failure\n"
         << result.message() << "\n";
    std::cerr << line.str() << std::flush;
  }
  void OnTestEnd(const testing::TestInfo &info) override {
    if (info.result()->Failed())
      std::cerr << ("rank " + std::to_string(rank) + ": [  FAILED  ] " +
                    info.test_suite_name() + "." + info.name() + "\n")
                << std::flush;
  }

private:
  int rank;
};

} // namespace

int main(int argc, char **argv) {
  Comm &comm = Comm::world();
  testing::InitGoogleTest(&argc, argv);
  if (comm.rank() != 0) {
    testing::TestEventListeners &listeners =
        testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(comm.rank()));
  }
  const int result = RUN_ALL_TESTS();
  // Every rank exits with the same status: failed if any rank failed.
  const bool ok = comm.allSucceeded(result == 0);
  if (comm.rank() == 0 && result == 0 && !ok)
    std::cerr << "tpc-comm-tests: a test failed on another rank\n";
  return ok ? 0 : 1;
}
