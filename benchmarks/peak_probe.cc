// Measures this machine's roofline: fp32 FMA peak (GFLOP/s) and STREAM-triad memory bandwidth (GB/s)
// with N threads, and the round trip of a cache line between the first two CPUs the process may use
// (core_to_core_ns). Built at run time by benchmarks/compare.py with `c++ -O3 -march=native`, so the
// vector width below is the machine's own. Prints one JSON object on stdout.
//
//   peak_probe THREADS [ARRAY_MIB]
//   peak_probe --latency          (core_to_core_ns only, in about 0.2 s)
//
// Why the round trip: on a virtual machine the host may place the two vCPUs on cores that share a
// last-level cache (~50 ns on an AMD EPYC Zen 4 guest) or on cores that do not (~330 ns there), and
// move them between the two while a benchmark runs. Multi-threaded inference is 1.1-1.8x slower per
// kernel in the second placement, for every engine; the figure says which one a table was taken in.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include <pthread.h>
#include <sched.h>
#include <vector>

#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

// Independent accumulators per thread: an FMA unit only reaches its throughput when latency x ports
// FMAs are in flight (4 x 2 on current x86 cores); twice that hides scheduling jitter. AVX2 has only
// 16 vector registers, so it keeps 12 (2 registers hold the multiplier and addend).
#if defined(__AVX512F__)
constexpr int kLanes = 16;
constexpr int kAcc = 24;
using Vec = __m512;
inline Vec vset(float x) { return _mm512_set1_ps(x); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float vsum(Vec v) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  float s = 0;
  for (float x : t) s += x;
  return s;
}
const char* kIsa = "avx512";
#elif defined(__FMA__)
constexpr int kLanes = 8;
constexpr int kAcc = 12;
using Vec = __m256;
inline Vec vset(float x) { return _mm256_set1_ps(x); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float vsum(Vec v) {
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  float s = 0;
  for (float x : t) s += x;
  return s;
}
const char* kIsa = "avx2-fma";
#else
// No FMA instructions: GCC vector extensions, whose multiply-add the compiler contracts where it can.
constexpr int kLanes = 4;
constexpr int kAcc = 8;
typedef float Vec __attribute__((vector_size(16)));
inline Vec vset(float x) { return Vec{x, x, x, x}; }
inline Vec vfma(Vec a, Vec b, Vec c) { return a * b + c; }
inline float vsum(Vec v) { return v[0] + v[1] + v[2] + v[3]; }
const char* kIsa = "generic-128";
#endif

// Starts all threads together and returns the wall time from the common start to the last finish,
// so the figure is the machine's aggregate rate, not the fastest thread's.
template <class Body>
double run_parallel(int threads, Body body) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      body(t);
    });
  }
  while (ready.load() != threads) {
  }
  auto t0 = Clock::now();
  go.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

volatile float g_sink;

double fma_gflops(int threads, long iters, int reps) {
  std::vector<float> partial(threads);
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    double s = run_parallel(threads, [&](int t) {
      Vec acc[kAcc];
      for (int i = 0; i < kAcc; ++i) acc[i] = vset(1.0f + 0.001f * i + 0.01f * t);
      // acc = acc * m + a converges to a / (1 - m): the values stay finite and normal forever.
      const Vec m = vset(0.999999f), a = vset(1e-6f);
      for (long k = 0; k < iters; ++k) {
#pragma GCC unroll 32
        for (int i = 0; i < kAcc; ++i) acc[i] = vfma(acc[i], m, a);
      }
      float sum = 0;
      for (int i = 0; i < kAcc; ++i) sum += vsum(acc[i]);
      partial[t] = sum;
    });
    float total = 0;
    for (float p : partial) total += p;
    g_sink = total;
    best = std::max(best, 2.0 * kLanes * kAcc * double(iters) * threads / s / 1e9);
  }
  return best;
}

long l3_bytes() {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index3/size");
  std::string s;
  if (f >> s && !s.empty()) {
    long v = std::atol(s.c_str());
    char unit = s.back();
    if (unit == 'K') v <<= 10;
    if (unit == 'M') v <<= 20;
    if (v > 0) return v;
  }
  return 32L << 20;
}

// STREAM triad a = b + s * c on doubles; 24 bytes per element counted (two reads, one write; the
// write-allocate read is not counted), as STREAM reports it.
double triad_gbs(int threads, long n, int reps) {
  double* a = static_cast<double*>(std::aligned_alloc(64, n * sizeof(double)));
  double* b = static_cast<double*>(std::aligned_alloc(64, n * sizeof(double)));
  double* c = static_cast<double*>(std::aligned_alloc(64, n * sizeof(double)));
  if (!a || !b || !c) {
    std::fprintf(stderr, "peak_probe: cannot allocate 3 x %ld doubles\n", n);
    std::exit(2);
  }
  auto range = [&](int t, long& lo, long& hi) {
    long chunk = (n + threads - 1) / threads;
    lo = std::min(n, t * chunk);
    hi = std::min(n, lo + chunk);
  };
  // Each thread first-touches the pages it later streams, so they live on its memory node.
  run_parallel(threads, [&](int t) {
    long lo, hi;
    range(t, lo, hi);
    for (long i = lo; i < hi; ++i) a[i] = 0.0, b[i] = 1.0, c[i] = 2.0;
  });
  const double scalar = 3.0;
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    double s = run_parallel(threads, [&](int t) {
      long lo, hi;
      range(t, lo, hi);
      for (long i = lo; i < hi; ++i) a[i] = b[i] + scalar * c[i];
    });
    best = std::max(best, 24.0 * double(n) / s / 1e9);
  }
  g_sink = float(a[n / 2]);
  std::free(a);
  std::free(b);
  std::free(c);
  return best;
}

// Pins the calling thread to `cpu`; false when the process may not run there.
bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// Median round trip (ns) of a counter bounced between two threads pinned to the first two allowed
// CPUs, over `windows` windows of ~20 ms; -1 with fewer than two CPUs.
double core_to_core_ns(int windows) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return -1;
  int cpus[2], found = 0;
  for (int c = 0; c < CPU_SETSIZE && found < 2; ++c)
    if (CPU_ISSET(c, &allowed)) cpus[found++] = c;
  if (found < 2) return -1;
  alignas(64) static std::atomic<long> ball{0};
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    pin_to(cpus[1]);
    while (!stop.load(std::memory_order_relaxed)) {
      long v = ball.load(std::memory_order_acquire);
      if (v & 1) ball.store(v + 1, std::memory_order_release);
    }
  });
  pin_to(cpus[0]);
  std::vector<double> ns;
  for (int w = 0; w < windows; ++w) {
    const auto t0 = Clock::now();
    long trips = 0;
    while (Clock::now() - t0 < std::chrono::milliseconds(20)) {
      for (int i = 0; i < 200; ++i, ++trips) {
        const long v = ball.load(std::memory_order_relaxed) + 1;
        ball.store(v, std::memory_order_release);
        while (ball.load(std::memory_order_acquire) == v) {
        }
      }
    }
    ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / double(trips));
  }
  stop.store(true);
  echo.join();
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: peak_probe THREADS [ARRAY_MIB] | peak_probe --latency\n");
    return 2;
  }
  if (std::strcmp(argv[1], "--latency") == 0) {
    std::printf("{\"core_to_core_ns\": %.0f}\n", core_to_core_ns(9));
    return 0;
  }
  int threads = std::atoi(argv[1]);
  if (threads < 1 || threads > 1024) {
    std::fprintf(stderr, "peak_probe: THREADS must be in 1..1024, got %s\n", argv[1]);
    return 2;
  }
  long l3 = l3_bytes();
  // Each array 8x the last-level cache (at least 256 MiB), so the triad streams from DRAM.
  long array_bytes = std::max(8 * l3, 256L << 20);
  if (argc == 3) {
    long mib = std::atol(argv[2]);
    if (mib < 1) {
      std::fprintf(stderr, "peak_probe: ARRAY_MIB must be a positive integer, got %s\n", argv[2]);
      return 2;
    }
    array_bytes = mib << 20;
  }
  double flops = fma_gflops(threads, 200000000L / kAcc, 7);
  double bw = triad_gbs(threads, array_bytes / long(sizeof(double)), 10);
  double c2c = core_to_core_ns(9);
  std::printf(
      "{\"threads\": %d, \"isa\": \"%s\", \"vector_lanes\": %d, \"accumulators\": %d, "
      "\"fma_peak_gflops\": %.1f, \"triad_gbs\": %.2f, \"triad_array_mib\": %ld, \"l3_mib\": %ld, "
      "\"core_to_core_ns\": %.0f}\n",
      threads, kIsa, kLanes, kAcc, flops, bw, array_bytes >> 20, l3 >> 20, c2c);
  return 0;
}
