#include "tpc/runtime/StepTimer.h"

#include "tpc/runtime/OpTable.h"

#include <algorithm>
#include <thread>

namespace tpc::runtime {

void StepTimer::beginRun() {
  computeTime = 0;
  std::fill(pointTime.begin(), pointTime.end(), 0.0);
}

void StepTimer::replayed(double seconds) {
  computeTime = seconds;
  std::fill(pointTime.begin(), pointTime.end(), 0.0);
}

void StepTimer::finish(size_t index, size_t steps, const plan::Step &step,
                       bool deviceExchange,
                       std::chrono::steady_clock::time_point start,
                       double waitedBefore) {
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  if (comm && deviceExchange)
    comm->addWaitSeconds(took.count() - (comm->waitSeconds() - waitedBefore));
  double computed =
      took.count() - ((comm ? comm->waitSeconds() : 0.0) - waitedBefore);
  if (stretch > 1.0) {
    // An emulated slower device: this rank's compute takes `stretch` times
    // as long. It sleeps (a rank sharing the core with others, as under
    // oversubscription, must not take their time), in pieces of at least
    // 200 us so that the sleep's own overhead stays small; the last piece is
    // paid at the end of the run.
    stretchDebt += (stretch - 1.0) * computed;
    const bool last = index + 1 == steps;
    if (stretchDebt >= 200e-6 || last) {
      auto sleepStart = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(std::chrono::duration<double>(stretchDebt));
      double slept = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - sleepStart)
                         .count();
      stretchDebt -= slept;
      computed += slept;
    }
    took = std::chrono::steady_clock::now() - start;
  }
  computeTime += computed;
  if (int32_t point = stepPoints[index]; point >= 0)
    pointTime[size_t(point)] += computed;
  OpStats &stats = opStats[opKindName(step.kind())];
  stats.count += 1;
  stats.seconds += took.count();
}

} // namespace tpc::runtime
