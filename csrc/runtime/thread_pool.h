// Persistent worker pool (DESIGN.md §7, NeoCPU §3.2). The calling thread takes part; workers
// grab chunks of the outermost parallel loop through an atomic counter, spin briefly after a job
// (back-to-back kernels find them awake) and then sleep on a condition variable, so a PyTorch
// fallback op running between our kernels does not compete with spinning workers; during a
// compiled graph's run (ThreadPool::Hold) they keep spinning.
// Precondition: none. Postcondition of parallel_for: every index of [0, n) ran exactly once.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace dnnfusion::runtime {

class ThreadPool final : public kernels::Parallel {
 public:
  explicit ThreadPool(int num_threads);  // total threads including the caller; >= 1
  ~ThreadPool() override;
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const override { return num_threads_; }
  void parallel_for(int64_t n, int64_t grain, const kernels::RangeFn& fn) const override;

  // Jobs run so far (for tests and stats).
  int64_t jobs_run() const { return jobs_run_.load(); }
  // Workers blocked on the condition variable right now (for tests).
  int sleeping_workers() const { return sleepers_.load(); }

  // While at least one Hold is alive the workers spin between jobs instead of sleeping, and
  // creating it wakes sleeping workers at once. An Executable holds the pool for one run(): all
  // of its steps are ours, so nothing else needs the cores, and a worker woken from sleep for
  // every parallel step after a serial one cost mobilenet_v2 ~0.6 ms per 5 ms call (a futex wake
  // of an idle vCPU is tens of µs). Outside runs the spin-then-sleep rule applies again.
  class Hold {
   public:
    explicit Hold(const ThreadPool& pool);
    ~Hold();
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    const ThreadPool& pool_;
  };

 private:
  struct alignas(64) Job {
    const kernels::RangeFn* fn = nullptr;
    int64_t n = 0;
    int64_t chunk = 1;
    std::atomic<int64_t> next{0};
    std::atomic<int> active{0};  // participants still working on this job
  };
  void worker_loop(int index);
  void run_chunks(Job& job) const;

  int num_threads_;
  std::vector<std::thread> workers_;
  mutable std::mutex submit_mu_;  // one job at a time; a concurrent caller runs serially
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::condition_variable done_cv_;
  mutable Job job_;
  alignas(64) mutable std::atomic<uint64_t> generation_{0};
  alignas(64) mutable std::atomic<int> sleepers_{0};
  mutable std::atomic<bool> stop_{false};
  mutable std::mutex err_mu_;
  mutable std::exception_ptr error_;
  mutable std::atomic<int64_t> jobs_run_{0};
  alignas(64) mutable std::atomic<int> holds_{0};
};

// Physical cores available to this process (one hardware thread per core), at least 1.
int physical_core_count();

// Process-wide pool with `threads` threads (<= 0: physical_core_count()). Pools live until exit.
ThreadPool& shared_pool(int threads);

}  // namespace dnnfusion::runtime
