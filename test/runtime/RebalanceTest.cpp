// Block assignments of rebalance points, the layout of a rebalanced
// parameter in a rank's storage, re-layouts within a rank, and the parsing of
// tp-run's straggler emulation. Moves between ranks run under mpirun in
// test/integration/rebalancing.sh.
#include "tpc/runtime/Executor.h"
#include "tpc/runtime/Init.h"
#include "tpc/runtime/Rebalancer.h"

#include <gtest/gtest.h>

using namespace tpc::runtime;
namespace fb = tpc::plan;

namespace {
struct PointSpec {
  std::string name;
  int64_t blocks, capacity;
};

/// A plan for a grid of 2 with, per point, one parameter of the point's
/// name and shape [3, 2 x blocks] whose dimension 1 is split over axis 0 and
/// holds the point's blocks (2 columns each), and no program. By default
/// "w" of shape [3, 8]: 4 blocks, capacity 3.
LoadedPlan rebalancedPlan(const std::vector<PointSpec> &specs = {{"w", 4, 3}}) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<fb::Param>> params;
  std::vector<flatbuffers::Offset<fb::RebalancePoint>> points;
  for (size_t i = 0; i < specs.size(); ++i) {
    const PointSpec &spec = specs[i];
    std::vector<flatbuffers::Offset<fb::Axes>> split = {
        fb::CreateAxes(b, b.CreateVector(std::vector<int64_t>{})),
        fb::CreateAxes(b, b.CreateVector(std::vector<int64_t>{0}))};
    params.push_back(fb::CreateParam(
        b, b.CreateString(spec.name), fb::DType::F32,
        b.CreateVector(std::vector<int64_t>{3, 2 * spec.blocks}),
        fb::Init::Normal, 1.0, b.CreateVector(split), 0,
        b.CreateVector(std::vector<int32_t>{-1, int32_t(i)})));
    points.push_back(fb::CreateRebalancePoint(b, b.CreateString(spec.name), 0,
                                              spec.blocks, spec.capacity));
  }
  std::vector<flatbuffers::Offset<fb::Program>> programs;
  const fb::Checksum unsealed(0);
  auto plan = fb::CreatePlan(
      b, kPlanVersionMajor, kPlanVersionMinor, b.CreateString("test"),
      b.CreateVector(std::vector<int64_t>{2}), 0, 0, b.CreateVector(params),
      b.CreateVector(programs), &unsealed, b.CreateVector(points));
  fb::FinishPlanBuffer(b, plan);
  std::vector<uint8_t> bytes(b.GetBufferPointer(),
                             b.GetBufferPointer() + b.GetSize());
  EXPECT_TRUE(sealPlan(bytes));
  return LoadedPlan::fromBytes(bytes.data(), bytes.size(), 2, "plan");
}

/// The whole initial [3, 8] parameter.
std::vector<float> wholeParameter() {
  std::vector<float> whole(24);
  std::vector<int64_t> shape = {3, 8}, offset = {0, 0};
  fillNormal(whole, shape, {offset, shape}, parameterKey("w"), 1.0f);
  return whole;
}

/// Block `id` (columns 2 id, 2 id + 1) of the whole parameter, row-major.
std::vector<float> column(const std::vector<float> &whole, int64_t id) {
  std::vector<float> block;
  for (int64_t row = 0; row < 3; ++row)
    for (int64_t c = 0; c < 2; ++c)
      block.push_back(whole[size_t(row * 8 + 2 * id + c)]);
  return block;
}

/// The block a rank stores at `stored`, read out of its storage.
std::vector<float> storedBlock(const std::vector<float> &storage,
                               const StoredBlock &stored) {
  std::vector<float> block;
  for (int64_t row = 0; row < 3; ++row)
    for (int64_t c = 0; c < 2; ++c)
      block.push_back(storage[size_t(stored.base + row * stored.regionShape[1] +
                                     stored.regionOffset[1] + c)]);
  return block;
}
} // namespace

TEST(BlockAssignment, StartsEvenAndValidatesChanges) {
  LoadedPlan plan = rebalancedPlan();
  BlockAssignment blocks = BlockAssignment::even(plan.plan());
  ASSERT_EQ(blocks.numPoints(), 1u);
  EXPECT_EQ(
      std::vector<int64_t>(blocks.held(0, 0).begin(), blocks.held(0, 0).end()),
      (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(blocks.owner(0, 3), 1);
  EXPECT_TRUE(blocks.isEven());
  EXPECT_EQ(blocks.activeBlocks({1}), std::vector<int64_t>{2});

  blocks.set(0, 0, {0, 1, 2}, 3);
  blocks.set(0, 1, {3}, 1);
  EXPECT_NO_THROW(blocks.validate());
  EXPECT_FALSE(blocks.isEven());
  EXPECT_EQ(blocks.activeBlocks({0}), std::vector<int64_t>{3});

  BlockAssignment twice = blocks;
  twice.set(0, 1, {2, 3}, 2);
  EXPECT_THROW(
      {
        try {
          twice.validate();
        } catch (const std::invalid_argument &e) {
          EXPECT_STREQ(e.what(),
                       "rebalance point 'w': block 2 is held by 2 ranks, "
                       "not one");
          throw;
        }
      },
      std::invalid_argument);
  BlockAssignment full = blocks;
  full.set(0, 0, {0, 1, 2, 3}, 4);
  full.set(0, 1, {}, 0);
  EXPECT_THROW(full.validate(), std::invalid_argument); // over capacity 3
  BlockAssignment lost = BlockAssignment::even(plan.plan());
  lost.set(0, 1, {3}, 1);
  EXPECT_THROW(lost.validate(), std::invalid_argument);
  BlockAssignment active = BlockAssignment::even(plan.plan());
  active.set(0, 1, {2, 3}, 3);
  EXPECT_THROW(active.validate(), std::invalid_argument);
}

// A rank's storage holds its computed blocks as one [3, active * 2] array
// (what its kernels see), then its parked blocks; every block is the one of
// the whole parameter that its id names.
TEST(ParamStore, LaysOutComputedThenParkedBlocks) {
  LoadedPlan plan = rebalancedPlan();
  const std::vector<float> whole = wholeParameter();
  ParamStore store = ParamStore::initialise(plan, {1});
  // Allocated for the capacity: 3 rows x 3 blocks x 2 columns.
  EXPECT_EQ(store[0].size(), 18u);
  const fb::Param &param = *plan.plan().params()->Get(0);
  std::vector<StoredBlock> even =
      storedBlocks(plan, param, {1}, store.blocks());
  ASSERT_EQ(even.size(), 2u);
  EXPECT_EQ(even[0].id, 2);
  EXPECT_EQ(even[1].regionOffset, (std::vector<int64_t>{0, 2}));
  for (const StoredBlock &block : even)
    EXPECT_EQ(storedBlock(store[0], block), column(whole, block.id));

  // Rank 1 computes block 3 only and parks block 2 (a resize): a re-layout
  // within the rank, no ranks needed.
  BlockAssignment next = store.blocks();
  next.set(0, 1, {3, 2}, 1);
  RelayoutCost cost = store.relayout(plan, next, nullptr);
  EXPECT_EQ(cost.blocksSent + cost.blocksReceived, 0);
  EXPECT_EQ(store.blocks().activeBlocks({1}), std::vector<int64_t>{1});
  std::vector<StoredBlock> resized = storedBlocks(plan, param, {1}, next);
  ASSERT_EQ(resized.size(), 2u);
  EXPECT_EQ(resized[0].regionShape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(resized[1].base, 6);
  for (const StoredBlock &block : resized)
    EXPECT_EQ(storedBlock(store[0], block), column(whole, block.id));
  // The computed region alone is block 3 as a [3, 2] array.
  EXPECT_EQ(std::vector<float>(store[0].begin(), store[0].begin() + 6),
            column(whole, 3));

  // Loading whole values follows the current layout.
  std::vector<float> doubled = whole;
  for (float &v : doubled)
    v *= 2;
  store.setFromWhole(plan, 0, ParamStore::State::ExpAvg, doubled);
  for (const StoredBlock &block : resized)
    EXPECT_EQ(storedBlock(store.expAvg(0), block), column(doubled, block.id));

  // A block that would change ranks needs them.
  BlockAssignment moved = next;
  moved.set(0, 0, {0, 1, 2}, 3);
  moved.set(0, 1, {3}, 1);
  EXPECT_THROW(store.relayout(plan, moved, nullptr), std::runtime_error);
}

TEST(Rebalance, ParsesStragglersAndPolicies) {
  Slowdown slow = parseSlowdown("1:2.5:10:20");
  EXPECT_EQ(slow.rank, 1);
  EXPECT_DOUBLE_EQ(slow.factor, 2.5);
  EXPECT_EQ(slow.from, 10);
  EXPECT_EQ(slow.to, 20);
  Slowdown open = parseSlowdown("0:4");
  EXPECT_EQ(open.from, 1);
  EXPECT_EQ(open.to, std::numeric_limits<int64_t>::max());
  for (const char *bad :
       {"1", "x:2", "1:0.5", "1:two", "1:2:0", "1:2:9:5", "1:2:3:4:5", "-1:2"})
    EXPECT_THROW(parseSlowdown(bad), std::invalid_argument) << bad;
  EXPECT_EQ(parseRebalancePolicy("auto"), RebalancePolicy::Auto);
  EXPECT_THROW(parseRebalancePolicy("sometimes"), std::invalid_argument);
}

namespace {
/// Two points ("heads": 4 blocks, "mlp": 16), each rank may hold all; rank
/// 1 four times slower, with twice rank 0's fixed compute: per segment
/// (a third of it) 1 and 2 units; a block costs 2 / 8 units (heads) and
/// 1 / 4 (mlp).
StepCosts slowRankOne() { return {{3, 6}, {{2, 1}, {8, 4}}}; }
LoadedPlan twoPoints(int64_t headsCapacity = 4) {
  return rebalancedPlan({{"heads", 4, headsCapacity}, {"mlp", 16, 16}});
}
std::vector<int64_t> held(const BlockAssignment &blocks, size_t point,
                          int64_t member) {
  std::span<const int64_t> mine = blocks.held(point, member);
  return {mine.begin(), mine.end()};
}
} // namespace

TEST(StepCosts, SumsEachPointsSlowestSegment) {
  LoadedPlan plan = twoPoints();
  BlockAssignment blocks = BlockAssignment::even(plan.plan());
  const StepCosts costs = slowRankOne();
  // Even: 2 + max(1 + 2x2, 2 + 2x8) + max(1 + 8x1, 2 + 8x4).
  EXPECT_DOUBLE_EQ(costs.step(blocks, true), 2 + 18 + 34);
  // All heads on rank 0, 4 MLP blocks on rank 1: rank 0 sets the heads'
  // segment and rank 1 the MLP's, though neither rank alone computes 29
  // (23 and 22 units).
  blocks.set(0, 0, {0, 1, 2, 3}, 4);
  blocks.set(0, 1, {}, 0);
  blocks.set(1, 0, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 12);
  blocks.set(1, 1, {12, 13, 14, 15}, 4);
  blocks.validate();
  EXPECT_DOUBLE_EQ(costs.step(blocks, true), 2 + 9 + 18);
  EXPECT_DOUBLE_EQ(costs.time(0, {4, 12}), 23);
  EXPECT_DOUBLE_EQ(costs.time(1, {0, 4}), 22);
  // Computing only some: rank 1 leaves 2 of its MLP blocks out.
  blocks.set(1, 1, {12, 13, 14, 15}, 2);
  EXPECT_DOUBLE_EQ(costs.step(blocks, true), 2 + 9 + 13);
  EXPECT_DOUBLE_EQ(costs.step(blocks, false), 2 + 9 + 18);
}

TEST(Migration, BalancesEachPointOnItsOwnAndMovesOnlyWhatMust) {
  LoadedPlan plan = twoPoints();
  const BlockAssignment even = BlockAssignment::even(plan.plan());
  BlockAssignment next = migratedAssignment(even, slowRankOne());
  next.validate();
  // Heads: rank 1 finishes one head at 2 + 8 = 10, later than rank 0 with
  // all four (1 + 4 x 2 = 9): it keeps none. MLP: max(1 + 13, 2 + 3 x 4).
  EXPECT_EQ(held(next, 0, 0), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(held(next, 0, 1), std::vector<int64_t>{});
  EXPECT_EQ(held(next, 1, 0),
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 11, 12, 13, 14, 15}));
  EXPECT_EQ(held(next, 1, 1), (std::vector<int64_t>{8, 9, 10}));
  EXPECT_EQ(next.active(0, 1), 0);
  EXPECT_EQ(next.active(1, 0), 13);
  EXPECT_DOUBLE_EQ(slowRankOne().step(next, true), 2 + 9 + 14);

  // Equal ranks keep the even split.
  EXPECT_TRUE(migratedAssignment(even, {{3, 3}, {{2, 1}, {2, 1}}}) == even);
}

TEST(Migration, StaysWithinTheCapacity) {
  LoadedPlan plan = twoPoints(/*headsCapacity=*/3);
  BlockAssignment next =
      migratedAssignment(BlockAssignment::even(plan.plan()), slowRankOne());
  next.validate();
  EXPECT_EQ(next.held(0, 0).size(), 3u);
  EXPECT_EQ(next.held(0, 1).size(), 1u);
  EXPECT_EQ(next.held(1, 1).size(), 3u);
}

namespace {
/// The even split with rank 1 moved to `headsOnOne` heads and `mlpOnOne`
/// MLP blocks, computing `computedMlpOnOne` of the latter (all by default).
BlockAssignment moved(const LoadedPlan &plan, int64_t headsOnOne,
                      int64_t mlpOnOne, int64_t computedMlpOnOne = -1) {
  BlockAssignment blocks = BlockAssignment::even(plan.plan());
  std::vector<int64_t> heads0, heads1, mlp0, mlp1;
  for (int64_t b = 0; b < 4; ++b)
    (b < 4 - headsOnOne ? heads0 : heads1).push_back(b);
  for (int64_t b = 0; b < 16; ++b)
    (b < 16 - mlpOnOne ? mlp0 : mlp1).push_back(b);
  blocks.set(0, 0, heads0, int64_t(heads0.size()));
  blocks.set(0, 1, heads1, headsOnOne);
  blocks.set(1, 0, mlp0, int64_t(mlp0.size()));
  blocks.set(1, 1, mlp1, computedMlpOnOne < 0 ? mlpOnOne : computedMlpOnOne);
  blocks.validate();
  return blocks;
}
} // namespace

TEST(StepEvidence, RefutesMovesBackToBlocksMeasuredNoFaster) {
  LoadedPlan plan = twoPoints();
  const BlockAssignment even = BlockAssignment::even(plan.plan()),
                        off = moved(plan, 1, 5), further = moved(plan, 0, 3);
  StepEvidence evidence;
  evidence.record(even, 0.250, 3, 0.1);
  evidence.record(off, 0.200, 5, 0.1);
  EXPECT_DOUBLE_EQ(*evidence.measured(off, 6), 0.200);
  // Back to the even split, measured slower: refuted. Onward to blocks
  // never measured, or from the even split to the faster ones: not.
  EXPECT_TRUE(evidence.contradicts(off, even, 6));
  EXPECT_FALSE(evidence.contradicts(off, further, 6));
  EXPECT_FALSE(evidence.contradicts(even, off, 6));
  // The same blocks computed, held elsewhere: no contradiction.
  BlockAssignment swapped = off;
  swapped.set(1, 1, {0, 1, 2, 3, 4}, 5);
  swapped.set(1, 0, {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, 11);
  swapped.validate();
  EXPECT_FALSE(evidence.contradicts(off, swapped, 6));
  // Computing fewer blocks is other work (a resize): its own record.
  EXPECT_FALSE(evidence.measured(moved(plan, 1, 5, 4), 6).has_value());
  // Records lapse.
  EXPECT_TRUE(evidence.contradicts(off, even, 3 + StepEvidence::kFreshWindows));
  EXPECT_FALSE(
      evidence.contradicts(off, even, 4 + StepEvidence::kFreshWindows));
}

TEST(StepEvidence, ForgetsOtherBlocksWhenTheConditionsChange) {
  LoadedPlan plan = twoPoints();
  const BlockAssignment even = BlockAssignment::even(plan.plan()),
                        off = moved(plan, 1, 5);
  StepEvidence evidence;
  evidence.record(even, 0.250, 3, 0.1);
  evidence.record(off, 0.200, 5, 0.1);
  // Within the change allowed: still measured there.
  evidence.record(off, 0.185, 6, 0.1);
  EXPECT_TRUE(evidence.contradicts(off, even, 7));
  // The straggler recovered: the same blocks now step 15 % faster, so the
  // even split's time is stale.
  evidence.record(off, 0.155, 7, 0.1);
  EXPECT_DOUBLE_EQ(*evidence.measured(off, 8), 0.155);
  EXPECT_FALSE(evidence.measured(even, 8).has_value());
  EXPECT_FALSE(evidence.contradicts(off, even, 8));
}

// The policy, branch by branch: decideRebalance is a pure function of the
// window's state and the options (docs/rebalancing.md).
namespace {
RebalanceOptions policyOptions(RebalancePolicy policy) {
  RebalanceOptions options;
  options.policy = policy;
  options.patience = 2;
  options.persistent = 4;
  options.heavy = 0.5;
  return options;
}
PolicyState straggling(int64_t overCount, double imbalance = 0.3) {
  PolicyState state;
  state.imbalance = imbalance;
  state.overCount = overCount;
  state.patience = 2;
  return state;
}
} // namespace

TEST(RebalancePolicy, OffNeverActs) {
  EXPECT_EQ(
      decideRebalance(straggling(9, 5.0), policyOptions(RebalancePolicy::Off))
          .action,
      RebalanceAction::None);
}

TEST(RebalancePolicy, WaitsForPatienceThenFollowsThePolicy) {
  for (RebalancePolicy policy :
       {RebalancePolicy::Migrate, RebalancePolicy::Resize,
        RebalancePolicy::Auto})
    EXPECT_EQ(decideRebalance(straggling(1), policyOptions(policy)).action,
              RebalanceAction::None);
  PolicyDecision migrate =
      decideRebalance(straggling(2), policyOptions(RebalancePolicy::Migrate));
  EXPECT_EQ(migrate.action, RebalanceAction::Migrate);
  EXPECT_EQ(migrate.reason, "imbalance for 2 windows");
  EXPECT_FALSE(migrate.always); // only if the model predicts a gain
  EXPECT_EQ(
      decideRebalance(straggling(3), policyOptions(RebalancePolicy::Resize))
          .action,
      RebalanceAction::Resize);
  // A longer patience (the settle rule after reversals) waits longer.
  PolicyState settled = straggling(3);
  settled.patience = 8;
  EXPECT_EQ(
      decideRebalance(settled, policyOptions(RebalancePolicy::Migrate)).action,
      RebalanceAction::None);
}

TEST(RebalancePolicy, AutoMigratesHeavyOrMovedAndResizesLight) {
  const RebalanceOptions options = policyOptions(RebalancePolicy::Auto);
  PolicyDecision heavy = decideRebalance(straggling(2, 0.5), options);
  EXPECT_EQ(heavy.action, RebalanceAction::Migrate);
  EXPECT_EQ(heavy.reason, "heavy imbalance for 2 windows");
  PolicyDecision light = decideRebalance(straggling(2, 0.3), options);
  EXPECT_EQ(light.action, RebalanceAction::Resize);
  EXPECT_EQ(light.reason, "light imbalance for 2 windows");
  PolicyState moved = straggling(2, 0.3);
  moved.holdsEvenShares = false;
  moved.even = false;
  PolicyDecision again = decideRebalance(moved, options);
  EXPECT_EQ(again.action, RebalanceAction::Migrate);
  EXPECT_EQ(again.reason, "imbalance after a migration for 2 windows");
}

TEST(RebalancePolicy, ResizedForLongProbesOrMigrates) {
  PolicyState resized = straggling(0);
  resized.resized = true;
  resized.resizedCount = 4;
  PolicyDecision probe =
      decideRebalance(resized, policyOptions(RebalancePolicy::Resize));
  EXPECT_EQ(probe.action, RebalanceAction::Probe);
  EXPECT_TRUE(probe.always);
  PolicyDecision persists =
      decideRebalance(resized, policyOptions(RebalancePolicy::Auto));
  EXPECT_EQ(persists.action, RebalanceAction::Migrate);
  EXPECT_EQ(persists.reason, "resized for 4 windows: the straggler persists");
  EXPECT_TRUE(persists.always);
  resized.resizedCount = 3;
  EXPECT_EQ(
      decideRebalance(resized, policyOptions(RebalancePolicy::Resize)).action,
      RebalanceAction::None);
  // After a probe window, a straggler still there is resized at once.
  PolicyState probed = straggling(1);
  probed.probed = true;
  PolicyDecision after =
      decideRebalance(probed, policyOptions(RebalancePolicy::Resize));
  EXPECT_EQ(after.action, RebalanceAction::Resize);
  EXPECT_EQ(after.reason, "the straggler persists after the probe");
  EXPECT_TRUE(after.always);
}

TEST(RebalancePolicy, RecoveryRestoresBlocksAndSendsMovedOnesHome) {
  const RebalanceOptions options = policyOptions(RebalancePolicy::Auto);
  PolicyState recovered;
  recovered.recovered = true;
  recovered.resized = true;
  recovered.resizedCount = 9; // recovery wins over a long resize
  PolicyDecision restore = decideRebalance(recovered, options);
  EXPECT_EQ(restore.action, RebalanceAction::RestoreBlocks);
  EXPECT_TRUE(restore.always);
  PolicyState migrated;
  migrated.recovered = true;
  migrated.even = false;
  migrated.holdsEvenShares = false;
  migrated.patience = 4;
  migrated.recoveredCount = 3;
  EXPECT_EQ(decideRebalance(migrated, options).action, RebalanceAction::None);
  migrated.recoveredCount = 4;
  PolicyDecision home = decideRebalance(migrated, options);
  EXPECT_EQ(home.action, RebalanceAction::MigrateHome);
  EXPECT_EQ(home.reason, "the straggler recovered");
  // Recovered on the even split: nothing to do.
  PolicyState even;
  even.recovered = true;
  even.recoveredCount = 10;
  EXPECT_EQ(decideRebalance(even, options).action, RebalanceAction::None);
}

TEST(RebalancePolicy, AReplanPaysItsMinimumGain) {
  EXPECT_TRUE(replanPays(10.0, 9.0, 0.1, false));
  EXPECT_FALSE(replanPays(10.0, 9.1, 0.1, false));
  EXPECT_TRUE(replanPays(10.0, 12.0, 0.1, /*always=*/true));
}

namespace {
/// A plan of 2 pipeline stages (grid [2]) over 4 layers predicted at
/// 1, 1, 1, 2 seconds, with the stage cuts `cuts` (the first the balanced
/// one) and one parameter "h.3" that moves with layer 3's stage:
/// `cutStages` per cut. No program.
LoadedPlan stagedPlan(const std::vector<std::vector<int64_t>> &cuts,
                      const std::vector<int32_t> &cutStages) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<fb::Param>> params = {fb::CreateParam(
      b, b.CreateString("h.3"), fb::DType::F32,
      b.CreateVector(std::vector<int64_t>{4}), fb::Init::Zeros, 0.0, 0, 0, 0,
      cutStages.front(), b.CreateVector(cutStages))};
  std::vector<flatbuffers::Offset<fb::StageCut>> cutTables;
  for (const std::vector<int64_t> &cut : cuts)
    cutTables.push_back(fb::CreateStageCut(b, b.CreateVector(cut)));
  auto pipeline = fb::CreatePipeline(
      b, 0, 2, 2, 1, b.CreateString("1f1b"), b.CreateVector(cuts.front()),
      b.CreateVector(std::vector<double>{1, 1, 1, 2}),
      b.CreateVector(cutTables));
  std::vector<flatbuffers::Offset<fb::Program>> programs;
  const fb::Checksum unsealed(0);
  auto plan = fb::CreatePlan(
      b, kPlanVersionMajor, kPlanVersionMinor, b.CreateString("test"),
      b.CreateVector(std::vector<int64_t>{2}), 0, 0, b.CreateVector(params),
      b.CreateVector(programs), &unsealed, 0, 0, 0, pipeline);
  fb::FinishPlanBuffer(b, plan);
  std::vector<uint8_t> bytes(b.GetBufferPointer(),
                             b.GetBufferPointer() + b.GetSize());
  EXPECT_TRUE(sealPlan(bytes));
  return LoadedPlan::fromBytes(bytes.data(), bytes.size(), 2, "plan");
}
} // namespace

TEST(StageRebalance, PicksTheCutWhoseSlowestStageFinishesFirst) {
  LoadedPlan plan = stagedPlan({{2, 2}, {3, 1}, {1, 3}}, {1, 1, 1});
  const std::vector<std::vector<double>> seconds = cutStageSeconds(plan.plan());
  ASSERT_EQ(seconds.size(), 3u);
  EXPECT_EQ(seconds[0], (std::vector<double>{2, 3}));
  EXPECT_EQ(seconds[1], (std::vector<double>{3, 2}));
  EXPECT_EQ(seconds[2], (std::vector<double>{1, 4}));
  // Equal speeds: cuts 0 and 1 both take 3; the balanced one stays.
  EXPECT_EQ(bestStageCut(seconds, {1, 1}), 0);
  // Stage 1 twice as slow: 6, 4, 8 seconds.
  EXPECT_DOUBLE_EQ(cutStep(seconds, 0, {1, 2}), 6);
  EXPECT_DOUBLE_EQ(cutStep(seconds, 1, {1, 2}), 4);
  EXPECT_EQ(bestStageCut(seconds, {1, 2}), 1);
  // Stage 0 three times as slow: 6, 9, 4.
  EXPECT_EQ(bestStageCut(seconds, {3, 1}), 2);
}

TEST(StageRebalance, ParametersFollowTheirStageUnderEachCut) {
  LoadedPlan plan = stagedPlan({{2, 2}, {3, 1}, {1, 3}}, {1, 0, 1});
  EXPECT_EQ(plan.numCuts(), 3);
  const fb::Param &param = *plan.plan().params()->Get(0);
  EXPECT_EQ(paramStage(param, 0), 1);
  EXPECT_EQ(paramStage(param, 1), 0);
  EXPECT_TRUE(holdsParam(plan, param, {1}, 0));
  EXPECT_FALSE(holdsParam(plan, param, {1}, 1));
  EXPECT_TRUE(holdsParam(plan, param, {0}, 1));
  BlockAssignment blocks = BlockAssignment::even(plan.plan());
  EXPECT_EQ(blocks.cut(), 0);
  blocks.setCut(1);
  EXPECT_TRUE(storedBlocks(plan, param, {1}, blocks).empty());
  EXPECT_EQ(storedBlocks(plan, param, {0}, blocks).size(), 1u);
}

TEST(StageRebalance, TheLoaderRefusesInconsistentCuts) {
  auto refused = [](const std::vector<std::vector<int64_t>> &cuts,
                    const std::vector<int32_t> &cutStages) {
    try {
      stagedPlan(cuts, cutStages);
    } catch (const PlanError &error) {
      return std::string(error.what());
    }
    return std::string();
  };
  EXPECT_NE(refused({{2, 2}, {3, 1}}, {1, 0, 1})
                .find("gives 3 stages for "
                      "the pipeline's 2 cuts"),
            std::string::npos);
  EXPECT_NE(refused({{2, 2}, {4, 0}}, {1, 0})
                .find("leaves a stage (or virtual stage) without"),
            std::string::npos);
  EXPECT_NE(refused({{2, 2}, {3, 2}}, {1, 0}).find("gives 5 layers"),
            std::string::npos);
  EXPECT_NE(refused({{2, 2}, {3, 1}}, {1, 2}).find("held by stage 2"),
            std::string::npos);
}
