// The plan loader against real flatbuffers plans built here: one valid plan,
// then one mutation per check the loader makes, plus truncations and byte
// flips that must always end in a PlanError, never a crash.
#include "tpc/runtime/CollectiveChannel.h"
#include "tpc/runtime/Comm.h"
#include "tpc/runtime/Executor.h"
#include "tpc/runtime/OpTable.h"
#include "tpc/runtime/Plan.h"
#include "tpc/runtime/SanitizerDefaults.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <thread>
#include <utility>

// The tests of tpc-runtime-tests run in one program; its ASan defaults.
TPC_ASAN_DEFAULT_OPTIONS("")

using namespace tpc::runtime;
namespace fb = tpc::plan;

namespace {
/// The pieces of a small valid plan; tests mutate them before building.
struct PlanSpec {
  uint32_t major = kPlanVersionMajor, minor = kPlanVersionMinor;
  std::vector<int64_t> grid = {1};
  // Program: tokens[2,3] -> embedding(table[5,4]) [2,3,4] -> matmul with
  // table^T [2,3,5] -> softmax.
  struct T {
    fb::DType dtype;
    std::vector<int64_t> shape;
    fb::Storage storage;
    uint64_t offset;
    uint32_t index;
    std::vector<int32_t> rebalanceDims = {}; // empty: absent
  };
  std::vector<T> tensors = {
      {fb::DType::F32, {5, 4}, fb::Storage::Param, 0, 0},
      {fb::DType::I32, {2, 3}, fb::Storage::Input, 0, 0},
      {fb::DType::F32, {2, 3, 4}, fb::Storage::Arena, 0, 0},
      {fb::DType::F32, {2, 3, 5}, fb::Storage::Arena, 128, 0},
      {fb::DType::F32, {2, 3, 5}, fb::Storage::Arena, 0, 0},
  };
  struct S {
    fb::OpKind kind;
    std::vector<uint32_t> operands, results;
    bool transposeRhs = false;
    std::vector<int64_t> ints = {};
    fb::Precision precision = fb::Precision::F32;
    bool causal = false;
    bool gelu = false;
  };
  std::vector<S> steps = {
      {fb::OpKind::Embedding, {0, 1}, {2}},
      {fb::OpKind::Matmul, {2, 0}, {3}, true},
      {fb::OpKind::Softmax, {3}, {4}},
  };
  std::vector<uint32_t> results = {4};
  uint64_t arena = 256;
  std::vector<int64_t> paramShape = {5, 4};
  std::vector<int64_t> paramFileShape = {}; // hf_shape; empty: absent
  uint32_t inputTensor = 1;
  // Grid axes per dim; empty: absent (whole).
  std::vector<std::vector<int64_t>> paramSplit = {}, inputSplit = {};
  bool checksum = true; // write Plan.content_checksum (and seal it)
  struct Point {
    std::string name;
    int64_t axis, blocks, capacity;
  };
  std::vector<Point> points = {};               // (1.6) rebalance points
  std::vector<int32_t> paramRebalanceDims = {}; // empty: absent
  struct Cache {
    std::string name;
    std::vector<int64_t> shape;
  };
  std::vector<Cache> caches = {};                  // (1.9) KV caches
  std::optional<std::vector<int64_t>> eosTokenIds; // (1.11)
  int64_t cacheRows = 0;                           // (1.14) a cached table
  double cacheRatio = 0;
  struct ExtraInput {
    fb::InputKind kind;
    uint32_t tensor, param;
  };
  std::vector<ExtraInput> extraInputs = {}; // after the tokens

  std::vector<uint8_t> build() const {
    flatbuffers::FlatBufferBuilder b;
    auto splitOf = [&](const std::vector<std::vector<int64_t>> &split)
        -> flatbuffers::Offset<
            flatbuffers::Vector<flatbuffers::Offset<fb::Axes>>> {
      if (split.empty())
        return 0;
      std::vector<flatbuffers::Offset<fb::Axes>> axes;
      for (const auto &dim : split)
        axes.push_back(fb::CreateAxes(b, b.CreateVector(dim)));
      return b.CreateVector(axes);
    };
    auto param = fb::CreateParam(
        b, b.CreateString("wte"), fb::DType::F32, b.CreateVector(paramShape),
        fb::Init::Normal, 0.5, splitOf(paramSplit),
        paramFileShape.empty() ? 0 : b.CreateVector(paramFileShape),
        paramRebalanceDims.empty() ? 0 : b.CreateVector(paramRebalanceDims),
        /*stage=*/-1, /*cut_stages=*/0, cacheRows, cacheRatio);
    std::vector<flatbuffers::Offset<fb::Tensor>> ts;
    for (const T &t : tensors)
      ts.push_back(fb::CreateTensor(
          b, t.dtype, b.CreateVector(t.shape), t.storage, t.offset, t.index,
          t.rebalanceDims.empty() ? 0 : b.CreateVector(t.rebalanceDims)));
    std::vector<flatbuffers::Offset<fb::RebalancePoint>> pointTable;
    for (const Point &point : points)
      pointTable.push_back(
          fb::CreateRebalancePoint(b, b.CreateString(point.name), point.axis,
                                   point.blocks, point.capacity));
    std::vector<flatbuffers::Offset<fb::Step>> ss;
    for (const S &s : steps) {
      auto ops = b.CreateVector(s.operands);
      auto res = b.CreateVector(s.results);
      auto ints = s.ints.empty() ? 0 : b.CreateVector(s.ints);
      fb::StepBuilder step(b);
      step.add_kind(s.kind);
      step.add_operands(ops);
      step.add_results(res);
      step.add_transpose_rhs(s.transposeRhs);
      step.add_precision(s.precision);
      step.add_causal(s.causal);
      step.add_gelu(s.gelu);
      if (!ints.IsNull())
        step.add_ints(ints);
      ss.push_back(step.Finish());
    }
    std::vector<flatbuffers::Offset<fb::Input>> inputs = {fb::CreateInput(
        b, fb::InputKind::Tokens, inputTensor, splitOf(inputSplit))};
    for (const ExtraInput &input : extraInputs)
      inputs.push_back(
          fb::CreateInput(b, input.kind, input.tensor, 0, input.param));
    auto program =
        fb::CreateProgram(b, b.CreateString("forward"), b.CreateVector(ts),
                          b.CreateVector(inputs), b.CreateVector(ss),
                          b.CreateVector(results), arena);
    std::vector<flatbuffers::Offset<fb::Param>> params = {param};
    std::vector<flatbuffers::Offset<fb::Program>> programs = {program};
    const fb::Checksum unsealed(0);
    std::vector<flatbuffers::Offset<fb::Cache>> cacheTable;
    for (const Cache &cache : caches)
      cacheTable.push_back(fb::CreateCache(b, b.CreateString(cache.name),
                                           fb::DType::F32,
                                           b.CreateVector(cache.shape)));
    auto plan =
        fb::CreatePlan(b, major, minor, b.CreateString("test"),
                       b.CreateVector(grid), 0, 0, b.CreateVector(params),
                       b.CreateVector(programs), checksum ? &unsealed : nullptr,
                       points.empty() ? 0 : b.CreateVector(pointTable),
                       caches.empty() ? 0 : b.CreateVector(cacheTable),
                       eosTokenIds ? b.CreateVector(*eosTokenIds) : 0);
    fb::FinishPlanBuffer(b, plan);
    std::vector<uint8_t> bytes(b.GetBufferPointer(),
                               b.GetBufferPointer() + b.GetSize());
    if (checksum)
      EXPECT_TRUE(sealPlan(bytes));
    return bytes;
  }
};

LoadedPlan load(const std::vector<uint8_t> &bytes, int64_t world = 1) {
  return LoadedPlan::fromBytes(bytes.data(), bytes.size(), world, "plan");
}

/// Expects loading to fail with a message containing `needle`.
void expectRejected(const PlanSpec &spec, const std::string &needle,
                    int64_t world = 1) {
  std::vector<uint8_t> bytes = spec.build();
  try {
    load(bytes, world);
    FAIL() << "accepted a plan that should fail with: " << needle;
  } catch (const PlanError &error) {
    std::string message = error.what();
    EXPECT_NE(message.find(needle), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line";
  }
}
} // namespace

TEST(PlanLoader, AcceptsAndRunsAValidPlan) {
  LoadedPlan plan = load(PlanSpec().build());
  ASSERT_NE(plan.program("forward"), nullptr);
  ParamStore params = ParamStore::initialise(plan);
  ProgramRunner runner(plan, "forward", params);
  std::vector<int32_t> tokens = {0, 1, 2, 3, 4, 0};
  runner.setInput(fb::InputKind::Tokens, tokens);
  runner.run();
  // softmax rows sum to one; rows of identical tokens are identical.
  std::span<const float> out = runner.result(0);
  ASSERT_EQ(out.size(), 30u);
  for (int row = 0; row < 6; ++row) {
    float sum = 0;
    for (int v = 0; v < 5; ++v)
      sum += out[row * 5 + v];
    EXPECT_NEAR(sum, 1.0f, 1e-6f);
  }
  for (int v = 0; v < 5; ++v)
    EXPECT_EQ(out[0 * 5 + v], out[5 * 5 + v]);
}

TEST(PlanLoader, ChecksKvCachesAndOptionalOperands) {
  // A KV cache [2, 3, 4] written at the tokens' positions: valid.
  PlanSpec spec;
  spec.caches = {{"h.0.key", {2, 3, 4}}};
  spec.tensors.push_back({fb::DType::F32, {2, 3, 4}, fb::Storage::Cache, 0, 0});
  spec.steps.push_back({fb::OpKind::CacheWrite, {5, 2, 1}, {5}});
  // The write reads tensor 2 after the softmax: their bytes must differ.
  spec.arena = 512;
  spec.tensors[4].offset = 256;
  EXPECT_NO_THROW(load(spec.build()));

  PlanSpec missing = spec;
  missing.caches.clear();
  expectRejected(missing, "tensor 5 refers to KV cache 0, but the plan has 0");
  PlanSpec reshaped = spec;
  reshaped.caches[0].shape = {2, 4, 4};
  expectRejected(reshaped, "tensor 5 views KV cache 'h.0.key' with another "
                           "shape or dtype");
  PlanSpec flat = spec;
  flat.caches.push_back({"h.0.value", {6}});
  expectRejected(flat, "KV cache 'h.0.value' has rank 1 (3 to");
  PlanSpec twice = spec;
  twice.caches.push_back(spec.caches[0]);
  expectRejected(twice, "KV cache 'h.0.key' appears twice");
  // The write may not land in a parameter's storage.
  PlanSpec elsewhere = spec;
  elsewhere.steps.back().results = {0};
  expectRejected(elsewhere, "writes tensor 0, which is not in the arena and "
                            "not its operand's storage");
  // Rotary takes its input and, optionally, positions: not three operands.
  PlanSpec rotary = spec;
  rotary.steps.push_back({fb::OpKind::Rotary, {2, 1, 1}, {3}});
  expectRejected(rotary, "expected 1 to 2 operands and 1 results, got 3");
}

// A cached embedding table (1.14): the program sees a cache of 3 of the
// table's 5 rows, looked up through its slot map (input 1).
TEST(PlanLoader, ChecksCachedTables) {
  PlanSpec spec;
  spec.cacheRows = 3;
  spec.cacheRatio = 0.6;
  spec.tensors[0].shape = {3, 4};
  spec.tensors.push_back({fb::DType::I32, {5}, fb::Storage::Input, 0, 1});
  spec.extraInputs = {{fb::InputKind::CacheMap, 5, 0}};
  spec.steps = {{fb::OpKind::Embedding, {0, 1, 5}, {2}}};
  spec.results = {2};
  EXPECT_NO_THROW(load(spec.build()));

  PlanSpec rows = spec;
  rows.cacheRows = 6;
  expectRejected(rows, "parameter 'wte' is a cached table of 6 rows (ratio "
                       "0.600000); a cache holds 1 to the block's 5 rows");
  PlanSpec ratio = spec;
  ratio.cacheRatio = 0;
  expectRejected(ratio, "parameter 'wte' is a cached table of 3 rows");
  PlanSpec whole = spec;
  whole.tensors[0].shape = {5, 4};
  expectRejected(whole, "tensor 0 views parameter 'wte' (or its optimizer "
                        "state) with a different size or dtype");
  PlanSpec map = spec;
  map.tensors[5].shape = {4};
  expectRejected(map, "input 1 must be i32 [5], one entry per row of "
                      "parameter 'wte''s block");
  PlanSpec rowsList = spec;
  rowsList.extraInputs.push_back({fb::InputKind::CacheRows, 6, 0});
  rowsList.tensors.push_back({fb::DType::I32, {7}, fb::Storage::Input, 0, 2});
  expectRejected(rowsList, "input 2 must be i32 [1..5]");
  PlanSpec uncached = spec;
  uncached.cacheRows = 0;
  uncached.tensors[0].shape = {5, 4};
  expectRejected(uncached, "input 1 names parameter 0, which is no cached "
                           "table");
  PlanSpec twice = spec;
  twice.extraInputs.push_back({fb::InputKind::CacheMap, 5, 0});
  expectRejected(twice, "repeats input kind CacheMap for one table");
  PlanSpec older = spec;
  older.minor = 13;
  expectRejected(older, "input 1 has an unknown kind");
  // The map must cover the cache's rows.
  PlanSpec shortMap = spec;
  shortMap.cacheRows = 3;
  shortMap.tensors[5].shape = {2};
  expectRejected(shortMap, "must be i32 [5]");
}

// A DLRM's dense features (1.15): f32 [batch, 1, features], which a
// gradient program may view in another shape (a reshape of the input).
TEST(PlanLoader, ChecksDenseFeatures) {
  PlanSpec spec;
  spec.tensors.push_back({fb::DType::F32, {2, 1, 6}, fb::Storage::Input, 0, 1});
  spec.tensors.push_back({fb::DType::F32, {2, 6}, fb::Storage::Input, 0, 1});
  spec.extraInputs = {{fb::InputKind::Dense, 5, 0}};
  spec.steps.push_back({fb::OpKind::Reshape, {5}, {6}});
  EXPECT_NO_THROW(load(spec.build()));
  const LoadedPlan plan = load(spec.build());
  EXPECT_EQ(plan.wholeInputShape("forward", fb::InputKind::Dense),
            (std::vector<int64_t>{2, 1, 6}));

  PlanSpec older = spec;
  older.minor = kPlanDenseMinor - 1;
  expectRejected(older, "input 1 has an unknown kind");
  PlanSpec rank2 = spec;
  rank2.tensors[5].shape = {2, 6};
  expectRejected(rank2, "input 1 (dense) must be an f32 [batch, 1, "
                        "features] tensor");
  PlanSpec integers = spec;
  integers.tensors[5].dtype = fb::DType::I32;
  integers.tensors[6].dtype = fb::DType::I32;
  expectRejected(integers, "input 1 (dense) must be an f32");
  // A view has the input's bytes: the same count and dtype.
  PlanSpec wider = spec;
  wider.tensors[6].shape = {2, 7};
  expectRejected(wider, "tensor 6 claims input 1, which belongs to another "
                        "tensor (of another size or dtype)");
  PlanSpec retyped = spec;
  retyped.tensors[6].dtype = fb::DType::BF16;
  expectRejected(retyped, "tensor 6 claims input 1, which belongs to another "
                          "tensor");
}

TEST(PlanLoader, RejectsAForeignFile) {
  std::vector<uint8_t> bytes(64, 0x41);
  EXPECT_THROW(load(bytes), PlanError);
  std::vector<uint8_t> tiny = {1, 2, 3};
  EXPECT_THROW(load(tiny), PlanError);
}

TEST(PlanLoader, RejectsEveryTruncation) {
  std::vector<uint8_t> bytes = PlanSpec().build();
  for (size_t size = 0; size < bytes.size(); ++size) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + size);
    EXPECT_THROW(load(cut), PlanError) << "truncated to " << size;
  }
}

TEST(PlanLoader, RejectsEveryChangedByte) {
  const std::vector<uint8_t> bytes = PlanSpec().build();
  int byChecksum = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::vector<uint8_t> copy = bytes;
    copy[i] ^= 0x10;
    try {
      load(copy);
      ADD_FAILURE() << "accepted a plan with byte " << i << " changed";
    } catch (const PlanError &error) {
      std::string message = error.what();
      byChecksum += message.find("the plan is corrupt: its content checksum "
                                 "is ") != std::string::npos;
    }
  }
  // Most changes still verify as flatbuffers; the checksum catches them.
  EXPECT_GT(byChecksum, int(bytes.size()) / 2);
}

TEST(PlanLoader, RequiresTheChecksumFromVersion1Point2) {
  PlanSpec unsealed;
  unsealed.checksum = false;
  expectRejected(unsealed, "the plan has no content checksum, which version "
                           "1.2 and later require");
  PlanSpec older = unsealed;
  older.minor = 1; // written before plans carried one
  EXPECT_NO_THROW(load(older.build()));
}

TEST(PlanLoader, ByteFlipsNeverCrash) {
  const std::vector<uint8_t> bytes = PlanSpec().build();
  std::mt19937 rng(7);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> copy = bytes;
    for (int flips = 1 + trial % 3; flips > 0; --flips)
      copy[rng() % copy.size()] ^= uint8_t(1u << (rng() % 8));
    // Resealed, so that the checks behind the checksum see the change too.
    sealPlan(copy);
    try {
      LoadedPlan plan = load(copy);
      // Whatever loads must also run without touching memory it lacks.
      ParamStore params = ParamStore::initialise(plan);
      for (const fb::Program *program : *plan.plan().programs()) {
        ProgramRunner runner(plan, program->name()->str(), params);
        std::vector<int32_t> tokens(
            runner.tokensShape()[0] * runner.tokensShape()[1], 0);
        runner.setInput(fb::InputKind::Tokens, tokens);
        runner.run();
      }
    } catch (const PlanError &) {
      ++rejected;
    } catch (const std::runtime_error &) {
      ++rejected; // e.g. a kernel rejecting an id: still a clean error
    }
  }
  EXPECT_GT(rejected, 0);
}

TEST(PlanLoader, RejectsOtherVersions) {
  PlanSpec newer;
  newer.major = kPlanVersionMajor + 1;
  newer.minor = 0;
  expectRejected(newer, "plan format version 2.0 is not supported");
  PlanSpec minor;
  minor.minor = kPlanVersionMinor + 1;
  expectRejected(minor, "is not supported");
}

TEST(PlanLoader, RejectsAGridThatDoesNotMatchTheWorld) {
  PlanSpec spec;
  spec.grid = {2, 2};
  expectRejected(spec, "the plan's grid [2,2] has 4 ranks, but 1 is running");
  expectRejected(PlanSpec(), "has 1 ranks, but 2 are running", 2);
  PlanSpec zero;
  zero.grid = {0};
  expectRejected(zero, "grid axis of size 0");
}

// Parameter and input splits name each grid axis once, in range; a
// parameter's dims divide by their shards; an input's split has its rank.
TEST(PlanLoader, ChecksMatmulPrecision) {
  // A bf16 product loads and runs; a precision on another kind, or one this
  // runtime does not know, is refused.
  PlanSpec bf16;
  bf16.steps[1].precision = fb::Precision::BF16;
  LoadedPlan plan = load(bf16.build());
  EXPECT_EQ(plan.plan().programs()->Get(0)->steps()->Get(1)->precision(),
            fb::Precision::BF16);
  PlanSpec onSoftmax;
  onSoftmax.steps[2].precision = fb::Precision::TF32;
  expectRejected(onSoftmax, "step 2 (Softmax): precision 1 is not a matmul's "
                            "or attention's f32, tf32 or bf16");
  PlanSpec unknown;
  unknown.steps[1].precision = static_cast<fb::Precision>(7);
  expectRejected(unknown, "step 1 (Matmul): precision 7 is not a matmul's");
}

TEST(PlanLoader, ChecksMixedPrecisionDTypes) {
  // Plan 1.10: the embedding stores bf16 rows, the table's bf16 copy
  // (Convert) feeds the product, which stores bf16; the softmax rounds into
  // f32. It runs, and its result reads as f32.
  PlanSpec mixed;
  mixed.tensors[2].dtype = fb::DType::BF16;
  mixed.tensors[3].dtype = fb::DType::BF16;
  mixed.arena = 512;
  mixed.tensors.push_back(
      {fb::DType::BF16, {5, 4}, fb::Storage::Arena, 256, 0});
  mixed.steps.insert(mixed.steps.begin() + 1, {fb::OpKind::Convert, {0}, {5}});
  mixed.steps[2].operands = {2, 5};
  {
    LoadedPlan plan = load(mixed.build());
    ParamStore params = ParamStore::initialise(plan);
    ProgramRunner runner(plan, "forward", params);
    runner.setInput(fb::InputKind::Tokens,
                    std::vector<int32_t>{0, 1, 2, 3, 4, 0});
    runner.run();
    std::span<const float> out = runner.result(0);
    ASSERT_EQ(out.size(), 30u);
    for (int row = 0; row < 6; ++row) {
      float sum = 0;
      for (int v = 0; v < 5; ++v)
        sum += out[row * 5 + v];
      EXPECT_NEAR(sum, 1.0f, 1e-6f);
    }
  }
  // bf16 activations and Convert need plan format 1.10.
  PlanSpec old = mixed;
  old.minor = kPlanBf16Minor - 1;
  expectRejected(old, "tensor 2 is an activation of type BF16; activations "
                      "are f32 (bf16 from plan format 1.10)");
  PlanSpec oldConvert;
  oldConvert.minor = kPlanBf16Minor - 1;
  oldConvert.arena = 512;
  oldConvert.tensors.push_back(
      {fb::DType::F32, {5, 4}, fb::Storage::Arena, 256, 0});
  oldConvert.steps.push_back({fb::OpKind::Convert, {0}, {5}});
  expectRejected(oldConvert, "step 3 (Convert): op kind Convert is not in "
                             "plan format 1.9");
  // The fused kinds are 1.10's too.
  PlanSpec oldSwiglu;
  oldSwiglu.minor = kPlanBf16Minor - 1;
  oldSwiglu.steps.push_back({fb::OpKind::Swiglu, {3, 3}, {4}});
  expectRejected(oldSwiglu, "step 3 (Swiglu): op kind Swiglu is not in plan "
                            "format 1.9");
  // A product's operands are activations of one dtype.
  PlanSpec apart = mixed;
  apart.steps[2].operands = {2, 0};
  expectRejected(apart, "step 2 (Matmul): operand 1 is F32 but the step's "
                        "other activations are BF16");
  // Kinds that move elements keep their operand's dtype.
  PlanSpec reshaped = mixed;
  reshaped.tensors.push_back(
      {fb::DType::F32, {6, 4}, fb::Storage::Arena, 0, 0});
  reshaped.steps.push_back({fb::OpKind::Reshape, {2}, {6}});
  expectRejected(reshaped, "step 4 (Reshape): result 0 is F32 but this kind "
                           "keeps its operand's BF16");
  // Statistics and optimizer state are f32: a bf16 loss is refused.
  PlanSpec loss = mixed;
  loss.tensors.push_back({fb::DType::BF16, {}, fb::Storage::Arena, 0, 0});
  loss.steps.push_back({fb::OpKind::CrossEntropy, {3, 1}, {6}});
  expectRejected(loss, "step 4 (CrossEntropy): result 0 must be f32, got BF16");
  // Parameters are f32 masters.
  PlanSpec param = mixed;
  param.tensors[0].dtype = fb::DType::BF16;
  expectRejected(param, "views parameter 'wte' (or its optimizer state) with a "
                        "different size or dtype");
}

TEST(PlanLoader, ChecksFusedLinears) {
  // The embedding's rows times the table, plus a bias of zeros: a Linear
  // instead of the Matmul; with GELU it may also return the preactivation.
  PlanSpec linear;
  linear.arena = 512;
  linear.tensors.push_back({fb::DType::F32, {5}, fb::Storage::Arena, 256, 0});
  linear.tensors.push_back(
      {fb::DType::F32, {2, 3, 5}, fb::Storage::Arena, 384, 0});
  linear.steps[1] = {fb::OpKind::Linear, {2, 0, 5}, {3}, true};
  linear.steps.insert(linear.steps.begin() + 1,
                      {fb::OpKind::Constant, {}, {5}});
  EXPECT_NO_THROW(load(linear.build()));
  PlanSpec preactivation = linear;
  preactivation.steps[2].results = {3, 6};
  expectRejected(preactivation, "step 2 (Linear): only a GELU linear has a "
                                "preactivation result");
  PlanSpec gelu = linear;
  gelu.steps[2].gelu = true;
  EXPECT_NO_THROW(load(gelu.build()));
  gelu.steps[2].results = {3, 6};
  EXPECT_NO_THROW(load(gelu.build()));
  PlanSpec bias = linear;
  bias.tensors[5].shape = {4};
  expectRejected(bias, "step 2 (Linear): bias has shape [4], expected [5]");
  PlanSpec many = gelu;
  many.steps[2].results = {3, 6, 6};
  expectRejected(many, "expected 3 operands and 1 to 2 results, got 3 and 3");
}

TEST(PlanLoader, ChecksAttentionShapes) {
  // The embedding [2, 3, 4] as query, key and value of a causal attention:
  // result [2, 3, 4], logsumexp [2, 3].
  PlanSpec attention;
  attention.tensors[3].shape = {2, 3, 4};
  attention.tensors[4] = {fb::DType::F32, {2, 3}, fb::Storage::Arena, 256, 0};
  attention.arena = 512;
  attention.steps = {{fb::OpKind::Embedding, {0, 1}, {2}},
                     {fb::OpKind::Attention, {2, 2, 2}, {3, 4}}};
  attention.steps[1].causal = true;
  attention.steps[1].precision = fb::Precision::BF16;
  attention.results = {3};
  LoadedPlan plan = load(attention.build());
  ASSERT_NE(plan.program("forward"), nullptr);
  ParamStore params = ParamStore::initialise(plan);
  ProgramRunner runner(plan, "forward", params);
  std::vector<int32_t> tokens = {0, 1, 2, 3, 4, 0};
  runner.setInput(fb::InputKind::Tokens, tokens);
  runner.run();
  std::span<const float> result = runner.result(0);
  ASSERT_EQ(result.size(), 24u);
  // The first query sees only itself: its row is its own (bf16) value.
  const std::vector<float> &table = std::as_const(params)[0];
  for (size_t f = 0; f < 4; ++f)
    EXPECT_NEAR(result[f], table[f], 0.01f * (1.0f + std::abs(table[f])));

  PlanSpec badLogSumExp = attention;
  badLogSumExp.tensors[4].shape = {2, 4};
  expectRejected(badLogSumExp,
                 "step 1 (Attention): logsumexp has shape [2,4], expected "
                 "[2,3]");
  // A key [3, 2, 4] (the embedding reshaped) over a batch of 2.
  PlanSpec badKey = attention;
  badKey.tensors.push_back(
      {fb::DType::F32, {3, 2, 4}, fb::Storage::Arena, 0, 0});
  badKey.steps.insert(badKey.steps.begin() + 1,
                      {fb::OpKind::Reshape, {2}, {5}});
  badKey.steps[2].operands = {2, 5, 5};
  expectRejected(badKey, "does not broadcast over query [2,3,4]");
  // Keys [2, 2, 4] (a slice) for 3 causal queries.
  PlanSpec notSquare = attention;
  notSquare.tensors.push_back(
      {fb::DType::F32, {2, 2, 4}, fb::Storage::Arena, 384, 0});
  notSquare.steps.insert(notSquare.steps.begin() + 1,
                         {fb::OpKind::Slice, {2}, {5}, false, {0, 0, 0}});
  notSquare.steps[2].operands = {2, 5, 5};
  expectRejected(notSquare, "causal attention needs as many queries as keys");
}

TEST(PlanLoader, RejectsBadSplits) {
  PlanSpec outOfRange;
  outOfRange.inputSplit = {{1}, {}};
  expectRejected(outOfRange, "input 0 has invalid split axes");
  PlanSpec repeated;
  repeated.grid = {2, 2};
  repeated.inputSplit = {{0}, {0}};
  expectRejected(repeated, "input 0 has invalid split axes", 4);
  PlanSpec rank;
  rank.inputSplit = {{0}};
  expectRejected(rank, "input 0 has a split for 1 of its 2 dimensions");
  PlanSpec paramRepeated;
  paramRepeated.grid = {2};
  paramRepeated.paramSplit = {{0}, {0}};
  expectRejected(paramRepeated, "parameter 'wte' has invalid split axes", 2);
  PlanSpec paramUneven;
  paramUneven.grid = {2};
  paramUneven.paramSplit = {{0}, {}};
  expectRejected(paramUneven,
                 "parameter 'wte' dimension 0 does not divide into 2 shards",
                 2);
}

// Rebalance points (1.6): the points themselves, the parameter dims that
// hold their blocks, and the tensors sized for their capacity.
TEST(PlanLoader, RejectsBadRebalancePoints) {
  auto spec = [] {
    PlanSpec s;
    s.grid = {2};
    s.points = {{"wte", 0, 4, 3}};
    return s;
  };
  PlanSpec axis = spec();
  axis.points[0].axis = 5;
  expectRejected(axis, "rebalance point 'wte' is over axis 5, which the grid",
                 2);
  PlanSpec blocks = spec();
  blocks.points[0].blocks = 3;
  expectRejected(
      blocks, "'wte' has 3 blocks, not a positive multiple of the axis's 2", 2);
  PlanSpec capacity = spec();
  capacity.points[0].capacity = 5;
  expectRejected(capacity, "'wte' has capacity 5, outside [2, 4]", 2);
  PlanSpec twice = spec();
  twice.points.push_back(twice.points[0]);
  expectRejected(twice, "rebalance point 1 has an empty or repeated name", 2);

  PlanSpec dims = spec();
  dims.paramRebalanceDims = {-1};
  expectRejected(dims, "has rebalance dims for 1 of its 2 dimensions", 2);
  PlanSpec index = spec();
  index.paramRebalanceDims = {-1, 3};
  expectRejected(index,
                 "dimension 1 names rebalance point 3, but the plan "
                 "has 1",
                 2);
  PlanSpec notSplit = spec();
  notSplit.paramRebalanceDims = {-1, 0};
  expectRejected(notSplit,
                 "parameter 'wte' dimension 1 holds rebalance blocks but is "
                 "not split over exactly the point's axis 0",
                 2);
  PlanSpec indivisible = spec();
  indivisible.paramShape = {5, 6};
  indivisible.paramSplit = {{}, {0}};
  indivisible.paramRebalanceDims = {-1, 0};
  expectRejected(indivisible,
                 "parameter 'wte' dimension 1 (6) is not a multiple of 4 "
                 "blocks of rebalance point 'wte'",
                 2);

  PlanSpec input = spec();
  input.tensors[1].rebalanceDims = {-1, 0};
  input.tensors[1].shape = {2, 3};
  expectRejected(input, "tensor 1 is a program input holding rebalance blocks",
                 2);
  PlanSpec tensorCapacity = spec();
  tensorCapacity.tensors[2].rebalanceDims = {-1, -1, 0};
  expectRejected(tensorCapacity,
                 "tensor 2 dimension 2 (4) is not a multiple of 3 (the "
                 "capacity) of rebalance point 'wte'",
                 2);
  PlanSpec viewsPlain = spec();
  viewsPlain.tensors[0].rebalanceDims = {-1, 0};
  viewsPlain.tensors[0].shape = {5, 3};
  expectRejected(viewsPlain,
                 "tensor 0 holds rebalance blocks of parameter 'wte', which "
                 "has none",
                 2);
}

// A plan that passes the loader never crashes the executor: a scalar's
// transpose and slice need no integers, so a plan may omit the vector (a
// crafted plan did, and the executor read through the null pointer).
TEST(PlanLoader, ScalarLayoutStepsWithoutIntegersRun) {
  for (fb::OpKind kind : {fb::OpKind::Transpose, fb::OpKind::Slice}) {
    SCOPED_TRACE(fb::EnumNameOpKind(kind));
    PlanSpec spec;
    // softmax -> norm_squared (a scalar) -> transpose/slice, no ints.
    spec.tensors.push_back({fb::DType::F32, {}, fb::Storage::Arena, 200, 0});
    spec.tensors.push_back({fb::DType::F32, {}, fb::Storage::Arena, 204, 0});
    spec.steps.push_back({fb::OpKind::NormSquared, {4}, {5}});
    spec.steps.push_back({kind, {5}, {6}});
    spec.results = {6, 5};
    LoadedPlan plan = load(spec.build());
    ParamStore params = ParamStore::initialise(plan);
    ProgramRunner runner(plan, "forward", params);
    runner.setInput(fb::InputKind::Tokens,
                    std::vector<int32_t>{0, 1, 2, 3, 4, 0});
    runner.run();
    EXPECT_EQ(runner.result(0)[0], runner.result(1)[0]);
    EXPECT_GT(runner.result(0)[0], 0.0f);
  }
}

TEST(PlanLoader, RejectsTensorsOutsideTheArena) {
  PlanSpec spec;
  spec.tensors[3].offset = 200; // 120 bytes from 200 > 256
  expectRejected(spec, "occupies bytes [200, 320) beyond the arena of 256");
  PlanSpec misaligned;
  misaligned.tensors[3].offset = 2; // kernels load whole f32 elements
  expectRejected(misaligned,
                 "starts at byte 2, not a multiple of its element size");
}

// Tensors live at once never share arena bytes (a compiler bug or a
// tampered plan with a recomputed checksum would run silently wrong); a
// view at its operand's bytes shares them by design, and a tensor may take
// the bytes of one that died before it was written.
TEST(PlanLoader, RejectsLiveTensorsThatShareArenaBytes) {
  PlanSpec spec; // tensor 4 reuses tensor 2's bytes: 2 died at step 1
  EXPECT_NO_THROW(load(spec.build()));
  PlanSpec overlapping = spec;
  overlapping.tensors[4].offset = 136;
  expectRejected(overlapping,
                 "program 'forward': tensors 3 and 4 share arena bytes [136, "
                 "248) while both are live (steps 1-2 and 2-3)");
  // Tensor 2 read again by the last step: now it lives while 4 is written.
  PlanSpec readLater = spec;
  readLater.tensors.push_back(
      {fb::DType::F32, {2, 3, 4}, fb::Storage::Arena, 128, 0});
  readLater.steps.push_back({fb::OpKind::Scale, {2}, {5}});
  readLater.results = {4, 5};
  expectRejected(readLater, "tensors 2 and 4 share arena bytes [0, 96) while "
                            "both are live (steps 0-3 and 2-4)");
  // A reshape's result at its operand's bytes is the same storage.
  PlanSpec view = spec;
  view.tensors.push_back({fb::DType::F32, {6, 5}, fb::Storage::Arena, 0, 0});
  view.steps.push_back({fb::OpKind::Reshape, {4}, {5}});
  view.results = {5};
  EXPECT_NO_THROW(load(view.build()));
  // The same bytes as a result of its own are not.
  view.steps.back().kind = fb::OpKind::Scale;
  view.tensors.back().shape = {2, 3, 5};
  expectRejected(view, "tensors 4 and 5 share arena bytes [0, 120)");
}

// End-of-sequence ids (1.11) lie in the vocabulary (the embedding's 5 rows
// here); plans before 1.11 fall back to config.json's eos_token_id.
TEST(PlanLoader, ChecksEndTokenIds) {
  PlanSpec spec;
  spec.eosTokenIds = std::vector<int64_t>{4, 0};
  EXPECT_EQ(load(spec.build()).endTokenIds(), (std::vector<int32_t>{4, 0}));
  PlanSpec outside = spec;
  outside.eosTokenIds = std::vector<int64_t>{1, 5};
  expectRejected(outside,
                 "end-of-sequence id 5 is outside the vocabulary of 5");
  PlanSpec negative = spec;
  negative.eosTokenIds = std::vector<int64_t>{-1};
  expectRejected(negative, "end-of-sequence id -1 is outside");
  PlanSpec older = spec;
  older.minor = kPlanEosMinor - 1;
  expectRejected(older, "eos_token_ids is not in plan format 1.10");
  PlanSpec none;
  EXPECT_TRUE(load(none.build()).endTokenIds().empty());
}

TEST(PlanLoader, RejectsHugeOrNegativeShapes) {
  PlanSpec negative;
  negative.tensors[2].shape = {2, -3, 4};
  expectRejected(negative, "negative dimension -3");
  PlanSpec huge;
  huge.tensors[2].shape = {1 << 20, 1 << 20, 1 << 20};
  expectRejected(huge, "more than 2^40 elements");
}

TEST(PlanLoader, RejectsBadOperands) {
  PlanSpec range;
  range.steps[1].operands = {2, 9};
  expectRejected(range, "operand tensor 9 is out of range");
  PlanSpec order;
  order.steps[1].operands = {4, 0}; // tensor 4 is written by step 2
  expectRejected(order, "reads tensor 4 before any step writes it");
  PlanSpec arity;
  arity.steps[2].operands = {3, 3};
  expectRejected(arity, "expected 1 operands and 1 results, got 2 and 1");
}

TEST(PlanLoader, RejectsShapeErrors) {
  PlanSpec matmul;
  matmul.steps[1].transposeRhs = false; // [2,3,4] x [5,4]
  expectRejected(matmul, "step 1 (Matmul): contraction sizes differ");
  PlanSpec result;
  result.tensors[4].shape = {2, 3, 4};
  expectRejected(result, "step 2 (Softmax): result has shape [2,3,4], "
                         "expected [2,3,5]");
}

TEST(PlanLoader, RejectsMisusedStorage) {
  PlanSpec param;
  param.paramShape = {4, 5, 1};
  param.tensors[0].shape = {5, 4, 2};
  expectRejected(
      param,
      "views parameter 'wte' (or its optimizer state) with a different size");
  PlanSpec writesParam;
  writesParam.steps[2].results = {0};
  writesParam.results = {0};
  expectRejected(writesParam, "writes tensor 0, which is not in the arena");
  // A reshape may view its own operand's storage, never another's.
  PlanSpec reshapeView;
  reshapeView.tensors.push_back(
      {fb::DType::F32, {4, 5}, fb::Storage::Param, 0, 0});
  reshapeView.steps[2] = {fb::OpKind::Reshape, {0}, {5}};
  reshapeView.results = {5};
  EXPECT_NO_THROW(load(reshapeView.build()));
  PlanSpec reshapeOntoMoment = reshapeView;
  reshapeOntoMoment.tensors[5].storage = fb::Storage::ExpAvg;
  expectRejected(reshapeOntoMoment,
                 "step 2 (Reshape): writes tensor 5, which is not in the "
                 "arena and not its operand's storage");
  PlanSpec input;
  input.inputTensor = 2;
  expectRejected(input,
                 "tensor 1 claims input 0, which belongs to another tensor");
  PlanSpec activation;
  activation.tensors[2].dtype = fb::DType::I32;
  // (1.12: i32 arena tensors are blocks of token ids, which only slices
  // make.)
  expectRejected(activation, "result 0 must be a float tensor, got I32");
}

TEST(PlanLoader, RejectsUnknownKindsAndWrongArity) {
  PlanSpec unknown;
  unknown.steps[2].kind = static_cast<fb::OpKind>(999);
  expectRejected(unknown, "this runtime cannot execute op kind");
  PlanSpec adamw;
  adamw.steps[2].kind = fb::OpKind::AdamW;
  expectRejected(adamw, "expected 7 operands and 3 results, got 1 and 1");
}

// A ring shift's receive buffer is read only by the wait that completes it,
// every shift is waited for, and an insert writes only arena activations.
TEST(PlanLoader, RejectsMisusedRingShifts) {
  PlanSpec base;
  base.tensors.push_back({fb::DType::F32,
                          {2, 3, 4},
                          fb::Storage::Arena,
                          128,
                          0}); // tensor 5: the block received
  const PlanSpec::S start = {fb::OpKind::RingShiftStart, {2}, {5}, false, {0}};
  PlanSpec unwaited = base;
  unwaited.steps.insert(unwaited.steps.begin() + 1, start);
  expectRejected(unwaited, "the transfer into tensor 5 is never waited for");
  PlanSpec early = unwaited;
  early.steps[2].operands = {5, 0}; // the matmul reads the block in flight
  expectRejected(early, "step 2 (Matmul): reads tensor 5 while a transfer "
                        "is still filling it");
  PlanSpec nothing = base;
  nothing.steps.insert(nothing.steps.begin() + 1,
                       {fb::OpKind::RingShiftWait, {2, 2}, {5}});
  expectRejected(nothing, "waits for tensor 2, which no ring shift is filling");
  PlanSpec intoParam = base;
  intoParam.steps.insert(intoParam.steps.begin() + 1,
                         {fb::OpKind::RingInsert, {0, 0}, {0}, false, {0}});
  expectRejected(intoParam, "the destination must be an arena activation");
  // Started, then waited: accepted.
  PlanSpec waited = unwaited;
  waited.steps.insert(waited.steps.begin() + 2,
                      {fb::OpKind::RingShiftWait, {5, 2}, {5}});
  EXPECT_NO_THROW(load(waited.build()));
}

TEST(PlanLoader, RejectsBadVocabularyAxes) {
  PlanSpec outside;
  outside.steps[0].ints = {1}; // the grid has one axis
  expectRejected(outside, "step 0 (Embedding): invalid vocabulary grid axes");
  PlanSpec twice;
  twice.grid = {1, 1};
  twice.steps[0].ints = {0, 0};
  expectRejected(twice, "invalid vocabulary grid axes");
  PlanSpec negative;
  negative.steps[0].ints = {-1};
  expectRejected(negative, "invalid vocabulary grid axes");
}

// A parameter viewed in another shape than its files (GPT-2's fused QKV as
// [h, 3, h]) must hold as many elements as the file shape.
TEST(PlanLoader, ChecksTheParameterFileShape) {
  PlanSpec viewed;
  viewed.paramFileShape = {20};
  LoadedPlan plan = load(viewed.build());
  EXPECT_EQ(fileShape(*plan.plan().params()->Get(0)),
            std::vector<int64_t>({20}));
  EXPECT_EQ(fileShape(*load(PlanSpec().build()).plan().params()->Get(0)),
            std::vector<int64_t>({5, 4}));
  PlanSpec mismatch;
  mismatch.paramFileShape = {4, 4};
  expectRejected(mismatch, "parameter 'wte' has an hf_shape of [4,4] whose "
                           "element count differs from its shape [5,4]");
}

TEST(PlanLoader, RejectsResultsThatAreNeverComputed) {
  PlanSpec spec;
  spec.steps.pop_back();
  expectRejected(spec, "result tensor 4 is never computed");
}

namespace {
/// A program that updates parameter 0 in place with AdamW, built from real
/// flatbuffers; `resultStorage` are the storages of AdamW's three results.
std::vector<uint8_t> adamwPlan(std::array<fb::Storage, 3> resultStorage) {
  flatbuffers::FlatBufferBuilder b;
  auto shape = [&](std::vector<int64_t> s) { return b.CreateVector(s); };
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors = {
      fb::CreateTensor(b, fb::DType::F32, shape({4}), fb::Storage::Param, 0, 0),
      fb::CreateTensor(b, fb::DType::F32, shape({4}), fb::Storage::Arena, 0, 0),
      fb::CreateTensor(b, fb::DType::F32, shape({4}), fb::Storage::ExpAvg, 0,
                       0),
      fb::CreateTensor(b, fb::DType::F32, shape({4}), fb::Storage::ExpAvgSq, 0,
                       0),
      fb::CreateTensor(b, fb::DType::F32, shape({}), fb::Storage::Arena, 64, 0),
      fb::CreateTensor(b, fb::DType::I64, shape({}), fb::Storage::Input, 0, 0),
      fb::CreateTensor(b, fb::DType::F32, shape({}), fb::Storage::Arena, 128,
                       0),
      fb::CreateTensor(b, fb::DType::I32, shape({1, 1}), fb::Storage::Input, 0,
                       1),
      fb::CreateTensor(b, fb::DType::F32, shape({4}), resultStorage[0], 256, 0),
      fb::CreateTensor(b, fb::DType::F32, shape({4}), resultStorage[1], 320, 0),
      fb::CreateTensor(b, fb::DType::F32, shape({4}), resultStorage[2], 384,
                       0)};
  auto constant = [&](uint32_t result, double value) {
    auto ops = b.CreateVector(std::vector<uint32_t>{});
    auto res = b.CreateVector(std::vector<uint32_t>{result});
    fb::StepBuilder step(b);
    step.add_kind(fb::OpKind::Constant);
    step.add_operands(ops);
    step.add_results(res);
    step.add_value(value);
    return step.Finish();
  };
  std::vector<flatbuffers::Offset<fb::Step>> steps = {
      constant(1, 0.5), constant(4, 0.1), constant(6, 1.0)};
  auto ops = b.CreateVector(std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6});
  auto res = b.CreateVector(std::vector<uint32_t>{8, 9, 10});
  fb::StepBuilder adamw(b);
  adamw.add_kind(fb::OpKind::AdamW);
  adamw.add_operands(ops);
  adamw.add_results(res);
  adamw.add_beta1(0.9);
  adamw.add_beta2(0.999);
  adamw.add_epsilon(1e-8);
  steps.push_back(adamw.Finish());
  std::vector<flatbuffers::Offset<fb::Input>> inputs = {
      fb::CreateInput(b, fb::InputKind::Step, 5),
      fb::CreateInput(b, fb::InputKind::Tokens, 7)};
  auto program = fb::CreateProgram(
      b, b.CreateString("train_step"), b.CreateVector(tensors),
      b.CreateVector(inputs), b.CreateVector(steps),
      b.CreateVector(std::vector<uint32_t>{8}), 512);
  std::vector<flatbuffers::Offset<fb::Param>> params = {fb::CreateParam(
      b, b.CreateString("w"), fb::DType::F32, shape({4}), fb::Init::Ones)};
  std::vector<flatbuffers::Offset<fb::Program>> programs = {program};
  const fb::Checksum unsealed(0);
  auto plan = fb::CreatePlan(b, kPlanVersionMajor, kPlanVersionMinor, 0,
                             shape({1}), 0, 0, b.CreateVector(params),
                             b.CreateVector(programs), &unsealed);
  fb::FinishPlanBuffer(b, plan);
  std::vector<uint8_t> bytes(b.GetBufferPointer(),
                             b.GetBufferPointer() + b.GetSize());
  EXPECT_TRUE(sealPlan(bytes));
  return bytes;
}
} // namespace

TEST(PlanLoader, AdamWUpdatesEachStorageInPlace) {
  std::vector<uint8_t> bytes = adamwPlan(
      {fb::Storage::Param, fb::Storage::ExpAvg, fb::Storage::ExpAvgSq});
  LoadedPlan plan = load(bytes);
  ParamStore params = ParamStore::initialise(plan);
  ProgramRunner runner(plan, "train_step", params);
  runner.setStep(1);
  runner.run();
  // Step 1 with g = 0.5, lr = 0.1, no decay: m = 0.05, v = 0.00025, and
  // p = 1 - 0.1 * (0.05/0.1) / (sqrt(0.00025/0.001) + 1e-8) = 0.9.
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(params[0][i], 0.9f, 1e-6f);
    EXPECT_NEAR(params.expAvg(0)[i], 0.05f, 1e-7f);
    EXPECT_NEAR(params.expAvgSq(0)[i], 0.00025f, 1e-9f);
  }
}

TEST(PlanLoader, ParamsStayCoherentWithADeviceCopy) {
  // The same AdamW step on a device the host cannot address: the host reads
  // the device's results, and a host write reaches the next device run.
  std::vector<uint8_t> bytes = adamwPlan(
      {fb::Storage::Param, fb::Storage::ExpAvg, fb::Storage::ExpAvgSq});
  LoadedPlan plan = load(bytes);
  ParamStore params = ParamStore::initialise(plan);
  ProgramRunner runner(plan, "train_step", params, nullptr,
                       stagedTestBackend());
  runner.setStep(1);
  runner.run();
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(params[0][i], 0.9f, 1e-6f);
    EXPECT_NEAR(std::as_const(params).expAvg(0)[i], 0.05f, 1e-7f);
  }
  // Back to 1 on the host, moments zeroed: step 1 again gives 0.9 again.
  params[0].assign(params[0].size(), 1.0f);
  params.expAvg(0).assign(4, 0.0f);
  params.expAvgSq(0).assign(4, 0.0f);
  runner.run();
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(std::as_const(params)[0][i], 0.9f, 1e-6f);
  // Reading on the host leaves the device copy current: a third run
  // continues from the second, as two CPU runs from the start do.
  runner.run();
  ParamStore reference = ParamStore::initialise(plan);
  ProgramRunner cpu(plan, "train_step", reference);
  cpu.setStep(1);
  cpu.run();
  cpu.run();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(std::as_const(params)[0][i], std::as_const(reference)[0][i]);
    EXPECT_EQ(std::as_const(params).expAvg(0)[i],
              std::as_const(reference).expAvg(0)[i]);
  }
}

TEST(PlanLoader, RejectsAdamWWritingAnotherStorage) {
  // A moment written over the parameter (or the parameter over a moment)
  // would alias state the plan says is separate.
  std::vector<uint8_t> aliased = adamwPlan(
      {fb::Storage::Param, fb::Storage::Param, fb::Storage::ExpAvgSq});
  try {
    load(aliased);
    FAIL() << "accepted AdamW writing its first moment over the parameter";
  } catch (const PlanError &error) {
    EXPECT_NE(std::string(error.what())
                  .find("writes tensor 9, which is not "
                        "in the arena"),
              std::string::npos)
        << error.what();
  }
  std::vector<uint8_t> swapped = adamwPlan(
      {fb::Storage::ExpAvg, fb::Storage::ExpAvg, fb::Storage::ExpAvgSq});
  EXPECT_THROW(load(swapped), PlanError);
  // Results in the arena (no in-place update) are fine.
  std::vector<uint8_t> arena =
      adamwPlan({fb::Storage::Arena, fb::Storage::Arena, fb::Storage::Arena});
  EXPECT_NO_THROW(load(arena));
}

//===----------------------------------------------------------------------===//
// The op table and the backend interface
//===----------------------------------------------------------------------===//

TEST(OpTable, DescribesEveryKindOnce) {
  std::span<const OpInfo> table = opTable();
  ASSERT_EQ(table.size(), size_t(fb::OpKind::MAX) + 1);
  for (size_t i = 0; i < table.size(); ++i) {
    const OpInfo &info = table[i];
    SCOPED_TRACE(opKindName(info.kind));
    EXPECT_EQ(size_t(info.kind), i);
    EXPECT_EQ(findOpInfo(info.kind), &info);
    EXPECT_LE(info.numOperands, kMaxStepOperands);
    EXPECT_LE(info.numResults, kMaxStepResults);
    // Only the pipeline sends (their start and wait) make no result.
    const bool sends =
        info.kind == fb::OpKind::SendStart || info.kind == fb::OpKind::SendWait;
    EXPECT_EQ(info.numResults == 0, sends);
    EXPECT_NE(info.check, nullptr);
    if (info.placement == ResultPlacement::UpdateInPlace)
      for (size_t r = 0; r < info.numResults; ++r)
        EXPECT_LT(info.updatedOperand[r], info.numOperands);
  }
  EXPECT_EQ(findOpInfo(static_cast<fb::OpKind>(table.size())), nullptr);
  EXPECT_EQ(cpuBackend().name(), "cpu"); // every kind has a CPU kernel
}

namespace {
/// A second backend: the CPU kernels, each dispatch recorded, and every
/// buffer it allocates poisoned with NaNs so that a step reading memory no
/// earlier step wrote shows in the results.
class RecordingBackend final : public Backend {
public:
  std::string_view name() const override { return "recording"; }
  bool hostVisible() const override { return true; }
  void upload(std::byte *device, const void *host, uint64_t bytes) override {
    cpuBackend().upload(device, host, bytes);
  }
  void download(void *host, const std::byte *device, uint64_t bytes) override {
    cpuBackend().download(host, device, bytes);
  }
  bool runsNatively(const fb::Step &) const override { return true; }
  std::unique_ptr<Buffer> allocate(uint64_t bytes) override {
    std::unique_ptr<Buffer> buffer = cpuBackend().allocate(bytes);
    std::fill_n(reinterpret_cast<float *>(buffer->data()), bytes / 4,
                std::numeric_limits<float>::quiet_NaN());
    allocated += bytes;
    return buffer;
  }
  void enqueue(const Dispatch &dispatch) override {
    kinds.push_back(dispatch.step.kind());
    ++pending;
    cpuBackend().enqueue(dispatch);
  }
  void synchronize() override {
    EXPECT_GT(pending, 0) << "synchronize without work";
    pending = 0;
  }
  std::vector<fb::OpKind> kinds;
  uint64_t allocated = 0;
  int pending = 0;
};
} // namespace

TEST(Backend, TheExecutorRunsEveryStepThroughItsBackend) {
  LoadedPlan plan = load(PlanSpec().build());
  ParamStore params = ParamStore::initialise(plan);
  std::vector<int32_t> tokens = {0, 1, 2, 3, 4, 0};
  ProgramRunner reference(plan, "forward", params);
  reference.setInput(fb::InputKind::Tokens, tokens);
  reference.run();

  RecordingBackend backend;
  ProgramRunner runner(plan, "forward", params, nullptr, backend);
  EXPECT_EQ(backend.allocated, runner.arenaBytes());
  runner.setInput(fb::InputKind::Tokens, tokens);
  runner.run();
  EXPECT_EQ(backend.kinds,
            (std::vector<fb::OpKind>{fb::OpKind::Embedding, fb::OpKind::Matmul,
                                     fb::OpKind::Softmax}));
  std::span<const float> got = runner.result(0), want = reference.result(0);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i], want[i]) << i;
}

namespace {
/// A device as the CUDA backend behaves: memory the host cannot address
/// (staged-cpu's), collectives counted when queued and run later, and
/// command buffers that replay what was queued without queueing it again.
class QueueingBackend final : public Backend {
public:
  std::string_view name() const override { return "queueing"; }
  bool hostVisible() const override { return false; }
  std::unique_ptr<Buffer> allocate(uint64_t bytes) override {
    return memory().allocate(bytes);
  }
  void upload(std::byte *device, const void *host, uint64_t bytes) override {
    memory().upload(device, host, bytes);
  }
  void download(void *host, const std::byte *device, uint64_t bytes) override {
    memory().download(host, device, bytes);
  }
  bool runsNatively(const fb::Step &) const override { return true; }
  CollectiveChannel *channel() override {
    return ownTransport ? &transport : nullptr;
  }
  void enqueue(const Dispatch &d) override {
    Queued step{&d.step,
                {d.operands.begin(), d.operands.end()},
                {d.results.begin(), d.results.end()},
                exchangeSeconds};
    if (d.step.kind() == fb::OpKind::AllReduce)
      d.comm->countCollective("all_reduce", {0},
                              size_t(d.operands[0].elements));
    if (recording)
      recording->steps.push_back(std::move(step));
    else
      step.run();
  }
  void synchronize() override {}
  std::unique_ptr<CommandBuffer>
  record(const std::function<void()> &enqueueSteps) override {
    auto steps = std::make_unique<QueuedSteps>();
    recording = steps.get();
    enqueueSteps();
    recording = nullptr;
    ++recordings;
    return steps;
  }
  int recordings = 0;
  /// As NCCL: its all-reduces move data outside the grid's MPI calls, and
  /// each waits this long for a slower peer.
  bool ownTransport = false;
  double exchangeSeconds = 0;

private:
  /// A device's own transport (queued all-reduces run in Queued::run): only
  /// where it waits matters here.
  struct DeviceTransport final : CollectiveChannel {
    std::string_view transport() const override { return "device"; }
    bool waitsOnHost() const override { return false; }
    bool matchesTransfersByTag() const override { return false; }
    [[noreturn]] static void unused() {
      throw std::logic_error("QueueingBackend moves its own data");
    }
    void allReduceSum(const std::vector<int> &, WireType, void *,
                      size_t) override {
      unused();
    }
    void allGather(const std::vector<int> &, WireType, const void *, void *,
                   size_t) override {
      unused();
    }
    void reduceScatterSum(const std::vector<int> &, WireType, const void *,
                          void *, size_t) override {
      unused();
    }
    void allToAll(const std::vector<int> &, WireType, const void *, void *,
                  size_t) override {
      unused();
    }
    void startShift(const std::vector<int> &, WireType, const void *, void *,
                    size_t) override {
      unused();
    }
    void finishShift(const void *) override { unused(); }
    void startSend(int, int64_t, int, WireType, const void *, size_t) override {
      unused();
    }
    void startReceive(int, int64_t, int, WireType, void *, size_t) override {
      unused();
    }
    void finishTransfer(const void *) override { unused(); }
  } transport;

  static Backend &memory() { return stagedTestBackend(); }
  struct Queued {
    const fb::Step *step;
    std::vector<TensorBinding> operands, results;
    double waitSeconds = 0;
    void run() const {
      if (step->kind() != fb::OpKind::AllReduce)
        return memory().enqueue({*step, operands, results, nullptr});
      std::this_thread::sleep_for(std::chrono::duration<double>(waitSeconds));
      // A one-rank all-reduce: the sum is the operand.
      std::vector<float> values(size_t(operands[0].elements));
      memory().download(values.data(), operands[0].data,
                        values.size() * sizeof(float));
      memory().upload(results[0].data, values.data(),
                      values.size() * sizeof(float));
    }
  };
  struct QueuedSteps final : CommandBuffer {
    std::vector<Queued> steps;
    void submit() override {
      for (const Queued &step : steps)
        step.run();
    }
  };
  QueuedSteps *recording = nullptr;
};
} // namespace

namespace {
/// The forward program with an all-reduce of its result (over axis 0).
PlanSpec allReducedForward() {
  PlanSpec spec;
  spec.tensors.push_back(
      {fb::DType::F32, {2, 3, 5}, fb::Storage::Arena, 128, 0});
  spec.steps.push_back({fb::OpKind::AllReduce, {4}, {5}, false, {0}});
  spec.results = {5};
  return spec;
}
} // namespace

TEST(Backend, CountsWaitingOnADeviceTransportAsWaiting) {
  // A device that runs an all-reduce over its own transport (NCCL) and
  // waits 50 ms in it for a slower peer: the step is waiting, not compute,
  // as GridComm counts its own MPI collectives, or rebalancing would see a
  // fast rank as slow as the straggler it waits for.
  LoadedPlan plan = load(allReducedForward().build());
  ParamStore params = ParamStore::initialise(plan);
  GridComm grid({1});
  QueueingBackend backend;
  backend.ownTransport = true;
  backend.exchangeSeconds = 0.05;
  ProgramRunner runner(plan, "forward", params, &grid, backend);
  runner.setInput(fb::InputKind::Tokens,
                  std::vector<int32_t>{0, 1, 2, 3, 4, 0});
  double waited = grid.waitSeconds();
  runner.run();
  EXPECT_GE(grid.waitSeconds() - waited, 0.05);
  EXPECT_LT(runner.computeSeconds(), 0.04);
  // A transport GridComm times itself: nothing is added (the fake's sleep
  // then reads as compute).
  backend.ownTransport = false;
  waited = grid.waitSeconds();
  runner.run();
  EXPECT_EQ(grid.waitSeconds(), waited);
  EXPECT_GE(runner.computeSeconds(), 0.05);
}

TEST(Backend, ReplaysARecordedProgramAndCountsItsTraffic) {
  // The forward program with an all-reduce of its result over a one-rank
  // grid: without step timing, run 1 goes step by step, run 2 records and
  // submits, runs 3 and 4 submit. Every run's collective is counted once,
  // and the results are the CPU's.
  LoadedPlan plan = load(allReducedForward().build());
  ParamStore params = ParamStore::initialise(plan);
  GridComm grid({1});
  std::vector<int32_t> tokens = {0, 1, 2, 3, 4, 0};
  ProgramRunner reference(plan, "forward", params, &grid);
  reference.setInput(fb::InputKind::Tokens, tokens);
  reference.run();
  const std::vector<float> want(reference.result(0).begin(),
                                reference.result(0).end());
  grid.resetStats();

  QueueingBackend backend;
  ProgramRunner runner(plan, "forward", params, &grid, backend);
  runner.setStepTiming(false);
  runner.setInput(fb::InputKind::Tokens, tokens);
  for (int run = 1; run <= 4; ++run) {
    runner.run();
    std::span<const float> got = runner.result(0);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << "run " << run << ", element " << i;
    EXPECT_EQ(grid.stats().at("all_reduce").calls, run) << "run " << run;
  }
  EXPECT_EQ(runner.replays(), 3);
  EXPECT_EQ(backend.recordings, 1);
  // Step timing on again: step by step, nothing recorded anew.
  runner.setStepTiming(true);
  runner.run();
  EXPECT_EQ(runner.replays(), 3);
  EXPECT_EQ(grid.stats().at("all_reduce").calls, 5);
}

// Each backend's kernels come from one list checked against the op table:
// every kind the loader accepts has a CPU kernel and, where the CUDA backend
// is built, a CUDA kernel or a staged path; a list that misses one is named.
TEST(KernelRegistry, EveryBackendHasAKernelForEveryKind) {
  EXPECT_EQ(cpuKernelsMissing(), std::vector<fb::OpKind>{});
#ifdef TPC_TEST_CUDA_KERNELS
  EXPECT_EQ(cudaKernelsMissing(), std::vector<fb::OpKind>{});
#endif
  KernelRegistry<int> partial("test");
  partial.add(fb::OpKind::Matmul, 1);
  EXPECT_THROW(partial.add(fb::OpKind::Matmul, 2), std::logic_error);
  EXPECT_EQ(partial[fb::OpKind::Matmul], 1);
  EXPECT_EQ(partial.missing().size(), opTable().size() - 1);
  try {
    partial.checkComplete();
    FAIL() << "an incomplete list passed";
  } catch (const std::logic_error &error) {
    EXPECT_EQ(std::string(error.what())
                  .rfind("the test backend has no "
                         "kernel for ",
                         0),
              0u)
        << error.what();
    EXPECT_EQ(std::string(error.what()).find("Matmul"), std::string::npos);
  }
}
