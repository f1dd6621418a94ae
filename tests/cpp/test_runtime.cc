// Runtime: memory planner, thread pool, executor (aliasing, liveness, errors) and the
// constant-folding pass with the pipeline around it.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "common/error.h"
#include "common/large_alloc.h"
#include "ecg/verifier.h"
#include "kernel_test_util.h"
#include "pipeline.h"
#include "rewrite/fold_constants.h"
#include "runtime/executor.h"
#include "runtime/memory_planner.h"
#include "runtime/thread_pool.h"

using namespace dnnfusion;
using namespace dnnfusion::runtime;
using ecg::Graph;

// ---------------- memory planner ----------------
namespace {
void expect_valid_plan(const std::vector<BufferRequest>& reqs, const MemoryPlan& p) {
  ASSERT_EQ(p.offsets.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(p.offsets[i] % 64, 0);
    EXPECT_LE(p.offsets[i] + reqs[i].size, p.arena_bytes);
    for (size_t j = i + 1; j < reqs.size(); ++j) {
      bool live_together = reqs[i].first <= reqs[j].last && reqs[j].first <= reqs[i].last;
      bool disjoint = p.offsets[i] + reqs[i].size <= p.offsets[j] || p.offsets[j] + reqs[j].size <= p.offsets[i];
      if (live_together && reqs[i].size > 0 && reqs[j].size > 0) {
        EXPECT_TRUE(disjoint) << "buffers " << i << " and " << j << " overlap";
      }
    }
  }
}
}  // namespace

TEST(MemoryPlanner, ChainReusesBuffers) {
  // a -> b -> c -> d: each buffer dies when the next is written, so two slots suffice.
  std::vector<BufferRequest> reqs = {{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}, {1000, 3, 4}};
  MemoryPlan p = plan_memory(reqs);
  expect_valid_plan(reqs, p);
  EXPECT_EQ(p.arena_bytes, 2 * 1024);
  EXPECT_EQ(p.naive_bytes, 4 * 1024);
}

TEST(MemoryPlanner, RandomLifetimesNeverOverlapAndBeatNaive) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  SCOPED_TRACE(dnnfusion::testing::seed_note());
  for (int trial = 0; trial < 200; ++trial) {
    int n = static_cast<int>(dnnfusion::testing::rand_int(rng, 1, 40));
    std::vector<BufferRequest> reqs;
    for (int i = 0; i < n; ++i) {
      int first = static_cast<int>(dnnfusion::testing::rand_int(rng, 0, 30));
      int last = first + static_cast<int>(dnnfusion::testing::rand_int(rng, 0, 10));
      reqs.push_back({dnnfusion::testing::rand_int(rng, 0, 5000), first, last});
    }
    MemoryPlan p = plan_memory(reqs);
    expect_valid_plan(reqs, p);
    EXPECT_LE(p.arena_bytes, p.naive_bytes);
    // The peak can never be below the largest set of simultaneously live buffers.
    int64_t lower = 0;
    for (int step = 0; step <= 40; ++step) {
      int64_t live = 0;
      for (auto& r : reqs)
        if (r.first <= step && step <= r.last) live += (r.size + 63) / 64 * 64;
      lower = std::max(lower, live);
    }
    EXPECT_GE(p.arena_bytes, lower);
  }
}

TEST(MemoryPlanner, RejectsBadRequests) {
  EXPECT_THROW(plan_memory({{10, 3, 1}}), Error);
  EXPECT_THROW(plan_memory({{-1, 0, 1}}), Error);
  EXPECT_THROW(plan_memory({{1, 0, 1}}, 48), Error);
}

// ---------------- thread pool ----------------
TEST(ThreadPool, CoversRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 3, 7, 64, 1000, 100003}) {
    for (int64_t grain : {1, 5, 4096}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (auto& h : hits) h = 0;
      pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
        EXPECT_LT(b, e);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ThreadPool, UsesSeveralThreadsAndNestsSerially) {
  ThreadPool pool(2);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> inner_calls{0};
  for (int rep = 0; rep < 50 && ids.size() < 2; ++rep)
    pool.parallel_for(64, 1, [&](int64_t b, int64_t e) {
      {
        std::lock_guard<std::mutex> lk(mu);
        ids.insert(std::this_thread::get_id());
      }
      pool.parallel_for(10, 1, [&](int64_t ib, int64_t ie) {
        EXPECT_EQ(ib, 0);  // nested call runs serially as one chunk
        EXPECT_EQ(ie, 10);
        inner_calls++;
      });
      // Each chunk takes real time, so a worker woken late (a loaded CI machine) still finds work
      // before the caller has drained the range.
      std::this_thread::sleep_for(std::chrono::microseconds(300 * (e - b)));
    });
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_GT(inner_calls.load(), 0);
}

TEST(ThreadPool, RethrowsWorkerExceptionsAndStaysUsable) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100, 1, [&](int64_t b, int64_t) {
    if (b >= 50) throw Error("boom");
  }), Error);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 100);
}

TEST(ThreadPool, SleepsAfterIdleAndWakesUp) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(10, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // workers go to sleep
  pool.parallel_for(10, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 20);
  EXPECT_EQ(pool.jobs_run(), 2);
  EXPECT_GE(physical_core_count(), 1);
}

namespace {
// Polls until pool.sleeping_workers() == want (sleep and wake-up are asynchronous); false after 5 s.
bool wait_for_sleepers(const ThreadPool& pool, int want) {
  for (int i = 0; i < 5000; ++i) {
    if (pool.sleeping_workers() == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pool.sleeping_workers() == want;
}
}  // namespace

TEST(ThreadPool, HoldWakesWorkersAndKeepsThemSpinning) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(10, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  ASSERT_TRUE(wait_for_sleepers(pool, 2));  // idle: both workers sleep
  {
    const ThreadPool::Hold hold(pool);
    ASSERT_TRUE(wait_for_sleepers(pool, 0));  // woken by the hold, before any job
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // far past the spin budget
    EXPECT_EQ(pool.sleeping_workers(), 0);
    const ThreadPool::Hold nested(pool);
    pool.parallel_for(10, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  }
  EXPECT_EQ(sum.load(), 20);
  EXPECT_TRUE(wait_for_sleepers(pool, 2));  // released: back to spin-then-sleep
  pool.parallel_for(10, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 30);
}

namespace {
// The CPUs the calling thread may use.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}
void pin_self(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  ASSERT_EQ(sched_setaffinity(0, sizeof(set), &set), 0);
}
}  // namespace

// A worker must not share the submitting thread's CPU (a woken worker placed there time-shared
// it with the caller while the other CPU idled), and follows the caller when it moves.
TEST(ThreadPool, KeepsWorkersOffTheCallersCpu) {
  const std::vector<int> cpus = allowed_cpus();
  std::atomic<int64_t> sum{0};
  auto job = [&](int64_t b, int64_t e) { sum += e - b; };
  // More threads than CPUs: nothing to steer, workers may go anywhere.
  ThreadPool big(static_cast<int>(cpus.size()) + 1);
  EXPECT_FALSE(big.steering());
  big.parallel_for(64, 1, job);
  for (int w = 1; w < big.num_threads(); ++w)
    for (int c : cpus) EXPECT_TRUE(big.worker_may_run_on(w, c));
  EXPECT_EQ(sum.load(), 64);
  EXPECT_THROW(big.worker_may_run_on(big.num_threads(), cpus[0]), Error);
  if (cpus.size() < 2) return;  // the steering below needs a second CPU
  ThreadPool pool(2);
  ASSERT_TRUE(pool.steering());
  pin_self({cpus[0]});
  {
    const ThreadPool::Hold hold(pool);
    EXPECT_FALSE(pool.worker_may_run_on(1, cpus[0]));
    EXPECT_TRUE(pool.worker_may_run_on(1, cpus[1]));
    pool.parallel_for(8, 1, job);
  }
  pin_self({cpus[1]});  // the caller moved: the next job sends the worker elsewhere
  pool.parallel_for(8, 1, job);
  EXPECT_FALSE(pool.worker_may_run_on(1, cpus[1]));
  EXPECT_TRUE(pool.worker_may_run_on(1, cpus[0]));
  pin_self(cpus);
  EXPECT_EQ(sum.load(), 64 + 8 * 2);
}

TEST(ThreadPool, AffinitySteeringCanBeTurnedOff) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_EQ(setenv("DNNFUSION_NO_AFFINITY", "1", 1), 0);
  ThreadPool pool(2);
  ASSERT_EQ(unsetenv("DNNFUSION_NO_AFFINITY"), 0);
  EXPECT_FALSE(pool.steering());
  pin_self({cpus.back()});
  std::atomic<int64_t> sum{0};
  pool.parallel_for(8, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  pin_self(cpus);
  EXPECT_EQ(sum.load(), 8);
  for (int c : cpus) EXPECT_TRUE(pool.worker_may_run_on(1, c));
}

namespace {
// Polls until flag(); false after 5 s (a deadlock in the code under test fails instead of hanging).
template <class F>
bool eventually(F flag) {
  for (int i = 0; i < 5000 && !flag(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return flag();
}
}  // namespace

// Thread t starts at the front of its own share [t*n/T, (t+1)*n/T), so a kernel's rows go to the
// same thread in every job; a thread done with its share takes the rest of another from the back.
TEST(ThreadPool, EachThreadStartsOnItsOwnShareAndStealsFromTheBack) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> ran(8);
  std::vector<std::thread::id> who(8);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> first_met{false};
  std::atomic<int> arrived{0};
  // Both shares' first chunks (indices 0 and 4) wait for each other: each thread started on its own.
  // Then index 4 waits for 5..7, which only the other thread can run: stolen from the back of share 1.
  pool.parallel_for(8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      who[i] = std::this_thread::get_id();
      if (i == 0 || i == 4) {
        if (arrived.fetch_add(1) == 1) first_met = true;
        EXPECT_TRUE(eventually([&] { return first_met.load(); })) << "index " << i;
      }
      if (i == 4) {
        EXPECT_TRUE(eventually([&] { return ran[5] && ran[6] && ran[7]; }));
      }
      ran[i].fetch_add(1);
    }
  });
  for (int i = 0; i < 8; ++i) EXPECT_EQ(ran[i].load(), 1) << "index " << i;
  EXPECT_EQ(who[0], caller);
  EXPECT_NE(who[4], caller);
  for (int i = 5; i < 8; ++i) EXPECT_NE(who[i], who[4]) << "index " << i;
}

// Shares and chunks are whole grains: every chunk but the one holding the last index is a multiple
// of the grain, and starts on one.
TEST(ThreadPool, ChunksAreWholeGrains) {
  ThreadPool pool(3);
  for (int64_t n : {7, 10, 64, 1000, 1001})
    for (int64_t grain : {1, 3, 8, 64}) {
      std::mutex mu;
      std::vector<std::pair<int64_t, int64_t>> chunks;
      pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
        std::lock_guard<std::mutex> lk(mu);
        chunks.emplace_back(b, e);
      });
      std::sort(chunks.begin(), chunks.end());
      int64_t at = 0;
      for (auto [b, e] : chunks) {
        EXPECT_EQ(b, at) << "n=" << n << " grain=" << grain;
        EXPECT_EQ(b % grain, 0) << "n=" << n << " grain=" << grain;
        if (e != n) {
          EXPECT_EQ((e - b) % grain, 0) << "n=" << n << " grain=" << grain;
        }
        at = e;
      }
      EXPECT_EQ(at, n);
    }
}

// Workers caught at every point of dozing off and waking up (random sizes, random idle gaps):
// every job still covers its range exactly once, and no chunk of a job runs after its
// parallel_for returned.
TEST(ThreadPool, WorkersWakingAtAnyPointNeverRunAFinishedJob) {
  ThreadPool pool(3);
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  std::atomic<int64_t> current{-1};
  std::atomic<int> stale{0};
  for (int64_t job = 0; job < 400; ++job) {
    const int64_t n = dnnfusion::testing::rand_int(rng, 1, 300);
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    for (auto& h : hits) h = 0;
    current = job;
    pool.parallel_for(n, 1, [&, job](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
      if (current.load() != job) ++stale;
    });
    current = -1;  // a chunk of this job running from now on would be counted stale
    int64_t wrong = 0;
    for (auto& h : hits) wrong += h.load() != 1;
    ASSERT_EQ(wrong, 0) << "job " << job << " n=" << n << " " << dnnfusion::testing::seed_note();
    const int gap = static_cast<int>(dnnfusion::testing::rand_int(rng, 0, 9));
    if (gap >= 7) std::this_thread::sleep_for(std::chrono::microseconds(200 * gap));  // let workers doze off
  }
  EXPECT_EQ(stale.load(), 0);
  EXPECT_EQ(pool.jobs_run(), 400);
}

// ---------------- executor ----------------
namespace {
// y = relu(x * 2 + b), then permuted and viewed: exercises weights, scalar constants, an
// elementwise chain, a non-contiguous view (copied) and a contiguous view (aliased).
struct SmallNet {
  Graph g;
  std::vector<float> bias = {0.5f, -1.f, 2.f};
  SmallNet() {
    int x = g.add_input({2, 3}, DType::Float32, "x");
    int b = g.add_weight({3}, DType::Float32, bias.data(), "b");
    float two = 2.f;
    int c2 = g.add_constant({}, DType::Float32, &two, "two");
    int m = g.node(g.add_node("mul", {x, c2}, {{{2, 3}, DType::Float32}})).outputs[0];
    int a = g.node(g.add_node("add", {m, b}, {{{2, 3}, DType::Float32}})).outputs[0];
    int r = g.node(g.add_node("relu", {a}, {{{2, 3}, DType::Float32}})).outputs[0];
    int p = g.node(g.add_node("permute", {r}, {{{3, 2}, DType::Float32}}, {{"dims", std::vector<int64_t>{1, 0}}})).outputs[0];
    int v = g.node(g.add_node("view", {p}, {{{6}, DType::Float32}}, {{"size", std::vector<int64_t>{6}}})).outputs[0];
    int s = g.node(g.add_node("sum", {v}, {{{}, DType::Float32}}, {{"dim", std::vector<int64_t>{0}}})).outputs[0];
    g.set_outputs({v, s});
  }
  static void reference(const std::vector<float>& x, const std::vector<float>& bias, std::vector<float>* v, float* s) {
    v->assign(6, 0.f);
    *s = 0;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) {
        float y = std::max(0.f, x[i * 3 + j] * 2.f + bias[j]);
        (*v)[j * 2 + i] = y;
        *s += y;
      }
  }
};
}  // namespace

TEST(Executor, RunsSmallNetAndMatchesReference) {
  SmallNet net;
  Executable exe(net.g, ExecOptions{2});
  std::vector<float> x = {1, -2, 3, -0.25f, 0.5f, -3};
  std::vector<float> v(6), ref;
  float s = 0, sref = 0;
  exe.run({x.data()}, {v.data(), &s});
  SmallNet::reference(x, net.bias, &ref, &sref);
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(v[i], ref[i]) << i;
  EXPECT_NEAR(s, sref, 1e-5);
  // mul, add, relu, permute (strided copy), sum: the view of an output is materialized too.
  EXPECT_EQ(exe.stats().num_nodes, 6);
  EXPECT_GT(exe.stats().arena_bytes, 0);
  EXPECT_LE(exe.stats().arena_bytes, exe.stats().naive_bytes);
}

// The constants the graph owns and its steps read are copied into one huge-page block
// (Executable::gather_constants); borrowed weights and unread constants stay where they are.
TEST(Executor, OwnedConstantsAreGatheredIntoOneBlock) {
  Graph g;
  const int64_t n = (int64_t{3} << 20) / 4 + 5;  // past a huge page: the block is advised for them
  std::vector<float> a(static_cast<size_t>(n)), w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) a[i] = 0.25f * static_cast<float>(i % 97), w[i] = -static_cast<float>(i % 13);
  float three = 3.f, unused = 7.f;
  int x = g.add_input({n}, DType::Float32, "x");
  int ca = g.add_constant({n}, DType::Float32, a.data(), "a");
  int c3 = g.add_constant({}, DType::Float32, &three, "three");
  g.add_constant({}, DType::Float32, &unused, "unused");
  int wv = g.add_weight({n}, DType::Float32, w.data(), "w");
  int m = g.node(g.add_node("mul", {x, c3}, {{{n}, DType::Float32}})).outputs[0];
  int s = g.node(g.add_node("add", {m, ca}, {{{n}, DType::Float32}})).outputs[0];
  int y = g.node(g.add_node("add", {s, wv}, {{{n}, DType::Float32}})).outputs[0];
  g.set_outputs({y});
  Executable exe(g, ExecOptions{2});
  const Graph& eg = exe.graph();
  EXPECT_EQ(exe.stats().constant_bytes, (n * 4 + 63) / 64 * 64 + 64);
  const char* pa = static_cast<const char*>(eg.value(ca).data);
  const char* p3 = static_cast<const char*>(eg.value(c3).data);
  EXPECT_EQ(p3 - pa, (n * 4 + 63) / 64 * 64);  // one block, in value order, 64-byte aligned
  // Advised wherever the kernel has transparent huge pages at all.
  EXPECT_EQ(is_huge_page_advised(pa), std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good());
  EXPECT_EQ(eg.value(wv).data, w.data());      // borrowed: the caller owns it
  EXPECT_NE(eg.value(ca).data, g.value(ca).data);  // the caller's graph keeps its own copy
  std::vector<float> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<float>(i % 31) - 15.f;
  exe.run({in.data()}, {out.data()});
  for (int64_t i = 0; i < n; i += 4099) ASSERT_FLOAT_EQ(out[i], in[i] * 3.f + a[i] + w[i]) << i;
  ASSERT_FLOAT_EQ(out[n - 1], in[n - 1] * 3.f + a[n - 1] + w[n - 1]);
}

TEST(Executor, ContiguousViewsAreAliasedNotLaunched) {
  Graph g;
  int x = g.add_input({4, 6}, DType::Float32);
  int r = g.node(g.add_node("relu", {x}, {{{4, 6}, DType::Float32}})).outputs[0];
  int v = g.node(g.add_node("view", {r}, {{{24}, DType::Float32}}, {{"size", std::vector<int64_t>{24}}})).outputs[0];
  int u = g.node(g.add_node("unsqueeze", {v}, {{{1, 24}, DType::Float32}}, {{"dim", int64_t{0}}})).outputs[0];
  int sl = g.node(g.add_node("slice", {x}, {{{2, 6}, DType::Float32}}, {{"dim", int64_t{0}}, {"start", int64_t{2}}, {"end", int64_t{4}}, {"step", int64_t{1}}})).outputs[0];
  int n = g.node(g.add_node("neg", {u}, {{{1, 24}, DType::Float32}})).outputs[0];
  int e = g.node(g.add_node("exp", {sl}, {{{2, 6}, DType::Float32}})).outputs[0];
  g.set_outputs({n, e});
  Executable exe(g, ExecOptions{1});
  EXPECT_EQ(exe.stats().aliased_views, 3);      // view, unsqueeze, slice of rows
  EXPECT_EQ(exe.stats().kernels_per_call, 3);  // relu, neg, exp
  std::vector<float> in(24), o1(24), o2(12);
  std::iota(in.begin(), in.end(), -12.f);
  exe.run({in.data()}, {o1.data(), o2.data()});
  for (int i = 0; i < 24; ++i) EXPECT_FLOAT_EQ(o1[i], -std::max(0.f, in[i]));
  for (int i = 0; i < 12; ++i) EXPECT_FLOAT_EQ(o2[i], std::exp(in[12 + i]));
}

// A program alias of a graph input (a fused slice + view, after_step = -1) takes effect before
// the first step is bound, so a library view of it (the unsqueeze) aliases the input's rows.
TEST(Executor, ProgramAliasOfAnInputIsInPlaceBeforeTheFirstStep) {
  Graph g;
  int x = g.add_input({6, 4}, DType::Float32);
  int sl = g.node(g.add_node("slice", {x}, {{{2, 4}, DType::Float32}},
                             {{"dim", int64_t{0}}, {"start", int64_t{3}}, {"end", int64_t{5}}, {"step", int64_t{1}}})).outputs[0];
  int v = g.node(g.add_node("view", {sl}, {{{8}, DType::Float32}}, {{"size", std::vector<int64_t>{8}}})).outputs[0];
  int u = g.node(g.add_node("unsqueeze", {v}, {{{1, 8}, DType::Float32}}, {{"dim", int64_t{0}}})).outputs[0];
  int n = g.node(g.add_node("neg", {u}, {{{1, 8}, DType::Float32}})).outputs[0];
  g.set_outputs({n});
  Program prog;
  prog.aliases.push_back(Alias{sl, x, 3 * 4 * 4, -1});
  prog.aliases.push_back(Alias{v, sl, 0, -1});
  for (int node : {2, 3}) {
    Step st;
    st.node = node;
    prog.steps.push_back(st);
  }
  Executable exe(g, ExecOptions{1}, prog);
  std::vector<float> in(24), out(8, 0.f);
  std::iota(in.begin(), in.end(), 0.f);
  exe.run({in.data()}, {out.data()});
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(out[i], -in[12 + i]) << i;
}

TEST(Executor, UnsupportedNodeIsRejectedNamingTheNode) {
  Graph g;
  int x = g.add_input({1, 2, 4, 4}, DType::Float32);
  std::vector<float> w(2 * 2 * 3 * 3, 1.f);
  int wt = g.add_weight({2, 2, 3, 3}, DType::Float32, w.data());
  int c = g.node(g.add_node("convolution", {x, wt, -1}, {{{1, 2, 6, 6}, DType::Float32}}, {{"transposed", int64_t{1}}}, "aten.convolution.default")).outputs[0];
  g.set_outputs({c});
  try {
    Executable exe(g, ExecOptions{1});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("convolution"), std::string::npos) << msg;
    EXPECT_NE(msg.find("transposed"), std::string::npos) << msg;
  }
}

TEST(Executor, KernelErrorsNameTheNodeAndShapes) {
  Graph g;
  std::vector<float> table(4 * 3, 1.f);
  int t = g.add_weight({4, 3}, DType::Float32, table.data());
  int idx = g.add_input({2}, DType::Int64);
  int e = g.node(g.add_node("embedding", {t, idx}, {{{2, 3}, DType::Float32}}, {}, "aten.embedding.default")).outputs[0];
  g.set_outputs({e});
  Executable exe(g, ExecOptions{1});
  std::vector<int64_t> bad = {1, 9};
  std::vector<float> out(6);
  try {
    exe.run({bad.data()}, {out.data()});
    FAIL() << "expected an error";
  } catch (const Error& err) {
    std::string msg = err.what();
    EXPECT_NE(msg.find("aten.embedding.default"), std::string::npos) << msg;
    EXPECT_NE(msg.find("4x3"), std::string::npos) << msg;
  }
  std::vector<int64_t> good = {1, 3};
  EXPECT_NO_THROW(exe.run({good.data()}, {out.data()}));
}

// ---------------- constant folding + pipeline ----------------
TEST(FoldConstants, FoldsWeightOnlySubgraphsAndKeepsValues) {
  // out = x @ t(W) + (arange(3) * 2): t(W) and the arange chain are weight-only.
  Graph g;
  std::vector<float> W = {1, 2, 3, 4, 5, 6};  // [3, 2]
  int x = g.add_input({1, 2}, DType::Float32, "x");
  int w = g.add_weight({3, 2}, DType::Float32, W.data(), "W");
  int wt = g.node(g.add_node("t", {w}, {{{2, 3}, DType::Float32}})).outputs[0];
  int ar = g.node(g.add_node("arange", {}, {{{3}, DType::Float32}}, {{"start", int64_t{0}}, {"end", int64_t{3}}, {"step", int64_t{1}}})).outputs[0];
  float two = 2.f;
  int c = g.add_constant({}, DType::Float32, &two);
  int ar2 = g.node(g.add_node("mul", {ar, c}, {{{3}, DType::Float32}})).outputs[0];
  int mm = g.node(g.add_node("mm", {x, wt}, {{{1, 3}, DType::Float32}})).outputs[0];
  int out = g.node(g.add_node("add", {mm, ar2}, {{{1, 3}, DType::Float32}})).outputs[0];
  g.set_outputs({out});

  CompileOptions opts;
  opts.threads = 1;
  Compiled compiled = compile_graph(g, opts);
  EXPECT_GE(compiled.stats.folded_nodes, 3);  // t, arange, mul (and whatever the rewrites leave on weights)
  const Graph& after = compiled.exe->graph();
  EXPECT_NO_THROW(ecg::verify_graph(after));
  ASSERT_LE(after.nodes().size(), 2u);  // mm + add, or one addmm after rewriting
  EXPECT_TRUE(after.nodes()[0].op == "mm" || after.nodes()[0].op == "addmm" || after.nodes()[0].op == "mm_packed")
      << after.dump();
  for (const auto& n : after.nodes()) {
    bool any_activation = false;
    for (int v : n.inputs) any_activation |= v >= 0 && !after.value(v).is_compile_time();
    EXPECT_TRUE(any_activation) << "node " << n.op << " has only compile-time operands";
  }
  std::vector<float> in = {1.f, -1.f}, res(3);
  compiled.exe->run({in.data()}, {res.data()});
  for (int j = 0; j < 3; ++j) EXPECT_FLOAT_EQ(res[j], W[j * 2] - W[j * 2 + 1] + 2.f * j);
  // Folding again changes nothing (the pass reaches a fixpoint in one sweep).
  int again = -1;
  rewrite::fold_constants(after, [](const Graph&) -> std::vector<std::vector<uint8_t>> { ADD_FAILURE(); return {}; }, &again);
  EXPECT_EQ(again, 0);
}

// An empty graph output that passes a graph input through: PyTorch hands out null data pointers
// for empty tensors, and the pass-through copy must not call memcpy with them (UBSan caught it).
TEST(Executable, EmptyPassThroughOutputWithNullBuffers) {
  Graph g;
  int x = g.add_input({3, 0}, DType::Float32, "x");
  int y = g.add_input({2}, DType::Float32, "y");
  int r = g.add_node("relu", {y}, {{{2}, DType::Float32}});
  g.set_outputs({x, g.node(r).outputs[0]});
  Executable exe(g, ExecOptions{1});
  float in[2] = {-1.0f, 2.0f}, out[2] = {0, 0};
  exe.run({nullptr, in}, {nullptr, out});
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 2.0f);
}
