#include "tpc/runtime/Calibration.h"

#include "tpc/runtime/CollectiveChannel.h"
#include "tpc/runtime/DType.h"
#include "tpc/runtime/Plan.h"
#include "tpc/runtime/cpu/Kernels.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <sched.h>
#include <unistd.h>

namespace tpc::runtime {

namespace {

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

/// Seconds of one `run`, waited for on `backend`.
template <typename F> double timedRun(Backend &backend, F &run) {
  const double start = now();
  run();
  backend.synchronize();
  return now() - start;
}

/// Runs `run` once to warm up, then until `budget` seconds have passed
/// (at least 3 times); the median run.
template <typename F>
double timeRuns(Backend &backend, double budget, F &&run) {
  timedRun(backend, run);
  std::vector<double> runs;
  double total = 0;
  while (runs.size() < 3 || (total < budget && runs.size() < 10000)) {
    runs.push_back(timedRun(backend, run));
    total += runs.back();
  }
  return median(std::move(runs));
}

/// Waits for every rank without spinning: a rank that waits here while
/// another times kernels on the cores they share must not take them.
void sleepingBarrier(const Comm &world) {
  if (!world.usesMpi())
    return;
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  for (int done = 0;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done)
      return;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

/// The largest of every rank's `value`.
double worldMax(const Comm &world, double value) {
  if (world.usesMpi())
    MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return value;
}

/// timeRuns for what ranks run together (an exchange), collective over
/// the world: after a warm-up, the ranks that `takePart` run as many times
/// as the slowest one's first run says fit in `budget` (3 to 1000); each
/// rank's median run (0 on the others).
template <typename F>
double timeTogether(Backend &backend, const Comm &world, double budget,
                    bool takePart, F &&run) {
  if (!takePart) {
    worldMax(world, 0);
    return 0;
  }
  timedRun(backend, run);
  const double first = worldMax(world, timedRun(backend, run));
  const int count = int(std::clamp(budget / std::max(first, 1e-9), 3.0, 1e3));
  std::vector<double> runs;
  for (int i = 0; i < count; ++i)
    runs.push_back(timedRun(backend, run));
  return median(std::move(runs));
}

/// The cache size kernels must exceed to stream from memory: the host
/// CPU's last level, at least 64 MiB (a GPU's L2 is below that).
double lastLevelCacheBytes() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return std::max(double(l3 > 0 ? l3 : 0), double(64 << 20));
}

/// Fails unless world rank 0 may run on every core: mpirun binds a rank to
/// one core by default, and the CPU is timed as a whole.
void checkWholeCpu(const Backend &backend, const Comm &world) {
  if (backend.name() != "cpu" || world.rank() != 0)
    return;
  cpu_set_t set;
  CPU_ZERO(&set);
  const unsigned cores = std::thread::hardware_concurrency();
  if (sched_getaffinity(0, sizeof(set), &set) == 0 &&
      unsigned(CPU_COUNT(&set)) < cores)
    throw std::runtime_error(
        "rank 0 may run on " + std::to_string(CPU_COUNT(&set)) + " of the " +
        std::to_string(cores) +
        " cores and the CPU is timed as a whole: run under mpirun "
        "--bind-to none");
}

Placement placementOf(const Comm &world) {
  MPI_Comm machine;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world.rank(),
                      MPI_INFO_NULL, &machine);
  int local = 0, perMachine = 1;
  MPI_Comm_rank(machine, &local);
  MPI_Comm_size(machine, &perMachine);
  MPI_Comm_free(&machine);
  // The simulator puts rank r on machine r / perMachine.
  const bool inOrder = world.allEqual(uint64_t(perMachine)) &&
                       world.size() % perMachine == 0 &&
                       world.rank() % perMachine == local;
  if (!world.allSucceeded(inOrder))
    throw std::runtime_error(
        "the ranks must fill their machines in order, as many on each "
        "(mpirun --map-by slot), as the simulator places them");
  return {world.size() / perMachine, perMachine};
}

/// A standalone step of `kind` (the dispatch binds tensors directly, so
/// its operand and result ids are placeholders).
std::vector<uint8_t> buildStep(plan::OpKind kind, size_t operands,
                               size_t results, plan::Precision precision) {
  flatbuffers::FlatBufferBuilder b;
  auto operandIds = b.CreateVector(std::vector<uint32_t>(operands));
  auto resultIds = b.CreateVector(std::vector<uint32_t>(results));
  plan::StepBuilder step(b);
  step.add_kind(kind);
  step.add_operands(operandIds);
  step.add_results(resultIds);
  step.add_precision(precision);
  b.Finish(step.Finish());
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

/// A tensor in the backend's memory, filled with small random values.
struct DeviceTensor {
  std::vector<int64_t> shape;
  int64_t elements = 1;
  plan::DType dtype = plan::DType::F32;
  std::unique_ptr<Buffer> buffer;

  DeviceTensor(Backend &backend, std::vector<int64_t> dims, plan::DType type,
               std::mt19937 &random)
      : shape(std::move(dims)), dtype(type) {
    for (int64_t d : shape)
      elements *= d;
    std::uniform_real_distribution<float> values(-1.0f, 1.0f);
    std::vector<float> host(static_cast<size_t>(elements));
    for (float &x : host)
      x = values(random);
    buffer = backend.allocate(uint64_t(elements) * dtypeSize(dtype));
    if (dtype == plan::DType::BF16) {
      std::vector<uint16_t> narrow(host.size());
      narrowToBf16(host.data(), narrow.data(), elements);
      backend.upload(buffer->data(), narrow.data(), narrow.size() * 2);
    } else {
      backend.upload(buffer->data(), host.data(), host.size() * 4);
    }
  }
  TensorBinding binding() const {
    return {buffer->data(), shape, elements, dtype};
  }
  double bytes() const { return double(elements) * dtypeSize(dtype); }
};

/// The median time of one step of `kind` on `operands` into `results`.
double timeStep(Backend &backend, plan::OpKind kind,
                const std::vector<const DeviceTensor *> &operands,
                const std::vector<const DeviceTensor *> &results,
                plan::Precision precision, double budget) {
  const std::vector<uint8_t> bytes =
      buildStep(kind, operands.size(), results.size(), precision);
  const plan::Step &step = *flatbuffers::GetRoot<plan::Step>(bytes.data());
  std::vector<TensorBinding> in, out;
  for (const DeviceTensor *t : operands)
    in.push_back(t->binding());
  for (const DeviceTensor *t : results)
    out.push_back(t->binding());
  const Dispatch dispatch{step, in, out, nullptr};
  return timeRuns(backend, budget, [&] { backend.enqueue(dispatch); });
}

struct ProductShape {
  int64_t m, n, k;
};

std::vector<ProductSample> measureProducts(Backend &backend,
                                           const CalibrationOptions &options) {
  std::vector<ProductShape> shapes;
  for (int64_t size : options.quick
                          ? std::vector<int64_t>{32, 64, 128, 256}
                          : std::vector<int64_t>{64, 128, 256, 512, 1024, 2048})
    shapes.push_back({size, size, size});
  if (!options.quick) {
    // A transformer layer's products (hidden 768, 2048 tokens; one head's
    // scores), and a narrow one as tensor parallelism makes them.
    shapes.push_back({2048, 2304, 768});
    shapes.push_back({2048, 768, 3072});
    shapes.push_back({2048, 3072, 768});
    shapes.push_back({1024, 1024, 64});
    shapes.push_back({2048, 192, 768});
  }
  // Each precision as the backend runs it (a CPU rounds the operands and
  // runs SGEMM; a GPU has modes of its own).
  const std::vector<std::pair<std::string, plan::Precision>> precisions = {
      {"f32", plan::Precision::F32},
      {"tf32", plan::Precision::TF32},
      {"bf16", plan::Precision::BF16}};
  std::mt19937 random(1);
  std::vector<ProductSample> samples;
  for (const auto &[name, precision] : precisions) {
    const plan::DType dtype =
        name == "bf16" ? plan::DType::BF16 : plan::DType::F32;
    for (const ProductShape &s : shapes) {
      DeviceTensor lhs(backend, {s.m, s.k}, dtype, random),
          rhs(backend, {s.k, s.n}, dtype, random),
          out(backend, {s.m, s.n}, dtype, random);
      samples.push_back({name, s.m, s.n, s.k,
                         timeStep(backend, plan::OpKind::Matmul, {&lhs, &rhs},
                                  {&out}, precision, options.secondsPerPoint)});
    }
  }
  return samples;
}

std::vector<StreamSample> measureStreams(Backend &backend,
                                         const CalibrationOptions &options) {
  // From a few elements (the fixed cost of a kernel) to well past the
  // caches (the memory's rate); a softmax's rows are a sequence long.
  std::vector<int64_t> sizes = {16,      1 << 12, 1 << 16,
                                1 << 20, 1 << 22, 1 << 24};
  if (options.quick)
    sizes = {16, 1 << 10, 1 << 14, 1 << 18};
  std::mt19937 random(2);
  std::vector<StreamSample> samples;
  for (int64_t n : sizes) {
    const int64_t width = std::min<int64_t>(n, 1024);
    DeviceTensor a(backend, {n / width, width}, plan::DType::F32, random),
        b(backend, {n / width, width}, plan::DType::F32, random),
        out(backend, {n / width, width}, plan::DType::F32, random);
    const double budget = options.secondsPerPoint;
    samples.push_back({"add", n, a.bytes() + b.bytes() + out.bytes(),
                       timeStep(backend, plan::OpKind::Add, {&a, &b}, {&out},
                                plan::Precision::F32, budget)});
    samples.push_back({"gelu", n, a.bytes() + out.bytes(),
                       timeStep(backend, plan::OpKind::Gelu, {&a}, {&out},
                                plan::Precision::F32, budget)});
    samples.push_back({"softmax", n, a.bytes() + out.bytes(),
                       timeStep(backend, plan::OpKind::Softmax, {&a}, {&out},
                                plan::Precision::F32, budget)});
  }
  return samples;
}

/// Buffers of the exchanges: in the backend's memory when it has a channel
/// of its own, else in host memory (MPI).
class ExchangeBuffer {
public:
  ExchangeBuffer(Backend &backend, bool onDevice, size_t bytes) {
    if (onDevice) {
      device = backend.allocate(bytes);
      std::vector<std::byte> zeros(bytes);
      backend.upload(device->data(), zeros.data(), bytes);
    } else {
      host.assign(bytes / sizeof(float) + 1, 0.0f);
    }
  }
  void *data() {
    return device ? static_cast<void *>(device->data())
                  : static_cast<void *>(host.data());
  }

private:
  std::unique_ptr<Buffer> device;
  std::vector<float> host;
};

/// Every group of grid axis `axis` all-reduces, then its first two ranks
/// pass a buffer back and forth; the times are the slowest rank's.
std::vector<ExchangeSample> measureLevel(Backend &backend, GridComm &grid,
                                         CollectiveChannel &channel,
                                         bool onDevice, int axis,
                                         const std::string &level,
                                         const CalibrationOptions &options) {
  const Comm &world = Comm::world();
  const int64_t n = grid.shape()[size_t(axis)];
  std::vector<int64_t> sizes;
  for (int64_t bytes = 4; bytes <= (options.quick ? (1 << 20) : (64 << 20));
       bytes *= 4)
    sizes.push_back(bytes);
  std::vector<ExchangeSample> samples;
  for (int64_t bytes : sizes) {
    ExchangeBuffer buffer(backend, onDevice, size_t(bytes));
    const size_t count = size_t(bytes) / sizeof(float);
    sleepingBarrier(world);
    const double seconds =
        timeTogether(backend, world, options.secondsPerPoint, true, [&] {
          channel.allReduceSum({axis}, WireType::F32, buffer.data(), count);
        });
    samples.push_back({level, "all_reduce", n, double(bytes),
                       2.0 * double(n - 1),
                       2.0 * double(n - 1) / double(n) * double(bytes),
                       worldMax(world, seconds)});
  }
  // Pipeline transfers go over MPI on the host (a GPU stages them).
  // The pair: coordinates 0 and 1 on `axis`, 0 on the others.
  std::vector<int64_t> coords = grid.coords();
  const int64_t mine = coords[size_t(axis)];
  coords[size_t(axis)] = 0;
  const bool pair = mine < 2 && std::all_of(coords.begin(), coords.end(),
                                            [](int64_t c) { return c == 0; });
  for (int64_t bytes : sizes) {
    std::vector<std::byte> out(static_cast<size_t>(bytes)),
        in(static_cast<size_t>(bytes));
    sleepingBarrier(world);
    // A round trip is two transfers.
    const double seconds =
        timeTogether(backend, world, options.secondsPerPoint, pair,
                     [&] {
                       if (mine == 0) {
                         grid.startSend(axis, 1, 1, out);
                         grid.finishTransfer(out.data());
                         grid.startReceive(axis, 1, 2, in);
                         grid.finishTransfer(in.data());
                       } else {
                         grid.startReceive(axis, 0, 1, in);
                         grid.finishTransfer(in.data());
                         grid.startSend(axis, 0, 2, out);
                         grid.finishTransfer(out.data());
                       }
                     }) /
        2;
    samples.push_back({level, "send", n, double(bytes), 1.0, double(bytes),
                       worldMax(world, seconds)});
  }
  return samples;
}

std::string general(double value) {
  std::ostringstream text;
  text.precision(3);
  text << value;
  return text.str();
}

/// Rounds to 4 significant digits: the file is for people too.
double rounded(double value) {
  if (value == 0 || !std::isfinite(value))
    return value;
  const double scale = std::pow(10.0, 3 - std::floor(std::log10(value)));
  return std::round(value * scale) / scale;
}

} // namespace

ProductFit fitProducts(std::span<const ProductSample> samples,
                       double overhead) {
  if (samples.empty())
    throw std::runtime_error("calibration: no products to fit");
  std::vector<std::string> precisions;
  for (const ProductSample &s : samples)
    if (std::find(precisions.begin(), precisions.end(), s.precision) ==
        precisions.end())
      precisions.push_back(s.precision);
  ProductFit fit;
  for (const std::string &p : precisions) {
    // For a given halfFlops, 1/peak is a one-variable least squares of the
    // relative errors, each weighed by the product's time (a step's error
    // is its large products'; small ones, slower than the model, would pull
    // the asymptote down); halfFlops itself is searched on a logarithmic
    // grid, then refined around the best point.
    auto errorFor = [&](double half, double &peak) {
      double sxy = 0, sxx = 0;
      for (const ProductSample &s : samples)
        if (s.precision == p) {
          const double x = (s.flops() + half) / s.seconds;
          const double y = (s.seconds - overhead) / s.seconds;
          sxy += s.seconds * x * y;
          sxx += s.seconds * x * x;
        }
      peak = 1.0 / std::max(sxy / sxx, 1e-30);
      double error = 0;
      for (const ProductSample &s : samples)
        if (s.precision == p) {
          const double model = overhead + (s.flops() + half) / peak;
          error += (model - s.seconds) * (model - s.seconds) / s.seconds;
        }
      return error;
    };
    double bestHalf = 0, bestPeak = 0;
    double bestError = errorFor(0, bestPeak);
    auto consider = [&](double half) {
      double peak;
      if (double error = errorFor(half, peak); error < bestError) {
        bestError = error;
        bestHalf = half;
        bestPeak = peak;
      }
    };
    for (double log = 2; log <= 14; log += 0.05)
      consider(std::pow(10.0, log));
    const double coarse = bestHalf;
    for (double factor = 0.9; factor <= 1.1; factor += 0.002)
      consider(coarse * factor);
    fit.peak[p] = bestPeak;
    fit.halfFlops[p] = bestHalf;
  }
  return fit;
}

StreamFit fitStreams(std::span<const StreamSample> samples, double cacheBytes) {
  if (samples.empty())
    throw std::runtime_error("calibration: no kernels to fit");
  // The fixed cost: the smallest kernels, which stream next to nothing.
  const double smallest = std::min_element(samples.begin(), samples.end(),
                                           [](const auto &a, const auto &b) {
                                             return a.bytes < b.bytes;
                                           })
                              ->bytes;
  const double largest = std::max_element(samples.begin(), samples.end(),
                                          [](const auto &a, const auto &b) {
                                            return a.bytes < b.bytes;
                                          })
                             ->bytes;
  std::vector<double> fixed;
  for (const StreamSample &s : samples)
    if (s.bytes == smallest)
      fixed.push_back(s.seconds);
  StreamFit fit{median(fixed), 0};
  // The rate: kernels too large for the caches, as a training step's
  // activations are (at least the largest measured).
  const double streaming = std::min(2 * cacheBytes, largest);
  double sxy = 0, sxx = 0;
  for (const StreamSample &s : samples)
    if (s.bytes >= streaming && s.seconds > fit.overhead) {
      // Minimise sum ((overhead + bytes / bandwidth - t) / t)^2.
      const double x = s.bytes / s.seconds;
      const double y = (s.seconds - fit.overhead) / s.seconds;
      sxy += x * y;
      sxx += x * x;
    }
  if (!(sxy > 0))
    throw std::runtime_error("calibration: kernel times do not grow with "
                             "their bytes; no bandwidth to fit");
  fit.bandwidth = sxx / sxy;
  return fit;
}

ExchangeFit fitExchanges(std::span<const ExchangeSample> samples) {
  // Minimise sum ((m latency + b / bandwidth - t) / t)^2 over both
  // unknowns: the normal equations of (m / t, b / t) against 1.
  double smm = 0, smb = 0, sbb = 0, sm = 0, sb = 0;
  for (const ExchangeSample &s : samples) {
    const double m = s.messages / s.seconds, b = s.bytes / s.seconds;
    smm += m * m;
    smb += m * b;
    sbb += b * b;
    sm += m;
    sb += b;
  }
  const double det = smm * sbb - smb * smb;
  double latency = det > 0 ? (sbb * sm - smb * sb) / det : -1;
  double inverse = det > 0 ? (smm * sb - smb * sm) / det : 0;
  if (latency < 0) { // no negative latency: the bandwidth alone
    latency = 0;
    inverse = sb / sbb;
  }
  if (!(inverse > 0))
    throw std::runtime_error("calibration: exchange times do not grow with "
                             "their bytes; no bandwidth to fit");
  return {latency, 1.0 / inverse};
}

MachineCalibration calibrateMachine(Backend &backend, Comm &world,
                                    const CalibrationOptions &options) {
  if (world.size() < 2)
    throw std::runtime_error(
        "calibration needs at least 2 ranks (mpirun -np N, N >= 2): the "
        "network is measured between them");
  MachineCalibration c;
  c.options = options;
  c.backend = std::string(backend.name());
  c.kernels = backend.kernelLibraries();
  c.device = backend.describeDevice();
  c.threads = cpu::numThreads();
  c.placement = placementOf(world);
  runTogether(world, [&] { checkWholeCpu(backend, world); });

  // The device: world rank 0 alone, the others asleep.
  std::string failure;
  if (world.rank() == 0) {
    try {
      c.streams = measureStreams(backend, options);
      c.streamFit = fitStreams(c.streams, lastLevelCacheBytes());
      c.products = measureProducts(backend, options);
      c.productFit = fitProducts(c.products, c.streamFit.overhead);
    } catch (const std::exception &e) {
      failure = e.what();
    }
  }
  sleepingBarrier(world);
  if (!world.allSucceeded(failure.empty())) {
    if (world.rank() == 0)
      throw std::runtime_error(failure);
    throw AnotherRankFailed();
  }

  // The network: innermost level first. Ranks are placed in order, so the
  // grid [machines, per machine] has a machine's ranks along axis 1.
  GridComm grid({c.placement.machines, c.placement.perMachine}, world);
  backend.connect(grid);
  std::unique_ptr<MpiChannel> mpi;
  CollectiveChannel *channel = backend.channel();
  if (!channel) {
    mpi = std::make_unique<MpiChannel>(grid);
    channel = mpi.get();
  }
  c.transport = std::string(channel->transport());
  const bool onDevice = backend.channel() != nullptr;
  const bool severalMachines = c.placement.machines > 1;
  if (c.placement.perMachine > 1) {
    MachineCalibration::Level level{
        "machine", severalMachines ? c.placement.perMachine : 0, {}};
    std::vector<ExchangeSample> samples =
        measureLevel(backend, grid, *channel, onDevice, 1, level.name, options);
    level.fit = fitExchanges(samples);
    c.exchanges.insert(c.exchanges.end(), samples.begin(), samples.end());
    c.levels.push_back(level);
  }
  if (severalMachines) {
    MachineCalibration::Level level{"network", 0, {}};
    std::vector<ExchangeSample> samples =
        measureLevel(backend, grid, *channel, onDevice, 0, level.name, options);
    level.fit = fitExchanges(samples);
    c.exchanges.insert(c.exchanges.end(), samples.begin(), samples.end());
    c.levels.push_back(level);
  }
  return c;
}

nlohmann::ordered_json
MachineCalibration::clusterJson(const std::string &date) const {
  using json = nlohmann::ordered_json;
  const double overhead = streamFit.overhead;
  double worstProduct = 0;
  json productRecord = json::array();
  for (const ProductSample &s : this->products) {
    const double predicted = productFit.predict(s, overhead);
    worstProduct =
        std::max(worstProduct, std::abs(predicted - s.seconds) / s.seconds);
    productRecord.push_back({{"precision", s.precision},
                             {"m", s.m},
                             {"n", s.n},
                             {"k", s.k},
                             {"seconds", rounded(s.seconds)},
                             {"model_seconds", rounded(predicted)}});
  }
  json streams = json::array();
  for (const StreamSample &s : this->streams)
    streams.push_back(
        {{"kernel", s.kernel},
         {"elements", s.elements},
         {"bytes", s.bytes},
         {"seconds", rounded(s.seconds)},
         {"model_seconds", rounded(overhead + s.bytes / streamFit.bandwidth)}});
  json exchanges = json::array();
  for (const ExchangeSample &s : this->exchanges) {
    const auto level =
        std::find_if(levels.begin(), levels.end(),
                     [&](const Level &l) { return l.name == s.level; });
    exchanges.push_back(
        {{"level", s.level},
         {"kind", s.kind},
         {"ranks", s.ranks},
         {"buffer_bytes", s.buffer},
         {"seconds", rounded(s.seconds)},
         {"model_seconds", rounded(s.messages * level->fit.latency +
                                   s.bytes / level->fit.bandwidth)}});
  }

  json peak = json::object(), half = json::object();
  for (const auto &[precision, flops] : productFit.peak)
    peak[precision] = rounded(flops);
  for (const auto &[precision, flops] : productFit.halfFlops)
    half[precision] = rounded(flops);
  json network = json::array();
  for (const Level &level : levels) {
    json entry = {{"level", level.name}};
    if (level.ranks > 0)
      entry["ranks"] = level.ranks;
    entry["bandwidth"] = rounded(level.fit.bandwidth);
    entry["latency"] = rounded(level.fit.latency);
    network.push_back(std::move(entry));
  }
  const int64_t ranks = placement.machines * placement.perMachine;
  std::ostringstream source;
  source << "measured by tpc-calibrate on " << date << ": " << device.name
         << ", " << backend << " backend (" << kernels << "), " << threads
         << " kernel threads; " << ranks << " ranks on " << placement.machines
         << " machine(s), exchanges over " << transport
         << ". Products fitted to overhead + (flops + half_flops) / peak "
            "(worst error "
         << general(100 * worstProduct) << "%)"
         << (options.quick ? "; quick: small problems only" : "");

  json cluster;
  cluster["name"] = options.name;
  cluster["source"] = source.str();
  // A CPU is one device that a machine's ranks share; GPUs are one per
  // rank while a machine has enough of them.
  if (device.perMachine < placement.perMachine)
    cluster["devices"] = placement.machines * int64_t(device.perMachine);
  cluster["device"] = {
      {"name", device.name},
      {"peak_flops", std::move(peak)},
      {"memory_bytes", double(device.memoryBytes)},
      {"memory_bandwidth", rounded(streamFit.bandwidth)},
      {"gemm_efficiency", {{"max", 1.0}, {"half_flops", std::move(half)}}},
      {"op_overhead_seconds", rounded(overhead)}};
  if (device.cores > 0)
    cluster["device"]["cores"] = device.cores;
  cluster["network"] = std::move(network);
  cluster["calibration"] = {{"threads", threads},
                            {"products", std::move(productRecord)},
                            {"streams", std::move(streams)},
                            {"exchanges", std::move(exchanges)}};
  return cluster;
}

} // namespace tpc::runtime
