// Two-stage plans built by hand for tests of the loader's pipeline checks
// and of the runner's transfers: stage 0 sends a constant to stage 1, and
// tests mutate the steps.
#pragma once

#include "tpc/runtime/Plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace tpc::runtime::test {

namespace fb = tpc::plan;

struct StageSpec {
  int32_t stage;
  // One arena f32 tensor per entry, by shape, tensor i at byte 16 i.
  std::vector<std::vector<int64_t>> tensors;
  struct S {
    fb::OpKind kind;
    std::vector<uint32_t> operands, results;
    int64_t peer = 0, tag = 0;
    std::vector<int64_t> ints = {0};
    double value = 0; // a Constant's
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
        step.add_value(s.value);
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

/// Stage 0 sends two constants, 1.5 (tag 5) and -2 (tag 6), to stage 1,
/// which receives them into tensors 0 and 1 and returns them (results 2
/// and 3); with `otherOrder` it posts the receive of tag 6 first. The grid
/// is [2 stages, `replicas`].
inline PipelineSpec twoConstants(bool otherOrder, int64_t replicas = 1) {
  PipelineSpec spec;
  spec.grid = {2, replicas};
  spec.programs[0].tensors = {{4}, {4}};
  spec.programs[0].steps = {{fb::OpKind::Constant, {}, {0}, 0, 0, {}, 1.5},
                            {fb::OpKind::Constant, {}, {1}, 0, 0, {}, -2},
                            {fb::OpKind::SendStart, {0}, {}, 1, 5},
                            {fb::OpKind::SendStart, {1}, {}, 1, 6},
                            {fb::OpKind::SendWait, {0}, {}, 1, 5},
                            {fb::OpKind::SendWait, {1}, {}, 1, 6}};
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

} // namespace tpc::runtime::test
