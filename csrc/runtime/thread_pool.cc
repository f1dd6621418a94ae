#include "runtime/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "common/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DNNF_PAUSE() _mm_pause()
#else
#define DNNF_PAUSE() std::this_thread::yield()
#endif

namespace dnnfusion::runtime {

namespace {
thread_local bool tl_in_parallel = false;
// About 50-100 µs of spinning: long enough to bridge back-to-back kernels, short enough not to
// steal a core from a PyTorch op that runs between two of our blocks.
constexpr int kSpinIterations = 20000;
}  // namespace

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(std::max(1, num_threads)), shares_(new Share[static_cast<size_t>(std::max(1, num_threads))]) {
  const char* off = std::getenv("DNNFUSION_NO_AFFINITY");
  CPU_ZERO(&home_);
  // Too few CPUs to keep one free for the caller: the scheduler places everyone.
  steer_ = !(off && *off && std::strcmp(off, "0") != 0) && sched_getaffinity(0, sizeof(home_), &home_) == 0 &&
           CPU_COUNT(&home_) >= num_threads_;
  for (int i = 1; i < num_threads_; ++i) {
    workers_.emplace_back([this, i] { worker_loop(i); });
    handles_.push_back(workers_.back().native_handle());
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

bool ThreadPool::take(Share& s, int64_t chunk, bool front, int64_t& b, int64_t& e) {
  while (s.busy.exchange(true, std::memory_order_acquire)) DNNF_PAUSE();
  const bool any = s.begin < s.end;
  if (any && front) {
    b = s.begin;
    e = std::min(s.end, b + chunk);
    s.begin = e;
  } else if (any) {
    e = s.end;
    b = std::max(s.begin, e - chunk);
    s.end = b;
  }
  s.busy.store(false, std::memory_order_release);
  return any;
}

void ThreadPool::run_chunks(Job& job, int self) const {
  const bool was = tl_in_parallel;
  tl_in_parallel = true;
  for (int k = 0; k < num_threads_; ++k) {  // own part first, then the others' from the back
    Share& s = shares_[(self + k) % num_threads_];
    int64_t b = 0, e = 0;
    while (!job.stop.load(std::memory_order_relaxed) && take(s, job.chunk, k == 0, b, e)) {
      try {
        (*job.fn)(b * job.grain, std::min(job.n, e * job.grain));
      } catch (...) {
        std::lock_guard<std::mutex> lk(err_mu_);
        if (!error_) error_ = std::current_exception();
        job.stop.store(true);
      }
    }
  }
  tl_in_parallel = was;
}

void ThreadPool::steer_workers() const {
  if (!steer_ || workers_.empty()) return;
  const int cpu = sched_getcpu();
  if (cpu < 0) return;
  std::unique_lock<std::mutex> lk(steer_mu_, std::try_to_lock);
  if (!lk.owns_lock() || cpu == steered_cpu_) return;
  cpu_set_t set = home_;
  if (cpu < CPU_SETSIZE && CPU_ISSET(cpu, &set)) CPU_CLR(cpu, &set);
  for (auto h : handles_) pthread_setaffinity_np(h, sizeof(set), &set);
  steered_cpu_ = cpu;
}

bool ThreadPool::worker_may_run_on(int index, int cpu) const {
  DNNF_CHECK(index >= 1 && index < num_threads_, "worker index ", index, " is out of range [1, ",
             num_threads_, ")");
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(handles_[index - 1], sizeof(set), &set) != 0)
    return true;
  return cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, &set);
}

ThreadPool::Hold::Hold(const ThreadPool& pool) : pool_(pool) {
  pool_.steer_workers();
  if (pool_.holds_.fetch_add(1) == 0 && pool_.sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lk(pool_.mu_);
    pool_.cv_.notify_all();
  }
}

ThreadPool::Hold::~Hold() { pool_.holds_.fetch_sub(1); }

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    int spins = 0;
    while (g == seen && (spins < kSpinIterations || holds_.load(std::memory_order_relaxed) > 0)) {
      DNNF_PAUSE();
      ++spins;
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lk(mu_);
      sleepers_.fetch_add(1);
      // A Hold wakes us too: back to spinning, so its run's first job finds us awake.
      cv_.wait(lk, [&] { return generation_.load() != seen || holds_.load() > 0; });
      sleepers_.fetch_sub(1);
      continue;
    }
    seen = g;
    if (stop_.load()) return;
    run_chunks(job_, index);
    if (job_.active.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lk(mu_);
      done_cv_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const kernels::RangeFn& fn) const {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (num_threads_ == 1 || tl_in_parallel || n <= grain) {
    fn(0, n);
    return;
  }
  std::unique_lock<std::mutex> submit(submit_mu_, std::try_to_lock);
  if (!submit.owns_lock()) {  // another thread is using the pool: do not queue behind it
    fn(0, n);
    return;
  }
  steer_workers();  // the caller may have moved since the run began
  // A few chunks per thread balance uneven work without paying much for the locks.
  const int64_t units = (n + grain - 1) / grain, max_chunks = static_cast<int64_t>(num_threads_) * 4;
  job_.fn = &fn;
  job_.n = n;
  job_.grain = grain;
  job_.chunk = (units + max_chunks - 1) / max_chunks;
  job_.stop.store(false);
  for (int t = 0; t < num_threads_; ++t) {
    shares_[t].begin = units * t / num_threads_;
    shares_[t].end = units * (t + 1) / num_threads_;
  }
  job_.active.store(num_threads_ - 1);
  error_ = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load() > 0) cv_.notify_all();
  run_chunks(job_, 0);
  // Wait for the workers: spin first (they finish about when we do), then block.
  int spins = 0;
  while (job_.active.load(std::memory_order_acquire) > 0 && spins < kSpinIterations) {
    DNNF_PAUSE();
    ++spins;
  }
  if (job_.active.load() > 0) {
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return job_.active.load() == 0; });
  }
  jobs_run_.fetch_add(1);
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

int physical_core_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int allowed = 0;
  std::set<std::pair<std::string, std::string>> cores;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &set)) continue;
      ++allowed;
      std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
      std::ifstream core(base + "core_id"), pkg(base + "physical_package_id");
      std::string c, p;
      if (core >> c && pkg >> p) cores.emplace(p, c);
      else cores.emplace("cpu", std::to_string(cpu));
    }
  }
  int n = cores.empty() ? allowed : static_cast<int>(cores.size());
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, n);
}

ThreadPool& shared_pool(int threads) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  if (threads <= 0) threads = physical_core_count();
  DNNF_CHECK(threads <= 1024, "thread count ", threads, " is out of range (1..1024)");
  std::lock_guard<std::mutex> lk(mu);
  auto& p = pools[threads];
  if (!p) p = std::make_unique<ThreadPool>(threads);
  return *p;
}

}  // namespace dnnfusion::runtime
