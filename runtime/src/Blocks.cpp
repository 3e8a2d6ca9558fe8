#include "tpc/runtime/Blocks.h"

#include <stdexcept>

namespace tpc::runtime {

BlockAssignment BlockAssignment::even(const plan::Plan &plan) {
  BlockAssignment assignment;
  if (!plan.rebalance_points())
    return assignment;
  for (const plan::RebalancePoint *p : *plan.rebalance_points()) {
    Point point;
    point.name = p->name()->str();
    point.axis = p->axis();
    point.blocks = p->blocks();
    point.capacity = p->capacity();
    // The loader checked that the axis exists and divides the blocks.
    const int64_t n = plan.grid()->Get(p->axis()), share = p->blocks() / n;
    for (int64_t m = 0; m < n; ++m) {
      point.held.emplace_back();
      for (int64_t b = 0; b < share; ++b)
        point.held.back().push_back(m * share + b);
      point.active.push_back(share);
    }
    assignment.points.push_back(std::move(point));
  }
  return assignment;
}

int64_t BlockAssignment::owner(size_t point, int64_t block) const {
  const Point &p = points[point];
  for (size_t m = 0; m < p.held.size(); ++m)
    for (int64_t b : p.held[m])
      if (b == block)
        return int64_t(m);
  throw std::invalid_argument("rebalance point '" + p.name +
                              "': no rank holds block " +
                              std::to_string(block));
}

void BlockAssignment::set(size_t point, int64_t member,
                          std::vector<int64_t> held, int64_t active) {
  points.at(point).held.at(member) = std::move(held);
  points[point].active[member] = active;
}

void BlockAssignment::validate() const {
  for (const Point &p : points) {
    std::vector<int> holders(size_t(p.blocks), 0);
    for (size_t m = 0; m < p.held.size(); ++m) {
      const std::string who =
          "rebalance point '" + p.name + "' rank " + std::to_string(m);
      if (int64_t(p.held[m].size()) > p.capacity)
        throw std::invalid_argument(
            who + " holds " + std::to_string(p.held[m].size()) +
            " blocks, above the capacity of " + std::to_string(p.capacity));
      if (p.active[m] < 0 || p.active[m] > int64_t(p.held[m].size()))
        throw std::invalid_argument(
            who + " computes " + std::to_string(p.active[m]) + " of its " +
            std::to_string(p.held[m].size()) + " blocks");
      for (int64_t b : p.held[m]) {
        if (b < 0 || b >= p.blocks)
          throw std::invalid_argument(who + " holds block " +
                                      std::to_string(b) + " of " +
                                      std::to_string(p.blocks));
        ++holders[size_t(b)];
      }
    }
    for (int64_t b = 0; b < p.blocks; ++b)
      if (holders[size_t(b)] != 1)
        throw std::invalid_argument("rebalance point '" + p.name + "': block " +
                                    std::to_string(b) + " is held by " +
                                    std::to_string(holders[size_t(b)]) +
                                    " ranks, not one");
  }
}

bool BlockAssignment::isEven() const {
  for (const Point &p : points) {
    const int64_t share = p.blocks / int64_t(p.held.size());
    for (size_t m = 0; m < p.held.size(); ++m) {
      if (int64_t(p.held[m].size()) != share || p.active[m] != share)
        return false;
      for (int64_t b = 0; b < share; ++b)
        if (p.held[m][size_t(b)] != int64_t(m) * share + b)
          return false;
    }
  }
  return true;
}

bool BlockAssignment::holdsEvenShares() const {
  for (const Point &p : points)
    for (const std::vector<int64_t> &held : p.held)
      if (int64_t(held.size()) != p.blocks / int64_t(p.held.size()))
        return false;
  return true;
}

bool BlockAssignment::isResized() const {
  for (const Point &p : points)
    for (size_t m = 0; m < p.held.size(); ++m)
      if (p.active[m] < int64_t(p.held[m].size()))
        return true;
  return false;
}

BlockAssignment BlockAssignment::everyHeldComputed() const {
  BlockAssignment all = *this;
  for (Point &point : all.points)
    for (size_t m = 0; m < point.held.size(); ++m)
      point.active[m] = int64_t(point.held[m].size());
  return all;
}

std::vector<int64_t>
BlockAssignment::activeBlocks(const std::vector<int64_t> &coords) const {
  std::vector<int64_t> result;
  for (size_t p = 0; p < points.size(); ++p)
    result.push_back(points[p].active[size_t(memberAt(p, coords))]);
  return result;
}

} // namespace tpc::runtime
