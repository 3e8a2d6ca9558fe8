#include "tpc/runtime/Session.h"

#include "tpc/runtime/Checkpoint.h"

#include <stdexcept>

namespace tpc::runtime {

namespace {
std::unique_ptr<GridComm> gridOf(const LoadedPlan &plan) {
  return std::make_unique<GridComm>(std::vector<int64_t>(
      plan.plan().grid()->begin(), plan.plan().grid()->end()));
}

Backend &backendFor(const SessionOptions &options) {
  return deviceBackend(options.device.empty() ? defaultDevice()
                                              : options.device,
                       options.localRank);
}

ParamStore paramsOf(const LoadedPlan &plan, const GridComm &grid,
                    const std::string &weights) {
  return weights.empty()
             ? ParamStore::initialise(plan, grid.coords())
             : ParamStore::fromSafetensors(plan, weights, grid.coords());
}
} // namespace

Session::Session(const std::string &planPath, const SessionOptions &options)
    // Braces: the device is checked before the plan is read.
    : Session{backendFor(options),
              LoadedPlan::load(planPath, Comm::world().size()), options} {}

Session::Session(LoadedPlan plan, const SessionOptions &options)
    : Session{backendFor(options), std::move(plan), options} {}

Session::Session(Backend &backend, LoadedPlan plan,
                 const SessionOptions &options)
    : backend_(&backend), plan_(std::move(plan)), grid_(gridOf(plan_)),
      params_(paramsOf(plan_, *grid_, options.weights)) {}

void Session::loadWeights(const std::string &path) {
  ParamStore loaded = ParamStore::fromSafetensors(plan_, path, grid_->coords());
  if (!(loaded.blocks() == params_.blocks()))
    throw std::invalid_argument(
        path + ": weights load only while the blocks are split evenly; "
               "this session's rebalancing has moved them");
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i] = std::as_const(loaded)[i];
}

void Session::exportHuggingFace(const std::string &dir) {
  writeWholeParams(plan_, params_, grid_.get(), [&](const ParamStore &whole) {
    tpc::runtime::exportHuggingFace(dir, plan_, whole);
  });
}

} // namespace tpc::runtime
