//===- Cluster.cpp - a described cluster, for the step simulator ----------===//

#include "tpc/Simulate/Cluster.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cmath>

using namespace mlir;
using namespace mlir::tp;

double DeviceModel::productSeconds(double flops, TypeAttr precision) const {
  double peak = peakF32;
  if (precision && isa<BFloat16Type>(precision.getValue()))
    peak = peakBF16;
  else if (precision && isa<FloatTF32Type>(precision.getValue()))
    peak = peakTF32;
  if (flops <= 0)
    return opOverhead;
  const double efficiency = gemmMax * flops / (flops + gemmHalfFlops);
  return opOverhead + flops / (peak * efficiency);
}

double DeviceModel::streamSeconds(double bytes) const {
  return opOverhead + bytes / memoryBandwidth;
}

DeviceModel ClusterModel::deviceFor(int64_t worldRanks) const {
  if (devices == 0 || worldRanks <= devices)
    return device;
  // Ranks are placed in order, so the busiest device has this many.
  const double share = double((worldRanks + devices - 1) / devices);
  DeviceModel shared = device;
  shared.peakF32 /= share;
  shared.peakTF32 /= share;
  shared.peakBF16 /= share;
  shared.memoryBandwidth /= share;
  shared.memoryBytes /= share;
  return shared;
}

const NetworkLevel &ClusterModel::levelOf(ArrayRef<int64_t> ranks) const {
  for (const NetworkLevel &level : levels) {
    if (level.ranks == 0)
      return level;
    bool together = llvm::all_of(ranks, [&](int64_t rank) {
      return rank / level.ranks == ranks.front() / level.ranks;
    });
    if (together)
      return level;
  }
  return levels.back();
}

double ClusterModel::exchangeSeconds(ArrayRef<int64_t> ranks, int64_t ringSteps,
                                     double bytes) const {
  if (ringSteps == 0)
    return 0;
  const NetworkLevel &level = levelOf(ranks);
  double bandwidth = level.bandwidth;
  const size_t index = &level - levels.begin();
  if (level.links > 0 && index > 0) {
    // Every rank runs the same exchange over its own group at once: a node
    // (inner group) holding k of this group's ranks is crossed by
    // inner / k such groups, which share its links.
    const int64_t inner = levels[index - 1].ranks;
    const int64_t held = llvm::count_if(ranks, [&](int64_t rank) {
      return rank / inner == ranks.front() / inner;
    });
    const double crossing = double(inner) / double(held);
    bandwidth *= std::min(1.0, double(level.links) / crossing);
  }
  return double(ringSteps) * level.latency + bytes / bandwidth;
}

namespace {
/// Reads fields of one JSON object, failing with the field's path.
class Reader {
public:
  Reader(const llvm::json::Object &object, std::string where,
         llvm::StringRef path)
      : object(object), where(std::move(where)), path(path) {}

  llvm::Error fail(const llvm::Twine &field, const llvm::Twine &why) const {
    return llvm::createStringError(path + ": " + where + field + " " + why);
  }
  /// Reads a positive number into `out`.
  llvm::Error positive(llvm::StringRef field, double &out) const {
    std::optional<double> value = object.getNumber(field);
    if (!value)
      return fail(field, "must be a number");
    if (!(*value > 0) || !std::isfinite(*value))
      return fail(field, "must be positive, got " + std::to_string(*value));
    out = *value;
    return llvm::Error::success();
  }
  /// The same when the field is there; `out` keeps its default otherwise.
  llvm::Error optionalPositive(llvm::StringRef field, double &out) const {
    return object.get(field) ? positive(field, out) : llvm::Error::success();
  }
  llvm::Error optionalNonNegative(llvm::StringRef field, double &out) const {
    if (!object.get(field))
      return llvm::Error::success();
    std::optional<double> value = object.getNumber(field);
    if (!value || !(*value >= 0) || !std::isfinite(*value))
      return fail(field, "must be a non-negative number");
    out = *value;
    return llvm::Error::success();
  }
  llvm::Error string(llvm::StringRef field, std::string &out) const {
    std::optional<llvm::StringRef> value = object.getString(field);
    if (!value)
      return fail(field, "must be a string");
    out = value->str();
    return llvm::Error::success();
  }
  llvm::Expected<Reader> child(llvm::StringRef field) const {
    const llvm::json::Object *inner = object.getObject(field);
    if (!inner)
      return fail(field, "must be an object");
    return Reader(*inner, where + field.str() + ".", path);
  }
  /// Fails on a field the format does not have (a misspelt one would be
  /// ignored otherwise).
  llvm::Error onlyFields(llvm::ArrayRef<llvm::StringRef> known) const {
    for (const auto &entry : object)
      if (!llvm::is_contained(known, llvm::StringRef(entry.first)))
        return fail(entry.first.str(), "is not a field of the format");
    return llvm::Error::success();
  }

  const llvm::json::Object &object;
  std::string where;
  llvm::StringRef path;
};
} // namespace

llvm::Expected<ClusterModel> mlir::tp::parseCluster(llvm::StringRef text,
                                                    llvm::StringRef path) {
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(text);
  if (!json)
    return llvm::createStringError(
        path + ": not JSON: " + llvm::toString(json.takeError()));
  const llvm::json::Object *root = json->getAsObject();
  if (!root)
    return llvm::createStringError(path + ": must be a JSON object");
  Reader top(*root, "", path);
  if (llvm::Error error =
          top.onlyFields({"name", "source", "device", "devices", "network"}))
    return std::move(error);
  ClusterModel cluster;
  if (llvm::Error error = top.string("name", cluster.name))
    return std::move(error);
  if (root->get("devices")) {
    std::optional<int64_t> devices = root->getInteger("devices");
    if (!devices || *devices < 1)
      return top.fail("devices", "must be a positive integer");
    cluster.devices = *devices;
  }

  auto device = top.child("device");
  if (!device)
    return device.takeError();
  if (llvm::Error error = device->onlyFields(
          {"name", "peak_flops", "memory_bytes", "memory_bandwidth",
           "gemm_efficiency", "op_overhead_seconds"}))
    return std::move(error);
  DeviceModel &d = cluster.device;
  if (llvm::Error error = device->string("name", d.name))
    return std::move(error);
  auto peak = device->child("peak_flops");
  if (!peak)
    return peak.takeError();
  if (llvm::Error error = device->positive("memory_bytes", d.memoryBytes))
    return std::move(error);
  if (llvm::Error error =
          device->positive("memory_bandwidth", d.memoryBandwidth))
    return std::move(error);
  if (llvm::Error error =
          device->optionalNonNegative("op_overhead_seconds", d.opOverhead))
    return std::move(error);
  if (llvm::Error error = peak->onlyFields({"f32", "tf32", "bf16"}))
    return std::move(error);
  if (llvm::Error error = peak->positive("f32", d.peakF32))
    return std::move(error);
  // A device without faster modes runs them at its f32 rate (a CPU rounds
  // the operands and runs SGEMM).
  d.peakTF32 = d.peakBF16 = d.peakF32;
  if (llvm::Error error = peak->optionalPositive("tf32", d.peakTF32))
    return std::move(error);
  if (llvm::Error error = peak->optionalPositive("bf16", d.peakBF16))
    return std::move(error);
  if (device->object.get("gemm_efficiency")) {
    auto efficiency = device->child("gemm_efficiency");
    if (!efficiency)
      return efficiency.takeError();
    if (llvm::Error error = efficiency->onlyFields({"max", "half_flops"}))
      return std::move(error);
    if (llvm::Error error = efficiency->positive("max", d.gemmMax))
      return std::move(error);
    if (d.gemmMax > 1)
      return efficiency->fail("max", "must be at most 1 (of the peak)");
    if (llvm::Error error =
            efficiency->optionalNonNegative("half_flops", d.gemmHalfFlops))
      return std::move(error);
  }

  const llvm::json::Array *network = root->getArray("network");
  if (!network || network->empty())
    return top.fail("network", "must be a non-empty array of levels");
  int64_t previous = 1;
  for (auto [index, value] : llvm::enumerate(*network)) {
    const llvm::json::Object *object = value.getAsObject();
    std::string where = "network[" + std::to_string(index) + "].";
    if (!object)
      return top.fail(where.substr(0, where.size() - 1), "must be an object");
    Reader level(*object, where, path);
    if (llvm::Error error = level.onlyFields(
            {"level", "ranks", "bandwidth", "latency", "links"}))
      return std::move(error);
    NetworkLevel parsed;
    if (llvm::Error error = level.string("level", parsed.name))
      return std::move(error);
    if (llvm::Error error = level.positive("bandwidth", parsed.bandwidth))
      return std::move(error);
    if (llvm::Error error =
            level.optionalNonNegative("latency", parsed.latency))
      return std::move(error);
    if (object->get("links")) {
      std::optional<int64_t> links = object->getInteger("links");
      if (!links || *links < 1)
        return level.fail("links", "must be a positive integer");
      if (index == 0)
        return level.fail("links", "is for a level with one inside it (the "
                                   "innermost level's links are its ranks')");
      parsed.links = *links;
    }
    const bool outermost = index + 1 == network->size();
    if (object->get("ranks")) {
      std::optional<int64_t> ranks = object->getInteger("ranks");
      if (!ranks || *ranks < 1)
        return level.fail("ranks", "must be a positive integer");
      if (*ranks <= previous || *ranks % previous != 0)
        return level.fail("ranks", "must be a multiple of the inner level's " +
                                       llvm::Twine(previous) +
                                       " ranks, and larger");
      parsed.ranks = *ranks;
      previous = *ranks;
    } else if (!outermost) {
      return level.fail("ranks", "is needed on every level but the last");
    }
    if (outermost)
      parsed.ranks = 0; // spans every rank
    cluster.levels.push_back(std::move(parsed));
  }
  return cluster;
}

llvm::Expected<ClusterModel> mlir::tp::loadCluster(llvm::StringRef path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
      llvm::MemoryBuffer::getFile(path);
  if (!file)
    return llvm::createStringError(
        path + ": cannot read: " + file.getError().message());
  return parseCluster((*file)->getBuffer(), path);
}
