// Internal to the kernel drivers (gemm.cc, conv_nchwc.cc; baseline code only, never an ISA file):
// which cache lines of a region a micro-kernel call should prefetch while it computes. A region
// (the next weight block) is split into `parts` equal shares, one per call that runs before it is
// needed; share `part` is [lo, hi) rounded down to whole 64-byte lines.
#pragma once
#include <cstdint>

namespace dnnfusion::kernels {

struct PrefetchShare {
  const char* first = nullptr;  // first line of the share
  int64_t lines = 0;
};

inline PrefetchShare prefetch_share(const void* region, int64_t bytes, int64_t part, int64_t parts) {
  const int64_t lo = bytes * part / parts / 64 * 64, hi = bytes * (part + 1) / parts / 64 * 64;
  return {static_cast<const char*>(region) + lo, (hi - lo) / 64};
}

}  // namespace dnnfusion::kernels
