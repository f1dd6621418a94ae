// Elementwise kernels (unary, binary, where) over N-d strided, broadcasting operands with
// PyTorch's dtype semantics.
//
// Preconditions: every StridedArg has one stride per output dimension (in ELEMENTS, 0 where the
// operand is broadcast), its data pointer already offset to the element at index 0; `out` is
// contiguous row-major of `shape` and does not partially overlap an input (full aliasing with an
// identically strided input of the same dtype, i.e. in place, is allowed). Supported dtypes:
// Float32, Float64, Int64, Int32, Bool (uint8 0/1), UInt8, Int8; Float16/BFloat16 throw.
// Postconditions: out holds op(inputs) converted to out_dtype; on an Error (bad argument,
// integer division by zero) out may be partially written.
//
// Conversion rules (same as torch): to Bool is `!= 0` (NaN is true); floating to integral
// truncates toward zero and wraps to the target width (values outside int64 are unspecified);
// integral to narrower integral wraps.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/parallel.h"

namespace dnnfusion::kernels {

enum class UnaryOp : int8_t {
  Identity,     // cast / copy
  Relu,
  Hardtanh,     // clamp(x, a, b)
  Clamp,        // a = min, b = max (pass +-inf for a missing bound); NaN passes through
  Hardswish,
  Hardsigmoid,
  Sigmoid,
  Silu,
  Gelu,         // erf form
  GeluTanh,
  Tanh,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Reciprocal,
  Neg,
  Abs,
  Erf,
  PowScalar,    // x ^ a
  LeakyRelu,    // slope a
  Elu,          // alpha a
  Softplus,     // beta a, threshold b
  Mish,
  LogicalNot,
  Sign,
  Square,
  Sin,
  Cos,
  Floor,
  Ceil,
  Round,        // half to even
};
struct UnaryAttrs {
  double a = 0, b = 0;
};

enum class BinaryOp : int8_t {
  Add,          // a + alpha * b
  Sub,          // a - alpha * b
  Mul,
  Div,          // true division (always in a floating type: compute_dtype if floating, else double)
  FloorDiv,
  Pow,
  Maximum,      // NaN propagates
  Minimum,      // NaN propagates
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  LogicalAnd,
  LogicalOr,
  BitwiseAnd,   // integral / bool compute dtypes only
  BitwiseOr,    // integral / bool compute dtypes only
  Remainder,    // python-style: result has the sign of the divisor
  Atan2,        // always in a floating type, like Div
};

struct StridedArg {
  const void* data;
  DType dtype;
  std::vector<int64_t> strides;  // over the OUTPUT shape, 0 where broadcast
};

// Unary op. Computes in out_dtype's floating type for floating outputs; for integral outputs the
// integral-preserving ops (Identity, Relu, Hardtanh, Clamp, Neg, Abs, Sign, Square, Floor, Ceil,
// Round, PowScalar with a non-negative integral exponent) compute in int64, the others in double.
// LogicalNot yields x == 0 converted to out_dtype.
void unary(UnaryOp op, const UnaryAttrs& at, const std::vector<int64_t>& shape, const StridedArg& x,
           void* out, DType out_dtype, const Parallel& par);

// Binary op: inputs converted to compute_dtype, op applied, result converted to out_dtype.
// Comparisons and logical ops produce a bool that is then converted to out_dtype. Integer
// FloorDiv / Remainder by zero throw Error. Bool compute dtype rejects Sub, FloorDiv, Remainder
// and Pow (like torch).
void binary(BinaryOp op, double alpha, const std::vector<int64_t>& shape, const StridedArg& a,
            const StridedArg& b, void* out, DType out_dtype, DType compute_dtype, const Parallel& par);

// out = cond ? a : b, with cond converted to bool and a, b converted to out_dtype.
void where(const std::vector<int64_t>& shape, const StridedArg& cond, const StridedArg& a,
           const StridedArg& b, void* out, DType out_dtype, const Parallel& par);

// exp for float written so GCC auto-vectorises loops calling it (no libm call, no branches):
// Cody-Waite reduction x = k*ln2 + r, Cephes degree-6 polynomial, 2^k applied in two halves so
// results in the denormal range are right. Within ~2 ulp of std::exp; exp(NaN) = NaN,
// exp(+inf) = inf, exp(-inf) = 0. Shared with softmax.
inline float exp_f32(float x) {
  const float hi = 88.72283935546875f, lo = -103.97208404541015625f;
  float xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  xc = xc == xc ? xc : 0.0f;  // keep the float->int conversion below in range for NaN input
  // Round-to-nearest via the 1.5*2^23 trick: SSE2 has no vector rint, and -O3 without
  // -ffast-math keeps the add/sub.
  const float magic = 12582912.0f;
  float kf = (xc * 1.44269504088896341f + magic) - magic;
  float r = xc - kf * 0.693359375f;
  r = r - kf * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int32_t k = static_cast<int32_t>(kf);
  int32_t k1 = k >> 1, k2 = k - k1;
  uint32_t b1 = static_cast<uint32_t>(k1 + 127) << 23, b2 = static_cast<uint32_t>(k2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  y = y * s1 * s2;
  y = x > hi ? __builtin_inff() : y;
  y = x < lo ? 0.0f : y;
  return x != x ? x : y;
}

}  // namespace dnnfusion::kernels
