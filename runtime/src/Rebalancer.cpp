#include "tpc/runtime/Rebalancer.h"

#include "tpc/runtime/Comm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string_view>
#include <utility>

namespace tpc::runtime {

namespace {
/// ", but 1 rank runs" or ", but N ranks run": the end of the messages
/// naming more ranks than run.
std::string butRanksRun(int ranks) {
  return ", but " + std::to_string(ranks) +
         (ranks == 1 ? " rank runs" : " ranks run");
}
} // namespace

RebalancePolicy parseRebalancePolicy(const std::string &text) {
  if (text == "off")
    return RebalancePolicy::Off;
  if (text == "resize")
    return RebalancePolicy::Resize;
  if (text == "migrate")
    return RebalancePolicy::Migrate;
  if (text == "auto")
    return RebalancePolicy::Auto;
  throw std::invalid_argument("unknown rebalance policy '" + text +
                              "' (expected off, resize, migrate or auto)");
}

const char *rebalancePolicyName(RebalancePolicy policy) {
  switch (policy) {
  case RebalancePolicy::Resize:
    return "resize";
  case RebalancePolicy::Migrate:
    return "migrate";
  case RebalancePolicy::Auto:
    return "auto";
  case RebalancePolicy::Off:
    break;
  }
  return "off";
}

Slowdown parseSlowdown(const std::string &text) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t colon; (colon = text.find(':', start)) != std::string::npos;
       start = colon + 1)
    parts.push_back(text.substr(start, colon - start));
  parts.push_back(text.substr(start));
  auto fail = [&](const std::string &why) -> Slowdown {
    throw std::invalid_argument(
        "--slow " + text + ": " + why +
        " (expected RANK:FACTOR[:FROM_STEP[:TO_STEP]])");
  };
  if (parts.size() < 2 || parts.size() > 4)
    return fail("wrong number of fields");
  auto integer = [&](const std::string &part, const char *what) {
    size_t used = 0;
    long long value = -1;
    try {
      value = std::stoll(part, &used);
    } catch (const std::exception &) {
      used = 0;
    }
    if (used != part.size() || part.empty() || value < 0)
      fail(std::string(what) + " '" + part + "' is not a non-negative integer");
    return int64_t(value);
  };
  Slowdown slow;
  slow.rank = integer(parts[0], "rank");
  size_t used = 0;
  try {
    slow.factor = std::stod(parts[1], &used);
  } catch (const std::exception &) {
    used = 0;
  }
  if (used != parts[1].size() || !(slow.factor >= 1.0 && slow.factor <= 1000))
    return fail("factor '" + parts[1] + "' is not a number from 1 to 1000");
  if (parts.size() > 2)
    slow.from = integer(parts[2], "from step");
  if (parts.size() > 3)
    slow.to = integer(parts[3], "to step");
  if (slow.from < 1 || slow.to < slow.from)
    return fail("the steps must satisfy 1 <= FROM_STEP <= TO_STEP");
  return slow;
}

std::vector<Slowdown> parseSlowdowns(const std::vector<std::string> &texts) {
  std::vector<Slowdown> slowdowns;
  for (const std::string &text : texts)
    slowdowns.push_back(parseSlowdown(text));
  for (size_t i = 0; i < slowdowns.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      const Slowdown &a = slowdowns[j], &b = slowdowns[i];
      if (a.rank == b.rank && a.from <= b.to && b.from <= a.to)
        throw std::invalid_argument(
            "--slow " + texts[j] + " and --slow " + texts[i] +
            " both slow rank " + std::to_string(a.rank) + " at step " +
            std::to_string(std::max(a.from, b.from)) +
            "; give each rank one factor per step (FROM_STEP:TO_STEP)");
    }
  return slowdowns;
}

Rebalancer::Rebalancer(const LoadedPlan &plan, ParamStore &params,
                       GridComm *comm, RebalanceOptions options)
    : plan(plan), params(params), comm(comm), options(std::move(options)) {
  if (comm) {
    ranks = comm->size();
    rank = comm->rank();
  }
  for (const Slowdown &slow : this->options.slow)
    if (slow.rank >= ranks)
      throw std::invalid_argument("--slow names rank " +
                                  std::to_string(slow.rank) +
                                  butRanksRun(ranks));
  if (this->options.window < 1 || this->options.patience < 1 ||
      this->options.persistent < 1 || !(this->options.threshold > 0) ||
      !(this->options.minGain >= 0 && this->options.minGain < 1))
    throw std::invalid_argument(
        "rebalancing: window, patience and persistence must be >= 1, the "
        "threshold > 0, the minimum gain from 0 to below 1");
  const std::vector<double> &given = this->options.rankSpeeds;
  if (!given.empty() && int64_t(given.size()) != ranks)
    throw std::invalid_argument(
        "--rank-speeds gives " + std::to_string(given.size()) +
        (given.size() == 1 ? " speed" : " speeds") + butRanksRun(ranks));
  for (double speed : given)
    if (!(speed > 0 && std::isfinite(speed)))
      throw std::invalid_argument("--rank-speeds: " + std::to_string(speed) +
                                  " is not a positive speed");
  // Every point spreads its blocks over one axis; the ranks along the other
  // axes (data-parallel replicas, 2D's other axis) hold the same blocks as
  // their peers at the same position.
  const BlockAssignment &blocks = params.blocks();
  for (size_t p = 1; p < blocks.numPoints(); ++p)
    if (blocks.axis(p) != blocks.axis(0))
      throw std::invalid_argument(
          "--rebalance: the plan's rebalance points spread their blocks over "
          "different grid axes (" +
          std::to_string(blocks.axis(0)) + " and " +
          std::to_string(blocks.axis(p)) + "); rebalancing supports one");
  if (blocks.numPoints() > 0) {
    const std::vector<int64_t> shape(plan.plan().grid()->begin(),
                                     plan.plan().grid()->end());
    for (int r = 0; r < ranks; ++r)
      memberOf.push_back(blocks.memberAt(0, GridComm::coordsOf(shape, r)));
  }
  settlePatience = this->options.patience;
  stageMode = blocks.numPoints() == 0 && plan.numCuts() > 1;
  if (stageMode) {
    stageSeconds = cutStageSeconds(plan.plan());
    const std::vector<int64_t> shape(plan.plan().grid()->begin(),
                                     plan.plan().grid()->end());
    for (int r = 0; r < ranks; ++r)
      stageOfRank.push_back(plan.stageOf(GridComm::coordsOf(shape, r)));
  }
  if (this->options.policy == RebalancePolicy::Off && given.empty())
    return;
  const std::string what =
      given.empty() ? "--rebalance=" +
                          std::string(rebalancePolicyName(this->options.policy))
                    : std::string("--rank-speeds");
  if (stageMode && this->options.policy == RebalancePolicy::Resize)
    throw std::invalid_argument(
        what + ": the plan's pipeline stages move whole layers, which no "
               "stage can leave out; use migrate or auto");
  if (params.blocks().numPoints() == 0 && !stageMode)
    throw std::invalid_argument(
        what + ": the plan has no rebalance points (compile with "
               "tp-pipeline's rebalance=true) nor stage cuts (pp=P with "
               "stage-moves=K)");
}

std::vector<std::vector<double>> cutStageSeconds(const plan::Plan &plan) {
  std::vector<std::vector<double>> seconds;
  const plan::Pipeline *pipeline = plan.pipeline();
  if (!pipeline || !pipeline->cuts() || !pipeline->layer_seconds())
    return seconds;
  // The loader checked that every cut covers the layers once. Group g (a
  // virtual stage when interleaved) runs on stage g mod stages.
  for (const plan::StageCut *cut : *pipeline->cuts()) {
    std::vector<double> stages(size_t(pipeline->stages()), 0.0);
    size_t layer = 0;
    for (size_t g = 0; g < cut->layers()->size(); ++g)
      for (int64_t i = 0; i < cut->layers()->Get(g); ++i)
        stages[g % stages.size()] += pipeline->layer_seconds()->Get(layer++);
    seconds.push_back(std::move(stages));
  }
  return seconds;
}

double cutStep(const std::vector<std::vector<double>> &stageSeconds,
               int64_t cut, const std::vector<double> &slowness) {
  double slowest = 0;
  for (size_t s = 0; s < stageSeconds[size_t(cut)].size(); ++s)
    slowest = std::max(slowest, stageSeconds[size_t(cut)][s] * slowness[s]);
  return slowest;
}

int64_t bestStageCut(const std::vector<std::vector<double>> &stageSeconds,
                     const std::vector<double> &slowness) {
  int64_t best = 0;
  for (int64_t c = 1; c < int64_t(stageSeconds.size()); ++c)
    if (cutStep(stageSeconds, c, slowness) <
        cutStep(stageSeconds, best, slowness))
      best = c;
  return best;
}

std::vector<double>
Rebalancer::slowestPerStage(const std::vector<double> &perRank) const {
  std::vector<double> stages(stageSeconds.empty() ? 0 : stageSeconds[0].size(),
                             0.0);
  for (size_t r = 0; r < perRank.size(); ++r)
    stages[size_t(stageOfRank[r])] =
        std::max(stages[size_t(stageOfRank[r])], perRank[r]);
  return stages;
}

std::vector<int64_t> Rebalancer::cutLayers(int64_t cut) const {
  const auto *layers =
      plan.plan().pipeline()->cuts()->Get(size_t(cut))->layers();
  return std::vector<int64_t>(layers->begin(), layers->end());
}

StepCosts Rebalancer::memberCosts(const StepCosts &perRank) const {
  // Each member of the rebalance axis stands for the ranks at its position
  // along the other axes: they compute the same blocks and meet at the
  // collectives over those axes, so the slowest of them sets its cost.
  const int64_t members = params.blocks().members(0);
  StepCosts costs;
  costs.fixed.assign(size_t(members), 0.0);
  costs.perBlock.assign(size_t(members),
                        std::vector<double>(perRank.perBlock[0].size(), 0.0));
  for (size_t r = 0; r < perRank.fixed.size(); ++r) {
    const size_t m = size_t(memberOf[r]);
    costs.fixed[m] = std::max(costs.fixed[m], perRank.fixed[r]);
    for (size_t p = 0; p < perRank.perBlock[r].size(); ++p)
      costs.perBlock[m][p] =
          std::max(costs.perBlock[m][p], perRank.perBlock[r][p]);
  }
  return costs;
}

std::optional<RebalanceEvent> Rebalancer::applyRankSpeeds(int64_t step) {
  const std::vector<double> &given = options.rankSpeeds;
  if (given.empty())
    return std::nullopt;
  const BlockAssignment &blocks = params.blocks();
  const double fastest = *std::max_element(given.begin(), given.end());
  std::vector<double> speeds;
  for (double speed : given)
    speeds.push_back(speed / fastest);
  BlockAssignment next = blocks;
  if (stageMode) {
    // A stage runs at its slowest rank's speed.
    std::vector<double> slowness;
    for (double speed : speeds)
      slowness.push_back(1.0 / speed);
    next.setCut(bestStageCut(stageSeconds, slowestPerStage(slowness)));
  } else {
    // Stated speeds, not measured ones: a block costs 1 / speed on each
    // rank and nothing else differs, so the migration's scheduling splits
    // every point in proportion (as finely as its blocks allow).
    StepCosts costs;
    for (double speed : speeds) {
      costs.fixed.push_back(0.0);
      costs.perBlock.emplace_back(blocks.numPoints(), 1.0 / speed);
    }
    next = migratedAssignment(blocks, memberCosts(costs));
  }
  if (next == blocks)
    return std::nullopt;
  std::string listed;
  for (double speed : given) {
    char text[32];
    std::snprintf(text, sizeof text, "%s%g", listed.empty() ? "" : ", ", speed);
    listed += text;
  }
  RebalanceEvent event =
      apply(step, next, "migrate", "rank speeds given: " + listed);
  event.speeds = speeds;
  event.slowestRank =
      std::min_element(speeds.begin(), speeds.end()) - speeds.begin();
  event.imbalance = 1.0 / speeds[size_t(event.slowestRank)] - 1.0;
  return event;
}

double Rebalancer::stretch(int64_t step) const {
  double factor = 1.0;
  for (const Slowdown &slow : options.slow)
    if (slow.rank == rank && step >= slow.from && step <= slow.to)
      factor *= slow.factor;
  return factor;
}

double StepCosts::time(int64_t rank,
                       const std::vector<int64_t> &blocksOf) const {
  double t = fixed[size_t(rank)];
  for (size_t p = 0; p < blocksOf.size(); ++p)
    t += double(blocksOf[p]) * perBlock[size_t(rank)][p];
  return t;
}

double StepCosts::fixedShare(int64_t rank) const {
  return fixed[size_t(rank)] / double(perBlock[size_t(rank)].size() + 1);
}

double StepCosts::step(const BlockAssignment &blocks, bool computedOnly) const {
  // The ranks meet at every point's collective: each point's segment lasts
  // as long as its slowest rank, and the fixed work (spread over the
  // segments and the one around the optimizer) waits likewise.
  double total = 0;
  for (size_t r = 0; r < fixed.size(); ++r)
    total = std::max(total, fixedShare(int64_t(r)));
  for (size_t p = 0; p < blocks.numPoints(); ++p) {
    double segment = 0;
    for (size_t r = 0; r < fixed.size(); ++r) {
      const int64_t count = computedOnly
                                ? blocks.active(p, int64_t(r))
                                : int64_t(blocks.held(p, int64_t(r)).size());
      segment = std::max(segment, fixedShare(int64_t(r)) +
                                      double(count) * perBlock[r][p]);
    }
    total += segment;
  }
  return total;
}

BlockAssignment migratedAssignment(const BlockAssignment &now,
                                   const StepCosts &costs) {
  const size_t points = now.numPoints();
  const int64_t members = now.members(0);
  // Per point (ranks meet at its collective, so a point's blocks balance
  // among themselves, not against another point's): each block goes to the
  // member that would finish the segment first with it, within the
  // capacity; optimal for equal blocks. A member may end with no block of a
  // point (kernels take zero extents): a straggler several times slower
  // should not keep a head it cannot compute in time.
  std::vector<std::vector<int64_t>> target(size_t(members),
                                           std::vector<int64_t>(points, 0));
  for (size_t p = 0; p < points; ++p) {
    std::vector<double> finish;
    for (int64_t m = 0; m < members; ++m)
      finish.push_back(costs.fixedShare(m));
    for (int64_t left = now.blocks(p); left > 0; --left) {
      int64_t best = -1;
      for (int64_t m = 0; m < members; ++m) {
        if (target[size_t(m)][p] >= now.capacity(p))
          continue;
        double t = finish[size_t(m)] + costs.perBlock[size_t(m)][p];
        if (best < 0 ||
            t < finish[size_t(best)] + costs.perBlock[size_t(best)][p])
          best = m;
      }
      ++target[size_t(best)][p]; // the capacity admits all blocks
      finish[size_t(best)] += costs.perBlock[size_t(best)][p];
    }
  }
  // Members over their target give away their last blocks; members under
  // it take them, in rank order: only what must move moves.
  BlockAssignment next = now;
  for (size_t p = 0; p < points; ++p) {
    std::vector<std::vector<int64_t>> held;
    std::vector<int64_t> pool;
    for (int64_t m = 0; m < members; ++m) {
      std::span<const int64_t> mine = now.held(p, m);
      held.emplace_back(mine.begin(), mine.end());
      while (int64_t(held[size_t(m)].size()) > target[size_t(m)][p]) {
        pool.push_back(held[size_t(m)].back());
        held[size_t(m)].pop_back();
      }
    }
    for (int64_t m = 0; m < members; ++m)
      while (int64_t(held[size_t(m)].size()) < target[size_t(m)][p]) {
        held[size_t(m)].push_back(pool.back());
        pool.pop_back();
      }
    for (int64_t m = 0; m < members; ++m) {
      const int64_t count = int64_t(held[size_t(m)].size());
      next.set(p, m, std::move(held[size_t(m)]), count);
    }
  }
  return next;
}

std::vector<int64_t> StepEvidence::key(const BlockAssignment &blocks) {
  std::vector<int64_t> computed;
  for (size_t p = 0; p < blocks.numPoints(); ++p)
    for (int64_t m = 0; m < blocks.members(p); ++m)
      computed.push_back(blocks.active(p, m));
  computed.push_back(blocks.cut());
  return computed;
}

void StepEvidence::record(const BlockAssignment &blocks, double seconds,
                          int64_t window, double change) {
  std::vector<int64_t> here = key(blocks);
  auto found = records.find(here);
  if (found != records.end() &&
      window - found->second.window <= kFreshWindows &&
      std::fabs(seconds - found->second.seconds) >
          change * found->second.seconds)
    records.clear();
  records[std::move(here)] = {seconds, window};
}

std::optional<double> StepEvidence::measured(const BlockAssignment &blocks,
                                             int64_t window) const {
  auto found = records.find(key(blocks));
  if (found == records.end() || window - found->second.window > kFreshWindows)
    return std::nullopt;
  return found->second.seconds;
}

bool StepEvidence::contradicts(const BlockAssignment &now,
                               const BlockAssignment &next,
                               int64_t window) const {
  if (key(now) == key(next))
    return false; // the same work per rank, held elsewhere
  std::optional<double> here = measured(now, window),
                        there = measured(next, window);
  return here && there && *there >= *here;
}

BlockAssignment
Rebalancer::resized(const StepCosts &costs,
                    const std::vector<std::vector<double>> &scores) const {
  const BlockAssignment &now = params.blocks();
  const int64_t members = now.members(0);
  // The fastest member computing all it holds sets the pace; every other
  // one computes the share of its blocks it can in that time.
  std::vector<double> full, blockTime;
  for (int64_t m = 0; m < members; ++m) {
    std::vector<int64_t> counts;
    for (size_t p = 0; p < now.numPoints(); ++p)
      counts.push_back(int64_t(now.held(p, m).size()));
    full.push_back(costs.time(m, counts));
    blockTime.push_back(full.back() - costs.fixed[size_t(m)]);
  }
  const double pace = *std::min_element(full.begin(), full.end());
  BlockAssignment next = now;
  for (size_t p = 0; p < now.numPoints(); ++p)
    for (int64_t m = 0; m < members; ++m) {
      std::span<const int64_t> mine = now.held(p, m);
      std::vector<int64_t> order(mine.begin(), mine.end());
      const double keepRatio = std::clamp(
          (pace - costs.fixed[size_t(m)]) / blockTime[size_t(m)], 0.0, 1.0);
      int64_t keep = std::clamp<int64_t>(
          int64_t(std::lround(keepRatio * double(order.size()))), 0,
          int64_t(order.size()));
      // Highest priority first: the blocks whose weights moved most over
      // the last window (a permutation applied once, at this re-plan; a
      // member that computes all it holds keeps its order).
      if (keep < int64_t(order.size()))
        std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          double sa = scores[p][size_t(a)], sb = scores[p][size_t(b)];
          return sa != sb ? sa > sb : a < b;
        });
      next.set(p, m, std::move(order), keep);
    }
  return next;
}

std::string Rebalancer::settleAfter(const BlockAssignment &now,
                                    const BlockAssignment &next) {
  // Blocks each member gains (a migration) or 0 (a resize keeps them);
  // layers each group (stage or virtual stage) gains.
  std::vector<int64_t> gained;
  if (stageMode) {
    const std::vector<int64_t> before = cutLayers(now.cut()),
                               after = cutLayers(next.cut());
    for (size_t s = 0; s < before.size(); ++s)
      gained.push_back(after[s] - before[s]);
  } else {
    gained.assign(size_t(now.members(0)), 0);
    for (size_t p = 0; p < now.numPoints(); ++p)
      for (int64_t m = 0; m < now.members(p); ++m)
        gained[size_t(m)] +=
            int64_t(next.held(p, m).size()) - int64_t(now.held(p, m).size());
  }
  // A move that hands blocks back to a member the last move took them
  // from, soon after it, answered a speed that depended on the blocks held
  // (a rank that shares its core with another process gets more of it
  // while it waits for the others): each such reversal doubles the windows
  // that later moves of already moved blocks wait, so the blocks stop
  // bouncing.
  const int64_t window = int64_t(windowRecords.size());
  bool reversal = false;
  if (lastMoveWindow >= 0 &&
      window - lastMoveWindow <= kReversalWindows * settlePatience)
    for (size_t m = 0; m < gained.size(); ++m)
      reversal |= lastGained[m] < 0 && gained[m] > 0;
  std::string said;
  if (reversal) {
    settlePatience = std::min(2 * settlePatience, kMaxSettlePatience);
    const char *what = stageMode ? "layers" : "blocks";
    said = std::string("; moves ") + what + " back within " +
           std::to_string(window - lastMoveWindow) + " windows: moved " + what +
           " now wait " + std::to_string(settlePatience) + " windows";
  }
  if (std::any_of(gained.begin(), gained.end(),
                  [](int64_t g) { return g != 0; })) {
    lastGained = std::move(gained);
    lastMoveWindow = window;
  }
  return said;
}

BlockAssignment Rebalancer::restored() const {
  BlockAssignment next = params.blocks();
  for (size_t p = 0; p < next.numPoints(); ++p)
    for (int64_t m = 0; m < next.members(p); ++m) {
      // In block order: a resize of the even split restores it exactly.
      std::vector<int64_t> held(next.held(p, m).begin(), next.held(p, m).end());
      std::sort(held.begin(), held.end());
      const int64_t count = int64_t(held.size());
      next.set(p, m, std::move(held), count);
    }
  return next;
}

std::vector<std::vector<double>> Rebalancer::blockScores() {
  const BlockAssignment &blocks = params.blocks();
  std::vector<std::vector<double>> scores;
  std::vector<int64_t> firstIndex;
  int64_t total = 0;
  for (size_t p = 0; p < blocks.numPoints(); ++p) {
    firstIndex.push_back(total);
    total += blocks.blocks(p);
    scores.emplace_back(size_t(blocks.blocks(p)), 0.0);
  }
  std::vector<float> mine(size_t(total), 0.0f);
  const auto &list = *plan.plan().params();
  snapshot.resize(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    std::vector<StoredBlock> stored =
        storedBlocks(plan, *list.Get(i), params.coords(), blocks);
    if (!stored.empty() && stored.front().point < 0)
      continue; // no rebalance dim (a rank may also hold no block at all)
    const std::vector<float> &now = std::as_const(params)[i];
    if (snapshot[i].size() == now.size())
      for (const StoredBlock &block : stored) {
        std::vector<float> before = readStoredBlock(snapshot[i].data(), block),
                           after = readStoredBlock(now.data(), block);
        double sum = 0;
        for (size_t e = 0; e < after.size(); ++e)
          sum += std::fabs(double(after[e]) - double(before[e]));
        mine[size_t(firstIndex[size_t(block.point)] + block.id)] += float(sum);
      }
    snapshot[i] = now;
  }
  std::vector<float> all = gatherRanks(mine);
  for (size_t p = 0; p < scores.size(); ++p)
    for (int64_t b = 0; b < blocks.blocks(p); ++b)
      for (int r = 0; r < ranks; ++r)
        scores[p][size_t(b)] +=
            all[size_t(r) * mine.size() + size_t(firstIndex[p] + b)];
  return scores;
}

std::vector<float> Rebalancer::gatherRanks(const std::vector<float> &mine) {
  if (!comm)
    return mine;
  std::vector<float> all(mine.size() * size_t(ranks));
  comm->gatherState(mine, all);
  return all;
}

RebalanceEvent Rebalancer::apply(int64_t step, const BlockAssignment &next,
                                 const char *action, std::string reason) {
  RebalanceEvent event;
  event.step = step;
  event.action = action;
  event.reason = std::move(reason);
  RelayoutCost cost = params.relayout(plan, next, comm);
  // Every rank's bytes and time, for the record.
  std::vector<float> all =
      gatherRanks({float(cost.bytesSent), float(cost.seconds)});
  for (int r = 0; r < ranks; ++r) {
    event.bytesMoved += all[2 * size_t(r)];
    event.seconds = std::max(event.seconds, double(all[2 * size_t(r) + 1]));
  }
  if (stageMode) {
    event.cut = next.cut();
    event.stageLayers = cutLayers(next.cut());
  }
  for (size_t p = 0; p < next.numPoints(); ++p) {
    event.held.emplace_back();
    event.computed.emplace_back();
    for (int64_t m = 0; m < next.members(p); ++m) {
      event.held.back().push_back(int64_t(next.held(p, m).size()));
      event.computed.back().push_back(next.active(p, m));
    }
  }
  return event;
}

bool replanPays(double before, double after, double minGain, bool always) {
  return always || after <= before * (1.0 - minGain);
}

PolicyDecision decideRebalance(const PolicyState &state,
                               const RebalanceOptions &options) {
  using Action = RebalanceAction;
  if (options.policy == RebalancePolicy::Off)
    return {};
  // Once the ranks run at one speed again, every block is computed and
  // every moved block goes home: exact, and @gradients runs again.
  if (state.recovered) {
    if (state.resized)
      return {Action::RestoreBlocks, "the straggler recovered", true};
    if (!state.even && state.recoveredCount >= state.patience)
      return {Action::MigrateHome, "the straggler recovered", true};
    return {};
  }
  if (options.policy == RebalancePolicy::Auto &&
      state.resizedCount >= options.persistent)
    // Resized for long: the straggler is here to stay, so move its blocks
    // (exact) instead of leaving them out.
    return {Action::Migrate,
            "resized for " + std::to_string(state.resizedCount) +
                " windows: the straggler persists",
            true};
  if (state.resizedCount >= options.persistent)
    // The speeds of ranks computing different work compare only roughly:
    // every so often, compute every block for a window and look again.
    return {Action::Probe, "probe: every block computed for a window", true};
  if (state.probed && state.overCount >= 1)
    return {Action::Resize, "the straggler persists after the probe", true};
  if (state.overCount < state.patience)
    return {};
  const std::string over =
      " for " + std::to_string(state.overCount) + " windows";
  switch (options.policy) {
  case RebalancePolicy::Migrate:
    return {Action::Migrate, "imbalance" + over, false};
  case RebalancePolicy::Resize:
    return {Action::Resize, "imbalance" + over, false};
  case RebalancePolicy::Auto:
    // Blocks already moved are corrected by moving them (exactly), also
    // back once the straggler recovers; only the even split is resized.
    if (state.imbalance >= options.heavy)
      return {Action::Migrate, "heavy imbalance" + over, false};
    if (!state.holdsEvenShares)
      return {Action::Migrate, "imbalance after a migration" + over, false};
    return {Action::Resize, "light imbalance" + over, false};
  case RebalancePolicy::Off:
    break;
  }
  return {};
}

Rebalancer::WindowMeasurement Rebalancer::measureWindow(int64_t step) {
  const BlockAssignment &blocks = params.blocks();
  const size_t points = blocks.numPoints();
  const size_t stride = 2 + points, k = window.size() / stride;
  // One small all-gather of every rank's window.
  const std::vector<float> all =
      gatherRanks(std::vector<float>(window.begin(), window.end()));
  const size_t perRank = window.size();
  window.clear();
  auto at = [&](int r, size_t s, size_t field) {
    return double(all[size_t(r) * perRank + s * stride + field]);
  };
  auto medianOf = [](std::vector<double> values) {
    std::nth_element(values.begin(), values.begin() + values.size() / 2,
                     values.end());
    return values[values.size() / 2];
  };
  WindowMeasurement m;
  m.firstStep = step - int64_t(k) + 1;
  for (size_t s = 0; s < k; ++s) {
    StepTimes entry{m.firstStep + int64_t(s), {}};
    for (int r = 0; r < ranks; ++r)
      entry.seconds.push_back(at(r, s, 0));
    times.push_back(std::move(entry));
  }
  // The cost model, from per-step medians (a step that a page fault or
  // another process stretched does not count): per rank, the compute
  // outside the blocks and the time of one block of each point.
  StepCosts &costs = m.costs;
  std::vector<double> median;
  for (int r = 0; r < ranks; ++r) {
    std::vector<double> totals, fixed;
    for (size_t s = 0; s < k; ++s) {
      totals.push_back(at(r, s, 0));
      double onBlocks = 0;
      for (size_t p = 0; p < points; ++p)
        onBlocks += at(r, s, 1 + p);
      fixed.push_back(std::max(at(r, s, 0) - onBlocks, 0.0));
    }
    median.push_back(std::max(medianOf(totals), 1e-9));
    costs.fixed.push_back(medianOf(fixed));
    costs.perBlock.emplace_back();
    for (size_t p = 0; p < points; ++p) {
      std::vector<double> seconds;
      for (size_t s = 0; s < k; ++s)
        seconds.push_back(at(r, s, 1 + p));
      costs.perBlock.back().push_back(
          std::max(medianOf(seconds), 1e-9) /
          double(std::max<int64_t>(blocks.active(p, memberOf[size_t(r)]), 1)));
    }
  }

  m.slowestRank =
      std::max_element(median.begin(), median.end()) - median.begin();
  double others = 0;
  for (int r = 0; r < ranks; ++r)
    if (r != m.slowestRank)
      others += median[size_t(r)];
  others = ranks > 1 ? others / (ranks - 1) : median[size_t(m.slowestRank)];
  m.imbalance = median[size_t(m.slowestRank)] / others - 1.0;

  // Relative speeds from the compute outside the blocks: the same work on
  // every rank (norms, embedding and loss shares, the optimizer on
  // replicated weights), so its time compares the ranks whatever blocks
  // they hold. Without such work, from the blocks' own cost.
  std::vector<double> &speeds = m.speeds;
  const double leastFixed =
      *std::min_element(costs.fixed.begin(), costs.fixed.end());
  if (stageMode) {
    // Stages do different work: a rank's speed is its stage's predicted
    // seconds per second it computed.
    std::vector<double> slowness;
    for (int r = 0; r < ranks; ++r)
      slowness.push_back(costs.fixed[size_t(r)] /
                         std::max(stageSeconds[size_t(blocks.cut())]
                                              [size_t(stageOfRank[size_t(r)])],
                                  1e-12));
    const double least = *std::min_element(slowness.begin(), slowness.end());
    for (double value : slowness)
      speeds.push_back(least / value);
    m.slowness = slowestPerStage(slowness);
  }
  for (int r = 0; r < ranks && !stageMode; ++r) {
    double perBlock = 0;
    for (size_t p = 0; p < points; ++p)
      perBlock += costs.perBlock[size_t(r)][p];
    speeds.push_back(leastFixed > 1e-6 ? leastFixed / costs.fixed[size_t(r)]
                                       : 1.0 / perBlock);
  }
  const double fastest = *std::max_element(speeds.begin(), speeds.end());
  for (double &v : speeds)
    v /= fastest;
  // A block costs the same work everywhere, at each rank's speed: the
  // measured costs, normalised by speed and averaged over the ranks that
  // computed blocks of the point, set that work (a rank with few blocks
  // pays more per block for small kernels; one with none measured nothing).
  for (size_t p = 0; p < points; ++p) {
    double work = 0;
    int measured = 0;
    for (int r = 0; r < ranks; ++r)
      if (blocks.active(p, memberOf[size_t(r)]) > 0) {
        work += costs.perBlock[size_t(r)][p] * speeds[size_t(r)];
        ++measured;
      }
    work = measured > 0 ? work / measured : 1e-9;
    for (int r = 0; r < ranks; ++r)
      costs.perBlock[size_t(r)][p] = work / speeds[size_t(r)];
  }
  m.slowestSpeed = *std::min_element(speeds.begin(), speeds.end());
  windowRecords.push_back(
      {step, m.slowestRank, m.imbalance, costs.fixed, speeds});
  if (!stageMode)
    costs = memberCosts(costs);
  // What this window's blocks measured: the median over its steps of the
  // slowest rank's step (the ranks meet every step, so nearly one time).
  std::vector<double> stepTimes;
  for (size_t s = 0; s < k; ++s) {
    double slowestStep = 0;
    for (int r = 0; r < ranks; ++r)
      slowestStep = std::max(slowestStep, at(r, s, 1 + points));
    stepTimes.push_back(slowestStep);
  }
  m.stepSeconds = medianOf(stepTimes);
  return m;
}

std::optional<RebalanceEvent>
Rebalancer::applyDecision(int64_t step, const PolicyDecision &decision,
                          const WindowMeasurement &window,
                          const std::vector<std::vector<double>> &scores,
                          int64_t windowIndex) {
  const BlockAssignment &blocks = params.blocks();
  BlockAssignment next = blocks;
  const char *action = "resize";
  double before = 0, after = 0;
  if (stageMode) {
    // Whole layers move: a migration (or auto's light-imbalance answer)
    // takes the cut that the measured speeds finish first; recovery, the
    // balanced one.
    action = "migrate";
    switch (decision.action) {
    case RebalanceAction::Migrate:
    case RebalanceAction::Resize:
      next.setCut(bestStageCut(stageSeconds, window.slowness));
      break;
    case RebalanceAction::MigrateHome:
      next.setCut(0);
      break;
    default:
      return std::nullopt;
    }
    if (next == blocks)
      return std::nullopt;
    before = cutStep(stageSeconds, blocks.cut(), window.slowness);
    after = cutStep(stageSeconds, next.cut(), window.slowness);
  }
  switch (stageMode ? RebalanceAction::None : decision.action) {
  case RebalanceAction::None:
    if (!stageMode)
      return std::nullopt;
    break;
  case RebalanceAction::RestoreBlocks:
  case RebalanceAction::Probe:
    next = restored();
    break;
  case RebalanceAction::MigrateHome:
    next = BlockAssignment::even(plan.plan());
    action = "migrate";
    break;
  case RebalanceAction::Migrate:
    next = migratedAssignment(blocks, window.costs);
    action = "migrate";
    break;
  case RebalanceAction::Resize:
    next = resized(window.costs, scores);
    break;
  }
  if (next == blocks)
    return std::nullopt;
  if (!stageMode) {
    before = window.costs.step(blocks, true);
    after = window.costs.step(next, true);
  }
  if (!replanPays(before, after, options.minGain, decision.always))
    return std::nullopt;
  // A move back to blocks measured no faster than these, under the same
  // conditions, follows a model the measurements refute.
  if (std::string_view(action) == "migrate" &&
      evidence.contradicts(blocks, next, windowIndex)) {
    char kept[96];
    std::snprintf(kept, sizeof kept,
                  " | kept: %.2f ms measured here, %.2f ms there",
                  *evidence.measured(blocks, windowIndex) * 1e3,
                  *evidence.measured(next, windowIndex) * 1e3);
    statusLine += kept;
    return std::nullopt;
  }
  char why[200];
  std::snprintf(why, sizeof why,
                "%s: slowest rank %lld +%.0f%%, predicted step %.2f -> "
                "%.2f ms",
                decision.reason.c_str(),
                static_cast<long long>(window.slowestRank),
                window.imbalance * 100, before * 1e3, after * 1e3);
  // Before apply(): `blocks` is the assignment apply() replaces.
  std::optional<RebalanceEvent> event =
      apply(step, next, action, why + settleAfter(blocks, next));
  event->slowestRank = window.slowestRank;
  event->imbalance = window.imbalance;
  event->speeds = window.speeds;
  return event;
}

std::optional<RebalanceEvent>
Rebalancer::afterStep(int64_t step, double stepSeconds, double computeSeconds,
                      const std::vector<double> &pointSeconds) {
  if (!enabled())
    return std::nullopt;
  const BlockAssignment &blocks = params.blocks();
  const size_t points = blocks.numPoints();
  // Per step: the compute seconds, those on each point's blocks, the step's.
  window.push_back(computeSeconds);
  for (size_t p = 0; p < points; ++p)
    window.push_back(p < pointSeconds.size() ? pointSeconds[p] : 0.0);
  window.push_back(stepSeconds);
  if (int64_t(window.size() / (2 + points)) < options.window)
    return std::nullopt;

  // Measure: the window's timings, exchanged, as the cost model.
  const WindowMeasurement measured = measureWindow(step);
  char text[96];
  std::snprintf(text, sizeof text, "slowest rank %lld +%.0f%%",
                static_cast<long long>(measured.slowestRank),
                measured.imbalance * 100);
  statusLine = text;
  if (options.policy == RebalancePolicy::Off)
    return std::nullopt;

  // The state the policy decides on; the counters carry across windows.
  PolicyState state;
  state.imbalance = measured.imbalance;
  // A straggler counts from `threshold` of step imbalance, for `patience`
  // windows; recovery when the speeds are within it again.
  state.recovered = measured.slowestSpeed >= 1.0 / (1.0 + options.threshold);
  // The first window holds the first step (allocation, cold caches) and
  // counts for nothing.
  state.warmup = measured.firstStep == 1;
  state.resized = blocks.isResized();
  state.holdsEvenShares = blocks.holdsEvenShares() && blocks.cut() == 0;
  state.even = blocks.isEven() && blocks.cut() == 0;
  // Priorities over the window just ended, for a resize.
  const std::vector<std::vector<double>> scores =
      options.policy != RebalancePolicy::Migrate && !stageMode
          ? blockScores()
          : std::vector<std::vector<double>>();
  const int64_t windowIndex = int64_t(windowRecords.size());
  if (!state.warmup)
    evidence.record(blocks, measured.stepSeconds, windowIndex, options.minGain);
  overCount = measured.imbalance > options.threshold && !state.warmup
                  ? overCount + 1
                  : 0;
  resizedCount = state.resized ? resizedCount + 1 : 0;
  recoveredCount = state.recovered && !state.warmup ? recoveredCount + 1 : 0;
  state.overCount = overCount;
  state.resizedCount = resizedCount;
  state.recoveredCount = recoveredCount;
  // From the even split a straggler is answered within `patience`
  // windows; once blocks are moved, moving them again waits as long as the
  // reversals so far say.
  state.patience = state.holdsEvenShares ? options.patience : settlePatience;
  state.probed = probing;
  probing = false;

  // Decide, then apply.
  const PolicyDecision decision = decideRebalance(state, options);
  std::optional<RebalanceEvent> event =
      applyDecision(step, decision, measured, scores, windowIndex);
  if (event) {
    overCount = 0;
    resizedCount = 0;
    probing = decision.action == RebalanceAction::Probe;
  }
  // The state the next steps run in (after this window's re-plan).
  const BlockAssignment &now = params.blocks();
  if (now.isResized())
    statusLine += " | resized";
  else if (!now.isEven())
    statusLine += " | migrated";
  else if (now.cut() != 0)
    statusLine += " | stage cut " + std::to_string(now.cut());
  return event;
}

} // namespace tpc::runtime
