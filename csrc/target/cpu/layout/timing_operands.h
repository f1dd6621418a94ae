// Operands for the compile-time timings of the CPU layout passes (choose_conv_schemes' tuning,
// measure_amx's AMX-or-fp32 choice): fills a buffer with repeatable values in [-1, 1).
// Why not a library distribution: a batch-8 conv input has millions of values, which xorshift
// fills in milliseconds where std::uniform_real_distribution over mt19937 takes tens of them, and
// the kernels' speed does not depend on the values (none is inf or NaN, which would send the AMX
// kernel down its plain-fp32 rows).
// Precondition: p holds n floats (n >= 0). Postcondition: p[0..n) set; the same seed gives the
// same values.
#pragma once
#include <cstdint>

namespace dnnfusion::layout {

inline void fill_timing_operand(float* p, int64_t n, uint32_t seed) {
  uint32_t h = 0x9E3779B9u * (seed + 1);
  for (int64_t i = 0; i < n; ++i) {
    h ^= h << 13;
    h ^= h >> 17;
    h ^= h << 5;
    p[i] = static_cast<float>(static_cast<int32_t>(h)) * (1.f / 2147483648.f);
  }
}

}  // namespace dnnfusion::layout
