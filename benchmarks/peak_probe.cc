// Measures this machine's roofline: fp32 FMA peak (GFLOP/s) and STREAM-triad memory bandwidth (GB/s)
// with N threads. Built at run time by benchmarks/compare.py with `c++ -O3 -march=native`, so the
// vector width below is the machine's own. Prints one JSON object on stdout.
//
//   peak_probe THREADS [ARRAY_MIB]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: peak_probe THREADS [ARRAY_MIB]\n");
    return 2;
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
  std::printf(
      "{\"threads\": %d, \"isa\": \"%s\", \"vector_lanes\": %d, \"accumulators\": %d, "
      "\"fma_peak_gflops\": %.1f, \"triad_gbs\": %.2f, \"triad_array_mib\": %ld, \"l3_mib\": %ld}\n",
      threads, kIsa, kLanes, kAcc, flops, bw, array_bytes >> 20, l3 >> 20);
  return 0;
}
