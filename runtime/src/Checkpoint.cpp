#include "tpc/runtime/Checkpoint.h"

#include "tpc/runtime/Checksum.h"
#include "tpc/runtime/Files.h"
#include "tpc/runtime/Init.h"
#include "tpc/runtime/Safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace tpc::runtime {

namespace {
void syncPath(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

/// A manifest lists a few dozen fields and one entry per file.
constexpr uint64_t kMaxManifestBytes = uint64_t(64) << 20;

/// Version 2 added the XXH3 checksum of each file; version 3 the tokens
/// seen and the data offset, so that a run resumed at another batch size
/// continues its data (version 2 is read as a run of constant batch).
constexpr int kCheckpointVersion = 3;
constexpr int kOldestReadableVersion = 2;

constexpr std::array<const char *, 5> kHyperparameterNames = {
    "peak_lr", "min_lr", "warmup_steps", "decay_steps", "max_grad_norm"};

std::string stepName(int64_t step) {
  std::ostringstream os;
  os << "step-" << std::setw(8) << std::setfill('0') << step;
  return os.str();
}

/// Checks DIR/manifest.json against the plan and the files beside it: every
/// field present with its type and range, the fingerprint of this plan's
/// parameters, and each file's size and XXH3 checksum. Returns its step and
/// data position.
CheckpointState checkManifest(const fs::path &dir, const LoadedPlan &plan) {
  const std::string path = (dir / "manifest.json").string();
  auto fail = [&](const std::string &what) -> std::runtime_error {
    return std::runtime_error(path + ": " + what);
  };
  nlohmann::json manifest;
  {
    const std::string text =
        readRegularFile(path, kMaxManifestBytes, "checkpoint manifest");
    try {
      manifest = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception &error) {
      throw fail(std::string("invalid JSON: ") + error.what());
    }
  }
  if (!manifest.is_object())
    throw fail("not a JSON object");
  auto field = [&](const char *key, nlohmann::json::value_t type,
                   const char *typeName) -> const nlohmann::json & {
    auto it = manifest.find(key);
    if (it == manifest.end())
      throw fail(std::string("missing \"") + key + "\"");
    bool ok = it->type() == type ||
              (type == nlohmann::json::value_t::number_integer &&
               it->is_number_unsigned());
    if (!ok)
      throw fail(std::string("\"") + key + "\" must be " + typeName);
    return *it;
  };
  using Type = nlohmann::json::value_t;
  if (field("format", Type::string, "a string") != "tpc-checkpoint")
    throw fail("not a tpc checkpoint manifest");
  const nlohmann::json &version =
      field("version", Type::number_integer, "an integer");
  if (version < kOldestReadableVersion || version > kCheckpointVersion)
    throw fail("format version " + version.dump() + "; this tp-run reads " +
               std::to_string(kOldestReadableVersion) + " to " +
               std::to_string(kCheckpointVersion) +
               " (version 1 predates checksums)");
  CheckpointState manifestState;
  const int64_t step =
      field("step", Type::number_integer, "an integer").get<int64_t>();
  if (step < 0)
    throw fail("\"step\" is negative");
  manifestState.step = step;
  field("model_type", Type::string, "a string");
  if (field("plan_fingerprint", Type::string, "a string") !=
      planFingerprint(plan))
    throw fail("belongs to a model with other parameters than this plan's");
  manifestState.tokensPerStep =
      field("tokens_per_step", Type::number_integer, "an integer")
          .get<int64_t>();
  if (manifestState.tokensPerStep <= 0)
    throw fail("\"tokens_per_step\" must be positive");
  if (version.get<int>() >= 3) {
    manifestState.tokensSeen =
        field("tokens_seen", Type::number_integer, "an integer").get<int64_t>();
    if (manifestState.tokensSeen < 0)
      throw fail("\"tokens_seen\" is negative");
    // Absent when the caller fed the batches (the Python package).
    if (manifest.contains("data_offset")) {
      manifestState.dataOffset =
          field("data_offset", Type::number_integer, "an integer")
              .get<int64_t>();
      if (*manifestState.dataOffset < 0)
        throw fail("\"data_offset\" is negative");
    }
  } else {
    manifestState.tokensSeen = step * manifestState.tokensPerStep;
  }
  const nlohmann::json &hyper =
      field("hyperparameters", Type::object, "an object");
  for (const char *name : kHyperparameterNames) {
    auto it = hyper.find(name);
    if (it == hyper.end() || !it->is_number() ||
        !std::isfinite(it->get<double>()))
      throw fail(std::string("hyperparameter \"") + name +
                 "\" must be a finite number");
  }
  const nlohmann::json &files = field("files", Type::array, "an array");
  if (files.size() != 1 || !files[0].is_object() ||
      files[0].value("name", "") != "state.safetensors")
    throw fail("\"files\" must list state.safetensors alone");
  const nlohmann::json &entry = files[0];
  const std::string state = (dir / "state.safetensors").string();
  std::error_code error;
  const uintmax_t bytes = fs::file_size(state, error);
  if (error)
    throw std::runtime_error(state + ": " + error.message());
  if (!entry.contains("bytes") || !entry["bytes"].is_number_unsigned() ||
      entry["bytes"].get<uintmax_t>() != bytes)
    throw std::runtime_error(state + ": " + std::to_string(bytes) +
                             " bytes, but the manifest records " +
                             (entry.contains("bytes") ? entry["bytes"].dump()
                                                      : std::string("none")));
  if (!entry.contains("xxh3_64") || !entry["xxh3_64"].is_string())
    throw fail("state.safetensors has no \"xxh3_64\" checksum");
  const std::string actual = checksumHex(fileChecksum(state));
  if (entry["xxh3_64"] != actual)
    throw std::runtime_error(state + ": content checksum " + actual +
                             " differs from the " + "manifest's " +
                             entry["xxh3_64"].get<std::string>() +
                             " (the checkpoint is corrupt)");
  return manifestState;
}

} // namespace

nlohmann::ordered_json
hyperparametersJson(const std::array<float, 5> &hyperparameters) {
  nlohmann::ordered_json json;
  for (size_t i = 0; i < kHyperparameterNames.size(); ++i)
    json[kHyperparameterNames[i]] = shortestDouble(hyperparameters[i]);
  return json;
}

std::string planFingerprint(const LoadedPlan &plan) {
  std::string description;
  for (const plan::Param *param : *plan.plan().params()) {
    description += param->name()->str() + "[";
    for (int64_t d : fileShape(*param))
      description += std::to_string(d) + ",";
    description += "];";
  }
  std::ostringstream os;
  os << std::hex << std::setw(16) << std::setfill('0')
     << parameterKey(description);
  return os.str();
}

CheckpointDirLock::CheckpointDirLock(const std::string &dir,
                                     const std::string &resume) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error)
    throw std::runtime_error(
        dir + ": cannot create the checkpoint directory: " + error.message());
  const std::string path = (fs::path(dir) / ".lock").string();
  // Never through a link: one planted at .lock would have the PID written
  // over its target, or a file created outside the directory.
  fd = ::open(path.c_str(),
              O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0)
    throw std::runtime_error(path + ": cannot open the lock file: " +
                             (errno == ELOOP
                                  ? std::string("it is a symbolic link")
                                  : std::string(std::strerror(errno))));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fd = -1;
    throw std::runtime_error(path + ": the lock file is not a regular file");
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char owner[32] = {};
    ssize_t n = ::pread(fd, owner, sizeof(owner) - 1, 0);
    ::close(fd);
    std::string pid(owner, n > 0 ? size_t(n) : 0);
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' '))
      pid.pop_back();
    // The pid the holder wrote, if that process still lives (a lock taken
    // by other means leaves an older run's pid in the file).
    char *end = nullptr;
    long holder = std::strtol(pid.c_str(), &end, 10);
    bool known = !pid.empty() && *end == '\0' && holder > 0 &&
                 ::kill(pid_t(holder), 0) == 0;
    throw std::runtime_error(dir + ": in use by another run" +
                             (known ? " (pid " + pid + ")" : std::string()));
  }
  const std::string pid = std::to_string(getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    ::close(fd);
    fd = -1;
    throw std::runtime_error(path + ": cannot write the lock file");
  }
  try {
    refuseAnotherRunsCheckpoints(dir, resume);
  } catch (...) {
    ::close(fd);
    fd = -1;
    throw;
  }
  // What writeCheckpoint and writeFileAtomically name their temporaries:
  // ".step-NNNNNNNN.tmp-PID", "step-NNNNNNNN.old-PID", "latest.tmp.PID".
  for (const fs::directory_entry &entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const bool leftover =
        (name.rfind(".step-", 0) == 0 && name.find(".tmp-") != name.npos) ||
        (name.rfind("step-", 0) == 0 && name.find(".old-") != name.npos) ||
        name.rfind("latest.tmp.", 0) == 0;
    if (leftover) {
      fs::remove_all(entry.path(), error);
      removed.push_back(entry.path().string());
    }
  }
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd >= 0)
    ::close(fd); // releases the lock; the file stays for the next run
}

void CheckpointDirLock::refuseAnotherRunsCheckpoints(
    const std::string &dir, const std::string &resume) {
  std::error_code error;
  // What names another run's state: its newest step directory, or `latest`.
  std::string newest;
  bool hasLatest = false;
  for (const fs::directory_entry &entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    hasLatest |= name == "latest";
    if (isCheckpointStepName(name))
      newest = std::max(newest, name);
  }
  if (newest.empty() && hasLatest)
    newest = "latest";
  if (newest.empty())
    return;
  // Continuing this directory's run: --resume names it or one of its steps.
  if (!resume.empty()) {
    const fs::path here = fs::weakly_canonical(dir, error);
    const fs::path from = fs::weakly_canonical(resume, error);
    if (from == here || from.parent_path() == here)
      return;
  }
  throw std::runtime_error(
      dir + ": already holds another run's checkpoints (" + newest +
      "); continue that run with --resume " + dir +
      ", or give an empty directory (writing here would mix the two runs)");
}

std::string checkpointPath(const std::string &dir, int64_t step) {
  return (fs::path(dir) / stepName(step)).string();
}

bool isCheckpointStepName(std::string_view name) {
  return name.size() == stepName(0).size() && name.starts_with("step-") &&
         name.find_first_not_of("0123456789", 5) == name.npos;
}

std::string writeCheckpoint(const std::string &dir, const LoadedPlan &plan,
                            const ParamStore &params,
                            const CheckpointState &state) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error)
    throw std::runtime_error(
        dir + ": cannot create the checkpoint directory: " + error.message());
  const std::string name = stepName(state.step);
  const std::string final = (fs::path(dir) / name).string();
  const std::string tmp =
      (fs::path(dir) / ("." + name + ".tmp-" + std::to_string(getpid())))
          .string();
  fs::remove_all(tmp, error);
  fs::create_directory(tmp, error);
  if (error)
    throw std::runtime_error(tmp + ": cannot create: " + error.message());
  try {
    SafetensorsWriter writer;
    const std::string fingerprint = planFingerprint(plan);
    writer.setMetadata("tpc.format", "tpc-checkpoint");
    writer.setMetadata("tpc.step", std::to_string(state.step));
    writer.setMetadata("tpc.fingerprint", fingerprint);
    const auto &paramList = *plan.plan().params();
    for (size_t i = 0; i < paramList.size(); ++i) {
      const plan::Param &param = *paramList.Get(i);
      std::string hfName = param.name()->str();
      writer.addF32(hfName, fileShape(param), params[i]);
      writer.addF32("optimizer.exp_avg." + hfName, fileShape(param),
                    params.expAvg(i));
      writer.addF32("optimizer.exp_avg_sq." + hfName, fileShape(param),
                    params.expAvgSq(i));
    }
    for (const auto &[name, order] : state.embeddingOrders)
      writer.addI64("embedding_cache.order." + name, {int64_t(order.size())},
                    order);
    const std::string stateFile =
        (fs::path(tmp) / "state.safetensors").string();
    writer.write(stateFile);

    nlohmann::ordered_json manifest;
    manifest["format"] = "tpc-checkpoint";
    manifest["version"] = kCheckpointVersion;
    manifest["step"] = state.step;
    manifest["model_type"] =
        plan.plan().model_type() ? plan.plan().model_type()->str() : "";
    manifest["plan_fingerprint"] = fingerprint;
    manifest["tokens_per_step"] = state.tokensPerStep;
    manifest["tokens_seen"] = state.tokensSeen;
    if (state.dataOffset)
      manifest["data_offset"] = *state.dataOffset;
    manifest["hyperparameters"] = hyperparametersJson(state.hyperparameters);
    manifest["files"] = {{{"name", "state.safetensors"},
                          {"bytes", fs::file_size(stateFile)},
                          {"xxh3_64", checksumHex(fileChecksum(stateFile))}}};
    writeFileAtomically((fs::path(tmp) / "manifest.json").string(),
                        manifest.dump(2) + "\n");
    syncPath(tmp);
    // Replace an existing checkpoint of the same step (a resumed run
    // writing it again) only once the new one is complete.
    if (fs::exists(final)) {
      std::string old = final + ".old-" + std::to_string(getpid());
      fs::rename(final, old);
      fs::rename(tmp, final);
      fs::remove_all(old);
    } else {
      fs::rename(tmp, final);
    }
    syncPath(dir);
    writeFileAtomically((fs::path(dir) / "latest").string(), name + "\n");
  } catch (const std::exception &e) {
    fs::remove_all(tmp, error);
    throw std::runtime_error(std::string("checkpoint ") + final + ": " +
                             e.what());
  }
  return final;
}

CheckpointState readCheckpoint(const std::string &path, const LoadedPlan &plan,
                               ParamStore &params) {
  fs::path dir = path;
  fs::path latest = dir / "latest";
  if (fs::exists(latest)) {
    std::ifstream in(latest);
    std::string name;
    std::getline(in, name);
    if (name.empty() || name.find('/') != std::string::npos)
      throw std::runtime_error(latest.string() +
                               ": does not name a checkpoint");
    dir /= name;
  }
  if (!fs::exists(dir / "manifest.json"))
    throw std::runtime_error(dir.string() +
                             ": not a checkpoint (no manifest.json)");
  CheckpointState state = checkManifest(dir, plan);
  const int64_t manifestStep = state.step;
  SafetensorsFile file =
      SafetensorsFile::open((dir / "state.safetensors").string());
  const auto &meta = file.metadata();
  auto get = [&](const std::string &key) -> std::string {
    auto it = meta.find(key);
    if (it == meta.end())
      throw std::runtime_error(file.path() + ": missing metadata '" + key +
                               "'");
    return it->second;
  };
  if (get("tpc.format") != "tpc-checkpoint")
    throw std::runtime_error(file.path() + ": not a tpc checkpoint");
  if (get("tpc.fingerprint") != planFingerprint(plan))
    throw std::runtime_error(file.path() +
                             ": belongs to a model with other parameters "
                             "than this plan's");
  if (get("tpc.step") != std::to_string(manifestStep))
    throw std::runtime_error(file.path() + ": its step (" + get("tpc.step") +
                             ") is not the manifest's (" +
                             std::to_string(manifestStep) + ")");
  const auto &paramList = *plan.plan().params();
  for (size_t i = 0; i < paramList.size(); ++i) {
    const plan::Param &param = *paramList.Get(i);
    std::string hfName = param.name()->str();
    auto load = [&](const std::string &name, ParamStore::State which) {
      const TensorInfo &info = file.get(name);
      if (info.dtype != DType::F32 || info.shape != fileShape(param))
        throw std::runtime_error(file.path() + ": tensor '" + name +
                                 "' is not f32 of the parameter's shape");
      params.setFromWhole(plan, i, which, file.readAsF32(name));
    };
    load(hfName, ParamStore::State::Value);
    load("optimizer.exp_avg." + hfName, ParamStore::State::ExpAvg);
    load("optimizer.exp_avg_sq." + hfName, ParamStore::State::ExpAvgSq);
    // A cached table's ranking, when the checkpoint has one (a run without
    // the cache wrote none; the resumed run then counts its data).
    const std::string orderName = "embedding_cache.order." + hfName;
    if (param.cache_rows() != 0 && file.find(orderName)) {
      std::vector<int64_t> order = file.readAsI64(orderName);
      if (int64_t(order.size()) != param.shape()->Get(0))
        throw std::runtime_error(file.path() + ": tensor '" + orderName +
                                 "' does not rank the table's " +
                                 std::to_string(param.shape()->Get(0)) +
                                 " rows");
      state.embeddingOrders[hfName] = std::move(order);
    }
  }
  return state;
}

void exportHuggingFace(const std::string &dir, const LoadedPlan &plan,
                       const ParamStore &params) {
  if (!plan.plan().hf_config() || plan.plan().hf_config()->size() == 0)
    throw std::runtime_error("the plan carries no config.json to export");
  std::error_code error;
  fs::create_directories(dir, error);
  if (error)
    throw std::runtime_error(dir + ": cannot create: " + error.message());
  SafetensorsWriter writer;
  writer.setMetadata("format", "pt");
  const auto &paramList = *plan.plan().params();
  for (size_t i = 0; i < paramList.size(); ++i)
    writer.addF32(paramList.Get(i)->name()->str(), fileShape(*paramList.Get(i)),
                  params[i]);
  writer.write((fs::path(dir) / "model.safetensors").string());
  writeFileAtomically((fs::path(dir) / "config.json").string(),
                      plan.plan().hf_config()->str());
}

} // namespace tpc::runtime
