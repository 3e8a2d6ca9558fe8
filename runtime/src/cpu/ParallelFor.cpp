// The kernel thread pool and parallelFor, which every CPU kernel family
// splits its work with.

#include "tpc/runtime/cpu/Kernels.h"

#include <cblas.h> // openblas_set_num_threads

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tpc::runtime::cpu {

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

} // namespace tpc::runtime::cpu
