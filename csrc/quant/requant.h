// Requantization: the one integer rule that turns an int32 accumulator into an int8 output, used
// identically by the quantizer (csrc/quant), the accelerator's bit-exact model and its OpenCL
// datapath (csrc/target/fpga), and the numpy references of the tests.
//
// The rule. A real scale s > 0 (input scale x weight scale / output scale) is represented as an
// integer multiplier M in [0, 2^31) and a right shift `shift` in [0, 31] with s ~= M / 2^shift.
//   p = int64(acc) * M                                   (exact: |p| < 2^62)
//   r = shift == 0 ? p : (p + 2^(shift-1)) >> shift      (arithmetic shift: rounds half toward +inf)
//   y = clamp(r, lo, hi)                                 (saturation; lo/hi from the activation)
// Activation bounds: none -> [-128, 127]; ReLU -> [0, 127]; ReLU6 -> [0, min(127, q6)] where q6 is
// 6 expressed in the output's quantized units (relu6_bound).
//
// choose_multiplier picks the largest shift <= 31 whose M = round(s * 2^shift) stays below 2^31, so
// M keeps as many significant bits as the 31-bit field allows. Precondition: s finite and
// 0 < s < 2^31. Postcondition: |M / 2^shift - s| <= 2^-(shift+1), and M == 0 only when s < 2^-32.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/error.h"

namespace dnnfusion::quant {

struct Requant {
  int32_t multiplier = 0;  // M, in [0, 2^31)
  int32_t shift = 0;       // in [0, 31]
};

inline Requant choose_multiplier(double scale) {
  if (!(scale > 0) || !std::isfinite(scale) || scale >= 2147483648.0)
    throw InvalidInput("requantization scale must be finite and in (0, 2^31), got " + std::to_string(scale));
  for (int shift = 31; shift >= 0; --shift) {
    double m = std::nearbyint(std::ldexp(scale, shift));  // round half to even on ties: only the pick, not the rule
    if (m < 2147483648.0) return Requant{static_cast<int32_t>(m), shift};
  }
  return Requant{static_cast<int32_t>(std::nearbyint(scale)), 0};  // unreachable for scale < 2^31
}

inline int32_t requantize(int32_t acc, Requant q, int32_t lo = -128, int32_t hi = 127) {
  int64_t p = static_cast<int64_t>(acc) * q.multiplier;
  if (q.shift > 0) p = (p + (int64_t{1} << (q.shift - 1))) >> q.shift;
  return static_cast<int32_t>(std::clamp<int64_t>(p, lo, hi));
}

// 6.0 in output units of scale `out_scale`, rounded half up and capped at 127 (the ReLU6 bound).
inline int32_t relu6_bound(double out_scale) {
  double q = std::floor(6.0 / out_scale + 0.5);
  return static_cast<int32_t>(std::min(127.0, q));
}

}  // namespace dnnfusion::quant
