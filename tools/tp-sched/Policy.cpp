#include "Policy.h"

#include "Random.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace tpc::sched {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

std::vector<size_t> byArrival(const std::vector<JobView> &jobs) {
  std::vector<size_t> order(jobs.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(jobs[a].arrival, a) < std::tie(jobs[b].arrival, b);
  });
  return order;
}

/// FIFO with fixed allocations: jobs start in arrival order on their
/// requested configuration and keep it to the end; the first that does not
/// fit blocks the ones behind it.
class FifoPolicy : public Policy {
public:
  std::string name() const override { return "fifo"; }
  Allocation decide(const std::vector<JobView> &jobs, int ranks,
                    uint64_t) override {
    Allocation allocation(jobs.size());
    int free = ranks;
    for (size_t j = 0; j < jobs.size(); ++j)
      if (jobs[j].current.runs()) {
        allocation[j] = jobs[j].current;
        free -= jobs[j].current.ranks;
      }
    for (size_t j : byArrival(jobs)) {
      if (jobs[j].current.runs())
        continue;
      if (jobs[j].requested.ranks > free)
        break;
      allocation[j] = jobs[j].requested;
      free -= jobs[j].requested.ranks;
    }
    return allocation;
  }
};

/// Tiresias's discretized two-dimensional least-attained-service policy
/// (Gu et al., NSDI'19), without its starvation promotion: jobs sit in
/// priority queues by the rank-seconds they have received, the least
/// served first and first come first within a queue; each runs on its
/// requested configuration while it fits (a smaller job may pass a larger
/// one), and a job that loses its place is preempted.
class LasPolicy : public Policy {
public:
  explicit LasPolicy(std::vector<double> thresholds)
      : thresholds(std::move(thresholds)) {
    std::sort(this->thresholds.begin(), this->thresholds.end());
  }
  std::string name() const override { return "las"; }
  Allocation decide(const std::vector<JobView> &jobs, int ranks,
                    uint64_t) override {
    auto queue = [&](const JobView &job) {
      return std::upper_bound(thresholds.begin(), thresholds.end(),
                              job.service) -
             thresholds.begin();
    };
    std::vector<size_t> order = byArrival(jobs);
    std::vector<size_t> rank(jobs.size());
    for (size_t i = 0; i < order.size(); ++i)
      rank[order[i]] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return std::make_pair(queue(jobs[a]), rank[a]) <
             std::make_pair(queue(jobs[b]), rank[b]);
    });
    Allocation allocation(jobs.size());
    int free = ranks;
    for (size_t j : order)
      if (jobs[j].requested.ranks <= free) {
        allocation[j] = jobs[j].requested;
        free -= jobs[j].requested.ranks;
      }
    return allocation;
  }

private:
  std::vector<double> thresholds;
};

int optionIndex(const JobView &job, const Config &config) {
  for (size_t k = 0; k < job.options.size(); ++k)
    if (job.options[k].config == config)
      return int(k);
  return -1;
}

/// ONES (Bian et al., SC'21): an online evolutionary search over
/// allocations, re-run at every decision from the allocation in force.
class Evolution {
public:
  Evolution(const std::vector<JobView> &jobs, int ranks,
            const PolicyOptions &options, uint64_t decision)
      : jobs(jobs), ranks(ranks), options(options),
        rng(options.seed * 0x9e3779b97f4a7c15ULL + decision) {
    for (const JobView &job : jobs) {
      if (job.options.empty())
        throw std::invalid_argument("job '" + job.name +
                                    "' has no configuration to run in");
      current.push_back(job.current.runs() ? optionIndex(job, job.current)
                                           : -1);
      movable.push_back(!job.current.runs() ||
                        job.runningSeconds >= options.minRunSeconds ||
                        current.back() < 0);
    }
  }

  std::vector<Candidate> run() {
    std::vector<Candidate> population;
    // The decision still pending, if any: kept below unless beaten clearly.
    std::optional<Candidate> pending;
    if (std::any_of(jobs.begin(), jobs.end(), [](const JobView &j) {
          return j.pending && *j.pending != j.current;
        })) {
      std::vector<int> genes;
      for (const JobView &job : jobs)
        genes.push_back(job.pending && job.pending->runs()
                            ? optionIndex(job, *job.pending)
                            : -1);
      pending = make(genes);
      population.push_back(*pending);
    }
    population.push_back(make(current));
    population.push_back(make(std::vector<int>(jobs.size(), -1)));
    while (int(population.size()) < options.population)
      population.push_back(make(mutate(current)));
    select(population);
    for (int g = 0; g < options.generations; ++g) {
      std::vector<Candidate> next = population;
      for (int c = 0; c < options.population / 2; ++c)
        next.push_back(
            make(cross(tournament(population), tournament(population))));
      for (int m = 0; m < options.population; ++m)
        next.push_back(make(mutate(tournament(population))));
      select(next);
      population = std::move(next);
    }
    if (pending && pending->genes != population.front().genes &&
        population.front().fitness >
            pending->fitness * (1 - options.keepMargin)) {
      std::erase_if(population, [&](const Candidate &c) {
        return c.genes == pending->genes;
      });
      population.insert(population.begin(), *pending);
    }
    return population;
  }

private:
  double throughput(size_t j, int gene) const {
    return gene < 0 ? 0 : jobs[j].options[size_t(gene)].samplesPerSecond;
  }
  int ranksOf(size_t j, int gene) const {
    return gene < 0 ? 0 : jobs[j].options[size_t(gene)].config.ranks;
  }

  const std::vector<int> &tournament(const std::vector<Candidate> &pool) {
    const Candidate &a = pool[rng.below(pool.size())];
    const Candidate &b = pool[rng.below(pool.size())];
    return a.fitness <= b.fitness ? a.genes : b.genes;
  }

  std::vector<int> cross(const std::vector<int> &a, const std::vector<int> &b) {
    std::vector<int> child = a;
    for (size_t j = 0; j < child.size(); ++j)
      if (rng.uniform() < options.crossover)
        child[j] = b[j];
    return child;
  }

  /// Each movable job, with the mutation probability: a running one may be
  /// preempted; otherwise it takes a neighbouring configuration (ranks and
  /// batch each within a factor of two) or, waiting, any.
  std::vector<int> mutate(std::vector<int> genes) {
    for (size_t j = 0; j < genes.size(); ++j) {
      if (!movable[j] || rng.uniform() >= options.mutation)
        continue;
      if (genes[j] >= 0 && rng.uniform() < 0.2) {
        genes[j] = -1;
        continue;
      }
      std::vector<int> near;
      for (size_t k = 0; k < jobs[j].options.size(); ++k) {
        if (int(k) == genes[j])
          continue;
        if (genes[j] >= 0) {
          const Config &from = jobs[j].options[size_t(genes[j])].config;
          const Config &to = jobs[j].options[k].config;
          if (to.ranks > 2 * from.ranks || 2 * to.ranks < from.ranks ||
              to.batch > 2 * from.batch || 2 * to.batch < from.batch)
            continue;
        }
        near.push_back(int(k));
      }
      if (!near.empty())
        genes[j] = near[rng.below(near.size())];
    }
    return genes;
  }

  /// Makes `genes` fit the pool and fills its idle ranks: jobs that may not
  /// move keep their configuration; while over capacity a random movable
  /// job shrinks to its fastest smaller option (or waits); then waiting
  /// jobs start, in arrival order, on their fastest option among the
  /// fewest ranks that fit (ONES gives a new job one GPU first), and
  /// running ones grow, shortest remaining time first, to their fastest
  /// option within what is left, where that shortens their own time,
  /// resize included.
  std::vector<int> repair(std::vector<int> genes) {
    int used = 0;
    for (size_t j = 0; j < genes.size(); ++j) {
      if (!movable[j])
        genes[j] = current[j];
      used += ranksOf(j, genes[j]);
    }
    while (used > ranks) {
      std::vector<size_t> shrinkable;
      for (size_t j = 0; j < genes.size(); ++j)
        if (movable[j] && genes[j] >= 0)
          shrinkable.push_back(j);
      if (shrinkable.empty())
        throw std::logic_error("ONES: jobs that may not move exceed the pool");
      size_t j = shrinkable[rng.below(shrinkable.size())];
      int best = -1;
      for (size_t k = 0; k < jobs[j].options.size(); ++k)
        if (ranksOf(j, int(k)) < ranksOf(j, genes[j]) &&
            (best < 0 || throughput(j, int(k)) > throughput(j, best)))
          best = int(k);
      used += ranksOf(j, best) - ranksOf(j, genes[j]);
      genes[j] = best;
    }
    for (size_t j : byArrival(jobs)) {
      if (!movable[j] || genes[j] >= 0)
        continue;
      int best = -1;
      for (size_t k = 0; k < jobs[j].options.size(); ++k) {
        int r = ranksOf(j, int(k));
        if (r > ranks - used)
          continue;
        if (best < 0 || r < ranksOf(j, best) ||
            (r == ranksOf(j, best) &&
             throughput(j, int(k)) > throughput(j, best)))
          best = int(k);
      }
      if (best >= 0) {
        genes[j] = best;
        used += ranksOf(j, best);
      }
    }
    std::vector<size_t> running;
    for (size_t j = 0; j < genes.size(); ++j)
      if (movable[j] && genes[j] >= 0)
        running.push_back(j);
    std::sort(running.begin(), running.end(), [&](size_t a, size_t b) {
      return std::make_pair(jobs[a].remainingSamples / throughput(a, genes[a]),
                            a) <
             std::make_pair(jobs[b].remainingSamples / throughput(b, genes[b]),
                            b);
    });
    // Its own predicted time on a gene: a change of configuration costs a
    // resize, so a running job only grows when that pays.
    auto own = [&](size_t j, int gene) {
      return jobs[j].remainingSamples / throughput(j, gene) +
             (gene != current[j] ? jobs[j].resizeSeconds : 0.0);
    };
    for (size_t j : running) {
      int best = genes[j];
      for (size_t k = 0; k < jobs[j].options.size(); ++k)
        if (ranksOf(j, int(k)) - ranksOf(j, genes[j]) <= ranks - used &&
            throughput(j, int(k)) > throughput(j, best) &&
            own(j, int(k)) < own(j, best))
          best = int(k);
      used += ranksOf(j, best) - ranksOf(j, genes[j]);
      genes[j] = best;
    }
    return genes;
  }

  Candidate make(const std::vector<int> &genes) {
    Candidate c;
    c.genes = repair(genes);
    Allocation allocation(jobs.size());
    for (size_t j = 0; j < jobs.size(); ++j)
      if (c.genes[j] >= 0)
        allocation[j] = jobs[j].options[size_t(c.genes[j])].config;
    c.fitness = predictedCompletionSum(jobs, allocation);
    return c;
  }

  /// The population's best distinct candidates, best first (ties by their
  /// genes, so the order never depends on the sort's stability).
  void select(std::vector<Candidate> &pool) const {
    std::sort(pool.begin(), pool.end(),
              [](const Candidate &a, const Candidate &b) {
                return a.fitness != b.fitness ? a.fitness < b.fitness
                                              : a.genes < b.genes;
              });
    pool.erase(std::unique(pool.begin(), pool.end(),
                           [](const Candidate &a, const Candidate &b) {
                             return a.genes == b.genes;
                           }),
               pool.end());
    if (int(pool.size()) > options.population)
      pool.resize(size_t(options.population));
  }

  const std::vector<JobView> &jobs;
  int ranks;
  const PolicyOptions &options;
  Rng rng;
  std::vector<int> current;
  std::vector<bool> movable;
};

class OnesPolicy : public Policy {
public:
  explicit OnesPolicy(PolicyOptions options) : options(std::move(options)) {}
  std::string name() const override { return "ones"; }
  Allocation decide(const std::vector<JobView> &jobs, int ranks,
                    uint64_t decision) override {
    Allocation allocation(jobs.size());
    if (jobs.empty())
      return allocation;
    const Candidate best = evolve(jobs, ranks, options, decision).front();
    for (size_t j = 0; j < jobs.size(); ++j)
      if (best.genes[j] >= 0)
        allocation[j] = jobs[j].options[size_t(best.genes[j])].config;
    return allocation;
  }

private:
  PolicyOptions options;
};

} // namespace

double samplesPerSecond(const JobView &job, const Config &config) {
  for (const Option &option : job.options)
    if (option.config == config)
      return option.samplesPerSecond;
  return 0;
}

double predictedCompletionSum(const std::vector<JobView> &jobs,
                              const Allocation &allocation) {
  double sum = 0, firstFree = kInfinity;
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (!allocation[j].runs())
      continue;
    const double rate = samplesPerSecond(jobs[j], allocation[j]);
    double t = rate > 0 ? jobs[j].remainingSamples / rate : kInfinity;
    if (allocation[j] != jobs[j].current)
      t += jobs[j].resizeSeconds;
    sum += t;
    firstFree = std::min(firstFree, t);
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (allocation[j].runs())
      continue;
    double fastest = 0;
    for (const Option &option : jobs[j].options)
      fastest = std::max(fastest, option.samplesPerSecond);
    sum += (std::isfinite(firstFree) ? firstFree : 0) + jobs[j].resizeSeconds +
           (fastest > 0 ? jobs[j].remainingSamples / fastest : kInfinity);
  }
  return sum;
}

std::vector<Candidate> evolve(const std::vector<JobView> &jobs, int ranks,
                              const PolicyOptions &options, uint64_t decision) {
  if (options.population < 2 || options.generations < 0)
    throw std::invalid_argument(
        "ONES needs a population of at least 2 and generations >= 0");
  return Evolution(jobs, ranks, options, decision).run();
}

const std::vector<std::string> &policyNames() {
  static const std::vector<std::string> names = {"fifo", "las", "ones"};
  return names;
}

std::unique_ptr<Policy> makePolicy(const std::string &name,
                                   const PolicyOptions &options) {
  if (name == "fifo")
    return std::make_unique<FifoPolicy>();
  if (name == "las")
    return std::make_unique<LasPolicy>(options.lasThresholds);
  if (name == "ones")
    return std::make_unique<OnesPolicy>(options);
  throw std::invalid_argument("unknown policy '" + name +
                              "' (fifo, las or ones)");
}

} // namespace tpc::sched
