// Which blocks of each rebalance point the ranks hold and compute.
//
// A rebalance point (Plan.rebalance_points; docs/rebalancing.md) is a
// dimension whose `blocks` blocks are spread over the ranks of one grid
// axis. Every member of the axis holds some of them (at most `capacity`) in
// a storage order of its own; it computes the first `active` of those and
// keeps the rest parked (ZERO-resizing drops them from the computation
// without moving them). Migration changes which member holds a block. Every
// rank keeps the same copy of the whole assignment: decisions are taken
// from values all ranks share, so no rank ever has to ask another where a
// block is.
//
// In a pipelined plan with stage cuts (Pipeline.cuts), the assignment also
// says which cut the stages run: which layers, and so which parameters, each
// stage holds. Stage rebalancing changes it as migration changes blocks.
#pragma once

#include "tpc/runtime/Plan.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tpc::runtime {

class BlockAssignment {
public:
  BlockAssignment() = default;
  /// The even split: member m holds blocks [m * b/n, (m+1) * b/n) in order
  /// and computes all of them; the stages at the balanced cut (0).
  static BlockAssignment even(const plan::Plan &plan);

  /// The pipeline's stage cut (Pipeline.cuts; 0: the balanced one).
  int64_t cut() const { return stageCut; }
  void setCut(int64_t cut) { stageCut = cut; }

  size_t numPoints() const { return points.size(); }
  const std::string &name(size_t point) const { return points[point].name; }
  int64_t axis(size_t point) const { return points[point].axis; }
  int64_t blocks(size_t point) const { return points[point].blocks; }
  int64_t capacity(size_t point) const { return points[point].capacity; }
  int64_t members(size_t point) const {
    return int64_t(points[point].held.size());
  }
  /// The blocks `member` holds, in storage order.
  std::span<const int64_t> held(size_t point, int64_t member) const {
    return points[point].held[member];
  }
  /// How many of held(point, member), from the first, it computes.
  int64_t active(size_t point, int64_t member) const {
    return points[point].active[member];
  }
  /// The member holding `block`.
  int64_t owner(size_t point, int64_t block) const;

  /// Gives `member` the blocks `held` (storage order), computing the first
  /// `active`. The assignment may be inconsistent until validate().
  void set(size_t point, int64_t member, std::vector<int64_t> held,
           int64_t active);
  /// Throws std::invalid_argument unless every block is held by exactly one
  /// member, no member holds more than the capacity and 0 <= active <= held.
  void validate() const;

  /// Whether every member holds its even share, in order, all active: the
  /// layout programs without rebalance dims (@gradients) assume.
  bool isEven() const;
  /// Whether every member holds its even share of every point (in any
  /// order, computed or parked).
  bool holdsEvenShares() const;
  /// Whether some member leaves blocks it holds out of its computation.
  bool isResized() const;
  /// This assignment with every held block computed (the same storage
  /// order): the whole model where a resize parked blocks.
  BlockAssignment everyHeldComputed() const;
  /// Per point, the blocks the member at grid `coords` computes (all zeros
  /// coordinates when empty): the run-time shapes of its tensors.
  std::vector<int64_t> activeBlocks(const std::vector<int64_t> &coords) const;
  /// The member index along `point`'s axis of the rank at `coords`.
  int64_t memberAt(size_t point, const std::vector<int64_t> &coords) const {
    return coords.empty() ? 0 : coords[points[point].axis];
  }

  bool operator==(const BlockAssignment &other) const = default;

private:
  struct Point {
    std::string name;
    int64_t axis = 0, blocks = 0, capacity = 0;
    std::vector<std::vector<int64_t>> held; // per member
    std::vector<int64_t> active;            // per member
    bool operator==(const Point &) const = default;
  };
  std::vector<Point> points;
  int64_t stageCut = 0;
};

} // namespace tpc::runtime
