// The cuDNN attention graphs the CUDA backend builds, validated by
// cudnn-frontend on the host for a given GPU generation (no GPU needed):
// the shapes of tpc's models (multi-head and grouped-query, causal, the
// head dims of GPT-2 and LLaMA) forward and backward; the host's head-dim
// rule (device::whyOwnAttention) agrees with cuDNN's for each generation;
// and a grouping cuDNN cannot run, which the backend then leaves to tpc's
// kernels. (Validation checks attributes, not the output dims we set: the
// GPU parity tests check the values.)
#include "cuda/CudnnAttention.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tpc::runtime::cuda {
namespace {

using device::SdpaDims;
using device::SdpaKey;

/// The graph's validation message, or a skip where libcudnn is missing.
#define EXPECT_VALID(key, sm)                                                  \
  do {                                                                         \
    const std::string why = CudnnAttention::validate(key, sm);                 \
    if (why.rfind("libcudnn not loaded", 0) == 0)                              \
      GTEST_SKIP() << why;                                                     \
    EXPECT_EQ(why, "") << device::describe(key) << " on sm " << (sm);          \
  } while (false)

TEST(CudnnGraphs, ModelShapesValidate) {
  const SdpaDims shapes[] = {
      {8, 12, 12, 1024, 1024, 64, 64}, // GPT-2 small
      {1, 32, 8, 2048, 2048, 64, 64},  // LLaMA-style 1B: 4 query heads a key
      {4, 4, 4, 16, 16, 16, 16},       // the test models
      {2, 8, 2, 128, 128, 128, 128},
  };
  for (const SdpaDims &dims : shapes)
    for (bool backward : {false, true})
      for (int sm : {80, 90}) {
        SdpaKey key;
        key.dims = dims;
        key.causal = true;
        key.alpha = 0.125f;
        key.backward = backward;
        EXPECT_VALID(key, sm);
      }
  // Not causal, queries against a longer key sequence.
  SdpaKey cross;
  cross.dims = {2, 4, 4, 16, 64, 32, 32};
  EXPECT_VALID(cross, 90);
}

/// Training needs both directions; cuDNN's backward takes fewer head dims.
TEST(CudnnGraphs, HeadDimRuleAgreesWithCudnn) {
  for (int sm : {80, 90}) {
    device::AttentionLibrary library{true, "", 91900, sm, false};
    for (int64_t dim = 4; dim <= 320; dim += 4) {
      SdpaKey key;
      key.dims = {2, 4, 4, 64, 64, dim, dim};
      key.causal = true;
      key.backward = true;
      const std::string why = CudnnAttention::validate(key, sm);
      if (why.rfind("libcudnn not loaded", 0) == 0)
        GTEST_SKIP() << why;
      const std::vector<int64_t> shape = {2, 4, 64, dim};
      const device::AttentionStep step{shape, shape, shape, plan::DType::BF16,
                                       true,  false};
      EXPECT_EQ(why.empty(), device::whyOwnAttention(library, step).empty())
          << "head dim " << dim << " on sm " << sm << ": cuDNN says '" << why
          << "'";
    }
  }
}

TEST(CudnnGraphs, UnevenGroupsAreRefused) {
  SdpaKey key;
  key.dims = {2, 12, 5, 64, 64, 64, 64};
  key.causal = true;
  for (bool backward : {false, true}) {
    key.backward = backward;
    const std::string why = CudnnAttention::validate(key, 90);
    if (why.rfind("libcudnn not loaded", 0) == 0)
      GTEST_SKIP() << why;
    EXPECT_NE(why.find("group-query attention"), std::string::npos) << why;
  }
}

} // namespace
} // namespace tpc::runtime::cuda
