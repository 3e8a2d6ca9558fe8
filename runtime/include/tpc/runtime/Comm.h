// Communication: the world of ranks (MPI processes launched by mpirun, or a
// single process without MPI) and grid communicators with f32 and bf16
// collectives over sets of grid axes. A bf16 tensor is its elements' 16 bits
// (uint16_t): bf16 moves on the wire, and the sums add in f32 in group rank
// order and round once (each rank sums its chunk of every rank's buffer),
// so every rank, and a GPU doing the same, gets the same bits.
//
// MPI is initialised only when OpenMPI's mpirun launched the process (it sets
// OMPI_COMM_WORLD_SIZE); a plain `tp-run plan ...` is a world of one rank that
// never touches MPI (another launcher gives each process a world of its own).
// MPI is finalised at exit, when Comm::world()'s static object is destroyed.
// Thread level MPI_THREAD_FUNNELED: only the thread that first called
// Comm::world() may communicate.
//
// Failing without hanging: all ranks must issue the same collectives in the
// same order. A rank that fails before its first collective can exit on its
// own (every rank reaches MPI_Finalize); to let all ranks print their error
// and exit together, agree on the outcome with Comm::allSucceeded(). A rank
// that fails once collectives may be in flight must call abortAll(), which
// takes every rank down with MPI_Abort; returning or exiting instead would
// leave the others blocked in their next collective.
//
// Communication accounting (the bandwidth-optimal, ring rule of the design,
// per rank and per call on a group of n ranks; T = the tensor's bytes, 4 per
// f32 element and 2 per bf16 one):
//   all-gather      (n-1)/n * T, T = the gathered output, n * count elements
//   reduce-scatter  (n-1)/n * T, T = the full input, n * count elements
//   all-reduce     2(n-1)/n * T, T = the buffer
//   all-to-all      (n-1)/n * T, T = one rank's whole send buffer
//   ring shift      T, T = the block sent: n-1 shifts of a block (a ring
//                   step of a collective matmul) move what an all-gather
//                   of the blocks or a reduce-scatter of their sum moves
//   broadcast       (n-1)/n * T, T = the buffer: the SUMMA rule ("the (n-1)
//                   panels a rank receives") spread over the n broadcasts of
//                   a panel loop, in which every rank is the root once.
//   send            T, T = the buffer a pipeline stage sends (its receive
//                   counts nothing: the sender's count is the traffic)
// That is, "all-gather and reduce-scatter over n ranks move (n-1)/n of the
// full tensor, all-reduce 2(n-1)/n". Every call counts, also one on a
// single-rank group (0 bytes) or in a world without MPI; a call rejected for
// bad sizes (std::invalid_argument) does not.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpc::runtime {

/// The world: every rank of this run.
class Comm {
public:
  /// The world, created on first use (MPI_Init_thread when launched by
  /// mpirun). Not copyable; lives until exit, which finalises MPI.
  static Comm &world();

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Whether this run uses MPI (launched by mpirun, even with -np 1).
  bool usesMpi() const { return mpi; }

  /// Collective over the world: true if every rank passed `ok`. Without MPI,
  /// `ok`. Lets all ranks stop together after a failure in a phase without
  /// other collectives (each prints its own error, then all exit cleanly).
  bool allSucceeded(bool ok) const;
  /// True on every rank when every rank passed the same value (collective
  /// over the world; true without MPI).
  bool allEqual(uint64_t value) const;
  /// `data` on world rank `root` is copied to every rank (collective over
  /// the world; nothing without MPI). For setting up other transports (an
  /// NCCL unique id).
  void broadcastBytes(std::span<std::byte> data, int root) const;

  Comm(const Comm &) = delete;
  Comm &operator=(const Comm &) = delete;
  ~Comm();

private:
  Comm();
  int rank_ = 0, size_ = 1;
  bool mpi = false;
  bool initialisedHere = false; // MPI_Init was ours, so MPI_Finalize is too
};

/// Ends the whole run with exit code `code`: flushes std::cout and std::cerr,
/// then MPI_Abort on the world when MPI is up (every rank terminates), else
/// std::_Exit. A rank that fails after collectives may have begun must use
/// this instead of returning, or the other ranks hang.
[[noreturn]] void abortAll(int code);

/// This process's index among the ranks on its machine (OpenMPI's
/// OMPI_COMM_WORLD_LOCAL_RANK; 0 when mpirun did not launch it): it picks
/// the GPU.
int machineLocalRank();

/// What a rank whose own work succeeded throws from runTogether when
/// another rank's failed.
struct AnotherRankFailed : std::runtime_error {
  AnotherRankFailed()
      : std::runtime_error("stopping: another rank failed (its error says "
                           "why)") {}
};

/// Runs `work` on this rank, where a failure may happen on some ranks only
/// (a flag, file or plan one rank cannot read), then agrees on the outcome
/// over `world`, so that every rank stops together instead of some waiting
/// in a collective: returns when every rank succeeded, rethrows this rank's
/// exception, and throws AnotherRankFailed on a rank that succeeded while
/// another failed. `work` must not communicate.
template <typename F> void runTogether(const Comm &world, F &&work) {
  std::exception_ptr failure;
  try {
    work();
  } catch (...) {
    failure = std::current_exception();
  }
  if (world.allSucceeded(!failure))
    return;
  if (failure)
    std::rethrow_exception(failure);
  throw AnotherRankFailed();
}

/// Totals of one kind of collective (accounting rule above).
struct CommStats {
  int64_t calls = 0;
  double bytes = 0; // fractional: all-reduce volumes need not divide by n
};

/// One sub-communicator of a grid: the ranks sharing all coordinates outside
/// `axes`, ordered by their coordinates along `axes` (row-major in the order
/// of the list).
struct CommGroup {
  std::vector<int> axes;
  MPI_Comm comm = MPI_COMM_NULL; // MPI_COMM_NULL when MPI is not in use
  int rank = 0;                  // this rank's index in the group
  int size = 1;
  std::vector<int> worldRanks; // the members, in group rank order
};

/// A device grid over the world: ranks map row-major onto `shape`.
/// Sub-communicators are created on first request with MPI_Comm_split, which
/// is collective over the world: every rank must request the same axis lists
/// in the same order. They are cached and freed when the GridComm is
/// destroyed.
class GridComm {
public:
  /// Throws std::runtime_error unless the grid's rank count equals the
  /// world's size (before any collective, so every rank throws alike).
  explicit GridComm(std::vector<int64_t> shape, Comm &world = Comm::world());
  ~GridComm();
  GridComm(const GridComm &) = delete;
  GridComm &operator=(const GridComm &) = delete;

  const std::vector<int64_t> &shape() const { return shape_; }
  /// This rank's coordinates, row-major.
  const std::vector<int64_t> &coords() const { return coords_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  /// The group over `axes` (distinct axes of the grid, in key order); the
  /// same object, and MPI communicator, on every later request of the same
  /// list. Throws std::invalid_argument for a bad axis list.
  const CommGroup &group(const std::vector<int> &axes);

  /// In-place sum over the group.
  void allReduceSum(const std::vector<int> &axes, std::span<float> data);
  void allReduceSum(const std::vector<int> &axes, std::span<uint16_t> data);
  /// Each rank contributes `in` (count elements); `out` (n * count) receives
  /// all contributions in group rank order. `in` may be this rank's slice of
  /// `out` (in place).
  void allGather(const std::vector<int> &axes, std::span<const float> in,
                 std::span<float> out);
  void allGather(const std::vector<int> &axes, std::span<const uint16_t> in,
                 std::span<uint16_t> out);
  /// `in` (n * count) is summed over the group; group rank r receives slice
  /// r (count elements) in `out`, which must not overlap `in`.
  void reduceScatterSum(const std::vector<int> &axes, std::span<const float> in,
                        std::span<float> out);
  void reduceScatterSum(const std::vector<int> &axes,
                        std::span<const uint16_t> in, std::span<uint16_t> out);
  /// `in` and `out` hold n equal blocks; block j of `in` goes to group rank
  /// j, block i of `out` comes from group rank i. `in` may be `out`.
  void allToAll(const std::vector<int> &axes, std::span<const float> in,
                std::span<float> out);
  void allToAll(const std::vector<int> &axes, std::span<const uint16_t> in,
                std::span<uint16_t> out);
  /// Every rank's `in` (count floats) into `out` (size() * count) in world
  /// rank order, over the whole grid. For moving state outside the training
  /// step (checkpoints, exports): not counted in stats().
  void gatherState(std::span<const float> in, std::span<float> out);
  /// One buffer moved to or from world rank `peer` by exchange().
  struct Transfer {
    int peer;
    std::span<float> data;
  };
  /// Sends every `sends[i].data` to its peer and receives every
  /// `receives[i].data` from its peer, all in flight at once; between two
  /// ranks, the k-th send of one matches the k-th receive of the other. For
  /// moving state between steps (rebalancing): only the ranks named take
  /// part, and it is not counted in stats(). Throws std::invalid_argument
  /// for a peer outside the grid or this rank itself.
  void exchange(std::span<const Transfer> sends,
                std::span<const Transfer> receives);
  /// Starts one ring step over the group: `in` goes to group rank r+1 and
  /// `out` (as large) receives rank r-1's block. Returns at once;
  /// finishShift(out) completes it. Until then `in` must not be written nor
  /// `out` touched. Throws std::invalid_argument for unequal sizes or an
  /// `out` already receiving.
  void startShift(const std::vector<int> &axes, std::span<const float> in,
                  std::span<float> out);
  void startShift(const std::vector<int> &axes, std::span<const uint16_t> in,
                  std::span<uint16_t> out);
  /// Waits for the shift receiving into the buffer at `out`; throws
  /// std::invalid_argument if none is.
  void finishShift(const void *out);
  /// Pipeline transfers: starts sending `data` to the rank whose coordinate
  /// on grid `axis` is `peer` (its others this rank's), or receiving into
  /// `data` from it, matched by `tag` (in order, per pair and tag). Returns
  /// at once; finishTransfer(data) completes it, and until then the buffer
  /// is not written (a send) or touched (a receive). A send counts as
  /// "send", its bytes. Throws std::invalid_argument for a peer that is
  /// not another coordinate of the axis, or a buffer already in flight.
  void startSend(int axis, int64_t peer, int tag,
                 std::span<const std::byte> data);
  void startReceive(int axis, int64_t peer, int tag, std::span<std::byte> data);
  /// Waits for the transfer of the buffer at `data`; throws
  /// std::invalid_argument if none is in flight.
  void finishTransfer(const void *data);
  /// `data` on group rank `root` is copied to every rank of the group.
  void broadcast(const std::vector<int> &axes, std::span<float> data, int root);

  /// Totals per kind: "all_gather", "all_reduce", "all_to_all", "broadcast",
  /// "reduce_scatter", "ring_shift" (kinds not yet called are absent).
  std::map<std::string, CommStats> stats() const { return stats_; }
  /// Counts a collective that ran outside this class (a GPU's NCCL call) by
  /// the rule above, over the group of `axes`: `elements` (of
  /// `elementSize` bytes) is the buffer the rule names (the gathered output,
  /// the full input, the buffer, the block sent).
  void countCollective(const char *kind, const std::vector<int> &axes,
                       size_t elements, size_t elementSize = sizeof(float));
  /// Adds `traffic` (totals per kind, as stats() returns them) to the
  /// totals: what a replayed command buffer's collectives moved, counted
  /// when it was recorded.
  void addStats(const std::map<std::string, CommStats> &traffic);
  /// Replaces the totals (undoes the counting of a recording, which moved
  /// nothing).
  void setStats(std::map<std::string, CommStats> totals) {
    stats_ = std::move(totals);
  }
  void resetStats() { stats_.clear(); }
  /// Seconds spent in blocking collectives of the grid (waiting for other
  /// ranks included) since construction: a step's compute time is its wall
  /// time less the change of this.
  double waitSeconds() const { return waitSeconds_; }
  /// Adds time spent waiting on a transport other than this one's (a
  /// device's collectives, CollectiveChannel::waitsOnHost).
  void addWaitSeconds(double seconds) { waitSeconds_ += seconds; }

  /// Row-major coordinates of `rank` on `shape`, and back.
  static std::vector<int64_t> coordsOf(const std::vector<int64_t> &shape,
                                       int64_t rank);
  static int64_t rankOf(const std::vector<int64_t> &shape,
                        const std::vector<int64_t> &coords);

private:
  void account(const char *kind, int n, size_t bytes);
  /// MPI_Allgather over `g` (`in` may be this rank's slice of `out`),
  /// counted as an all-gather when `counted`; `what` names the caller in
  /// size errors.
  template <typename T>
  void gatherOver(const CommGroup &g, std::span<const T> in, std::span<T> out,
                  const char *what, bool counted);
  template <typename T>
  void allToAllOf(const std::vector<int> &axes, std::span<const T> in,
                  std::span<T> out);
  template <typename T>
  void startShiftOf(const std::vector<int> &axes, std::span<const T> in,
                    std::span<T> out);

  Comm &worldComm;
  std::vector<int64_t> shape_, coords_;
  int rank_ = 0, size_ = 1;
  double waitSeconds_ = 0;
  std::map<std::vector<int>, std::unique_ptr<CommGroup>> groups;
  std::map<std::string, CommStats> stats_;
  /// Ring shifts in flight, by receive buffer: (receive, send) requests.
  std::map<const void *, std::array<MPI_Request, 2>> shifts;
  /// Pipeline transfers in flight, by buffer.
  std::map<const void *, MPI_Request> transfers;
  void startTransfer(bool send, int axis, int64_t peer, int tag, void *data,
                     size_t bytes);
};

} // namespace tpc::runtime
