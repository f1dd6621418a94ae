// AVX-512 row softmax for sdpa (see attention_rows.h): three passes over a row that stays in L1
// (max with a NaN check; exp and sum; scale), 16 lanes at a time with masked tails. The portable
// loop in attention.cc is compiled for baseline x86-64 and ran at ~1.3 ns per score, a quarter
// of bert-base's attention time.
#include <immintrin.h>

#include <math.h>

#include "kernels/cpu/attention_rows.h"

namespace dnnfusion::kernels::attention_detail {
namespace {

// exp(x) for x <= 0 (after the max is subtracted), the same Cephes-style polynomial as the
// portable exp_nonpositive in attention.cc (max relative error ~1e-7); x < -87.3 gives +0.
typedef int32_t I32x16 __attribute__((vector_size(64)));

inline __m512 exp_nonpositive(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-88.f);
  const __m512 xc = x < lo ? lo : x;
  // round(x * log2 e) lands in the low mantissa bits of `shifted`.
  const __m512 magic = _mm512_set1_ps(12582912.f);
  const __m512 shifted = _mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), magic);
  const __m512 fn = _mm512_sub_ps(shifted, magic);
  const __m512 r = _mm512_fmadd_ps(fn, _mm512_set1_ps(2.12194440e-4f),
                                   _mm512_fnmadd_ps(fn, _mm512_set1_ps(0.693359375f), xc));
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(_mm512_mul_ps(y, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  // 2^n from the exponent bits: n >= -127 after the clamp, so n + 127 >= 0.
  const I32x16 n = reinterpret_cast<I32x16>(shifted) - 0x4B400000;
  const __m512 scale = reinterpret_cast<__m512>((n + 127) << 23);
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654475f), _CMP_LT_OQ);
  return _mm512_maskz_mul_ps(static_cast<__mmask16>(~tiny), y, scale);
}

// GCC 12's _mm512_reduce_* read an uninitialized temporary inside the header
// (-Wmaybe-uninitialized, a false alarm: the lanes it fills are the ones it returns).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
inline float hmax(__m512 v) { return _mm512_reduce_max_ps(v); }
inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }
#pragma GCC diagnostic pop
inline __mmask16 tail_mask(int64_t rem) { return static_cast<__mmask16>((1u << rem) - 1u); }

}  // namespace

float softmax_row_avx512(float* s, int64_t n, bool want_lse) {
  // Builtins and C's logf rather than std:: helpers: see attention_rows.h.
  const float kNegInf = -__builtin_inff(), kNaN = __builtin_nanf("");
  const __m512 neg_inf = _mm512_set1_ps(kNegInf);
  const int64_t n16 = n / 16 * 16;
  const __mmask16 tm = tail_mask(n - n16);
  __m512 vmax = neg_inf;
  __mmask16 nan = 0;
  for (int64_t j = 0; j < n16; j += 16) {
    const __m512 x = _mm512_loadu_ps(s + j);
    nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    vmax = x > vmax ? x : vmax;
  }
  if (tm) {
    const __m512 x = _mm512_mask_loadu_ps(neg_inf, tm, s + n16);
    nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    vmax = x > vmax ? x : vmax;
  }
  if (nan) {
    const __m512 q = _mm512_set1_ps(kNaN);
    for (int64_t j = 0; j < n16; j += 16) _mm512_storeu_ps(s + j, q);
    if (tm) _mm512_mask_storeu_ps(s + n16, tm, q);
    return kNaN;
  }
  const float mx = hmax(vmax);
  if (mx == kNegInf) {
    for (int64_t j = 0; j < n16; j += 16) _mm512_storeu_ps(s + j, _mm512_setzero_ps());
    if (tm) _mm512_mask_storeu_ps(s + n16, tm, _mm512_setzero_ps());
    return kNegInf;
  }
  const __m512 vmx = _mm512_set1_ps(mx);
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n16; j += 16) {
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(s + j), vmx));
    _mm512_storeu_ps(s + j, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  if (tm) {
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_mask_loadu_ps(neg_inf, tm, s + n16), vmx));
    _mm512_mask_storeu_ps(s + n16, tm, e);
    vsum = _mm512_add_ps(vsum, e);  // masked-off lanes are exp(-inf) = 0
  }
  const float sum = hsum(vsum);
  const __m512 inv = _mm512_set1_ps(1.f / sum);
  for (int64_t j = 0; j < n16; j += 16) _mm512_storeu_ps(s + j, _mm512_mul_ps(_mm512_loadu_ps(s + j), inv));
  if (tm) _mm512_mask_storeu_ps(s + n16, tm, _mm512_mul_ps(_mm512_maskz_loadu_ps(tm, s + n16), inv));
  return want_lse ? mx + logf(sum) : 0.f;  // a logf per row was ~1.5% of attention
}

}  // namespace dnnfusion::kernels::attention_detail
