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

// Whole zmm registers: GCC vectorizes a portable loop only at 256 bits and with a true division;
// here exp's 2^k is one scalef and 1 / (1 + e) a reciprocal estimate plus one Newton step.
// exp(-x) uses the generated code's range reduction and polynomial (codegen/expr_rules.cc).
// GCC 12 reports the unmasked forms of roundscale, scalef and rcp14 as reading an uninitialized
// register (their headers pass _mm512_undefined_ps as the unused merge source): a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__m512 silu16(__m512 x) {
  // Compare-and-select clamps (NaN stays NaN); GCC 12 warns falsely on _mm512_min_ps/_max_ps.
  const __m512 lo = _mm512_set1_ps(-87.f), hi = _mm512_set1_ps(87.f);
  __m512 t = -x;
  t = t < lo ? lo : t;
  t = t > hi ? hi : t;
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), t);
  r = _mm512_fmadd_ps(k, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 q = _mm512_set1_ps(1.9875691500e-4f);
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.3981999507e-3f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(8.3334519073e-3f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(4.1665795894e-2f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.6666665459e-1f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(5.0000001201e-1f));
  q = _mm512_fmadd_ps(_mm512_mul_ps(q, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  const __m512 d = _mm512_add_ps(_mm512_scalef_ps(q, k), _mm512_set1_ps(1.f));  // 1 + exp(-x)
  __m512 inv = _mm512_rcp14_ps(d);
  inv = _mm512_mul_ps(inv, _mm512_fnmadd_ps(d, inv, _mm512_set1_ps(2.f)));
  const __m512 y = _mm512_mul_ps(x, inv);
  // exp(-x) = inf for -x > 87, as the generated code's dnnf_exp_clamped: x / inf (-0, or NaN for -inf).
  const __mmask16 big = _mm512_cmp_ps_mask(-x, _mm512_set1_ps(87.f), _CMP_GT_OQ);
  return _mm512_mask_mul_ps(y, big, x, _mm512_setzero_ps());
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

void activate_inplace_avx512(float* p, int64_t n, int mode) {
  if (mode == 0) activate_rows<&hardswish16>(p, n);
  else activate_rows<&silu16>(p, n);
}

}  // namespace dnnfusion::kernels::nchwc_detail
