// Shared helpers for the CPU-kernel tests: replayable seed, random data, shape helpers, typed
// access to raw dtype buffers, magnitude-relative comparison, the ISA list to sweep, and a real
// multi-threaded Parallel so the kernels' work splitting is exercised (not only SerialParallel).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/parallel.h"

namespace dnnfusion::testing {

inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* s = std::getenv("DNNFUSION_TEST_SEED");
    return s && *s ? std::strtoull(s, nullptr, 10) : 20240531ull;
  }();
  return seed;
}

inline std::string seed_note() {
  return "replay with DNNFUSION_TEST_SEED=" + std::to_string(test_seed());
}

inline std::vector<float> random_vec(std::mt19937_64& rng, size_t n, float lo = -1.f,
                                     float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline int64_t rand_int(std::mt19937_64& rng, int64_t lo, int64_t hi) {  // inclusive
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// A random shape of rank 0..max_rank whose dims are drawn from `sizes`; a dim that would take the
// element count over `cap` becomes 1.
template <size_t N>
std::vector<int64_t> random_shape_from(std::mt19937_64& g, const int64_t (&sizes)[N], int max_rank,
                                       int64_t cap) {
  const int r = std::uniform_int_distribution<int>(0, max_rank)(g);
  std::vector<int64_t> s(r);
  int64_t n = 1;
  for (auto& x : s) {
    x = sizes[std::uniform_int_distribution<int>(0, static_cast<int>(N) - 1)(g)];
    if (n * x > cap) x = 1;
    n *= x;
  }
  return s;
}

inline int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (auto x : s) n *= x;
  return n;
}

inline std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (auto x : s) r += std::to_string(x) + ",";
  return r + "]";
}

// Element i of a raw buffer holding dtype t, read as / written from a double (Float16 and
// BFloat16 are not handled: read gives 0, write does nothing).
inline double read_value(const std::vector<char>& buf, DType t, int64_t i) {
  const char* p = buf.data() + i * dtype_size(t);
  switch (t) {
    case DType::Float32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::Float64: { double v; std::memcpy(&v, p, 8); return v; }
    case DType::Int64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case DType::Int32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::Bool: case DType::UInt8: return static_cast<uint8_t>(*p);
    case DType::Int8: return static_cast<int8_t>(*p);
    default: return 0;
  }
}

inline void write_value(std::vector<char>& buf, DType t, int64_t i, double v) {
  char* p = buf.data() + i * dtype_size(t);
  switch (t) {
    case DType::Float32: { float x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
    case DType::Float64: std::memcpy(p, &v, 8); break;
    case DType::Int64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); break; }
    case DType::Int32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
    case DType::Bool: *p = v != 0; break;
    case DType::UInt8: *p = static_cast<char>(static_cast<uint8_t>(static_cast<int64_t>(v))); break;
    case DType::Int8: *p = static_cast<char>(static_cast<int8_t>(static_cast<int64_t>(v))); break;
    default: break;
  }
}

// One value against its reference: |got-ref| <= atol + rtol*|ref|; NaN must match NaN; +-inf
// must match exactly.
inline bool values_close(double got, double ref, double rtol, double atol) {
  if (std::isnan(ref)) return std::isnan(got);
  if (std::isinf(ref)) return got == ref;
  return std::fabs(got - ref) <= atol + rtol * std::fabs(ref);
}

// |got-ref| <= rel * max|ref| + abs_tol everywhere; NaN must match NaN; +-inf must match exactly.
inline ::testing::AssertionResult all_close(const float* got, const float* ref, size_t n,
                                            float rel = 1e-4f, float abs_tol = 1e-5f) {
  float mag = 0.f;
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(ref[i])) mag = std::max(mag, std::fabs(ref[i]));
  const float tol = rel * mag + abs_tol;
  size_t bad = 0, first = n;
  for (size_t i = 0; i < n; ++i) {
    bool ok;
    if (std::isnan(ref[i])) {
      ok = std::isnan(got[i]);
    } else if (std::isinf(ref[i])) {
      ok = got[i] == ref[i];
    } else {
      ok = std::fabs(got[i] - ref[i]) <= tol;  // false for NaN got
    }
    if (!ok) {
      if (first == n) first = i;
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << n << " elements differ; first at " << first
                                       << ": got " << got[first] << " want " << ref[first]
                                       << " (tol " << tol << ")";
}

// Scalar and the best ISA always; the middle one when the CPU has it. Prints what it leaves out.
inline std::vector<kernels::Isa> isas_to_test() {
  using kernels::Isa;
  std::vector<Isa> out;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (kernels::isa_supported(isa)) {
      out.push_back(isa);
    } else {
      static std::once_flag once[3];
      std::call_once(once[static_cast<int>(isa)], [isa] {
        std::printf("[ note ] CPU lacks %s: its kernels are not tested on this machine\n",
                    kernels::isa_name(isa));
      });
    }
  }
  return out;
}

struct IsaGuard {
  explicit IsaGuard(kernels::Isa isa) { kernels::force_isa(isa); }
  ~IsaGuard() { kernels::reset_isa(); }
  IsaGuard(const IsaGuard&) = delete;
  IsaGuard& operator=(const IsaGuard&) = delete;
};

// A minimal thread-per-chunk Parallel: splits [0,n) into chunks of max(grain, ceil(n/threads))
// and runs each on its own std::thread; nested calls run serially, as the contract requires.
class ThreadParallel final : public kernels::Parallel {
 public:
  explicit ThreadParallel(int threads = 2) : threads_(threads) {}
  int num_threads() const override { return threads_; }
  void parallel_for(int64_t n, int64_t grain, const kernels::RangeFn& fn) const override {
    if (n <= 0) return;
    if (in_worker() || threads_ <= 1) {
      fn(0, n);
      return;
    }
    const int64_t chunk = std::max<int64_t>(std::max<int64_t>(grain, 1), (n + threads_ - 1) / threads_);
    std::vector<std::thread> workers;
    std::exception_ptr error;
    std::mutex mu;
    for (int64_t b = 0; b < n; b += chunk) {
      const int64_t e = std::min(n, b + chunk);
      workers.emplace_back([&, b, e] {
        in_worker() = true;
        try {
          fn(b, e);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!error) error = std::current_exception();
        }
      });
    }
    for (auto& t : workers) t.join();
    if (error) std::rethrow_exception(error);
  }

 private:
  static bool& in_worker() {
    thread_local bool flag = false;
    return flag;
  }
  int threads_;
};

// The two executions the randomized kernel tests alternate between.
inline const kernels::SerialParallel kSerial{};
inline const ThreadParallel kTwo{2};

// An epilogue hook for kernel tests: counts how often each output element is passed (an element
// must be passed exactly once), checks data == y + start, and maps each value v to 2v + 1 (the
// stored final value must be what the hook sees).
struct HookLog {
  std::unique_ptr<std::atomic<int>[]> calls;
  const float* y = nullptr;
  std::atomic<int> bad_pointer{0};
};

inline void count_hook(const void* ctx, float* data, int64_t start, int64_t count) {
  auto* log = static_cast<HookLog*>(const_cast<void*>(ctx));
  if (data != log->y + start) log->bad_pointer.fetch_add(1);
  for (int64_t i = 0; i < count; ++i) {
    log->calls[start + i].fetch_add(1);
    data[i] = 2.f * data[i] + 1.f;
  }
}

}  // namespace dnnfusion::testing
