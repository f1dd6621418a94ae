// The arithmetic of a convolution's attributes that every layer needs alike — the ECG's FLOP
// model, the kernels' problem shapes, the targets' layout passes — so it is written once.
#pragma once
#include <cstdint>
#include <vector>

namespace dnnfusion {

// An ATen int[] attribute's element i: v[i]; v[0] when the list is shorter (ATen's single-value
// lists, stride=2 for 2x2); `dflt` when it is empty.
inline int64_t at_or(const std::vector<int64_t>& v, size_t i, int64_t dflt) {
  if (v.empty()) return dflt;
  return i < v.size() ? v[i] : v[0];
}

// Output size of a convolution or pooling dim: floor((in + 2 pad - dil (k - 1) - 1) / stride) + 1,
// and 0 when the dilated kernel exceeds the padded input (where C++'s truncating division would
// wrongly give 1). stride must be >= 1.
inline int64_t conv_out_size(int64_t in, int64_t pad, int64_t dil, int64_t k, int64_t stride) {
  const int64_t span = in + 2 * pad - dil * (k - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

}  // namespace dnnfusion
