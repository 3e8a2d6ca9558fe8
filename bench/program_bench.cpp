// Time of one program of a plan (forward, train_step, ...) against its GEMM
// floor, in one process.
//
//   tpc-bench-program model.tpplan [--program forward] [--runs 5]
//
// The floor is OpenBLAS SGEMM alone on exactly the plan's matmul shapes
// (every batch entry of a batched matmul is one sgemm call, as our kernel
// issues them), on buffers of the same sizes. Forward runs and floor runs
// alternate so both see the same machine state; medians are reported with
// their ratio. Not a test: results go to docs/performance.md.

#include "tpc/runtime/Executor.h"
#include "tpc/runtime/Plan.h"
#include "tpc/runtime/cpu/Kernels.h"

#include <CLI/CLI.hpp>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <map>
#include <random>

using namespace tpc::runtime;

namespace {
struct Gemm {
  int64_t batch, m, n, k;
  bool transA, transB;
  std::vector<float> a, b, c;
};

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
} // namespace

int main(int argc, char **argv) {
  std::string planPath, programName = "forward";
  int runs = 5;
  CLI::App app("Times one program of a plan against OpenBLAS SGEMM alone on "
               "the plan's matmul shapes (its GEMM floor), in one process; "
               "medians of alternating runs.",
               "tpc-bench-program");
  app.add_option("plan", planPath, "The plan file (.tpplan)")->required();
  app.add_option("--program", programName, "Program to time")
      ->capture_default_str();
  app.add_option("--runs", runs, "Timed runs of each")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError &error) {
    std::cerr << "tpc-bench-program: error: " << error.what() << "\n";
    return 1;
  }
  try {
    LoadedPlan plan = LoadedPlan::load(planPath, 1);
    const tpc::plan::Program *program = plan.program(programName);
    if (!program)
      throw std::invalid_argument("no program " + programName);

    // The plan's matmuls as (batch, M, N, K) sgemm problems.
    std::vector<Gemm> gemms;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (const tpc::plan::Step *step : *program->steps()) {
      if (step->kind() != tpc::plan::OpKind::Matmul)
        continue;
      auto shapeOf = [&](uint32_t id) {
        auto *s = program->tensors()->Get(id)->shape();
        return std::vector<int64_t>(s->begin(), s->end());
      };
      std::vector<int64_t> l = shapeOf(step->operands()->Get(0)),
                           r = shapeOf(step->operands()->Get(1)),
                           o = shapeOf(step->results()->Get(0));
      Gemm g;
      g.transA = step->transpose_lhs();
      g.transB = step->transpose_rhs();
      g.m = o[o.size() - 2];
      g.n = o.back();
      g.k = g.transA ? l[l.size() - 2] : l.back();
      g.batch = 1;
      for (size_t d = 0; d + 2 < o.size(); ++d)
        g.batch *= o[d];
      // Our kernel folds a shared rhs into one big sgemm; so does the floor.
      bool rhsShared = r.size() == 2 && !g.transA;
      if (rhsShared) {
        g.m *= g.batch;
        g.batch = 1;
      }
      g.a.resize(g.m * g.k);
      g.b.resize(g.k * g.n);
      g.c.resize(g.m * g.n);
      for (float &x : g.a)
        x = dist(rng);
      for (float &x : g.b)
        x = dist(rng);
      gemms.push_back(std::move(g));
    }
    auto runFloor = [&] {
      for (Gemm &g : gemms)
        for (int64_t b = 0; b < g.batch; ++b)
          cblas_sgemm(CblasRowMajor, g.transA ? CblasTrans : CblasNoTrans,
                      g.transB ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, 1.0f,
                      g.a.data(), g.transA ? g.m : g.k, g.b.data(),
                      g.transB ? g.k : g.n, 0.0f, g.c.data(), g.n);
    };

    ParamStore params = ParamStore::initialise(plan);
    ProgramRunner runner(plan, programName, params);
    std::vector<int64_t> shape = runner.tokensShape();
    std::vector<int32_t> tokens(shape[0] * shape[1]);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = int32_t((i * 7919) % 256);
    runner.setInput(tpc::plan::InputKind::Tokens, tokens);
    if (runner.hasInput(tpc::plan::InputKind::Targets))
      runner.setInput(tpc::plan::InputKind::Targets, tokens);
    int64_t step = 1;
    if (runner.hasInput(tpc::plan::InputKind::Hyperparameters))
      runner.setHyperparameters({3e-4f, 3e-5f, 10.0f, 1000.0f, 1.0f});
    auto setStep = [&] {
      if (runner.hasInput(tpc::plan::InputKind::Step))
        runner.setStep(step++);
    };

    // Warm up both, then alternate.
    setStep();
    runner.run();
    runFloor();
    std::vector<double> forward, floor;
    std::map<std::string, double> opSeconds;
    for (int r = 0; r < runs; ++r) {
      runner.resetStats();
      setStep();
      double t0 = now();
      runner.run();
      double t1 = now();
      runFloor();
      double t2 = now();
      forward.push_back(t1 - t0);
      floor.push_back(t2 - t1);
      for (const auto &[kind, stats] : runner.stats())
        opSeconds[kind] += stats.seconds / runs;
    }
    double f = median(forward), g = median(floor);
    int64_t tokenCount = shape[0] * shape[1];
    std::cout << std::fixed << std::setprecision(3) << "program " << programName
              << ": batch " << shape[0] << " x seq " << shape[1] << ", "
              << cpu::numThreads() << " threads, " << runs << " runs\n"
              << programName << " median " << f * 1e3 << " ms ("
              << std::setprecision(1) << tokenCount / f << " tokens/s)\n"
              << std::setprecision(3) << "GEMM floor median " << g * 1e3
              << " ms (" << gemms.size() << " matmuls)\n"
              << "ratio " << programName << " / floor: " << f / g << "\n"
              << "planned memory: arena " << runner.arenaBytes() / 1e6
              << " MB + parameters and optimizer state " << params.bytes() / 1e6
              << " MB + inputs " << runner.inputBytes() / 1e6 << " MB = "
              << (runner.arenaBytes() + params.bytes() + runner.inputBytes()) /
                     1e6
              << " MB\n"
              << "time per op kind (mean ms):";
    for (const auto &[kind, seconds] : opSeconds)
      std::cout << " " << kind << "=" << seconds * 1e3;
    std::cout << "\n";
    return 0;
  } catch (const std::exception &error) {
    std::cerr << "tpc-bench-program: error: " << error.what() << "\n";
    return 1;
  }
}
