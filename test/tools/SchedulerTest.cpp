// tp-sched's library: the policies on hand-made job sets (ONES's seeded
// evolutionary step among them), the trace simulation against results
// worked out by hand, job specs and their one-line errors, and the pool's
// hostfile and Slurm parsing.

#include "JobSpec.h"
#include "Policy.h"
#include "Pool.h"
#include "Simulation.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
using namespace tpc::sched;

namespace {

/// A job whose throughput on r ranks is `perRank` x r^efficiency samples
/// per second at every batch of `batches`.
JobView job(const std::string &name, double arrival, double remaining,
            Config requested, double perRank = 10, double efficiency = 1,
            std::vector<int64_t> batches = {8}, int maxRanks = 4) {
  JobView v;
  v.name = name;
  v.arrival = arrival;
  v.remainingSamples = remaining;
  v.requested = requested;
  for (int r = 1; r <= maxRanks; r *= 2)
    for (int64_t b : batches)
      v.options.push_back({{r, b}, perRank * std::pow(double(r), efficiency)});
  return v;
}

int usedRanks(const Allocation &a) {
  return std::accumulate(a.begin(), a.end(), 0,
                         [](int s, const Config &c) { return s + c.ranks; });
}

TEST(FifoPolicy, StartsInArrivalOrderAndBlocksBehindTheHead) {
  std::vector<JobView> jobs = {job("late", 2, 100, {1, 8}),
                               job("first", 0, 100, {2, 8}),
                               job("big", 1, 100, {4, 8})};
  Allocation a = makePolicy("fifo")->decide(jobs, 4, 0);
  EXPECT_EQ(a[1], (Config{2, 8}));
  // "big" needs 4 of the 2 left; "late" waits behind it.
  EXPECT_FALSE(a[2].runs());
  EXPECT_FALSE(a[0].runs());
  // A running job keeps its configuration even when it was not requested.
  jobs[1].current = {4, 8};
  a = makePolicy("fifo")->decide(jobs, 4, 1);
  EXPECT_EQ(a[1], (Config{4, 8}));
  EXPECT_EQ(usedRanks(a), 4);
}

TEST(LasPolicy, LeastServedFirstAndSmallerJobsPass) {
  std::vector<JobView> jobs = {
      job("served", 0, 100, {2, 8}), job("fresh", 5, 100, {2, 8}),
      job("wide", 6, 100, {4, 8}), job("small", 7, 100, {1, 8})};
  jobs[0].service = 4000; // past the first threshold (3600 rank-seconds)
  jobs[0].current = {2, 8};
  Allocation a = makePolicy("las")->decide(jobs, 4, 0);
  EXPECT_EQ(a[1], (Config{2, 8})); // the least served, first come
  EXPECT_FALSE(a[2].runs());       // 4 do not fit beside it: skipped
  EXPECT_EQ(a[3], (Config{1, 8})); // the smaller one passes
  EXPECT_FALSE(a[0].runs());       // preempted
}

TEST(PredictedCompletionSum, RunningJobsThenTheWaitingOnes) {
  std::vector<JobView> jobs = {job("a", 0, 100, {1, 8}),
                               job("b", 0, 400, {1, 8})};
  jobs[0].current = {1, 8};
  jobs[1].resizeSeconds = 3;
  // a: 100 / 10 = 10 s on 1 rank; b waits for it, then 400 / 40 on its
  // fastest option (4 ranks) after a 3 s start.
  EXPECT_DOUBLE_EQ(predictedCompletionSum(jobs, {Config{1, 8}, Config{}}),
                   10 + (10 + 3 + 10));
  // b on 2 ranks, started: 3 + 400 / 20.
  EXPECT_DOUBLE_EQ(predictedCompletionSum(jobs, {Config{1, 8}, Config{2, 8}}),
                   10 + 23);
}

TEST(OnesPolicy, ShortestRemainingJobTakesThePoolWhenScalingIsLinear) {
  // Sum of completion times under linear scaling: all ranks to the short
  // job, then to the long one (SRPT), 100/40 + (2.5 + 10000/40).
  std::vector<JobView> jobs = {job("long", 0, 10000, {2, 8}),
                               job("short", 1, 100, {2, 8})};
  std::vector<Candidate> population = evolve(jobs, 4, {}, 0);
  ASSERT_FALSE(population.empty());
  EXPECT_EQ(population.front().genes[1], 2); // options: 1, 2, 4 ranks
  EXPECT_EQ(population.front().genes[0], -1);
  EXPECT_DOUBLE_EQ(population.front().fitness, 2.5 + 2.5 + 250);
  for (size_t i = 1; i < population.size(); ++i)
    EXPECT_LE(population[i - 1].fitness, population[i].fitness);
}

TEST(OnesPolicy, SharesThePoolWhenScalingIsPoor) {
  // Two equal jobs whose 4-rank throughput is barely above 2 ranks': one
  // each on 2 ranks (both end at 1000/20 = 50 s) beats SRPT's 4 + wait
  // (1000/21.1 + 2 x 1000/21.1 = 142 s).
  std::vector<JobView> jobs = {job("a", 0, 1000, {2, 8}, 10, 1.0),
                               job("b", 1, 1000, {2, 8}, 10, 1.0)};
  for (JobView &j : jobs)
    j.options.back().samplesPerSecond = 21.1; // 4 ranks
  Allocation a = makePolicy("ones")->decide(jobs, 4, 0);
  EXPECT_EQ(a[0], (Config{2, 8}));
  EXPECT_EQ(a[1], (Config{2, 8}));
}

TEST(OnesPolicy, KeepsAPendingDecisionUnlessClearlyBeaten) {
  // Both run on 2 ranks; the last decision gave a all 4 (b to wait), not
  // applied yet. Sharing predicts 100 s against the pending 142 s: beaten
  // by more than 5 %, not by more than 50 %.
  std::vector<JobView> jobs = {job("a", 0, 1000, {2, 8}, 10, 1.0),
                               job("b", 1, 1000, {2, 8}, 10, 1.0)};
  for (JobView &j : jobs) {
    j.options.back().samplesPerSecond = 21.1;
    j.current = {2, 8};
  }
  jobs[0].pending = Config{4, 8};
  jobs[1].pending = Config{};
  Allocation a = makePolicy("ones")->decide(jobs, 4, 0);
  EXPECT_EQ(a[0], (Config{2, 8}));
  PolicyOptions sticky;
  sticky.keepMargin = 0.5;
  a = makePolicy("ones", sticky)->decide(jobs, 4, 0);
  EXPECT_EQ(a[0], (Config{4, 8}));
  EXPECT_FALSE(a[1].runs());
}

TEST(OnesPolicy, ResizeCostAndMinimumRunKeepARunningJob) {
  std::vector<JobView> jobs = {job("running", 0, 1000, {1, 8}),
                               job("new", 1, 1000, {1, 8})};
  jobs[0].current = {1, 8};
  jobs[0].runningSeconds = 10;
  // Growing to 4 ranks would save 75 s of 100; a resize costs more.
  jobs[0].resizeSeconds = 1e6;
  Allocation a = makePolicy("ones")->decide(jobs, 4, 0);
  EXPECT_EQ(a[0], (Config{1, 8}));
  EXPECT_TRUE(a[1].runs());
  EXPECT_LE(usedRanks(a), 4);
  // Cheap resizes, but the job has not run its minimum time.
  jobs[0].resizeSeconds = 0;
  PolicyOptions options;
  options.minRunSeconds = 60;
  a = makePolicy("ones", options)->decide(jobs, 4, 0);
  EXPECT_EQ(a[0], (Config{1, 8}));
  options.minRunSeconds = 5;
  a = makePolicy("ones", options)->decide(jobs, 4, 0);
  EXPECT_NE(a[0], (Config{1, 8}));
}

TEST(OnesPolicy, SeededDecisionsAreReproducibleAndFitThePool) {
  // Random job sets (their own seeded draws): every allocation fits the
  // pool and uses each job's options only; the same (seed, decision) gives
  // the same population, another seed may not; the generations never lose
  // the best of the first population (elitism).
  uint64_t state = 7;
  auto draw = [&](int n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return int((state >> 33) % uint64_t(n));
  };
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<JobView> jobs;
    const int count = 1 + draw(7);
    for (int j = 0; j < count; ++j) {
      JobView v = job("j" + std::to_string(j), draw(100), 1 + 100 * draw(100),
                      {1 << draw(3), 16}, 1 + draw(20), 0.5 + 0.1 * draw(6),
                      {8, 16, 32}, 8);
      v.resizeSeconds = draw(30);
      jobs.push_back(std::move(v));
    }
    Allocation fifo = makePolicy("fifo")->decide(jobs, 8, 0);
    for (size_t j = 0; j < jobs.size(); ++j)
      jobs[j].current = fifo[j];
    PolicyOptions options;
    options.seed = uint64_t(trial);
    std::vector<Candidate> first = evolve(jobs, 8, options, 3);
    std::vector<Candidate> again = evolve(jobs, 8, options, 3);
    ASSERT_EQ(first.size(), again.size());
    for (size_t i = 0; i < first.size(); ++i)
      EXPECT_EQ(first[i].genes, again[i].genes);
    Allocation ones = makePolicy("ones", options)->decide(jobs, 8, 3);
    EXPECT_LE(usedRanks(ones), 8);
    for (size_t j = 0; j < jobs.size(); ++j)
      if (ones[j].runs())
        EXPECT_GT(samplesPerSecond(jobs[j], ones[j]), 0) << "trial " << trial;
    EXPECT_DOUBLE_EQ(predictedCompletionSum(jobs, ones), first.front().fitness);
    PolicyOptions none = options;
    none.generations = 0;
    EXPECT_LE(first.front().fitness, evolve(jobs, 8, none, 3).front().fitness)
        << "trial " << trial;
    // Idle ranks go to waiting jobs that fit (ONES pads its schedules).
    int free = 8 - usedRanks(ones);
    for (size_t j = 0; j < jobs.size(); ++j)
      if (!ones[j].runs())
        for (const Option &o : jobs[j].options)
          EXPECT_GT(o.config.ranks, free) << "trial " << trial;
  }
}

TEST(Policies, UnknownNameIsRefused) {
  try {
    makePolicy("drf");
    FAIL();
  } catch (const std::invalid_argument &e) {
    EXPECT_STREQ(e.what(), "unknown policy 'drf' (fifo, las or ones)");
  }
}

/// Two models whose step is `seconds` per batch of 8 on any rank count
/// (no speed-up from ranks) or linear.
std::vector<ModelProfile> profiles() {
  ModelProfile flat{"flat", 4e9, {}}, linear{"linear", 1e9, {}};
  for (int r = 1; r <= 4; r *= 2) {
    flat.stepSeconds[{r, 8}] = 1.0;
    linear.stepSeconds[{r, 8}] = 1.0 / r;
    linear.stepSeconds[{r, 16}] = 2.0 / r;
  }
  return {flat, linear};
}

TEST(Simulation, FifoJobCompletionTimesByHand) {
  // Both want the whole pool; 8 samples/s. A: 800 samples (100 s) from
  // t=0, B: 400 (50 s) from t=10; a start costs 5 s.
  std::vector<TraceJob> trace = {{"A", "flat", 0, {4, 8}, {{4, 8}}, 800},
                                 {"B", "flat", 10, {4, 8}, {{4, 8}}, 400}};
  SimulationOptions options;
  options.ranks = 4;
  options.restartSeconds = 5;
  std::unique_ptr<Policy> fifo = makePolicy("fifo");
  SimulationResult r = simulate(trace, profiles(), *fifo, options);
  ASSERT_EQ(r.jobs.size(), 2u);
  EXPECT_NEAR(r.jobs[0].finish, 105, 1e-6);
  EXPECT_NEAR(r.jobs[1].start, 105, 1e-6);
  EXPECT_NEAR(r.jobs[1].finish, 160, 1e-6);
  EXPECT_NEAR(r.averageJct, (105 + 150) / 2.0, 1e-6);
  EXPECT_NEAR(r.maxJct, 150, 1e-6);
  EXPECT_NEAR(r.makespan, 160, 1e-6);
  // 150 s of 4 ranks training out of 4 x 160.
  EXPECT_NEAR(r.utilisation, 150.0 / 160.0, 1e-9);
  EXPECT_EQ(r.restarts, 0);
  // The timeline holds each job's span on the 4 slots.
  ASSERT_EQ(r.timeline.size(), 2u);
  EXPECT_EQ(r.timeline[0].ranks, 4);
}

TEST(Simulation, ResizesPayForTheirCheckpoints) {
  // A alone on 1 of its options... then B arrives: LAS shares the pool
  // (both ask for 2 ranks); ONES may resize; every job finishes, no JCT is
  // below the job's work at its fastest option, and a restart costs
  // restartSeconds + 2 x checkpoint / bandwidth.
  std::vector<TraceJob> trace = {
      {"A", "linear", 0, {2, 8}, {{1, 8}, {2, 8}, {4, 8}, {4, 16}}, 3200},
      {"B", "linear", 50, {2, 8}, {{1, 8}, {2, 8}, {4, 8}}, 800},
      {"C", "flat", 60, {1, 8}, {{1, 8}, {2, 8}}, 80}};
  SimulationOptions options;
  options.ranks = 4;
  options.restartSeconds = 2;
  options.storageBytesPerSecond = 1e9;
  options.interval = 20;
  for (const std::string &name : policyNames()) {
    std::unique_ptr<Policy> policy = makePolicy(name);
    SimulationResult r = simulate(trace, profiles(), *policy, options);
    ASSERT_EQ(r.jobs.size(), 3u) << name;
    // Fastest: A 32 samples/s, B 32, C 8.
    EXPECT_GE(r.jobs[0].finish - r.jobs[0].arrival, 3200 / 32.0 + 2) << name;
    EXPECT_GE(r.jobs[1].finish - r.jobs[1].arrival, 800 / 32.0 + 2) << name;
    EXPECT_GE(r.jobs[2].finish - r.jobs[2].arrival, 80 / 8.0 + 2) << name;
    EXPECT_GT(r.utilisation, 0.3) << name;
    EXPECT_LE(r.utilisation, 1.0) << name;
    if (name != "ones")
      continue;
    // ONES grew A to the pool while it was alone.
    bool grew = false;
    for (const TimelineSpan &s : r.timeline)
      grew |= s.job == "A" && s.ranks == 4;
    EXPECT_TRUE(grew);
  }
}

TEST(Simulation, GeneratedTraceIsSeededAndConsistent) {
  TraceOptions options;
  options.jobs = 40;
  options.ranks = 4;
  options.requestedRanks = {1, 2};
  options.requestedWeights = {0.5, 0.5};
  const std::vector<ModelProfile> models = profiles();
  std::vector<TraceJob> a = generateTrace(models, options);
  std::vector<TraceJob> b = generateTrace(models, options);
  EXPECT_EQ(traceJson(a), traceJson(b));
  options.seed = 2;
  EXPECT_NE(traceJson(a), traceJson(generateTrace(models, options)));
  for (size_t j = 0; j < a.size(); ++j) {
    EXPECT_NE(
        std::find(a[j].configs.begin(), a[j].configs.end(), a[j].requested),
        a[j].configs.end());
    if (j > 0)
      EXPECT_GE(a[j].arrival, a[j - 1].arrival);
    EXPECT_GT(a[j].targetSamples, 0);
  }
  // The JSON round trip keeps every field.
  EXPECT_EQ(traceJson(parseTrace(traceJson(a), "t.json")), traceJson(a));
  EXPECT_EQ(profilesJson(parseProfiles(profilesJson(models), "p.json")),
            profilesJson(models));
  EXPECT_THROW(
      parseTrace("{\"format\": \"tpc-sched-trace\", \"version\": 2}", "t.json"),
      std::invalid_argument);
}

/// A directory with a config and data file for job specs.
class JobSpecTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("tp-sched-spec-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << "{}";
    std::ofstream(dir / "data.tokens") << "x";
  }
  void TearDown() override { fs::remove_all(dir); }
  JobSpec parse(const std::string &text) {
    return parseJobSpec(text, "job.json", dir.string());
  }
  std::string error(const std::string &text) {
    try {
      parse(text);
    } catch (const std::invalid_argument &e) {
      return e.what();
    }
    return "no error";
  }
  static std::string spec(const std::string &extra,
                          const std::string &without = "") {
    std::string fields[] = {R"("name": "a")",
                            R"("config": "config.json")",
                            R"("data": "data.tokens")",
                            R"("seq": 16)",
                            R"("batch_sizes": [2, 4, 8])",
                            R"("batch": 4)",
                            R"("ranks": 2)",
                            R"("max_ranks": 4)",
                            R"("target_samples": 64)",
                            R"("lr": 0.001)"};
    std::string out = "{";
    for (const std::string &f : fields)
      if (without.empty() || f.find("\"" + without + "\"") != 0)
        out += f + ", ";
    out += extra.empty() ? "\"warmup\": 2" : extra;
    return out + "}";
  }
  fs::path dir;
};

TEST_F(JobSpecTest, ParsesAndDerives) {
  JobSpec s = parse(spec(R"("max_lr": 0.003, "mode": "dp")"));
  EXPECT_EQ(s.config, (dir / "config.json").string());
  EXPECT_EQ(s.maxSamples, 64);
  // dp: ranks divide the batch. 1: 2,4,8; 2: 2,4,8; 3: none; 4: 4,8.
  std::vector<Config> expected = {{1, 2}, {1, 4}, {1, 8}, {2, 2},
                                  {2, 4}, {2, 8}, {4, 4}, {4, 8}};
  EXPECT_EQ(s.configs(), expected);
  EXPECT_DOUBLE_EQ(s.learningRate(2), 0.0005);
  EXPECT_DOUBLE_EQ(s.learningRate(8), 0.002);
  s.maxLr = 0.0015;
  EXPECT_DOUBLE_EQ(s.learningRate(8), 0.0015);
  // The default cap lets the rule reach the largest batch.
  EXPECT_DOUBLE_EQ(parse(spec("")).maxLr, 0.002);
  // A round trip through the state's JSON.
  JobSpec back = parseJobSpec(s.toJson().dump(), "state", "/");
  EXPECT_EQ(back.toJson(), s.toJson());
}

TEST_F(JobSpecTest, BadSpecsFailWithOneLine) {
  const std::pair<std::string, std::string> cases[] = {
      {"{", "job.json: invalid JSON"},
      {"[]", "job.json: a job spec is a JSON object"},
      {spec(R"("epochs": 3)"), "job.json: unknown field \"epochs\""},
      {spec("", "seq"), "job.json: missing \"seq\""},
      {spec(R"("warmup": -1)"), "\"warmup\" must be an integer >= 0"},
      {spec(R"("name": "../x")"), "\"name\" '../x' must be 1-64 letters"},
      {spec(R"("data": "missing.tokens")"),
       "\"data\" " + (fs::temp_directory_path() / "x").parent_path().string()},
      {spec(R"("batch": 3)"), "\"batch\" 3 is not one of \"batch_sizes\""},
      {spec(R"("batch_sizes": [4, 2])"), "\"batch_sizes\" must rise"},
      {spec(R"("ranks": 8)"), "\"ranks\" 8 exceeds \"max_ranks\" 4"},
      {spec(R"("ranks": 3)"),
       "the requested batch 4 does not split over its 3 ranks (mode dp)"},
      {spec(R"("target_loss": 2.5, "max_samples": 10)"),
       "give one of \"target_samples\" and \"target_loss\""},
      {spec(R"("mode": "2d")"), "\"mode\": unknown mode '2d'"},
      {spec(R"("lr": 0)"), "\"lr\" must be a positive number"},
      {spec(R"("max_lr": 0.0001)"), "\"max_lr\" is below \"lr\""},
      {spec(R"("pipeline": "mode=2d")"), "\"pipeline\" may not set mode="},
  };
  for (const auto &[text, message] : cases) {
    const std::string e = error(text);
    EXPECT_NE(e.find(message), std::string::npos) << text << "\n -> " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  // A target loss needs its bound.
  const std::string lossOnly =
      error(spec(R"("target_loss": 2.5)", "target_samples"));
  EXPECT_EQ(lossOnly, "job.json: missing \"max_samples\"");
}

TEST(Pool, HostfileSlurmAndPacking) {
  const fs::path file = fs::temp_directory_path() /
                        ("tp-sched-hosts-" + std::to_string(::getpid()));
  std::ofstream(file) << "# two nodes\nnode1 slots=2\n\nnode2 slots=3 "
                         "max_slots=4\nnode3\n";
  Pool pool = Pool::hostfile(file.string());
  ASSERT_EQ(pool.size(), 6);
  // Packed: the host with the most free slots first.
  std::vector<int> slots = pool.take("a", 4);
  EXPECT_EQ(pool.hostList(slots), "node2:3,node1:1");
  EXPECT_EQ(pool.free(), 2);
  EXPECT_THROW(pool.take("b", 3), std::logic_error);
  pool.release("a");
  EXPECT_EQ(pool.free(), 6);
  std::ofstream(file) << "node1 slots=two\n";
  try {
    Pool::hostfile(file.string());
    FAIL();
  } catch (const std::invalid_argument &e) {
    EXPECT_EQ(std::string(e.what()),
              file.string() + ":1: expected 'HOST [slots=N]'");
  }
  fs::remove(file);

  EXPECT_EQ(
      expandNodeList("gpu[01-03,7],login"),
      (std::vector<std::string>{"gpu01", "gpu02", "gpu03", "gpu7", "login"}));
  Pool slurm = Pool::slurm("n[1-3],m", "4(x3),2");
  EXPECT_EQ(slurm.size(), 14);
  EXPECT_EQ(slurm.hosts()[3].name, "m");
  EXPECT_EQ(Pool::slurm("n[1-2]", "8").size(), 16);
  EXPECT_THROW(Pool::slurm("n[1-3", "4"), std::invalid_argument);
  EXPECT_THROW(Pool::slurm("n[1-3]", "4,4"), std::invalid_argument);
}

} // namespace
