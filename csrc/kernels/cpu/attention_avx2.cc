// AVX2 row softmax for sdpa (see attention_rows.h): the three passes of the AVX-512 version (max
// with a NaN check; exp and sum; scale), 8 lanes at a time. Without mask registers the tail is one
// load padded with -inf (exp gives 0 there) and a maskstore. The portable loop in attention.cc is
// compiled for baseline x86-64 (SSE, a call-free exp it cannot vectorize past 4 lanes).
#include <immintrin.h>

#include <math.h>

#include "kernels/cpu/attention_rows.h"

namespace dnnfusion::kernels::attention_detail {
namespace {

// exp(x) for x <= 0, the Cephes-style polynomial of the portable exp_nonpositive in attention.cc
// (max relative error ~1e-7); x < -87.3 gives +0.
inline __m256 exp_nonpositive8(__m256 x) {
  const __m256 xc = _mm256_max_ps(_mm256_set1_ps(-88.f), x);
  // round(x * log2 e) lands in the low mantissa bits of `shifted`.
  const __m256 magic = _mm256_set1_ps(12582912.f);
  const __m256 shifted = _mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f), magic);
  const __m256 fn = _mm256_sub_ps(shifted, magic);
  const __m256 r = _mm256_fmadd_ps(fn, _mm256_set1_ps(2.12194440e-4f),
                                   _mm256_fnmadd_ps(fn, _mm256_set1_ps(0.693359375f), xc));
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(_mm256_mul_ps(y, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  // 2^n from the exponent bits: n >= -127 after the clamp, so n + 127 >= 0.
  const __m256i n = _mm256_sub_epi32(_mm256_castps_si256(shifted), _mm256_set1_epi32(0x4B400000));
  const __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
  const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654475f), _CMP_GE_OQ);
  return _mm256_and_ps(keep, _mm256_mul_ps(y, scale));
}

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// All-ones in the first rem lanes (0 < rem < 8).
inline __m256i tail_mask(int64_t rem) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rem)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline void store_all(float* s, int64_t n8, int64_t rem, __m256i tm, __m256 v) {
  for (int64_t j = 0; j < n8; j += 8) _mm256_storeu_ps(s + j, v);
  if (rem) _mm256_maskstore_ps(s + n8, tm, v);
}

}  // namespace

float softmax_row_avx2(float* s, int64_t n, bool want_lse) {
  // Builtins and C's logf rather than std:: helpers: see attention_rows.h.
  const float kNegInf = -__builtin_inff(), kNaN = __builtin_nanf("");
  const __m256 neg_inf = _mm256_set1_ps(kNegInf);
  const int64_t n8 = n / 8 * 8, rem = n - n8;
  const __m256i tm = tail_mask(rem);
  // The tail loaded with -inf in the lanes past n: neutral for max, exp(-inf - max) = 0 for sum.
  const __m256 tail = rem ? _mm256_blendv_ps(neg_inf, _mm256_maskload_ps(s + n8, tm), _mm256_castsi256_ps(tm)) : neg_inf;
  __m256 vmax = tail, nan = _mm256_cmp_ps(tail, tail, _CMP_UNORD_Q);
  for (int64_t j = 0; j < n8; j += 8) {
    const __m256 x = _mm256_loadu_ps(s + j);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    vmax = _mm256_max_ps(vmax, x);
  }
  if (_mm256_movemask_ps(nan)) {
    store_all(s, n8, rem, tm, _mm256_set1_ps(kNaN));
    return kNaN;
  }
  const float mx = hmax(vmax);
  if (mx == kNegInf) {
    store_all(s, n8, rem, tm, _mm256_setzero_ps());
    return kNegInf;
  }
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 vsum = _mm256_setzero_ps();
  for (int64_t j = 0; j < n8; j += 8) {
    const __m256 e = exp_nonpositive8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmx));
    _mm256_storeu_ps(s + j, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  const __m256 te = exp_nonpositive8(_mm256_sub_ps(tail, vmx));
  vsum = _mm256_add_ps(vsum, te);
  const float sum = hsum(vsum);
  const __m256 inv = _mm256_set1_ps(1.f / sum);
  for (int64_t j = 0; j < n8; j += 8) _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), inv));
  if (rem) _mm256_maskstore_ps(s + n8, tm, _mm256_mul_ps(te, inv));
  return want_lse ? mx + logf(sum) : 0.f;
}

}  // namespace dnnfusion::kernels::attention_detail
