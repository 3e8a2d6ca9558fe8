// Token files and parameter loading, with real files in a temp directory.
#include "tpc/runtime/Executor.h"
#include "tpc/runtime/Files.h"
#include "tpc/runtime/Init.h"
#include "tpc/runtime/Safetensors.h"
#include "tpc/runtime/Tokens.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <unistd.h>

using namespace tpc::runtime;
namespace fb = tpc::plan;

namespace {
std::string tempPath(const std::string &name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("tpc-tokens-params-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

void expectError(const std::function<void()> &fn, const std::string &needle) {
  try {
    fn();
    FAIL() << "no error; expected: " << needle;
  } catch (const std::exception &error) {
    EXPECT_NE(std::string(error.what()).find(needle), std::string::npos)
        << error.what();
  }
}

/// A plan with one program using two parameters of the given shapes.
std::vector<uint8_t> twoParamPlan() {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<fb::Param>> params = {
      fb::CreateParam(b, b.CreateString("w"), fb::DType::F32,
                      b.CreateVector(std::vector<int64_t>{2, 3}),
                      fb::Init::Normal, 1.0),
      fb::CreateParam(b, b.CreateString("g"), fb::DType::F32,
                      b.CreateVector(std::vector<int64_t>{3}), fb::Init::Ones)};
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors = {
      fb::CreateTensor(b, fb::DType::F32,
                       b.CreateVector(std::vector<int64_t>{2, 3}),
                       fb::Storage::Param, 0, 0),
      fb::CreateTensor(b, fb::DType::F32,
                       b.CreateVector(std::vector<int64_t>{3}),
                       fb::Storage::Param, 0, 1),
      fb::CreateTensor(b, fb::DType::I32,
                       b.CreateVector(std::vector<int64_t>{1, 1}),
                       fb::Storage::Input, 0, 0),
      fb::CreateTensor(b, fb::DType::F32,
                       b.CreateVector(std::vector<int64_t>{2, 3}),
                       fb::Storage::Arena, 0, 0)};
  auto ops = b.CreateVector(std::vector<uint32_t>{0, 1});
  auto res = b.CreateVector(std::vector<uint32_t>{3});
  fb::StepBuilder step(b);
  step.add_kind(fb::OpKind::Mul);
  step.add_operands(ops);
  step.add_results(res);
  std::vector<flatbuffers::Offset<fb::Step>> steps = {step.Finish()};
  std::vector<flatbuffers::Offset<fb::Input>> inputs = {
      fb::CreateInput(b, fb::InputKind::Tokens, 2)};
  auto program =
      fb::CreateProgram(b, b.CreateString("forward"), b.CreateVector(tensors),
                        b.CreateVector(inputs), b.CreateVector(steps),
                        b.CreateVector(std::vector<uint32_t>{3}), 64);
  std::vector<flatbuffers::Offset<fb::Program>> programs = {program};
  const fb::Checksum unsealed(0);
  auto plan = fb::CreatePlan(b, kPlanVersionMajor, kPlanVersionMinor, 0,
                             b.CreateVector(std::vector<int64_t>{1}), 0, 0,
                             b.CreateVector(params), b.CreateVector(programs),
                             &unsealed);
  fb::FinishPlanBuffer(b, plan);
  std::vector<uint8_t> bytes(b.GetBufferPointer(),
                             b.GetBufferPointer() + b.GetSize());
  EXPECT_TRUE(sealPlan(bytes));
  return bytes;
}
} // namespace

TEST(Tokens, RoundTripAndBatchWindows) {
  std::string path = tempPath("a.tokens");
  std::vector<int32_t> tokens = {5, 0, 65535, 2147483647, 7, 8, 9, 10};
  writeTokenFile(path, tokens);
  EXPECT_EQ(std::filesystem::file_size(path), 16u + 4 * tokens.size());
  EXPECT_EQ(readTokenFile(path), tokens);
  Batch batch = cutBatch(tokens, 1, 2, 3);
  EXPECT_EQ(batch.tokens,
            (std::vector<int32_t>{0, 65535, 2147483647, 7, 8, 9}));
  // Targets are the window shifted by one token.
  EXPECT_EQ(batch.targets,
            (std::vector<int32_t>{65535, 2147483647, 7, 8, 9, 10}));
  expectError([&] { cutBatch(tokens, 1, 2, 3 + 1); }, "needs 10");
}

TEST(Tokens, RejectsBadFiles) {
  std::string path = tempPath("bad.tokens");
  writeTokenFile(path, std::vector<int32_t>{1, 2, 3});
  std::filesystem::resize_file(path, 20);
  expectError([&] { readTokenFile(path); },
              "header says 3 tokens, but the file has 20 bytes (expected 28)");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << "TPCTOKv2" << std::string(8, '\0');
  }
  expectError([&] { readTokenFile(path); }, "not a token file");
  {
    // count = 1, id 0xffffffff
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << "TPCTOKv1" << '\1' << std::string(7, '\0') << std::string(4, '\xff');
  }
  expectError([&] { readTokenFile(path); }, "above 2^31-1");
  expectError([&] { readTokenFile(tempPath("none.tokens")); }, "cannot open");
}

// Untrusted paths: a device never ends and a directory is not a file; both
// are refused before anything is read, and so is a file over the limit.
TEST(Files, ReadsOnlyBoundedRegularFiles) {
  expectError([&] { readTokenFile("/dev/zero"); },
              "/dev/zero: is not a regular file (a token file is read from "
              "one)");
  expectError([&] { readRegularFile("/dev/zero", 1 << 20, "prompts file"); },
              "is not a regular file");
  expectError([&] { readRegularFile("/tmp", 1 << 20, "prompts file"); },
              "/tmp: is not a regular file");
  const std::string path = tempPath("five.txt");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << "12345";
  }
  EXPECT_EQ(readRegularFile(path, 5, "prompts file"), "12345");
  EXPECT_EQ(checkRegularFile(path, 5, "prompts file"), 5u);
  expectError([&] { readRegularFile(path, 4, "prompts file"); },
              "five.txt: is 5 bytes, more than the 4 bytes a prompts file "
              "may have");
  EXPECT_EQ(formatBytes(3 * (uint64_t(1) << 30)), "3.0 GiB");
  EXPECT_EQ(formatBytes(17 << 20), "17 MiB");
}

TEST(ParamStore, InitialisesByPlanAndLoadsSafetensors) {
  std::vector<uint8_t> bytes = twoParamPlan();
  LoadedPlan plan = LoadedPlan::fromBytes(bytes.data(), bytes.size(), 1, "p");
  ParamStore init = ParamStore::initialise(plan);
  EXPECT_EQ(init[1], (std::vector<float>{1, 1, 1}));
  EXPECT_FLOAT_EQ(init[0][4], normalAt(parameterKey("w"), 4));

  // f16 weights widen exactly; unused tensors are ignored.
  std::string path = tempPath("w.safetensors");
  SafetensorsWriter writer;
  std::vector<float> w = {0.5f, -1.25f, 2.0f, 3.0f, -0.125f, 8.0f};
  writer.addF32("w", {2, 3}, w, DType::F16);
  writer.addF32("g", {3}, std::vector<float>{1.5f, 2.5f, 3.5f});
  writer.addF32("unused", {1}, std::vector<float>{0.0f});
  writer.write(path);
  ParamStore loaded = ParamStore::fromSafetensors(plan, path);
  EXPECT_EQ(loaded[0], w);
  EXPECT_EQ(loaded[1], (std::vector<float>{1.5f, 2.5f, 3.5f}));

  SafetensorsWriter wrongShape;
  wrongShape.addF32("w", {3, 2}, w);
  wrongShape.addF32("g", {3}, std::vector<float>{1, 2, 3});
  wrongShape.write(path);
  expectError([&] { ParamStore::fromSafetensors(plan, path); },
              "tensor 'w' has shape [3,2], the plan expects [2,3]");

  SafetensorsWriter missing;
  missing.addF32("w", {2, 3}, w);
  missing.write(path);
  expectError([&] { ParamStore::fromSafetensors(plan, path); },
              "has no tensor 'g', which the plan needs");
}
