// The loader's checks of pipelined plans (format 1.12): a two-stage plan in
// which stage 0 sends a constant to stage 1, then mutations that a rank
// could not run without hanging or misreading its peer.
#include "tpc/runtime/OpTable.h"
#include "tpc/runtime/Plan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace tpc::runtime;
namespace fb = tpc::plan;

namespace {

struct StageSpec {
  int32_t stage;
  // One arena f32 tensor per entry, by shape, tensor i at byte 16 i.
  std::vector<std::vector<int64_t>> tensors;
  struct S {
    fb::OpKind kind;
    std::vector<uint32_t> operands, results;
    int64_t peer = 0, tag = 0;
    std::vector<int64_t> ints = {0};
  };
  std::vector<S> steps;
  std::vector<uint32_t> results;
};

struct PipelineSpec {
  std::vector<int64_t> grid = {2};
  int64_t stages = 2;
  std::vector<StageSpec> programs = {
      {0,
       {{4}},
       {{fb::OpKind::Constant, {}, {0}, 0, 0, {}},
        {fb::OpKind::SendStart, {0}, {}, 1, 5},
        {fb::OpKind::SendWait, {0}, {}, 1, 5}},
       {0}},
      {1,
       {{4}, {4}},
       {{fb::OpKind::RecvStart, {}, {0}, 0, 5},
        {fb::OpKind::RecvWait, {0}, {1}, 0, 0, {}}},
       {1}},
  };

  std::vector<uint8_t> build() const {
    flatbuffers::FlatBufferBuilder b;
    std::vector<flatbuffers::Offset<fb::Program>> programs;
    for (const StageSpec &spec : this->programs) {
      std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
      for (size_t i = 0; i < spec.tensors.size(); ++i)
        tensors.push_back(fb::CreateTensor(b, fb::DType::F32,
                                           b.CreateVector(spec.tensors[i]),
                                           fb::Storage::Arena, 16 * i, 0));
      std::vector<flatbuffers::Offset<fb::Step>> steps;
      for (const StageSpec::S &s : spec.steps) {
        auto operands = b.CreateVector(s.operands);
        auto results = b.CreateVector(s.results);
        auto ints = s.ints.empty() ? 0 : b.CreateVector(s.ints);
        fb::StepBuilder step(b);
        step.add_kind(s.kind);
        step.add_operands(operands);
        step.add_results(results);
        if (!ints.IsNull())
          step.add_ints(ints);
        step.add_peer(s.peer);
        step.add_tag(s.tag);
        steps.push_back(step.Finish());
      }
      programs.push_back(fb::CreateProgram(
          b, b.CreateString("train_step"), b.CreateVector(tensors),
          b.CreateVector(std::vector<flatbuffers::Offset<fb::Input>>{}),
          b.CreateVector(steps), b.CreateVector(spec.results), 64,
          /*result_names=*/0, spec.stage));
    }
    auto pipeline =
        fb::CreatePipeline(b, 0, stages, 1, 1, b.CreateString("gpipe"),
                           b.CreateVector(std::vector<int64_t>(
                               size_t(std::max<int64_t>(stages, 0)), 1)));
    const fb::Checksum unsealed(0);
    auto plan = fb::CreatePlan(
        b, kPlanVersionMajor, kPlanVersionMinor, b.CreateString("test"),
        b.CreateVector(grid), 0, 0,
        b.CreateVector(std::vector<flatbuffers::Offset<fb::Param>>{}),
        b.CreateVector(programs), &unsealed, 0, 0, 0, pipeline);
    fb::FinishPlanBuffer(b, plan);
    std::vector<uint8_t> bytes(b.GetBufferPointer(),
                               b.GetBufferPointer() + b.GetSize());
    EXPECT_TRUE(sealPlan(bytes));
    return bytes;
  }
};

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
