// AVX-512 tiles of the NCHW[x]c convolution family: oc_bn = 16 (one zmm per position, up to 28
// positions: 28 accumulators + 1 weight vector of the 32 zmm; the broadcast is folded into the FMA's
// memory operand), 32 (two zmm, up to 14 positions), 64 (four zmm, up to 7 positions: 28
// accumulators + 4 weight vectors) and 8 (one ymm, 32 ymm with AVX-512VL, up to 28 positions). Compiled with -mavx512*; only reached through the getters below when cpu_features
// says the CPU has AVX-512 (see conv_nchwc_ukernel.h for why the ops live in an anonymous namespace).
#include <immintrin.h>

#include "kernels/cpu/conv_nchwc_tile.h"

namespace dnnfusion::kernels::nchwc_detail {
namespace {

struct Zmm {
  using V = __m512;
  static constexpr int L = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V bcast(float s) { return _mm512_set1_ps(s); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  // Compare-and-select keeps NaN (NaN < 0 and NaN > 6 are both false).
  static V relu(V v) {
    const V z = zero();
    return v < z ? z : v;
  }
  static V relu6(V v) {
    const V six = _mm512_set1_ps(6.f);
    v = relu(v);
    return v > six ? six : v;
  }
};

struct Ymm {
  using V = __m256;
  static constexpr int L = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V bcast(float s) { return _mm256_set1_ps(s); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V relu(V v) {
    const V z = zero();
    return v < z ? z : v;
  }
  static V relu6(V v) {
    const V six = _mm256_set1_ps(6.f);
    v = relu(v);
    return v > six ? six : v;
  }
};

}  // namespace

NchwcTileFn conv_tile_avx512(int oc_bn, int rn, bool k1, bool unroll) {
  switch (oc_bn) {
    case 8: return pick_conv_any<Ymm, 1, 28>(rn, k1, unroll);
    case 16: return pick_conv_any<Zmm, 1, 28>(rn, k1, unroll);
    case 32: return pick_conv_any<Zmm, 2, 14>(rn, k1, unroll);
    case 64: return pick_conv_any<Zmm, 4, 7>(rn, k1, unroll);
    default: return nullptr;
  }
}

NchwcTileFn conv_tile_rows2_avx512(int oc_bn, int h) {
  switch (oc_bn) {
    case 8: return pick_conv_tile_rows2<Ymm, 1, 14>(h);
    case 16: return pick_conv_tile_rows2<Zmm, 1, 14>(h);
    case 32: return pick_conv_tile_rows2<Zmm, 2, 7>(h);
    default: return nullptr;  // 64: 7 positions at most, one row
  }
}

NchwcTileFn conv_tile_half_avx512(int rn, bool k1, bool unroll) { return pick_conv_any<Zmm, 1, 14, 32>(rn, k1, unroll); }
NchwcTileFn dw_tile_half_avx512(int rn) { return pick_dw_tile<Zmm, 1, 14, 32>(rn); }
NchwcTileFn dw_tile_avx512(int c_bn, int rn) {
  switch (c_bn) {
    case 8: return pick_dw_tile<Ymm, 1, 28>(rn);
    case 16: return pick_dw_tile<Zmm, 1, 28>(rn);
    case 32: return pick_dw_tile<Zmm, 2, 14>(rn);
    case 64: return pick_dw_tile<Zmm, 4, 7>(rn);
    default: return nullptr;
  }
}

namespace {

// Whole zmm registers: the generated code's exp (target/cpu/codegen/prelude.cc) needs a two-step
// range reduction; here 2^n is one scalef, and x / (1 + e) one vdivps (15 instructions per 16
// floats). The division measured faster than a reciprocal estimate plus a Newton step, which
// adds three multiplies to the FMA ports the polynomial already fills (Zen 5, 8K floats in L1,
// 1 thread: 0.136 -> 0.109 ns per float), and it is exact.
// GCC 12 reports the unmasked forms of min, max, roundscale, scalef and rcp14 as reading an
// uninitialized register (their headers pass _mm512_undefined_ps as the merge source): false.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__m512 silu16(__m512 x) {
  // exp(-x) = 2^y, y = -x log2 e = n + f (n integer, |f| <= 1/2): 2^f by a degree-5 minimax
  // polynomial (relative error 7.5e-8), 2^n by scalef. y is clamped to [-126, 126] so 1 + 2^y
  // and its reciprocal stay finite (min/max return the second operand for NaN: NaN propagates).
  __m512 y = _mm512_mul_ps(x, _mm512_set1_ps(-1.44269504088896341f));
  y = _mm512_min_ps(_mm512_set1_ps(126.f), y);
  y = _mm512_max_ps(_mm512_set1_ps(-126.f), y);
  const __m512 n = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(y, n);
  __m512 p = _mm512_set1_ps(1.327647129073739e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.675540961325169e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550713092088699e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022120237350464e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931469440460205e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000001192092896f));
  const __m512 d = _mm512_add_ps(_mm512_scalef_ps(p, n), _mm512_set1_ps(1.f));  // 1 + exp(-x)
  const __m512 out = _mm512_div_ps(x, d);
  // Below -87, exp(-x) is inf in float (the generated code's dnnf_exp_clamped): x / inf is -0,
  // and NaN for x = -inf, as in PyTorch.
  const __mmask16 big = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.f), _CMP_LT_OQ);
  return _mm512_mask_mul_ps(out, big, x, _mm512_setzero_ps());
}
#pragma GCC diagnostic pop

__m512 hardswish16(__m512 x) {
  const __m512 zero = _mm512_setzero_ps(), six = _mm512_set1_ps(6.f);
  __m512 v = _mm512_add_ps(x, _mm512_set1_ps(3.f));
  v = v < zero ? zero : v;
  v = v > six ? six : v;
  return _mm512_mul_ps(_mm512_mul_ps(x, v), _mm512_set1_ps(1.f / 6.f));
}

template <__m512 (*F)(__m512)>
void activate_rows(float* p, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(p + i, F(_mm512_loadu_ps(p + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(p + i, m, F(_mm512_maskz_loadu_ps(m, p + i)));
  }
}

}  // namespace

void row_channel_sums_avx512(const float* row, int64_t positions, int64_t b, float* sums) {
  row_channel_sums<Zmm>(row, positions, b, sums);
}

void activate_inplace_avx512(float* p, int64_t n, int mode) {
  if (mode == 0) activate_rows<&hardswish16>(p, n);
  else activate_rows<&silu16>(p, n);
}

}  // namespace dnnfusion::kernels::nchwc_detail
