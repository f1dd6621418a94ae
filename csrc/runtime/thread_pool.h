// Persistent worker pool (NeoCPU §3.2). The calling thread takes part; each thread
// owns a fixed contiguous part of the outermost parallel loop (thread t: [t*n/T, (t+1)*n/T)),
// works through it in chunks and then takes chunks from the back of parts not yet done. Workers
// spin briefly after a job (back-to-back kernels find them awake) and then sleep on a condition
// variable, so a PyTorch fallback op running between our kernels does not compete with spinning
// workers; during a compiled graph's run (ThreadPool::Hold) they keep spinning.
// Precondition: none. Postcondition of parallel_for: every index of [0, n) ran exactly once.
#pragma once
#include <sched.h>

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
  // Whether worker `index` (1 .. num_threads()-1) may run on `cpu` (for tests).
  bool worker_may_run_on(int index, int cpu) const;
  // Whether workers are steered off the caller's CPU (DNNFUSION_NO_AFFINITY=1 turns it off).
  bool steering() const { return steer_; }

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
    int64_t grain = 1;  // shares and chunks count grain-sized units of [0, n)
    int64_t chunk = 1;  // units per take
    std::atomic<bool> stop{false};  // an exception: hand out no more work
    std::atomic<int> active{0};     // participants still working on this job
  };
  // Thread t's contiguous part of a job, [begin, end). Its owner takes chunks from the front; a
  // thread that ran out of work takes chunks from the back. Why fixed parts: consecutive kernels
  // that order their work the same way (spatially, see conv2d_nchwc) then have each thread read
  // what the same thread wrote one kernel earlier, from its own core's L2, instead of half of it
  // from the other core's; stealing still rebalances when one thread starts late or runs slow.
  struct alignas(64) Share {
    std::atomic<bool> busy{false};
    int64_t begin = 0, end = 0;  // in units
  };
  void worker_loop(int index);
  void run_chunks(Job& job, int self) const;
  // Takes up to `chunk` units from s (front or back) into [b, e); false when s is empty.
  static bool take(Share& s, int64_t chunk, bool front, int64_t& b, int64_t& e);
  // Restricts the workers to their home CPUs (the affinity of the thread that built the pool)
  // minus the one the calling thread runs on now, when that changed since the last call (one
  // sched_getcpu per call, a syscall per worker only on change). Why: a worker woken after
  // sleeping is often placed on the waker's CPU (wake affinity) and then time-shares it with the
  // caller, which spins or blocks waiting for it, while the other vCPU idles; the load balancer
  // treats both as cache-hot and leaves them. Measured on 2 KVM vCPUs, mobilenet_v3_large after
  // a 50 ms idle: 12.6 ms per call with ~12 involuntary switches of the worker per call, 5.3 ms
  // with none once the worker was kept off the caller's CPU (3.6 ms back to back). Skipped when
  // the home CPUs are fewer than the pool's threads (the pool oversubscribes anyway).
  void steer_workers() const;
  int num_threads_;
  std::vector<std::thread> workers_;
  std::vector<std::thread::native_handle_type> handles_;  // of workers_, for affinity calls
  mutable std::mutex submit_mu_;  // one job at a time; a concurrent caller runs serially
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::condition_variable done_cv_;
  mutable Job job_;
  std::unique_ptr<Share[]> shares_;  // one per thread, the caller's first (written under submit_mu_)
  alignas(64) mutable std::atomic<uint64_t> generation_{0};
  alignas(64) mutable std::atomic<int> sleepers_{0};
  mutable std::atomic<bool> stop_{false};
  mutable std::mutex err_mu_;
  mutable std::exception_ptr error_;
  mutable std::atomic<int64_t> jobs_run_{0};
  alignas(64) mutable std::atomic<int> holds_{0};
  bool steer_ = true;
  cpu_set_t home_;  // CPUs the workers may use when not steered
  mutable std::mutex steer_mu_;
  mutable int steered_cpu_ = -1;  // caller CPU the workers were last kept off (under steer_mu_)
};

// Physical cores available to this process (one hardware thread per core), at least 1.
int physical_core_count();

// Process-wide pool with `threads` threads (<= 0: physical_core_count()). Pools live until exit.
ThreadPool& shared_pool(int threads);

}  // namespace dnnfusion::runtime
