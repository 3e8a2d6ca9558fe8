// The MPI communication backend: the world, grid sub-communicators and f32
// and bf16 collectives with ring-rule accounting (Comm.h).
#include "tpc/runtime/Comm.h"

#include "tpc/runtime/DType.h"

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string_view>

namespace tpc::runtime {

namespace {

void check(int code, const char *call) {
  if (code == MPI_SUCCESS)
    return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    length = 0;
  throw std::runtime_error(std::string(call) +
                           " failed: " + std::string(text, size_t(length)));
}

bool mpiActive() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised && !finalised;
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

int mpiCount(size_t count, const char *what) {
  if (count > size_t(INT_MAX))
    throw std::invalid_argument(std::string(what) + ": " +
                                std::to_string(count) +
                                " elements exceed one MPI call's count");
  return static_cast<int>(count);
}

} // namespace

Comm::Comm() {
  if (!std::getenv("OMPI_COMM_WORLD_SIZE"))
    return; // not launched by mpirun: one rank, no MPI
  int initialised = 0;
  check(MPI_Initialized(&initialised), "MPI_Initialized");
  if (!initialised) {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided),
          "MPI_Init_thread");
    initialisedHere = true;
  }
  mpi = true;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
}

Comm::~Comm() {
  if (initialisedHere && mpiActive())
    MPI_Finalize();
}

Comm &Comm::world() {
  static Comm instance;
  return instance;
}

bool Comm::allSucceeded(bool ok) const {
  if (!mpi || !mpiActive())
    return ok;
  int mine = ok ? 1 : 0, all = 0;
  check(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD),
        "MPI_Allreduce");
  return all != 0;
}

void Comm::broadcastBytes(std::span<std::byte> data, int root) const {
  if (!mpi || !mpiActive())
    return;
  check(
      MPI_Bcast(data.data(), int(data.size()), MPI_BYTE, root, MPI_COMM_WORLD),
      "MPI_Bcast");
}

bool Comm::allEqual(uint64_t value) const {
  if (!mpi || !mpiActive())
    return true;
  uint64_t low = 0, high = 0;
  check(MPI_Allreduce(&value, &low, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD),
        "MPI_Allreduce");
  check(MPI_Allreduce(&value, &high, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD),
        "MPI_Allreduce");
  return low == high;
}

int machineLocalRank() {
  const char *value = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  return value ? std::atoi(value) : 0;
}

void abortAll(int code) {
  std::cout.flush();
  std::cerr.flush();
  if (mpiActive())
    MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

std::vector<int64_t> GridComm::coordsOf(const std::vector<int64_t> &shape,
                                        int64_t rank) {
  std::vector<int64_t> coords(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    coords[i] = rank % shape[i];
    rank /= shape[i];
  }
  return coords;
}

int64_t GridComm::rankOf(const std::vector<int64_t> &shape,
                         const std::vector<int64_t> &coords) {
  int64_t rank = 0;
  for (size_t i = 0; i < shape.size(); ++i)
    rank = rank * shape[i] + coords[i];
  return rank;
}

GridComm::GridComm(std::vector<int64_t> shape, Comm &world)
    : worldComm(world), shape_(std::move(shape)) {
  int64_t ranks = 1;
  for (int64_t size : shape_) {
    if (size < 1 || size > INT_MAX)
      throw std::runtime_error("the grid " + shapeString(shape_) +
                               " has an axis of size " + std::to_string(size));
    ranks *= size;
    if (ranks > INT_MAX)
      throw std::runtime_error("the grid " + shapeString(shape_) +
                               " has too many ranks");
  }
  if (ranks != world.size())
    throw std::runtime_error("the plan's grid " + shapeString(shape_) +
                             " has " + std::to_string(ranks) + " ranks, but " +
                             std::to_string(world.size()) +
                             (world.size() == 1 ? " is" : " are") + " running");
  rank_ = world.rank();
  size_ = world.size();
  coords_ = coordsOf(shape_, rank_);
}

GridComm::~GridComm() {
  const bool active = worldComm.usesMpi() && mpiActive();
  for (auto &[axes, group] : groups)
    if (active && group->comm != MPI_COMM_NULL)
      MPI_Comm_free(&group->comm);
}

const CommGroup &GridComm::group(const std::vector<int> &axes) {
  auto found = groups.find(axes);
  if (found != groups.end())
    return *found->second;

  std::vector<bool> inSet(shape_.size(), false);
  for (int axis : axes) {
    if (axis < 0 || size_t(axis) >= shape_.size())
      throw std::invalid_argument("grid axis " + std::to_string(axis) +
                                  " is not an axis of the grid " +
                                  shapeString(shape_));
    if (inSet[size_t(axis)])
      throw std::invalid_argument("grid axis " + std::to_string(axis) +
                                  " appears twice in an axis set");
    inSet[size_t(axis)] = true;
  }

  auto group = std::make_unique<CommGroup>();
  group->axes = axes;
  // color: the coordinates outside the set, row-major in axis order; key:
  // the coordinates inside, row-major in the order of `axes`.
  int64_t color = 0, key = 0, size = 1;
  for (size_t i = 0; i < shape_.size(); ++i)
    if (!inSet[i])
      color = color * shape_[i] + coords_[i];
  for (int axis : axes) {
    key = key * shape_[size_t(axis)] + coords_[size_t(axis)];
    size *= shape_[size_t(axis)];
  }
  group->rank = static_cast<int>(key);
  group->size = static_cast<int>(size);
  for (int64_t member = 0; member < size; ++member) {
    std::vector<int64_t> coords = coords_;
    int64_t rest = member;
    for (size_t i = axes.size(); i-- > 0;) {
      const size_t axis = size_t(axes[i]);
      coords[axis] = rest % shape_[axis];
      rest /= shape_[axis];
    }
    group->worldRanks.push_back(static_cast<int>(rankOf(shape_, coords)));
  }

  if (worldComm.usesMpi()) {
    check(MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(color),
                         static_cast<int>(key), &group->comm),
          "MPI_Comm_split");
    int rank = 0, commSize = 0;
    check(MPI_Comm_rank(group->comm, &rank), "MPI_Comm_rank");
    check(MPI_Comm_size(group->comm, &commSize), "MPI_Comm_size");
    if (rank != group->rank || commSize != group->size)
      throw std::logic_error("MPI_Comm_split gave a group other than the "
                             "grid's");
  }
  return *groups.emplace(axes, std::move(group)).first->second;
}

namespace {
/// Adds the time until it is destroyed to a total: the time a rank spends
/// in a blocking collective, waiting for the others or moving data.
class WaitClock {
public:
  explicit WaitClock(double &total)
      : total(total), start(std::chrono::steady_clock::now()) {}
  ~WaitClock() {
    total +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
  }

private:
  double &total;
  std::chrono::steady_clock::time_point start;
};
} // namespace

void GridComm::account(const char *kind, int n, size_t bytes) {
  // The ring rule of the header: all-reduce 2(n-1)/n, a ring shift its
  // whole block (none on one rank), a pipeline send its buffer, the others
  // (n-1)/n.
  const std::string_view name = kind;
  const double factor = name == "all_reduce"   ? 2.0 * (n - 1) / n
                        : name == "ring_shift" ? (n == 1 ? 0.0 : 1.0)
                        : name == "send"       ? 1.0
                                               : double(n - 1) / n;
  CommStats &s = stats_[kind];
  s.calls += 1;
  s.bytes += factor * double(bytes);
}

void GridComm::countCollective(const char *kind, const std::vector<int> &axes,
                               size_t elements, size_t elementSize) {
  account(kind, group(axes).size, elements * elementSize);
}

void GridComm::addStats(const std::map<std::string, CommStats> &traffic) {
  for (const auto &[kind, s] : traffic) {
    stats_[kind].calls += s.calls;
    stats_[kind].bytes += s.bytes;
  }
}

namespace {
/// The MPI datatype moving elements of T: f32, or bf16 as its 16 bits.
template <typename T> MPI_Datatype mpiType();
template <> MPI_Datatype mpiType<float>() { return MPI_FLOAT; }
template <> MPI_Datatype mpiType<uint16_t>() { return MPI_UINT16_T; }

template <typename T>
void copyElements(std::span<const T> in, std::span<T> out) {
  if (!in.empty() && in.data() != out.data())
    std::memmove(out.data(), in.data(), in.size() * sizeof(T));
}

/// block[i] = bf16(sum over j of blocks[j][i]) for `n` blocks of `count`
/// bf16 elements: summed in f32 in block order, rounded once.
void sumBf16Blocks(const uint16_t *blocks, int n, size_t count,
                   uint16_t *block) {
  for (size_t i = 0; i < count; ++i) {
    float sum = 0.0f;
    for (int j = 0; j < n; ++j)
      sum += bf16ToF32(blocks[size_t(j) * count + i]);
    block[i] = f32ToBF16(sum);
  }
}
} // namespace

void GridComm::allReduceSum(const std::vector<int> &axes,
                            std::span<float> data) {
  const CommGroup &g = group(axes);
  const int n = g.size;
  const int count = mpiCount(data.size(), "allReduceSum");
  account("all_reduce", n, data.size_bytes());
  if (n == 1 || count == 0)
    return;
  const WaitClock clock(waitSeconds_);
  check(MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM,
                      g.comm),
        "MPI_Allreduce");
}

void GridComm::allReduceSum(const std::vector<int> &axes,
                            std::span<uint16_t> data) {
  const CommGroup &g = group(axes);
  const int n = g.size;
  account("all_reduce", n, data.size_bytes());
  if (n == 1 || data.empty())
    return;
  // bf16 on the wire, one rounding: each rank sums one chunk of every
  // rank's buffer (an all-to-all), then every chunk is gathered (the ring
  // rule's 2(n-1)/n of the buffer).
  const size_t chunk = (data.size() + size_t(n) - 1) / size_t(n);
  const int count = mpiCount(chunk, "allReduceSum");
  std::vector<uint16_t> blocks(chunk * size_t(n)), received(blocks.size()),
      mine(chunk);
  std::memcpy(blocks.data(), data.data(), data.size_bytes());
  const WaitClock clock(waitSeconds_);
  check(MPI_Alltoall(blocks.data(), count, MPI_UINT16_T, received.data(), count,
                     MPI_UINT16_T, g.comm),
        "MPI_Alltoall");
  sumBf16Blocks(received.data(), n, chunk, mine.data());
  check(MPI_Allgather(mine.data(), count, MPI_UINT16_T, blocks.data(), count,
                      MPI_UINT16_T, g.comm),
        "MPI_Allgather");
  std::memcpy(data.data(), blocks.data(), data.size_bytes());
}

void GridComm::allGather(const std::vector<int> &axes,
                         std::span<const float> in, std::span<float> out) {
  gatherOver(group(axes), in, out, "allGather", /*counted=*/true);
}

void GridComm::allGather(const std::vector<int> &axes,
                         std::span<const uint16_t> in,
                         std::span<uint16_t> out) {
  gatherOver(group(axes), in, out, "allGather", /*counted=*/true);
}

void GridComm::gatherState(std::span<const float> in, std::span<float> out) {
  std::vector<int> axes;
  for (size_t axis = 0; axis < shape_.size(); ++axis)
    axes.push_back(int(axis));
  gatherOver(group(axes), in, out, "gatherState", /*counted=*/false);
}

template <typename T>
void GridComm::gatherOver(const CommGroup &g, std::span<const T> in,
                          std::span<T> out, const char *what, bool counted) {
  const int n = g.size;
  if (out.size() != size_t(n) * in.size())
    throw std::invalid_argument(std::string(what) + ": the output has " +
                                std::to_string(out.size()) +
                                " elements, expected " + std::to_string(n) +
                                " x " + std::to_string(in.size()));
  const int count = mpiCount(in.size(), what);
  if (counted)
    account("all_gather", n, out.size_bytes());
  if (n == 1)
    return copyElements(in, out);
  if (count == 0)
    return;
  const bool inPlace = in.data() == out.data() + size_t(g.rank) * in.size();
  const WaitClock clock(waitSeconds_);
  check(MPI_Allgather(inPlace ? MPI_IN_PLACE : in.data(), count, mpiType<T>(),
                      out.data(), count, mpiType<T>(), g.comm),
        "MPI_Allgather");
}

namespace {
void checkScatterSizes(size_t in, size_t out, int n) {
  if (in != size_t(n) * out)
    throw std::invalid_argument("reduceScatterSum: the input has " +
                                std::to_string(in) + " elements, expected " +
                                std::to_string(n) + " x " +
                                std::to_string(out));
}
} // namespace

void GridComm::reduceScatterSum(const std::vector<int> &axes,
                                std::span<const float> in,
                                std::span<float> out) {
  const CommGroup &g = group(axes);
  const int n = g.size;
  checkScatterSizes(in.size(), out.size(), n);
  const int count = mpiCount(out.size(), "reduceScatterSum");
  account("reduce_scatter", n, in.size_bytes());
  if (n == 1)
    return copyElements(in, out);
  if (count == 0)
    return;
  const WaitClock clock(waitSeconds_);
  check(MPI_Reduce_scatter_block(in.data(), out.data(), count, MPI_FLOAT,
                                 MPI_SUM, g.comm),
        "MPI_Reduce_scatter_block");
}

void GridComm::reduceScatterSum(const std::vector<int> &axes,
                                std::span<const uint16_t> in,
                                std::span<uint16_t> out) {
  const CommGroup &g = group(axes);
  const int n = g.size;
  checkScatterSizes(in.size(), out.size(), n);
  const int count = mpiCount(out.size(), "reduceScatterSum");
  account("reduce_scatter", n, in.size_bytes());
  if (n == 1)
    return copyElements(in, out);
  if (count == 0)
    return;
  // bf16 on the wire: every rank's block r comes to rank r (an all-to-all)
  // and is summed there in f32, in rank order, and rounded once.
  std::vector<uint16_t> received(in.size());
  const WaitClock clock(waitSeconds_);
  check(MPI_Alltoall(in.data(), count, MPI_UINT16_T, received.data(), count,
                     MPI_UINT16_T, g.comm),
        "MPI_Alltoall");
  sumBf16Blocks(received.data(), n, out.size(), out.data());
}

template <typename T>
void GridComm::allToAllOf(const std::vector<int> &axes, std::span<const T> in,
                          std::span<T> out) {
  const CommGroup &g = group(axes);
  const int n = g.size;
  if (in.size() != out.size() || in.size() % size_t(n) != 0)
    throw std::invalid_argument(
        "allToAll: input and output need the same size, a multiple of " +
        std::to_string(n) + " blocks; got " + std::to_string(in.size()) +
        " and " + std::to_string(out.size()) + " elements");
  const int count = mpiCount(in.size() / size_t(n), "allToAll");
  account("all_to_all", n, in.size_bytes());
  if (n == 1)
    return copyElements(in, out);
  if (count == 0)
    return;
  const bool inPlace = in.data() == out.data();
  const WaitClock clock(waitSeconds_);
  check(MPI_Alltoall(inPlace ? MPI_IN_PLACE : in.data(), count, mpiType<T>(),
                     out.data(), count, mpiType<T>(), g.comm),
        "MPI_Alltoall");
}

void GridComm::allToAll(const std::vector<int> &axes, std::span<const float> in,
                        std::span<float> out) {
  allToAllOf(axes, in, out);
}

void GridComm::allToAll(const std::vector<int> &axes,
                        std::span<const uint16_t> in, std::span<uint16_t> out) {
  allToAllOf(axes, in, out);
}

template <typename T>
void GridComm::startShiftOf(const std::vector<int> &axes, std::span<const T> in,
                            std::span<T> out) {
  const CommGroup &g = group(axes);
  const int n = g.size;
  if (in.size() != out.size())
    throw std::invalid_argument(
        "startShift: sends " + std::to_string(in.size()) +
        " elements but receives " + std::to_string(out.size()));
  if (shifts.count(out.data()))
    throw std::invalid_argument(
        "startShift: a shift is already receiving into this buffer");
  const int count = mpiCount(in.size(), "startShift");
  account("ring_shift", n, in.size_bytes());
  std::array<MPI_Request, 2> requests = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  if (n == 1 || count == 0) {
    copyElements(in, out);
  } else {
    // One tag for every ring step: MPI matches the messages of a pair of
    // ranks in order, as every rank starts its shifts in the same order.
    constexpr int kRingTag = 17;
    const int next = (g.rank + 1) % n, previous = (g.rank + n - 1) % n;
    check(MPI_Irecv(out.data(), count, mpiType<T>(), previous, kRingTag, g.comm,
                    &requests[0]),
          "MPI_Irecv");
    check(MPI_Isend(in.data(), count, mpiType<T>(), next, kRingTag, g.comm,
                    &requests[1]),
          "MPI_Isend");
  }
  shifts.emplace(out.data(), requests);
}

void GridComm::startShift(const std::vector<int> &axes,
                          std::span<const float> in, std::span<float> out) {
  startShiftOf(axes, in, out);
}

void GridComm::startShift(const std::vector<int> &axes,
                          std::span<const uint16_t> in,
                          std::span<uint16_t> out) {
  startShiftOf(axes, in, out);
}

void GridComm::finishShift(const void *out) {
  auto found = shifts.find(out);
  if (found == shifts.end())
    throw std::invalid_argument(
        "finishShift: no shift is receiving into this buffer");
  std::array<MPI_Request, 2> requests = found->second;
  shifts.erase(found);
  if (requests[0] != MPI_REQUEST_NULL || requests[1] != MPI_REQUEST_NULL) {
    const WaitClock clock(waitSeconds_);
    check(MPI_Waitall(2, requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  }
}

void GridComm::startTransfer(bool send, int axis, int64_t peer, int tag,
                             void *data, size_t bytes) {
  const char *what = send ? "startSend" : "startReceive";
  const CommGroup &g = group({axis});
  if (peer < 0 || peer >= g.size || peer == g.rank)
    throw std::invalid_argument(
        std::string(what) + ": peer " + std::to_string(peer) +
        " is not another coordinate of grid axis " + std::to_string(axis));
  if (transfers.count(data))
    throw std::invalid_argument(std::string(what) +
                                ": this buffer is already in flight");
  const int count = mpiCount(bytes, what);
  MPI_Request request = MPI_REQUEST_NULL;
  if (send) {
    account("send", 2, bytes);
    check(MPI_Isend(data, count, MPI_BYTE, int(peer), tag, g.comm, &request),
          "MPI_Isend");
  } else {
    check(MPI_Irecv(data, count, MPI_BYTE, int(peer), tag, g.comm, &request),
          "MPI_Irecv");
  }
  transfers.emplace(data, request);
}

void GridComm::startSend(int axis, int64_t peer, int tag,
                         std::span<const std::byte> data) {
  startTransfer(true, axis, peer, tag, const_cast<std::byte *>(data.data()),
                data.size());
}

void GridComm::startReceive(int axis, int64_t peer, int tag,
                            std::span<std::byte> data) {
  startTransfer(false, axis, peer, tag, data.data(), data.size());
}

void GridComm::finishTransfer(const void *data) {
  auto found = transfers.find(data);
  if (found == transfers.end())
    throw std::invalid_argument(
        "finishTransfer: no transfer is in flight for this buffer");
  MPI_Request request = found->second;
  transfers.erase(found);
  const WaitClock clock(waitSeconds_);
  check(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait");
}

void GridComm::exchange(std::span<const Transfer> sends,
                        std::span<const Transfer> receives) {
  std::vector<MPI_Request> requests;
  auto post = [&](const Transfer &t, bool send) {
    if (t.peer < 0 || t.peer >= size_ || t.peer == rank_)
      throw std::invalid_argument("exchange: peer " + std::to_string(t.peer) +
                                  " is not another rank of a grid of " +
                                  std::to_string(size_));
    const int count = mpiCount(t.data.size(), "exchange");
    // A world rank other than this one exists only under MPI.
    requests.emplace_back();
    constexpr int kTag = 7;
    if (send)
      check(MPI_Isend(t.data.data(), count, MPI_FLOAT, t.peer, kTag,
                      MPI_COMM_WORLD, &requests.back()),
            "MPI_Isend");
    else
      check(MPI_Irecv(t.data.data(), count, MPI_FLOAT, t.peer, kTag,
                      MPI_COMM_WORLD, &requests.back()),
            "MPI_Irecv");
  };
  for (const Transfer &t : receives)
    post(t, false);
  for (const Transfer &t : sends)
    post(t, true);
  if (!requests.empty())
    check(
        MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
        "MPI_Waitall");
}

void GridComm::broadcast(const std::vector<int> &axes, std::span<float> data,
                         int root) {
  const CommGroup &g = group(axes);
  const int n = g.size;
  if (root < 0 || root >= n)
    throw std::invalid_argument("broadcast: root " + std::to_string(root) +
                                " is not a rank of a group of " +
                                std::to_string(n));
  const int count = mpiCount(data.size(), "broadcast");
  account("broadcast", n, data.size_bytes());
  if (n == 1 || count == 0)
    return;
  const WaitClock clock(waitSeconds_);
  check(MPI_Bcast(data.data(), count, MPI_FLOAT, root, g.comm), "MPI_Bcast");
}

} // namespace tpc::runtime
