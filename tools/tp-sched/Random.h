// SplitMix64: a small generator whose draws are the same on every platform
// and standard library (std::*_distribution's are not), so seeded decisions
// and traces are reproducible anywhere.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tpc::sched {

class Rng {
public:
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// In [0, 1).
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  size_t below(size_t n) { return size_t(next() % n); }

private:
  uint64_t state;
};

} // namespace tpc::sched
