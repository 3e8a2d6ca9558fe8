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

void runStages(bool otherOrder) {
  const int64_t n = Comm::world().size();
  if (n % 2 != 0)
    return; // a two-stage grid needs an even world
  std::vector<uint8_t> bytes = twoConstants(otherOrder, n / 2).build();
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
