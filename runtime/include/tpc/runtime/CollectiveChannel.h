// The exchanges every collective step of a plan reduces to, over the group
// of a set of grid axes, on contiguous buffers in group rank order (the
// layouts around them, which blocks go where, are the backends' kernels').
// Two transports sit behind it: MPI on host memory (MpiChannel, over the
// grid's own collectives) and NCCL on a GPU's memory (the CUDA backend's,
// on its streams). Both count their traffic in the grid's statistics by the
// rule in Comm.h, so the executor sees one kind of channel, not two paths.
#pragma once

#include "tpc/runtime/Comm.h"

#include <compare>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace tpc::runtime {

/// Element types on the wire: f32, or bf16 as its 16 bits (sums add in f32
/// in group rank order and round once, Comm.h).
enum class WireType { F32, BF16 };

/// One direction of pipeline transfers: from the rank whose coordinate on
/// grid `axis` is `from` to the one whose coordinate is `to`, among the
/// ranks that share their other coordinates.
struct TransferRoute {
  int axis = 0;
  int64_t from = 0, to = 0;
  auto operator<=>(const TransferRoute &) const = default;
};

class CollectiveChannel {
public:
  virtual ~CollectiveChannel() = default;

  /// "MPI" or "NCCL".
  virtual std::string_view transport() const = 0;
  /// Whether a collective blocks the host until the other ranks took part,
  /// so that GridComm::waitSeconds sees the waiting (MPI). False where it
  /// queues on a device (NCCL): the executor then counts a collective
  /// step's whole time as waiting, so that rebalancing compares compute
  /// alone.
  virtual bool waitsOnHost() const = 0;
  /// Whether pipeline transfers match by tag (MPI). False where transfers
  /// in one direction between two ranks are matched by order, the k-th send
  /// meeting the k-th receive whatever their tags (NCCL, one queue per
  /// direction): the runner gives such a channel a plan's transfers only
  /// when the loader proved that order (LoadedPlan::inOrderTransferProblem).
  virtual bool matchesTransfersByTag() const = 0;
  /// Before any step runs, on every rank in one order: the groups a plan's
  /// collectives use and the routes its transfers take. A transport that
  /// creates its communicators collectively creates them here, since stage
  /// programs first use them in different orders.
  virtual void prepareGroups(std::span<const std::vector<int>> collectives,
                             std::span<const TransferRoute> routes) {
    (void)collectives;
    (void)routes;
  }

  /// `data` (count elements) summed over the group, in place.
  virtual void allReduceSum(const std::vector<int> &axes, WireType type,
                            void *data, size_t count) = 0;
  /// Every member's `in` (count elements) into `out` (n * count) in group
  /// rank order.
  virtual void allGather(const std::vector<int> &axes, WireType type,
                         const void *in, void *out, size_t count) = 0;
  /// `in` (n * count) summed over the group; member r receives slice r
  /// (count elements) in `out`.
  virtual void reduceScatterSum(const std::vector<int> &axes, WireType type,
                                const void *in, void *out, size_t count) = 0;
  /// `in` and `out` hold `count` elements in n equal blocks: block j of `in`
  /// goes to member j, block i of `out` comes from member i.
  virtual void allToAll(const std::vector<int> &axes, WireType type,
                        const void *in, void *out, size_t count) = 0;
  /// One ring step: `in` (count elements) to member r+1, member r-1's into
  /// `out`; returns at once, finishShift(out) completes it.
  virtual void startShift(const std::vector<int> &axes, WireType type,
                          const void *in, void *out, size_t count) = 0;
  virtual void finishShift(const void *out) = 0;
  /// Pipeline transfers (GridComm::startSend): `count` elements to or from
  /// the rank whose coordinate on `axis` is `peer`, matched by `tag`;
  /// finishTransfer(buffer) completes either.
  virtual void startSend(int axis, int64_t peer, int tag, WireType type,
                         const void *in, size_t count) = 0;
  virtual void startReceive(int axis, int64_t peer, int tag, WireType type,
                            void *out, size_t count) = 0;
  virtual void finishTransfer(const void *buffer) = 0;
};

/// Bytes of one element on the wire.
inline size_t wireBytes(WireType type) {
  return type == WireType::BF16 ? 2 : 4;
}

/// MPI on host memory: the grid's collectives (GridComm).
class MpiChannel final : public CollectiveChannel {
public:
  explicit MpiChannel(GridComm &grid) : grid(grid) {}

  std::string_view transport() const override { return "MPI"; }
  bool waitsOnHost() const override { return true; }
  bool matchesTransfersByTag() const override { return true; }
  void allReduceSum(const std::vector<int> &axes, WireType type, void *data,
                    size_t count) override;
  void allGather(const std::vector<int> &axes, WireType type, const void *in,
                 void *out, size_t count) override;
  void reduceScatterSum(const std::vector<int> &axes, WireType type,
                        const void *in, void *out, size_t count) override;
  void allToAll(const std::vector<int> &axes, WireType type, const void *in,
                void *out, size_t count) override;
  void startShift(const std::vector<int> &axes, WireType type, const void *in,
                  void *out, size_t count) override;
  void finishShift(const void *out) override { grid.finishShift(out); }
  void startSend(int axis, int64_t peer, int tag, WireType type, const void *in,
                 size_t count) override {
    grid.startSend(
        axis, peer, tag,
        {static_cast<const std::byte *>(in), count * wireBytes(type)});
  }
  void startReceive(int axis, int64_t peer, int tag, WireType type, void *out,
                    size_t count) override {
    grid.startReceive(axis, peer, tag,
                      {static_cast<std::byte *>(out), count * wireBytes(type)});
  }
  void finishTransfer(const void *buffer) override {
    grid.finishTransfer(buffer);
  }

private:
  GridComm &grid;
};

} // namespace tpc::runtime
