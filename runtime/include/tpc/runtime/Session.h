// A session: everything a run holds, with no globals. The plan (checked
// against the world's ranks), its grid's communicator, the backend the
// programs run on and this rank's parameters; the Generator, Evaluator and
// training loop run on it. Every rank opens one on the same plan.
#pragma once

#include "tpc/runtime/Evaluator.h"
#include "tpc/runtime/Generator.h"
#include "tpc/runtime/Training.h"

#include <memory>
#include <string>

namespace tpc::runtime {

struct SessionOptions {
  /// "cpu", "cuda" or "staged-cpu"; empty: defaultDevice().
  std::string device;
  /// This rank's index among the ranks of its machine: it picks the GPU.
  int localRank = 0;
  /// Parameters by HF name (safetensors); empty: the deterministic
  /// initialisation.
  std::string weights;
};

class Session {
public:
  /// Chooses the backend, loads and checks `planPath` for the world's ranks,
  /// creates the grid and loads or initialises this rank's parameters.
  /// Throws (one-line messages) for a bad device, plan, grid or weights.
  Session(const std::string &planPath, const SessionOptions &options = {});
  /// The same for a plan already loaded (checked for the world's ranks).
  Session(LoadedPlan plan, const SessionOptions &options = {});
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

  const LoadedPlan &plan() const { return plan_; }
  ParamStore &params() { return params_; }
  GridComm &grid() { return *grid_; }
  Backend &backend() { return *backend_; }

  /// Collective over the grid: the backend joins it (a GPU's NCCL
  /// communicator). Before the first program runs.
  void connect() { backend_->connect(*grid_); }

  Generator generator() {
    return Generator(plan_, params_, grid_.get(), *backend_);
  }
  Evaluator evaluator(const std::string &program) {
    return Evaluator(plan_, params_, grid_.get(), *backend_, program);
  }
  /// Steps @train_step on this session's parameters (Trainer).
  Trainer trainer(const std::array<float, 5> &hyperparameters,
                  const RebalanceOptions &rebalance = {}) {
    return Trainer(plan_, params_, grid_.get(), *backend_, hyperparameters,
                   rebalance);
  }

  /// Replaces the parameters' values by those of a safetensors file (by HF
  /// name, as SessionOptions::weights); AdamW's moments stay. Only while
  /// the blocks are split evenly (before any rebalancing moved them).
  void loadWeights(const std::string &path);
  /// Writes DIR/model.safetensors and DIR/config.json of the whole
  /// parameters (HuggingFace's layout), from the grid's first rank.
  /// Collective.
  void exportHuggingFace(const std::string &dir);

private:
  Session(Backend &backend, LoadedPlan plan, const SessionOptions &options);

  Backend *backend_;
  LoadedPlan plan_;
  std::unique_ptr<GridComm> grid_;
  ParamStore params_;
};

} // namespace tpc::runtime
