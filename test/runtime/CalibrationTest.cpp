// The fits tpc-calibrate describes a machine with: from times made by the
// simulator's own model with known parameters, each fit must give those
// parameters back; from times off the model, what it keeps and drops.

#include "tpc/runtime/Calibration.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tpc::runtime {
namespace {

TEST(Calibration, ProductFitRecoversPeakAndHalfFlopsPerPrecision) {
  const double overhead = 4e-6;
  // precision: peak, half_flops (bf16 needs larger products to fill).
  const std::map<std::string, std::pair<double, double>> truth = {
      {"f32", {1.5e11, 3e6}}, {"bf16", {6e11, 4e8}}};
  std::vector<ProductSample> samples;
  for (const auto &[precision, model] : truth)
    for (int64_t size : {32, 64, 128, 256, 512, 1024, 2048}) {
      ProductSample s{precision, size, size / 2, size, 0};
      s.seconds = overhead + (s.flops() + model.second) / model.first;
      samples.push_back(s);
    }
  const ProductFit fit = fitProducts(samples, overhead);
  for (const auto &[precision, model] : truth) {
    EXPECT_NEAR(fit.peak.at(precision) / model.first, 1.0, 1e-3) << precision;
    EXPECT_NEAR(fit.halfFlops.at(precision) / model.second, 1.0, 2e-3)
        << precision;
  }
  for (const ProductSample &s : samples)
    EXPECT_NEAR(fit.predict(s, overhead) / s.seconds, 1.0, 2e-3)
        << s.precision << " " << s.m;
}

TEST(Calibration, StreamFitTakesOverheadFromTinyKernelsAndRateFromLarge) {
  const double overhead = 2e-6, memory = 2e10, cache = 32 << 20;
  std::vector<StreamSample> samples;
  for (int64_t elements : {16, 1 << 12, 1 << 18, 1 << 22, 1 << 24, 1 << 25}) {
    const double bytes = 12.0 * double(elements);
    // Kernels whose data fits the cache stream 4 times faster: they must
    // not raise the rate (a step's activations are larger).
    const double rate = bytes < 2 * cache ? 4 * memory : memory;
    samples.push_back({"add", elements, bytes, overhead + bytes / rate});
  }
  const StreamFit fit = fitStreams(samples, cache);
  EXPECT_NEAR(fit.overhead / overhead, 1.0, 1e-2);
  EXPECT_NEAR(fit.bandwidth / memory, 1.0, 1e-6);
  // Too small a machine to see past the cache: the largest kernels decide.
  const StreamFit small = fitStreams(samples, 1e12);
  EXPECT_NEAR(small.bandwidth / memory, 1.0, 1e-6);
}

TEST(Calibration, ExchangeFitRecoversLatencyAndBandwidth) {
  const double latency = 3e-6, bandwidth = 8e9;
  std::vector<ExchangeSample> samples;
  for (double buffer = 4; buffer <= (64 << 20); buffer *= 4) {
    const int64_t n = 4;
    ExchangeSample reduce{"machine", "all_reduce",  n,
                          buffer,    2.0 * (n - 1), 2.0 * (n - 1) / n * buffer,
                          0};
    ExchangeSample send{"machine", "send", n, buffer, 1, buffer, 0};
    for (ExchangeSample *s : {&reduce, &send}) {
      s->seconds = s->messages * latency + s->bytes / bandwidth;
      samples.push_back(*s);
    }
  }
  const ExchangeFit fit = fitExchanges(samples);
  EXPECT_NEAR(fit.latency / latency, 1.0, 1e-9);
  EXPECT_NEAR(fit.bandwidth / bandwidth, 1.0, 1e-9);
  // Faster small messages than any positive latency allows: latency 0,
  // never negative.
  for (ExchangeSample &s : samples)
    s.seconds = s.bytes / bandwidth + (s.buffer < 1000 ? 0 : 1e-3);
  EXPECT_GE(fitExchanges(samples).latency, 0.0);
}

} // namespace
} // namespace tpc::runtime
