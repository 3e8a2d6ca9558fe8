#include "tpc/runtime/Checkpoint.h"

#include "tpc/runtime/Files.h"
#include "tpc/runtime/Init.h"
#include "tpc/runtime/Safetensors.h"

#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
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

std::string stepName(int64_t step) {
  std::ostringstream os;
  os << "step-" << std::setw(8) << std::setfill('0') << step;
  return os.str();
}

} // namespace

void writeHyperparametersJson(std::ostream &os,
                              const std::array<float, 5> &hyperparameters) {
  os << "{\"peak_lr\": " << hyperparameters[0]
     << ", \"min_lr\": " << hyperparameters[1]
     << ", \"warmup_steps\": " << hyperparameters[2]
     << ", \"decay_steps\": " << hyperparameters[3]
     << ", \"max_grad_norm\": " << hyperparameters[4] << "}";
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
    const std::string stateFile =
        (fs::path(tmp) / "state.safetensors").string();
    writer.write(stateFile);

    std::ostringstream manifest;
    manifest << std::setprecision(9) << "{\n"
             << "  \"format\": \"tpc-checkpoint\",\n"
             << "  \"version\": 1,\n"
             << "  \"step\": " << state.step << ",\n"
             << "  \"model_type\": \""
             << (plan.plan().model_type() ? plan.plan().model_type()->str()
                                          : "")
             << "\",\n"
             << "  \"plan_fingerprint\": \"" << fingerprint << "\",\n"
             << "  \"tokens_per_step\": " << state.tokensPerStep << ",\n"
             << "  \"hyperparameters\": ";
    writeHyperparametersJson(manifest, state.hyperparameters);
    manifest << ",\n"
             << "  \"files\": [{\"name\": \"state.safetensors\", \"bytes\": "
             << fs::file_size(stateFile) << "}]\n}\n";
    writeFileAtomically((fs::path(tmp) / "manifest.json").string(),
                        manifest.str());
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
                               ParamStore &params,
                               const std::vector<int64_t> &coords) {
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
  CheckpointState state;
  try {
    state.step = std::stoll(get("tpc.step"));
  } catch (const std::logic_error &) {
    throw std::runtime_error(file.path() + ": invalid tpc.step");
  }
  const auto &paramList = *plan.plan().params();
  for (size_t i = 0; i < paramList.size(); ++i) {
    const plan::Param &param = *paramList.Get(i);
    std::string hfName = param.name()->str();
    auto load = [&](const std::string &name, std::vector<float> &into) {
      const TensorInfo &info = file.get(name);
      if (info.dtype != DType::F32 || info.shape != fileShape(param))
        throw std::runtime_error(file.path() + ": tensor '" + name +
                                 "' is not f32 of the parameter's shape");
      into = sliceBlock(file.readAsF32(name), paramBlock(plan, param, coords));
    };
    load(hfName, params[i]);
    load("optimizer.exp_avg." + hfName, params.expAvg(i));
    load("optimizer.exp_avg_sq." + hfName, params.expAvgSq(i));
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
