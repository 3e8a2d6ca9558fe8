// tpc._tpc: the Python package's native half. Thin bindings over the
// compiler's Driver calls and the runtime's Session, Trainer, Evaluator and
// Generator; tpc/__init__.py gives them their Python shape (NumPy and DLPack
// inputs, keyword options). Errors raise with the one-line messages the
// tools print: std::invalid_argument as ValueError, the rest as
// RuntimeError.
//
// Every rank of an mpirun job runs the same script. A call that a rank
// could fail alone (bad input, a file it cannot read) is checked first and
// the ranks agree on the outcome before any collective starts, so all of
// them raise together; a failure once the programs run aborts every rank,
// as tp-run does, rather than leave the others waiting.

#include "tpc/Driver/Driver.h"
#include "tpc/runtime/Checkpoint.h"
#include "tpc/runtime/Checksum.h"
#include "tpc/runtime/Comm.h"
#include "tpc/runtime/Plan.h"
#include "tpc/runtime/RunReport.h"
#include "tpc/runtime/Session.h"
#include "tpc/runtime/Tokens.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace py = pybind11;
using namespace tpc::runtime;

namespace {

template <typename T> T valueOrRaise(llvm::Expected<T> value) {
  if (!value)
    throw std::runtime_error(llvm::toString(value.takeError()));
  return std::move(*value);
}

/// [batch, seq] token ids, C-contiguous int32 (tpc/__init__.py converts).
using TokenArray = py::array_t<int32_t, py::array::c_style>;

std::span<const int32_t> idsOf(const TokenArray &array) {
  return {array.data(), size_t(array.size())};
}

/// A DLRM's dense features, C-contiguous float32 (tpc/__init__.py converts).
using FeatureArray = py::array_t<float, py::array::c_style>;

/// Every rank must pass the same value (the same batch, prompts, paths).
void agreeOn(std::span<const std::byte> bytes, const std::string &what) {
  if (!Comm::world().allEqual(contentChecksum(bytes)))
    throw std::invalid_argument("the ranks passed different " + what +
                                "; every rank must make the same calls");
}

/// Runs collective work: a failure on one rank would leave the others
/// waiting inside a collective, so with several ranks it aborts them all.
template <typename F> auto collectively(F &&work) {
  if (Comm::world().size() == 1)
    return work();
  try {
    return work();
  } catch (const std::exception &error) {
    std::cerr << "tpc: error: rank " << Comm::world().rank() << ": "
              << error.what() << "\n"
              << std::flush;
    abortAll(1);
  }
}

std::span<const std::byte> bytesOf(const std::string &text) {
  return std::as_bytes(std::span(text));
}

py::dict eventDict(const RebalanceEvent &event) {
  py::dict d;
  d["step"] = event.step;
  d["action"] = event.action;
  d["reason"] = event.reason;
  d["slowest_rank"] = event.slowestRank;
  d["imbalance"] = event.imbalance;
  d["speeds"] = event.speeds;
  d["bytes_moved"] = event.bytesMoved;
  d["move_seconds"] = event.seconds;
  return d;
}

/// What Session.configure_training sets: the schedule for a run of
/// `steps` and the rebalancing options (tp-run train's flags).
struct TrainingSettings {
  int64_t steps = 0;
  LearningRateSchedule schedule;
  RebalanceOptions rebalance;
};

/// tpc.Session's native half: a runtime Session and, once training
/// starts, its Trainer.
class PySession {
public:
  PySession(py::object planBytes, const std::string &planPath,
            const std::string &device, const std::string &weights) {
    std::optional<LoadedPlan> plan;
    const int64_t world = Comm::world().size();
    runTogether(Comm::world(), [&] {
      if (!planBytes.is_none()) {
        const std::string bytes = py::cast<py::bytes>(planBytes);
        plan.emplace(
            LoadedPlan::fromBytes(bytes.data(), bytes.size(), world, "plan"));
      } else {
        plan.emplace(LoadedPlan::load(planPath, world));
      }
      session = std::make_unique<Session>(
          std::move(*plan),
          SessionOptions{device, machineLocalRank(), weights});
    });
    const uint64_t checksum = session->plan().contentChecksum();
    if (!Comm::world().allEqual(checksum))
      throw std::invalid_argument("the ranks opened different plans; every "
                                  "rank must open the same one");
    agreeOn(bytesOf(std::string(session->backend().name())), "devices");
    collectively([&] { session->connect(); });
  }

  std::vector<int64_t> tokensShape(const std::string &program) const {
    return session->plan().wholeInputShape(program,
                                           tpc::plan::InputKind::Tokens);
  }

  void configureTraining(int64_t steps, double lr, std::optional<double> minLr,
                         std::optional<int64_t> warmup,
                         std::optional<int64_t> decaySteps, double clip,
                         const std::string &rebalance,
                         const std::vector<std::string> &slow,
                         const std::vector<double> &rankSpeeds, int64_t window,
                         int64_t patience, double threshold, double minGain) {
    if (trainer)
      throw std::invalid_argument("configure_training comes before the "
                                  "first train_step or resume");
    if (steps < 1)
      throw std::invalid_argument("steps must be >= 1, got " +
                                  std::to_string(steps));
    TrainingSettings next;
    next.steps = steps;
    next.schedule.peak = lr;
    next.schedule.min = minLr;
    next.schedule.warmup = warmup;
    next.schedule.decaySteps = decaySteps;
    next.schedule.clip = clip;
    next.schedule.hyperparameters(steps); // checks the values
    next.rebalance.policy = parseRebalancePolicy(rebalance);
    next.rebalance.slow = parseSlowdowns(slow);
    next.rebalance.rankSpeeds = rankSpeeds;
    if (window < 1 || patience < 1 || !(threshold > 0) ||
        !(minGain >= 0 && minGain < 1))
      throw std::invalid_argument(
          "rebalance_window and rebalance_patience must be >= 1, "
          "rebalance_threshold > 0 and rebalance_min_gain in [0, 1)");
    next.rebalance.window = window;
    next.rebalance.patience = patience;
    next.rebalance.threshold = threshold;
    next.rebalance.minGain = minGain;
    settings = std::move(next);
  }

  /// This rank's cached tables, as tp-run's metrics report them (JSON).
  std::string embeddingCaches() const {
    return embeddingCachesJson(
               embeddingCacheReports(session->plan(), session->params()))
        .dump();
  }

  std::vector<int64_t> targetsShape() {
    runTogether(Comm::world(), [&] { startTrainer(); });
    return trainer->targetsShape();
  }
  std::vector<int64_t> denseShape() {
    runTogether(Comm::world(), [&] { startTrainer(); });
    return trainer->denseShape();
  }

  /// Ranks every cached embedding table's rows by how often `ids` (the
  /// training ids in step order) use them, as tp-run train does before
  /// step 1.
  void rankCachedRows(const TokenArray &ids) {
    if (started)
      throw std::invalid_argument(
          "rank_cached_rows comes before the first train_step");
    runTogether(Comm::world(), [&] { startTrainer(); });
    agreeOn(std::as_bytes(idsOf(ids)), "ids");
    runTogether(Comm::world(), [&] { trainer->rankCachedRows(idsOf(ids)); });
  }

  /// Continues from a checkpoint (its parameters, AdamW's moments, step).
  int64_t resume(const std::string &path) {
    if (trainer && trainer->nextStep() > 1)
      throw std::invalid_argument("resume comes before the first train_step");
    agreeOn(bytesOf(path), "checkpoint paths");
    runTogether(Comm::world(), [&] { startTrainer(); });
    const int64_t step =
        collectively([&] { return trainer->resume(path).step; });
    resumedFrom = path;
    return step;
  }

  double trainStep(const TokenArray &tokens, const TokenArray &targets,
                   std::optional<FeatureArray> dense,
                   std::optional<TokenArray> nextTokens) {
    runTogether(Comm::world(), [&] {
      startTrainer();
      checkShape(tokens, trainer->tokensShape(), "tokens");
      if (nextTokens)
        checkShape(*nextTokens, trainer->tokensShape(), "next_tokens");
      checkShape(targets, trainer->targetsShape(), "targets");
      if (trainer->denseShape().empty() && dense)
        throw std::invalid_argument(
            "dense features given, but the plan's train_step takes none");
      if (!trainer->denseShape().empty()) {
        if (!dense)
          throw std::invalid_argument(
              "the plan's train_step takes dense features: pass dense=");
        checkShape(*dense, trainer->denseShape(), "dense");
      }
    });
    std::span<const int32_t> ids = idsOf(tokens), next = idsOf(targets);
    std::span<const float> features;
    if (dense)
      features = {dense->data(), size_t(dense->size())};
    agreeOn(std::as_bytes(ids), "tokens");
    agreeOn(std::as_bytes(next), "targets");
    agreeOn(std::as_bytes(features), "dense features");
    std::span<const int32_t> ahead;
    if (nextTokens)
      ahead = idsOf(*nextTokens);
    agreeOn(std::as_bytes(ahead), "next tokens");
    return collectively([&] {
      if (!started) {
        // Known speeds split the blocks before the first step.
        if (std::optional<RebalanceEvent> given = trainer->applyRankSpeeds())
          events.push_back(std::move(*given));
        started = true;
      }
      StepOutcome outcome = trainer->step(ids, next, ahead, features);
      if (outcome.rebalance)
        events.push_back(std::move(*outcome.rebalance));
      lastRecord = outcome.record;
      return outcome.record.loss;
    });
  }

  /// @loss's mean loss, or @forward's logits, on one batch.
  py::object evaluate(const TokenArray &tokens,
                      std::optional<TokenArray> targets,
                      const std::string &program) {
    std::optional<Evaluator> evaluator;
    runTogether(Comm::world(), [&] {
      evaluator.emplace(session->plan(), session->params(), &session->grid(),
                        session->backend(), program);
      checkShape(tokens, evaluator->tokensShape(), "tokens");
      if (evaluator->programRunner().hasInput(tpc::plan::InputKind::Targets)) {
        if (!targets)
          throw std::invalid_argument("@" + program + " needs targets");
        checkShape(*targets, evaluator->tokensShape(), "targets");
      }
    });
    agreeOn(std::as_bytes(idsOf(tokens)), "tokens");
    std::span<const int32_t> next =
        targets ? idsOf(*targets) : std::span<const int32_t>();
    agreeOn(std::as_bytes(next), "targets");
    return collectively([&]() -> py::object {
      const BatchRun run = evaluator->runOn(idsOf(tokens), next);
      if (run.loss)
        return py::float_(*run.loss);
      ProgramRunner &runner = evaluator->programRunner();
      const auto values = runner.result(0);
      py::array_t<float> out(runner.resultShape(0));
      std::copy(values.begin(), values.end(), out.mutable_data());
      return std::move(out);
    });
  }

  std::vector<std::vector<int32_t>>
  generate(const std::vector<std::vector<int32_t>> &prompts,
           int64_t maxNewTokens, double temperature, int64_t topK, double topP,
           uint64_t seed, bool ignoreEos, bool kvCache) {
    GenerationRequest request;
    request.prompts = prompts;
    request.newTokens = maxNewTokens;
    request.sampling.temperature = temperature;
    request.sampling.topK = topK;
    request.sampling.topP = topP;
    request.seed = seed;
    if (!ignoreEos)
      request.endIds = session->plan().endTokenIds();
    request.kvCaches = kvCache;
    std::ostringstream asked;
    asked << maxNewTokens << ' ' << temperature << ' ' << topK << ' ' << topP
          << ' ' << seed << ' ' << ignoreEos << ' ' << kvCache;
    for (const std::vector<int32_t> &prompt : prompts) {
      asked << '|';
      for (int32_t id : prompt)
        asked << id << ',';
    }
    agreeOn(bytesOf(asked.str()), "prompts or generation settings");
    std::optional<Generator> generator;
    runTogether(Comm::world(), [&] {
      generator.emplace(session->generator());
      generator->check(request);
    });
    return collectively([&] {
      GenerationResult result = generator->generate(request);
      std::vector<std::vector<int32_t>> out;
      for (const GeneratedSample &sample : result.samples)
        out.push_back(sample.generated);
      return out;
    });
  }

  std::string saveCheckpoint(const std::string &dir) {
    agreeOn(bytesOf(dir), "checkpoint directories");
    runTogether(Comm::world(), [&] {
      if (!trainer || trainer->nextStep() == 1)
        throw std::invalid_argument("save_checkpoint needs a train_step first");
      // The first rank writes; it holds the directory's lock for the
      // session, refusing another run's checkpoints as tp-run does.
      if (Comm::world().rank() == 0 && lockedDir != dir) {
        checkpointLock = std::make_unique<CheckpointDirLock>(dir, resumedFrom);
        lockedDir = dir;
      }
    });
    collectively([&] { return trainer->saveCheckpoint(dir); });
    return checkpointPath(dir, trainer->nextStep() - 1);
  }

  void exportHf(const std::string &dir) {
    agreeOn(bytesOf(dir), "export directories");
    collectively([&] {
      session->exportHuggingFace(dir);
      return 0;
    });
  }

  void loadWeights(const std::string &path) {
    agreeOn(bytesOf(path), "weight files");
    runTogether(Comm::world(), [&] { session->loadWeights(path); });
  }

  int64_t step() const { return trainer ? trainer->nextStep() - 1 : 0; }
  double learningRate() const { return lastRecord.learningRate; }
  std::string device() const { return std::string(session->backend().name()); }
  int64_t vocabularySize() const { return session->plan().vocabularySize(); }
  uint64_t paramBytes() { return session->params().bytes(); }
  std::string rebalanceStatus() {
    return trainer && trainer->rebalancer().enabled()
               ? trainer->rebalancer().status()
               : std::string();
  }
  py::list rebalanceEvents() const {
    py::list list;
    for (const RebalanceEvent &event : events)
      list.append(eventDict(event));
    return list;
  }

private:
  void startTrainer() {
    if (trainer)
      return;
    if (!settings)
      throw std::invalid_argument(
          "training needs its schedule: call configure_training(steps=N, "
          "...) first");
    trainer = std::make_unique<Trainer>(
        session->plan(), session->params(), &session->grid(),
        session->backend(), settings->schedule.hyperparameters(settings->steps),
        settings->rebalance);
  }

  template <typename Array>
  static void checkShape(const Array &array, const std::vector<int64_t> &shape,
                         const char *what) {
    std::vector<int64_t> given(array.shape(), array.shape() + array.ndim());
    if (given != shape) {
      auto text = [](const std::vector<int64_t> &dims) {
        std::string s = "[";
        for (size_t i = 0; i < dims.size(); ++i)
          s += (i ? ", " : "") + std::to_string(dims[i]);
        return s + "]";
      };
      throw std::invalid_argument(std::string(what) + " has shape " +
                                  text(given) + "; the plan takes " +
                                  text(shape));
    }
  }

  std::unique_ptr<Session> session;
  std::optional<TrainingSettings> settings;
  std::unique_ptr<Trainer> trainer;
  bool started = false;
  StepRecord lastRecord{};
  std::vector<RebalanceEvent> events;
  std::string resumedFrom, lockedDir;
  std::unique_ptr<CheckpointDirLock> checkpointLock;
};

} // namespace

PYBIND11_MODULE(_tpc, m) {
  m.doc() = "tpc's native half: the compiler's Driver calls and the "
            "runtime's Session (use the tpc package)";

  m.def(
      "import_model",
      [](const std::string &configPath, int64_t batch,
         std::optional<int64_t> seq, int64_t kvCache) {
        return valueOrRaise(
            tpc::driver::importModel(configPath, batch, seq, kvCache));
      },
      py::arg("config_path"), py::arg("batch"), py::arg("seq"),
      py::arg("kv_cache") = 0);
  m.def(
      "compile",
      [](const std::string &moduleText, const std::string &options) {
        std::optional<tpc::driver::CompiledPlan> plan;
        std::string error;
        {
          // Compiles may take minutes on big models: other Python threads
          // run meanwhile.
          py::gil_scoped_release release;
          auto compiled = tpc::driver::compileToPlan(moduleText, options);
          if (compiled)
            plan = std::move(*compiled);
          else
            error = llvm::toString(compiled.takeError());
        }
        if (!plan)
          throw std::invalid_argument(error);
        return py::make_tuple(py::bytes(plan->bytes), plan->remarks);
      },
      py::arg("module_text"), py::arg("options"));
  m.def(
      "plan_json",
      [](const py::bytes &bytes) {
        const std::string data = bytes;
        std::ostringstream os;
        LoadedPlan::fromBytes(data.data(), data.size(), kAnyWorldSize, "plan")
            .printJson(os);
        return os.str();
      },
      py::arg("plan_bytes"));
  m.def(
      "read_token_file",
      [](const std::string &path) {
        std::vector<int32_t> tokens = readTokenFile(path);
        py::array_t<int32_t> out(py::ssize_t(tokens.size()));
        std::copy(tokens.begin(), tokens.end(), out.mutable_data());
        return out;
      },
      py::arg("path"));
  m.def("world_rank", [] { return Comm::world().rank(); });
  m.def("world_size", [] { return Comm::world().size(); });

  py::class_<PySession>(m, "Session")
      .def(py::init<py::object, std::string, std::string, std::string>(),
           py::arg("plan_bytes"), py::arg("plan_path"), py::arg("device"),
           py::arg("weights"))
      .def("tokens_shape", &PySession::tokensShape, py::arg("program"))
      .def("configure_training", &PySession::configureTraining,
           py::arg("steps"), py::arg("lr"), py::arg("min_lr"),
           py::arg("warmup"), py::arg("decay_steps"), py::arg("clip"),
           py::arg("rebalance"), py::arg("slow"), py::arg("rank_speeds"),
           py::arg("window"), py::arg("patience"), py::arg("threshold"),
           py::arg("min_gain"))
      .def("resume", &PySession::resume, py::arg("path"))
      .def("train_step", &PySession::trainStep, py::arg("tokens"),
           py::arg("targets"), py::arg("dense"), py::arg("next_tokens"))
      .def("rank_cached_rows", &PySession::rankCachedRows, py::arg("ids"))
      .def_property_readonly("targets_shape", &PySession::targetsShape)
      .def_property_readonly("dense_shape", &PySession::denseShape)
      .def_property_readonly("embedding_caches", &PySession::embeddingCaches)
      .def("evaluate", &PySession::evaluate, py::arg("tokens"),
           py::arg("targets"), py::arg("program"))
      .def("generate", &PySession::generate, py::arg("prompts"),
           py::arg("max_new_tokens"), py::arg("temperature"), py::arg("top_k"),
           py::arg("top_p"), py::arg("seed"), py::arg("ignore_eos"),
           py::arg("kv_cache"))
      .def("save_checkpoint", &PySession::saveCheckpoint, py::arg("dir"))
      .def("export_hf", &PySession::exportHf, py::arg("dir"))
      .def("load_weights", &PySession::loadWeights, py::arg("path"))
      .def_property_readonly("step", &PySession::step)
      .def_property_readonly("learning_rate", &PySession::learningRate)
      .def_property_readonly("device", &PySession::device)
      .def_property_readonly("vocabulary_size", &PySession::vocabularySize)
      .def_property_readonly("param_bytes", &PySession::paramBytes)
      .def_property_readonly("rebalance_status", &PySession::rebalanceStatus)
      .def_property_readonly("rebalance_events", &PySession::rebalanceEvents);
}
