// The only thing kernels know about threading: something that splits a range over workers.
// The runtime's thread pool implements it; tests may use SerialParallel. Kernels stay free of
// the ECG and of the runtime.
#pragma once
#include <cstdint>
#include <functional>

namespace dnnfusion::kernels {

using RangeFn = std::function<void(int64_t begin, int64_t end)>;

struct Parallel {
  virtual ~Parallel() = default;
  virtual int num_threads() const = 0;
  // Calls fn on disjoint [begin, end) chunks that cover [0, n) exactly once, each chunk at least
  // `grain` long except possibly the last. Returns when all chunks are done. If fn throws, the
  // first exception is rethrown on the calling thread after the others finished. A call made from
  // inside fn runs serially on the calling worker (no nested parallelism).
  virtual void parallel_for(int64_t n, int64_t grain, const RangeFn& fn) const = 0;
};

// Runs everything on the calling thread: for tests and for nested use.
struct SerialParallel final : Parallel {
  int num_threads() const override { return 1; }
  void parallel_for(int64_t n, int64_t /*grain*/, const RangeFn& fn) const override {
    if (n > 0) fn(0, n);
  }
};

}  // namespace dnnfusion::kernels
