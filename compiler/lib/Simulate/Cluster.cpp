//===- Cluster.cpp - a described cluster, for the step simulator ----------===//

#include "tpc/Simulate/Cluster.h"

#include "tpc/Support/InputFiles.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cmath>
#include <cstdio>

using namespace mlir;
using namespace mlir::tp;

double DeviceModel::productSeconds(double flops, TypeAttr precision) const {
  double peak = peakF32, halfFlops = halfFlopsF32;
  if (precision && isa<BFloat16Type>(precision.getValue())) {
    peak = peakBF16;
    halfFlops = halfFlopsBF16;
  } else if (precision && isa<FloatTF32Type>(precision.getValue())) {
    peak = peakTF32;
    halfFlops = halfFlopsTF32;
  }
  if (flops <= 0)
    return opOverhead;
  const double efficiency = gemmMax * flops / (flops + halfFlops);
  return opOverhead + flops / (peak * efficiency);
}

double DeviceModel::streamSeconds(double bytes) const {
  return opOverhead + bytes / memoryBandwidth;
}

int64_t ClusterModel::ranksPerDevice(int64_t worldRanks) const {
  if (devices == 0 || worldRanks <= devices)
    return 1;
  return (worldRanks + devices - 1) / devices;
}

DeviceModel ClusterModel::deviceFor(int64_t worldRanks) const {
  const double share = double(ranksPerDevice(worldRanks));
  if (share == 1)
    return device;
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
/// The physical range a field may take: a description with 1e-308 FLOP/s or
/// a latency of 1e300 s would have mode=auto pick a plan "at INF ms per
/// step".
struct Range {
  double min, max;
  const char *unit;
};
constexpr Range kFlops{1e6, 1e19, "FLOP/s"};
constexpr Range kMemoryBytes{1e6, 1e15, "bytes"};
constexpr Range kDeviceBandwidth{1e6, 1e15, "bytes/s"};
constexpr Range kLinkBandwidth{1e3, 1e14, "bytes/s"};
constexpr Range kSeconds{0, 10, "seconds"};
constexpr Range kHalfFlops{0, 1e15, "flops"};
constexpr Range kEfficiency{1e-3, 1, "of the peak"};
constexpr Range kScoreBytes{1e-3, 1e3, "bytes per score element"};
constexpr int64_t kMaxRanks = int64_t(1) << 24;

/// 1e+06, 0.5, 5e-324: numbers as people write them in the file.
std::string general(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

/// Reads fields of one JSON object, failing with the field's path.
class Reader {
public:
  Reader(const llvm::json::Object &object, std::string where,
         llvm::StringRef path)
      : object(object), where(std::move(where)), path(path) {}

  llvm::Error fail(const llvm::Twine &field, const llvm::Twine &why) const {
    return llvm::createStringError(path + ": " + where + field + " " + why);
  }
  /// Reads a number in `range` into `out`.
  llvm::Error number(llvm::StringRef field, double &out, Range range) const {
    std::optional<double> value = object.getNumber(field);
    if (!value)
      return fail(field, "must be a number");
    if (!(*value >= range.min && *value <= range.max))
      return fail(field, "must be between " + general(range.min) + " and " +
                             general(range.max) + " " + range.unit + ", got " +
                             general(*value));
    out = *value;
    return llvm::Error::success();
  }
  /// The same when the field is there; `out` keeps its default otherwise.
  llvm::Error optionalNumber(llvm::StringRef field, double &out,
                             Range range) const {
    return object.get(field) ? number(field, out, range)
                             : llvm::Error::success();
  }
  /// Reads an integer in [min, max].
  llvm::Error integer(llvm::StringRef field, int64_t &out, int64_t min,
                      int64_t max) const {
    std::optional<int64_t> value = object.getInteger(field);
    if (!value || *value < min || *value > max)
      return fail(field, llvm::formatv("must be an integer between {0} and {1}",
                                       min, max));
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
  /// An object of numbers by operand precision: "f32" is needed, "tf32"
  /// and "bf16" default to it.
  llvm::Error byPrecision(Range range, double &f32, double &tf32,
                          double &bf16) const {
    if (llvm::Error error = onlyFields({"f32", "tf32", "bf16"}))
      return error;
    if (llvm::Error error = number("f32", f32, range))
      return error;
    tf32 = bf16 = f32;
    if (llvm::Error error = optionalNumber("tf32", tf32, range))
      return error;
    return optionalNumber("bf16", bf16, range);
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
  llvm::Expected<llvm::json::Value> json = tpc::parseJsonBounded(text);
  if (!json)
    return llvm::createStringError(
        path + ": not JSON: " + llvm::toString(json.takeError()));
  const llvm::json::Object *root = json->getAsObject();
  if (!root)
    return llvm::createStringError(path + ": must be a JSON object");
  Reader top(*root, "", path);
  // "calibration" holds what tpc-calibrate measured, for people: the
  // model reads only the fit.
  if (llvm::Error error = top.onlyFields(
          {"name", "source", "device", "devices", "network", "calibration"}))
    return std::move(error);
  ClusterModel cluster;
  if (llvm::Error error = top.string("name", cluster.name))
    return std::move(error);
  if (root->get("devices"))
    if (llvm::Error error =
            top.integer("devices", cluster.devices, 1, kMaxRanks))
      return std::move(error);

  auto device = top.child("device");
  if (!device)
    return device.takeError();
  if (llvm::Error error = device->onlyFields(
          {"name", "peak_flops", "memory_bytes", "memory_bandwidth",
           "gemm_efficiency", "op_overhead_seconds", "cores",
           "materialized_attention"}))
    return std::move(error);
  DeviceModel &d = cluster.device;
  if (llvm::Error error = device->string("name", d.name))
    return std::move(error);
  auto peak = device->child("peak_flops");
  if (!peak)
    return peak.takeError();
  if (llvm::Error error =
          device->number("memory_bytes", d.memoryBytes, kMemoryBytes))
    return std::move(error);
  if (llvm::Error error = device->number("memory_bandwidth", d.memoryBandwidth,
                                         kDeviceBandwidth))
    return std::move(error);
  if (llvm::Error error =
          device->optionalNumber("op_overhead_seconds", d.opOverhead, kSeconds))
    return std::move(error);
  if (device->object.get("cores"))
    if (llvm::Error error = device->integer("cores", d.cores, 1, kMaxRanks))
      return std::move(error);
  // A device without faster modes runs them at its f32 rate (a CPU rounds
  // the operands and runs SGEMM).
  if (llvm::Error error =
          peak->byPrecision(kFlops, d.peakF32, d.peakTF32, d.peakBF16))
    return std::move(error);
  if (device->object.get("gemm_efficiency")) {
    auto efficiency = device->child("gemm_efficiency");
    if (!efficiency)
      return efficiency.takeError();
    if (llvm::Error error = efficiency->onlyFields({"max", "half_flops"}))
      return std::move(error);
    if (llvm::Error error = efficiency->number("max", d.gemmMax, kEfficiency))
      return std::move(error);
    // One number for every precision, or one per precision (the others
    // f32's).
    if (efficiency->object.getObject("half_flops")) {
      auto half = efficiency->child("half_flops");
      if (!half)
        return half.takeError();
      if (llvm::Error error = half->byPrecision(
              kHalfFlops, d.halfFlopsF32, d.halfFlopsTF32, d.halfFlopsBF16))
        return std::move(error);
    } else {
      if (llvm::Error error = efficiency->optionalNumber(
              "half_flops", d.halfFlopsF32, kHalfFlops))
        return std::move(error);
      d.halfFlopsTF32 = d.halfFlopsBF16 = d.halfFlopsF32;
    }
  }

  if (device->object.get("materialized_attention")) {
    auto attention = device->child("materialized_attention");
    if (!attention)
      return attention.takeError();
    if (llvm::Error error = attention->onlyFields(
            {"forward_bytes_per_score", "backward_bytes_per_score"}))
      return std::move(error);
    if (llvm::Error error = attention->number("forward_bytes_per_score",
                                              d.scoreBytesForward, kScoreBytes))
      return std::move(error);
    if (llvm::Error error = attention->number(
            "backward_bytes_per_score", d.scoreBytesBackward, kScoreBytes))
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
    if (llvm::Error error =
            level.number("bandwidth", parsed.bandwidth, kLinkBandwidth))
      return std::move(error);
    if (llvm::Error error =
            level.optionalNumber("latency", parsed.latency, kSeconds))
      return std::move(error);
    if (object->get("links")) {
      if (llvm::Error error =
              level.integer("links", parsed.links, 1, kMaxRanks))
        return std::move(error);
      if (index == 0)
        return level.fail("links", "is for a level with one inside it (the "
                                   "innermost level's links are its ranks')");
    }
    const bool outermost = index + 1 == network->size();
    if (object->get("ranks")) {
      int64_t ranks;
      if (llvm::Error error = level.integer("ranks", ranks, 1, kMaxRanks))
        return std::move(error);
      if (ranks <= previous || ranks % previous != 0)
        return level.fail("ranks", "must be a multiple of the inner level's " +
                                       llvm::Twine(previous) +
                                       " ranks, and larger");
      parsed.ranks = ranks;
      previous = ranks;
    } else if (!outermost) {
      return level.fail("ranks", "is needed on every level but the last");
    }
    if (outermost)
      parsed.ranks = 0; // spans every rank
    cluster.levels.push_back(std::move(parsed));
  }
  return cluster;
}

llvm::Error ClusterModel::checkWorld(int64_t worldRanks,
                                     llvm::StringRef path) const {
  for (auto [index, level] : llvm::enumerate(levels))
    if (level.ranks > 0 && level.ranks < worldRanks &&
        worldRanks % level.ranks != 0)
      return llvm::createStringError(llvm::formatv(
          "{0}: network[{1}].ranks ({2} per {3}) does not divide the {4} "
          "ranks of the grid: the last {3} would be partly filled",
          path, index, level.ranks, level.name, worldRanks));
  return llvm::Error::success();
}

llvm::Expected<ClusterModel> mlir::tp::loadCluster(llvm::StringRef path) {
  // A cluster of 100,000 ranks' levels is a few kilobytes.
  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> file =
      tpc::readBoundedInput(path, 16 << 20, "cluster file");
  if (!file)
    return file.takeError();
  return parseCluster((*file)->getBuffer(), path);
}
