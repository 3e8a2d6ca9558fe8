// What a program's run measures of its steps, apart from dispatching them:
// each rank's compute seconds (its time less the time spent waiting in
// blocking collectives), per rebalance point and per op kind, and an
// emulated straggler (a rank's compute stretched by a factor) slept in
// pieces. ProgramRunner::run wraps each step's dispatch in time().
#pragma once

#include "tpc/runtime/Comm.h"
#include "tpc/runtime/Plan.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tpc::runtime {

/// Time spent per op kind.
struct OpStats {
  int64_t count = 0;
  double seconds = 0.0;
};

class StepTimer {
public:
  /// `comm` (may be null) counts the seconds collectives waited;
  /// `stepPoints` names each step's rebalance point (or -1) among `points`.
  StepTimer(GridComm *comm, std::vector<int32_t> stepPoints, size_t points)
      : comm(comm), stepPoints(std::move(stepPoints)), pointTime(points, 0.0) {}

  /// Stretches the compute of the following runs by `factor` >= 1.
  void setStretch(double factor) { stretch = factor; }

  /// Before a run's first step.
  void beginRun();
  /// Runs `dispatch` as step `index` (of `steps`): `deviceExchange` says the
  /// step's collective ran on the device's own communicator (NCCL), whose
  /// waiting the grid does not see, so all of its time counts as waiting.
  template <typename F>
  void time(size_t index, size_t steps, const plan::Step &step,
            bool deviceExchange, F &&dispatch) {
    const auto start = std::chrono::steady_clock::now();
    const double waitedBefore = comm ? comm->waitSeconds() : 0.0;
    dispatch();
    finish(index, steps, step, deviceExchange, start, waitedBefore);
  }
  /// A run replayed from a recorded command buffer: only its total is known.
  void replayed(double seconds);

  double computeSeconds() const { return computeTime; }
  const std::vector<double> &pointComputeSeconds() const { return pointTime; }
  const std::map<std::string, OpStats> &stats() const { return opStats; }
  void resetStats() { opStats.clear(); }

private:
  void finish(size_t index, size_t steps, const plan::Step &step,
              bool deviceExchange, std::chrono::steady_clock::time_point start,
              double waitedBefore);

  GridComm *comm;
  std::vector<int32_t> stepPoints;
  std::vector<double> pointTime; // per rebalance point
  double stretch = 1.0, computeTime = 0.0;
  double stretchDebt = 0.0; // emulated slowdown not yet slept
  std::map<std::string, OpStats> opStats;
};

} // namespace tpc::runtime
