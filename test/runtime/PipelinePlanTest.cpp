// The loader's checks of pipelined plans (format 1.12): a two-stage plan in
// which stage 0 sends a constant to stage 1, then mutations that a rank
// could not run without hanging or misreading its peer.
#include "PipelinePlanSpec.h"

#include "tpc/runtime/OpTable.h"
#include "tpc/runtime/Plan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace tpc::runtime;
using namespace tpc::runtime::test;

namespace {

LoadedPlan load(const PipelineSpec &spec) {
  std::vector<uint8_t> bytes = spec.build();
  return LoadedPlan::fromBytes(bytes.data(), bytes.size(), 2, "plan");
}

void expectRejected(const PipelineSpec &spec, const std::string &needle) {
  try {
    load(spec);
    ADD_FAILURE() << "loaded; expected an error containing: " << needle;
  } catch (const PlanError &error) {
    EXPECT_NE(std::string(error.what()).find(needle), std::string::npos)
        << error.what();
  }
}

TEST(PipelinePlan, EachStageRunsItsOwnProgram) {
  LoadedPlan plan = load(PipelineSpec());
  EXPECT_EQ(plan.stageOf({0}), 0);
  EXPECT_EQ(plan.stageOf({1}), 1);
  const fb::Program *first = plan.program("train_step", 0),
                    *second = plan.program("train_step", 1);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(first->stage(), 0);
  EXPECT_EQ(second->stage(), 1);
  EXPECT_EQ(plan.program("train_step"), first);
  EXPECT_EQ(plan.program("forward", 1), nullptr);
}

TEST(PipelinePlan, SendsMeetReceivesOfTheirType) {
  PipelineSpec tag;
  tag.programs[1].steps[0].tag = 6;
  expectRejected(tag, "deadlock"); // both wait for what never comes
  PipelineSpec shape;
  shape.programs[1].tensors = {{3}, {3}};
  expectRejected(shape, "'train_step' stage 0 to stage 1 tag 5: sends F32 "
                        "[4] but receives F32 [3]");
  PipelineSpec extra;
  extra.programs[0].steps.push_back({fb::OpKind::SendStart, {0}, {}, 1, 9});
  extra.programs[0].steps.push_back({fb::OpKind::SendWait, {0}, {}, 1, 9});
  expectRejected(extra, "deadlock: stage 0 at step 4 (SendWait)");
}

TEST(PipelinePlan, ReceivingFirstOnEveryStageDeadlocks) {
  // Each stage receives from the other before it sends: neither send
  // starts.
  PipelineSpec spec;
  StageSpec::S recvStart{fb::OpKind::RecvStart, {}, {1}, 1, 2};
  StageSpec::S recvWait{fb::OpKind::RecvWait, {1}, {2}, 0, 0, {}};
  spec.programs[0].tensors = {{4}, {4}, {4}};
  spec.programs[0].steps.insert(spec.programs[0].steps.begin() + 1,
                                {recvStart, recvWait});
  spec.programs[1].steps.push_back({fb::OpKind::SendStart, {1}, {}, 0, 2});
  spec.programs[1].steps.push_back({fb::OpKind::SendWait, {1}, {}, 0, 2});
  expectRejected(spec, "the 'train_step' stage programs deadlock: stage 0 at "
                       "step 2 (RecvWait); stage 1 at step 1 (RecvWait)");
  // Sending first on stage 0 lets both finish.
  std::swap(spec.programs[0].steps[1], spec.programs[0].steps[3]);
  std::swap(spec.programs[0].steps[2], spec.programs[0].steps[4]);
  EXPECT_NO_THROW(load(spec));
}

TEST(PipelinePlan, TransfersInOrderPerDirection) {
  // NCCL matches the k-th send between two ranks with the k-th receive,
  // whatever the tags: a plan whose receives come in another order than
  // their sends loads (MPI matches by tag) but names the mismatch.
  EXPECT_EQ(load(PipelineSpec()).inOrderTransferProblem(), "");
  EXPECT_EQ(load(twoConstants(false)).inOrderTransferProblem(), "");
  const PipelineSpec spec = twoConstants(true);
  EXPECT_EQ(load(spec).inOrderTransferProblem(),
            "'train_step' stage 0's send 0 to stage 1 (tag 5, step 2) would "
            "meet the receive of tag 6 (step 0)");
  // Each direction keeps its own order: stage 1 sends back before it
  // receives while stage 0 sends first.
  PipelineSpec back;
  back.programs[0].tensors = {{4}, {4}, {4}};
  back.programs[0].steps.insert(back.programs[0].steps.begin() + 2,
                                {fb::OpKind::RecvStart, {}, {1}, 1, 9});
  back.programs[0].steps.push_back({fb::OpKind::RecvWait, {1}, {2}, 0, 0, {}});
  back.programs[1].tensors = {{4}, {4}, {4}};
  back.programs[1].steps.insert(back.programs[1].steps.begin(),
                                {fb::OpKind::Constant, {}, {2}, 0, 0, {}});
  back.programs[1].steps.insert(back.programs[1].steps.begin() + 1,
                                {fb::OpKind::SendStart, {2}, {}, 0, 9});
  back.programs[1].steps.push_back({fb::OpKind::SendWait, {2}, {}, 0, 9});
  EXPECT_EQ(load(back).inOrderTransferProblem(), "");
}

TEST(PipelinePlan, StagesMakeTheSameCollectivesOverTheirAxis) {
  PipelineSpec spec;
  spec.programs[0].tensors.push_back({4});
  spec.programs[0].steps.push_back(
      {fb::OpKind::AllReduce, {0}, {1}, 0, 0, {0}});
  expectRejected(spec, "make different collectives over the stage axis");
  spec.programs[1].tensors.push_back({4});
  spec.programs[1].steps.push_back(
      {fb::OpKind::AllReduce, {1}, {2}, 0, 0, {0}});
  EXPECT_NO_THROW(load(spec));
}

TEST(PipelinePlan, RejectsStagesThePlanDoesNotHave) {
  PipelineSpec missing;
  missing.programs.pop_back();
  expectRejected(missing, "program 'train_step' has no program for stage 1");
  PipelineSpec twice;
  twice.programs[1].stage = 0;
  expectRejected(twice, "program 'train_step' appears twice for stage 0");
  PipelineSpec self;
  self.programs[0].steps[1].peer = 0;
  self.programs[0].steps[2].peer = 0;
  expectRejected(self, "transfers go between stages");
  PipelineSpec wrongSize;
  wrongSize.stages = 3;
  expectRejected(wrongSize, "the pipeline has 3 stages but its grid axis 0 "
                            "has size 2");
  PipelineSpec badTag;
  badTag.programs[0].steps[1].tag = kMaxTransferTag + 1;
  expectRejected(badTag, "tag 32768 is outside [0, 32767]");
  PipelineSpec unwaited;
  unwaited.programs[0].steps.pop_back();
  expectRejected(unwaited, "the send of tensor 0 is never waited for");
}

} // namespace
