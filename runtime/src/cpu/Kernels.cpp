// CPU kernels, f32. See Kernels.h for the semantics of each function.
//
// Conventions used throughout:
//  * Inner loops are plain counted loops over contiguous memory with
//    __restrict pointers and no calls, so clang/GCC vectorise them for
//    x86-64-v3 (AVX2 + FMA).
//  * In place: scale, gelu, silu, binary (out == an operand of the output's
//    shape), layerNorm, rmsNorm, softmax and rotary accept out == in. Their
//    in/out loops carry TPC_INDEPENDENT_LOOP instead of __restrict on the
//    in/out pair: iteration i only reads and writes element i, so there is no
//    loop-carried dependence and they vectorise without runtime alias checks
//    (a __restrict there would be undefined behaviour for out == in, and
//    compilers do exploit it). No other overlap is allowed.
//  * Floating-point reductions (sum, max) vectorise without -ffast-math via
//    TPC_REDUCTION_LOOP (or explicit lanes on non-clang compilers); norms,
//    softmax denominators, reduce and cross-entropy accumulate in double.
//  * exp is a Cephes-style polynomial (fastExp) that vectorises; std::exp is
//    only used outside inner loops.
//  * Work is split with parallelFor over rows/elements; the split never
//    changes what a given output element is computed from or in which order,
//    so results do not depend on the thread count.

#include "tpc/runtime/cpu/Kernels.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <numbers>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tpc::runtime::cpu {

//===----------------------------------------------------------------------===//
// Thread pool
//===----------------------------------------------------------------------===//

namespace {

/// True on pool workers and on a caller while it runs a parallel region, so a
/// nested parallelFor runs inline instead of dead-locking.
thread_local bool inParallelRegion = false;

/// A fixed set of worker threads; the caller of run() works too. Jobs are
/// numbered chunks claimed through an atomic counter.
class ThreadPool {
public:
  explicit ThreadPool(int threads) {
    for (int i = 1; i < threads; ++i)
      workers.emplace_back([this] { workerLoop(); });
  }
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    wake.notify_all();
    for (std::thread &worker : workers)
      worker.join();
  }

  int size() const { return static_cast<int>(workers.size()) + 1; }

  /// Runs task(c) for every c in [0, chunks), on the workers and the caller;
  /// returns when all are done and rethrows the first exception thrown.
  void run(int64_t chunks, const std::function<void(int64_t)> &task) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      current = &task;
      numChunks = chunks;
      next.store(0, std::memory_order_relaxed);
      error = nullptr;
      ++generation;
    }
    wake.notify_all();
    inParallelRegion = true;
    runChunks(task, chunks);
    inParallelRegion = false;
    std::unique_lock<std::mutex> lock(mutex);
    done.wait(lock, [this] { return active == 0; });
    // Workers join a job only while `current` is set, under the lock, so no
    // worker can touch this job after this point.
    current = nullptr;
    if (error) {
      std::exception_ptr e = error;
      error = nullptr;
      std::rethrow_exception(e);
    }
  }

private:
  void runChunks(const std::function<void(int64_t)> &task, int64_t chunks) {
    for (;;) {
      int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks)
        return;
      try {
        task(c);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error)
          error = std::current_exception();
        next.store(chunks, std::memory_order_relaxed);
      }
    }
  }

  void workerLoop() {
    inParallelRegion = true;
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      wake.wait(lock, [&] { return stop || (current && generation != seen); });
      if (stop)
        return;
      seen = generation;
      const std::function<void(int64_t)> *task = current;
      int64_t chunks = numChunks;
      ++active;
      lock.unlock();
      runChunks(*task, chunks);
      lock.lock();
      if (--active == 0)
        done.notify_one();
    }
  }

  std::vector<std::thread> workers;
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable done;
  const std::function<void(int64_t)> *current = nullptr;
  int64_t numChunks = 0;
  std::atomic<int64_t> next{0};
  int active = 0;
  uint64_t generation = 0;
  bool stop = false;
  std::exception_ptr error;
};

int defaultThreadCount() {
  if (const char *env = std::getenv("TPC_NUM_THREADS")) {
    char *end = nullptr;
    long value = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && value > 0)
      return static_cast<int>(std::min<long>(value, 1024));
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

/// Owns the pool; created on first use, destroyed (threads joined) at exit.
struct PoolHolder {
  std::mutex mutex; // held while a parallel region runs or the pool changes
  std::unique_ptr<ThreadPool> pool;
  std::atomic<int> size{0}; // pool->size() once the pool exists

  /// Requires `mutex`.
  ThreadPool &get() {
    if (!pool) {
      int threads = defaultThreadCount();
      if (std::getenv("TPC_NUM_THREADS"))
        openblas_set_num_threads(threads);
      pool = std::make_unique<ThreadPool>(threads);
      size.store(threads);
    }
    return *pool;
  }
};

PoolHolder &poolHolder() {
  static PoolHolder holder;
  return holder;
}

} // namespace

int maxThreads() {
  return std::max(16,
                  4 * static_cast<int>(std::thread::hardware_concurrency()));
}

void setNumThreads(int threads) {
  if (threads <= 0)
    threads = defaultThreadCount();
  PoolHolder &holder = poolHolder();
  std::lock_guard<std::mutex> lock(holder.mutex);
  if (!holder.pool || holder.pool->size() != threads) {
    holder.pool.reset();
    holder.pool = std::make_unique<ThreadPool>(threads);
    holder.size.store(threads);
  }
  openblas_set_num_threads(threads);
}

int numThreads() {
  PoolHolder &holder = poolHolder();
  // Lock-free once initialised, so a parallelFor body may call it.
  if (int size = holder.size.load())
    return size;
  std::lock_guard<std::mutex> lock(holder.mutex);
  return holder.get().size();
}

void parallelFor(int64_t count, int64_t grain,
                 const std::function<void(int64_t, int64_t)> &body) {
  if (count <= 0)
    return;
  grain = std::max<int64_t>(grain, 1);
  int64_t maxChunks = count / grain;
  if (maxChunks <= 1 || inParallelRegion) {
    body(0, count);
    return;
  }
  PoolHolder &holder = poolHolder();
  // One parallel region at a time; a concurrent caller runs inline.
  std::unique_lock<std::mutex> lock(holder.mutex, std::try_to_lock);
  if (!lock.owns_lock()) {
    body(0, count);
    return;
  }
  ThreadPool &pool = holder.get();
  int64_t chunks = std::min<int64_t>(maxChunks, pool.size());
  if (chunks <= 1) {
    body(0, count);
    return;
  }
  // Balanced contiguous chunks; each has at least count / chunks >= grain.
  pool.run(chunks, [&](int64_t c) {
    int64_t begin = count * c / chunks;
    int64_t end = count * (c + 1) / chunks;
    body(begin, end);
  });
}

//===----------------------------------------------------------------------===//
// Vectorisable helpers
//===----------------------------------------------------------------------===//

namespace {

/// Elements per parallel chunk for cheap elementwise work.
constexpr int64_t kElementGrain = int64_t(1) << 15;
/// Rows per chunk so that a chunk holds about `elements` elements.
int64_t rowGrain(int64_t cols, int64_t elements = kElementGrain) {
  return std::max<int64_t>(1, elements / std::max<int64_t>(cols, 1));
}

/// exp(x) for float, Cephes expf: x = n ln2 + r with |r| <= ln2/2,
/// exp(r) by a degree-7 polynomial, 2^n built in the exponent bits. Max
/// relative error about 1.5 ulp over the normal range; NaN propagates; about
/// 2.4e38 (not inf) above 88.376. Below ln(FLT_MIN) the result is exactly 0
/// if kZeroBelow, else FLT_MIN (cheaper; fine where it is added to 1).
template <bool kZeroBelow = true>
[[gnu::always_inline]] inline float fastExp(float x) {
  constexpr float kHi = 88.3762626647949f;
  constexpr float kLo = -87.3365447505531f; // ln(FLT_MIN)
  // Adding 1.5 * 2^23 rounds to an integer kept in the low mantissa bits;
  // the extra 127 pre-biases it as an exponent.
  constexpr float kRound = 12582912.0f + 127.0f;
  float c = x > kHi ? kHi : x;
  c = c < kLo ? kLo : c;
  float t = c * 1.44269504088896341f + kRound;
  float n = t - kRound; // round(c / ln2), in [-126, 127]
  float r = c - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // The low mantissa bits of t hold n + 127; shifting them into the exponent
  // field drops everything above, giving 2^n.
  float scale = std::bit_cast<float>(std::bit_cast<uint32_t>(t) << 23);
  float result = p * scale;
  if constexpr (kZeroBelow)
    return x < kLo ? 0.0f : result;
  else
    return result;
}

// Marks a loop whose iterations touch disjoint elements, though its input and
// output may be the same buffer.
#if defined(__clang__)
#define TPC_INDEPENDENT_LOOP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define TPC_INDEPENDENT_LOOP _Pragma("GCC ivdep")
#else
#define TPC_INDEPENDENT_LOOP
#endif

// Floating-point reductions only vectorise if the compiler may reorder
// them. Clang does so for a loop with an explicit vectorize pragma (no
// -ffast-math needed); elsewhere, independent lanes give the same effect.
// Sums are accumulated in double, so the reordering is harmless.
#if defined(__clang__)
// Unoptimised or instrumented builds may not vectorise; that is no error.
#pragma clang diagnostic ignored "-Wpass-failed"
#define TPC_REDUCTION_LOOP                                                     \
  _Pragma("clang loop vectorize(enable) interleave(enable)")
#endif

/// Sum of x[0..n) in double.
[[gnu::always_inline]] inline double sumDouble(const float *__restrict x,
                                               int64_t n) {
#ifdef TPC_REDUCTION_LOOP
  double sum = 0.0;
  TPC_REDUCTION_LOOP
  for (int64_t i = 0; i < n; ++i)
    sum += static_cast<double>(x[i]);
  return sum;
#else
  constexpr int64_t kLanes = 16;
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l)
      acc[l] += static_cast<double>(x[i + l]);
  double sum = 0.0;
  for (int64_t l = 0; l < kLanes; ++l)
    sum += acc[l];
  for (; i < n; ++i)
    sum += static_cast<double>(x[i]);
  return sum;
#endif
}

/// Sum of (x[i] - shift)^2 in double.
[[gnu::always_inline]] inline double sumSquaredDouble(const float *__restrict x,
                                                      int64_t n, double shift) {
#ifdef TPC_REDUCTION_LOOP
  double sum = 0.0;
  TPC_REDUCTION_LOOP
  for (int64_t i = 0; i < n; ++i) {
    double d = static_cast<double>(x[i]) - shift;
    sum += d * d;
  }
  return sum;
#else
  constexpr int64_t kLanes = 16;
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) {
      double d = static_cast<double>(x[i + l]) - shift;
      acc[l] += d * d;
    }
  double sum = 0.0;
  for (int64_t l = 0; l < kLanes; ++l)
    sum += acc[l];
  for (; i < n; ++i) {
    double d = static_cast<double>(x[i]) - shift;
    sum += d * d;
  }
  return sum;
#endif
}

/// max of x[0..n) (-inf for n == 0); NaNs are skipped. Independent lanes
/// (compiled to vmaxps) beat a vectorised fmax, which must blend for NaNs.
[[gnu::always_inline]] inline float maxFloat(const float *__restrict x,
                                             int64_t n) {
  constexpr int64_t kLanes = 32;
  float acc[kLanes];
  for (int64_t l = 0; l < kLanes; ++l)
    acc[l] = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l)
      acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  float m = -std::numeric_limits<float>::infinity();
  for (; i < n; ++i)
    m = x[i] > m ? x[i] : m;
  for (int64_t l = 0; l < kLanes; ++l)
    m = acc[l] > m ? acc[l] : m;
  return m;
}

/// y[i] = exp(x[i] - shift).
[[gnu::always_inline]] inline void expShifted(const float *x, float shift,
                                              float *y, int64_t n) {
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < n; ++i)
    y[i] = fastExp(x[i] - shift);
}

/// sum_i exp(x[i] - shift) in double, through a stack buffer so both loops
/// vectorise.
double sumExpShifted(const float *__restrict x, float shift, int64_t n) {
  constexpr int64_t kBlock = 512;
  alignas(64) float buffer[kBlock];
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kBlock) {
    int64_t len = std::min(kBlock, n - b);
    expShifted(x + b, shift, buffer, len);
    total += sumDouble(buffer, len);
  }
  return total;
}

int64_t product(Shape shape) {
  int64_t p = 1;
  for (int64_t d : shape)
    p *= d;
  return p;
}

std::vector<int64_t> contiguousStrides(Shape shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = s;
    s *= shape[d];
  }
  return strides;
}

std::string shapeString(Shape shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d)
      s += ", ";
    s += std::to_string(shape[d]);
  }
  return s + "]";
}

} // namespace

//===----------------------------------------------------------------------===//
// embedding
//===----------------------------------------------------------------------===//

/// Throws "KERNEL: WHAT ID of token T is outside [0, LIMIT)" for the first
/// index outside [0, limit).
static void checkIndices(const char *kernel, const char *what,
                         const int32_t *indices, int64_t count, int64_t limit) {
  for (int64_t t = 0; t < count; ++t)
    if (indices[t] < 0 || indices[t] >= limit)
      throw std::runtime_error(std::string(kernel) + ": " + what + " " +
                               std::to_string(indices[t]) + " of token " +
                               std::to_string(t) + " is outside [0, " +
                               std::to_string(limit) + ")");
}

void embedding(const float *table, int64_t vocab, int64_t hidden,
               const int32_t *ids, int64_t tokens, float *out) {
  embeddingBlock(table, /*firstRow=*/0, vocab, vocab, hidden, ids, tokens, out);
}

void embeddingBlock(const float *table, int64_t firstRow, int64_t rows,
                    int64_t fullVocab, int64_t hidden, const int32_t *ids,
                    int64_t tokens, float *out) {
  checkIndices("embedding", "id", ids, tokens, fullVocab);
  parallelFor(tokens, rowGrain(hidden), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      int64_t row = int64_t(ids[t]) - firstRow;
      if (row >= 0 && row < rows)
        std::memcpy(out + t * hidden, table + row * hidden,
                    sizeof(float) * size_t(hidden));
      else
        std::memset(out + t * hidden, 0, sizeof(float) * size_t(hidden));
    }
  });
}

//===----------------------------------------------------------------------===//
// matmul
//===----------------------------------------------------------------------===//

void matmul(const float *lhs, Shape lhsShape, bool transposeLhs,
            const float *rhs, Shape rhsShape, bool transposeRhs, float *out,
            Shape outShape, bool accumulate, float alpha) {
  auto fail = [&](const std::string &why) {
    throw std::runtime_error(
        "matmul: " + why + " (lhs " + shapeString(lhsShape) + ", rhs " +
        shapeString(rhsShape) + ", out " + shapeString(outShape) + ")");
  };
  if (lhsShape.size() < 2 || rhsShape.size() < 2 || outShape.size() < 2)
    fail("operands need rank >= 2");
  size_t lr = lhsShape.size(), rr = rhsShape.size(), orank = outShape.size();
  int64_t m = transposeLhs ? lhsShape[lr - 1] : lhsShape[lr - 2];
  int64_t k = transposeLhs ? lhsShape[lr - 2] : lhsShape[lr - 1];
  int64_t kr = transposeRhs ? rhsShape[rr - 1] : rhsShape[rr - 2];
  int64_t n = transposeRhs ? rhsShape[rr - 2] : rhsShape[rr - 1];
  if (k != kr || outShape[orank - 2] != m || outShape[orank - 1] != n)
    fail("matrix dims do not match");
  if (std::max<int64_t>({m, n, k}) > std::numeric_limits<int>::max())
    fail("matrix dims exceed the BLAS int range");
  numThreads(); // applies TPC_NUM_THREADS to OpenBLAS on first use

  // Batch dims, right-aligned against the output's (NumPy broadcasting).
  size_t lb = lr - 2, rb = rr - 2, ob = orank - 2;
  if (lb > ob || rb > ob)
    fail("operand has more batch dims than the output");
  std::vector<int64_t> lhsStride(ob, 0), rhsStride(ob, 0);
  {
    int64_t ls = m * k, rs = k * n;
    for (size_t i = ob; i-- > 0;) {
      int64_t size = outShape[i];
      if (i + lb >= ob) {
        int64_t dim = lhsShape[i + lb - ob];
        if (dim != size && dim != 1)
          fail("lhs batch dims do not broadcast to the output's");
        lhsStride[i] = dim == 1 ? 0 : ls;
        ls *= dim;
      }
      if (i + rb >= ob) {
        int64_t dim = rhsShape[i + rb - ob];
        if (dim != size && dim != 1)
          fail("rhs batch dims do not broadcast to the output's");
        rhsStride[i] = dim == 1 ? 0 : rs;
        rs *= dim;
      }
    }
  }
  int64_t batch = product(outShape.first(ob));
  if (batch == 0 || m == 0 || n == 0)
    return;
  if (k == 0) {
    if (!accumulate)
      std::fill(out, out + batch * m * n, 0.0f);
    return;
  }

  CBLAS_TRANSPOSE ta = transposeLhs ? CblasTrans : CblasNoTrans;
  CBLAS_TRANSPOSE tb = transposeRhs ? CblasTrans : CblasNoTrans;
  int lda = static_cast<int>(transposeLhs ? m : k);
  int ldb = static_cast<int>(transposeRhs ? k : n);
  float beta = accumulate ? 1.0f : 0.0f;

  // X[b..., M, K] * W[K, N]: rows of all batches are one [b*M, K] matrix.
  bool lhsDense = true;
  for (size_t i = 0; i < ob; ++i)
    lhsDense &= lhsStride[i] != 0 || outShape[i] == 1;
  bool rhsShared = true;
  for (size_t i = 0; i < ob; ++i)
    rhsShared &= rhsStride[i] == 0;
  if (!transposeLhs && lhsDense && rhsShared &&
      batch * m <= std::numeric_limits<int>::max()) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(batch * m),
                static_cast<int>(n), static_cast<int>(k), alpha, lhs, lda, rhs,
                ldb, beta, out, static_cast<int>(n));
    return;
  }

  std::vector<int64_t> index(ob, 0);
  int64_t lhsOffset = 0, rhsOffset = 0;
  for (int64_t b = 0; b < batch; ++b) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, lhs + lhsOffset, lda,
                rhs + rhsOffset, ldb, beta, out + b * m * n,
                static_cast<int>(n));
    // Odometer over the output batch dims.
    for (size_t i = ob; i-- > 0;) {
      lhsOffset += lhsStride[i];
      rhsOffset += rhsStride[i];
      if (++index[i] < outShape[i])
        break;
      lhsOffset -= lhsStride[i] * outShape[i];
      rhsOffset -= rhsStride[i] * outShape[i];
      index[i] = 0;
    }
  }
}

//===----------------------------------------------------------------------===//
// binary
//===----------------------------------------------------------------------===//

namespace {

template <BinaryKind Kind>
[[gnu::always_inline]] inline float applyBinary(float a, float b) {
  if constexpr (Kind == BinaryKind::Add)
    return a + b;
  else if constexpr (Kind == BinaryKind::Sub)
    return a - b;
  else if constexpr (Kind == BinaryKind::Mul)
    return a * b;
  else
    return a / b;
}

/// out[i] = lhs[i * ls] op rhs[i * rs] for i < n, with the unit-stride and
/// broadcast (stride 0) cases as separate vectorisable loops. out may be lhs or
/// rhs (in place).
template <BinaryKind Kind>
void binaryRow(const float *lhs, int64_t ls, const float *rhs, int64_t rs,
               float *out, int64_t n) {
  if (ls == 1 && rs == 1) {
    TPC_INDEPENDENT_LOOP
    for (int64_t i = 0; i < n; ++i)
      out[i] = applyBinary<Kind>(lhs[i], rhs[i]);
  } else if (ls == 1 && rs == 0) {
    float b = rhs[0];
    TPC_INDEPENDENT_LOOP
    for (int64_t i = 0; i < n; ++i)
      out[i] = applyBinary<Kind>(lhs[i], b);
  } else if (ls == 0 && rs == 1) {
    float a = lhs[0];
    TPC_INDEPENDENT_LOOP
    for (int64_t i = 0; i < n; ++i)
      out[i] = applyBinary<Kind>(a, rhs[i]);
  } else {
    // Not reached after dim merging (the innermost stride is 0 or 1).
    for (int64_t i = 0; i < n; ++i)
      out[i] = applyBinary<Kind>(lhs[i * ls], rhs[i * rs]);
  }
}

template <BinaryKind Kind>
void binaryImpl(const float *lhs, Shape lhsShape, const float *rhs,
                Shape rhsShape, float *out, Shape outShape) {
  size_t rank = outShape.size();
  if (lhsShape.size() > rank || rhsShape.size() > rank)
    throw std::runtime_error("binary: operand rank exceeds the output's");
  int64_t total = product(outShape);
  if (total == 0)
    return;

  // Per-dim strides in the output's index space (0 where broadcast), then
  // drop size-1 dims and merge dims that are contiguous for both operands.
  std::vector<int64_t> sizes, ls, rs;
  {
    std::vector<int64_t> lStride(rank, 0), rStride(rank, 0);
    int64_t l = 1, r = 1;
    for (size_t d = rank; d-- > 0;) {
      int64_t size = outShape[d];
      size_t lo = rank - lhsShape.size(), ro = rank - rhsShape.size();
      if (d >= lo) {
        int64_t dim = lhsShape[d - lo];
        if (dim != size && dim != 1)
          throw std::runtime_error("binary: lhs " + shapeString(lhsShape) +
                                   " does not broadcast to " +
                                   shapeString(outShape));
        lStride[d] = dim == 1 ? 0 : l;
        l *= dim;
      }
      if (d >= ro) {
        int64_t dim = rhsShape[d - ro];
        if (dim != size && dim != 1)
          throw std::runtime_error("binary: rhs " + shapeString(rhsShape) +
                                   " does not broadcast to " +
                                   shapeString(outShape));
        rStride[d] = dim == 1 ? 0 : r;
        r *= dim;
      }
    }
    for (size_t d = 0; d < rank; ++d) {
      int64_t size = outShape[d];
      if (size == 1)
        continue;
      if (!sizes.empty() && ls.back() == lStride[d] * size &&
          rs.back() == rStride[d] * size) {
        sizes.back() *= size;
        ls.back() = lStride[d];
        rs.back() = rStride[d];
        continue;
      }
      sizes.push_back(size);
      ls.push_back(lStride[d]);
      rs.push_back(rStride[d]);
    }
  }
  if (sizes.empty()) {
    out[0] = applyBinary<Kind>(lhs[0], rhs[0]);
    return;
  }

  int64_t inner = sizes.back();
  int64_t innerL = ls.back(), innerR = rs.back();
  size_t outerRank = sizes.size() - 1;
  int64_t rows = total / inner;
  if (rows == 1) {
    // Same shape, or a scalar against a tensor: one long row, split it.
    parallelFor(inner, kElementGrain, [&](int64_t begin, int64_t end) {
      binaryRow<Kind>(lhs + begin * innerL, innerL, rhs + begin * innerR,
                      innerR, out + begin, end - begin);
    });
    return;
  }
  // Rows of the innermost merged dim, e.g. bias [N] over [M, N]: M rows.
  parallelFor(rows, rowGrain(inner), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> index(outerRank);
    int64_t lo = 0, ro = 0;
    int64_t rest = begin;
    for (size_t d = outerRank; d-- > 0;) {
      index[d] = rest % sizes[d];
      rest /= sizes[d];
      lo += index[d] * ls[d];
      ro += index[d] * rs[d];
    }
    for (int64_t row = begin; row < end; ++row) {
      binaryRow<Kind>(lhs + lo, innerL, rhs + ro, innerR, out + row * inner,
                      inner);
      for (size_t d = outerRank; d-- > 0;) {
        lo += ls[d];
        ro += rs[d];
        if (++index[d] < sizes[d])
          break;
        lo -= ls[d] * sizes[d];
        ro -= rs[d] * sizes[d];
        index[d] = 0;
      }
    }
  });
}

} // namespace

void binary(BinaryKind kind, const float *lhs, Shape lhsShape, const float *rhs,
            Shape rhsShape, float *out, Shape outShape) {
  switch (kind) {
  case BinaryKind::Add:
    return binaryImpl<BinaryKind::Add>(lhs, lhsShape, rhs, rhsShape, out,
                                       outShape);
  case BinaryKind::Sub:
    return binaryImpl<BinaryKind::Sub>(lhs, lhsShape, rhs, rhsShape, out,
                                       outShape);
  case BinaryKind::Mul:
    return binaryImpl<BinaryKind::Mul>(lhs, lhsShape, rhs, rhsShape, out,
                                       outShape);
  case BinaryKind::Div:
    return binaryImpl<BinaryKind::Div>(lhs, lhsShape, rhs, rhsShape, out,
                                       outShape);
  }
  throw std::runtime_error("binary: unknown kind");
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

namespace {

void scaleRange(const float *in, float factor, float *out, int64_t n) {
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < n; ++i)
    out[i] = in[i] * factor;
}

// 0.5 x (1 + tanh(u)) == x * sigmoid(2u) == x / (1 + exp(-2u)): no
// cancellation near 0, and exp saturates cleanly for large |x|.
void geluRange(const float *in, float *out, int64_t n) {
  constexpr float kTwoSqrt2OverPi = 2.0f * 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < n; ++i) {
    float x = in[i];
    float u2 = kTwoSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = x / (1.0f + fastExp<false>(-u2));
  }
}

void siluRange(const float *in, float *out, int64_t n) {
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < n; ++i) {
    float x = in[i];
    out[i] = x / (1.0f + fastExp<false>(-x));
  }
}

} // namespace

void scale(const float *in, float factor, float *out, int64_t count) {
  parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    scaleRange(in + begin, factor, out + begin, end - begin);
  });
}

void gelu(const float *in, float *out, int64_t count) {
  parallelFor(count, kElementGrain / 2, [&](int64_t begin, int64_t end) {
    geluRange(in + begin, out + begin, end - begin);
  });
}

void silu(const float *in, float *out, int64_t count) {
  parallelFor(count, kElementGrain / 2, [&](int64_t begin, int64_t end) {
    siluRange(in + begin, out + begin, end - begin);
  });
}

//===----------------------------------------------------------------------===//
// Norms and softmax
//===----------------------------------------------------------------------===//

namespace {

void layerNormRow(const float *x, const float *__restrict gamma,
                  const float *__restrict beta, float *y, int64_t cols,
                  float epsilon) {
  double mean = sumDouble(x, cols) / double(cols);
  double var = sumSquaredDouble(x, cols, mean) / double(cols);
  float rstd = static_cast<float>(1.0 / std::sqrt(var + double(epsilon)));
  float meanF = static_cast<float>(mean);
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < cols; ++i)
    y[i] = (x[i] - meanF) * rstd * gamma[i] + beta[i];
}

void rmsNormRow(const float *x, const float *__restrict gamma, float *y,
                int64_t cols, float epsilon) {
  double ms = sumSquaredDouble(x, cols, 0.0) / double(cols);
  float rrms = static_cast<float>(1.0 / std::sqrt(ms + double(epsilon)));
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < cols; ++i)
    y[i] = x[i] * rrms * gamma[i];
}

void scaleInPlace(float *__restrict y, float factor, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] *= factor;
}

/// Softmax of x[0..n) into y[0..n).
void softmaxRow(const float *x, float *y, int64_t n) {
  float m = maxFloat(x, n);
  expShifted(x, m, y, n); // y may be x
  scaleInPlace(y, static_cast<float>(1.0 / sumDouble(y, n)), n);
}

} // namespace

void layerNorm(const float *x, const float *gamma, const float *beta, float *y,
               int64_t rows, int64_t cols, float epsilon) {
  if (cols <= 0)
    return;
  parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      layerNormRow(x + r * cols, gamma, beta, y + r * cols, cols, epsilon);
  });
}

void rmsNorm(const float *x, const float *gamma, float *y, int64_t rows,
             int64_t cols, float epsilon) {
  if (cols <= 0)
    return;
  parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      rmsNormRow(x + r * cols, gamma, y + r * cols, cols, epsilon);
  });
}

void softmax(const float *x, float *y, int64_t rows, int64_t cols,
             bool causal) {
  if (cols <= 0)
    return;
  parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *xr = x + r * cols;
      float *yr = y + r * cols;
      int64_t visible = causal ? r % cols + 1 : cols;
      softmaxRow(xr, yr, visible);
      std::fill(yr + visible, yr + cols, 0.0f);
    }
  });
}

//===----------------------------------------------------------------------===//
// rotary
//===----------------------------------------------------------------------===//

void rotary(const float *x, float *y, int64_t outer, int64_t seq, int64_t dim,
            double theta, bool inverse, int64_t positionOffset) {
  if (dim % 2 != 0)
    throw std::runtime_error("rotary: dim " + std::to_string(dim) +
                             " must be even");
  int64_t half = dim / 2;
  if (outer <= 0 || seq <= 0 || half == 0)
    return;
  // cos/sin per (position, frequency), angles in double.
  std::vector<double> invFreq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    invFreq[size_t(i)] = std::pow(theta, -2.0 * double(i) / double(dim));
  std::vector<float> cosTable(size_t(seq * half)), sinTable(size_t(seq * half));
  double sign = inverse ? -1.0 : 1.0;
  parallelFor(seq, rowGrain(half, 4096), [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      double position = double(positionOffset + s);
      for (int64_t i = 0; i < half; ++i) {
        double angle = sign * position * invFreq[size_t(i)];
        cosTable[size_t(s * half + i)] = static_cast<float>(std::cos(angle));
        sinTable[size_t(s * half + i)] = static_cast<float>(std::sin(angle));
      }
    }
  });
  const float *cosData = cosTable.data();
  const float *sinData = sinTable.data();
  parallelFor(outer * seq, rowGrain(dim), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t s = row % seq;
      const float *__restrict c = cosData + s * half;
      const float *__restrict sn = sinData + s * half;
      const float *lo = x + row * dim;
      const float *hi = lo + half;
      float *ylo = y + row * dim; // may be lo
      float *yhi = ylo + half;
      TPC_INDEPENDENT_LOOP
      for (int64_t i = 0; i < half; ++i) {
        float a = lo[i], b = hi[i];
        ylo[i] = a * c[i] - b * sn[i];
        yhi[i] = b * c[i] + a * sn[i];
      }
    }
  });
}

//===----------------------------------------------------------------------===//
// transpose / slice / reduce
//===----------------------------------------------------------------------===//

void transpose(const float *in, Shape inShape, std::span<const int64_t> perm,
               float *out) {
  size_t rank = inShape.size();
  if (perm.size() != rank)
    throw std::runtime_error("transpose: permutation size " +
                             std::to_string(perm.size()) + " != rank " +
                             std::to_string(rank));
  std::vector<bool> used(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= int64_t(rank) || used[size_t(p)])
      throw std::runtime_error("transpose: invalid permutation");
    used[size_t(p)] = true;
  }
  int64_t total = product(inShape);
  if (total == 0)
    return;
  std::vector<int64_t> inStrides = contiguousStrides(inShape);
  // Output dims (size, input stride), size-1 dims dropped, and output dims
  // that are also adjacent in the input merged.
  std::vector<int64_t> sizes, strides;
  for (size_t i = 0; i < rank; ++i) {
    int64_t size = inShape[size_t(perm[i])];
    int64_t stride = inStrides[size_t(perm[i])];
    if (size == 1)
      continue;
    if (!sizes.empty() && strides.back() == stride * size) {
      sizes.back() *= size;
      strides.back() = stride;
      continue;
    }
    sizes.push_back(size);
    strides.push_back(stride);
  }
  if (sizes.size() <= 1) {
    // Identity up to size-1 dims.
    parallelFor(total, kElementGrain, [&](int64_t begin, int64_t end) {
      std::memcpy(out + begin, in + begin, sizeof(float) * size_t(end - begin));
    });
    return;
  }
  size_t n = sizes.size();
  std::vector<int64_t> outStrides = contiguousStrides(sizes);

  if (strides.back() == 1) {
    // The innermost output dim is contiguous in the input: copy rows.
    int64_t rowLen = sizes.back();
    int64_t rows = total / rowLen;
    parallelFor(rows, rowGrain(rowLen), [&](int64_t begin, int64_t end) {
      std::vector<int64_t> index(n - 1);
      int64_t offset = 0, rest = begin;
      for (size_t d = n - 1; d-- > 0;) {
        index[d] = rest % sizes[d];
        rest /= sizes[d];
        offset += index[d] * strides[d];
      }
      for (int64_t row = begin; row < end; ++row) {
        std::memcpy(out + row * rowLen, in + offset,
                    sizeof(float) * size_t(rowLen));
        for (size_t d = n - 1; d-- > 0;) {
          offset += strides[d];
          if (++index[d] < sizes[d])
            break;
          offset -= strides[d] * sizes[d];
          index[d] = 0;
        }
      }
    });
    return;
  }

  // Tiled 2-D transpose between output dim p (contiguous in the input) and
  // the innermost output dim q, for every index of the other dims.
  size_t q = n - 1;
  size_t p = 0;
  while (strides[p] != 1)
    ++p;
  constexpr int64_t kTile = 32;
  int64_t sizeP = sizes[p], sizeQ = sizes[q];
  int64_t inStrideQ = strides[q], outStrideP = outStrides[p];
  std::vector<size_t> others;
  for (size_t d = 0; d < q; ++d)
    if (d != p)
      others.push_back(d);
  int64_t blocksP = (sizeP + kTile - 1) / kTile;
  int64_t units = total / (sizeP * sizeQ) * blocksP;
  parallelFor(units, rowGrain(kTile * sizeQ), [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      int64_t outer = unit / blocksP;
      int64_t p0 = unit % blocksP * kTile;
      int64_t p1 = std::min(sizeP, p0 + kTile);
      int64_t inBase = 0, outBase = 0;
      for (size_t j = others.size(); j-- > 0;) {
        size_t d = others[j];
        int64_t idx = outer % sizes[d];
        outer /= sizes[d];
        inBase += idx * strides[d];
        outBase += idx * outStrides[d];
      }
      for (int64_t q0 = 0; q0 < sizeQ; q0 += kTile) {
        int64_t q1 = std::min(sizeQ, q0 + kTile);
        for (int64_t ip = p0; ip < p1; ++ip) {
          const float *__restrict src = in + inBase + ip;
          float *__restrict dst = out + outBase + ip * outStrideP;
          for (int64_t iq = q0; iq < q1; ++iq)
            dst[iq] = src[iq * inStrideQ];
        }
      }
    }
  });
}

/// Checks that `window` at `offsets` lies inside `whole` (slice reads such a
/// window, pad writes one); throws "KERNEL: ..." otherwise.
static void checkWindow(const char *kernel, Shape whole, Shape window,
                        std::span<const int64_t> offsets) {
  size_t rank = whole.size();
  if (offsets.size() != rank || window.size() != rank)
    throw std::runtime_error(std::string(kernel) + ": rank mismatch");
  for (size_t d = 0; d < rank; ++d)
    if (offsets[d] < 0 || window[d] < 0 || offsets[d] + window[d] > whole[d])
      throw std::runtime_error(
          std::string(kernel) + ": window " + std::to_string(offsets[d]) + "+" +
          std::to_string(window[d]) + " of dim " + std::to_string(d) +
          " exceeds its size " + std::to_string(whole[d]));
}

void slice(const float *in, Shape inShape, std::span<const int64_t> offsets,
           float *out, Shape outShape) {
  size_t rank = inShape.size();
  checkWindow("slice", inShape, outShape, offsets);
  int64_t total = product(outShape);
  if (total == 0)
    return;
  std::vector<int64_t> inStrides = contiguousStrides(inShape);
  // Rows: the innermost dims copied in full plus the first partial one going
  // outward are contiguous in both tensors.
  size_t k = rank;
  int64_t rowLen = 1;
  while (k > 0) {
    --k;
    rowLen *= outShape[k];
    if (outShape[k] != inShape[k])
      break;
  }
  int64_t base = 0;
  for (size_t d = 0; d < rank; ++d)
    base += offsets[d] * inStrides[d];
  int64_t rows = total / rowLen;
  if (rows == 1) {
    parallelFor(rowLen, kElementGrain, [&](int64_t begin, int64_t end) {
      std::memcpy(out + begin, in + base + begin,
                  sizeof(float) * size_t(end - begin));
    });
    return;
  }
  parallelFor(rows, rowGrain(rowLen), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> index(k);
    int64_t offset = base, rest = begin;
    for (size_t d = k; d-- > 0;) {
      index[d] = rest % outShape[d];
      rest /= outShape[d];
      offset += index[d] * inStrides[d];
    }
    for (int64_t row = begin; row < end; ++row) {
      std::memcpy(out + row * rowLen, in + offset,
                  sizeof(float) * size_t(rowLen));
      for (size_t d = k; d-- > 0;) {
        offset += inStrides[d];
        if (++index[d] < outShape[d])
          break;
        offset -= inStrides[d] * outShape[d];
        index[d] = 0;
      }
    }
  });
}

namespace {

/// acc[i] += x[i].
void accumulateRow(const float *__restrict x, double *__restrict acc,
                   int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    acc[i] += static_cast<double>(x[i]);
}

/// Merged dims of a reduction: alternating kept/reduced groups.
struct ReduceGroup {
  int64_t size;
  int64_t inStride;
  int64_t outStride; // 0 for reduced groups
  bool reduced;
};

/// Adds the input under `in` for groups [g, end) into acc, whose offsets are
/// relative to the first output element this walk covers.
void reduceWalk(const std::vector<ReduceGroup> &groups, size_t g,
                const float *in, double *acc) {
  const ReduceGroup &group = groups[g];
  if (g + 1 == groups.size()) {
    if (group.reduced)
      acc[0] += sumDouble(in, group.size);
    else
      accumulateRow(in, acc, group.size);
    return;
  }
  for (int64_t i = 0; i < group.size; ++i)
    reduceWalk(groups, g + 1, in + i * group.inStride,
               acc + i * group.outStride);
}

} // namespace

void reduce(const float *in, Shape inShape, std::span<const int64_t> dims,
            bool mean, float *out) {
  size_t rank = inShape.size();
  std::vector<bool> reduced(rank, false);
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0 || dims[i] >= int64_t(rank) ||
        (i > 0 && dims[i] <= dims[i - 1]))
      throw std::runtime_error("reduce: dims must be strictly increasing "
                               "and within the rank");
    reduced[size_t(dims[i])] = true;
  }
  int64_t outCount = 1, reduceCount = 1;
  for (size_t d = 0; d < rank; ++d)
    (reduced[d] ? reduceCount : outCount) *= inShape[d];
  if (outCount == 0)
    return;
  double factor = mean ? 1.0 / double(reduceCount) : 1.0;
  if (reduceCount == 0) {
    std::fill(out, out + outCount,
              mean ? std::numeric_limits<float>::quiet_NaN() : 0.0f);
    return;
  }

  std::vector<ReduceGroup> groups;
  {
    std::vector<int64_t> inStrides = contiguousStrides(inShape);
    for (size_t d = 0; d < rank; ++d) {
      if (inShape[d] == 1)
        continue;
      if (!groups.empty() && groups.back().reduced == reduced[d]) {
        groups.back().size *= inShape[d];
        groups.back().inStride = inStrides[d];
        continue;
      }
      groups.push_back({inShape[d], inStrides[d], 0, reduced[d]});
    }
    int64_t s = 1;
    for (size_t g = groups.size(); g-- > 0;)
      if (!groups[g].reduced) {
        groups[g].outStride = s;
        s *= groups[g].size;
      }
  }

  if (groups.empty()) {
    out[0] = static_cast<float>(double(in[0]) * factor);
    return;
  }

  // Split the work over the outermost kept group: each index of it owns a
  // disjoint, contiguous block of the output.
  size_t split = 0;
  while (split < groups.size() && groups[split].reduced)
    ++split;
  if (split == groups.size()) {
    // Everything reduced: fixed blocks, partial sums added in block order.
    int64_t total = groups[0].size * groups[0].inStride;
    constexpr int64_t kBlock = int64_t(1) << 16;
    int64_t blocks = (total + kBlock - 1) / kBlock;
    std::vector<double> partial(size_t(blocks), 0.0);
    parallelFor(blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b)
        partial[size_t(b)] =
            sumDouble(in + b * kBlock, std::min(kBlock, total - b * kBlock));
    });
    double sum = 0.0;
    for (double v : partial)
      sum += v;
    out[0] = static_cast<float>(sum * factor);
    return;
  }

  const ReduceGroup &splitGroup = groups[split];
  int64_t perIndex = outCount / splitGroup.size; // outputs per split index
  int64_t workPerIndex = reduceCount * perIndex;
  parallelFor(
      splitGroup.size, rowGrain(workPerIndex), [&](int64_t begin, int64_t end) {
        std::vector<double> acc(size_t((end - begin) * perIndex), 0.0);
        // Walk the groups before the split (all reduced) by odometer,
        // then the split range, then the rest recursively.
        int64_t prefix = 1;
        for (size_t g = 0; g < split; ++g)
          prefix *= groups[g].size;
        for (int64_t pi = 0; pi < prefix; ++pi) {
          int64_t inOffset = 0, rest = pi;
          for (size_t g = split; g-- > 0;) {
            inOffset += rest % groups[g].size * groups[g].inStride;
            rest /= groups[g].size;
          }
          if (split + 1 == groups.size()) {
            // The split group is innermost (unit stride).
            accumulateRow(in + inOffset + begin, acc.data(), end - begin);
            continue;
          }
          for (int64_t i = begin; i < end; ++i)
            reduceWalk(groups, split + 1,
                       in + inOffset + i * splitGroup.inStride,
                       acc.data() + (i - begin) * perIndex);
        }
        float *dst = out + begin * perIndex;
        for (size_t i = 0; i < acc.size(); ++i)
          dst[i] = static_cast<float>(acc[i] * factor);
      });
}

//===----------------------------------------------------------------------===//
// crossEntropy
//===----------------------------------------------------------------------===//

float crossEntropy(const float *logits, int64_t tokens, int64_t vocab,
                   const int32_t *targets) {
  checkIndices("crossEntropy", "target", targets, tokens, vocab);
  if (tokens <= 0)
    return 0.0f;
  std::vector<double> losses(static_cast<size_t>(tokens));
  parallelFor(tokens, rowGrain(vocab, 8192), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float *row = logits + t * vocab;
      float m = maxFloat(row, vocab);
      double sum = sumExpShifted(row, m, vocab);
      losses[size_t(t)] = std::log(sum) + double(m) - double(row[targets[t]]);
    }
  });
  double total = 0.0;
  for (double loss : losses)
    total += loss;
  return static_cast<float>(total / double(tokens));
}

void crossEntropyBlockStats(const float *logits, int64_t tokens,
                            int64_t columns, int64_t firstColumn,
                            int64_t fullVocab, const int32_t *targets,
                            float *stats) {
  checkIndices("crossEntropy", "target", targets, tokens, fullVocab);
  parallelFor(tokens, rowGrain(columns, 8192), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float *row = logits + t * columns;
      float m = maxFloat(row, columns);
      int64_t column = int64_t(targets[t]) - firstColumn;
      stats[3 * t] = m;
      stats[3 * t + 1] = float(sumExpShifted(row, m, columns));
      stats[3 * t + 2] = column >= 0 && column < columns ? row[column] : 0.0f;
    }
  });
}

float crossEntropyFromBlockStats(const float *stats, int64_t blocks,
                                 int64_t tokens) {
  if (tokens <= 0)
    return 0.0f;
  double total = 0.0;
  for (int64_t t = 0; t < tokens; ++t) {
    // Rescale each block's sum to the row's global max (log-sum-exp).
    float m = stats[3 * t];
    for (int64_t b = 1; b < blocks; ++b)
      m = std::max(m, stats[3 * (b * tokens + t)]);
    double sum = 0.0, target = 0.0;
    for (int64_t b = 0; b < blocks; ++b) {
      const float *block = stats + 3 * (b * tokens + t);
      sum += double(block[1]) * std::exp(double(block[0]) - double(m));
      target += double(block[2]);
    }
    total += std::log(sum) + double(m) - target;
  }
  return static_cast<float>(total / double(tokens));
}

//===----------------------------------------------------------------------===//
// Backward and optimizer kernels
//===----------------------------------------------------------------------===//
//
// Reductions across rows (gammaGrad, betaGrad, embeddingGrad, normSquared) use
// blocks fixed by the shape alone, whose double partials are combined in
// block order, so like the forward kernels these give bit-identical results
// for any thread count. In place: geluGrad and siluGrad (inputGrad == either
// input), layerNormGrad and rmsNormGrad (inputGrad == resultGrad or input),
// softmaxGrad (inputGrad == resultGrad or result), crossEntropyGrad
// (logitsGrad == logits) and adamw (each output == its input).

namespace {

// Loops that mix a double reduction with other work: vectorised by clang's
// pragma; elsewhere they stay scalar (same results, slower).
#ifdef TPC_REDUCTION_LOOP
#define TPC_MIXED_REDUCTION_LOOP TPC_REDUCTION_LOOP
#else
#define TPC_MIXED_REDUCTION_LOOP
#endif

#ifdef __has_builtin
#if __has_builtin(__builtin_elementwise_sqrt)
#define TPC_HAS_ELEMENTWISE_SQRT
#endif
#endif

/// Sum of a[i] * b[i] in double.
[[gnu::always_inline]] inline double
dotDouble(const float *__restrict a, const float *__restrict b, int64_t n) {
  double sum = 0.0;
  TPC_MIXED_REDUCTION_LOOP
  for (int64_t i = 0; i < n; ++i)
    sum += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return sum;
}

/// y[i] = exp(x[i] - shift) (y may be x); returns their sum in double, formed
/// exactly as sumExpShifted forms it, so crossEntropyGrad's softmax
/// denominator is bit-identical to crossEntropy's.
double expShiftedStore(const float *x, float shift, float *y, int64_t n) {
  constexpr int64_t kBlock = 512;
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kBlock) {
    int64_t len = std::min(kBlock, n - b);
    expShifted(x + b, shift, y + b, len);
    total += sumDouble(y + b, len);
  }
  return total;
}

/// Rows per block of the norm gradients' gamma/beta partial sums: a function
/// of the shape only, never of the thread count.
int64_t normGradBlockRows(int64_t cols) { return rowGrain(cols); }

/// out[c] = sum over blocks b, in order, of partial[b * stride + offset + c],
/// for c < cols.
void combineBlocks(const std::vector<double> &partial, int64_t blocks,
                   int64_t stride, int64_t offset, int64_t cols, float *out) {
  parallelFor(cols, rowGrain(blocks), [&](int64_t begin, int64_t end) {
    std::vector<double> sum(size_t(end - begin), 0.0);
    double *__restrict acc = sum.data();
    for (int64_t b = 0; b < blocks; ++b) {
      const double *__restrict src =
          partial.data() + b * stride + offset + begin;
      for (int64_t c = 0; c < end - begin; ++c)
        acc[c] += src[c];
    }
    for (int64_t c = 0; c < end - begin; ++c)
      out[begin + c] = static_cast<float>(acc[c]);
  });
}

// d/dx of x sigmoid(2u), u = sqrt(2/pi) (x + a x^3): with e = exp(-2u) and
// s = 1 / (1 + e), 0.5 (1 + tanh u) = s and 1 - tanh^2 u = 4 s (1 - s)
// = 4 e s^2, so the derivative is s + 2 x e s^2 sqrt(2/pi) (1 + 3 a x^2).
// No cancellation, and e saturates cleanly for large |x|.
void geluGradRange(const float *dy, const float *in, float *dx, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < n; ++i) {
    float x = in[i];
    float x2 = x * x;
    float u2 = 2.0f * kSqrt2OverPi * (x + kCubic * x2 * x);
    float e = fastExp(-u2);
    float s = 1.0f / (1.0f + e);
    float slope = 2.0f * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x2);
    dx[i] = dy[i] * (s + (e * s) * s * x * slope);
  }
}

// d/dx of x s, s = sigmoid(x) = 1 / (1 + e), e = exp(-x):
// s + x s (1 - s) = s + x e s^2.
void siluGradRange(const float *dy, const float *in, float *dx, int64_t n) {
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < n; ++i) {
    float x = in[i];
    float e = fastExp(-x);
    float s = 1.0f / (1.0f + e);
    dx[i] = dy[i] * (s + (e * s) * s * x);
  }
}

/// One row of layerNormGrad; adds this row's gamma and beta gradients into
/// accGamma and accBeta. With g = dy gamma and xhat = (x - mean) rstd:
///   dx = rstd (g - mean(g)) - (x - mean) rstd^3 mean(g (x - mean)).
void layerNormGradRow(const float *dy, const float *x,
                      const float *__restrict gamma, float *dx,
                      double *__restrict accGamma, double *__restrict accBeta,
                      int64_t cols, float epsilon) {
  // Same statistics as layerNormRow.
  double mean = sumDouble(x, cols) / double(cols);
  double var = sumSquaredDouble(x, cols, mean) / double(cols);
  double rstd = 1.0 / std::sqrt(var + double(epsilon));
  double sumG = 0.0, sumGX = 0.0;
  TPC_MIXED_REDUCTION_LOOP
  for (int64_t i = 0; i < cols; ++i) {
    double d = static_cast<double>(dy[i]);
    double xc = static_cast<double>(x[i]) - mean;
    double g = d * static_cast<double>(gamma[i]);
    sumG += g;
    sumGX += g * xc;
    accGamma[i] += d * (xc * rstd);
    accBeta[i] += d;
  }
  float a = static_cast<float>(rstd);
  float meanG = static_cast<float>(sumG / double(cols));
  float k = static_cast<float>(rstd * rstd * rstd * sumGX / double(cols));
  float meanF = static_cast<float>(mean);
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < cols; ++i)
    dx[i] = a * (dy[i] * gamma[i] - meanG) - (x[i] - meanF) * k;
}

/// One row of rmsNormGrad; adds the row's gamma gradient into accGamma. With
/// r = 1 / sqrt(mean(x^2) + eps):
///   dx = r dy gamma - x r^3 mean(dy gamma x).
void rmsNormGradRow(const float *dy, const float *x,
                    const float *__restrict gamma, float *dx,
                    double *__restrict accGamma, int64_t cols, float epsilon) {
  double ms = sumSquaredDouble(x, cols, 0.0) / double(cols);
  double r = 1.0 / std::sqrt(ms + double(epsilon));
  double sumGX = 0.0;
  TPC_MIXED_REDUCTION_LOOP
  for (int64_t i = 0; i < cols; ++i) {
    double d = static_cast<double>(dy[i]);
    double xd = static_cast<double>(x[i]);
    sumGX += d * static_cast<double>(gamma[i]) * xd;
    accGamma[i] += d * (xd * r);
  }
  float a = static_cast<float>(r);
  float k = static_cast<float>(r * r * r * sumGX / double(cols));
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < cols; ++i)
    dx[i] = a * (dy[i] * gamma[i]) - x[i] * k;
}

/// Writes elements [begin, end) of a row of zeros holding src[0, len) at
/// [lo, lo + len).
void padSegment(const float *src, int64_t lo, int64_t len, float *row,
                int64_t begin, int64_t end) {
  int64_t zeroEnd = std::min(end, lo);
  if (begin < zeroEnd)
    std::memset(row + begin, 0, sizeof(float) * size_t(zeroEnd - begin));
  int64_t copyBegin = std::max(begin, lo);
  int64_t copyEnd = std::min(end, lo + len);
  if (copyBegin < copyEnd)
    std::memcpy(row + copyBegin, src + (copyBegin - lo),
                sizeof(float) * size_t(copyEnd - copyBegin));
  int64_t zeroBegin = std::max(begin, lo + len);
  if (zeroBegin < end)
    std::memset(row + zeroBegin, 0, sizeof(float) * size_t(end - zeroBegin));
}

/// sqrt without errno, so that loops using it vectorise (std::sqrt is a
/// library call under the default -fmath-errno).
[[gnu::always_inline]] inline float sqrtNoErrno(float x) {
#ifdef TPC_HAS_ELEMENTWISE_SQRT
  return __builtin_elementwise_sqrt(x);
#else
  return std::sqrt(x);
#endif
}

void adamwRange(const float *param, const float *grad, const float *expAvg,
                const float *expAvgSq, float *newParam, float *newExpAvg,
                float *newExpAvgSq, int64_t n, float gradScale, float b1,
                float c1, float b2, float c2, float decay, float stepSize,
                float bc2Sqrt, float eps) {
  TPC_INDEPENDENT_LOOP
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i] * gradScale;
    float m = b1 * expAvg[i] + c1 * g;
    float v = b2 * expAvgSq[i] + c2 * (g * g);
    // As torch: denom = sqrt(v) / sqrt(bc2) + eps, then
    // p = p (1 - lr wd) - (lr / bc1) m / denom.
    float denom = sqrtNoErrno(v) / bc2Sqrt + eps;
    float p = param[i] * decay - stepSize * (m / denom);
    newExpAvg[i] = m;
    newExpAvgSq[i] = v;
    newParam[i] = p;
  }
}

} // namespace

void embeddingGrad(const float *resultGrad, const int32_t *ids, int64_t tokens,
                   int64_t vocab, int64_t hidden, float *tableGrad) {
  embeddingGradBlock(resultGrad, ids, tokens, /*firstRow=*/0, vocab, vocab,
                     hidden, tableGrad);
}

void embeddingGradBlock(const float *resultGrad, const int32_t *ids,
                        int64_t tokens, int64_t firstRow, int64_t rows,
                        int64_t fullVocab, int64_t hidden, float *tableGrad) {
  checkIndices("embeddingGrad", "id", ids, tokens, fullVocab);
  const int64_t vocab = rows;
  if (vocab <= 0 || hidden <= 0)
    return;
  auto inBlock = [&](int64_t t) {
    int64_t row = int64_t(ids[t]) - firstRow;
    return row >= 0 && row < rows;
  };
  // This block's tokens bucketed by row (a stable counting sort): the tokens
  // of row v are order[start[v] .. start[v + 1]), in token order.
  std::vector<int64_t> start(size_t(vocab) + 1, 0);
  for (int64_t t = 0; t < tokens; ++t)
    if (inBlock(t))
      ++start[size_t(ids[t] - firstRow) + 1];
  for (size_t v = 0; v < size_t(vocab); ++v)
    start[v + 1] += start[v];
  std::vector<int64_t> order(size_t(start.back()));
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t t = 0; t < tokens; ++t)
      if (inBlock(t))
        order[size_t(next[size_t(ids[t] - firstRow)]++)] = t;
  }
  // Each output row is written once, by whichever chunk owns it: zeros, a
  // copy, or a double sum in token order.
  parallelFor(vocab, rowGrain(hidden), [&](int64_t begin, int64_t end) {
    std::vector<double> acc;
    int64_t v = begin;
    while (v < end) {
      if (start[size_t(v)] == start[size_t(v) + 1]) {
        int64_t w = v + 1;
        while (w < end && start[size_t(w)] == start[size_t(w) + 1])
          ++w;
        std::memset(tableGrad + v * hidden, 0,
                    sizeof(float) * size_t((w - v) * hidden));
        v = w;
        continue;
      }
      int64_t first = start[size_t(v)], last = start[size_t(v) + 1];
      float *dst = tableGrad + v * hidden;
      if (last - first == 1) {
        std::memcpy(dst, resultGrad + order[size_t(first)] * hidden,
                    sizeof(float) * size_t(hidden));
      } else {
        acc.assign(size_t(hidden), 0.0);
        for (int64_t k = first; k < last; ++k)
          accumulateRow(resultGrad + order[size_t(k)] * hidden, acc.data(),
                        hidden);
        const double *__restrict src = acc.data();
        for (int64_t i = 0; i < hidden; ++i)
          dst[i] = static_cast<float>(src[i]);
      }
      ++v;
    }
  });
}

void geluGrad(const float *resultGrad, const float *input, float *inputGrad,
              int64_t count) {
  parallelFor(count, kElementGrain / 2, [&](int64_t begin, int64_t end) {
    geluGradRange(resultGrad + begin, input + begin, inputGrad + begin,
                  end - begin);
  });
}

void siluGrad(const float *resultGrad, const float *input, float *inputGrad,
              int64_t count) {
  parallelFor(count, kElementGrain / 2, [&](int64_t begin, int64_t end) {
    siluGradRange(resultGrad + begin, input + begin, inputGrad + begin,
                  end - begin);
  });
}

void layerNormGrad(const float *resultGrad, const float *input,
                   const float *gamma, float *inputGrad, float *gammaGrad,
                   float *betaGrad, int64_t rows, int64_t cols, float epsilon) {
  if (cols <= 0)
    return;
  if (rows <= 0) {
    std::fill(gammaGrad, gammaGrad + cols, 0.0f);
    std::fill(betaGrad, betaGrad + cols, 0.0f);
    return;
  }
  int64_t blockRows = normGradBlockRows(cols);
  int64_t blocks = (rows + blockRows - 1) / blockRows;
  // Per block: gamma partials [cols], then beta partials [cols].
  std::vector<double> partial(size_t(blocks * 2 * cols), 0.0);
  parallelFor(blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      double *accGamma = partial.data() + b * 2 * cols;
      double *accBeta = accGamma + cols;
      int64_t rowEnd = std::min(rows, (b + 1) * blockRows);
      for (int64_t r = b * blockRows; r < rowEnd; ++r)
        layerNormGradRow(resultGrad + r * cols, input + r * cols, gamma,
                         inputGrad + r * cols, accGamma, accBeta, cols,
                         epsilon);
    }
  });
  combineBlocks(partial, blocks, 2 * cols, 0, cols, gammaGrad);
  combineBlocks(partial, blocks, 2 * cols, cols, cols, betaGrad);
}

void rmsNormGrad(const float *resultGrad, const float *input,
                 const float *gamma, float *inputGrad, float *gammaGrad,
                 int64_t rows, int64_t cols, float epsilon) {
  if (cols <= 0)
    return;
  if (rows <= 0) {
    std::fill(gammaGrad, gammaGrad + cols, 0.0f);
    return;
  }
  int64_t blockRows = normGradBlockRows(cols);
  int64_t blocks = (rows + blockRows - 1) / blockRows;
  std::vector<double> partial(size_t(blocks * cols), 0.0);
  parallelFor(blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      double *accGamma = partial.data() + b * cols;
      int64_t rowEnd = std::min(rows, (b + 1) * blockRows);
      for (int64_t r = b * blockRows; r < rowEnd; ++r)
        rmsNormGradRow(resultGrad + r * cols, input + r * cols, gamma,
                       inputGrad + r * cols, accGamma, cols, epsilon);
    }
  });
  combineBlocks(partial, blocks, cols, 0, cols, gammaGrad);
}

void softmaxGrad(const float *resultGrad, const float *result, float *inputGrad,
                 int64_t rows, int64_t cols) {
  if (cols <= 0)
    return;
  parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *dy = resultGrad + r * cols;
      const float *y = result + r * cols;
      float *dx = inputGrad + r * cols; // may be dy or y
      float dot = static_cast<float>(dotDouble(dy, y, cols));
      TPC_INDEPENDENT_LOOP
      for (int64_t i = 0; i < cols; ++i)
        dx[i] = y[i] * (dy[i] - dot);
    }
  });
}

void crossEntropyGrad(const float *logits, const int32_t *targets,
                      float lossGrad, int64_t tokens, int64_t vocab,
                      float *logitsGrad) {
  checkIndices("crossEntropyGrad", "target", targets, tokens, vocab);
  if (tokens <= 0)
    return;
  double scale = double(lossGrad) / double(tokens);
  parallelFor(tokens, rowGrain(vocab, 8192), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float *row = logits + t * vocab;
      float *out = logitsGrad + t * vocab; // may be row
      int64_t target = targets[t];
      // The max and the sum of exps exactly as crossEntropy forms them.
      float m = maxFloat(row, vocab);
      double sum = expShiftedStore(row, m, out, vocab);
      double expTarget = out[target];
      scaleInPlace(out, static_cast<float>(scale / sum), vocab);
      // (p - 1) scale with 1 - p = (sum of the other exps) / sum, free of
      // the cancellation in p - 1 when p is near 1.
      out[target] = static_cast<float>(-scale * ((sum - expTarget) / sum));
    }
  });
}

void crossEntropyGradFromBlockStats(const float *logits, const int32_t *targets,
                                    float lossGrad, int64_t tokens,
                                    int64_t columns, int64_t firstColumn,
                                    const float *stats, int64_t blocks,
                                    float *logitsGrad) {
  if (tokens <= 0)
    return;
  double scale = double(lossGrad) / double(tokens);
  parallelFor(tokens, rowGrain(columns, 8192), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      // The row's global max and sum of exps, combined in block order as
      // crossEntropyFromBlockStats does.
      float m = stats[3 * t];
      for (int64_t b = 1; b < blocks; ++b)
        m = std::max(m, stats[3 * (b * tokens + t)]);
      double sum = 0.0;
      for (int64_t b = 0; b < blocks; ++b) {
        const float *block = stats + 3 * (b * tokens + t);
        sum += double(block[1]) * std::exp(double(block[0]) - double(m));
      }
      const float *row = logits + t * columns;
      float *out = logitsGrad + t * columns; // may be row
      int64_t target = int64_t(targets[t]) - firstColumn;
      double expTarget = target >= 0 && target < columns
                             ? std::exp(double(row[target]) - double(m))
                             : 0.0;
      expShiftedStore(row, m, out, columns);
      scaleInPlace(out, static_cast<float>(scale / sum), columns);
      if (target >= 0 && target < columns)
        out[target] = static_cast<float>(-scale * ((sum - expTarget) / sum));
    }
  });
}

void pad(const float *in, Shape inShape, std::span<const int64_t> offsets,
         float *out, Shape outShape) {
  size_t rank = outShape.size();
  checkWindow("pad", outShape, inShape, offsets);
  int64_t total = product(outShape);
  if (total == 0)
    return;
  if (product(inShape) == 0) {
    fill(0.0f, out, total);
    return;
  }
  // Output rows: the innermost dims where input and output agree, plus the
  // first differing one going outward. Within a row the input is one
  // contiguous run at `lo`.
  size_t k = rank;
  int64_t rowLen = 1, inRowLen = 1, lo = 0;
  while (k > 0) {
    --k;
    lo = offsets[k] * rowLen;
    rowLen *= outShape[k];
    inRowLen *= inShape[k];
    if (outShape[k] != inShape[k])
      break;
  }
  int64_t rows = total / rowLen;
  if (rows == 1) {
    parallelFor(rowLen, kElementGrain, [&](int64_t begin, int64_t end) {
      padSegment(in, lo, inRowLen, out, begin, end);
    });
    return;
  }
  std::vector<int64_t> inStrides = contiguousStrides(inShape);
  parallelFor(rows, rowGrain(rowLen), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> index(k);
    int64_t rest = begin;
    for (size_t d = k; d-- > 0;) {
      index[d] = rest % outShape[d];
      rest /= outShape[d];
    }
    for (int64_t row = begin; row < end; ++row) {
      bool inside = true;
      int64_t inOffset = 0;
      for (size_t d = 0; d < k; ++d) {
        int64_t i = index[d] - offsets[d];
        inside &= i >= 0 && i < inShape[d];
        inOffset += i * inStrides[d];
      }
      float *dst = out + row * rowLen;
      if (inside)
        padSegment(in + inOffset, lo, inRowLen, dst, 0, rowLen);
      else
        std::memset(dst, 0, sizeof(float) * size_t(rowLen));
      for (size_t d = k; d-- > 0;) {
        if (++index[d] < outShape[d])
          break;
        index[d] = 0;
      }
    }
  });
}

void fill(float value, float *out, int64_t count) {
  // +0.0f is all zero bits: memset (rep stosb) beats a store loop there.
  bool zero = std::bit_cast<uint32_t>(value) == 0;
  parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    if (zero)
      std::memset(out + begin, 0, sizeof(float) * size_t(end - begin));
    else
      std::fill(out + begin, out + end, value);
  });
}

float normSquared(const float *in, int64_t count) {
  if (count <= 0)
    return 0.0f;
  constexpr int64_t kBlock = int64_t(1) << 16;
  int64_t blocks = (count + kBlock - 1) / kBlock;
  std::vector<double> partial(size_t(blocks), 0.0);
  parallelFor(blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      partial[size_t(b)] = sumSquaredDouble(
          in + b * kBlock, std::min(kBlock, count - b * kBlock), 0.0);
  });
  double sum = 0.0;
  for (double p : partial)
    sum += p;
  return static_cast<float>(sum);
}

void adamw(const float *param, const float *grad, const float *expAvg,
           const float *expAvgSq, float lr, int64_t step, float gradScale,
           double beta1, double beta2, double epsilon, double weightDecay,
           float *newParam, float *newExpAvg, float *newExpAvgSq,
           int64_t count) {
  if (step < 1)
    throw std::runtime_error("adamw: step " + std::to_string(step) +
                             " is not 1-based");
  // Scalars in double, as torch computes them in Python, then rounded once.
  double bc1 = 1.0 - std::pow(beta1, double(step));
  double bc2 = 1.0 - std::pow(beta2, double(step));
  float b1 = static_cast<float>(beta1), c1 = static_cast<float>(1.0 - beta1);
  float b2 = static_cast<float>(beta2), c2 = static_cast<float>(1.0 - beta2);
  float decay = static_cast<float>(1.0 - double(lr) * weightDecay);
  float stepSize = static_cast<float>(double(lr) / bc1);
  float bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  float eps = static_cast<float>(epsilon);
  parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    adamwRange(param + begin, grad + begin, expAvg + begin, expAvgSq + begin,
               newParam + begin, newExpAvg + begin, newExpAvgSq + begin,
               end - begin, gradScale, b1, c1, b2, c2, decay, stepSize, bc2Sqrt,
               eps);
  });
}

float learningRate(int64_t step, float peak, float minLr, float warmup,
                   float decaySteps) {
  double s = double(step), p = double(peak), lo = double(minLr);
  double w = double(warmup), d = double(decaySteps);
  if (w > 0.0 && s <= w)
    return static_cast<float>(p * s / w);
  if (d <= w)
    return peak;
  if (s >= d)
    return minLr;
  double progress = (s - w) / (d - w);
  return static_cast<float>(
      lo + (p - lo) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
}

float clipScale(float sumSquares, float maxNorm) {
  if (!(maxNorm > 0.0f))
    return 1.0f;
  double coef = double(maxNorm) / (std::sqrt(double(sumSquares)) + 1e-6);
  // NaN propagates (as torch's clamp does); +inf norms give 0.
  if (std::isnan(coef))
    return std::numeric_limits<float>::quiet_NaN();
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

} // namespace tpc::runtime::cpu
