// Measures the machine a run is on and describes it as a cluster file for
// the step simulator (docs/simulator.md): the device's matrix-product time
// per shape and precision, how fast its other kernels stream memory, the
// fixed cost of a kernel, and the latency and bandwidth of each network
// level between the ranks it is given (MPI, or the backend's own channel:
// NCCL). Every number comes from the backend's own kernels and channel, the
// ones a plan runs on, fitted to the model the simulator predicts with
// (Cluster.h), so the fit's residuals say how far its costs can be trusted.
// The measurements are written next to the fit, for people.
#pragma once

#include "tpc/runtime/Backend.h"
#include "tpc/runtime/Comm.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace tpc::runtime {

struct CalibrationOptions {
  /// The cluster's name in the file.
  std::string name = "this-machine";
  /// Fewer and smaller problems (seconds instead of half a minute): for
  /// tests, not for a file to predict with.
  bool quick = false;
  /// Each point is run until this many seconds have passed (at least 3
  /// runs after a warm-up); its time is the median run.
  double secondsPerPoint = 0.2;
};

/// One timed matrix product: [m, k] x [k, n] with operands and result in
/// `precision` ("f32", or "bf16" storage and products, or "tf32").
struct ProductSample {
  std::string precision;
  int64_t m = 0, n = 0, k = 0;
  double seconds = 0;
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
};

/// One timed kernel that streams memory: `bytes` of operands and results,
/// as the simulator counts them.
struct StreamSample {
  std::string kernel;
  int64_t elements = 0;
  double bytes = 0, seconds = 0;
};

/// One timed exchange over a network level: an all-reduce of a `buffer`
/// bytes over the level's `ranks`, or one transfer of `buffer` bytes to a
/// rank of it. `messages` and `bytes` are what the simulator charges it
/// (the ring rule of Comm.h): seconds = messages * latency + bytes /
/// bandwidth.
struct ExchangeSample {
  std::string level, kind;
  int64_t ranks = 0;
  double buffer = 0, messages = 0, bytes = 0, seconds = 0;
};

/// The simulator's product model, t = overhead + (flops + halfFlops) /
/// peak (gemm_efficiency.max 1), fitted per precision (relative errors
/// weighed by each product's time); `overhead` is the kernel cost fitted
/// from the streams.
struct ProductFit {
  std::map<std::string, double> peak;      // FLOP/s per precision
  std::map<std::string, double> halfFlops; // per precision
  double predict(const ProductSample &s, double overhead) const {
    return overhead +
           (s.flops() + halfFlops.at(s.precision)) / peak.at(s.precision);
  }
};
ProductFit fitProducts(std::span<const ProductSample> samples, double overhead);

/// The simulator's stream model, t = overhead + bytes / bandwidth: the
/// overhead is the smallest kernels' median time, the bandwidth fitted to
/// the kernels past twice `cacheBytes` (at least the largest ones), as a
/// training step's activations mostly are.
struct StreamFit {
  double overhead = 0, bandwidth = 0;
};
StreamFit fitStreams(std::span<const StreamSample> samples, double cacheBytes);

/// The alpha-beta rule of one level, t = messages * latency + bytes /
/// bandwidth (latency at least 0).
struct ExchangeFit {
  double latency = 0, bandwidth = 0;
};
ExchangeFit fitExchanges(std::span<const ExchangeSample> samples);

/// Ranks on machines, as the simulator places them: `perMachine`
/// consecutive world ranks on each of `machines`.
struct Placement {
  int64_t machines = 1, perMachine = 1;
};

struct MachineCalibration {
  CalibrationOptions options;
  DeviceDescription device;
  std::string backend, kernels, transport;
  Placement placement;
  int threads = 0;
  std::vector<ProductSample> products;
  std::vector<StreamSample> streams;
  std::vector<ExchangeSample> exchanges;
  ProductFit productFit;
  StreamFit streamFit;
  /// Per network level, innermost first: its name and ranks per group.
  struct Level {
    std::string name;
    int64_t ranks = 0;
    ExchangeFit fit;
  };
  std::vector<Level> levels;

  /// The cluster file (docs/simulator.md), its measurements under
  /// "calibration"; `date` goes into its "source".
  nlohmann::ordered_json clusterJson(const std::string &date) const;
};

/// Collective over the world, which must have at least 2 ranks (the
/// network is measured between them) placed in order, as many on each
/// machine. World rank 0 times the device's kernels while the others sleep;
/// then every level's exchanges run on all of its groups at once. Throws
/// std::runtime_error with a one-line reason (on every rank alike for the
/// world's shape).
MachineCalibration calibrateMachine(Backend &backend, Comm &world,
                                    const CalibrationOptions &options);

} // namespace tpc::runtime
