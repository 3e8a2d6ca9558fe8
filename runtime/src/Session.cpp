#include "tpc/runtime/Session.h"

namespace tpc::runtime {

namespace {
std::unique_ptr<GridComm> gridOf(const LoadedPlan &plan) {
  return std::make_unique<GridComm>(std::vector<int64_t>(
      plan.plan().grid()->begin(), plan.plan().grid()->end()));
}

ParamStore paramsOf(const LoadedPlan &plan, const GridComm &grid,
                    const std::string &weights) {
  return weights.empty()
             ? ParamStore::initialise(plan, grid.coords())
             : ParamStore::fromSafetensors(plan, weights, grid.coords());
}
} // namespace

Session::Session(const std::string &planPath, const SessionOptions &options)
    : backend_(&deviceBackend(options.device.empty() ? defaultDevice()
                                                     : options.device,
                              options.localRank)),
      plan_(LoadedPlan::load(planPath, Comm::world().size())),
      grid_(gridOf(plan_)), params_(paramsOf(plan_, *grid_, options.weights)) {}

} // namespace tpc::runtime
