// Pipeline transfers through a device's own transport on real ranks (part of
// tpc-comm-tests, under mpirun): the staged-cpu device carries them as NCCL
// does, the k-th send between two ranks meeting the k-th receive whatever
// the tags. The runner hands it a plan's transfers only when the loader
// proved their order; otherwise they go staged over MPI, matched by tag.
// Stage 0 sends two constants (tags 5 and 6) to stage 1, which receives
// them in the same or in the other order.
#include "PipelinePlanSpec.h"

#include "tpc/runtime/Backend.h"
#include "tpc/runtime/Comm.h"
#include "tpc/runtime/ParamStore.h"
#include "tpc/runtime/ProgramRunner.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace tpc::runtime;
using namespace tpc::runtime::test;

namespace {

/// Stage 1 posts the receive of tag 6 first when `otherOrder`.
PipelineSpec twoConstants(int64_t replicas, bool otherOrder) {
  PipelineSpec spec;
  spec.grid = {2, replicas};
  spec.programs[0].tensors = {{4}, {4}};
  spec.programs[0].steps = {{fb::OpKind::Constant, {}, {0}, 0, 0, {}, 1.5},
                            {fb::OpKind::Constant, {}, {1}, 0, 0, {}, -2},
                            {fb::OpKind::SendStart, {0}, {}, 1, 5},
                            {fb::OpKind::SendStart, {1}, {}, 1, 6},
                            {fb::OpKind::SendWait, {0}, {}, 1, 5},
                            {fb::OpKind::SendWait, {1}, {}, 1, 6}};
  // Tensor 0 receives tag 5 and tensor 1 tag 6; results 2 and 3 are theirs.
  spec.programs[1].tensors = {{4}, {4}, {4}, {4}};
  spec.programs[1].steps = {{fb::OpKind::RecvStart, {}, {0}, 0, 5},
                            {fb::OpKind::RecvStart, {}, {1}, 0, 6},
                            {fb::OpKind::RecvWait, {0}, {2}, 0, 0, {}},
                            {fb::OpKind::RecvWait, {1}, {3}, 0, 0, {}}};
  if (otherOrder)
    std::swap(spec.programs[1].steps[0], spec.programs[1].steps[1]);
  spec.programs[1].results = {2, 3};
  return spec;
}

void runStages(bool otherOrder) {
  const int64_t n = Comm::world().size();
  if (n % 2 != 0)
    return; // a two-stage grid needs an even world
  std::vector<uint8_t> bytes = twoConstants(n / 2, otherOrder).build();
  LoadedPlan plan =
      LoadedPlan::fromBytes(bytes.data(), bytes.size(), n, "plan");
  GridComm grid({2, n / 2});
  Backend &device = stagedTestBackend();
  device.connect(grid);
  ParamStore params = ParamStore::initialise(plan, grid.coords());
  ProgramRunner runner(plan, "train_step", params, &grid, device);
  EXPECT_EQ(runner.transferPath(),
            otherOrder ? "MPI staged through the host (MPI, one tag would "
                         "match them in order, and 'train_step' stage 0's "
                         "send 0 to stage 1 (tag 5, step 2) would meet the "
                         "receive of tag 6 (step 0))"
                       : "MPI, one tag, matched in order per pair of stages");
  for (int run = 0; run < 2; ++run) {
    runner.run();
    if (grid.coords()[0] == 0)
      continue;
    for (float x : runner.result(0))
      EXPECT_EQ(x, 1.5f);
    for (float x : runner.result(1))
      EXPECT_EQ(x, -2.f);
  }
  // Each rank of stage 0 sent two 16-byte tensors a run, whichever path.
  EXPECT_EQ(grid.stats()["send"].calls, grid.coords()[0] == 0 ? 4 : 0);
}

TEST(StageTransfers, InOrderOverTheDevicesOwnPath) { runStages(false); }

TEST(StageTransfers, OutOfOrderStagedOverMpiByTag) { runStages(true); }

} // namespace
