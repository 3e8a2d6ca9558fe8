// Run-time rebalancing (docs/rebalancing.md): every rank times its own
// compute per step (collective waits excluded); every `window` steps the
// timings are exchanged (one small all-gather), and when the slowest rank
// exceeds the mean of the others by `threshold` for `patience` windows in a
// row, the ranks re-plan their blocks of every rebalance point from the
// measured speeds: migration moves blocks (with weights and AdamW moments)
// to the faster ranks; ZERO-resizing keeps every block in place and has the
// slow rank compute only its highest-priority ones. Every rank takes the same
// decision from the same gathered numbers.
//
// A pipelined plan compiled with stage cuts (tp-pipeline's stage-moves=K)
// rebalances its stages instead: the same detector, and a migration switches
// to the cut whose slowest stage finishes first at the measured speeds,
// moving whole layers (parameters and moments) between neighbouring stages.
#pragma once

#include "tpc/runtime/Executor.h"

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tpc::runtime {

enum class RebalancePolicy { Off, Resize, Migrate, Auto };
/// "off", "resize", "migrate" or "auto"; throws std::invalid_argument.
RebalancePolicy parseRebalancePolicy(const std::string &text);
const char *rebalancePolicyName(RebalancePolicy policy);

/// An emulated straggler: rank `rank`'s compute is stretched by `factor`
/// from step `from` through step `to`.
struct Slowdown {
  int64_t rank = 0;
  double factor = 1.0;
  int64_t from = 1;
  int64_t to = std::numeric_limits<int64_t>::max();
};
/// Parses RANK:FACTOR[:FROM_STEP[:TO_STEP]]; throws std::invalid_argument
/// naming the part that is wrong.
Slowdown parseSlowdown(const std::string &text);
/// Parses each --slow; throws std::invalid_argument when two slow the same
/// rank at the same step (which factor would hold is not obvious).
std::vector<Slowdown> parseSlowdowns(const std::vector<std::string> &texts);

struct RebalanceOptions {
  RebalancePolicy policy = RebalancePolicy::Off;
  int64_t window = 3;      // steps per exchange of timings
  int64_t patience = 2;    // windows over the threshold before acting
  double threshold = 0.20; // slowest / mean of the others - 1 that counts
  /// The fraction of the predicted step a re-plan must save to be made
  /// (not a recovery's move home, which restores exactness).
  double minGain = 0.10;
  double heavy = 0.5;     // auto: an imbalance this large migrates at once
  int64_t persistent = 4; // auto: windows resized before migrating
  std::vector<Slowdown> slow;
  /// Known relative speeds, one per rank (empty: all equal): the blocks are
  /// split by them before the first step, as a migration would.
  std::vector<double> rankSpeeds;
};

/// One re-plan, as every rank took it.
struct RebalanceEvent {
  int64_t step = 0;   // after this step
  std::string action; // "migrate" or "resize"
  std::string reason;
  int64_t slowestRank = 0;
  double imbalance = 0;
  std::vector<double> speeds; // per rank, relative to the fastest
  /// Per point, per rank: blocks held and blocks computed afterwards.
  std::vector<std::vector<int64_t>> held, computed;
  double bytesMoved = 0; // sent by all ranks together
  double seconds = 0;    // the slowest rank's time to move
  /// Stage rebalancing: the stage cut and its layers per stage (per virtual
  /// stage, in layer order, when interleaved) afterwards (-1 and empty for
  /// blocks).
  int64_t cut = -1;
  std::vector<int64_t> stageLayers;
};

/// Stage rebalancing's prediction: per stage cut, each stage's predicted
/// seconds (its layers' Pipeline.layer_seconds); empty without stage cuts.
std::vector<std::vector<double>> cutStageSeconds(const plan::Plan &plan);
/// The step cut `cut` takes when stage s runs `slowness[s]` seconds per
/// predicted second: its slowest stage's time (every micro-batch waits for
/// the slowest stage's slot).
double cutStep(const std::vector<std::vector<double>> &stageSeconds,
               int64_t cut, const std::vector<double> &slowness);
/// The cut with the fastest step at `slowness`; among equals the lowest
/// index (the balanced cut, 0, first).
int64_t bestStageCut(const std::vector<std::vector<double>> &stageSeconds,
                     const std::vector<double> &slowness);

/// What a step costs each rank: its compute outside the points' blocks
/// ("fixed") and one block of each point, measured over a window.
struct StepCosts {
  std::vector<double> fixed;                 // per rank
  std::vector<std::vector<double>> perBlock; // per rank, per point
  /// A rank's compute, as if it ran alone: fixed + blocks x cost.
  double time(int64_t rank, const std::vector<int64_t> &blocksOf) const;
  /// The fixed compute of `rank` attributed to one segment between
  /// collectives (spread evenly over the points' and the optimizer's).
  double fixedShare(int64_t rank) const;
  /// The predicted step under `blocks` (computing only the active blocks,
  /// or all it holds): ranks meet at every point's collective, so per point
  /// its slowest rank's segment, plus the slowest fixed share.
  double step(const BlockAssignment &blocks, bool computedOnly) const;
};

/// Migration's target: per point, each block goes to the member that would
/// finish the point's segment first with it, within the capacity (optimal
/// for equal blocks); a member may end with none. Only what must move
/// moves: members over their target give away their last blocks, members
/// under it take them, in rank order. Every block computed.
BlockAssignment migratedAssignment(const BlockAssignment &now,
                                   const StepCosts &costs);

/// What the policy knows after a window: the imbalance, the counters the
/// rebalancer keeps across windows and the state of the blocks. Plain data,
/// so that every branch of the policy is a unit test.
struct PolicyState {
  /// The slowest rank's median step over the others' mean, minus 1.
  double imbalance = 0;
  /// The ranks run at one speed again (within the threshold).
  bool recovered = false;
  /// The window held the first step, which counts for nothing.
  bool warmup = false;
  /// The blocks: some left out (resized), each member holding its even
  /// share (none moved), and the even split itself (nothing moved, none
  /// left out).
  bool resized = false, holdsEvenShares = true, even = true;
  /// Windows in a row over the threshold, resized, and recovered; the
  /// patience that applies now (the options' from the even split, the
  /// settle rule's once blocks moved); the last window was a probe.
  int64_t overCount = 0, resizedCount = 0, recoveredCount = 0, patience = 1;
  bool probed = false;
};

/// What the policy asks for. Each re-plan is made only if the cost model
/// predicts it gains (unless `always`: restoring exactness).
enum class RebalanceAction {
  None,
  RestoreBlocks, // compute every held block again (ends a resize)
  MigrateHome,   // every block back to its even place
  Migrate,       // move blocks to faster ranks (exact)
  Resize,        // slow ranks compute fewer blocks (approximate)
  Probe,         // compute every block for one window, then look again
};
struct PolicyDecision {
  RebalanceAction action = RebalanceAction::None;
  std::string reason; // for the event and the log
  bool always = false;
};

/// The rebalancing policy (docs/rebalancing.md): a pure function of the
/// window's state and the options.
PolicyDecision decideRebalance(const PolicyState &state,
                               const RebalanceOptions &options);

/// Whether a re-plan predicted to take the step from `before` to `after`
/// seconds is worth making: it saves `minGain` of the step, or `always`.
bool replanPays(double before, double after, double minGain, bool always);

/// The measured step times of the block assignments a run has been in,
/// keyed by the blocks each rank computes of each point. The cost model
/// takes a rank's speed as fixed, but a rank sharing its core with another
/// process runs at a speed that depends on the blocks it holds (it gets
/// more of the core while it waits): a move back to an assignment measured
/// no faster than the present one is one the model got wrong.
class StepEvidence {
public:
  /// Records lapse after this many windows.
  static constexpr int64_t kFreshWindows = 32;
  /// Window `window` ran under `blocks` with a median step of `seconds`.
  /// A time more than `change` (relative) off the one recorded for the same
  /// blocks means the conditions changed (a straggler came or went): every
  /// other record is dropped.
  void record(const BlockAssignment &blocks, double seconds, int64_t window,
              double change);
  /// The median step last measured under `blocks`, if it is fresh at
  /// `window`.
  std::optional<double> measured(const BlockAssignment &blocks,
                                 int64_t window) const;
  /// Whether the records contradict a move from `now` to `next`: both were
  /// measured, and `next` was no faster.
  bool contradicts(const BlockAssignment &now, const BlockAssignment &next,
                   int64_t window) const;

private:
  struct Record {
    double seconds;
    int64_t window;
  };
  static std::vector<int64_t> key(const BlockAssignment &blocks);
  std::map<std::vector<int64_t>, Record> records;
};

class Rebalancer {
public:
  /// Throws std::invalid_argument if the policy is not off and the plan has
  /// no rebalance point nor stage cuts (resize needs points), or if its
  /// points spread over different axes. The
  /// ranks along the other axes (data-parallel replicas, 2D's other axis)
  /// keep the same blocks: every rank takes the same decisions from the
  /// same timings, each position of the points' axis costed by its slowest
  /// rank.
  Rebalancer(const LoadedPlan &plan, ParamStore &params, GridComm *comm,
             RebalanceOptions options);

  bool enabled() const {
    return options.policy != RebalancePolicy::Off || !options.slow.empty();
  }
  /// With rank speeds given: moves the blocks to the split those speeds
  /// call for (collective), as a migration after `step` (the last step
  /// done), which it returns; nothing if the even split already is it.
  std::optional<RebalanceEvent> applyRankSpeeds(int64_t step);
  /// This rank's emulated slowdown factor at `step` (1: none).
  double stretch(int64_t step) const;
  /// Records this rank's seconds of `step`: the whole step, its compute
  /// and, of that, the seconds on each point's blocks. At the end of every
  /// window, collective over the grid: exchanges the timings and may
  /// re-plan (relayout of `params`), which it returns.
  std::optional<RebalanceEvent>
  afterStep(int64_t step, double stepSeconds, double computeSeconds,
            const std::vector<double> &pointSeconds);

  /// Every rank's compute seconds per step, as exchanged.
  struct StepTimes {
    int64_t step;
    std::vector<double> seconds;
  };
  const std::vector<StepTimes> &computeTimes() const { return times; }
  /// What every window measured, as every rank saw it.
  struct WindowRecord {
    int64_t step; // its last step
    int64_t slowestRank;
    double imbalance; // the slowest rank's median step / the others' - 1
    std::vector<double> fixedSeconds; // per rank: compute outside blocks
    std::vector<double> speeds;       // per rank, the fastest 1
  };
  const std::vector<WindowRecord> &windows() const { return windowRecords; }
  /// The last window's verdict for the progress line, e.g. "slowest rank 1
  /// +83% | resized"; empty before the first exchange.
  const std::string &status() const { return statusLine; }

private:
  /// A window's timings, every rank's, turned into the cost model.
  struct WindowMeasurement {
    int64_t firstStep = 0;
    StepCosts costs; // per member of the rebalance axis
    std::vector<double> speeds;
    int64_t slowestRank = 0;
    double imbalance = 0, slowestSpeed = 1;
    /// The median over the window's steps of the slowest rank's step.
    double stepSeconds = 0;
    /// Stage rebalancing: per stage, its slowest rank's compute per
    /// predicted second of the stage's layers.
    std::vector<double> slowness;
  };
  /// Exchanges the window's timings (collective) and measures them.
  WindowMeasurement measureWindow(int64_t step);
  /// Carries out `decision` if it pays and the evidence does not refute
  /// it (a resize keeps the blocks of highest `scores`); the event it made,
  /// if any.
  std::optional<RebalanceEvent>
  applyDecision(int64_t step, const PolicyDecision &decision,
                const WindowMeasurement &window,
                const std::vector<std::vector<double>> &scores,
                int64_t windowIndex);

  /// Every block stays; slower ranks compute only their priority blocks.
  BlockAssignment resized(const StepCosts &costs,
                          const std::vector<std::vector<double>> &scores) const;
  /// Per member of the rebalance axis, the costs of its slowest rank.
  StepCosts memberCosts(const StepCosts &perRank) const;
  /// Every held block computed again.
  BlockAssignment restored() const;
  /// Records a re-plan from `now` to `next` for the settle rule (doubling
  /// settlePatience on a reversal); what the decision's reason should add.
  std::string settleAfter(const BlockAssignment &now,
                          const BlockAssignment &next);
  /// Every rank's `mine` (equal sizes), in rank order: collective over the
  /// grid, not counted as step traffic.
  std::vector<float> gatherRanks(const std::vector<float> &mine);
  RebalanceEvent apply(int64_t step, const BlockAssignment &next,
                       const char *action, std::string reason);
  /// Per point and block, the L1 norm of its weights' change since the last
  /// window, summed over ranks (collective); snapshots the weights.
  std::vector<std::vector<double>> blockScores();

  /// Per stage, the slowest of its ranks' `perRank` values.
  std::vector<double> slowestPerStage(const std::vector<double> &perRank) const;
  /// Layers per group (stage, or virtual stage in layer order) of stage cut
  /// `cut`.
  std::vector<int64_t> cutLayers(int64_t cut) const;

  const LoadedPlan &plan;
  ParamStore &params;
  GridComm *comm;
  RebalanceOptions options;
  int ranks = 1, rank = 0;
  /// Stage rebalancing (a plan with stage cuts and no rebalance points):
  /// each cut's predicted seconds per stage, and each rank's stage.
  bool stageMode = false;
  std::vector<std::vector<double>> stageSeconds;
  std::vector<int64_t> stageOfRank;
  /// Per rank, its position on the rebalance points' axis.
  std::vector<int64_t> memberOf;
  /// This rank's window: per step its compute seconds, those on each
  /// point's blocks, and the whole step's.
  std::vector<double> window;
  std::vector<StepTimes> times;
  std::vector<WindowRecord> windowRecords;
  int64_t overCount = 0;      // windows in a row over the threshold
  int64_t resizedCount = 0;   // windows spent resized (auto)
  int64_t recoveredCount = 0; // windows in a row at one speed
  /// Windows over the threshold (or recovered) before blocks already moved
  /// move again: the patience, doubled on every reversal (a move handing
  /// blocks back to a member the last move took them from, within
  /// kReversalWindows x settlePatience windows), up to kMaxSettlePatience.
  int64_t settlePatience = 0;
  static constexpr int64_t kReversalWindows = 4, kMaxSettlePatience = 32;
  int64_t lastMoveWindow = -1;     // the window of the last move (-1: none)
  std::vector<int64_t> lastGained; // per member, blocks it gained then
  bool probing = false;            // the last window restored every block
  std::vector<std::vector<float>> snapshot; // weights at the last window
  StepEvidence evidence;
  std::string statusLine;
};

} // namespace tpc::runtime
